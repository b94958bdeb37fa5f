//! The live index behind an operation log, so the server's main thread never
//! walks the tree.
//!
//! The main thread (and the index build, on the main thread too) only
//! *pushes* operations: "key K in db D now has meta M", "db D was flushed",
//! "dbs A and B were swapped". An indexer thread applies them to the
//! [`Keyspace`] in order.
//!
//! A cursor-0 call *registers* a snapshot request at the current end of the
//! log ([`Live::open`]). Whoever applies the log (the indexer, or the worker
//! serving that call, in [`Live::take`]) clones the root exactly when the
//! log has been applied up to that point, before applying anything that
//! came later. The snapshot therefore contains exactly the writes that
//! completed before the cursor-0 call, however far the indexer has run.
//!
//! Locking: `queue` (short push/pop/register critical sections) and `index`
//! (held while applying a batch or reading the map). Operations are popped
//! and applied only while `index` is held, so they are applied in log order
//! and cuts happen at exact positions. If the log grows past
//! [`MAX_BACKLOG`] the pusher applies some of it itself (backpressure
//! instead of unbounded memory).

use super::{Change, Key, KeyMap, Keyspace, Meta, Snapshot};
use crate::slot::SlotSet;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

/// One change of the keyspace, in the order the server made it.
#[derive(Debug, Clone)]
pub enum Op {
    /// The truth about a key: `Some(meta)` if it exists.
    Set(usize, Key, Option<Meta>),
    Flush(usize),
    FlushAll,
    Swap(usize, usize),
    /// Keys of these slots left the node without a notification (cluster).
    PurgeSlots(Arc<SlotSet>),
}

/// Log length past which pushers apply part of it themselves.
pub const MAX_BACKLOG: usize = 1 << 20;
/// Operations applied per hold of the index lock by the indexer (about a
/// millisecond of work; a worker cutting a snapshot may wait that long).
const BATCH: usize = 1024;
/// Indexer pause when it has caught up.
const POLL: Duration = Duration::from_millis(2);

/// A snapshot requested at a position of the log.
pub struct OpenRequest {
    seq: u64,
    db: usize,
    at_ms: i64,
    slots: Option<Arc<SlotSet>>,
    cut: Mutex<Option<Arc<Snapshot>>>,
}

/// The log's operations in fixed-size chunks: a push never moves the ones
/// already queued (a single `VecDeque` doubling its buffer copied the whole
/// backlog, tens of MB after a burst, on the main thread), and a drained
/// chunk is kept for reuse or freed on its own.
#[derive(Default)]
struct OpLog {
    chunks: VecDeque<VecDeque<Op>>,
    len: usize,
    spare: Option<VecDeque<Op>>,
}

/// Operations per chunk of the log (about 200 KB).
const CHUNK: usize = 4096;

impl OpLog {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, op: Op) {
        match self.chunks.back_mut() {
            Some(c) if c.len() < CHUNK => c.push_back(op),
            _ => {
                let mut c = self
                    .spare
                    .take()
                    .unwrap_or_else(|| VecDeque::with_capacity(CHUNK));
                c.push_back(op);
                self.chunks.push_back(c);
            }
        }
        self.len += 1;
    }

    /// Removes and returns the first `n` operations (fewer if there are not
    /// that many).
    fn take_front(&mut self, n: usize) -> Vec<Op> {
        let n = n.min(self.len);
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let k = (n - out.len()).min(front.len());
            out.extend(front.drain(..k));
            if front.is_empty() {
                if let Some(c) = self.chunks.pop_front() {
                    if self.spare.is_none() {
                        self.spare = Some(c);
                    }
                }
            }
        }
        self.len -= out.len();
        out
    }
}

struct Queue {
    ops: OpLog,
    /// Snapshot requests by log position (number of operations before it).
    opens: BTreeMap<u64, Vec<Arc<OpenRequest>>>,
}

/// The index's figures for `INFO`, as of `applied` operations.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub applied: u64,
    /// Keys per non-empty database.
    pub sizes: Vec<(usize, usize)>,
    pub total: usize,
    pub memory_estimate: usize,
    /// Version of every database.
    pub versions: Vec<u64>,
}

impl Figures {
    fn of(ks: &Keyspace, applied: u64) -> Self {
        Figures {
            applied,
            sizes: ks.sizes(),
            total: ks.total_keys(),
            memory_estimate: ks.memory_estimate(),
            versions: (0..ks.databases()).map(|db| ks.version(db)).collect(),
        }
    }
}

