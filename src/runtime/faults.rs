//! Test-only fault injection (`SNAPSHOT.TESTHOOK`): failed spawns and
//! one-shot panics of the module's threads. A field of
//! [`Threads`](super::Threads), read by the threads it reports on.

use std::sync::atomic::{AtomicUsize, Ordering};

/// A thread that a test can make panic once ([`Faults::inject`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Indexer = 1,
    Janitor = 2,
    Reaper = 4,
}

/// Pending test faults (none in production: only SNAPSHOT.TESTHOOK and
/// `SNAPSCAN_TEST_FAIL_SPAWNS` set them).
#[derive(Default)]
pub struct Faults {
    /// The next this-many spawns fail.
    fail_spawns: AtomicUsize,
    /// Pending one-shot panics ([`Fault`] bits).
    pending: AtomicUsize,
}

impl Faults {
    /// The thread `f` panics at its next turn.
    pub fn inject(&self, f: Fault) {
        self.pending.fetch_or(f as usize, Ordering::SeqCst);
    }

    /// Whether a panic was injected into `f` (clearing it).
    pub fn take(&self, f: Fault) -> bool {
        self.pending.load(Ordering::Relaxed) & f as usize != 0
            && self.pending.fetch_and(!(f as usize), Ordering::SeqCst) & f as usize != 0
    }

    /// Makes the next `n` thread spawns fail.
    pub fn fail_next_spawns(&self, n: usize) {
        self.fail_spawns.store(n, Ordering::SeqCst);
    }

    /// Whether this spawn is one to fail (counting it).
    pub(super) fn take_spawn_failure(&self) -> bool {
        self.fail_spawns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}
