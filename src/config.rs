//! Module configuration (`snapshot.*`), settable from `loadmodule`
//! arguments, the config file (`include module.conf`) and `CONFIG SET`.
//!
//! Values live in atomics: worker threads read them without any lock.

use redis_module::configuration::ConfigurationContext;
use std::sync::atomic::{AtomicI64, Ordering};

/// `snapshot.workers`: threads serving scans.
pub static WORKERS: AtomicI64 = AtomicI64::new(2);
/// `snapshot.worker-nice`: scheduling niceness of worker threads (0-19; 19 = yield to everything).
pub static WORKER_NICE: AtomicI64 = AtomicI64::new(19);
/// `snapshot.cursor-idle-timeout`: seconds an unused cursor stays valid.
pub static IDLE_TIMEOUT: AtomicI64 = AtomicI64::new(60);
/// `snapshot.max-open-cursors`: open iterations kept at most.
pub static MAX_OPEN: AtomicI64 = AtomicI64::new(1024);
/// `snapshot.scan-budget`: index entries one call may examine at most.
pub static SCAN_BUDGET: AtomicI64 = AtomicI64::new(100_000);
/// `snapshot.inline-entries`: a page that needs at most this many index
/// entries (and a snapshot that is ready) is served on the main thread:
/// handing it to a worker and back costs the main thread more than the walk.
/// 0 hands every page to a worker.
pub static INLINE_ENTRIES: AtomicI64 = AtomicI64::new(256);
/// `snapshot.backfill-batch`: keys indexed per slice (one per turn of the
/// event loop) while building the index after MODULE LOAD.
pub static BACKFILL_BATCH: AtomicI64 = AtomicI64::new(1000);

/// `snapshot.hash-copy-batch`: hash fields copied per slice (one per turn
/// of the event loop) when SNAPSHOT.HSCAN snapshots a large hash.
pub static HASH_COPY_BATCH: AtomicI64 = AtomicI64::new(1000);
/// `snapshot.hash-memory-limit`: bytes all hash snapshots may hold.
pub static HASH_MEMORY_LIMIT: AtomicI64 = AtomicI64::new(256 << 20);

/// `snapshot.max-retained-bytes`: bytes of index nodes that old versions
/// (kept by open SNAPSHOT.SCAN iterations) may hold; 0 = unbounded.
pub static MAX_RETAINED_BYTES: AtomicI64 = AtomicI64::new(1 << 30);

pub fn get(v: &AtomicI64) -> usize {
    v.load(Ordering::Relaxed).max(0) as usize
}

pub fn on_workers_changed(_: &ConfigurationContext, _: &str, v: &'static AtomicI64) {
    if let Some(m) = crate::state::try_get() {
        m.pool.resize(get(v));
    }
}

pub fn on_nice_changed(_: &ConfigurationContext, _: &str, v: &'static AtomicI64) {
    if let Some(m) = crate::state::try_get() {
        m.pool.set_nice(get(v));
    }
}