pub struct Live {
    index: Mutex<Keyspace>,
    /// Figures published by whoever applied the last batch, for readers
    /// that must not wait for the index (the main thread).
    published: Mutex<Figures>,
    queue: Mutex<Queue>,
    /// Operations pushed so far (sequence number of the last one).
    pushed: AtomicU64,
    /// Operations applied so far.
    applied: AtomicU64,
    /// Threads waiting in `lock_fair`.
    waiting: AtomicUsize,
    changes: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Dispose<'a> = &'a dyn Fn(Vec<KeyMap>);

impl Live {
    pub fn new(databases: usize) -> Self {
        let index = Keyspace::new(databases);
        Live {
            published: Mutex::new(Figures::of(&index, 0)),
            index: Mutex::new(index),
            queue: Mutex::new(Queue {
                ops: OpLog::default(),
                opens: BTreeMap::new(),
            }),
            pushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            changes: AtomicU64::new(0),
        }
    }

    /// Appends an operation; returns its sequence number.
    pub fn push(&self, op: Op, dispose: Dispose) -> u64 {
        let (seq, backlog) = {
            let mut q = lock(&self.queue);
            q.ops.push(op);
            (self.pushed.fetch_add(1, Ordering::SeqCst) + 1, q.ops.len())
        };
        if backlog > MAX_BACKLOG {
            // Apply a batch here: bounded work, bounded memory. The
            // appliers step aside between their batches (`lock_fair`).
            let mut ks = self.lock_fair();
            self.apply_batch(&mut ks, BATCH, dispose);
        }
        seq
    }

    /// Requests a snapshot of `db` as of now (the current end of the log).
    pub fn open(&self, db: usize, at_ms: i64) -> Arc<OpenRequest> {
        self.open_in(db, at_ms, None)
    }

    /// [`open`](Self::open) for a snapshot that shows only keys of `slots`
    /// (if set; cluster mode).
    pub fn open_in(&self, db: usize, at_ms: i64, slots: Option<Arc<SlotSet>>) -> Arc<OpenRequest> {
        let mut q = lock(&self.queue);
        let seq = self.pushed.load(Ordering::SeqCst);
        let req = Arc::new(OpenRequest {
            seq,
            db,
            at_ms,
            slots,
            cut: Mutex::new(None),
        });
        q.opens.entry(seq).or_default().push(Arc::clone(&req));
        req
    }

    /// The snapshot of a request: applies the log up to its position if
    /// nobody has yet (cutting every request met on the way).
    pub fn take(&self, req: &OpenRequest, dispose: Dispose) -> Arc<Snapshot> {
        if let Some(s) = lock(&req.cut).take() {
            return s;
        }
        // One batch per hold of the index, handing it over between batches
        // to anyone waiting (the main thread pushing under backpressure).
        loop {
            let mut ks = self.lock_fair();
            if let Some(s) = self.take_step(&mut ks, req, dispose) {
                return s;
            }
            drop(ks);
            self.let_waiters_in();
        }
    }

    /// [`take`](Self::take) if that is cheap: nobody holds the index (the
    /// indexer applying a batch) and at most `max_apply` operations lie
    /// between the applied position and the request. Otherwise `None`, and
    /// the request stays registered for a later `take`.
    pub fn try_take(
        &self,
        req: &OpenRequest,
        max_apply: usize,
        dispose: Dispose,
    ) -> Option<Arc<Snapshot>> {
        if let Some(s) = lock(&req.cut).take() {
            return Some(s);
        }
        let mut ks = match self.index.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        let behind = req.seq.saturating_sub(self.applied.load(Ordering::SeqCst));
        if behind > max_apply as u64 {
            return None;
        }
        loop {
            if let Some(s) = self.take_step(&mut ks, req, dispose) {
                return Some(s);
            }
        }
    }

    /// One step towards cutting `req`: its snapshot if it is (or can now
    /// be) cut, else applies one batch of the log towards it.
    fn take_step(
        &self,
        ks: &mut Keyspace,
        req: &OpenRequest,
        dispose: Dispose,
    ) -> Option<Arc<Snapshot>> {
        if let Some(s) = lock(&req.cut).take() {
            return Some(s);
        }
        // Cuts due at the current position (e.g. this very request).
        self.cut_due(ks);
        if let Some(s) = lock(&req.cut).take() {
            return Some(s);
        }
        let want = req
            .seq
            .saturating_sub(self.applied.load(Ordering::SeqCst))
            .clamp(1, BATCH as u64) as usize;
        if self.apply_batch(ks, want, dispose) == 0 {
            // Nothing left to apply yet the request was not cut: only
            // possible if it was never registered; serve the present.
            return Some(ks.snapshot_with(req.db, req.at_ms, req.slots.clone()));
        }
        None
    }

