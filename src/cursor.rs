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
//! Locking: every method takes one internal mutex for O(log n) work; values
//! removed from the registry are handed back to the caller so they are
//! dropped outside the lock (and off the server's main thread).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// One open iteration.
pub struct Entry<T> {
    pub value: T,
    /// Database the iteration belongs to (`usize::MAX` when not applicable).
    pub db: usize,
    /// Pages already served (1 after the cursor-0 call).
    pub pages: u64,
    tick: u64,
    last_used_ms: u64,
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
        let mut g = self.lock();
        let inner = &mut *g;
        let mut evicted = Vec::new();
        while inner.entries.len() >= max_open.max(1) {
            let victim = inner
                .fresh
                .pop_first()
                .or_else(|| inner.continued.pop_first());
            match victim.and_then(|(_, id)| inner.entries.remove(&id)) {
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
        inner.entries.insert(
            id,
            Entry {
                value,
                db,
                pages,
                tick,
                last_used_ms: now_ms,
            },
        );
        (id, evicted)
    }

    /// Removes and returns the iteration behind `id` (cursors are single-use).
    #[cfg(test)]
    pub fn take(&self, id: u64) -> Option<Entry<T>> {
        let mut g = self.lock();
        let e = g.entries.remove(&id)?;
        g.fresh.remove(&e.tick);
        g.continued.remove(&e.tick);
        Some(e)
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
        let e = g.entries.remove(&id).ok_or(None)?;
        g.fresh.remove(&e.tick);
        g.continued.remove(&e.tick);
        Ok(e)
    }

    /// Removes iterations idle for more than `idle_ms`; returns their values.
    pub fn expire_idle(&self, now_ms: u64, idle_ms: u64) -> Vec<T> {
        let mut g = self.lock();
        let inner = &mut *g;
        let mut out = Vec::new();
        for order in [&mut inner.fresh, &mut inner.continued] {
            // Both orders are by insertion tick, which follows time.
            while let Some((&tick, &id)) = order.first_key_value() {
                match inner.entries.get(&id) {
                    Some(e) if now_ms.saturating_sub(e.last_used_ms) <= idle_ms => break,
                    _ => {}
                }
                order.remove(&tick);
                if let Some(e) = inner.entries.remove(&id) {
                    inner.expired += 1;
                    out.push(e.value);
                }
            }
        }
        out
    }

    pub fn stats(&self) -> Stats {
        let g = self.lock();
        Stats {
            open: g.entries.len(),
            evicted: g.evicted,
            expired: g.expired,
        }
    }

    /// Folds over the open entries (for INFO figures) under the lock.
    pub fn fold<A>(&self, init: A, f: impl FnMut(A, &Entry<T>) -> A) -> A {
        let g = self.lock();
        g.entries.values().fold(init, f)
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
