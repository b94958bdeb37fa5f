//! The versioned shadow index: one persistent ordered map per database.
//!
//! Pure Rust, no server types. The live maps are written by whoever applies
//! the operation log ([`live`]: the indexer thread, or a worker cutting a
//! snapshot); a [`Snapshot`] is a version that reads the live map through
//! the database's undo log ([`history`]): opened in O(1), never changed by
//! later writes, walked by workers without any lock. See docs/DESIGN.md for
//! why this structure.
//!
//! Part of the pure core: may touch only the core (`glob`, `slot`); the
//! server-lock holder's part of the filter is a [`live::FilterCache`] it
//! owns and lends.

pub mod entry;
pub mod filter;
pub mod history;
pub mod key;
pub mod leaf;
pub mod live;
pub mod meta;
pub mod prefetch;
pub mod recent;
pub mod tree;
pub mod walk;

pub use entry::{Entry, Stamp};
pub use key::{Key, KeyProbe};
pub use live::{Live, Op};
pub use meta::{Meta, TypeId, TypeNames};

pub use tree::KeyMap;

use crate::slot::SlotSet;
use arrayvec::ArrayVec;
use history::Keep;

use std::sync::Arc;

/// What changed in the index after applying the truth about one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Inserted,
    Updated,
    Removed,
}

#[derive(Default)]
struct DbIndex {
    map: KeyMap,
    /// Bumped on every change; snapshots remember the version they saw.
    version: u64,
    /// Old values of the keys changed while snapshots are open (beside
    /// those the live entries keep: see [`entry`]).
    undo: history::Undo,
}

impl DbIndex {
    /// Makes `key`, whose live entry is `current` (found at `at`, if the
    /// caller looked), what `truth` says, keeping for open snapshots what
    /// they may read of its value before:
    /// - a deletion leaves a tombstone with its version, a creation a
    ///   stamp with its version (or over a tombstone, moves the tombstone's
    ///   deletion to the undo log first);
    /// - a change of a key that stays goes to the undo log;
    /// - a change no snapshot reads (the key changed after the newest)
    ///   keeps only what earlier changes kept; with no snapshot open,
    ///   nothing is kept and the entry loses its stamp.
    fn write(
        &mut self,
        key: &[u8],
        current: Option<Entry>,
        truth: Option<Meta>,
        at: Option<&tree::Located>,
    ) -> Change {
        let alive = current.and_then(Entry::alive);
        if alive == truth {
            return Change::Unchanged;
        }
        let v = self.version + 1;
        let stamp = current.map_or(Stamp::NONE, |e| e.stamp);
        let keep = self.undo.keeps(key, stamp);
        let (new, change) = match (alive, truth) {
            (Some(a), Some(t)) => {
                if keep == Keep::This {
                    self.undo.record(key, v, Some(a));
                }
                // A creation stamp stays true of a key that stays.
                let s = if keep == Keep::Nothing {
                    Stamp::NONE
                } else {
                    stamp
                };
                (Some(Entry::new(t, s)), Change::Updated)
            }
            (Some(a), None) => {
                // The entry's creation stamp goes to the log if a snapshot
                // may read it: the tombstone takes its place, or the entry
                // goes while a later change is in the log (a snapshot
                // older than the creation would read that one instead). A
                // creation after the newest snapshot has no later change
                // in the log, and the key's absence says the same.
                let s = stamp.version();
                match (keep, s) {
                    (Keep::This, Some(s)) => self.undo.record(key, s, None),
                    (Keep::Kept, Some(s)) if s <= self.undo.newest() => {
                        self.undo.record(key, s, None)
                    }
                    _ => {}
                }
                let new = (keep == Keep::This).then(|| Entry::new(a, Stamp::dead(v)));
                (new, Change::Removed)
            }
            (None, Some(t)) => {
                // Over a tombstone: its deletion goes to the log, unless
                // every snapshot that reads it sees the same (it came after
                // the newest one, and the key comes back as it was).
                if let Some(c) = current {
                    let same = keep == Keep::Kept && c.meta == t;
                    if let (Some(d), false, false) =
                        (c.stamp.version(), keep == Keep::Nothing, same)
                    {
                        self.undo.record(key, d, Some(c.meta));
                    }
                }
                let s = if keep == Keep::This {
                    Stamp::born(v)
                } else {
                    Stamp::NONE
                };
                (Some(Entry::new(t, s)), Change::Inserted)
            }
            (None, None) => return Change::Unchanged,
        };
        match (new, current, at) {
            (Some(e), _, Some(at)) => self.map.put_located(key, e, at),
            (Some(e), _, None) => self.map.put_changed(key, e),
            (None, Some(_), Some(at)) => self.map.remove_located(key, at),
            (None, Some(_), None) => self.map.remove_present(key),
            (None, None, _) => None,
        };
        self.version = v;
        change
    }
}