    /// The index, taken in turn: threads that apply the log batch after
    /// batch step aside between batches while someone waits here. (The
    /// mutex is not fair: a thread relocking at once would keep a waiter,
    /// such as the main thread, out until the whole log is applied.)
    fn lock_fair(&self) -> MutexGuard<'_, Keyspace> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let g = lock(&self.index);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// Called between two batches, the index released: lets every thread
    /// waiting in [`lock_fair`](Self::lock_fair) take it first.
    fn let_waiters_in(&self) {
        while self.waiting.load(Ordering::SeqCst) > 0 {
            std::thread::yield_now();
        }
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

    /// The index's figures without waiting: read from the index if nobody
    /// holds it, else as published by the last batch applied. Never applies
    /// anything (on the main thread, applying a few hundred operations to a
    /// tree that does not fit the caches took milliseconds).
    pub fn figures(&self) -> Figures {
        match self.index.try_lock() {
            Ok(ks) => Figures::of(&ks, self.applied.load(Ordering::SeqCst)),
            Err(TryLockError::Poisoned(p)) => {
                Figures::of(&p.into_inner(), self.applied.load(Ordering::SeqCst))
            }
            Err(TryLockError::WouldBlock) => lock(&self.published).clone(),
        }
    }

    /// The index with every operation up to `upto` applied (for figures;
    /// snapshots use [`Live::open`] and [`Live::take`]).
    #[cfg(test)]
    pub fn sync(&self, upto: u64, dispose: Dispose) -> MutexGuard<'_, Keyspace> {
        let mut ks = lock(&self.index);
        while self.applied.load(Ordering::SeqCst) < upto {
            let want = (upto - self.applied.load(Ordering::SeqCst)).min(BATCH as u64) as usize;
            if self.apply_batch(&mut ks, want, dispose) == 0 {
                break;
            }
        }
        ks
    }

    /// Cuts every request registered at the current position.
    fn cut_due(&self, ks: &mut Keyspace) {
        let at = self.applied.load(Ordering::SeqCst);
        let due = lock(&self.queue).opens.remove(&at);
        for req in due.into_iter().flatten() {
            *lock(&req.cut) = Some(ks.snapshot_with(req.db, req.at_ms, req.slots.clone()));
        }
    }

