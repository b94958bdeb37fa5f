//! Serving scans from snapshots.

pub mod collection;
pub mod hscan;
pub mod keyspace;
pub mod sscan;
pub mod zscan;
