//! `Recent`: what the operation log last said about recently written keys,
//! so that a write whose truth the log already holds is not logged again.
//!
//! Most writes to a collection change nothing the index holds: `HSET`,
//! `SADD`, `ZADD`, `LPUSH` on an existing key leave its type and expiry as
//! they were. Plain strings have their own, exact test (`filter`); this
//! cache catches the rest when the same keys are written again and again.
//!
//! A direct-mapped table of [`SLOTS`] entries, indexed by a hash of the
//! database and the key. Invariant (kept by the caller, `Live`): an entry
//! `(db, key, truth)` means the last `Set` logged for that key carried
//! `truth`, and no flush, swap or slot purge was logged after it. Every
//! logged `Set` overwrites its key's slot ([`logged`](Recent::logged)), so
//! an entry is never stale: at worst a key is missing (evicted by another
//! key of the same slot), which only costs a redundant log entry.
//!
//! Pure Rust, no server types. Locking: none; the owner serialises access
//! (only the thread holding the server lock logs truths).

use super::{Key, Meta};

/// Entries of the table (about 192 KiB).
pub const SLOTS: usize = 4096;

#[derive(Clone)]
struct Entry {
    db: usize,
    key: Key,
    truth: Option<Meta>,
}

pub struct Recent {
    slots: Box<[Option<Entry>]>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            slots: vec![None; SLOTS].into_boxed_slice(),
        }
    }
}

/// The slot of a key in `db` whose [`hash`](super::filter::hash) is `h`.
#[inline]
pub fn slot_of(db: usize, h: u64) -> usize {
    ((h ^ (db as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) >> 40) as usize % SLOTS
}

/// Bytes of one slot.
pub const SLOT_BYTES: usize = std::mem::size_of::<Option<Entry>>();

impl Recent {
    /// Whether the last truth logged for `key` in `db` is known to be
    /// `truth`.
    #[cfg(test)]
    #[inline]
    pub fn holds(&self, db: usize, key: &[u8], truth: Option<Meta>) -> bool {
        self.holds_h(db, super::filter::hash(key), key, truth)
    }

    /// Whether the last truth logged for `key` (whose hash is `h`) in `db`
    /// is known to be `truth`.
    #[inline]
    pub fn holds_h(&self, db: usize, h: u64, key: &[u8], truth: Option<Meta>) -> bool {
        self.slots[slot_of(db, h)]
            .as_ref()
            .is_some_and(|e| e.db == db && e.truth == truth && e.key.as_bytes() == key)
    }

    /// Notes that `truth` was just logged for `key` in `db`.
    #[cfg(test)]
    #[inline]
    pub fn logged(&mut self, db: usize, key: &Key, truth: Option<Meta>) {
        self.logged_h(db, super::filter::hash(key.as_bytes()), key, truth)
    }

    /// Notes that `truth` was just logged for `key` (whose hash is `h`) in
    /// `db`.
    #[inline]
    pub fn logged_h(&mut self, db: usize, h: u64, key: &Key, truth: Option<Meta>) {
        self.slots[slot_of(db, h)] = Some(Entry {
            db,
            key: key.clone(),
            truth,
        });
    }

    /// Where the slots are (they never move): for prefetching a key's slot
    /// ([`slot_of`], [`SLOT_BYTES`]) before it is needed.
    pub fn base(&self) -> usize {
        self.slots.as_ptr() as usize
    }

    /// Forgets everything (a flush, a swap or a purge was logged).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }

    /// Heap bytes of the table and of the keys it holds.
    pub fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Option<Entry>>()
            + self
                .slots
                .iter()
                .flatten()
                .map(|e| e.key.heap_bytes())
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;
    use std::collections::HashMap;

    fn m(t: u8) -> Option<Meta> {
        (t > 0).then(|| Meta::new(t - 1, None))
    }

    #[rstest]
    #[case::same_truth(0, b"k".as_slice(), 1, 0, b"k".as_slice(), 1, true)]
    #[case::other_truth(0, b"k".as_slice(), 1, 0, b"k".as_slice(), 2, false)]
    #[case::other_db(0, b"k".as_slice(), 1, 1, b"k".as_slice(), 1, false)]
    #[case::other_key(0, b"k".as_slice(), 1, 0, b"j".as_slice(), 1, false)]
    #[case::deleted(0, b"k".as_slice(), 0, 0, b"k".as_slice(), 0, true)]
    #[case::long_key(3, b"a key longer than twenty-two bytes".as_slice(), 4, 3, b"a key longer than twenty-two bytes".as_slice(), 4, true)]
    fn holds_only_what_was_logged(
        #[case] db: usize,
        #[case] key: &[u8],
        #[case] t: u8,
        #[case] qdb: usize,
        #[case] qkey: &[u8],
        #[case] qt: u8,
        #[case] want: bool,
    ) {
        let mut r = Recent::default();
        assert!(!r.holds(qdb, qkey, m(qt)));
        r.logged(db, &Key::new(key), m(t));
        assert_eq!(r.holds(qdb, qkey, m(qt)), want);
        r.clear();
        assert!(!r.holds(qdb, qkey, m(qt)));
    }

    #[test]
    fn the_table_has_a_fixed_size() {
        let mut r = Recent::default();
        let empty = r.bytes();
        for i in 0..100_000u32 {
            r.logged(0, &Key::new(&i.to_be_bytes()), m(1));
        }
        assert_eq!(r.bytes(), empty);
        assert!(empty < 256 * 1024, "{empty}");
    }

    proptest! {
        /// Against a model of the log (the last truth logged per key, all
        /// forgotten on a clear): `holds` never says yes wrongly, and says
        /// yes right after a key is logged.
        #[test]
        fn never_claims_a_truth_the_log_does_not_hold(
            ops in proptest::collection::vec((0u8..8, 0usize..2, 0u16..6000, 0u8..3), 1..3000)
        ) {
            let mut r = Recent::default();
            let mut model: HashMap<(usize, Vec<u8>), Option<Meta>> = HashMap::new();
            for (op, db, k, t) in ops {
                let key = format!("key:{k}").into_bytes();
                match op {
                    0 => {
                        r.clear();
                        model.clear();
                    }
                    1..=3 => {
                        r.logged(db, &Key::new(&key), m(t));
                        model.insert((db, key.clone()), m(t));
                        prop_assert!(r.holds(db, &key, m(t)));
                    }
                    _ => {
                        if r.holds(db, &key, m(t)) {
                            prop_assert_eq!(model.get(&(db, key)), Some(&m(t)));
                        }
                    }
                }
            }
        }
    }
}
