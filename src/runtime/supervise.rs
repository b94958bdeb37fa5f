//! Threads that never die silently: named spawns (a failure is counted and
//! logged), supervised loops (a panic is caught, logged, counted, and the
//! loop restarts after a growing pause), and where all that is reported:
//! [`Threads`], one per `Module`, which every module thread is handed.

use super::faults::Faults;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the module's threads report to: panics caught, spawns that
/// failed, the log they go to, and the test faults. Not global: the
/// `Module` holds one (`state::Shared::threads`), and the pool, the reaper,
/// the indexer and the janitor are handed `&'static` to it ([`Threads::leak`]).
pub struct Threads {
    restarts: AtomicU64,
    failures: AtomicU64,
    /// Where panics and failed spawns are reported (the server log).
    log: fn(&str),
    /// Test-only faults (SNAPSHOT.TESTHOOK).
    pub faults: Faults,
}

impl Threads {
    /// Reporting to `log`.
    pub fn new(log: fn(&str)) -> Self {
        Threads {
            restarts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            log,
            faults: Faults::default(),
        }
    }

    /// A `Threads` that lives as long as the process, for threads that are
    /// started while their owner is being built (the pool and the reaper of
    /// `state::Shared`, which has no address yet then). Leaked once per
    /// `Module` (never dropped: MODULE UNLOAD is refused); per test.
    pub fn leak(log: fn(&str)) -> &'static Threads {
        Box::leak(Box::new(Threads::new(log)))
    }

    /// Panics caught in module threads (each followed by a restart of the
    /// loop or the next job).
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Thread spawns that failed.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Counts and logs a panic caught in thread `name`.
    pub fn note_panic(&self, name: &str, p: &(dyn Any + Send), what: &str) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        (self.log)(&format!(
            "snapscan: thread {name} panicked: {}; {what}",
            panic_text(p)
        ));
    }

    /// Starts a named thread; a failure is counted and logged.
    pub fn spawn_named<F: FnOnce() + Send + 'static>(&self, name: String, f: F) -> bool {
        let res = if self.faults.take_spawn_failure() {
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
                self.failures.fetch_add(1, Ordering::Relaxed);
                (self.log)(&format!("snapscan: cannot start thread {name}: {e}"));
                false
            }
        }
    }

    /// Runs `body` on the calling thread until it returns; a panic is
    /// caught, logged and counted, and `body` runs again after a pause
    /// (10 ms, doubled for each panic within a minute of the previous one,
    /// at most 5 s).
    pub fn run_supervised(&self, name: &str, body: &dyn Fn()) {
        let mut streak = 0u32;
        let mut last: Option<Instant> = None;
        loop {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(()) => return,
                Err(p) => {
                    if last.is_some_and(|t| t.elapsed() > Duration::from_secs(60)) {
                        streak = 0;
                    }
                    let pause =
                        Duration::from_millis(10 << streak.min(9)).min(Duration::from_secs(5));
                    self.note_panic(
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
}

fn panic_text(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
