//! Per-key change counters for collections that are being copied or whose
//! copy is still in use, so a sliced copy can tell whether the collection
//! changed between two slices, and a later cursor 0 can reuse an unchanged
//! copy. A copy in flight is a [`Copying`] guard: however it ends (published,
//! failed, or dropped by a panic), the key's `copying` count goes down.
//!
//! Locking: a `DashMap` shard lock per operation, never held across calls.
//! The keyspace-notification path (main thread) calls [`Watches::bump`]
//! for every event, so it first checks an atomic count and returns at once
//! when nothing is watched.

use super::{CollCopy, Kind};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// What is known about one watched collection.
#[derive(Clone)]
pub struct Watch {
    /// Bumped by every keyspace event on the key.
    pub version: u64,
    /// Global epoch when the watch was made (flushes invalidate everything).
    pub epoch: u64,
    /// The latest complete copy, alive while an iteration holds it.
    pub copy: Weak<CollCopy>,
    /// `version` when that copy was made: it is current only while equal.
    pub copy_version: u64,
    /// Number of copies in flight for this key.
    pub copying: u32,
}

#[derive(Default)]
pub struct Watches {
    /// Keys written while a SNAPSHOT.UNLINK runs (fed by the same events).
    pub touched: super::touched::Trackers,
    /// What the copies hold, against the memory limit.
    pub budget: super::Budget,
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
    /// Whether any key's events matter right now: a copy is watched or a
    /// SNAPSHOT.UNLINK records the keys written meanwhile.
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) != 0 || self.touched.any()
    }

    /// Every notification calls this: inlined down to the two loads of
    /// [`any`](Self::any) when nothing is watched (the usual case).
    #[inline]
    pub fn bump(&self, db: usize, key: &[u8]) {
        if self.any() {
            self.bump_watched(db, key);
        }
    }

    fn bump_watched(&self, db: usize, key: &[u8]) {
        self.touched.record(Some(db), key);
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(mut w) = self.map.get_mut(&(db, Box::from(key))) {
            w.version += 1;
        }
    }

    /// Invalidates every watch (FLUSHDB/FLUSHALL/SWAPDB/loading), and ends
    /// every running SNAPSHOT.UNLINK.
    pub fn bump_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.touched.end_all();
    }

    /// `key` moved or copied between databases (the event may come from
    /// the caller's database): invalidates every watch, and marks the key
    /// written in every database for running deletions.
    pub fn bump_moved(&self, key: &[u8]) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.touched.record(None, key);
    }

    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// A copy of `key` that is still valid (no event since it was made),
    /// to be shared in O(1).
    pub fn reusable(&self, db: usize, key: &[u8], kind: Kind) -> Option<Arc<CollCopy>> {
        let w = self.map.get(&(db, Box::from(key)))?;
        if w.epoch != self.epoch() || w.copying > 0 || w.version != w.copy_version {
            return None;
        }
        w.copy.upgrade().filter(|c| c.kind() == kind)
    }

    /// Counts one copy shared instead of made (INFO).
    pub fn count_reuse(&self) {
        self.reused.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a copy of `key`: watches it until the returned guard is
    /// published or dropped.
    pub fn begin(&'static self, db: usize, key: &[u8]) -> Copying {
        let (version, epoch) = self.begin_copy(db, key);
        Copying {
            watches: self,
            db,
            key: key.into(),
            version,
            epoch,
            open: true,
        }
    }

    /// Starts watching `key` for a copy; returns the version to compare
    /// against while copying.
    fn begin_copy(&self, db: usize, key: &[u8]) -> (u64, u64) {
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
    fn end_copy(&self, db: usize, key: &[u8], done: Option<(&Arc<CollCopy>, u64, u64)>) {
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

/// A copy of one key in flight. Dropping it without [`Copying::publish`]
/// (the copy failed, was abandoned, or a panic unwound through its owner)
/// ends the watch all the same.
pub struct Copying {
    watches: &'static Watches,
    db: usize,
    key: Box<[u8]>,
    version: u64,
    epoch: u64,
    open: bool,
}

impl Copying {
    /// Whether the key changed (or the databases were flushed/swapped)
    /// since the copy (re)started.
    pub fn changed(&self) -> bool {
        self.watches.current(self.db, &self.key) != (self.version, self.epoch)
    }

    /// Starts over from the key's current version.
    pub fn restart(&mut self) {
        (self.version, self.epoch) = self.watches.current(self.db, &self.key);
    }

    /// Ends the copy and offers `copy` for sharing (only if the key did not
    /// change meanwhile).
    pub fn publish(mut self, copy: &Arc<CollCopy>) {
        self.open = false;
        self.watches
            .end_copy(self.db, &self.key, Some((copy, self.version, self.epoch)));
    }
}

impl Drop for Copying {
    fn drop(&mut self) {
        if self.open {
            self.watches.end_copy(self.db, &self.key, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Builder;
    use super::*;

    fn copy() -> Arc<CollCopy> {
        let mut b = Builder::new(Kind::Hash, super::super::tests::budget(), usize::MAX / 2);
        b.push(b"f", b"v").expect("ok");
        Arc::new(b.finish())
    }

    fn leaked() -> &'static Watches {
        Box::leak(Box::new(Watches::new()))
    }

    #[test]
    fn a_guard_dropped_unpublished_ends_the_copy_even_in_a_panic() {
        let w = leaked();
        let g = w.begin(0, b"h");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _owned = g;
            panic!("job failed before publishing");
        }));
        assert!(r.is_err());
        assert_eq!(w.watched(), 0, "copying count left up");
        // A later copy can be published and shared.
        let g = w.begin(0, b"h");
        let c = copy();
        g.publish(&c);
        assert!(w.reusable(0, b"h", Kind::Hash).is_some());
        assert!(w.reusable(0, b"h", Kind::Set).is_none(), "other kind");
    }

    #[test]
    fn unchanged_copy_is_reused_and_any_event_invalidates_it() {
        let w = leaked();
        let c = copy();
        w.begin(0, b"h").publish(&c);
        assert!(w.reusable(0, b"h", Kind::Hash).is_some());
        assert!(w.reusable(1, b"h", Kind::Hash).is_none(), "other database");
        w.bump(0, b"h");
        assert!(w.reusable(0, b"h", Kind::Hash).is_none());
    }

    #[test]
    fn a_copy_changed_while_in_flight_is_not_published() {
        let w = leaked();
        let g = w.begin(0, b"h");
        w.bump(0, b"h");
        assert!(g.changed());
        let c = copy();
        g.publish(&c);
        assert!(w.reusable(0, b"h", Kind::Hash).is_none());
    }

    #[test]
    fn flush_epoch_invalidates_and_dead_copies_are_pruned() {
        let w = leaked();
        let c = copy();
        w.begin(0, b"h").publish(&c);
        w.bump_all();
        assert!(w.reusable(0, b"h", Kind::Hash).is_none());
        drop(c);
        w.sweep();
        assert_eq!(w.watched(), 0);
        w.bump(0, b"h"); // no watch: no-op
    }
}
