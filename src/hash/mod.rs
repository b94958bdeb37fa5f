//! Point-in-time copies of hashes for SNAPSHOT.HSCAN (pure Rust).
//!
//! A [`HashCopy`] stores every field and value of one hash in one arena,
//! sorted by field, so a cursor is just a position. Bytes held by all copies
//! are accounted globally against `snapshot.hash-memory-limit`.

pub mod watch;

use crate::glob::Pattern;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

static BYTES_HELD: AtomicUsize = AtomicUsize::new(0);
static COPIES_OPEN: AtomicUsize = AtomicUsize::new(0);
static COPIES_MADE: AtomicU64 = AtomicU64::new(0);

/// Bytes held by live hash copies (and copies being built).
pub fn bytes_held() -> usize {
    BYTES_HELD.load(Ordering::SeqCst)
}

pub fn copies_open() -> usize {
    COPIES_OPEN.load(Ordering::SeqCst)
}

pub fn copies_made() -> u64 {
    COPIES_MADE.load(Ordering::Relaxed)
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    off: usize,
    /// Lengths as `usize`: a field or value may exceed 4 GiB when the
    /// server allows bulk strings that large.
    flen: usize,
    vlen: usize,
}

const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// The memory limit would be exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverLimit {
    pub held: usize,
    pub limit: usize,
}

/// Accumulates fields and values; accounts bytes as they arrive.
pub struct Builder {
    arena: Vec<u8>,
    slots: Vec<Slot>,
    accounted: usize,
    limit: usize,
}

impl Builder {
    pub fn new(limit: usize) -> Self {
        Builder {
            arena: Vec::new(),
            slots: Vec::new(),
            accounted: 0,
            limit,
        }
    }

    /// Adds one field/value pair (duplicates are removed in `finish`).
    pub fn push(&mut self, field: &[u8], value: &[u8]) -> Result<(), OverLimit> {
        let cost = field.len() + value.len() + SLOT_BYTES;
        let held = BYTES_HELD.fetch_add(cost, Ordering::SeqCst) + cost;
        self.accounted += cost;
        if held > self.limit {
            return Err(OverLimit {
                held: held - cost,
                limit: self.limit,
            });
        }
        let off = self.arena.len();
        self.arena.extend_from_slice(field);
        self.arena.extend_from_slice(value);
        self.slots.push(Slot {
            off,
            flen: field.len(),
            vlen: value.len(),
        });
        Ok(())
    }

