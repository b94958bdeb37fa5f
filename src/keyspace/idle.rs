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
use crate::server::locked::{LockedCell, ServerLock};
use crate::state::Shared;
use std::sync::atomic::{AtomicU64, Ordering};

/// The idle drop's state (a field of `keyspace::Keyspace`).
#[derive(Default)]
pub struct Idle {
    /// Whether the index is dropped (not maintained) right now.
    dropped: LockedCell<bool>,
    /// Monotonic ms of the last SNAPSHOT.SCAN/UNLINK call (or of the load).
    last_use_ms: LockedCell<u64>,
    /// Times the index was dropped.
    drops: AtomicU64,
}

/// What a cron tick asks of the index.
#[derive(Debug, PartialEq, Eq)]
pub enum Tick {
    Nothing,
    /// Idle long enough, nothing open, no build: drop it.
    Drop,
    /// Dropped, and the timeout was set back to 0: rebuild it.
    Rebuild,
}

impl Idle {
    /// Whether the index is dropped: notifications skip everything but the
    /// bookkeeping of running copies and deletions.
    #[inline]
    pub fn dropped(&self, lock: &ServerLock) -> bool {
        self.dropped.get(lock)
    }

    /// Times the index was dropped since the module loaded.
    pub fn drops(&self) -> u64 {
        self.drops.load(Ordering::Relaxed)
    }

    /// A SNAPSHOT.SCAN or SNAPSHOT.UNLINK call: the index is in use. Returns
    /// whether it is dropped (the call must rebuild it before opening a
    /// snapshot: see `keyspace::in_use`).
    pub fn note_use(&self, lock: &ServerLock, m: &Shared) -> bool {
        self.last_use_ms.replace(lock, m.mono_ms());
        self.dropped.get(lock)
    }

    /// A server cron tick: whether the index should be dropped (idle long
    /// enough) or rebuilt (the timeout was set back to 0 meanwhile).
    pub fn on_cron(&self, lock: &ServerLock, m: &Shared, building: bool) -> Tick {
        let timeout_ms = config::get(&m.config.index_idle_timeout) as u64 * 1000;
        if self.dropped.get(lock) {
            return if timeout_ms == 0 {
                Tick::Rebuild // retried at the next tick if it cannot start
            } else {
                Tick::Nothing
            };
        }
        let idle_ms = m.mono_ms().saturating_sub(self.last_use_ms.get(lock));
        if timeout_ms == 0 || idle_ms < timeout_ms || building {
            return Tick::Nothing;
        }
        // An open iteration's snapshot shares the index's nodes: dropping would
        // free nothing, and would leave the iteration holding every node alone,
        // past `snapshot.max-retained-bytes`, which would end it.
        if m.cursors.stats().open > 0 {
            return Tick::Nothing;
        }
        Tick::Drop
    }

    /// Records that the index was dropped.
    pub fn mark_dropped(&self, lock: &ServerLock) {
        self.dropped.replace(lock, true);
        self.drops.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that the index is being rebuilt (in use from now on).
    pub fn mark_rebuilt(&self, lock: &ServerLock, m: &Shared) {
        self.dropped.replace(lock, false);
        self.last_use_ms.replace(lock, m.mono_ms());
    }
}
