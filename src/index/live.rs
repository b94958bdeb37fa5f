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

use super::filter::{KeyFilter, MIN_CAPACITY};
use super::meta::STRING;
use super::recent::Recent;
use super::{Key, KeyMap, Keyspace, Meta, Snapshot};
use crate::slot::SlotSet;
use arc_swap::{ArcSwap, ArcSwapOption};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

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
/// Longest wait of [`Live::take_within`] for an applier to hand the index
/// over (normally the end of its current chunk, microseconds).
const LOCK_WAIT: Duration = Duration::from_millis(25);
/// Indexer pause when it has caught up.
const POLL: Duration = Duration::from_millis(2);
/// Operations per lock hold of [`Live::take_within`], and per chunk of a
/// batch, after which an applier hands the index over to a waiting thread
/// (a few tens of microseconds).
const SMALL_BATCH: usize = 64;
/// Undo entries the collector examines after every batch, at least (see
/// `history::Undo::collect`).
const COLLECT_MIN: usize = 256;

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

    /// Puts operations taken by [`take_front`](Self::take_front) back in
    /// front of the log (the index lock held: nobody popped meanwhile).
    fn push_front(&mut self, ops: Vec<Op>) {
        self.len += ops.len();
        self.chunks.push_front(VecDeque::from(ops));
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
    /// The truth last logged for recently written keys (see [`Recent`]):
    /// updated by every push, under this lock.
    recent: Recent,
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
    /// Bytes of the tree nodes reachable from the live maps (the rest of
    /// [`super::tree::all_node_bytes`] is held by old versions).
    pub live_node_bytes: usize,
    /// Entries of the undo logs (old values kept for open snapshots), live
    /// entries keeping a change in place (a stamp or a tombstone), and the
    /// bytes of both (part of what old versions hold).
    pub history_entries: usize,
    pub history_in_place: usize,
    pub history_bytes: usize,
}

impl Figures {
    fn of(ks: &Keyspace, applied: u64) -> Self {
        Figures {
            applied,
            sizes: ks.sizes(),
            total: ks.total_keys(),
            memory_estimate: ks.live_bytes(),
            versions: (0..ks.databases()).map(|db| ks.version(db)).collect(),
            live_node_bytes: ks.live_node_bytes(),
            history_entries: ks.history_size().0,
            history_in_place: ks.history_size().1,
            history_bytes: ks.history_size().2,
        }
    }
}

pub struct Live {
    index: Mutex<Keyspace>,
    /// Figures published by whoever applied the last batch, for readers
    /// that must not wait for the index (the main thread): swapped in
    /// without a lock, read without waiting.
    published: ArcSwap<Figures>,
    /// Bytes of the live maps' nodes as of the last batch (see
    /// [`Figures::live_node_bytes`]).
    live_node_bytes: AtomicUsize,
    queue: Mutex<Queue>,
    /// Operations pushed so far (sequence number of the last one).
    pushed: AtomicU64,
    /// Operations applied so far.
    applied: AtomicU64,
    /// Threads waiting in `lock_fair`.
    waiting: AtomicUsize,
    changes: AtomicU64,
    /// Keys indexed as something else than a string without expiry (see
    /// [`KeyFilter`] and [`Live::push_truth`]).
    filter: ArcSwap<KeyFilter>,
    /// The filter being rebuilt: every key noted meanwhile goes to it too.
    next_filter: ArcSwapOption<KeyFilter>,
    /// Log position the rebuild scans the index at (or after); 0 = none.
    rebuild_at: AtomicU64,
    /// Truths not logged because they could not change the index.
    skipped: AtomicU64,
    /// Where the filter in use keeps its blocks, and its mask (see
    /// [`Live::prefetch`]; updated with `filter`, read without a lock: a
    /// torn pair only prefetches a useless address).
    filter_base: AtomicUsize,
    filter_mask: AtomicU64,
    /// Where the table of recent truths keeps its slots (it never moves).
    recent_base: usize,
    /// Bumped after every swap of `filter` (SeqCst: see [`Live::with_filter`]).
    filter_gen: AtomicU64,
}

