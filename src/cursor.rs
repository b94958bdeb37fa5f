//! Cursor registry: maps the cursor numbers handed to clients to the state
//! needed to continue an iteration (a snapshot and a position).
//!
//! Pure Rust; time is passed in (monotonic milliseconds) so rules are
//! unit-testable.
//!
//! Rules (documented in the README):
//! - continuing a cursor removes its entry and the next page gets a new
//!   cursor number; [`Registry::take_retryable`] keeps a copy so that the
//!   same cursor sent again within [`RETRY_MS`] gets the same page;
//! - an entry idle for longer than the idle timeout is dropped;
//! - at most `max_open` entries exist; inserting past the limit evicts the
//!   least recently used iteration that was *never continued* (a client that
//!   only ever sends cursor 0), and only when there is none, the least
//!   recently used continued one. Insertion therefore never fails.
//!
//! - [`Registry::evict_lru`] ends the least recently used iterations (to
//!   bound the memory their snapshots hold); their cursors are remembered
//!   (the last [`TOMBSTONES`]) so that their next call can say why.
//!
//! - every cursor number issued lies in `[2^52, 2^53)` ([`ISSUED_BIT`] set):
//!   a native SCAN cursor (a bucket position, below 2^52 on any table a
//!   server can hold: 2^38 buckets in one slot's table even in a cluster,
//!   whose cursors carry the slot in their low 14 bits) is never mistaken
//!   for one (see `native`), and a double holds it exactly (JavaScript
//!   clients such as node-redis 4 parse cursors as Numbers). The numbers
//!   are a keyed permutation of a counter, its keys drawn from the OS's
//!   randomness per registry: unique, and unguessable from other cursors;
//! - [`Registry::take_retryable`] keeps a used cursor answerable for
//!   [`RETRY_MS`] (at most [`SPENT_MAX`] of them): a client that lost a
//!   reply and sends the cursor again gets the same page. The copies go
//!   first in [`Registry::evict_lru`], and [`Registry::expire_idle`] drops
//!   those past their window.
//!
//! Each entry may belong to a *group* (for SNAPSHOT.SCAN: the database and
//! version of its snapshot); the registry counts entries per group as they
//! come and go, so the number of distinct groups is known in O(1).
//!
//! Locking: every method takes one internal mutex for O(log n) work; values
//! removed from the registry are handed back to the caller so they are
//! dropped outside the lock (and off the server's main thread).
//!
//! Bulk removals are bounded per hold of that mutex, whatever
//! `max_open` allows (up to 1,000,000 entries): an insertion evicts at most
//! [`EVICT_PER_INSERT`] entries, and [`Registry::trim`] (the surplus over a
//! lowered limit), [`Registry::expire_idle`] and [`Registry::evict_lru`]
//! end at most [`CHUNK`] entries per hold, releasing the mutex in between
//! and first letting in any thread waiting for it (the server's main thread
//! among them).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What an entry shares its memory with (see the module docs).
pub type Group = Option<(usize, u64)>;

/// Cursors of iterations ended by [`Registry::evict_lru`] remembered at most.
pub const TOMBSTONES: usize = 65_536;

/// Entries one hold of the registry's mutex ends at most in a bulk removal
/// ([`Registry::trim`], [`Registry::expire_idle`], [`Registry::evict_lru`]).
pub const CHUNK: usize = 1024;

/// Entries one insertion evicts at most. At an unchanged limit an insertion
/// evicts one; after the limit is lowered far below the open count, each
/// insertion shrinks the surplus by this many less one, and
/// [`Registry::trim`] ends the rest.
pub const EVICT_PER_INSERT: usize = 64;

/// How long a bulk removal waits, between two chunks, for the threads
/// waiting for the mutex to have taken it.
const LET_IN_MAX: Duration = Duration::from_millis(2);

/// One open iteration.
pub struct Entry<T> {
    pub value: T,
    /// Database the iteration belongs to (`usize::MAX` when not applicable).
    pub db: usize,
    /// Pages already served (1 after the cursor-0 call).
    pub pages: u64,
    /// When the iteration began (the caller's clock, e.g. Unix ms), for
    /// the oldest open iteration in [`Stats`]; `None`: not tracked.
    opened_ms: Option<i64>,
    tick: u64,
    last_used_ms: u64,
    group: Group,
}

struct Inner<T> {
    entries: HashMap<u64, Entry<T>>,
    /// LRU order (tick -> id) of iterations that were never continued.
    fresh: BTreeMap<u64, u64>,
    /// LRU order of iterations that were continued at least once.
    continued: BTreeMap<u64, u64>,
    tick: u64,
    counter: u64,
    evicted: u64,
    expired: u64,
    /// Open entries per group.
    groups: HashMap<(usize, u64), usize>,
    /// Open entries by the time they began (those that say).
    opened: BTreeSet<(i64, u64)>,
    /// Iterations ended by `evict_lru`: their cursors, oldest first.
    tomb_order: VecDeque<u64>,
    /// The same, with the caller's reason for each (see `evict_lru`).
    tombs: HashMap<u64, u8>,
    evicted_memory: u64,
    /// Used cursors answerable for a retry, and their order of use.
    spent: HashMap<u64, Spent<T>>,
    spent_order: VecDeque<u64>,
}

impl<T> Inner<T> {
    /// Removes `id` from every structure; keeps the group counts true.
    fn unlink(&mut self, id: u64) -> Option<Entry<T>> {
        let e = self.entries.remove(&id)?;
        if let Some(t) = e.opened_ms {
            self.opened.remove(&(t, id));
        }
        self.fresh.remove(&e.tick);
        self.continued.remove(&e.tick);
        if let Some(g) = e.group {
            if let Some(n) = self.groups.get_mut(&g) {
                *n -= 1;
                if *n == 0 {
                    self.groups.remove(&g);
                }
            }
        }
        Some(e)
    }

