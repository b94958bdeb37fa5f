//! Diskless replica loading into a temporary database
//! (`repl-diskless-load swapdb`, also under Valkey's dual-channel
//! replication): the module declares it copes
//! (`REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD`), so loading snapscan no
//! longer makes the replica load from disk.
//!
//! While the new dataset loads in the background the replica keeps serving
//! reads from the old one, and SNAPSHOT.SCAN keeps serving the old index:
//! the `loaded` notifications of the temporary database are ignored (the
//! module cannot read that database: it would read the old key of the same
//! name). At completion the server swaps the new dataset in; the index is
//! then rebuilt from it in paced slices, as after `MODULE LOAD` (SNAPSHOT.SCAN
//! answers `LOADING` with the progress until it is done). An aborted load
//! leaves the old dataset, and the old index, untouched.

use crate::index::Op;
use crate::server::{self, Ctx};
use crate::state::Shared;
use redis_module::raw;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

/// Replication's state (a field of `keyspace::Keyspace`).
#[derive(Default)]
pub struct Replication {
    /// A new dataset loads into a temporary database.
    async_loading: AtomicBool,
    /// The `Loading` failure of the current async load was seen.
    failed_seen: AtomicBool,
    /// An async load aborted before its `Loading` failure event.
    abort_unmatched: AtomicBool,
}

/// Module options for replication support.
pub fn module_options() -> c_int {
    raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD as c_int
}

impl Replication {
    /// Whether a replica is loading a new dataset into a temporary database
    /// (its notifications are not about the keys the module can read).
    pub fn async_loading(&self) -> bool {
        self.async_loading.load(Ordering::Relaxed)
    }

    /// Whether a failed load (`Loading` failed event) is an async load's: its
    /// temporary database is discarded and the old dataset, and index, stay.
    pub fn owns_failed_load(&self) -> bool {
        if self.async_loading() {
            self.failed_seen.store(true, Ordering::SeqCst);
            return true;
        }
        self.abort_unmatched.swap(false, Ordering::SeqCst)
    }
}

/// A `ReplAsyncLoad` server event.
pub fn on_async_load(
    lock: &crate::server::locked::ServerLock,
    ctx: Ctx,
    m: &'static Shared,
    ks: &'static super::Keyspace,
    subevent: u64,
) {
    let r = &ks.replication;
    match subevent {
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => {
            server::log(
                ctx,
                "notice",
                "snapscan: async load started: serving the old index meanwhile",
            );
            r.failed_seen.store(false, Ordering::SeqCst);
            r.abort_unmatched.store(false, Ordering::SeqCst);
            r.async_loading.store(true, Ordering::SeqCst);
        }
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
            r.async_loading.store(false, Ordering::SeqCst);
            server::log(
                ctx,
                "notice",
                "snapscan: replica loaded a new dataset, rebuilding the index from it",
            );
            m.watches.bump_all();
            m.push(Op::FlushAll);
            // A dropped index is rebuilt at its next use instead.
            if !ks.idle.dropped(lock) {
                ks.backfill.start(ctx, m);
            }
        }
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_ABORTED => {
            server::log(
                ctx,
                "notice",
                "snapscan: async load aborted: the old index stays",
            );
            r.async_loading.store(false, Ordering::SeqCst);
            if !r.failed_seen.swap(false, Ordering::SeqCst) {
                r.abort_unmatched.store(true, Ordering::SeqCst);
            }
        }
        _ => {}
    }
}
