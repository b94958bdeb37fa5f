//! Worker threads that serve scans off the server's main thread.
//!
//! Pure std; knows nothing of the server. Threads lower their own scheduling
//! priority (`nice`) so that on a small machine the server's main thread wins
//! the CPU when both want it.
//!
//! Locking: `submit` takes the sender mutex for a channel push; workers share
//! one receiver behind a mutex (held only while waiting for the next job).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub type Job = Box<dyn FnOnce() + Send + 'static>;

struct Shared {
    rx: Mutex<Receiver<Job>>,
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

/// A resizable pool of named worker threads.
pub struct Pool {
    tx: Mutex<Sender<Job>>,
    shared: Arc<Shared>,
    name: &'static str,
}

impl Pool {
    pub fn new(name: &'static str, threads: usize, nice: usize) -> Self {
        let (tx, rx) = channel();
        let pool = Pool {
            tx: Mutex::new(tx),
            shared: Arc::new(Shared {
                rx: Mutex::new(rx),
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
    }

    pub fn set_nice(&self, nice: usize) {
        self.shared.nice.store(nice, Ordering::SeqCst);
    }

    /// Queues a job. Returns it back if the pool cannot take it (no threads).
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        if self.shared.alive.load(Ordering::SeqCst) == 0 {
            return Err(job);
        }
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        tx.send(job).map_err(|e| {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            e.0
        })
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

fn worker(shared: Arc<Shared>) {
    let mut nice = shared.nice.load(Ordering::SeqCst);
    set_thread_nice(nice);
    loop {
        if retire_if_surplus(&shared) {
            return;
        }
        let next = {
            let rx = shared.rx.lock().unwrap_or_else(|e| e.into_inner());
            rx.recv_timeout(Duration::from_millis(100))
        };
        match next {
            Ok(job) => {
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
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    shared.alive.fetch_sub(1, Ordering::SeqCst);
}

/// Drops large values (old index maps, snapshots) on a background thread so
/// that freeing millions of nodes never runs on the server's main thread.
pub struct Reaper {
    pool: Pool,
}

impl Reaper {
    pub fn new() -> Self {
        Reaper {
            pool: Pool::new("snapscan-reaper", 1, 19),
        }
    }

    pub fn dispose<T: Send + 'static>(&self, value: T) {
        if let Err(job) = self.pool.submit(Box::new(move || drop(value))) {
            job();
        }
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
}
