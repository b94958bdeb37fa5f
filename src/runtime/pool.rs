//! The worker pool: a resizable set of named threads that run jobs (scan
//! pages, collection copies) off the server's main thread.
//!
//! Locking: one mutex guards the job queue; `submit` holds it for a push and
//! signals the condition variable only when a worker is idle, so a busy pool
//! costs the submitter no system call. Workers hold the mutex only to pop.
//! The counters read by `INFO` are atomics and take no lock.

use super::supervise::Threads;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle worker waits before it checks whether it should retire.
const IDLE_CHECK: Duration = Duration::from_millis(100);

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Workers waiting on the condition variable.
    idle: usize,
}

pub(super) struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Desired number of threads; surplus threads retire when idle.
    target: AtomicUsize,
    /// Threads ever started (names only).
    started: AtomicUsize,
    /// Threads currently alive.
    alive: AtomicUsize,
    pub(super) queued: AtomicUsize,
    busy: AtomicUsize,
    nice: AtomicUsize,
    /// Where a worker's spawn failure or caught panic is reported.
    threads: &'static Threads,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A resizable pool of named worker threads.
pub struct Pool {
    pub(super) shared: Arc<Shared>,
    name: &'static str,
}

impl Pool {
    /// A pool with no thread yet ([`resize`](Self::resize) starts them),
    /// its threads at niceness `nice`, reporting to `threads`.
    pub fn new(name: &'static str, threads: &'static Threads, nice: usize) -> Self {
        Pool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                target: AtomicUsize::new(0),
                started: AtomicUsize::new(0),
                alive: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                busy: AtomicUsize::new(0),
                nice: AtomicUsize::new(nice),
                threads,
            }),
            name,
        }
    }

    /// Grows or shrinks the pool to `threads` (at least 1). Shrinking takes
    /// effect as surplus threads notice (within 100 ms, or after their job).
    pub fn resize(&self, threads: usize) {
        let threads = threads.max(1);
        self.shared.target.store(threads, Ordering::SeqCst);
        loop {
            let alive = self.shared.alive.load(Ordering::SeqCst);
            if alive >= self.shared.target.load(Ordering::SeqCst) {
                break;
            }
            // Claim one slot; lose the race gracefully to a retiring thread.
            if self
                .shared
                .alive
                .compare_exchange(alive, alive + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                continue;
            }
            let n = self.shared.started.fetch_add(1, Ordering::SeqCst);
            let shared = Arc::clone(&self.shared);
            let spawned = self
                .shared
                .threads
                .spawn_named(format!("{}-{n}", self.name), move || worker(shared));
            if !spawned {
                self.shared.alive.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
        // Wake idle threads so that surplus ones retire promptly.
        self.shared.ready.notify_all();
    }

    pub fn set_nice(&self, nice: usize) {
        self.shared.nice.store(nice, Ordering::SeqCst);
    }

    /// Queues a job. Returns it back if the pool cannot take it (no threads).
    ///
    /// Locking: holds the queue mutex for the push; wakes one thread only if
    /// one is idle (a system call), otherwise a busy thread picks the job up
    /// when it finishes its current one.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        if self.shared.alive.load(Ordering::SeqCst) == 0 {
            return Err(job);
        }
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let wake = {
            let mut q = self.shared.lock();
            q.jobs.push_back(job);
            q.idle > 0
        };
        if wake {
            self.shared.ready.notify_one();
        }
        Ok(())
    }

    /// Jobs waiting for a thread.
    pub fn queued(&self) -> usize {
        self.shared.queued.load(Ordering::SeqCst)
    }

    /// Jobs being run right now.
    pub fn busy(&self) -> usize {
        self.shared.busy.load(Ordering::SeqCst)
    }

    pub fn threads(&self) -> usize {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Threads wanted (the last [`resize`](Self::resize)).
    pub fn target(&self) -> usize {
        self.shared.target.load(Ordering::SeqCst)
    }
}

/// Lowers the calling thread's scheduling priority to `nice` (0-19).
pub use crate::server::thread::set_nice as set_thread_nice;

/// Retires the calling thread if the pool has more threads than wanted:
/// exactly one surplus thread wins each decrement.
fn retire_if_surplus(shared: &Shared) -> bool {
    loop {
        let alive = shared.alive.load(Ordering::SeqCst);
        if alive <= shared.target.load(Ordering::SeqCst) {
            return false;
        }
        if shared
            .alive
            .compare_exchange(alive, alive - 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            return true;
        }
    }
}

/// The next job, or None after `IDLE_CHECK` without one.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut q = shared.lock();
    if q.jobs.is_empty() {
        q.idle += 1;
        let (guard, _) = shared
            .ready
            .wait_timeout_while(q, IDLE_CHECK, |q| {
                // A shrink (resize wakes everyone) ends the wait too.
                q.jobs.is_empty()
                    && shared.alive.load(Ordering::SeqCst) <= shared.target.load(Ordering::SeqCst)
            })
            .unwrap_or_else(|e| e.into_inner());
        q = guard;
        q.idle -= 1;
    }
    q.jobs.pop_front()
}

fn worker(shared: Arc<Shared>) {
    let mut nice = shared.nice.load(Ordering::SeqCst);
    set_thread_nice(nice);
    loop {
        if retire_if_surplus(&shared) {
            break;
        }
        let Some(job) = next_job(&shared) else {
            continue;
        };
        shared.queued.fetch_sub(1, Ordering::SeqCst);
        shared.busy.fetch_add(1, Ordering::SeqCst);
        let want = shared.nice.load(Ordering::SeqCst);
        if want != nice {
            nice = want;
            set_thread_nice(nice);
        }
        // A panicking job must not take the thread down; jobs own
        // their reply guards, which answer the client on unwind.
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)) {
            let name = std::thread::current().name().unwrap_or("worker").to_owned();
            shared
                .threads
                .note_panic(&name, &*p, "the job was abandoned, the thread goes on");
        }
        shared.busy.fetch_sub(1, Ordering::SeqCst);
    }
    // A retiring thread may have been the one woken for a job: pass the
    // signal on so that the job is not left waiting for the idle timeout.
    shared.ready.notify_one();
}
