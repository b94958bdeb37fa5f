//! Test-only fault injection (`SNAPSHOT.TESTHOOK`): failed spawns and
//! one-shot panics of the module's threads.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Test-only fault injection: the next this-many spawns fail.
pub(super) static FAIL_SPAWNS: AtomicUsize = AtomicUsize::new(0);
/// Test-only fault injection: pending one-shot panics ([`Fault`] bits).
/// Global for now: test faults read by runtime threads handed no state of
/// the module (see docs/DESIGN.md, "State ownership").
static FAULTS: AtomicUsize = AtomicUsize::new(0);

/// A thread that a test can make panic once ([`inject_fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Indexer = 1,
    Janitor = 2,
    Reaper = 4,
}

/// Test-only: the thread `f` panics at its next turn.
pub fn inject_fault(f: Fault) {
    FAULTS.fetch_or(f as usize, Ordering::SeqCst);
}

/// Whether a panic was injected into `f` (clearing it).
pub fn take_fault(f: Fault) -> bool {
    FAULTS.load(Ordering::Relaxed) & f as usize != 0
        && FAULTS.fetch_and(!(f as usize), Ordering::SeqCst) & f as usize != 0
}

/// Test-only: makes the next `n` thread spawns fail.
pub fn fail_next_spawns(n: usize) {
    FAIL_SPAWNS.store(n, Ordering::SeqCst);
}
