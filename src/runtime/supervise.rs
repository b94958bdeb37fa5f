//! Threads that never die silently: named spawns (a failure is counted and
//! logged), supervised loops (a panic is caught, logged, counted, and the
//! loop restarts after a growing pause), and where all that is reported.

use super::faults::FAIL_SPAWNS;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// Global for now: the runtime's panic reporting, used by threads handed no
// state of the module (see docs/DESIGN.md, "State ownership").
static RESTARTS: AtomicU64 = AtomicU64::new(0);
static FAILURES: AtomicU64 = AtomicU64::new(0);
static LOGGER: OnceLock<fn(&str)> = OnceLock::new();

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
