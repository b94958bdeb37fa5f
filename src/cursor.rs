//! Cursor registry: maps the cursor numbers handed to clients to the state
//! needed to continue an iteration (a snapshot and a position).
//!
//! Pure Rust; time is passed in (monotonic milliseconds) so rules are
//! unit-testable.
//!
//! Rules (documented in the README):
//! - a cursor is single-use: continuing it removes it and the next page gets
//!   a new cursor number;
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
//! Each entry may belong to a *group* (for SNAPSHOT.SCAN: the database and
//! version of its snapshot); the registry counts entries per group as they
//! come and go, so the number of distinct groups is known in O(1).
//!
//! Locking: every method takes one internal mutex for O(log n) work; values
//! removed from the registry are handed back to the caller so they are
//! dropped outside the lock (and off the server's main thread).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;

/// What an entry shares its memory with (see the module docs).
pub type Group = Option<(usize, u64)>;

/// Cursors of iterations ended by [`Registry::evict_lru`] remembered at most.
pub const TOMBSTONES: usize = 65_536;

/// One open iteration.
pub struct Entry<T> {
    pub value: T,
    /// Database the iteration belongs to (`usize::MAX` when not applicable).
    pub db: usize,
    /// Pages already served (1 after the cursor-0 call).
    pub pages: u64,
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
    /// Iterations ended by `evict_lru`: their cursors, oldest first.
    tomb_order: VecDeque<u64>,
    tombs: HashSet<u64>,
    evicted_memory: u64,
}

impl<T> Inner<T> {
    /// Removes `id` from every structure; keeps the group counts true.
    fn unlink(&mut self, id: u64) -> Option<Entry<T>> {
        let e = self.entries.remove(&id)?;
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
}

/// See the module docs.
pub struct Registry<T> {
    inner: Mutex<Inner<T>>,
}

/// Counters exposed in INFO.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub open: usize,
    pub evicted: u64,
    pub expired: u64,
    /// Iterations ended by [`Registry::evict_lru`].
    pub evicted_memory: u64,
}

const MASK63: u64 = (1 << 63) - 1;

/// A bijection on 63-bit integers: distinct counters give distinct,
/// unpredictable-looking cursor numbers below 2^63 (safe for clients that
/// parse cursors as signed 64-bit integers).
fn mix63(mut x: u64) -> u64 {
    x &= MASK63;
    x ^= x >> 31;
    x = x.wrapping_mul(0x7fb5_d329_728e_a185) & MASK63;
    x ^= x >> 27;
    x = x.wrapping_mul(0x01b8_73fb_6b45_e1a5) & MASK63;
    x ^= x >> 33;
    x
}

