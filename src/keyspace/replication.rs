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

use super::backfill;
use crate::index::Op;
use crate::server::{self, Ctx};
use crate::state;
use redis_module::raw;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

static ASYNC_LOADING: AtomicBool = AtomicBool::new(false);
/// The `Loading` failure of the current async load was seen.
static FAILED_SEEN: AtomicBool = AtomicBool::new(false);
/// An async load aborted before its `Loading` failure event.
static ABORT_UNMATCHED: AtomicBool = AtomicBool::new(false);

/// Module options for replication support.
pub fn module_options() -> c_int {
    raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD as c_int
}

/// Whether a replica is loading a new dataset into a temporary database
/// (its notifications are not about the keys the module can read).
pub fn async_loading() -> bool {
    ASYNC_LOADING.load(Ordering::Relaxed)
}

/// Whether a failed load (`Loading` failed event) is an async load's: its
/// temporary database is discarded and the old dataset, and index, stay.
pub fn owns_failed_load() -> bool {
    if async_loading() {
        FAILED_SEEN.store(true, Ordering::SeqCst);
        return true;
    }
    ABORT_UNMATCHED.swap(false, Ordering::SeqCst)
}

/// A `ReplAsyncLoad` server event.
pub fn on_async_load(lock: &crate::server::locked::ServerLock, ctx: Ctx, subevent: u64) {
    match subevent {
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_STARTED => {
            server::log(
                ctx,
                "notice",
                "snapscan: async load started: serving the old index meanwhile",
            );
            FAILED_SEEN.store(false, Ordering::SeqCst);
            ABORT_UNMATCHED.store(false, Ordering::SeqCst);
            ASYNC_LOADING.store(true, Ordering::SeqCst);
        }
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_COMPLETED => {
            ASYNC_LOADING.store(false, Ordering::SeqCst);
            let Some(m) = state::try_get() else { return };
            server::log(
                ctx,
                "notice",
                "snapscan: replica loaded a new dataset, rebuilding the index from it",
            );
            m.watches.bump_all();
            m.push(Op::FlushAll);
            // A dropped index is rebuilt at its next use instead.
            if !super::idle::dropped(lock) {
                backfill::start(ctx);
            }
        }
        raw::REDISMODULE_SUBEVENT_REPL_ASYNC_LOAD_ABORTED => {
            server::log(
                ctx,
                "notice",
                "snapscan: async load aborted: the old index stays",
            );
            ASYNC_LOADING.store(false, Ordering::SeqCst);
            if !FAILED_SEEN.swap(false, Ordering::SeqCst) {
                ABORT_UNMATCHED.store(true, Ordering::SeqCst);
            }
        }
        _ => {}
    }
}
