//! Point-in-time copies of collections (hashes, sets, sorted sets) for
//! SNAPSHOT.HSCAN, SNAPSHOT.SSCAN and SNAPSHOT.ZSCAN (pure Rust), the
//! per-key change counters that tell a copy it is stale ([`watch`]) and the
//! keys written during a SNAPSHOT.UNLINK ([`touched`]).
//!
//! Part of the pure core: may touch only the core (`glob`).
//!
//! A [`CollCopy`] stores every element of one collection in one arena,
//! sorted by its name (hash field, set or sorted-set member), so a cursor is
//! just a position. An element is a name and, for hashes and sorted sets, a
//! second string (the value, or the score as the server formats it).
//!
//! Memory: every byte of capacity the copies *reserve* (arena and slot
//! table) is charged to a [`Budget`] (the module's one, in its state)
//! before it is allocated, against `snapshot.collection-memory-limit`: the
//! limit is a real bound on what copies hold, reservations ahead of need
//! included.

pub mod touched;
pub mod watch;

use crate::glob::Pattern;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What all copies hold, charged against the memory limit.
#[derive(Default)]
pub struct Budget {
    held: AtomicUsize,
    open: AtomicUsize,
    made: AtomicU64,
}

impl Budget {
    /// Bytes of capacity held by live copies (and copies being built).
    pub fn bytes_held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    pub fn copies_open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    pub fn copies_made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Takes `bytes` from the allowance, or refuses without taking any.
    fn charge(&self, bytes: usize, limit: usize) -> Result<(), OverLimit> {
        let mut held = self.held.load(Ordering::SeqCst);
        loop {
            let after = held.saturating_add(bytes);
            if after > limit {
                return Err(OverLimit { held, limit });
            }
            match self
                .held
                .compare_exchange_weak(held, after, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Ok(()),
                Err(now) => held = now,
            }
        }
    }

    fn refund(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
    }

    /// The allowance left under `limit`.
    fn room(&self, limit: usize) -> usize {
        limit.saturating_sub(self.bytes_held())
    }
}

/// What one element of a collection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A hash: field and value.
    Hash,
    /// A set: member only.
    Set,
    /// A sorted set: member and score (as native ZSCAN formats it).
    Zset,
}

impl Kind {
    /// Whether elements carry a second string (value or score).
    pub fn has_second(self) -> bool {
        !matches!(self, Kind::Set)
    }

