//! The versioned shadow index: one persistent ordered map per database.
//!
//! Pure Rust, no server types. The live maps are written by whoever applies
//! the operation log ([`live`]: the indexer thread, or a worker cutting a
//! snapshot); a [`Snapshot`] is an O(1) clone of a map's root that later
//! writes never change (path copying), so workers walk it without any lock.
//! See docs/DESIGN.md for why this structure.

pub mod key;
pub mod live;
pub mod meta;
pub mod tree;
pub mod walk;

pub use key::Key;
pub use live::{Live, Op};
pub use meta::{Meta, TypeId, TypeNames};

pub use tree::KeyMap;

use crate::slot::SlotSet;

use std::sync::Arc;

/// What changed in the index after applying the truth about one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Inserted,
    Updated,
    Removed,
}

#[derive(Clone, Default)]
struct DbIndex {
    map: KeyMap,
    /// Bumped on every change; snapshots remember the version they saw.
    version: u64,
    /// Heap bytes of long keys (inline keys cost nothing extra).
    heap_bytes: usize,
}

/// Live index of every database.
///
/// Locking: not internally synchronised; [`Live`] keeps it in a `Mutex`
/// held while applying a batch of the log or cutting a snapshot.
#[derive(Default)]
pub struct Keyspace {
    dbs: Vec<DbIndex>,
}

/// A frozen, shareable view of one database at one instant.
pub struct Snapshot {
    pub map: KeyMap,
    pub db: usize,
    pub version: u64,
    /// Server clock (Unix ms) at the instant the snapshot was opened: keys
    /// whose expiry had passed by then are not part of the snapshot.
    pub at_ms: i64,
    /// In cluster mode, the slots whose keys the snapshot shows (those the
    /// node served at that instant); `None` shows every key.
    pub slots: Option<Arc<SlotSet>>,
}

impl Snapshot {
    /// Keys alive in the snapshot, in order.
    #[cfg(test)]
    pub fn live_keys(&self) -> impl Iterator<Item = &Key> {
        self.map
            .iter()
            .filter(move |(_, m)| m.alive_at(self.at_ms))
            .map(|(k, _)| k)
    }
}

impl Keyspace {
    pub fn new(databases: usize) -> Self {
        Keyspace {
            dbs: vec![DbIndex::default(); databases.max(1)],
        }
    }

    fn db_mut(&mut self, db: usize) -> &mut DbIndex {
        if db >= self.dbs.len() {
            self.dbs.resize_with(db + 1, DbIndex::default);
        }
        &mut self.dbs[db]
    }

    pub fn databases(&self) -> usize {
        self.dbs.len()
    }

    /// Records the truth about `key` in `db`: `Some(meta)` if it exists,
    /// `None` if it does not. A write that changes nothing leaves the map
    /// (and any snapshot sharing it) untouched, so no node is copied.
    pub fn apply(&mut self, db: usize, key: &Key, truth: Option<Meta>) -> Change {
        let d = self.db_mut(db);
        let change = match (d.map.get(key).copied(), truth) {
            (None, None) => return Change::Unchanged,
            (Some(old), Some(new)) if old == new => return Change::Unchanged,
            (None, Some(m)) => {
                d.heap_bytes += key.heap_bytes();
                d.map.insert(key.clone(), m);
                Change::Inserted
            }
            (Some(_), Some(m)) => {
                d.map.insert(key.clone(), m);
                Change::Updated
            }
            (Some(_), None) => {
                if let Some((k, _)) = d.map.remove(key) {
                    d.heap_bytes = d.heap_bytes.saturating_sub(k.heap_bytes());
                }
                Change::Removed
            }
        };
        d.version += 1;
        change
    }

    /// Empties one database in O(1) and returns the old map so the caller
    /// can drop it off the main thread (it may hold millions of keys).
    pub fn flush(&mut self, db: usize) -> KeyMap {
        let d = self.db_mut(db);
        d.version += 1;
        d.heap_bytes = 0;
        std::mem::take(&mut d.map)
    }

    /// Empties every database; returns the old maps for disposal.
    pub fn flush_all(&mut self) -> Vec<KeyMap> {
        (0..self.dbs.len()).map(|db| self.flush(db)).collect()
    }

    /// Exchanges two databases' indexes in O(1) (SWAPDB).
    pub fn swap(&mut self, a: usize, b: usize) {
        self.db_mut(a.max(b));
        self.dbs.swap(a, b);
        self.dbs[a].version += 1;
        self.dbs[b].version += 1;
    }

    /// Opens a snapshot in O(1): clones the root pointer, copies nothing.
    pub fn snapshot(&mut self, db: usize, at_ms: i64) -> Arc<Snapshot> {
        self.snapshot_with(db, at_ms, None)
    }

    /// [`snapshot`](Self::snapshot) showing only keys of `slots` (if set).
    pub fn snapshot_with(
        &mut self,
        db: usize,
        at_ms: i64,
        slots: Option<Arc<SlotSet>>,
    ) -> Arc<Snapshot> {
        let d = self.db_mut(db);
        Arc::new(Snapshot {
            map: d.map.clone(),
            db,
            version: d.version,
            at_ms,
            slots,
        })
    }

    /// Removes, in every database, the keys whose slot is in `slots`; the
    /// removed entries' keys are returned for disposal off the caller's
    /// thread. Returns how many keys were removed.
    pub fn purge_slots(&mut self, slots: &SlotSet) -> usize {
        let mut removed = 0;
        for db in 0..self.dbs.len() {
            let d = &mut self.dbs[db];
            let doomed: Vec<Key> = d
                .map
                .iter()
                .filter(|(k, _)| slots.holds_key(k.as_bytes()))
                .map(|(k, _)| k.clone())
                .collect();
            if doomed.is_empty() {
                continue;
            }
            for k in &doomed {
                if let Some((k, _)) = d.map.remove(k) {
                    d.heap_bytes = d.heap_bytes.saturating_sub(k.heap_bytes());
                    removed += 1;
                }
            }
            d.version += 1;
        }
        removed
    }

    pub fn len(&self, db: usize) -> usize {
        self.dbs.get(db).map_or(0, |d| d.map.len())
    }

    pub fn version(&self, db: usize) -> u64 {
        self.dbs.get(db).map_or(0, |d| d.version)
    }

    #[cfg(test)]
    pub fn get(&self, db: usize, key: &[u8]) -> Option<Meta> {
        self.dbs
            .get(db)
            .and_then(|d| d.map.get(&Key::new(key)).copied())
    }

    /// Keys per database (only non-empty ones), for INFO.
    pub fn sizes(&self) -> Vec<(usize, usize)> {
        self.dbs
            .iter()
            .enumerate()
            .filter(|(_, d)| !d.map.is_empty())
            .map(|(i, d)| (i, d.map.len()))
            .collect()
    }

    /// Estimated bytes held by the live index (see [`EST_BYTES_PER_ENTRY`]).
    pub fn memory_estimate(&self) -> usize {
        self.dbs
            .iter()
            .map(|d| d.map.len() * EST_BYTES_PER_ENTRY + d.heap_bytes)
            .sum()
    }

    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.map.len()).sum()
    }
}

/// Estimated bytes the index uses per entry beyond heap-stored key bytes:
/// the 32-byte (key, meta) slot in a 2 KiB leaf of 62 slots, about 70% full
/// after random inserts and nearly full after ascending ones (see
/// [`tree`]), plus a share of the branch levels.
pub const EST_BYTES_PER_ENTRY: usize = 42;

#[cfg(test)]
mod tests;
