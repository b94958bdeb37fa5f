//! The module's own threads, and nothing of the server: the worker pool
//! ([`pool`]), the reaper ([`reaper`]), supervision of thread loops and
//! spawns ([`supervise`]), and test-only faults ([`faults`]). Threads lower
//! their own scheduling priority (`nice`) so that on a small machine the
//! server's main thread wins the CPU when both want it.
//!
//! No thread dies silently: a panic in a job, a destructor or a service
//! loop ([`Threads::run_supervised`]) is caught, logged through the
//! function [`Threads`] was made with and counted ([`Threads::restarts`]);
//! the loop restarts after a pause that grows with repeated panics (10 ms
//! doubling to 5 s). A thread that cannot be started is counted
//! ([`Threads::failures`]) and logged; its owner retries later (see
//! `state::ensure_threads`).
//!
//! Owns: no process-wide state. [`Threads`] (the counters, the log, the
//! test faults) is one value per `Module` (`state::Shared::threads`); the
//! pool, the reaper and the module's loops are handed `&'static` to it.
//!
//! May touch: std, and the server layer only to set a thread's niceness.

pub mod faults;
pub mod pool;
pub mod reaper;
pub mod supervise;

pub use faults::{Fault, Faults};
pub use pool::{set_thread_nice, Job, Pool};
pub use reaper::Reaper;
pub use supervise::Threads;

#[cfg(test)]
mod tests {
    use super::*;
    use reaper::WAKE_AT;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::channel;
    use std::sync::Arc;
    use std::time::Duration;
    use std::time::Instant;

    /// What a test's threads report to: its own, counted from 0.
    fn threads() -> &'static Threads {
        Threads::leak(|_| {})
    }

    /// A pool of `n` threads at niceness `nice`.
    fn pool(name: &'static str, n: usize, nice: usize) -> Pool {
        let pool = Pool::new(name, threads(), nice);
        pool.resize(n);
        pool
    }

    fn reaper() -> Reaper {
        let r = Reaper::new(threads());
        assert!(r.ensure_running());
        r
    }

    #[test]
    fn runs_jobs_survives_panics_and_resizes() {
        let rt = threads();
        let pool = Pool::new("t", rt, 5);
        assert_eq!(pool.threads(), 0, "no thread before the first resize");
        pool.resize(2);
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
        // Counted by its worker right after the unwind (the other worker
        // may have run the rest meanwhile).
        let deadline = Instant::now() + Duration::from_secs(5);
        while rt.restarts() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(rt.restarts(), 1, "the job's panic is counted");
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
        let pool = pool("r", 4, 0);
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
        let reaper = reaper();
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
        let rt = threads();
        rt.run_supervised("t", &|| {
            if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                panic!("boom");
            }
        });
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(rt.restarts(), 2);
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
        let reaper = reaper();
        reaper.dispose(Bomb);
        wait_for(&dropped, 0);
        reaper.dispose(Counted(Arc::clone(&dropped)));
        wait_for(&dropped, 1);
        assert!(reaper.is_running());
    }

    #[test]
    fn injected_faults_fire_once() {
        let f = &threads().faults;
        f.inject(Fault::Janitor);
        assert!(!f.take(Fault::Indexer));
        assert!(f.take(Fault::Janitor));
        assert!(!f.take(Fault::Janitor));
    }

    #[test]
    fn failed_spawns_are_counted_and_the_next_ones_work() {
        let rt = threads();
        rt.faults.fail_next_spawns(2);
        let pool = Pool::new("f", rt, 0);
        pool.resize(1);
        assert_eq!((pool.threads(), rt.failures()), (0, 1));
        let r = Reaper::new(rt);
        assert!(!r.ensure_running());
        assert_eq!((r.is_running(), rt.failures()), (false, 2));
        pool.resize(1);
        assert!(r.ensure_running());
        assert_eq!(
            (pool.threads(), r.is_running(), rt.failures()),
            (1, true, 2)
        );
    }

    #[test]
    fn dropping_the_reaper_drops_what_it_holds() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let reaper = reaper();
        for _ in 0..10 {
            reaper.dispose(Counted(Arc::clone(&dropped)));
        }
        drop(reaper);
        wait_for(&dropped, 10);
    }

    #[test]
    fn an_idle_pool_wakes_for_a_job_and_a_busy_one_drains_its_queue() {
        let pool = pool("w", 1, 0);
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