    /// The least recently used entry (inserted earliest: a continuation is
    /// a new insertion).
    fn lru(&self) -> Option<u64> {
        match (
            self.fresh.first_key_value(),
            self.continued.first_key_value(),
        ) {
            (Some((a, &ia)), Some((b, &ib))) => Some(if a < b { ia } else { ib }),
            (Some((_, &i)), None) | (None, Some((_, &i))) => Some(i),
            (None, None) => None,
        }
    }

    /// Evicts at the limit, at most `n` entries, while more than `keep`
    /// are open: the least recently used never-continued iteration first,
    /// and only when there is none the least recently used continued one.
    fn evict_over(&mut self, keep: usize, n: usize, out: &mut Vec<T>) {
        let mut ended = 0;
        while ended < n && self.entries.len() > keep {
            let victim = self
                .fresh
                .first_key_value()
                .or_else(|| self.continued.first_key_value())
                .map(|(_, &id)| id);
            match victim.and_then(|id| self.unlink(id)) {
                Some(e) => {
                    self.evicted += 1;
                    ended += 1;
                    out.push(e.value);
                }
                None => break,
            }
        }
    }
}

/// See the module docs.
pub struct Registry<T> {
    inner: Mutex<Inner<T>>,
    /// The keys of the cursor numbers' permutation (see [`permute52`]).
    keys: std::collections::hash_map::RandomState,
    /// Threads waiting for `inner` in [`Registry::lock`]: a bulk removal
    /// lets them in between two chunks (the mutex is not fair: a thread
    /// that unlocks and relocks at once would keep them out).
    waiting: AtomicUsize,
    /// Entries one bulk hold ends at most ([`CHUNK`]; smaller in tests).
    chunk: usize,
    /// How long a used cursor stays answerable: [`RETRY_MS`] (shorter
    /// only under the integration tests' hooks, see `commands::testhook`).
    retry_ms: AtomicU64,
}

/// Counters exposed in INFO.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub open: usize,
    /// Copies of used cursors kept for a retry (each may hold a snapshot).
    pub spent: usize,
    pub evicted: u64,
    pub expired: u64,
    /// Iterations ended by [`Registry::evict_lru`].
    pub evicted_memory: u64,
    /// The open iteration that began first (of those that say when):
    /// when it began and the pages it was served.
    pub oldest: Option<(i64, u64)>,
}

/// Where an entry goes: its group, database, pages served so far and when
/// its iteration began (see [`Entry`]).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub group: Group,
    pub db: usize,
    pub pages: u64,
    pub opened_ms: Option<i64>,
}

const MASK52: u64 = (1 << 52) - 1;

/// Set in every cursor number the registry issues (see the module docs):
/// they lie in `[2^52, 2^53)`.
pub const ISSUED_BIT: u64 = 1 << 52;

/// Whether `c` has the form of a cursor the registry issues.
pub fn is_issued(c: u64) -> bool {
    c >> 52 == 1
}

/// How long a used cursor stays answerable for a retry (milliseconds).
pub const RETRY_MS: u64 = 10_000;

/// Used cursors kept answerable at most (the oldest go first).
pub const SPENT_MAX: usize = 4096;

/// A used cursor kept for a retry.
struct Spent<T> {
    value: T,
    db: usize,
    pages: u64,
    used_ms: u64,
}

/// A keyed bijection on 52-bit integers (a 4-round Feistel network on two
/// 26-bit halves, its round function SipHash keyed by `keys`): distinct
/// counters give distinct cursor numbers, which nobody without the keys
/// can tell from random or derive from one another.
fn permute52(keys: &impl std::hash::BuildHasher, x: u64) -> u64 {
    const HALF: u64 = (1 << 26) - 1;
    let (mut l, mut r) = ((x >> 26) & HALF, x & HALF);
    for round in 0u64..4 {
        let f = keys.hash_one((round, r)) & HALF;
        (l, r) = (r, l ^ f);
    }
    ((l << 26) | r) & MASK52
}

impl<T> Registry<T> {
    /// `seed` makes cursor numbers differ between server runs, so a cursor
    /// from before a restart is reported as unknown instead of aliasing.
    pub fn new(seed: u64) -> Self {
        Self::with_chunk(seed, CHUNK)
    }

