//! Keeping the index true to the keyspace.

pub mod backfill;
pub mod cluster;
pub mod deleted;
pub mod idle;
pub mod replication;