impl<T> Registry<T> {
    /// `seed` makes cursor numbers differ between server runs, so a cursor
    /// from before a restart is reported as unknown instead of aliasing.
    pub fn new(seed: u64) -> Self {
        Registry {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                fresh: BTreeMap::new(),
                continued: BTreeMap::new(),
                tick: 0,
                counter: seed,
                evicted: 0,
                expired: 0,
                groups: HashMap::new(),
                tomb_order: VecDeque::new(),
                tombs: HashSet::new(),
                evicted_memory: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        // A panic while holding the lock cannot leave the maps inconsistent
        // in a way that matters more than losing the server: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a continuation and returns its cursor number together with
    /// any values evicted to stay within `max_open`.
    pub fn insert(
        &self,
        value: T,
        db: usize,
        pages: u64,
        now_ms: u64,
        max_open: usize,
    ) -> (u64, Vec<T>) {
        self.insert_in(value, None, db, pages, now_ms, max_open)
    }

    /// [`insert`](Self::insert) of an entry of `group`.
    pub fn insert_in(
        &self,
        value: T,
        group: Group,
        db: usize,
        pages: u64,
        now_ms: u64,
        max_open: usize,
    ) -> (u64, Vec<T>) {
        let mut g = self.lock();
        let inner = &mut *g;
        let mut evicted = Vec::new();
        while inner.entries.len() >= max_open.max(1) {
            let victim = inner
                .fresh
                .first_key_value()
                .or_else(|| inner.continued.first_key_value())
                .map(|(_, &id)| id);
            match victim.and_then(|id| inner.unlink(id)) {
                Some(e) => {
                    inner.evicted += 1;
                    evicted.push(e.value);
                }
                None => break,
            }
        }
        let id = loop {
            inner.counter = inner.counter.wrapping_add(1);
            let id = mix63(inner.counter);
            if id != 0 && !inner.entries.contains_key(&id) {
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
        inner.entries.insert(
            id,
            Entry {
                value,
                db,
                pages,
                tick,
                last_used_ms: now_ms,
                group,
            },
        );
        (id, evicted)
    }

    /// Removes and returns the iteration behind `id` (cursors are single-use).
    #[cfg(test)]
    pub fn take(&self, id: u64) -> Option<Entry<T>> {
        self.lock().unlink(id)
    }

    /// Like [`Registry::take`], but only when the iteration belongs to `db`:
    /// `Err(None)` for an unknown cursor, `Err(Some(other_db))` otherwise
    /// (the entry then stays registered).
    pub fn take_in(&self, id: u64, db: usize) -> Result<Entry<T>, Option<usize>> {
        self.take_checked(id, |e| if e.db == db { Ok(()) } else { Err(e.db) })
    }

    /// Removes the iteration behind `id` if `check` accepts it: `Err(None)`
    /// for an unknown cursor, `Err(Some(reason))` when `check` refuses (the
    /// entry then stays registered).
    pub fn take_checked<E>(
        &self,
        id: u64,
        check: impl FnOnce(&Entry<T>) -> Result<(), E>,
    ) -> Result<Entry<T>, Option<E>> {
        let mut g = self.lock();
        match g.entries.get(&id) {
            None => return Err(None),
            Some(e) => check(e).map_err(Some)?,
        }
        g.unlink(id).ok_or(None)
    }

    /// Removes iterations idle for more than `idle_ms`; returns their values.
    pub fn expire_idle(&self, now_ms: u64, idle_ms: u64) -> Vec<T> {
        let mut g = self.lock();
        let inner = &mut *g;
        let mut out = Vec::new();
        for continued in [false, true] {
            // Both orders are by insertion tick, which follows time.
            loop {
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
        out
    }

    /// Ends up to `n` of the least recently used iterations and returns
    /// their values; their cursors are remembered (see
    /// [`ended_by_eviction`](Self::ended_by_eviction)).
    pub fn evict_lru(&self, n: usize) -> Vec<T> {
        let mut g = self.lock();
        let inner = &mut *g;
        let mut out = Vec::new();
        while out.len() < n {
            let Some(id) = inner.lru() else { break };
            let Some(e) = inner.unlink(id) else { break };
            inner.evicted_memory += 1;
            out.push(e.value);
            if inner.tombs.insert(id) {
                inner.tomb_order.push_back(id);
            }
            while inner.tomb_order.len() > TOMBSTONES {
                if let Some(old) = inner.tomb_order.pop_front() {
                    inner.tombs.remove(&old);
                }
            }
        }
        out
    }

    /// Whether `id` was the cursor of an iteration ended by
    /// [`evict_lru`](Self::evict_lru) (among the last [`TOMBSTONES`]).
    pub fn ended_by_eviction(&self, id: u64) -> bool {
        self.lock().tombs.contains(&id)
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

    pub fn stats(&self) -> Stats {
        let g = self.lock();
        Stats {
            open: g.entries.len(),
            evicted: g.evicted,
            expired: g.expired,
            evicted_memory: g.evicted_memory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;
    use std::collections::HashSet;

    #[test]
    fn mix_is_injective_on_a_sample_and_stays_below_2_63() {
        let ids: HashSet<u64> = (0..100_000u64).map(mix63).collect();
        assert_eq!(ids.len(), 100_000);
        assert!(ids.iter().all(|&i| i <= MASK63));
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
    fn take_in_checks_the_database() {
        let r = Registry::new(9);
        let (id, _) = r.insert('x', 2, 1, 0, 10);
        assert!(matches!(r.take_in(id, 0), Err(Some(2))));
        assert!(matches!(r.take_in(id + 1, 2), Err(None)));
        assert_eq!(r.take_in(id, 2).map(|e| e.value).ok(), Some('x'));
    }

    #[test]
    fn groups_are_counted_as_entries_come_and_go() {
        let r = Registry::new(11);
        let (a, _) = r.insert_in('a', Some((0, 5)), 0, 1, 0, 3);
        let (b, _) = r.insert_in('b', Some((0, 5)), 0, 1, 1, 3);
        let (_c, _) = r.insert_in('c', Some((1, 7)), 1, 1, 2, 3);
        // (0, 5) is db 0's current version: not a past one.
        assert_eq!(r.groups_except(&[5, 0]), 1);
        assert_eq!(r.groups_except(&[6, 0]), 2);
        assert_eq!(r.groups_except(&[6, 7]), 1);
        r.take(a);
        assert_eq!(r.groups_except(&[6, 0]), 2);
        r.take(b);
        assert_eq!(r.groups_except(&[6, 0]), 1);
        // Evicted at the limit, expired and evicted by LRU alike.
        r.insert_in('d', Some((2, 1)), 2, 1, 3, 3);
        r.insert_in('e', Some((2, 1)), 2, 1, 4, 3);
        r.insert_in('f', Some((2, 2)), 2, 1, 5, 3);
        assert_eq!(r.stats().open, 3);
        assert_eq!(r.groups_except(&[]), 2);
        r.expire_idle(1000, 0);
        assert_eq!(r.groups_except(&[]), 0);
    }

    #[test]
    fn lru_eviction_ends_the_oldest_and_remembers_them() {
        let r = Registry::new(13);
        let ids: Vec<u64> = (0..5u64)
            .map(|i| r.insert(i, 0, 1 + i % 2, i, 10).0)
            .collect();
        let gone = r.evict_lru(2);
        assert_eq!(gone, vec![0, 1], "oldest first, fresh or continued");
        assert!(r.ended_by_eviction(ids[0]) && r.ended_by_eviction(ids[1]));
        assert!(!r.ended_by_eviction(ids[2]));
        assert!(r.take(ids[0]).is_none());
        assert_eq!(r.stats().evicted_memory, 2);
        assert_eq!(r.stats().open, 3);
        assert_eq!(r.evict_lru(10).len(), 3);
        assert!(r.evict_lru(1).is_empty());
    }

    /// README: "The last 65,536 cursors ended this way are remembered for
    /// this message; older ones get the generic one."
    #[test]
    fn only_the_last_tombstones_evictions_are_remembered() {
        let r = Registry::new(7);
        let n = TOMBSTONES + 2;
        let ids: Vec<u64> = (0..n as u64).map(|i| r.insert(i, 0, 1, i, n).0).collect();
        assert_eq!(r.evict_lru(n).len(), n);
        assert!(!r.ended_by_eviction(ids[0]) && !r.ended_by_eviction(ids[1]));
        assert!(r.ended_by_eviction(ids[2]) && r.ended_by_eviction(ids[n - 1]));
        assert_eq!(
            ids.iter().filter(|&&id| r.ended_by_eviction(id)).count(),
            TOMBSTONES
        );
    }

    #[test]
    fn idle_entries_expire() {
        let r = Registry::new(5);
        let (old, _) = r.insert(1, 0, 1, 0, 10);
        let (old2, _) = r.insert(2, 0, 3, 10, 10);
        let (new, _) = r.insert(3, 0, 1, 900, 10);
        let gone = r.expire_idle(1000, 500);
        assert_eq!(gone.len(), 2);
        assert!(r.take(old).is_none() && r.take(old2).is_none());
        assert!(r.take(new).is_some());
        assert_eq!(r.stats().expired, 2);
    }
}