    /// [`new`](Self::new) with bulk removals of `chunk` entries per hold.
    fn with_chunk(seed: u64, chunk: usize) -> Self {
        Registry {
            keys: std::collections::hash_map::RandomState::new(),
            waiting: AtomicUsize::new(0),
            chunk: chunk.max(1),
            retry_ms: AtomicU64::new(RETRY_MS),
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                fresh: BTreeMap::new(),
                continued: BTreeMap::new(),
                tick: 0,
                counter: seed,
                evicted: 0,
                expired: 0,
                groups: HashMap::new(),
                opened: BTreeSet::new(),
                tomb_order: VecDeque::new(),
                tombs: HashMap::new(),
                evicted_memory: 0,
                spent: HashMap::new(),
                spent_order: VecDeque::new(),
            }),
        }
    }

    /// Sets how long a used cursor stays answerable (test hooks only: the
    /// window is [`RETRY_MS`] otherwise).
    pub fn set_retry_ms(&self, ms: u64) {
        self.retry_ms.store(ms, Ordering::Relaxed);
    }

    fn retry_ms(&self) -> u64 {
        self.retry_ms.load(Ordering::Relaxed)
    }

    /// The mutex, for O(log n) work (counted as waiting meanwhile, so that
    /// bulk removals let this thread in between their chunks).
    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let g = self.lock_bulk();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// The mutex, for one chunk of a bulk removal.
    fn lock_bulk(&self) -> MutexGuard<'_, Inner<T>> {
        // A panic while holding the lock cannot leave the maps inconsistent
        // in a way that matters more than losing the server: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Between two chunks of a bulk removal, the mutex released: lets the
    /// threads waiting for it take it first (for at most [`LET_IN_MAX`], so
    /// a steady stream of callers cannot stall the removal).
    fn let_waiters_in(&self) {
        let start = Instant::now();
        while self.waiting.load(Ordering::SeqCst) > 0 && start.elapsed() < LET_IN_MAX {
            std::thread::yield_now();
        }
    }

    /// Runs `chunk` under the mutex again and again, handing each chunk's
    /// values to `dispose` outside it, until a chunk ends nothing or
    /// `chunk` says it was the last; returns how many were ended.
    fn in_chunks(
        &self,
        mut chunk: impl FnMut(&mut Inner<T>, usize, &mut Vec<T>) -> bool,
        mut dispose: impl FnMut(Vec<T>),
    ) -> usize {
        let mut total = 0;
        loop {
            let mut out = Vec::new();
            let more = chunk(&mut self.lock_bulk(), self.chunk, &mut out);
            let n = out.len();
            if n > 0 {
                total += n;
                dispose(out);
            }
            if n == 0 || !more {
                return total;
            }
            self.let_waiters_in();
        }
    }

    /// Registers a continuation and returns its cursor number together with
    /// any values evicted to stay within `max_open` (at most
    /// [`EVICT_PER_INSERT`]: see [`trim`](Self::trim) for the rest).
    pub fn insert(
        &self,
        value: T,
        db: usize,
        pages: u64,
        now_ms: u64,
        max_open: usize,
    ) -> (u64, Vec<T>) {
        let at = Placement {
            group: None,
            db,
            pages,
            opened_ms: None,
        };
        self.insert_in(value, at, now_ms, max_open)
    }

    /// [`insert`](Self::insert) of an entry placed as `at` says.
    pub fn insert_in(
        &self,
        value: T,
        at: Placement,
        now_ms: u64,
        max_open: usize,
    ) -> (u64, Vec<T>) {
        let Placement {
            group,
            db,
            pages,
            opened_ms,
        } = at;
        let mut g = self.lock();
        let inner = &mut *g;
        let mut evicted = Vec::new();
        inner.evict_over(max_open.max(1) - 1, EVICT_PER_INSERT, &mut evicted);
        let id = loop {
            inner.counter = inner.counter.wrapping_add(1);
            let id = permute52(&self.keys, inner.counter & MASK52) | ISSUED_BIT;
            if !inner.entries.contains_key(&id) && !inner.spent.contains_key(&id) {
                break id;
            }
        };
        inner.tick += 1;
        let tick = inner.tick;
        if pages > 1 {
            inner.continued.insert(tick, id);
        } else {
            inner.fresh.insert(tick, id);
        }
        if let Some(g) = group {
            *inner.groups.entry(g).or_insert(0) += 1;
        }
        if let Some(t) = opened_ms {
            inner.opened.insert((t, id));
        }
        inner.entries.insert(
            id,
            Entry {
                value,
                db,
                pages,
                opened_ms,
                tick,
                last_used_ms: now_ms,
                group,
            },
        );
        (id, evicted)
    }

    /// Removes and returns the iteration behind `id`, keeping no copy.
    #[cfg(test)]
    pub fn take(&self, id: u64) -> Option<Entry<T>> {
        self.lock().unlink(id)
    }

    /// Removes the iteration behind `id` if `check` (given its database
    /// and value) accepts it: `Err(None)` for an unknown cursor,
    /// `Err(Some(reason))` when `check` refuses (the entry then stays
    /// registered). A client may send the cursor again (a retry after a
    /// lost reply): a copy stays answerable for [`RETRY_MS`], so the same
    /// cursor gets the same continuation again, checked the same way. Also
    /// returns the copies that aged out, to be dropped off the main thread.
    pub fn take_retryable<E>(
        &self,
        id: u64,
        now_ms: u64,
        check: impl FnOnce(usize, &T) -> Result<(), E>,
    ) -> (Result<Entry<T>, Option<E>>, Vec<T>)
    where
        T: Clone,
    {
        let retry_ms = self.retry_ms();
        let mut g = self.lock();
        let inner = &mut *g;
        let mut aged = Vec::new();
        age_spent(inner, now_ms, retry_ms, SPENT_MAX, usize::MAX, &mut aged);
        if let Some(s) = inner.spent.get(&id) {
            if let Err(e) = check(s.db, &s.value) {
                return (Err(Some(e)), aged);
            }
            inner.tick += 1;
            let e = Entry {
                value: s.value.clone(),
                db: s.db,
                pages: s.pages,
                opened_ms: None,
                tick: inner.tick,
                last_used_ms: now_ms,
                group: None,
            };
            return (Ok(e), aged);
        }
        match inner.entries.get(&id) {
            None => return (Err(None), aged),
            Some(e) => {
                if let Err(why) = check(e.db, &e.value) {
                    return (Err(Some(why)), aged);
                }
            }
        }
        let Some(e) = inner.unlink(id) else {
            return (Err(None), aged);
        };
        // Room for this copy.
        age_spent(
            inner,
            now_ms,
            retry_ms,
            SPENT_MAX - 1,
            usize::MAX,
            &mut aged,
        );
        inner.spent.insert(
            id,
            Spent {
                value: e.value.clone(),
                db: e.db,
                pages: e.pages,
                used_ms: now_ms,
            },
        );
        inner.spent_order.push_back(id);
        (Ok(e), aged)
    }

    /// Evicts the entries over `max_open` (after the limit was lowered),
    /// in chunks of at most [`CHUNK`] per hold of the mutex, in the order
    /// of eviction at the limit; hands each chunk's values to `dispose`,
    /// outside the mutex; returns how many were evicted.
    pub fn trim(&self, max_open: usize, dispose: impl FnMut(Vec<T>)) -> usize {
        let keep = max_open.max(1);
        self.in_chunks(
            |inner, n, out| {
                inner.evict_over(keep, n, out);
                inner.entries.len() > keep
            },
            dispose,
        )
    }

    /// Removes iterations idle for more than `idle_ms`, in chunks of at
    /// most [`CHUNK`] per hold of the mutex; hands each chunk's values to
    /// `dispose`, outside the mutex; returns how many expired.
    /// Copies kept for retries whose [`RETRY_MS`] passed go too (not
    /// counted in the result).
    pub fn expire_idle(&self, now_ms: u64, idle_ms: u64, mut dispose: impl FnMut(Vec<T>)) -> usize {
        let retry_ms = self.retry_ms();
        self.in_chunks(
            |inner, n, out| age_spent(inner, now_ms, retry_ms, SPENT_MAX, n, out),
            &mut dispose,
        );
        self.in_chunks(
            |inner, n, out| expire_chunk(inner, now_ms, idle_ms, n, out),
            dispose,
        )
    }

    /// Ends up to `n` of the least recently used iterations and returns
    /// their values; their cursors are remembered (see
    /// [`ended_by_eviction`](Self::ended_by_eviction)), with `why`. At
    /// most [`CHUNK`] per hold of the mutex.
    pub fn evict_lru(&self, n: usize, why: u8) -> Vec<T> {
        // Copies kept for retries hold snapshots too: they go first.
        let mut all = self.drop_spent();
        let mut left = n;
        self.in_chunks(
            |inner, chunk, out| {
                let take = chunk.min(left);
                evict_lru_chunk(inner, take, why, out);
                left -= out.len();
                left > 0
            },
            |values| all.extend(values),
        );
        all
    }

    /// Drops every copy kept for a retry (oldest first, at most [`CHUNK`]
    /// per hold of the mutex) and returns their values: a retry of those
    /// cursors then finds them unknown. No iteration ends.
    pub fn drop_spent(&self) -> Vec<T> {
        let mut all = Vec::new();
        self.in_chunks(
            |inner, n, out| age_spent(inner, 0, 0, 0, n, out),
            |v| all.extend(v),
        );
        all
    }

    /// Whether `id` was the cursor of an iteration ended by
    /// [`evict_lru`](Self::evict_lru) (among the last [`TOMBSTONES`]):
    /// the reason it was given.
    pub fn ended_by_eviction(&self, id: u64) -> Option<u8> {
        self.lock().tombs.get(&id).copied()
    }

    /// Distinct groups of the open entries, not counting `(db, current[db])`
    /// for any db: O(databases), whatever the number of entries.
    pub fn groups_except(&self, current: &[u64]) -> usize {
        let g = self.lock();
        let live = current
            .iter()
            .enumerate()
            .filter(|&(db, &v)| g.groups.contains_key(&(db, v)))
            .count();
        g.groups.len() - live
    }

    /// Runs `f` while the registry holds no iteration and no copy kept for a
    /// retry, under the registry's lock (so no iteration registers during
    /// `f`); `None` when it holds some.
    pub fn when_empty<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        let g = self.lock();
        (g.entries.is_empty() && g.spent.is_empty()).then(f)
    }

    /// At most `n` open iterations, those that began first (of those that
    /// say when), oldest first: when each began, and `f` of its entry.
    pub fn oldest_open<R>(&self, n: usize, f: impl Fn(&Entry<T>) -> R) -> Vec<(i64, R)> {
        let g = self.lock();
        g.opened
            .iter()
            .filter_map(|&(t, id)| Some((t, f(g.entries.get(&id)?))))
            .take(n)
            .collect()
    }

    pub fn stats(&self) -> Stats {
        let g = self.lock();
        Stats {
            open: g.entries.len(),
            spent: g.spent.len(),
            evicted: g.evicted,
            expired: g.expired,
            evicted_memory: g.evicted_memory,
            oldest: g.opened.first().and_then(|&(t, id)| {
                let pages = g.entries.get(&id)?.pages;
                Some((t, pages))
            }),
        }
    }
}

