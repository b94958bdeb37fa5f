//! The live index behind an operation log, so the server's main thread never
//! walks the tree.
//!
//! The main thread (and the backfill, under the server lock) only *pushes*
//! operations: "key K in db D now has meta M", "is gone", "db D was
//! flushed", "dbs A and B were swapped". An indexer thread applies them to
//! the [`Keyspace`] in order. Whoever needs the index as of a point in the
//! log (a worker opening a snapshot for a cursor-0 call) calls
//! [`Live::sync`] with the sequence number observed at that point: it takes
//! the index lock and applies the log up to there itself if the indexer has
//! not yet. The snapshot therefore contains exactly the writes that
//! completed before the cursor-0 call.
//!
//! Locking: `queue` (a short push/pop critical section) and `index` (held
//! while applying a batch or reading the map). Operations are popped only
//! while `index` is held, so they are applied in log order. If the log grows
//! past [`MAX_BACKLOG`] the pusher applies it itself (backpressure instead of
//! unbounded memory).

use super::{Change, Key, KeyMap, Keyspace, Meta};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// One change of the keyspace, in the order the server made it.
#[derive(Debug, Clone)]
pub enum Op {
    /// The truth about a key: `Some(meta)` if it exists.
    Set(usize, Key, Option<Meta>),
    Flush(usize),
    FlushAll,
    Swap(usize, usize),
}

/// Log length past which pushers apply it themselves.
pub const MAX_BACKLOG: usize = 1 << 20;
/// Operations applied per hold of the index lock by the indexer.
const BATCH: usize = 4096;
/// Indexer pause when it has caught up.
const POLL: Duration = Duration::from_millis(2);

pub struct Live {
    index: Mutex<Keyspace>,
    queue: Mutex<VecDeque<Op>>,
    /// Operations pushed so far (sequence number of the last one).
    pushed: AtomicU64,
    /// Operations applied so far.
    applied: AtomicU64,
    changes: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Live {
    pub fn new(databases: usize) -> Self {
        Live {
            index: Mutex::new(Keyspace::new(databases)),
            queue: Mutex::new(VecDeque::new()),
            pushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            changes: AtomicU64::new(0),
        }
    }

    /// Appends an operation; returns its sequence number. `dispose`
    /// receives maps freed by flushes if the pusher has to apply the log.
    pub fn push(&self, op: Op, dispose: &dyn Fn(Vec<KeyMap>)) -> u64 {
        let (seq, backlog) = {
            let mut q = lock(&self.queue);
            q.push_back(op);
            (self.pushed.fetch_add(1, Ordering::SeqCst) + 1, q.len())
        };
        if backlog > MAX_BACKLOG {
            drop(self.sync(seq, dispose));
        }
        seq
    }

    /// Sequence number of the last pushed operation.
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::SeqCst)
    }

    /// Operations waiting to be applied.
    pub fn backlog(&self) -> u64 {
        self.pushed()
            .saturating_sub(self.applied.load(Ordering::SeqCst))
    }

    /// Index changes made so far (operations that changed something).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// The index with every operation up to `upto` applied (and possibly
    /// a few more only if `upto` is `u64::MAX`).
    pub fn sync(&self, upto: u64, dispose: &dyn Fn(Vec<KeyMap>)) -> MutexGuard<'_, Keyspace> {
        let mut ks = lock(&self.index);
        while self.applied.load(Ordering::SeqCst) < upto {
            let want = (upto - self.applied.load(Ordering::SeqCst)).min(BATCH as u64) as usize;
            if self.apply_batch(&mut ks, want, dispose) == 0 {
                break;
            }
        }
        ks
    }

    fn apply_batch(&self, ks: &mut Keyspace, max: usize, dispose: &dyn Fn(Vec<KeyMap>)) -> usize {
        let batch: Vec<Op> = {
            let mut q = lock(&self.queue);
            let n = max.min(q.len());
            let batch = q.drain(..n).collect();
            if q.is_empty() && q.capacity() > 4 * BATCH {
                // Give back what a burst (a backfill, a big load) grew.
                q.shrink_to(BATCH);
            }
            batch
        };
        let mut freed = Vec::new();
        let mut changed = 0;
        for op in &batch {
            match op {
                Op::Set(db, key, truth) => {
                    if ks.apply(*db, key, *truth) != Change::Unchanged {
                        changed += 1;
                    }
                }
                Op::Flush(db) => freed.push(ks.flush(*db)),
                Op::FlushAll => freed.extend(ks.flush_all()),
                Op::Swap(a, b) => ks.swap(*a, *b),
            }
        }
        self.changes.fetch_add(changed, Ordering::Relaxed);
        self.applied.fetch_add(batch.len() as u64, Ordering::SeqCst);
        if !freed.is_empty() {
            dispose(freed);
        }
        batch.len()
    }

    /// The indexer loop: applies the log as it arrives, forever. It polls
    /// (every [`POLL`] when idle) instead of being woken, so pushing costs
    /// the main thread no system call; readers that need the latest state
    /// call [`Live::sync`] and never wait for the poll.
    pub fn run_indexer(&self, dispose: &dyn Fn(Vec<KeyMap>)) {
        loop {
            let applied = {
                let mut ks = lock(&self.index);
                self.apply_batch(&mut ks, BATCH, dispose)
            };
            if applied < BATCH {
                std::thread::sleep(POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::meta::STRING;
    use super::*;
    use std::sync::Arc;

    fn put(db: usize, k: &str) -> Op {
        Op::Set(db, Key::new(k.as_bytes()), Some(Meta::new(STRING, None)))
    }

    #[test]
    fn sync_applies_exactly_up_to_the_sequence_number() {
        let live = Live::new(2);
        let nothing = |_: Vec<KeyMap>| {};
        let s1 = live.push(put(0, "a"), &nothing);
        live.push(put(0, "b"), &nothing);
        live.push(Op::Swap(0, 1), &nothing);
        {
            let ks = live.sync(s1, &nothing);
            assert_eq!(ks.len(0), 1, "only the first operation");
        }
        let ks = live.sync(live.pushed(), &nothing);
        assert_eq!((ks.len(0), ks.len(1)), (0, 2));
        drop(ks);
        assert_eq!(live.backlog(), 0);
        assert_eq!(live.changes(), 2);
    }

    #[test]
    fn indexer_thread_and_syncing_readers_agree_with_the_log_order() {
        let live = Arc::new(Live::new(1));
        let l2 = Arc::clone(&live);
        std::thread::spawn(move || l2.run_indexer(&|_| {}));
        let nothing = |_: Vec<KeyMap>| {};
        for round in 0..200u32 {
            for i in 0..50u32 {
                live.push(put(0, &format!("k{round}:{i}")), &nothing);
            }
            let seq = live.push(Op::Flush(0), &nothing);
            live.push(put(0, "after"), &nothing);
            let ks = live.sync(seq, &nothing);
            // Exactly the state right after the flush, or later (the indexer
            // may have applied "after" already), never before it.
            assert!(ks.len(0) <= 1, "round {round}: {}", ks.len(0));
        }
    }

    #[test]
    fn backlog_past_the_limit_is_applied_by_the_pusher() {
        let live = Live::new(1);
        let nothing = |_: Vec<KeyMap>| {};
        for i in 0..(MAX_BACKLOG + 10) {
            live.push(put(0, &format!("{i}")), &nothing);
        }
        assert!(live.backlog() <= MAX_BACKLOG as u64);
    }
}
