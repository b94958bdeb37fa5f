//! Worker threads that serve scans off the server's main thread.
//!
//! Pure std; knows nothing of the server. Threads lower their own scheduling
//! priority (`nice`) so that on a small machine the server's main thread wins
//! the CPU when both want it.
//!
//! Locking: one mutex guards the job queue; `submit` holds it for a push and
//! signals the condition variable only when a worker is idle, so a busy pool
//! costs the submitter no system call. Workers hold the mutex only to pop.
//! The counters read by `INFO` are atomics and take no lock.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// Desired number of threads; surplus threads retire when idle.
    target: AtomicUsize,
    /// Threads ever started (names only).
    started: AtomicUsize,
    /// Threads currently alive.
    alive: AtomicUsize,
    queued: AtomicUsize,
    busy: AtomicUsize,
    nice: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A resizable pool of named worker threads.
pub struct Pool {
    shared: Arc<Shared>,
    name: &'static str,
}

impl Pool {
    pub fn new(name: &'static str, threads: usize, nice: usize) -> Self {
        let pool = Pool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                target: AtomicUsize::new(0),
                started: AtomicUsize::new(0),
                alive: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                busy: AtomicUsize::new(0),
                nice: AtomicUsize::new(nice),
            }),
            name,
        };
        pool.resize(threads);
        pool
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
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{n}", self.name))
                .spawn(move || worker(shared));
            if spawned.is_err() {
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
}

/// Lowers the calling thread's scheduling priority to `nice` (0-19).
pub fn set_thread_nice(nice: usize) {
    // SAFETY: gettid and setpriority only read their arguments and affect
    // the calling thread's scheduling priority; failure is harmless.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice.min(19) as libc::c_int);
    }
}

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
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        shared.busy.fetch_sub(1, Ordering::SeqCst);
    }
    // A retiring thread may have been the one woken for a job: pass the
    // signal on so that the job is not left waiting for the idle timeout.
    shared.ready.notify_one();
}

/// Drops large values (old index maps, snapshots) on a background thread so
/// that freeing millions of nodes never runs on the server's main thread.
///
/// Values are collected and dropped in batches: `dispose` is a push under a
/// mutex; the first value wakes the thread, which then gathers for up to
/// `SWEEP` (less once `WAKE_AT` values wait) and drops the batch. Abandoned
/// cursors therefore cost at most one wake-up per `SWEEP`, not one each, and
/// memory is returned within about `SWEEP`.
pub struct Reaper {
    shared: Arc<ReaperShared>,
}

struct ReaperShared {
    garbage: Mutex<Vec<Box<dyn Any + Send>>>,
    ready: Condvar,
    running: AtomicBool,
}

/// Values waiting before `dispose` wakes the thread.
const WAKE_AT: usize = 256;
/// The longest a disposed value waits to be dropped.
const SWEEP: Duration = Duration::from_millis(10);

impl ReaperShared {
    fn lock(&self) -> MutexGuard<'_, Vec<Box<dyn Any + Send>>> {
        self.garbage.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Reaper {
    pub fn new() -> Self {
        let shared = Arc::new(ReaperShared {
            garbage: Mutex::new(Vec::new()),
            ready: Condvar::new(),
            running: AtomicBool::new(true),
        });
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("snapscan-reaper".into())
            .spawn(move || reap(s));
        if spawned.is_err() {
            shared.running.store(false, Ordering::SeqCst);
        }
        Reaper { shared }
    }

    /// Hands `value` to the reaper thread, which drops it within `SWEEP`
    /// (at once if the thread could not be started).
    ///
    /// Locking: holds the garbage mutex for a push.
    pub fn dispose<T: Send + 'static>(&self, value: T) {
        if !self.shared.running.load(Ordering::SeqCst) {
            drop(value);
            return;
        }
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
        // A panicking destructor must not end the thread.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(batch)));
        if done {
            return;
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

impl Default for Reaper {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Instant;

    #[test]
    fn runs_jobs_survives_panics_and_resizes() {
        let pool = Pool::new("t", 2, 5);
        let (tx, rx) = channel();
        for i in 0..50 {
            let tx = tx.clone();
            pool.submit(Box::new(move || {
                if i == 3 {
                    panic!("job panic must not kill the worker");
                }
                tx.send(i).ok();
            }))
            .ok()
            .expect("submitted");
        }
        let mut got: Vec<i32> = (0..49)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).expect("job ran"))
            .collect();
        got.sort();
        assert_eq!(got.len(), 49);
        assert!(!got.contains(&3));
        pool.resize(4);
        assert_eq!(pool.threads(), 4);
        settle(&pool, 1);
        assert_eq!(pool.queued(), 0);
    }

    fn settle(pool: &Pool, want: usize) {
        pool.resize(want);
        let deadline = Instant::now() + Duration::from_secs(5);
        while pool.threads() != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.threads(), want);
    }

    #[test]
    fn resizes_interrupted_midway_converge_to_the_last_size() {
        let pool = Pool::new("r", 4, 0);
        for round in 0..5 {
            pool.resize(1);
            // Interrupt the shrink as soon as it started.
            let deadline = Instant::now() + Duration::from_secs(5);
            while pool.threads() > 3 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            pool.resize(4);
            settle(&pool, 3);
            assert_eq!(pool.threads(), 3, "round {round}");
            pool.resize(4);
        }
    }

    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn wait_for(what: &AtomicUsize, want: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while what.load(Ordering::SeqCst) != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(what.load(Ordering::SeqCst), want);
    }

    #[test]
    fn reaper_drops_single_values_and_batches() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let reaper = Reaper::new();
        reaper.dispose(Counted(Arc::clone(&dropped)));
        wait_for(&dropped, 1);
        for _ in 0..(3 * WAKE_AT + 7) {
            reaper.dispose(Counted(Arc::clone(&dropped)));
        }
        wait_for(&dropped, 3 * WAKE_AT + 8);
        // Idle again: a later value is still dropped.
        reaper.dispose(Counted(Arc::clone(&dropped)));
        wait_for(&dropped, 3 * WAKE_AT + 9);
    }

    #[test]
    fn dropping_the_reaper_drops_what_it_holds() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let reaper = Reaper::new();
        for _ in 0..10 {
            reaper.dispose(Counted(Arc::clone(&dropped)));
        }
        drop(reaper);
        wait_for(&dropped, 10);
    }

    #[test]
    fn an_idle_pool_wakes_for_a_job_and_a_busy_one_drains_its_queue() {
        let pool = Pool::new("w", 1, 0);
        let (tx, rx) = channel();
        // Let the thread go idle, then submit: it must be woken.
        std::thread::sleep(Duration::from_millis(20));
        let t = tx.clone();
        pool.submit(Box::new(move || t.send(0).unwrap()))
            .ok()
            .expect("submitted");
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(0));
        // Many jobs queued behind a slow one all run.
        let (gate_tx, gate_rx) = channel::<()>();
        pool.submit(Box::new(move || {
            gate_rx.recv_timeout(Duration::from_secs(5)).ok();
        }))
        .ok()
        .expect("submitted");
        for i in 1..=100 {
            let t = tx.clone();
            pool.submit(Box::new(move || t.send(i).unwrap()))
                .ok()
                .expect("submitted");
        }
        assert!(pool.queued() >= 100);
        gate_tx.send(()).unwrap();
        let got: Vec<i32> = (1..=100)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("job ran"))
            .collect();
        assert_eq!(got, (1..=100).collect::<Vec<_>>());
        wait_for(&pool.shared.queued, 0);
    }
}