/// Drops at most `n` copies kept for retries, oldest first, while the
/// oldest was used more than `retry_ms` before `now_ms` or more than
/// `max` are kept; whether some may be left.
fn age_spent<T>(
    inner: &mut Inner<T>,
    now_ms: u64,
    retry_ms: u64,
    max: usize,
    n: usize,
    out: &mut Vec<T>,
) -> bool {
    let start = out.len();
    while let Some(&old) = inner.spent_order.front() {
        if out.len() - start >= n {
            return true;
        }
        let keep = inner
            .spent
            .get(&old)
            .is_some_and(|s| now_ms.saturating_sub(s.used_ms) <= retry_ms)
            && inner.spent.len() <= max;
        if keep {
            break;
        }
        inner.spent_order.pop_front();
        if let Some(s) = inner.spent.remove(&old) {
            out.push(s.value);
        }
    }
    false
}

/// One chunk of [`Registry::expire_idle`]: ends at most `n` entries idle
/// for more than `idle_ms`; whether some may be left.
fn expire_chunk<T>(
    inner: &mut Inner<T>,
    now_ms: u64,
    idle_ms: u64,
    n: usize,
    out: &mut Vec<T>,
) -> bool {
    let mut steps = 0;
    for continued in [false, true] {
        // Both orders are by insertion tick, which follows time.
        loop {
            if steps >= n {
                return true;
            }
            let order = if continued {
                &inner.continued
            } else {
                &inner.fresh
            };
            let Some((&tick, &id)) = order.first_key_value() else {
                break;
            };
            match inner.entries.get(&id) {
                Some(e) if now_ms.saturating_sub(e.last_used_ms) <= idle_ms => break,
                _ => {}
            }
            steps += 1;
            if let Some(e) = inner.unlink(id) {
                inner.expired += 1;
                out.push(e.value);
            } else if continued {
                inner.continued.remove(&tick);
            } else {
                inner.fresh.remove(&tick);
            }
        }
    }
    false
}