/// Live index of every database.
///
/// Locking: not internally synchronised; [`Live`] keeps it in a `Mutex`
/// held while applying a batch of the log or cutting a snapshot.
#[derive(Default)]
pub struct Keyspace {
    dbs: Vec<DbIndex>,
    /// Undo logs dropped whole (no snapshot left to read them), to be
    /// freed off the main thread ([`take_garbage`](Self::take_garbage)).
    garbage: Vec<KeyMap>,
    /// How long a used cursor may be sent again: what an iteration passed
    /// stays kept that long (see [`history::Pin::position`]). 0 unless set
    /// (the module sets the cursor registry's window).
    hold: std::time::Duration,
}

/// A frozen, shareable view of one database at one instant. It holds no
/// tree of its own: it reads the live map through its history (see
/// [`history`]), and its [`Pin`](history::Pin) keeps what it needs of the
/// past.
pub struct Snapshot {
    pin: Arc<history::Pin>,
    /// The live map's node bytes when the snapshot was cut (the index's
    /// size as the iteration began).
    pub index_bytes: usize,
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
    /// What the snapshot reads now (a page takes one and walks it).
    pub fn read(&self) -> history::Reader {
        self.pin.read()
    }

    /// The key's type and expiry in the snapshot.
    pub fn get(&self, key: &[u8]) -> Option<Meta> {
        self.pin.read().get(key)
    }

    /// The iteration over this snapshot will never read `after` or a key
    /// before it again (it keeps its last page's start for a retry).
    pub fn advance(&self, after: &Key) {
        self.pin.advance(after);
    }

    /// Whether a page after `after` may no longer read this snapshot
    /// exactly: its iteration went on past it (see [`history::Pin::passed`]).
    pub fn passed(&self, after: Option<&Key>) -> bool {
        self.pin.passed(after)
    }

    /// Bytes of old values only this snapshot still reads: what ending its
    /// iteration would free (see [`history::Pin::alone_bytes`]).
    pub fn alone_bytes(&self) -> usize {
        self.pin.alone_bytes()
    }

    /// Entries in the snapshot (tests).
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.read().to_vec().len()
    }

    /// Keys alive in the snapshot, in order.
    #[cfg(test)]
    pub fn live_keys(&self) -> Vec<Vec<u8>> {
        self.read()
            .to_vec()
            .into_iter()
            .filter(|(_, m)| m.alive_at(self.at_ms))
            .map(|(k, _)| k)
            .collect()
    }
}

impl Keyspace {
    pub fn new(databases: usize) -> Self {
        Keyspace {
            dbs: (0..databases.max(1)).map(|_| DbIndex::default()).collect(),
            garbage: Vec::new(),
            hold: std::time::Duration::ZERO,
        }
    }

    /// Sets how long a used cursor may be sent again, for the snapshots cut
    /// from now on.
    pub fn set_hold(&mut self, hold: std::time::Duration) {
        self.hold = hold;
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
        self.apply_known(db, key, truth, None, None)
    }

