//! Keys written since an instant, for SNAPSHOT.UNLINK: while a deletion
//! runs, every keyspace event on a key of its database that matches its
//! pattern is recorded, so the deletion leaves alone keys written (or
//! deleted and re-created) after its snapshot. A flush, swap or load of
//! any database ends every running deletion (its snapshot no longer
//! describes what the databases hold).
//!
//! Cost when no deletion runs: one atomic load per keyspace event.

use crate::glob::Pattern;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One running deletion's record.
pub struct Tracker {
    db: usize,
    pattern: Pattern,
    keys: Mutex<HashSet<Box<[u8]>>>,
    ended: AtomicBool,
    /// Set while the deletion's own UNLINK runs: its events are not writes
    /// of others.
    deleting: AtomicBool,
}

/// Clears the `deleting` mark when dropped.
pub struct Deleting<'a>(&'a Tracker);

impl Drop for Deleting<'_> {
    fn drop(&mut self) {
        self.0.deleting.store(false, Ordering::SeqCst);
    }
}

impl Tracker {
    fn keys(&self) -> MutexGuard<'_, HashSet<Box<[u8]>>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` had a keyspace event since tracking began.
    pub fn written(&self, key: &[u8]) -> bool {
        self.keys().contains(key)
    }

    /// Marks the events fired until the returned guard drops as the
    /// deletion's own (not recorded).
    pub fn deleting(&self) -> Deleting<'_> {
        self.deleting.store(true, Ordering::SeqCst);
        Deleting(self)
    }

    /// Whether a flush, swap or load happened since tracking began.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }
}

/// Counters of SNAPSHOT.UNLINK, for INFO.
#[derive(Default)]
pub struct UnlinkStats {
    pub calls: AtomicU64,
    pub keys_unlinked: AtomicU64,
    pub keys_denied: AtomicU64,
    pub keys_written: AtomicU64,
    /// Keys skipped because their slot is not this node's: keys of a slot
    /// it imports the legacy way, which `SCAN` (and the snapshot) shows
    /// but the server lets no module's call write.
    pub keys_not_owned: AtomicU64,
    pub stopped: AtomicU64,
    pub longest_slice_us: AtomicU64,
    /// The same, in CPU time of the main thread (without preemption).
    pub longest_slice_cpu_us: AtomicU64,
    /// Slices run, and those during which the main thread blocked (waited
    /// for a lock or I/O, as opposed to being preempted).
    pub slices: AtomicU64,
    pub slices_blocked: AtomicU64,
}

#[derive(Default)]
pub struct Trackers {
    active: AtomicUsize,
    list: Mutex<Vec<Arc<Tracker>>>,
    pub stats: UnlinkStats,
}

/// A tracker registered until dropped.
pub struct Tracking {
    owner: &'static Trackers,
    t: Arc<Tracker>,
}

impl std::ops::Deref for Tracking {
    type Target = Tracker;
    fn deref(&self) -> &Tracker {
        &self.t
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        let mut l = self.owner.list();
        l.retain(|t| !Arc::ptr_eq(t, &self.t));
        self.owner.active.store(l.len(), Ordering::SeqCst);
    }
}

impl Trackers {
    fn list(&self) -> MutexGuard<'_, Vec<Arc<Tracker>>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts recording events on keys of `db` matching `pattern`.
    pub fn track(&'static self, db: usize, pattern: Pattern) -> Tracking {
        let t = Arc::new(Tracker {
            db,
            pattern,
            keys: Mutex::new(HashSet::new()),
            ended: AtomicBool::new(false),
            deleting: AtomicBool::new(false),
        });
        let mut l = self.list();
        l.push(t.clone());
        self.active.store(l.len(), Ordering::SeqCst);
        Tracking { owner: self, t }
    }

    /// A keyspace event on `key` in `db` (`None`: any database).
    /// Whether a deletion is running (events must be recorded).
    #[inline]
    pub fn any(&self) -> bool {
        self.active.load(Ordering::SeqCst) != 0
    }

    pub fn record(&self, db: Option<usize>, key: &[u8]) {
        if self.active.load(Ordering::SeqCst) == 0 {
            return;
        }
        for t in self.list().iter() {
            let own = t.deleting.load(Ordering::SeqCst);
            if !own && db.is_none_or(|d| d == t.db) && t.pattern.is_match(key) {
                t.keys().insert(key.into());
            }
        }
    }

    /// A flush, swap or load: ends every running deletion.
    pub fn end_all(&self) {
        if self.active.load(Ordering::SeqCst) == 0 {
            return;
        }
        for t in self.list().iter() {
            t.ended.store(true, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_matching_keys_of_its_database_until_dropped() {
        let all: &'static Trackers = Box::leak(Box::default());
        all.record(Some(0), b"user:1"); // nothing tracked: no-op
        let t = all.track(0, Pattern::new(b"user:*"));
        all.record(Some(0), b"user:1");
        all.record(Some(1), b"user:2");
        all.record(Some(0), b"other");
        all.record(None, b"user:3");
        assert!(t.written(b"user:1") && t.written(b"user:3"));
        assert!(!t.written(b"user:2") && !t.written(b"other"));
        assert!(!t.ended());
        {
            let _own = t.deleting();
            all.record(Some(0), b"user:9");
        }
        all.record(Some(0), b"user:8");
        assert!(!t.written(b"user:9") && t.written(b"user:8"));
        all.end_all();
        assert!(t.ended());
        drop(t);
        assert_eq!(all.active.load(Ordering::SeqCst), 0);
        assert!(all.list().is_empty());
    }
}