/// The filter in use as its one writer last loaded it, with the generation
/// it had then: a plain load and compare per notification instead of a
/// guarded `ArcSwap` load. The writer of the filter (whoever records
/// truths: the holder of the server lock) owns exactly one and lends it to
/// [`Live::push_truth`] and [`Live::skip_if_plain_h`]; the `&mut` borrow
/// is what makes it one writer at a time.
#[derive(Default)]
pub struct FilterCache(Option<(u64, Arc<KeyFilter>)>);

/// What most keys are: a string without expiry.
const PLAIN: Meta = Meta::plain(STRING);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Dispose<'a> = &'a dyn Fn(Vec<KeyMap>);

impl Live {
    pub fn new(databases: usize) -> Self {
        let index = Keyspace::new(databases);
        let recent = Recent::default();
        let recent_base = recent.base();
        let filter = KeyFilter::new(MIN_CAPACITY);
        let (filter_base, filter_mask) = filter.layout();
        Live {
            published: ArcSwap::from_pointee(Figures::of(&index, 0)),
            live_node_bytes: AtomicUsize::new(0),
            index: Mutex::new(index),
            queue: Mutex::new(Queue {
                ops: OpLog::default(),
                recent,
                opens: BTreeMap::new(),
            }),
            pushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            changes: AtomicU64::new(0),
            filter: ArcSwap::from_pointee(filter),
            next_filter: ArcSwapOption::empty(),
            rebuild_at: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            filter_base: AtomicUsize::new(filter_base),
            filter_mask: AtomicU64::new(filter_mask),
            recent_base,
            filter_gen: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the filter in use, as cached for its writer.
    /// The indexer swaps a rebuilt filter in, then bumps `filter_gen`, then
    /// clears `rebuild_at` (all SeqCst); a holder that sees `rebuild_at`
    /// cleared therefore sees the new generation and reloads, so no key is
    /// added to a retired filter once keys stop going to both.
    #[inline]
    fn with_filter<R>(&self, cache: &mut FilterCache, f: impl FnOnce(&KeyFilter) -> R) -> R {
        let gen = self.filter_gen.load(Ordering::SeqCst);
        let filter = match cache.0.take() {
            Some((g, cached)) if g == gen => cached,
            _ => self.filter.load_full(),
        };
        let out = f(&filter);
        cache.0 = Some((gen, filter));
        out
    }

    /// Prefetches what recording the truth of `key` in `db` reads: its
    /// filter block and its slot of the table of recent truths, two cache
    /// misses in a large keyspace. Called as a notification starts, so
    /// that they overlap the server's own read of the key.
    /// Returns the key's hash, for [`skip_if_plain_h`](Self::skip_if_plain_h).
    #[inline]
    pub fn prefetch(&self, db: usize, key: &[u8]) -> u64 {
        let h = super::filter::hash(key);
        let base = self.filter_base.load(Ordering::Relaxed);
        let block = (h & self.filter_mask.load(Ordering::Relaxed)) as usize;
        super::prefetch::prefetch((base as *const u8).wrapping_add(block * 64));
        let slot = super::recent::slot_of(db, h) * super::recent::SLOT_BYTES;
        super::prefetch::prefetch((self.recent_base as *const u8).wrapping_add(slot));
        h
    }

    /// Records the truth about `key` in `db` (main thread), unless it
    /// cannot change the index: the key `existed` before the command that
    /// fired the event (no "new" event for it), it is now a string without
    /// expiry, and the filter of keys indexed as anything else does not
    /// hold it, so the index already says exactly that. Returns whether
    /// the truth was logged. `key`: the name, and its copy if the caller
    /// already made one (logged as is), and its
    /// [`hash`](super::filter::hash).
    #[inline]
    pub fn push_truth(
        &self,
        cache: &mut FilterCache,
        db: usize,
        (key, owned, h): (&[u8], Option<Key>, u64),
        truth: Option<Meta>,
        existed: bool,
        dispose: Dispose,
    ) -> bool {
        debug_assert_eq!(h, super::filter::hash(key));
        if !self.truth_may_change(cache, h, truth, existed) {
            return false;
        }
        let key = owned.unwrap_or_else(|| Key::new(key));
        self.log_truth(Op::Set(db, key, truth), existed, h, dispose)
    }

    /// [`push_truth`](Self::push_truth) for a key only its copy names.
    #[inline]
    pub fn push_owned_truth(
        &self,
        cache: &mut FilterCache,
        db: usize,
        (key, h): (Key, u64),
        truth: Option<Meta>,
        existed: bool,
        dispose: Dispose,
    ) -> bool {
        debug_assert_eq!(h, super::filter::hash(key.as_bytes()));
        if !self.truth_may_change(cache, h, truth, existed) {
            return false;
        }
        self.log_truth(Op::Set(db, key, truth), existed, h, dispose)
    }

    /// False for a truth that cannot change the index: a key that existed
    /// and is a plain string the index already holds as one. Notes a key
    /// with anything else than a plain string in the filter.
    #[inline(always)]
    fn truth_may_change(
        &self,
        cache: &mut FilterCache,
        h: u64,
        truth: Option<Meta>,
        existed: bool,
    ) -> bool {
        match truth {
            Some(m) if m == PLAIN && existed && self.skip_if_plain_h(cache, h) => false,
            Some(m) if m != PLAIN => {
                self.note_unusual(cache, h);
                true
            }
            _ => true,
        }
    }

    /// Logs `op` unless the recent-truth table says it changes nothing
    /// (an HSET, SADD, ZADD... on an existing collection).
    #[inline(always)]
    fn log_truth(&self, op: Op, existed: bool, h: u64, dispose: Dispose) -> bool {
        if self.push_inner(op, existed, Some(h), dispose).is_none() {
            let n = self.skipped.load(Ordering::Relaxed);
            self.skipped.store(n + 1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Whether the index holds `key` as a string without expiry, or does
    /// not hold it: the filter of keys indexed as anything else does not
    /// hold it. If so, counts a truth skipped (main thread, server lock).
    /// Only for a key that existed before the command (see
    /// [`push_truth`](Self::push_truth)) and is now a plain string; `h` is
    /// its hash.
    #[inline]
    pub fn skip_if_plain_h(&self, cache: &mut FilterCache, h: u64) -> bool {
        if self.with_filter(cache, |f| f.may_contain_h(h)) {
            return false;
        }
        // One writer at a time (the server lock): no locked add.
        let n = self.skipped.load(Ordering::Relaxed);
        self.skipped.store(n + 1, Ordering::Relaxed);
        true
    }

    /// Adds a key indexed as something else than a plain string to the
    /// filter (and to the one being rebuilt, first, so that a rebuild that
    /// swaps filters meanwhile cannot miss it); when the filter is full,
    /// asks the indexer for a rebuild from the index.
    fn note_unusual(&self, cache: &mut FilterCache, h: u64) {
        // No rebuild requested, no filter being rebuilt: only this thread
        // requests one (below), and the indexer clears `next_filter`
        // before `rebuild_at`. A plain load spares a guarded one.
        if self.rebuild_at.load(Ordering::SeqCst) != 0 {
            if let Some(next) = self.next_filter.load().as_ref() {
                next.add_h(h);
            }
        }
        // The filter in use is written by the server-lock holder only (a
        // rebuilt one is swapped in after the indexer is done with it).
        let (full, capacity) = self.with_filter(cache, |f| {
            f.add_sole_writer_h(h);
            (f.is_full(), f.capacity())
        });
        if full && self.rebuild_at.load(Ordering::SeqCst) == 0 {
            // Room for four times as many (each rebuild scans the whole
            // index), but no more than twice the index.
            let keys = self.published.load().total;
            let cap = (capacity * 4).min(keys.max(MIN_CAPACITY) * 2);
            self.next_filter.store(Some(Arc::new(KeyFilter::new(cap))));
            self.rebuild_at
                .store(self.pushed().max(1), Ordering::SeqCst);
        }
    }

    /// Rebuilds the filter if asked and the log has been applied up to the
    /// request: scans a snapshot of every database (taken in O(1) under the
    /// index lock, scanned without it) into the new filter, which the main
    /// thread has been adding to since the request, then swaps it in.
    /// Indexer thread.
    pub fn rebuild_filter_if_due(&self) {
        let at = self.rebuild_at.load(Ordering::SeqCst);
        let Some(next) = self.next_filter.load_full() else {
            return;
        };
        if at == 0 || self.applied.load(Ordering::SeqCst) < at {
            return;
        }
        let maps: Vec<KeyMap> = {
            let ks = lock(&self.index);
            if self.applied.load(Ordering::SeqCst) < at {
                return;
            }
            (0..ks.databases()).map(|db| ks.live_map(db)).collect()
        };
        for map in &maps {
            let mut it = map.iter();
            while let Some((k, m)) = it.next_entry() {
                if m != PLAIN {
                    next.add(k);
                }
            }
        }
        let (base, mask) = next.layout();
        self.filter.store(next);
        self.filter_base.store(base, Ordering::Relaxed);
        self.filter_mask.store(mask, Ordering::Relaxed);
        self.filter_gen.fetch_add(1, Ordering::SeqCst);
        self.next_filter.store(None);
        self.rebuild_at.store(0, Ordering::SeqCst);
    }

    /// Truths not logged because they could not change the index.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// Bytes of the filter(s).
    pub fn filter_bytes(&self) -> usize {
        self.filter.load().bytes() + self.next_filter.load().as_ref().map_or(0, |f| f.bytes())
    }

    /// Appends an operation; returns its sequence number.
    pub fn push(&self, op: Op, dispose: Dispose) -> u64 {
        self.push_inner(op, false, None, dispose).unwrap_or(0)
    }

    /// [`push`](Self::push); with `unless_known`, a `Set` whose truth is
    /// the one last logged for its key ([`Recent`]) is dropped instead
    /// (`None`).
    /// `h`: the key's hash, if the caller has it.
    fn push_inner(
        &self,
        op: Op,
        unless_known: bool,
        h: Option<u64>,
        dispose: Dispose,
    ) -> Option<u64> {
        let (seq, backlog) = {
            let mut q = lock(&self.queue);
            match &op {
                Op::Set(db, key, truth) => {
                    let h = h.unwrap_or_else(|| super::filter::hash(key.as_bytes()));
                    if unless_known && q.recent.holds_h(*db, h, key.as_bytes(), *truth) {
                        return None;
                    }
                    q.recent.logged_h(*db, h, key, *truth);
                }
                // Whole databases changed: nothing recent holds any more.
                Op::Flush(_) | Op::FlushAll | Op::Swap(..) | Op::PurgeSlots(_) => q.recent.clear(),
            }
            q.ops.push(op);
            // Every writer of `pushed` holds the queue lock: a plain store
            // (no locked read-modify-write on the main thread's hot path).
            // Release, not SeqCst (an exchange): readers only need to see
            // the operation queued once they see its number.
            let seq = self.pushed.load(Ordering::Relaxed) + 1;
            self.pushed.store(seq, Ordering::Release);
            (seq, q.ops.len())
        };
        if backlog > MAX_BACKLOG {
            // Apply a batch here: bounded work, bounded memory. The
            // appliers step aside between their batches (`lock_fair`).
            let mut ks = self.lock_fair();
            self.apply_batch(&mut ks, BATCH, dispose);
        }
        Some(seq)
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

    /// [`take`](Self::take) within a time budget, for the main thread:
    /// applies the log in small batches until the request is cut or
    /// `budget` has passed (waiting meanwhile, without blocking, for an
    /// indexer batch in progress). `None` when out of time: the request
    /// stays registered; [`cancel`](Self::cancel) it if it is given up.
    pub fn take_within(
        &self,
        req: &OpenRequest,
        budget: Duration,
        dispose: Dispose,
    ) -> Option<Arc<Snapshot>> {
        if let Some(s) = lock(&req.cut).take() {
            return Some(s);
        }
        // Waiting for the index is not work: an applier hands it over after
        // its current chunk of SMALL_BATCH operations, so the wait is that
        // chunk, unless the applier has lost its CPU (a saturated machine);
        // then it gets up to LOCK_WAIT before the call gives up.
        let wait_deadline = Instant::now() + budget.max(LOCK_WAIT);
        // Counted as waiting, so that an applier hands the index over after
        // its current chunk of SMALL_BATCH operations.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let got = loop {
            match self.index.try_lock() {
                Ok(g) => break Some(g),
                Err(TryLockError::Poisoned(p)) => break Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => {
                    if lock(&req.cut).is_some() || Instant::now() >= wait_deadline {
                        break None;
                    }
                    std::thread::yield_now();
                }
            }
        };
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let Some(mut ks) = got else {
            return lock(&req.cut).take();
        };
        // The work budget counts from here.
        let deadline = Instant::now() + budget;
        loop {
            if let Some(s) = lock(&req.cut).take() {
                return Some(s);
            }
            self.cut_due(&mut ks);
            if let Some(s) = lock(&req.cut).take() {
                return Some(s);
            }
            let want = req
                .seq
                .saturating_sub(self.applied.load(Ordering::SeqCst))
                .clamp(1, SMALL_BATCH as u64) as usize;
            if self.apply_batch(&mut ks, want, dispose) == 0 {
                // As in `take_step`: never registered; serve the present,
                // through the request's slot filter like any cut.
                return Some(ks.snapshot_with(req.db, req.at_ms, req.slots.clone()));
            }
            // The batch may have reached the request: cut it before the
            // deadline can turn a finished job into a refusal (a thread
            // that lost its CPU during the batch is past the deadline).
            self.cut_due(&mut ks);
            if let Some(s) = lock(&req.cut).take() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// Withdraws a request nobody will take (see [`take_within`](Self::take_within)).
    /// Returns its snapshot if it was cut meanwhile, for the caller to drop
    /// off the main thread.
    pub fn cancel(&self, req: &Arc<OpenRequest>) -> Option<Arc<Snapshot>> {
        {
            let mut q = lock(&self.queue);
            if let Some(v) = q.opens.get_mut(&req.seq) {
                v.retain(|r| !Arc::ptr_eq(r, req));
                if v.is_empty() {
                    q.opens.remove(&req.seq);
                }
            }
        }
        lock(&req.cut).take()
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
            Err(TryLockError::WouldBlock) => (**self.published.load()).clone(),
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
            let mut batch: Vec<Op> = {
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
            // Applied in chunks: someone waiting for the index (the main
            // thread) gets it after the current chunk, the rest of the
            // batch going back to the front of the log. Within a chunk,
            // runs of truths are looked up together (`Keyspace::apply_run`).
            let mut at = 0;
            let mut run: Vec<(usize, &Key, Option<Meta>)> = Vec::with_capacity(SMALL_BATCH);
            while at < batch.len() {
                let end = (at + SMALL_BATCH).min(batch.len());
                for op in &batch[at..end] {
                    if let Op::Set(db, key, truth) = op {
                        run.push((*db, key, *truth));
                        continue;
                    }
                    changed += ks.apply_run(&run) as u64;
                    run.clear();
                    match op {
                        Op::Set(..) => {}
                        Op::Flush(db) => freed.push(ks.flush(*db)),
                        Op::FlushAll => freed.extend(ks.flush_all()),
                        Op::Swap(a, b) => ks.swap(*a, *b),
                        Op::PurgeSlots(slots) => changed += ks.purge_slots(slots) as u64,
                    }
                }
                changed += ks.apply_run(&run) as u64;
                run.clear();
                done += end - at;
                self.applied.fetch_add((end - at) as u64, Ordering::SeqCst);
                at = end;
                if self.waiting.load(Ordering::Relaxed) > 0 {
                    break;
                }
            }
            drop(run);
            if at < batch.len() {
                let rest = batch.split_off(at);
                lock(&self.queue).ops.push_front(rest);
                break;
            }
            if self.waiting.load(Ordering::Relaxed) > 0 {
                break;
            }
        }
        self.cut_due(ks);
        freed.extend(ks.take_garbage());
        self.changes.fetch_add(changed, Ordering::Relaxed);
        if done > 0 {
            let f = Figures::of(ks, self.applied.load(Ordering::SeqCst));
            self.live_node_bytes
                .store(f.live_node_bytes, Ordering::Relaxed);
            self.published.store(Arc::new(f));
        }
        if !freed.is_empty() {
            dispose(freed);
        }
        done
    }

    /// Runs the undo logs' collector through a whole pass (in slices of
    /// [`BATCH`] entries, the index lock released between two): after
    /// iterations end, what only they needed is freed before the memory
    /// is measured again. Off the main thread only.
    pub fn collect_history(&self, dispose: Dispose) {
        lock(&self.index).restart_collection();
        for _ in 0..1_000_000 {
            let (done, freed) = {
                let mut ks = lock(&self.index);
                let done = ks.collect_history(BATCH);
                (done, ks.take_garbage())
            };
            if !freed.is_empty() {
                dispose(freed);
            }
            if done {
                return;
            }
        }
    }

    /// How long a used cursor may be sent again (the cursor registry's
    /// window): snapshots cut from now on keep what their iteration passed
    /// that long (see [`Keyspace::set_hold`]).
    pub fn set_retry_hold(&self, hold: std::time::Duration) {
        lock(&self.index).set_hold(hold);
    }

    /// Bytes of the live maps' nodes as of the last applied batch.
    pub fn live_node_bytes(&self) -> usize {
        self.live_node_bytes.load(Ordering::Relaxed)
    }

    /// The indexer loop: applies the log as it arrives, forever. It polls
    /// (every [`POLL`] when idle) instead of being woken, so pushing costs
    /// the main thread no system call; snapshot requests never wait for the
    /// poll (the worker applies what it needs itself). `after_batch` runs
    /// after every batch (and poll), without the index lock.
    pub fn run_indexer(&self, dispose: Dispose, after_batch: &dyn Fn(usize)) {
        loop {
            let applied = {
                let mut ks = lock(&self.index);
                let applied = self.apply_batch(&mut ks, BATCH, dispose);
                // The undo logs' collector keeps pace with what was applied
                // (and goes on when the log is idle: every poll). Here only,
                // never where the main thread applies a batch: a pass begins
                // by copying every open snapshot's position.
                ks.collect_history(2 * applied + COLLECT_MIN);
                let freed = ks.take_garbage();
                if !freed.is_empty() {
                    dispose(freed);
                }
                applied
            };
            self.let_waiters_in();
            after_batch(applied);
            self.rebuild_filter_if_due();
            // Caught up (a batch cut short by a waiting thread is not).
            if applied == 0 || (applied < BATCH && self.backlog() == 0) {
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
        assert_eq!(snap.entries(), 1, "only the write before the request");
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
        assert_eq!(live.take(&r2, NOTHING).entries(), 2);
        assert_eq!(live.take(&r1b, NOTHING).entries(), 1);
        assert_eq!(live.take(&r1, NOTHING).entries(), 1);
        assert_eq!(live.take(&r0, NOTHING).entries(), 0);
    }

    #[test]
    fn indexer_running_ahead_never_leaks_later_writes_into_a_snapshot() {
        let live = Arc::new(Live::new(1));
        let l2 = Arc::clone(&live);
        std::thread::spawn(move || l2.run_indexer(NOTHING, &|_| {}));
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
                snap.entries(),
                0,
                "round {round}: exactly the state after the flush"
            );
        }
    }

    /// A batch that reaches the request cuts it even when the budget ran
    /// out meanwhile (a main thread that lost its CPU mid-batch): the work
    /// is done, so the answer is the snapshot, not a refusal.
    #[test]
    fn take_within_cuts_a_request_its_last_batch_reached_past_the_deadline() {
        let live = Live::new(1);
        for i in 0..10 {
            live.push(put(0, &format!("k{i}")), NOTHING);
        }
        let req = live.open(0, 0);
        let snap = live.take_within(&req, Duration::ZERO, NOTHING);
        assert_eq!(snap.map(|s| s.entries()), Some(10));
        assert_eq!(live.backlog(), 0);
    }

    #[test]
    fn take_within_keeps_its_budget_and_a_cancelled_request_is_never_cut() {
        let live = Live::new(1);
        for i in 0..200_000 {
            live.push(put(0, &format!("k{i}")), NOTHING);
        }
        let req = live.open(0, 0);
        let t = Instant::now();
        let got = live.take_within(&req, Duration::from_millis(1), NOTHING);
        assert!(got.is_none(), "200k operations do not apply in 1 ms");
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
        assert!(live.backlog() > 0 && live.backlog() < 200_000);
        assert!(live.cancel(&req).is_none());
        // Withdrawn: applying everything cuts nothing for it.
        drop(live.sync(live.pushed(), NOTHING));
        assert!(lock(&req.cut).is_none());
        assert!(lock(&live.queue).opens.is_empty());
        // With the backlog gone, the same call succeeds at once.
        let req = live.open(0, 0);
        let snap = live.take_within(&req, Duration::from_millis(1), NOTHING);
        assert_eq!(snap.map(|s| s.entries()), Some(200_000));
    }

    #[test]
    fn an_applier_hands_the_index_over_after_one_chunk_to_a_waiting_thread() {
        let live = Live::new(1);
        // 100 keys written over and over: the last write of each must win.
        let n = 3 * BATCH;
        for i in 0..n {
            let meta = Meta::new(STRING, Some(i as i64));
            live.push(
                Op::Set(0, Key::new(format!("k{}", i % 100).as_bytes()), Some(meta)),
                NOTHING,
            );
        }
        let mut ks = lock(&live.index);
        assert_eq!(live.apply_batch(&mut ks, BATCH, NOTHING), BATCH);
        live.waiting.fetch_add(1, Ordering::SeqCst);
        assert_eq!(live.apply_batch(&mut ks, BATCH, NOTHING), SMALL_BATCH);
        live.waiting.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(live.apply_batch(&mut ks, BATCH, NOTHING), BATCH);
        // The rest of the interrupted batch was put back, in order.
        assert_eq!(
            live.apply_batch(&mut ks, BATCH, NOTHING),
            BATCH - SMALL_BATCH
        );
        assert_eq!(live.backlog(), 0);
        for k in 0..100 {
            let last = (0..n).rev().find(|i| i % 100 == k).unwrap();
            let got = ks
                .get(0, format!("k{k}").as_bytes())
                .and_then(|m| m.expire_at());
            assert_eq!(got, Some(last as i64), "k{k}");
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

    /// What `push_truth` logs, by what the log last said of the key:
    /// (writes so far, then the truth, whether the key existed, whether it
    /// is logged).
    #[rstest::rstest]
    #[case::repeated_on_existing_key(&[(0, "h", 2)], (0, "h", 2), true, false)]
    #[case::repeated_on_created_key(&[(0, "h", 2)], (0, "h", 2), false, true)]
    #[case::type_changed(&[(0, "h", 2)], (0, "h", 3), true, true)]
    #[case::other_database(&[(0, "h", 2)], (1, "h", 2), true, true)]
    #[case::deleted_then_repeated(&[(0, "h", 2), (0, "h", 0)], (0, "h", 2), true, true)]
    #[case::never_logged(&[], (0, "h", 2), true, true)]
    fn a_truth_already_logged_for_an_existing_key_is_not_logged_again(
        #[case] before: &[(usize, &str, u8)],
        #[case] now: (usize, &str, u8),
        #[case] existed: bool,
        #[case] logged: bool,
    ) {
        let meta = |t: u8| (t > 0).then(|| Meta::new(t - 1, None));
        let live = Live::new(2);
        for (db, k, t) in before {
            live.push_truth(
                &mut FilterCache::default(),
                *db,
                (k.as_bytes(), None, crate::index::filter::hash(k.as_bytes())),
                meta(*t),
                false,
                NOTHING,
            );
        }
        let pushed = live.pushed();
        let (db, k, t) = now;
        assert_eq!(
            live.push_truth(
                &mut FilterCache::default(),
                db,
                (k.as_bytes(), None, crate::index::filter::hash(k.as_bytes())),
                meta(t),
                existed,
                NOTHING
            ),
            logged
        );
        assert_eq!(live.pushed(), pushed + logged as u64);
        assert_eq!(live.skipped(), !logged as u64);
    }

    /// After a flush, swap or purge is logged, the same truth is logged
    /// again: the key may be gone or elsewhere.
    #[rstest::rstest]
    #[case::flush(Op::Flush(0))]
    #[case::flush_all(Op::FlushAll)]
    #[case::swap(Op::Swap(0, 1))]
    #[case::purge(Op::PurgeSlots(Arc::new(SlotSet::default())))]
    fn whole_database_changes_forget_what_was_logged(#[case] op: Op) {
        let hash = Some(Meta::new(2, None));
        let live = Live::new(2);
        assert!(live.push_truth(
            &mut FilterCache::default(),
            0,
            (b"h", None, crate::index::filter::hash(b"h")),
            hash,
            false,
            NOTHING
        ));
        assert!(!live.push_truth(
            &mut FilterCache::default(),
            0,
            (b"h", None, crate::index::filter::hash(b"h")),
            hash,
            true,
            NOTHING
        ));
        live.push(op, NOTHING);
        assert!(live.push_truth(
            &mut FilterCache::default(),
            0,
            (b"h", None, crate::index::filter::hash(b"h")),
            hash,
            true,
            NOTHING
        ));
        let ks = live.sync(live.pushed(), NOTHING);
        assert_eq!(ks.get(0, b"h"), hash);
    }
}