    /// Reserves room for `total` fields in all, estimated from the ones
    /// held so far (at most `limit` bytes of fields and values): a copy made
    /// in slices then grows its buffers once instead of doubling them, each
    /// doubling copying everything held so far (milliseconds for a hash of a
    /// million fields, on the main thread).
    pub fn reserve_for(&mut self, total: usize) {
        let n = self.slots.len();
        if n == 0 || total <= n {
            return;
        }
        let more = total - n;
        let per_field = self.arena.len().div_ceil(n);
        let bytes = per_field
            .saturating_mul(more)
            .saturating_add(per_field.saturating_mul(more) / 8);
        self.slots.reserve(more);
        self.arena.reserve(bytes.min(self.limit));
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Discards what was copied so far (e.g. to retry after a write).
    pub fn clear(&mut self) {
        self.arena.clear();
        self.slots.clear();
        BYTES_HELD.fetch_sub(self.accounted, Ordering::SeqCst);
        self.accounted = 0;
    }

    /// Sorts by field and drops repeated fields (a sliced HSCAN may return
    /// a field twice while the server rehashes).
    pub fn finish(mut self) -> HashCopy {
        let arena = std::mem::take(&mut self.arena);
        let mut slots = std::mem::take(&mut self.slots);
        let field = |s: &Slot| &arena[s.off..s.off + s.flen];
        slots.sort_by(|a, b| field(a).cmp(field(b)));
        slots.dedup_by(|a, b| field(a) == field(b));
        let accounted = std::mem::replace(&mut self.accounted, 0);
        COPIES_OPEN.fetch_add(1, Ordering::SeqCst);
        COPIES_MADE.fetch_add(1, Ordering::Relaxed);
        HashCopy {
            arena,
            slots,
            accounted,
        }
    }
}

impl Drop for Builder {
    fn drop(&mut self) {
        BYTES_HELD.fetch_sub(self.accounted, Ordering::SeqCst);
    }
}

/// An immutable copy of one hash, fields in byte order.
pub struct HashCopy {
    arena: Vec<u8>,
    slots: Vec<Slot>,
    accounted: usize,
}

impl Drop for HashCopy {
    fn drop(&mut self) {
        BYTES_HELD.fetch_sub(self.accounted, Ordering::SeqCst);
        COPIES_OPEN.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One page of a hash iteration: positions of the fields to return.
#[derive(Debug, PartialEq, Eq)]
pub struct HashPage {
    pub items: Vec<usize>,
    /// Position to resume at, `None` when done.
    pub next: Option<usize>,
    pub examined: usize,
}

impl HashCopy {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.accounted
    }

    pub fn field(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        &self.arena[s.off..s.off + s.flen]
    }

    pub fn value(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        let start = s.off + s.flen;
        &self.arena[start..start + s.vlen]
    }

    /// Fields from position `from` matching `pattern`: at most `count`,
    /// examining at most `budget` fields.
    pub fn page(
        &self,
        from: usize,
        pattern: Option<&Pattern>,
        count: usize,
        budget: usize,
    ) -> HashPage {
        let pattern = pattern.filter(|p| !p.matches_all());
        let (count, budget) = (count.max(1), budget.max(1));
        let mut items = Vec::with_capacity(count.min(1024));
        let mut pos = from;
        let mut examined = 0;
        while pos < self.slots.len() && items.len() < count && examined < budget {
            if pattern.is_none_or(|p| p.is_match(self.field(pos))) {
                items.push(pos);
            }
            pos += 1;
            examined += 1;
        }
        HashPage {
            items,
            next: (pos < self.slots.len()).then_some(pos),
            examined,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn reserve_for_grows_the_buffers_once() {
        let mut b = Builder::new(usize::MAX / 2);
        for i in 0..100 {
            b.push(format!("f{i:04}").as_bytes(), b"0123456789")
                .expect("under limit");
        }
        b.reserve_for(10_000);
        let (slots, arena) = (b.slots.as_ptr(), b.arena.as_ptr());
        for i in 100..10_000 {
            b.push(format!("f{i:04}").as_bytes(), b"0123456789")
                .expect("under limit");
        }
        assert_eq!(b.slots.as_ptr(), slots, "slots reallocated");
        assert_eq!(b.arena.as_ptr(), arena, "arena reallocated");
        assert_eq!(b.len(), 10_000);
        // Nothing to estimate from, or nothing more to come: no-ops.
        let mut e = Builder::new(1000);
        e.reserve_for(1_000_000);
        assert_eq!(e.arena.capacity(), 0);
        b.reserve_for(5);
        assert_eq!(b.finish().page(0, None, 3, 10).items, vec![0, 1, 2]);
    }

    fn copy_of(pairs: &[(&str, &str)]) -> HashCopy {
        let mut b = Builder::new(usize::MAX / 2);
        for (f, v) in pairs {
            b.push(f.as_bytes(), v.as_bytes()).expect("under limit");
        }
        b.finish()
    }

    #[test]
    fn sorts_and_dedups_fields() {
        let c = copy_of(&[("b", "2"), ("a", "1"), ("b", "2"), ("c", "3")]);
        let fields: Vec<&[u8]> = (0..c.len()).map(|i| c.field(i)).collect();
        assert_eq!(fields, vec![b"a" as &[u8], b"b", b"c"]);
        assert_eq!(c.value(1), b"2");
    }

    #[rstest]
    #[case(1)]
    #[case(3)]
    #[case(100)]
    fn pages_cover_every_field_once_within_count(#[case] count: usize) {
        let pairs: Vec<(String, String)> = (0..250)
            .map(|i| (format!("f{i:03}"), i.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(f, v)| (f.as_str(), v.as_str()))
            .collect();
        let c = copy_of(&refs);
        let (mut pos, mut seen) = (0, Vec::new());
        for _ in 0..10_000 {
            let p = c.page(pos, None, count, 1_000_000);
            assert!(p.items.len() <= count);
            seen.extend(p.items);
            match p.next {
                Some(n) => pos = n,
                None => break,
            }
        }
        assert_eq!(seen, (0..250).collect::<Vec<_>>());
    }

    #[test]
    fn match_and_budget() {
        let c = copy_of(&[("apple", "1"), ("banana", "2"), ("avocado", "3")]);
        let p = c.page(0, Some(&Pattern::new(b"a*")), 10, 100);
        assert_eq!(p.items.len(), 2);
        assert_eq!(p.next, None);
        let p = c.page(0, Some(&Pattern::new(b"b*")), 10, 1);
        assert!(p.items.is_empty());
        assert_eq!(p.next, Some(1));
    }

    #[test]
    fn memory_is_accounted_and_bounded() {
        let before = bytes_held();
        let mut b = Builder::new(before + 100);
        assert!(b.push(&[0u8; 40], &[0u8; 20]).is_ok());
        let err = b.push(&[0u8; 40], &[0u8; 20]).expect_err("over the limit");
        assert!(err.held >= 60);
        drop(b);
        let c = copy_of(&[("k", "v")]);
        assert!(bytes_held() >= c.bytes());
        drop(c);
    }
}