    /// [`apply`](Self::apply), given what the index holds for the key if
    /// the caller just looked (`Some(current)`): a change then skips the
    /// lookup that would decide it.
    fn apply_known(
        &mut self,
        db: usize,
        key: &Key,
        truth: Option<Meta>,
        current: Option<Option<Entry>>,
        at: Option<&tree::Located>,
    ) -> Change {
        let d = self.db_mut(db);
        let key = key.as_bytes();
        let (current, at) = match current {
            Some(c) => (c, at),
            None => (d.map.get_entry(key), None),
        };
        let change = d.write(key, current, truth, at);
        if change != Change::Unchanged {
            d.undo.changed(&d.map, d.version);
        }
        change
    }

    /// Applies a run of truths in order, like [`apply`](Self::apply) one
    /// after the other, and returns how many changed the index. Most writes
    /// change nothing (a `SET` over a string without TTL), so the run is
    /// first looked up in batches ([`KeyMap::locate_many`], overlapping the
    /// cache misses) and only the changes are written, each where its
    /// lookup found it (no second search) unless an earlier change of the
    /// batch may have moved it: it reshaped a branch on its path (then the
    /// write searches again), or edited its leaf (then only the leaf is
    /// searched again).
    pub fn apply_run(&mut self, ops: &[(usize, &Key, Option<Meta>)]) -> usize {
        let mut changed = 0;
        let mut known = Vec::with_capacity(tree::GET_MANY);
        let mut keys: Vec<&[u8]> = Vec::with_capacity(tree::GET_MANY);
        for chunk in ops.chunks(tree::GET_MANY) {
            let db = chunk[0].0;
            let one_db = chunk.iter().all(|(d, _, _)| *d == db);
            known.clear();
            if one_db {
                keys.clear();
                keys.extend(chunk.iter().map(|(_, k, _)| k.as_bytes()));
                self.db_mut(db).map.locate_many(&keys, &mut known);
            }
            let mut changed_here: ArrayVec<usize, { tree::GET_MANY }> = ArrayVec::new();
            for (i, (db, key, truth)) in chunk.iter().enumerate() {
                // A lookup made before an earlier change of the same key in
                // this chunk is stale: let `apply` look again. (A lookup
                // whose probe is still valid saw no change to its leaf, so
                // none to its key.)
                let stale = |at: Option<&tree::Located>| {
                    !at.is_some_and(|at| at.probe_valid())
                        && changed_here.iter().any(|&j| {
                            let (d, k, _) = &chunk[j];
                            d == db && k == key
                        })
                };
                let (current, at) = match known.get(i) {
                    Some((m, at)) if one_db && !stale(at.as_ref()) => (Some(*m), at.as_ref()),
                    _ => (None, None),
                };
                if current.is_some_and(|c| c.and_then(Entry::alive) == *truth) {
                    continue;
                }
                if self.apply_known(*db, key, *truth, current, at) != Change::Unchanged {
                    changed += 1;
                    changed_here.push(i);
                    // Where the lookups found the keys after this one still
                    // holds unless this change moved it (see
                    // `Located::survives`).
                    if one_db {
                        let touched = self.db_mut(*db).map.touched();
                        for (_, later) in known.iter_mut().skip(i + 1) {
                            if later.as_mut().is_some_and(|at| !at.survives(touched)) {
                                *later = None;
                            }
                        }
                    }
                }
            }
        }
        changed
    }

