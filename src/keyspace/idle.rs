//! Dropping the index while nobody scans (`snapshot.index-idle-timeout`).
//!
//! With a timeout of `n` seconds (0, the default, keeps the index always),
//! the index is dropped once no SNAPSHOT.SCAN or SNAPSHOT.UNLINK call has
//! come for `n` seconds, no iteration is open (its snapshot shares the
//! index's memory) and no build is running: the trees are freed, and a
//! notification then costs one check of a flag (plus the bookkeeping of
//! running SNAPSHOT.HSCAN copies and deletions, which never needed the
//! index). The next SNAPSHOT.SCAN or SNAPSHOT.UNLINK rebuilds it from the
//! keyspace exactly as after MODULE LOAD (`backfill`): it and the calls
//! after it answer `LOADING` with the progress until the build is done.
//!
//! Locking: the state is read and written only under the server lock (cron
//! ticks, notifications and command handlers on the main thread), so it
//! lives in [`LockedCell`]s; the counter INFO prints is an atomic.

use crate::config;
use crate::index::Op;
use crate::server::locked::{LockedCell, ServerLock};
use crate::server::Ctx;
use crate::state::Module;
use std::sync::atomic::{AtomicU64, Ordering};

/// Whether the index is dropped (not maintained) right now.
static DROPPED: LockedCell<bool> = LockedCell::new(false);
/// Monotonic ms of the last SNAPSHOT.SCAN/UNLINK call (or of the load).
static LAST_USE_MS: LockedCell<u64> = LockedCell::new(0);
/// Times the index was dropped.
static DROPS: AtomicU64 = AtomicU64::new(0);

/// Whether the index is dropped: notifications skip everything but the
/// bookkeeping of running copies and deletions.
#[inline]
pub fn dropped(lock: &ServerLock) -> bool {
    DROPPED.get(lock)
}

/// Times the index was dropped since the module loaded.
pub fn drops() -> u64 {
    DROPS.load(Ordering::Relaxed)
}

/// A SNAPSHOT.SCAN or SNAPSHOT.UNLINK call: the index is in use. If it
/// was dropped and the call needs it (`opening` a snapshot), its rebuild
/// starts here; `Err` if it cannot start (the index stays dropped).
pub fn in_use(lock: &ServerLock, ctx: Ctx, m: &Module, opening: bool) -> Result<(), &'static str> {
    LAST_USE_MS.replace(lock, m.mono_ms());
    if opening && DROPPED.get(lock) && !rebuild(lock, ctx, m) {
        return Err("ERR snapscan: the index was dropped for want of scans and its rebuild could not start; retry later");
    }
    Ok(())
}

/// A server cron tick: drops the index if it has been idle long enough,
/// or rebuilds it if the timeout was set back to 0 meanwhile.
pub fn on_cron(lock: &ServerLock, ctx: Ctx, m: &Module) {
    let timeout_ms = config::get(&config::INDEX_IDLE_TIMEOUT) as u64 * 1000;
    if DROPPED.get(lock) {
        if timeout_ms == 0 {
            rebuild(lock, ctx, m); // retried at the next tick if it cannot start
        }
        return;
    }
    let idle_ms = m.mono_ms().saturating_sub(LAST_USE_MS.get(lock));
    if timeout_ms == 0 || idle_ms < timeout_ms || crate::keyspace::backfill::progress().running {
        return;
    }
    // An open iteration's snapshot shares the index's nodes: dropping would
    // free nothing, and would leave the iteration holding every node alone,
    // past `snapshot.max-retained-bytes`, which would end it.
    if m.cursors.stats().open > 0 {
        return;
    }
    DROPPED.replace(lock, true);
    DROPS.fetch_add(1, Ordering::Relaxed);
    // What the notifications kept between two events of one command
    // belongs to the index: forgotten with it.
    super::tracking::forget_pending(lock);
    crate::keyspace::deleted::forget_gone(lock);
    // The indexer frees the trees (open iterations keep their snapshots).
    m.push(Op::FlushAll);
    crate::server::log(
        ctx,
        "notice",
        "snapscan: no scan for snapshot.index-idle-timeout seconds: index dropped until the next SNAPSHOT.SCAN",
    );
}

/// Starts the rebuild; false if the walk could not start (then the index
/// stays dropped: an empty index must not be served as complete).
fn rebuild(lock: &ServerLock, ctx: Ctx, m: &Module) -> bool {
    if crate::keyspace::backfill::needed(ctx, m.databases) {
        crate::keyspace::backfill::start(ctx);
        if !crate::keyspace::backfill::progress().running {
            crate::server::log(
                ctx,
                "warning",
                "snapscan: cannot start rebuilding the index",
            );
            return false;
        }
    }
    DROPPED.replace(lock, false);
    LAST_USE_MS.replace(lock, m.mono_ms());
    crate::server::log(ctx, "notice", "snapscan: rebuilding the index");
    true
}