    /// Applies up to `max` operations, stopping at every registered request
    /// to cut it. Returns how many were applied.
    fn apply_batch(&self, ks: &mut Keyspace, max: usize, dispose: Dispose) -> usize {
        let mut freed = Vec::new();
        let mut done = 0;
        let mut changed = 0;
        while done < max {
            self.cut_due(ks);
            // Pop up to the next registered request (or `max`).
            let batch: Vec<Op> = {
                let mut q = lock(&self.queue);
                let applied = self.applied.load(Ordering::SeqCst);
                let until_open = q
                    .opens
                    .keys()
                    .next()
                    .map_or(u64::MAX, |&s| s.saturating_sub(applied));
                let n = (max - done)
                    .min(q.ops.len())
                    .min(until_open.max(1) as usize);
                q.ops.take_front(n)
            };
            if batch.is_empty() {
                break;
            }
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
                    Op::PurgeSlots(slots) => changed += ks.purge_slots(slots) as u64,
                }
            }
            done += batch.len();
            self.applied.fetch_add(batch.len() as u64, Ordering::SeqCst);
        }
        self.cut_due(ks);
        self.changes.fetch_add(changed, Ordering::Relaxed);
        if done > 0 {
            *lock(&self.published) = Figures::of(ks, self.applied.load(Ordering::SeqCst));
        }
        if !freed.is_empty() {
            dispose(freed);
        }
        done
    }

    /// The indexer loop: applies the log as it arrives, forever. It polls
    /// (every [`POLL`] when idle) instead of being woken, so pushing costs
    /// the main thread no system call; snapshot requests never wait for the
    /// poll (the worker applies what it needs itself).
    pub fn run_indexer(&self, dispose: Dispose) {
        loop {
            let applied = {
                let mut ks = lock(&self.index);
                self.apply_batch(&mut ks, BATCH, dispose)
            };
            self.let_waiters_in();
            if applied < BATCH {
                std::thread::sleep(POLL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_op_log_keeps_order_across_chunks() {
        let mut log = OpLog::default();
        let op = |i: usize| Op::Swap(i, 0);
        let id = |o: &Op| match o {
            Op::Swap(i, _) => *i,
            _ => usize::MAX,
        };
        let mut next_in = 0;
        let mut next_out = 0;
        for round in 0..5 {
            for _ in 0..(CHUNK * 2 + 17 * round) {
                log.push(op(next_in));
                next_in += 1;
            }
            for take in [1, CHUNK - 1, CHUNK + 3, 5] {
                let got = log.take_front(take);
                assert_eq!(got.len(), take.min(next_in - next_out));
                for o in &got {
                    assert_eq!(id(o), next_out);
                    next_out += 1;
                }
                assert_eq!(log.len(), next_in - next_out);
            }
        }
        let rest = log.take_front(usize::MAX);
        assert_eq!(rest.len(), next_in - next_out);
        assert_eq!(log.len(), 0);
        assert!(log.take_front(10).is_empty());
        // A drained log reuses one chunk instead of allocating.
        assert!(log.spare.is_some());
        log.push(op(0));
        assert!(log.spare.is_none());
    }

    use super::super::meta::STRING;
    use super::*;

    fn put(db: usize, k: &str) -> Op {
        Op::Set(db, Key::new(k.as_bytes()), Some(Meta::new(STRING, None)))
    }

    const NOTHING: Dispose = &|_| {};

    #[test]
    fn a_snapshot_holds_exactly_the_log_before_its_request() {
        let live = Live::new(2);
        live.push(put(0, "a"), NOTHING);
        let req = live.open(0, 0);
        live.push(put(0, "b"), NOTHING);
        live.push(Op::Swap(0, 1), NOTHING);
        // Everything applied (as the indexer would) before the worker asks.
        drop(live.sync(live.pushed(), NOTHING));
        let snap = live.take(&req, NOTHING);
        assert_eq!(snap.map.len(), 1, "only the write before the request");
        let ks = live.sync(live.pushed(), NOTHING);
        assert_eq!((ks.len(0), ks.len(1)), (0, 2));
        drop(ks);
        assert_eq!(live.backlog(), 0);
        assert_eq!(live.changes(), 2);
    }

    #[test]
    fn requests_at_the_same_or_earlier_positions_are_each_exact() {
        let live = Live::new(1);
        let r0 = live.open(0, 0);
        live.push(put(0, "a"), NOTHING);
        let r1 = live.open(0, 0);
        let r1b = live.open(0, 0);
        live.push(put(0, "b"), NOTHING);
        let r2 = live.open(0, 0);
        // Taken in reverse order: the last one applies everything.
        assert_eq!(live.take(&r2, NOTHING).map.len(), 2);
        assert_eq!(live.take(&r1b, NOTHING).map.len(), 1);
        assert_eq!(live.take(&r1, NOTHING).map.len(), 1);
        assert_eq!(live.take(&r0, NOTHING).map.len(), 0);
    }

    #[test]
    fn indexer_running_ahead_never_leaks_later_writes_into_a_snapshot() {
        let live = Arc::new(Live::new(1));
        let l2 = Arc::clone(&live);
        std::thread::spawn(move || l2.run_indexer(NOTHING));
        for round in 0..200u32 {
            for i in 0..20u32 {
                live.push(put(0, &format!("k{round}:{i}")), NOTHING);
            }
            live.push(Op::Flush(0), NOTHING);
            let req = live.open(0, 0);
            for i in 0..20u32 {
                live.push(put(0, &format!("after{round}:{i}")), NOTHING);
            }
            if round % 2 == 0 {
                // Give the indexer time to run past the request.
                std::thread::sleep(Duration::from_millis(3));
            }
            let snap = live.take(&req, NOTHING);
            assert_eq!(
                snap.map.len(),
                0,
                "round {round}: exactly the state after the flush"
            );
        }
    }

    #[test]
    fn backlog_past_the_limit_is_partly_applied_by_the_pusher() {
        let live = Live::new(1);
        for i in 0..(MAX_BACKLOG + 10) {
            live.push(put(0, &format!("{i}")), NOTHING);
        }
        assert!(live.backlog() <= MAX_BACKLOG as u64);
    }
}
