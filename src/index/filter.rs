//! `KeyFilter`: a Bloom filter of the keys whose indexed metadata is not
//! the common case, a string without expiry.
//!
//! It lets the main thread drop, before it is ever logged, the truth of a
//! write that cannot change the index: when a key that existed before the
//! command (no "new" event) is now a string without expiry and the filter
//! says it is *not* among the keys indexed otherwise, the index already
//! holds exactly that. A Bloom filter has no false negatives, so a key it
//! does not contain really is indexed as a string without expiry (or not
//! at all, which only happens while the index is built after MODULE LOAD,
//! and that build records every key itself). False positives only mean a
//! truth is logged and looked up as before.
//!
//! Keys are added by name, whatever the database (SWAPDB moves keys between
//! databases without notifications; the set of names stays the same). Keys
//! are never removed; the filter is rebuilt from the index when it has
//! taken in as many keys as it was sized for (see `Live`).
//!
//! Locking: none; bits are atomic words. The filter in use has one writer,
//! the main thread (or whoever holds the server lock), which sets bits with
//! plain stores ([`KeyFilter::add_sole_writer`]); a filter being rebuilt is
//! written by the main thread and the indexer, with `fetch_or`
//! ([`KeyFilter::add`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bits per key the filter is sized for: with 3 probes in one 512-bit
/// block, well under 1% false positives at capacity.
const BITS_PER_KEY: usize = 16;
/// Smallest capacity (keys): 16 KiB of bits.
pub const MIN_CAPACITY: usize = 8192;

pub struct KeyFilter {
    /// Cache-line blocks: a key's three bits are all in one block, so a
    /// check or an addition touches one cache line (one miss, not three).
    blocks: Box<[Block]>,
    /// `blocks.len() - 1` (a power of two minus one).
    mask: u64,
    /// Keys added that set at least one new bit (distinct keys, nearly).
    added: AtomicUsize,
    capacity: usize,
}

/// 512 bits, aligned to a cache line.
#[repr(align(64))]
struct Block([AtomicU64; 8]);

/// A 64-bit hash of a key (word-at-a-time multiply-mix; not
/// cryptographic: only the spread matters here).
pub fn hash(key: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (key.len() as u64).wrapping_mul(K) ^ 0x2545_F491_4F6C_DD1D;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
        h ^= h >> 29;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    h ^ (h >> 32)
}

impl KeyFilter {
    /// A filter for about `capacity` keys.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(MIN_CAPACITY);
        let blocks = (capacity * BITS_PER_KEY / 512).next_power_of_two();
        KeyFilter {
            blocks: (0..blocks)
                .map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            mask: blocks as u64 - 1,
            added: AtomicUsize::new(0),
            capacity,
        }
    }

    /// The block of a key whose [`hash`] is `h`, and its three (word, bit)
    /// positions in it.
    #[inline]
    fn probes(&self, h: u64) -> (Option<&Block>, [(usize, u64); 3]) {
        let block = self.blocks.get((h & self.mask) as usize);
        let bit = |shift: u32| {
            let p = (h >> shift) & 511;
            ((p >> 6) as usize, 1u64 << (p & 63))
        };
        (block, [bit(32), bit(41), bit(50)])
    }

    /// Adds a key while another thread may add too (a filter being
    /// rebuilt): atomic read-modify-writes.
    pub fn add(&self, key: &[u8]) {
        self.add_h(hash(key))
    }

    /// [`add`](Self::add) for a key whose [`hash`] is `h`.
    pub fn add_h(&self, h: u64) {
        let (Some(block), bits) = self.probes(h) else {
            return;
        };
        let mut new = false;
        for (w, bit) in bits {
            new |= block.0[w].fetch_or(bit, Ordering::Relaxed) & bit == 0;
        }
        if new {
            self.added.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds a key when no other thread writes this filter (the main thread
    /// and the filter in use): plain loads, and stores only for bits not
    /// set yet, so a key already there costs no write at all.
    #[cfg(test)]
    pub fn add_sole_writer(&self, key: &[u8]) {
        self.add_sole_writer_h(hash(key))
    }

    /// Adds the key whose [`hash`] is `h` when no other thread writes this
    /// filter (the main thread and the filter in use): plain loads, and
    /// stores only for bits not set yet.
    pub fn add_sole_writer_h(&self, h: u64) {
        let (Some(block), bits) = self.probes(h) else {
            return;
        };
        let mut new = false;
        for (w, bit) in bits {
            let v = block.0[w].load(Ordering::Relaxed);
            if v & bit == 0 {
                block.0[w].store(v | bit, Ordering::Relaxed);
                new = true;
            }
        }
        if new {
            let n = self.added.load(Ordering::Relaxed);
            self.added.store(n + 1, Ordering::Relaxed);
        }
    }

    /// `false` only if `key` was never added.
    #[cfg(test)]
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_h(hash(key))
    }

    /// `false` only if the key whose [`hash`] is `h` was never added.
    #[inline]
    pub fn may_contain_h(&self, h: u64) -> bool {
        let (Some(block), bits) = self.probes(h) else {
            return true;
        };
        bits.iter()
            .all(|&(w, bit)| block.0[w].load(Ordering::Relaxed) & bit != 0)
    }

    /// Whether it has taken in as many keys as it was sized for.
    pub fn is_full(&self) -> bool {
        self.added.load(Ordering::Relaxed) >= self.capacity
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Heap bytes of the bits.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * 64
    }

    /// Where the blocks are and the mask that picks one from a key's
    /// [`hash`]: for prefetching a key's block before it is needed.
    pub fn layout(&self) -> (usize, u64) {
        (self.blocks.as_ptr() as usize, self.mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// No false negatives, whatever the keys.
        #[test]
        fn never_forgets_a_key(keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..300)) {
            let f = KeyFilter::new(16);
            for (i, k) in keys.iter().enumerate() {
                if i % 2 == 0 { f.add(k) } else { f.add_sole_writer(k) }
            }
            for k in &keys {
                prop_assert!(f.may_contain(k));
            }
        }
    }

    #[test]
    fn false_positives_are_rare_at_capacity() {
        let f = KeyFilter::new(100_000);
        let mut i = 0;
        while !f.is_full() && i < 2 * f.capacity() {
            f.add(format!("user:{i:012}:item:3").as_bytes());
            i += 1;
        }
        assert!(f.is_full(), "not full after {i} keys");
        let fp = (0..100_000)
            .filter(|i| f.may_contain(format!("other:{i:012}").as_bytes()))
            .count();
        assert!(fp < 1_000, "{fp} false positives in 100,000");
    }
}