    /// Empties one database in O(1) and returns the old map so the caller
    /// can drop it off the main thread (it may hold millions of keys).
    pub fn flush(&mut self, db: usize) -> KeyMap {
        let d = self.db_mut(db);
        let log = d.undo.retire(&d.map, d.version);
        d.version += 1;
        self.garbage.push(log);
        std::mem::take(&mut self.dbs[db].map)
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
        let hold = self.hold;
        let d = self.db_mut(db);
        Arc::new(Snapshot {
            pin: d.undo.pin(&d.map, d.version, hold),
            index_bytes: d.map.live_bytes(),
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
            let mut doomed: Vec<Vec<u8>> = Vec::new();
            let mut it = d.map.iter();
            while let Some((k, _)) = it.next_entry() {
                if slots.holds_key(k) {
                    doomed.push(k.to_vec());
                }
            }
            if doomed.is_empty() {
                continue;
            }
            for k in &doomed {
                let current = d.map.get_entry(k);
                if d.write(k, current, None, None) == Change::Removed {
                    removed += 1;
                }
            }
            d.undo.changed(&d.map, d.version);
        }
        removed
    }

    pub fn len(&self, db: usize) -> usize {
        self.dbs.get(db).map_or(0, |d| d.map.len())
    }

    /// A clone of a database's live map, to walk without the lock (it pins
    /// what later writes copy: hold it briefly).
    pub fn live_map(&self, db: usize) -> KeyMap {
        self.dbs.get(db).map(|d| d.map.clone()).unwrap_or_default()
    }

    /// Runs the undo logs' collector over at most `budget` entries in all
    /// (see [`history::Undo::collect`]); whether every database's pass
    /// ended.
    pub fn collect_history(&mut self, budget: usize) -> bool {
        let mut left = budget;
        let mut all_done = true;
        for d in &mut self.dbs {
            if d.undo.is_empty() && !d.undo.viewed() && d.map.stamped() == 0 {
                continue;
            }
            if left == 0 {
                all_done = false;
                continue;
            }
            // The live sweep's work is in entries and leaves, not stamps:
            // it may take what is left.
            let n = if d.map.stamped() > 0 {
                left
            } else {
                d.undo.len().min(left)
            };
            let (log, done, used) = d.undo.collect(&mut d.map, n.max(1), d.version);
            if let Some(log) = log {
                self.garbage.push(log);
            }
            all_done &= done;
            left = left.saturating_sub(used.max(1).min(n.max(1)));
        }
        all_done
    }

    /// Every database's collector starts a new pass (see
    /// [`history::Undo::restart_collection`]).
    pub fn restart_collection(&mut self) {
        for d in &mut self.dbs {
            d.undo.restart_collection();
        }
    }

    /// Old values kept for open snapshots, all databases: undo entries,
    /// live entries with a stamp (tombstones included), and the bytes of
    /// both (the undo log's nodes; the live map's share estimated, see
    /// [`KeyMap::kept_bytes`]).
    pub fn history_size(&self) -> (usize, usize, usize) {
        self.dbs.iter().fold((0, 0, 0), |(n, s, b), d| {
            (
                n + d.undo.len(),
                s + d.map.stamped(),
                b + d.undo.bytes() + d.map.kept_bytes(),
            )
        })
    }

    /// Maps dropped by the index, to free off the main thread.
    pub fn take_garbage(&mut self) -> Vec<KeyMap> {
        std::mem::take(&mut self.garbage)
    }

    pub fn version(&self, db: usize) -> u64 {
        self.dbs.get(db).map_or(0, |d| d.version)
    }

    #[cfg(test)]
    pub fn get(&self, db: usize, key: &[u8]) -> Option<Meta> {
        self.dbs.get(db).and_then(|d| d.map.get(key))
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

    /// Bytes of the live index's nodes (every database).
    pub fn live_bytes(&self) -> usize {
        self.dbs.iter().map(|d| d.map.live_bytes()).sum()
    }

    /// Bytes of the nodes reachable from the live maps, less what their
    /// tombstones and stamps keep for old versions (O(databases)).
    pub fn live_node_bytes(&self) -> usize {
        self.dbs
            .iter()
            .map(|d| d.map.live_bytes() - d.map.kept_bytes())
            .sum()
    }

    pub fn total_keys(&self) -> usize {
        self.dbs.iter().map(|d| d.map.len()).sum()
    }
}

#[cfg(test)]
mod tests;

/// Nanoseconds the calling thread has run (immune to other processes
/// taking the CPU, unlike wall time): for the speed tests.
#[cfg(test)]
pub(crate) fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