/// One chunk of [`Registry::evict_lru`]: ends up to `n` of the least
/// recently used entries and remembers their cursors.
fn evict_lru_chunk<T>(inner: &mut Inner<T>, n: usize, why: u8, out: &mut Vec<T>) {
    let start = out.len();
    while out.len() - start < n {
        let Some(id) = inner.lru() else { break };
        let Some(e) = inner.unlink(id) else { break };
        inner.evicted_memory += 1;
        out.push(e.value);
        if inner.tombs.insert(id, why).is_none() {
            inner.tomb_order.push_back(id);
        }
        while inner.tomb_order.len() > TOMBSTONES {
            if let Some(old) = inner.tomb_order.pop_front() {
                inner.tombs.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::collections::HashSet;

    #[test]
    fn the_permutation_is_injective_on_a_sample_and_stays_below_2_52() {
        let keys = std::collections::hash_map::RandomState::new();
        let ids: HashSet<u64> = (0..100_000u64).map(|x| permute52(&keys, x)).collect();
        assert_eq!(ids.len(), 100_000);
        assert!(ids.iter().all(|&i| i <= MASK52));
    }

    #[test]
    fn two_registries_started_alike_issue_different_numbers() {
        let (a, b) = (Registry::new(7), Registry::new(7));
        let (x, _) = a.insert(1, 0, 1, 0, 10);
        let (y, _) = b.insert(1, 0, 1, 0, 10);
        assert_ne!(x, y, "keys drawn from the OS's randomness");
    }

    #[test]
    fn issued_cursors_are_exact_as_doubles() {
        let r = Registry::new(3);
        for i in 0..1000 {
            let (id, _) = r.insert(i, 0, 1, 0, 10_000);
            assert_eq!(id as f64 as u64, id, "{id}");
        }
    }

    #[test]
    fn issued_cursors_carry_the_issued_bit_and_stay_below_2_53() {
        let r = Registry::new(3);
        for i in 0..1000 {
            let (id, _) = r.insert(i, 0, 1, 0, 10_000);
            assert!(is_issued(id), "{id}");
        }
    }

    #[rstest]
    #[case::zero(0, false)]
    #[case::small_native(12345, false)]
    #[case::below_tag((1 << 52) - 1, false)]
    #[case::tag(1 << 52, true)]
    #[case::top((1 << 53) - 1, true)]
    #[case::above_2_53(1 << 53, false)]
    #[case::old_range(1 << 62, false)]
    #[case::above_2_63(1 << 63, false)]
    #[case::u64_max(u64::MAX, false)]
    fn issued_form(#[case] c: u64, #[case] want: bool) {
        assert_eq!(is_issued(c), want);
    }

    #[test]
    fn a_retryable_cursor_answers_again_within_the_window() {
        let r = Registry::new(9);
        let (id, _) = r.insert("a", 2, 1, 0, 10);
        let ok = |_: usize, _: &&str| Ok::<(), ()>(());
        let (e, aged) = r.take_retryable(id, 5, ok);
        assert_eq!(e.map(|e| (e.value, e.db, e.pages)), Ok(("a", 2, 1)));
        assert!(aged.is_empty());
        assert_eq!(r.stats().open, 0);
        // Sent again: the same continuation.
        let (e, _) = r.take_retryable(id, 5 + RETRY_MS, ok);
        assert_eq!(e.map(|e| e.value), Ok("a"));
        // Checked like the first time.
        let (e, _) = r.take_retryable(id, 6, |db, _| if db == 2 { Err(db) } else { Ok(()) });
        assert_eq!(e.map(|e| e.value), Err(Some(2)));
        // Aged out: unknown, and the copy handed back for disposal.
        let (e, aged) = r.take_retryable(id, 6 + RETRY_MS, ok);
        assert_eq!(e.map(|e| e.value), Err(None));
        assert_eq!(aged, vec!["a"]);
        // Single-use takes are unaffected.
        let (id2, _) = r.insert("b", 0, 1, 0, 10);
        assert!(r.take(id2).is_some());
        let (e, _) = r.take_retryable(id2, 0, ok);
        assert_eq!(e.map(|e| e.value), Err(None));
    }

    #[test]
    fn retry_copies_are_bounded_and_dropped_by_memory_eviction() {
        let r = Registry::new(5);
        let ok = |_: usize, _: &usize| Ok::<(), ()>(());
        let mut aged_total = 0;
        for i in 0..SPENT_MAX + 10 {
            let (id, _) = r.insert(i, 0, 1, 0, usize::MAX);
            let (e, aged) = r.take_retryable(id, 0, ok);
            assert!(e.is_ok());
            aged_total += aged.len();
        }
        assert_eq!(aged_total, 10);
        assert_eq!(r.evict_lru(1, 7).len(), SPENT_MAX);
    }

    #[test]
    fn retry_copies_are_dropped_without_ending_an_iteration() {
        let r = Registry::with_chunk(27, 2);
        let ok = |_: usize, _: &u64| Ok::<(), ()>(());
        let (open, _) = r.insert(100, 0, 1, 0, usize::MAX);
        let used: Vec<u64> = (0..5u64)
            .map(|i| {
                let (id, _) = r.insert(i, 0, 1, 0, usize::MAX);
                assert!(r.take_retryable(id, 0, ok).0.is_ok());
                id
            })
            .collect();
        assert_eq!(r.drop_spent(), vec![0, 1, 2, 3, 4], "oldest first");
        assert!(used
            .iter()
            .all(|&id| matches!(r.take_retryable(id, 0, ok).0, Err(None))));
        assert_eq!(r.stats().open, 1);
        assert_eq!(r.stats().evicted_memory, 0);
        assert!(r.take_retryable(open, 0, ok).0.is_ok());
        assert!(r.drop_spent().len() == 1 && r.drop_spent().is_empty());
    }

    #[test]
    fn cursors_are_single_use() {
        let r = Registry::new(7);
        let (id, ev) = r.insert("a", 0, 1, 0, 10);
        assert!(ev.is_empty() && id != 0);
        let e = r.take(id).expect("present");
        assert_eq!((e.value, e.db, e.pages), ("a", 0, 1));
        assert!(r.take(id).is_none());
        assert_eq!(r.stats().open, 0);
    }

    #[rstest]
    #[case::fresh_evicted_before_continued(vec![2, 1, 2], 1)]
    #[case::oldest_fresh_first(vec![1, 1, 1], 0)]
    #[case::all_continued_oldest_first(vec![2, 3, 4], 0)]
    fn eviction_at_the_limit(#[case] pages: Vec<u64>, #[case] victim: usize) {
        let r = Registry::new(1);
        let ids: Vec<u64> = pages
            .iter()
            .enumerate()
            .map(|(i, &p)| r.insert(i, 0, p, i as u64, 3).0)
            .collect();
        let (_, evicted) = r.insert(99, 0, 1, 10, 3);
        assert_eq!(evicted, vec![victim]);
        assert!(r.take(ids[victim]).is_none());
        assert_eq!(r.stats().open, 3);
        assert_eq!(r.stats().evicted, 1);
    }

    #[test]
    fn cursor_zero_spam_stays_bounded_and_never_fails() {
        let r = Registry::new(3);
        let (keep, _) = r.insert(-1i64, 0, 2, 0, 8);
        for i in 0..10_000i64 {
            r.insert(i, 0, 1, i as u64, 8);
            assert!(r.stats().open <= 8);
        }
        assert!(
            r.take(keep).is_some(),
            "a continued iteration survives spam"
        );
    }

    #[test]
    fn a_cursor_is_taken_only_when_its_check_accepts_it() {
        let r = Registry::new(9);
        let (id, _) = r.insert('x', 2, 1, 0, 10);
        let in_db =
            |want: usize| move |db: usize, _: &char| if db == want { Ok(()) } else { Err(db) };
        assert!(matches!(r.take_retryable(id, 0, in_db(0)).0, Err(Some(2))));
        assert!(matches!(r.take_retryable(id + 1, 0, in_db(2)).0, Err(None)));
        assert_eq!(r.stats().open, 1, "a refused take leaves the entry");
        assert_eq!(
            r.take_retryable(id, 0, in_db(2)).0.map(|e| e.value).ok(),
            Some('x')
        );
    }

    /// A taken cursor leaves its retry copy counted in the same hold: the
    /// registry never looks empty while a page is being served (the base
    /// of `snapshot.max-retained-percent` is reset only when it is).
    #[test]
    fn a_taken_cursor_is_counted_as_spent_until_its_copy_ages_out() {
        let r = Registry::new(9);
        let (id, _) = r.insert('x', 0, 1, 0, 10);
        assert_eq!((r.stats().open, r.stats().spent), (1, 0));
        assert!(r.take_retryable(id, 0, |_, _| Ok::<(), ()>(())).0.is_ok());
        assert_eq!((r.stats().open, r.stats().spent), (0, 1));
        assert_eq!(r.when_empty(|| 1), None);
        let (_, aged) = r.take_retryable(id + 1, RETRY_MS + 1, |_, _| Ok::<(), ()>(()));
        assert_eq!(aged, vec!['x']);
        assert_eq!((r.stats().open, r.stats().spent), (0, 0));
        assert_eq!(r.when_empty(|| 1), Some(1));
    }

    /// README (Cursor lifetime): a used cursor answers again "within 10
    /// seconds of its first use and among the last 4,096 cursors used".
    #[test]
    fn the_retry_window_is_ten_seconds_and_the_last_4096_cursors() {
        assert_eq!((RETRY_MS, SPENT_MAX), (10_000, 4096));
        let r = Registry::new(21);
        let ok = |_: usize, _: &usize| Ok::<(), ()>(());
        let ids: Vec<u64> = (0..=SPENT_MAX)
            .map(|i| {
                let (id, _) = r.insert(i, 0, 1, 0, usize::MAX);
                assert!(r.take_retryable(id, 0, ok).0.is_ok());
                id
            })
            .collect();
        // The oldest of 4,097 is gone; each of the last 4,096 answers, and
        // answering a retry makes none of them go.
        assert!(matches!(r.take_retryable(ids[0], 1, ok).0, Err(None)));
        for (i, &id) in ids.iter().enumerate().skip(1).rev() {
            assert_eq!(r.take_retryable(id, 1, ok).0.map(|e| e.value), Ok(i));
        }
        assert_eq!(
            r.take_retryable(ids[1], RETRY_MS, ok).0.map(|e| e.value),
            Ok(1)
        );
        // Past 10 s, none.
        let (e, aged) = r.take_retryable(ids[1], RETRY_MS + 1, ok);
        assert!(matches!(e, Err(None)));
        assert_eq!(aged.len(), SPENT_MAX);
    }

    #[test]
    fn idle_expiry_drops_the_retry_copies_past_their_window() {
        let r = Registry::with_chunk(25, 3);
        let ok = |_: usize, _: &u64| Ok::<(), ()>(());
        let ids: Vec<u64> = (0..10u64)
            .map(|i| {
                let (id, _) = r.insert(i, 0, 1, i, usize::MAX);
                assert!(r.take_retryable(id, i, ok).0.is_ok());
                id
            })
            .collect();
        let mut gone = Vec::new();
        // Copies used at 0..=4 are past 10 s at RETRY_MS + 5; not the others.
        assert_eq!(r.expire_idle(RETRY_MS + 5, u64::MAX, |v| gone.push(v)), 0);
        assert_eq!(
            gone,
            vec![vec![0, 1, 2], vec![3, 4]],
            "in chunks, oldest first"
        );
        assert!(matches!(
            r.take_retryable(ids[4], RETRY_MS + 5, ok).0,
            Err(None)
        ));
        assert!(r.take_retryable(ids[5], RETRY_MS + 5, ok).0.is_ok());
        assert_eq!(r.expire_idle(RETRY_MS + 5, u64::MAX, |_| {}), 0);
    }

    /// A placement in `group` and `db`, one page served, no start time.
    fn at(group: Group, db: usize) -> Placement {
        Placement {
            group,
            db,
            pages: 1,
            opened_ms: None,
        }
    }

    #[test]
    fn the_oldest_open_iteration_is_known_with_its_pages() {
        let r = Registry::new(17);
        let place = |pages, opened_ms| Placement {
            group: None,
            db: 0,
            pages,
            opened_ms: Some(opened_ms),
        };
        assert_eq!(r.stats().oldest, None);
        let (a, _) = r.insert_in('a', place(1, 500), 0, 10);
        let (_b, _) = r.insert_in('b', place(4, 900), 0, 10);
        r.insert('u', 0, 1, 0, 10); // says nothing of its start
        assert_eq!(r.stats().oldest, Some((500, 1)));
        // Continued: taken, then registered again with its start and pages.
        let e = r.take(a).expect("a");
        assert_eq!(r.stats().oldest, Some((900, 4)));
        r.insert_in(e.value, place(e.pages + 1, 500), 0, 10);
        assert_eq!(r.stats().oldest, Some((500, 2)));
        // Ended (evicted, expired): forgotten.
        assert_eq!(r.expire_idle(1000, 0, drop), 3);
        assert_eq!(r.stats().oldest, None);
    }

    #[test]
    fn groups_are_counted_as_entries_come_and_go() {
        let r = Registry::new(11);
        let (a, _) = r.insert_in('a', at(Some((0, 5)), 0), 0, 3);
        let (b, _) = r.insert_in('b', at(Some((0, 5)), 0), 1, 3);
        let (_c, _) = r.insert_in('c', at(Some((1, 7)), 1), 2, 3);
        // (0, 5) is db 0's current version: not a past one.
        assert_eq!(r.groups_except(&[5, 0]), 1);
        assert_eq!(r.groups_except(&[6, 0]), 2);
        assert_eq!(r.groups_except(&[6, 7]), 1);
        r.take(a);
        assert_eq!(r.groups_except(&[6, 0]), 2);
        r.take(b);
        assert_eq!(r.groups_except(&[6, 0]), 1);
        // Evicted at the limit, expired and evicted by LRU alike.
        r.insert_in('d', at(Some((2, 1)), 2), 3, 3);
        r.insert_in('e', at(Some((2, 1)), 2), 4, 3);
        r.insert_in('f', at(Some((2, 2)), 2), 5, 3);
        assert_eq!(r.stats().open, 3);
        assert_eq!(r.groups_except(&[]), 2);
        assert_eq!(r.expire_idle(1000, 0, drop), 3);
        assert_eq!(r.groups_except(&[]), 0);
    }

    #[test]
    fn lru_eviction_ends_the_oldest_and_remembers_them() {
        let r = Registry::new(13);
        let ids: Vec<u64> = (0..5u64)
            .map(|i| r.insert(i, 0, 1 + i % 2, i, 10).0)
            .collect();
        let gone = r.evict_lru(2, 7);
        assert_eq!(gone, vec![0, 1], "oldest first, fresh or continued");
        assert_eq!(r.ended_by_eviction(ids[0]), Some(7));
        assert!(r.ended_by_eviction(ids[1]).is_some());
        assert!(r.ended_by_eviction(ids[2]).is_none());
        assert!(r.take(ids[0]).is_none());
        assert_eq!(r.stats().evicted_memory, 2);
        assert_eq!(r.stats().open, 3);
        assert_eq!(r.evict_lru(10, 7).len(), 3);
        assert!(r.evict_lru(1, 7).is_empty());
    }

    /// README: "The last 65,536 cursors ended this way are remembered for
    /// this message; older ones get the generic one."
    #[test]
    fn only_the_last_tombstones_evictions_are_remembered() {
        let r = Registry::new(7);
        let n = TOMBSTONES + 2;
        let ids: Vec<u64> = (0..n as u64).map(|i| r.insert(i, 0, 1, i, n).0).collect();
        assert_eq!(r.evict_lru(n, 7).len(), n);
        assert!(r.ended_by_eviction(ids[0]).is_none() && r.ended_by_eviction(ids[1]).is_none());
        assert!(r.ended_by_eviction(ids[2]).is_some() && r.ended_by_eviction(ids[n - 1]).is_some());
        assert_eq!(
            ids.iter()
                .filter(|&&id| r.ended_by_eviction(id).is_some())
                .count(),
            TOMBSTONES
        );
    }

    #[test]
    fn idle_entries_expire() {
        let r = Registry::new(5);
        let (old, _) = r.insert(1, 0, 1, 0, 10);
        let (old2, _) = r.insert(2, 0, 3, 10, 10);
        let (new, _) = r.insert(3, 0, 1, 900, 10);
        let mut gone = Vec::new();
        assert_eq!(r.expire_idle(1000, 500, |v| gone.extend(v)), 2);
        assert_eq!(gone, vec![1, 2]);
        assert!(r.take(old).is_none() && r.take(old2).is_none());
        assert!(r.take(new).is_some());
        assert_eq!(r.stats().expired, 2);
    }

    /// A registry whose mutex is free (checked from inside a `dispose`).
    fn unlocked<T>(r: &Registry<T>) -> bool {
        r.inner.try_lock().is_ok()
    }

    #[rstest]
    #[case::far_over(5_000, 1)]
    #[case::just_over(1_030, 1_024)]
    #[case::exactly_one_chunk_over(2_048, 1_024)]
    #[case::at_the_limit(100, 100)]
    #[case::under_the_limit(10, 100)]
    fn a_lowered_limit_is_reached_by_trimming_in_chunks(#[case] open: usize, #[case] limit: usize) {
        let r = Registry::new(17);
        for i in 0..open {
            r.insert(i, 0, 1, i as u64, open);
        }
        let mut chunks = Vec::new();
        let n = r.trim(limit, |v| {
            assert!(unlocked(&r), "values are disposed of outside the lock");
            chunks.push(v);
        });
        let surplus = open.saturating_sub(limit);
        assert_eq!(n, surplus);
        assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= CHUNK));
        assert_eq!(chunks.len(), surplus.div_ceil(CHUNK));
        // Oldest first, exactly the surplus.
        let all: Vec<usize> = chunks.concat();
        assert_eq!(all, (0..surplus).collect::<Vec<_>>());
        assert_eq!(r.stats().open, open.min(limit));
        assert_eq!(r.stats().evicted, surplus as u64);
        assert_eq!(r.trim(limit, |_| panic!("nothing left over")), 0);
    }

    #[test]
    fn an_insertion_far_over_a_lowered_limit_evicts_a_bounded_number() {
        let r = Registry::new(19);
        for i in 0..3_000u64 {
            r.insert(i, 0, 1 + i % 2, i, 3_000);
        }
        let (_, evicted) = r.insert(9_999, 0, 1, 3_000, 1);
        assert_eq!(evicted.len(), EVICT_PER_INSERT);
        // Never-continued iterations first (even numbers were inserted
        // with one page), oldest first.
        assert!(evicted.iter().all(|v| v % 2 == 0));
        assert_eq!(r.stats().open, 3_001 - EVICT_PER_INSERT);
        // Each further insertion shrinks the surplus by EVICT_PER_INSERT - 1.
        r.insert(10_000, 0, 1, 3_001, 1);
        assert_eq!(r.stats().open, 3_002 - 2 * EVICT_PER_INSERT);
        assert_eq!(r.trim(1, drop), 3_002 - 2 * EVICT_PER_INSERT - 1);
        assert_eq!(r.stats().open, 1);
    }

    #[test]
    fn idle_expiry_of_many_runs_in_chunks() {
        let r = Registry::new(23);
        let total = 3 * CHUNK + 5;
        for i in 0..total {
            // One in three continued; every one idle at t = 10^6.
            r.insert(i, 0, 1 + (i % 3 == 0) as u64, i as u64, usize::MAX);
        }
        let (_, _) = r.insert(usize::MAX, 0, 1, 999_999, usize::MAX);
        let mut sizes = Vec::new();
        let n = r.expire_idle(1_000_000, 10, |v| {
            assert!(unlocked(&r));
            sizes.push(v.len());
        });
        assert_eq!(n, total);
        assert_eq!(sizes, vec![CHUNK, CHUNK, CHUNK, 5]);
        assert_eq!(r.stats().open, 1, "the recently used one stays");
        assert_eq!(r.stats().expired, total as u64);
    }

    #[test]
    fn lru_eviction_of_many_runs_in_chunks_and_keeps_its_order() {
        let r = Registry::with_chunk(29, 7);
        let ids: Vec<u64> = (0..50u64)
            .map(|i| r.insert(i, 0, 1 + i % 2, i, 100).0)
            .collect();
        let gone = r.evict_lru(30, 7);
        assert_eq!(gone, (0..30).collect::<Vec<_>>());
        assert!(ids[..30]
            .iter()
            .all(|&id| r.ended_by_eviction(id).is_some()));
        assert_eq!(r.stats().open, 20);
        assert_eq!(r.evict_lru(usize::MAX, 7).len(), 20);
    }

    #[test]
    fn a_waiting_caller_gets_the_lock_between_two_chunks() {
        use std::sync::Arc;
        let r = Arc::new(Registry::with_chunk(31, 100));
        for i in 0..10_000u64 {
            r.insert(i, 0, 1, i, usize::MAX);
        }
        let mut chunks = 0;
        let mut caller = None;
        r.trim(1, |_| {
            chunks += 1;
            if chunks > 1 {
                return;
            }
            // A caller starts waiting for the lock (held here to make sure
            // it waits) after the first chunk.
            let g = r.lock_bulk();
            let r2 = Arc::clone(&r);
            caller = Some(std::thread::spawn(move || r2.stats().open));
            let deadline = Instant::now() + Duration::from_secs(10);
            while r.waiting.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
                std::thread::yield_now();
            }
            assert_eq!(r.waiting.load(Ordering::SeqCst), 1, "the caller waits");
            drop(g);
        });
        let seen = caller.expect("spawned").join().expect("no panic");
        // It got in before the trim was over (100 of 10,000 ended per chunk).
        assert!(seen > 1, "the waiting caller saw {seen} open");
        assert_eq!(chunks, 100);
        assert_eq!(r.stats().open, 1);
    }

    proptest::proptest! {
        /// Whatever the entries, the limit and the chunk: trimming ends
        /// exactly the surplus, fresh before continued and oldest first,
        /// never more than a chunk per hold; expiry ends exactly the idle
        /// ones, a chunk at most per hold.
        #[test]
        fn bulk_removals_are_exact_and_chunked(
            pages in proptest::collection::vec((1u64..4, 0u64..1000), 0..300),
            limit in 1usize..350,
            chunk in 1usize..40,
            idle in 0u64..1000,
        ) {
            let r = Registry::with_chunk(37, chunk);
            // Times ascending, as inserts happen.
            let mut times: Vec<u64> = pages.iter().map(|p| p.1).collect();
            times.sort_unstable();
            for (i, (&(p, _), &t)) in pages.iter().zip(&times).enumerate() {
                r.insert((i, p > 1, t), 0, p, t, usize::MAX);
            }
            let n = pages.len();
            let mut order = Vec::new();
            let trimmed = r.trim(limit, |v| {
                assert!(v.len() <= chunk);
                order.extend(v);
            });
            proptest::prop_assert_eq!(trimmed, n.saturating_sub(limit));
            let mut want: Vec<(usize, bool, u64)> =
                (0..n).map(|i| (i, pages[i].0 > 1, times[i])).collect();
            want.sort_by_key(|&(i, continued, _)| (continued, i));
            want.truncate(trimmed);
            proptest::prop_assert_eq!(&order, &want);
            proptest::prop_assert_eq!(r.stats().open, n.min(limit));

            let now = 1000;
            let left: Vec<(usize, bool, u64)> = (0..n)
                .map(|i| (i, pages[i].0 > 1, times[i]))
                .filter(|e| !want.contains(e))
                .collect();
            let mut expired = Vec::new();
            let count = r.expire_idle(now, idle, |v| {
                assert!(v.len() <= chunk);
                expired.extend(v);
            });
            let mut want_expired: Vec<_> =
                left.iter().copied().filter(|e| now - e.2 > idle).collect();
            want_expired.sort_by_key(|&(i, continued, _)| (continued, i));
            proptest::prop_assert_eq!(count, want_expired.len());
            proptest::prop_assert_eq!(expired, want_expired);
            proptest::prop_assert_eq!(r.stats().open, left.len() - count);
        }
    }
}
