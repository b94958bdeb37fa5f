//! The reaper: frees large values off the server's main thread.

use super::faults::Fault;
use super::pool::set_thread_nice;
use super::supervise::Threads;
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Drops large values (old index maps, snapshots) on a background thread so
/// that freeing millions of nodes never runs on the server's main thread.
///
/// Values are collected and dropped in batches: `dispose` is a push under a
/// mutex; the first value wakes the thread, which then gathers for up to
/// `SWEEP` (less once `WAKE_AT` values wait) and drops the batch. Abandoned
/// cursors therefore cost at most one wake-up per `SWEEP`, not one each, and
/// memory is returned within about `SWEEP`.
///
/// If the thread cannot be started, values wait in the queue until
/// [`ensure_running`](Reaper::ensure_running) starts it (never dropped on
/// the caller's thread, which is often the server's main thread).
pub struct Reaper {
    shared: Arc<ReaperShared>,
}

struct ReaperShared {
    garbage: Mutex<Vec<Box<dyn Any + Send>>>,
    ready: Condvar,
    /// Cleared to stop the thread (drop).
    running: AtomicBool,
    /// Whether the thread is alive.
    alive: AtomicBool,
    /// Where its spawn failure or caught panics are reported.
    threads: &'static Threads,
}

/// Values waiting before `dispose` wakes the thread.
pub(super) const WAKE_AT: usize = 256;
/// The longest a disposed value waits to be dropped.
const SWEEP: Duration = Duration::from_millis(10);

impl ReaperShared {
    fn lock(&self) -> MutexGuard<'_, Vec<Box<dyn Any + Send>>> {
        self.garbage.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Reaper {
    /// A reaper whose thread is not started yet
    /// ([`ensure_running`](Self::ensure_running) starts it), reporting to
    /// `threads`.
    pub fn new(threads: &'static Threads) -> Self {
        let shared = Arc::new(ReaperShared {
            garbage: Mutex::new(Vec::new()),
            ready: Condvar::new(),
            running: AtomicBool::new(true),
            alive: AtomicBool::new(false),
            threads,
        });
        Reaper { shared }
    }

    /// Whether the reaper thread is alive.
    pub fn is_running(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Starts the thread if it is not alive; false if that failed.
    pub fn ensure_running(&self) -> bool {
        if self.shared.alive.swap(true, Ordering::SeqCst) {
            return true;
        }
        let s = Arc::clone(&self.shared);
        if self
            .shared
            .threads
            .spawn_named("snapscan-reaper".into(), move || reap(s))
        {
            true
        } else {
            self.shared.alive.store(false, Ordering::SeqCst);
            false
        }
    }

    /// Hands `value` to the reaper thread, which drops it within `SWEEP`
    /// (later if the thread is not running: see the type's docs).
    ///
    /// Locking: holds the garbage mutex for a push.
    pub fn dispose<T: Send + 'static>(&self, value: T) {
        let wake = {
            let mut g = self.shared.lock();
            g.push(Box::new(value));
            // The first value wakes the sleeping thread, which then waits up
            // to SWEEP for more; a full batch cuts that wait short.
            g.len() == 1 || g.len() == WAKE_AT
        };
        if wake {
            self.shared.ready.notify_one();
        }
    }
}

fn reap(shared: Arc<ReaperShared>) {
    set_thread_nice(19);
    let name = "snapscan-reaper";
    shared.threads.run_supervised(name, &|| reap_loop(&shared));
    shared.alive.store(false, Ordering::SeqCst);
}

fn reap_loop(shared: &ReaperShared) {
    loop {
        let batch = {
            let g = shared.lock();
            // Sleep until the first value arrives, then let a batch gather.
            let g = shared
                .ready
                .wait_while(g, |g| g.is_empty() && shared.running.load(Ordering::SeqCst))
                .unwrap_or_else(|e| e.into_inner());
            let (mut g, _) = shared
                .ready
                .wait_timeout_while(g, SWEEP, |g| {
                    g.len() < WAKE_AT && shared.running.load(Ordering::SeqCst)
                })
                .unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *g)
        };
        let done = batch.is_empty() && !shared.running.load(Ordering::SeqCst);
        // A panicking destructor must not end the thread (the rest of the
        // batch is then leaked by the unwind, not dropped twice).
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(batch)))
        {
            shared
                .threads
                .note_panic("snapscan-reaper", &*p, "the thread goes on");
        }
        if done {
            return;
        }
        if shared.threads.faults.take(Fault::Reaper) {
            panic!("injected fault (test hook)");
        }
    }
}

impl Drop for Reaper {
    /// Stops the thread after it has dropped what is left.
    fn drop(&mut self) {
        self.shared.running.store(false, Ordering::SeqCst);
        self.shared.ready.notify_all();
    }
}
