//! Per-key change counters for hashes that are being copied or whose copy
//! is still in use, so a sliced copy can tell whether the hash changed
//! between two slices, and a later cursor 0 can reuse an unchanged copy.
//!
//! Locking: a `DashMap` shard lock per operation, never held across calls.
//! The keyspace-notification path (main thread) calls [`Watches::bump`]
//! for every event, so it first checks an atomic count and returns at once
//! when nothing is watched.

use super::HashCopy;
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// What is known about one watched hash.
#[derive(Clone)]
pub struct Watch {
    /// Bumped by every keyspace event on the key.
    pub version: u64,
    /// Global epoch when the watch was made (flushes invalidate everything).
    pub epoch: u64,
    /// The latest complete copy, alive while an iteration holds it.
    pub copy: Weak<HashCopy>,
    /// `version` when that copy was made: it is current only while equal.
    pub copy_version: u64,
    /// Number of copies in flight for this key.
    pub copying: u32,
}

#[derive(Default)]
pub struct Watches {
    map: DashMap<(usize, Box<[u8]>), Watch>,
    count: AtomicUsize,
    epoch: AtomicU64,
    reused: AtomicU64,
}

impl Watches {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a keyspace event on `key` in `db`. O(1) when nothing is watched.
    pub fn bump(&self, db: usize, key: &[u8]) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(mut w) = self.map.get_mut(&(db, Box::from(key))) {
            w.version += 1;
        }
    }

    /// Invalidates every watch (FLUSHDB/FLUSHALL/SWAPDB/loading).
    pub fn bump_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// A copy of `key` that is still valid (no event since it was made),
    /// to be shared in O(1).
    pub fn reusable(&self, db: usize, key: &[u8]) -> Option<Arc<HashCopy>> {
        let w = self.map.get(&(db, Box::from(key)))?;
        if w.epoch != self.epoch() || w.copying > 0 || w.version != w.copy_version {
            return None;
        }
        w.copy.upgrade()
    }

    /// Counts one copy shared instead of made (INFO).
    pub fn count_reuse(&self) {
        self.reused.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts watching `key` for a copy; returns the version to compare
    /// against while copying.
    pub fn begin_copy(&self, db: usize, key: &[u8]) -> (u64, u64) {
        let epoch = self.epoch();
        let mut e = self.map.entry((db, Box::from(key))).or_insert_with(|| {
            self.count.fetch_add(1, Ordering::SeqCst);
            Watch {
                version: 0,
                epoch,
                copy: Weak::new(),
                copy_version: 0,
                copying: 0,
            }
        });
        if e.epoch != epoch {
            e.epoch = epoch;
            e.copy = Weak::new();
        }
        e.copying += 1;
        (e.version, epoch)
    }

    /// Current (version, epoch) of a watched key.
    pub fn current(&self, db: usize, key: &[u8]) -> (u64, u64) {
        let v = self
            .map
            .get(&(db, Box::from(key)))
            .map_or(u64::MAX, |w| w.version);
        (v, self.epoch())
    }

    /// Ends a copy: publishes it for reuse if it is still current.
    pub fn end_copy(&self, db: usize, key: &[u8], done: Option<(&Arc<HashCopy>, u64, u64)>) {
        let k = (db, Box::from(key));
        if let Some(mut w) = self.map.get_mut(&k) {
            w.copying = w.copying.saturating_sub(1);
            if let Some((copy, version, epoch)) = done {
                if w.version == version && epoch == self.epoch() {
                    w.copy = Arc::downgrade(copy);
                    w.copy_version = version;
                    w.epoch = epoch;
                }
            }
        }
        self.prune(&k);
    }

    fn prune(&self, k: &(usize, Box<[u8]>)) {
        let removed = self
            .map
            .remove_if(k, |_, w| w.copying == 0 && w.copy.strong_count() == 0);
        if removed.is_some() {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Drops watches whose copies are gone (called periodically).
    pub fn sweep(&self) {
        let dead: Vec<(usize, Box<[u8]>)> = self
            .map
            .iter()
            .filter(|e| e.copying == 0 && e.copy.strong_count() == 0)
            .map(|e| e.key().clone())
            .collect();
        for k in dead {
            self.prune(&k);
        }
    }

    #[cfg(test)]
    pub fn watched(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Builder;
    use super::*;

    fn copy() -> Arc<HashCopy> {
        let mut b = Builder::new(usize::MAX / 2);
        b.push(b"f", b"v").expect("ok");
        Arc::new(b.finish())
    }

    #[test]
    fn unchanged_copy_is_reused_and_any_event_invalidates_it() {
        let w = Watches::new();
        let (v, e) = w.begin_copy(0, b"h");
        let c = copy();
        w.end_copy(0, b"h", Some((&c, v, e)));
        assert!(w.reusable(0, b"h").is_some());
        assert!(w.reusable(1, b"h").is_none(), "other database");
        w.bump(0, b"h");
        assert!(w.reusable(0, b"h").is_none());
    }

    #[test]
    fn a_copy_changed_while_in_flight_is_not_published() {
        let w = Watches::new();
        let (v, e) = w.begin_copy(0, b"h");
        w.bump(0, b"h");
        assert_ne!(w.current(0, b"h").0, v);
        let c = copy();
        w.end_copy(0, b"h", Some((&c, v, e)));
        assert!(w.reusable(0, b"h").is_none());
    }

    #[test]
    fn flush_epoch_invalidates_and_dead_copies_are_pruned() {
        let w = Watches::new();
        let (v, e) = w.begin_copy(0, b"h");
        let c = copy();
        w.end_copy(0, b"h", Some((&c, v, e)));
        w.bump_all();
        assert!(w.reusable(0, b"h").is_none());
        drop(c);
        w.sweep();
        assert_eq!(w.watched(), 0);
        w.bump(0, b"h"); // no watch: no-op
    }
}
