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
//!
//! No thread dies silently: a panic in a job, a destructor or a service
//! loop ([`run_supervised`]) is caught, logged through [`set_logger`]'s
//! function and counted ([`thread_restarts`]); the loop restarts after a
//! pause that grows with repeated panics (10 ms doubling to 5 s). A thread
//! that cannot be started is counted ([`thread_failures`]) and logged; its
//! owner retries later (see `state::ensure_threads`).

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

static RESTARTS: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static LOGGER: OnceLock<fn(&str)> = OnceLock::new();
/// Test-only fault injection: the next this-many spawns fail.
static FAIL_SPAWNS: AtomicUsize = AtomicUsize::new(0);
/// Test-only fault injection: pending one-shot panics ([`Fault`] bits).
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

/// Where panics and failed spawns are reported (the server log); set once.
pub fn set_logger(f: fn(&str)) {
    let _ = LOGGER.set(f);
}

fn log(msg: &str) {
    if let Some(f) = LOGGER.get() {
        f(msg);
    }
}

/// Panics caught in module threads (each followed by a restart of the loop
/// or the next job).
pub fn thread_restarts() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

/// Thread spawns that failed.
pub fn thread_failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Test-only: makes the next `n` thread spawns fail.
pub fn fail_next_spawns(n: usize) {
    FAIL_SPAWNS.store(n, Ordering::SeqCst);
}

fn panic_text(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Counts and logs a panic caught in thread `name`.
pub fn note_panic(name: &str, p: &(dyn Any + Send), what: &str) {
    RESTARTS.fetch_add(1, Ordering::Relaxed);
    log(&format!(
        "snapscan: thread {name} panicked: {}; {what}",
        panic_text(p)
    ));
}

/// Starts a named thread; a failure is counted and logged.
pub fn spawn_named<F: FnOnce() + Send + 'static>(name: String, f: F) -> bool {
    let injected = FAIL_SPAWNS
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    let res = if injected {
        Err(std::io::Error::other("injected failure (test hook)"))
    } else {
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(f)
            .map(drop)
    };
    match res {
        Ok(()) => true,
        Err(e) => {
            FAILURES.fetch_add(1, Ordering::Relaxed);
            log(&format!("snapscan: cannot start thread {name}: {e}"));
            false
        }
    }
}

/// Runs `body` on the calling thread until it returns; a panic is caught,
/// logged and counted, and `body` runs again after a pause (10 ms, doubled
/// for each panic within a minute of the previous one, at most 5 s).
pub fn run_supervised(name: &str, body: &dyn Fn()) {
    let mut streak = 0u32;
    let mut last: Option<Instant> = None;
    loop {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(()) => return,
            Err(p) => {
                if last.is_some_and(|t| t.elapsed() > Duration::from_secs(60)) {
                    streak = 0;
                }
                let pause = Duration::from_millis(10 << streak.min(9)).min(Duration::from_secs(5));
                note_panic(
                    name,
                    &*p,
                    &format!("restarting it in {} ms", pause.as_millis()),
                );
                streak += 1;
                last = Some(Instant::now());
                std::thread::sleep(pause);
            }
        }
    }
}

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
            if !spawn_named(format!("{}-{n}", self.name), move || worker(shared)) {
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
            note_panic(&name, &*p, "the job was abandoned, the thread goes on");
        }
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
            alive: AtomicBool::new(false),
        });
        let r = Reaper { shared };
        r.ensure_running();
        r
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
        if spawn_named("snapscan-reaper".into(), move || reap(s)) {
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
    run_supervised(name, &|| reap_loop(&shared));
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
            note_panic("snapscan-reaper", &*p, "the thread goes on");
        }
        if done {
            return;
        }
        if take_fault(Fault::Reaper) {
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
    fn a_supervised_loop_is_restarted_after_each_panic() {
        let runs = AtomicUsize::new(0);
        let before = thread_restarts();
        run_supervised("t", &|| {
            if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                panic!("boom");
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert!(thread_restarts() >= before + 2);
    }

    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("destructor panic");
        }
    }

    #[test]
    fn the_reaper_survives_a_panicking_destructor() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let reaper = Reaper::new();
        reaper.dispose(Bomb);
        wait_for(&dropped, 0);
        reaper.dispose(Counted(Arc::clone(&dropped)));
        wait_for(&dropped, 1);
        assert!(reaper.is_running());
    }

    #[test]
    fn injected_faults_fire_once() {
        inject_fault(Fault::Janitor);
        assert!(take_fault(Fault::Janitor));
        assert!(!take_fault(Fault::Janitor));
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
