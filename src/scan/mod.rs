//! Serving scans from snapshots: SNAPSHOT.SCAN over the index
//! ([`keyspace`]), and SNAPSHOT.HSCAN/SSCAN/ZSCAN over collection copies
//! ([`collection`], one machinery for the three, and their entries
//! [`hscan`], [`sscan`], [`zscan`]).
//!
//! Owns: the scan cursors' serving and the collection copies in flight.
//! May touch: the module state, the keyspace subsystems (to settle the
//! index, rebuild it after an idle drop, read the cluster view, follow the
//! event loop's turns for scripts' clock), the
//! runtime, the server layer and the core.

pub mod collection;
pub mod hscan;
pub mod keyspace;
pub mod sscan;
pub mod zscan;