    /// The command that iterates this kind, for messages.
    pub fn command(self) -> &'static str {
        match self {
            Kind::Hash => "SNAPSHOT.HSCAN",
            Kind::Set => "SNAPSHOT.SSCAN",
            Kind::Zset => "SNAPSHOT.ZSCAN",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    off: usize,
    /// Lengths as `usize`: an element may exceed 4 GiB when the server
    /// allows bulk strings that large.
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

/// Accumulates elements; charges capacity before reserving it.
pub struct Builder {
    kind: Kind,
    budget: &'static Budget,
    arena: Vec<u8>,
    slots: Vec<Slot>,
    /// Capacity charged: `arena.capacity() + slots.capacity() * SLOT_BYTES`.
    accounted: usize,
    limit: usize,
}

impl Builder {
    pub fn new(kind: Kind, budget: &'static Budget, limit: usize) -> Self {
        Builder {
            kind,
            budget,
            arena: Vec::new(),
            slots: Vec::new(),
            accounted: 0,
            limit,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    fn capacity_bytes(&self) -> usize {
        self.arena.capacity() + self.slots.capacity() * SLOT_BYTES
    }

    /// Grows the arena and slot table to at least `arena`/`slots` capacity
    /// (exactly that much when more than needed), charging the difference
    /// first. Nothing is allocated when the charge is refused.
    fn grow_to(&mut self, arena: usize, slots: usize) -> Result<(), OverLimit> {
        let arena = arena.max(self.arena.capacity());
        let slots = slots.max(self.slots.capacity());
        let want = arena.saturating_add(slots.saturating_mul(SLOT_BYTES));
        let extra = want.saturating_sub(self.accounted);
        if extra > 0 {
            self.budget.charge(extra, self.limit)?;
            self.accounted += extra;
        }
        self.arena.reserve_exact(arena - self.arena.len());
        self.slots.reserve_exact(slots - self.slots.len());
        // The allocator may hand out more than asked: account for it too
        // (it is memory held, and never reported back smaller).
        let actual = self.capacity_bytes();
        if actual > self.accounted {
            let more = actual - self.accounted;
            self.budget.held.fetch_add(more, Ordering::SeqCst);
            self.accounted = actual;
        }
        Ok(())
    }

    /// Adds one element (duplicates are removed in `finish`). `second` is
    /// ignored for sets.
    pub fn push(&mut self, name: &[u8], second: &[u8]) -> Result<(), OverLimit> {
        let second = if self.kind.has_second() { second } else { &[] };
        let need = name.len() + second.len();
        let (alen, acap) = (self.arena.len(), self.arena.capacity());
        let (slen, scap) = (self.slots.len(), self.slots.capacity());
        if alen + need > acap || slen == scap {
            // Double what is full, but never past the allowance when the
            // element itself still fits in it.
            let spare = self.budget.room(self.limit);
            let arena = if alen + need > acap {
                let min = alen + need;
                let doubled = acap.saturating_mul(2).max(min).max(64);
                doubled.min(min.saturating_add(spare)).max(min)
            } else {
                acap
            };
            let slots = if slen == scap {
                let doubled = scap.saturating_mul(2).max(4);
                let left = spare.saturating_sub(arena - acap) / SLOT_BYTES;
                doubled.min(slen + 1 + left).max(slen + 1)
            } else {
                scap
            };
            self.grow_to(arena, slots)?;
        }
        let off = self.arena.len();
        self.arena.extend_from_slice(name);
        self.arena.extend_from_slice(second);
        self.slots.push(Slot {
            off,
            flen: name.len(),
            vlen: second.len(),
        });
        Ok(())
    }

    /// Reserves room for `total` elements in all, estimated from the ones
    /// held so far and bounded by the allowance left: a copy made in slices
    /// then grows its buffers once instead of doubling them, each doubling
    /// copying everything held so far (milliseconds for a collection of a
    /// million elements, on the main thread). Charged like any growth.
    pub fn reserve_for(&mut self, total: usize) {
        let n = self.slots.len();
        if n == 0 || total <= n {
            return;
        }
        let more = total - n;
        let per = self.arena.len().div_ceil(n);
        let bytes = per
            .saturating_mul(more)
            .saturating_add(per.saturating_mul(more) / 8);
        let spare = self.budget.room(self.limit);
        let slot_bytes = more.saturating_mul(SLOT_BYTES).min(spare);
        let arena_bytes = bytes.min(spare - slot_bytes);
        // Best effort: when refused, the copy grows (and is charged) as it goes.
        let _ = self.grow_to(
            self.arena.len() + arena_bytes,
            self.slots.len() + slot_bytes / SLOT_BYTES,
        );
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of capacity charged to this builder.
    pub fn bytes(&self) -> usize {
        self.accounted
    }

    /// Discards what was copied so far (e.g. to retry after a write). The
    /// capacity stays reserved (and charged): a copy that starts over needs
    /// it again, and growing it anew would copy everything on each doubling.
    pub fn clear(&mut self) {
        self.arena.clear();
        self.slots.clear();
    }

    /// Sorts by name and drops repeated names (a sliced SCAN may return an
    /// element twice while the server rehashes).
    pub fn finish(mut self) -> CollCopy {
        let arena = std::mem::take(&mut self.arena);
        let mut slots = std::mem::take(&mut self.slots);
        let name = |s: &Slot| &arena[s.off..s.off + s.flen];
        slots.sort_by(|a, b| name(a).cmp(name(b)));
        slots.dedup_by(|a, b| name(a) == name(b));
        let accounted = std::mem::replace(&mut self.accounted, 0);
        self.budget.open.fetch_add(1, Ordering::SeqCst);
        self.budget.made.fetch_add(1, Ordering::Relaxed);
        CollCopy {
            kind: self.kind,
            budget: self.budget,
            arena,
            slots,
            accounted,
        }
    }
}

impl Drop for Builder {
    fn drop(&mut self) {
        self.budget.refund(self.accounted);
    }
}

/// An immutable copy of one collection, elements in byte order of name.
pub struct CollCopy {
    kind: Kind,
    budget: &'static Budget,
    arena: Vec<u8>,
    slots: Vec<Slot>,
    accounted: usize,
}

impl Drop for CollCopy {
    fn drop(&mut self) {
        self.budget.refund(self.accounted);
        self.budget.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One page of an iteration: positions of the elements to return.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyPage {
    pub items: Vec<usize>,
    /// Position to resume at, `None` when done.
    pub next: Option<usize>,
    pub examined: usize,
}

impl CollCopy {
    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of capacity this copy holds (charged against the limit).
    pub fn bytes(&self) -> usize {
        self.accounted
    }

    /// The name of element `i`: hash field or member.
    pub fn name(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        &self.arena[s.off..s.off + s.flen]
    }

    /// The second string of element `i`: hash value or score (empty for sets).
    pub fn second(&self, i: usize) -> &[u8] {
        let s = self.slots[i];
        let start = s.off + s.flen;
        &self.arena[start..start + s.vlen]
    }

    /// Elements from position `from` whose name matches `pattern`: at most
    /// `count`, examining at most `budget` elements.
    pub fn page(
        &self,
        from: usize,
        pattern: Option<&Pattern>,
        count: usize,
        budget: usize,
    ) -> CopyPage {
        let pattern = pattern.filter(|p| !p.matches_all());
        let (count, budget) = (count.max(1), budget.max(1));
        let mut items = Vec::with_capacity(count.min(1024));
        let mut pos = from;
        let mut examined = 0;
        while pos < self.slots.len() && items.len() < count && examined < budget {
            if pattern.is_none_or(|p| p.is_match(self.name(pos))) {
                items.push(pos);
            }
            pos += 1;
            examined += 1;
        }
        CopyPage {
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

    const BIG: usize = usize::MAX / 2;

    /// A budget of a test's own (the module's lives in its state).
    pub(crate) fn budget() -> &'static Budget {
        Box::leak(Box::default())
    }

    #[test]
    fn reserve_for_grows_the_buffers_once() {
        let mut b = Builder::new(Kind::Hash, budget(), BIG);
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
        let mut e = Builder::new(Kind::Hash, budget(), 1000);
        e.reserve_for(1_000_000);
        assert_eq!(e.arena.capacity(), 0);
        b.reserve_for(5);
        assert_eq!(b.finish().page(0, None, 3, 10).items, vec![0, 1, 2]);
    }

    fn copy_of(kind: Kind, pairs: &[(&str, &str)]) -> CollCopy {
        let mut b = Builder::new(kind, budget(), BIG);
        for (f, v) in pairs {
            b.push(f.as_bytes(), v.as_bytes()).expect("under limit");
        }
        b.finish()
    }

    #[rstest]
    #[case(Kind::Hash)]
    #[case(Kind::Set)]
    #[case(Kind::Zset)]
    fn sorts_and_dedups_names(#[case] kind: Kind) {
        let c = copy_of(kind, &[("b", "2"), ("a", "1"), ("b", "2"), ("c", "3")]);
        let names: Vec<&[u8]> = (0..c.len()).map(|i| c.name(i)).collect();
        assert_eq!(names, vec![b"a" as &[u8], b"b", b"c"]);
        let want: &[u8] = if kind == Kind::Set { b"" } else { b"2" };
        assert_eq!(c.second(1), want);
        assert_eq!(c.kind(), kind);
    }

    #[rstest]
    #[case(1)]
    #[case(3)]
    #[case(100)]
    fn pages_cover_every_element_once_within_count(#[case] count: usize) {
        let pairs: Vec<(String, String)> = (0..250)
            .map(|i| (format!("f{i:03}"), i.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(f, v)| (f.as_str(), v.as_str()))
            .collect();
        let c = copy_of(Kind::Hash, &refs);
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
        let c = copy_of(
            Kind::Hash,
            &[("apple", "1"), ("banana", "2"), ("avocado", "3")],
        );
        let p = c.page(0, Some(&Pattern::new(b"a*")), 10, 100);
        assert_eq!(p.items.len(), 2);
        assert_eq!(p.next, None);
        let p = c.page(0, Some(&Pattern::new(b"b*")), 10, 1);
        assert!(p.items.is_empty());
        assert_eq!(p.next, Some(1));
    }

    #[test]
    fn memory_is_accounted_and_bounded() {
        let mut b = Builder::new(Kind::Hash, budget(), 4096);
        assert!(b.push(&[0u8; 40], &[0u8; 20]).is_ok());
        assert!(b.bytes() >= 60 + SLOT_BYTES);
        assert_eq!(b.bytes(), b.capacity_bytes());
        let mut refused = None;
        for _ in 0..1000 {
            if let Err(e) = b.push(&[0u8; 40], &[0u8; 20]) {
                refused = Some(e);
                break;
            }
        }
        let err = refused.expect("the limit refuses at last");
        assert!(err.held <= err.limit);
        assert!(b.bytes() <= 4096, "held {} past the limit", b.bytes());
        drop(b);
        let c = copy_of(Kind::Set, &[("k", "v")]);
        assert!(c.bytes() > SLOT_BYTES);
        drop(c);
    }

    #[test]
    fn reservations_are_charged_and_capped_by_the_limit() {
        let pool = budget();
        let mut b = Builder::new(Kind::Zset, pool, 100_000);
        for i in 0..10 {
            b.push(format!("m{i:03}").as_bytes(), b"1.5").expect("fits");
        }
        // Asks for room for ten million elements: gets at most the limit.
        b.reserve_for(10_000_000);
        assert_eq!(b.bytes(), b.capacity_bytes(), "every reserved byte charged");
        assert!(
            b.bytes() <= 100_000,
            "reserved {} past the limit",
            b.bytes()
        );
        let (held, arena) = (b.bytes(), b.arena.as_ptr());
        b.clear();
        assert!(b.is_empty());
        assert_eq!(
            b.bytes(),
            held,
            "capacity kept (and charged) for the restart"
        );
        b.push(b"m", b"1").expect("fits");
        assert_eq!(b.arena.as_ptr(), arena);
        drop(b);
    }
}
