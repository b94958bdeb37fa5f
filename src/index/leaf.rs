//! `Leaf`: the sorted entries of one B+tree leaf, front-coded in one byte
//! buffer.
//!
//! Each entry stores only what differs from the previous key:
//!
//! ```text
//! varint shared   bytes shared with the previous key (0 for the first entry)
//! varint len      length of the rest of the key
//! tag             bit 7: has an expiry; bit 6: has a stamp; bits 0-5: type id
//!                 (0x3f: the id follows)
//! [type id]       only when the id is 0x3f or more
//! [expiry]        7 bytes, little-endian (`Meta`'s 56-bit field), only with bit 7
//! [stamp]         varint, only with bit 6 (see `entry`: a change kept for
//!                 open snapshots; a deleted key's entry is a tombstone)
//! suffix          the rest of the key
//! ```
//!
//! Typical keys (`user:1234:item:5`) share most of their bytes with their
//! neighbour and a key without expiry pays one tag byte for its metadata, so
//! an entry is a few bytes plus what is new in its key.
//!
//! *Restart points*: some entries are stored whole (shared = 0), at most
//! about [`RUN_MAX`] bytes apart, and the leaf keeps their offsets. A lookup
//! binary-searches them, then scans one run and, thanks to the shared
//! lengths, compares only the bytes that can decide (see [`Leaf::find`]).
//!
//! The buffer is sized to allocator size classes, never doubled, so a leaf
//! costs what it holds. An edit rewrites its bytes in place (entry headers
//! are encoded on the stack): it allocates only when the buffer changes
//! size class. Every buffer's capacity is counted in
//! [`node_bytes`] (all versions, live and pinned by snapshots).
//!
//! Locking: none; a `Leaf` is plain data owned by one tree node.

use super::entry::{Entry, Stamp};
use super::meta::{Meta, TypeId};
use arrayvec::ArrayVec;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Encoded bytes past which a leaf splits.
pub const LEAF_MAX: usize = 1024;
/// Under this many bytes a leaf merges with a neighbour that has room.
pub const LEAF_MIN: usize = LEAF_MAX / 4;
/// A run of entries between two restart points longer than this gets a
/// restart point in its middle.
pub const RUN_MAX: usize = 128;
/// Restart points a leaf keeps at most (more are not needed to bound runs
/// in a leaf of [`LEAF_MAX`] bytes; past it runs just grow).
const RESTARTS: usize = 16;

/// Global: a node is shared by the live map and any number of snapshots
/// and freed by whichever thread drops the last of them (often the reaper),
/// in `Drop`, which can be handed nothing; counting per index would need a
/// counter pointer in every node (memory and a dependent load on every
/// copy-on-write and free) for a figure that is per process anyway (one
/// `Module`, whose index is all the nodes there are).
static NODE_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Bytes held by every tree node alive, in every version: leaf buffers and
/// fixed node parts (see `tree`).
pub fn node_bytes() -> usize {
    NODE_BYTES.load(Ordering::Relaxed)
}

pub(super) fn count_bytes(add: usize, sub: usize) {
    if add > sub {
        NODE_BYTES.fetch_add(add - sub, Ordering::Relaxed);
    } else if sub > add {
        NODE_BYTES.fetch_sub(sub - add, Ordering::Relaxed);
    }
}

/// The capacity to allocate for `n` bytes: the allocator size class that
/// holds them (four classes per power of two, as jemalloc's), so growing
/// a leaf byte by byte reallocates rarely and wastes no more than the
/// allocator would anyway.
fn size_class(n: usize) -> usize {
    if n <= 64 {
        return n.div_ceil(16) * 16;
    }
    let step = (n.next_power_of_two() / 8).max(16);
    n.div_ceil(step) * step
}

#[inline]
fn get_varint(buf: &[u8], off: &mut usize) -> usize {
    let mut v = 0usize;
    let mut shift = 0;
    while let Some(&b) = buf.get(*off) {
        *off += 1;
        v |= ((b & 0x7f) as usize) << shift;
        if b < 0x80 || shift > 56 {
            break;
        }
        shift += 7;
    }
    v
}

const HAS_EXPIRY: u8 = 0x80;
const HAS_STAMP: u8 = 0x40;
const TYPE_ESCAPE: u8 = 0x3f;
const EXPIRY_BYTES: usize = 7;

/// An entry header (everything before the suffix, see the module docs)
/// encoded on the stack: two varints of at most 10 bytes, the tag, the type
/// id, the expiry and the stamp's varint (at most 10 bytes).
#[derive(Clone, Copy)]
struct Head {
    b: [u8; 48],
    n: usize,
}

impl Head {
    #[inline]
    fn new(shared: usize, len: usize, e: Entry) -> Head {
        let mut h = Head { b: [0; 48], n: 0 };
        h.varint(shared as u64);
        h.varint(len as u64);
        let ty: TypeId = e.meta.type_id();
        let raw = e.meta.raw_expire();
        let mut tag = ty.min(TYPE_ESCAPE);
        if raw != 0 {
            tag |= HAS_EXPIRY;
        }
        if !e.stamp.is_none() {
            tag |= HAS_STAMP;
        }
        h.push(tag);
        if ty >= TYPE_ESCAPE {
            h.push(ty);
        }
        if raw != 0 {
            for b in &raw.to_le_bytes()[..EXPIRY_BYTES] {
                h.push(*b);
            }
        }
        if !e.stamp.is_none() {
            h.varint(e.stamp.raw());
        }
        h
    }

    #[inline]
    fn push(&mut self, b: u8) {
        if let Some(d) = self.b.get_mut(self.n) {
            *d = b;
            self.n += 1;
        }
    }

    #[inline]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }

    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.b[..self.n]
    }

    #[inline]
    fn len(&self) -> usize {
        self.n
    }
}

/// Appends one encoded entry.
fn encode(out: &mut Vec<u8>, shared: usize, suffix: &[u8], e: Entry) {
    out.extend_from_slice(Head::new(shared, suffix.len(), e).bytes());
    out.extend_from_slice(suffix);
}

/// Writes `parts` one after the other at the start of `dst` (as much of
/// them as fits).
#[inline]
fn write_parts(dst: &mut [u8], parts: &[&[u8]]) {
    let mut at = 0;
    for part in parts {
        let end = (at + part.len()).min(dst.len());
        if let (Some(d), Some(src)) = (dst.get_mut(at..end), part.get(..end - at)) {
            d.copy_from_slice(src);
        }
        at = end;
    }
}

/// One decoded entry header.
#[derive(Clone, Copy, Debug)]
struct Hdr {
    shared: usize,
    /// Where the suffix starts.
    body: usize,
    /// Where the entry ends.
    end: usize,
    entry: Entry,
}

impl Hdr {
    #[inline]
    fn suffix<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.body..self.end).unwrap_or(&[])
    }
}

/// Where the parts of an entry are.
#[derive(Clone, Copy, Debug)]
struct Span {
    shared: usize,
    /// Where the tag is.
    tag: usize,
    /// Where the suffix starts.
    body: usize,
    /// Where the entry ends.
    end: usize,
}

impl Span {
    #[inline]
    fn suffix<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.body..self.end).unwrap_or(&[])
    }
}

/// Locates the parts of the entry at `off` without decoding its metadata
/// (what a scan needs).
#[inline]
fn span(buf: &[u8], off: usize) -> Span {
    // Both lengths under 128 (one byte each) is the common case.
    let (shared, slen, tag) = match buf.get(off..off + 2) {
        Some(&[s, l]) if s < 0x80 && l < 0x80 => (s as usize, l as usize, off + 2),
        _ => {
            let mut o = off;
            let shared = get_varint(buf, &mut o);
            (shared, get_varint(buf, &mut o), o)
        }
    };
    let t = buf.get(tag).copied().unwrap_or(0);
    let mut body =
        tag + 1 + usize::from(t & TYPE_ESCAPE == TYPE_ESCAPE) + usize::from(t >> 7) * EXPIRY_BYTES;
    if t & HAS_STAMP != 0 {
        while buf.get(body).is_some_and(|&b| b >= 0x80) {
            body += 1;
        }
        body += 1;
    }
    Span {
        shared,
        tag,
        body,
        end: body + slen,
    }
}

#[inline]
fn hdr(buf: &[u8], off: usize) -> Hdr {
    let s = span(buf, off);
    let tag = buf.get(s.tag).copied().unwrap_or(0);
    let mut o = s.tag + 1;
    let mut ty = tag & TYPE_ESCAPE;
    if ty == TYPE_ESCAPE {
        ty = buf.get(o).copied().unwrap_or(TYPE_ESCAPE);
        o += 1;
    }
    let mut raw = 0u64;
    if tag & HAS_EXPIRY != 0 {
        let mut b = [0u8; 8];
        if let Some(src) = buf.get(o..o + EXPIRY_BYTES) {
            b[..EXPIRY_BYTES].copy_from_slice(src);
        }
        raw = u64::from_le_bytes(b);
        o += EXPIRY_BYTES;
    }
    let stamp = if tag & HAS_STAMP != 0 {
        Stamp::from_raw(get_varint(buf, &mut o) as u64)
    } else {
        Stamp::NONE
    };
    Hdr {
        shared: s.shared,
        body: s.body,
        end: s.end,
        entry: Entry::new(Meta::from_raw(ty, raw), stamp),
    }
}

/// Length of the common prefix of `a` and `b`, eight bytes at a time.
#[inline]
pub fn lcp(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let (Some(x), Some(y)) = (a[i..].first_chunk::<8>(), b[i..].first_chunk::<8>()) else {
            break;
        };
        let d = u64::from_le_bytes(*x) ^ u64::from_le_bytes(*y);
        if d != 0 {
            return i + (d.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Where a key is, or would go, in a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    pub found: bool,
    /// Byte offset of the entry found, or of the first greater one (the
    /// buffer's length if there is none).
    off: usize,
    /// The restart point (index) whose run the search scanned.
    run: usize,
    /// Common prefix of the key and the entry before `off` (0 if none).
    lcp_prev: usize,
    /// Common prefix of the key and the entry at `off` (when not found).
    lcp_next: usize,
}

/// Sorted entries, front-coded (see the module docs).
#[derive(Default)]
pub struct Leaf {
    buf: Vec<u8>,
    /// Entries (tombstones included). A leaf holds at most a few hundred
    /// (it splits past about [`LEAF_MAX`] bytes, at least 3 per entry) or
    /// one huge key.
    len: u16,
    /// Entries with a stamp (see `entry`): the collector skips leaves
    /// without any.
    stamped: u16,
    /// Offsets of entries stored whole, ascending; the first is 0 when the
    /// leaf is not empty.
    restarts: ArrayVec<u16, RESTARTS>,
}

impl Clone for Leaf {
    /// A copy holds exactly its bytes (copy-on-write copies pinned by a
    /// snapshot cost what they hold).
    fn clone(&self) -> Self {
        let mut buf = Vec::with_capacity(size_class(self.buf.len()));
        buf.extend_from_slice(&self.buf);
        count_bytes(buf.capacity(), 0);
        Leaf {
            buf,
            len: self.len,
            stamped: self.stamped,
            restarts: self.restarts.clone(),
        }
    }
}

impl Drop for Leaf {
    fn drop(&mut self) {
        count_bytes(0, self.buf.capacity());
    }
}

impl Leaf {
    /// A leaf holding one entry.
    pub fn with(key: &[u8], entry: Entry) -> Leaf {
        let mut l = Leaf::default();
        let mut e = Vec::with_capacity(key.len() + 16);
        encode(&mut e, 0, key, entry);
        l.splice(0..0, &e);
        l.len = 1;
        l.stamped = u16::from(!entry.stamp.is_none());
        l.restarts.push(0);
        l
    }

    /// Entries (tombstones included).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Entries with a stamp (see `entry`).
    pub fn stamped(&self) -> usize {
        self.stamped as usize
    }

    /// Counts the entries with a stamp again (after a split or a merge).
    fn recount(&mut self) {
        let mut n = 0u16;
        let mut off = 0;
        while off < self.buf.len() {
            let s = span(&self.buf, off);
            if self.buf.get(s.tag).is_some_and(|&t| t & HAS_STAMP != 0) {
                n = n.saturating_add(1);
            }
            off = s.end;
        }
        self.stamped = n;
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Encoded bytes.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// Heap bytes of the buffer.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Replaces `range` of the buffer, growing it to a size class (never by
    /// doubling) and shrinking it when it holds far less than it could.
    fn splice(&mut self, range: Range<usize>, with: &[u8]) {
        self.rewrite(range, with.len(), |_, w| write_parts(w, &[with]));
    }

    /// Makes `range` of the buffer `new_len` bytes long, moving what
    /// follows it in place, with the size-class capacity policy (see
    /// [`Leaf::splice`]). `fill`
    /// gets the bytes before the range and a window starting at the range
    /// that holds the range's old bytes first and is at least `new_len`
    /// long: it must leave the range's new bytes in the window's first
    /// `new_len`. No allocation unless the buffer must grow or shrink.
    fn rewrite(
        &mut self,
        range: Range<usize>,
        new_len: usize,
        fill: impl FnOnce(&[u8], &mut [u8]),
    ) {
        let before = self.buf.capacity();
        let old_total = self.buf.len();
        let (start, end) = (range.start.min(old_total), range.end.min(old_total));
        let end = end.max(start);
        let total = old_total - (end - start) + new_len;
        if total > before {
            self.buf.reserve_exact(size_class(total) - old_total);
        }
        let grow = new_len > end - start;
        if grow {
            self.buf.resize(total, 0);
            self.buf.copy_within(end..old_total, start + new_len);
        }
        let window = new_len.max(end - start);
        let (pre, rest) = self.buf.split_at_mut(start);
        if let Some(w) = rest.get_mut(..window) {
            fill(pre, w);
        }
        if !grow && new_len < end - start {
            self.buf.copy_within(end..old_total, start + new_len);
            self.buf.truncate(total);
        }
        let want = size_class(self.buf.len());
        if self.buf.capacity() > want + want / 4 + 64 {
            self.buf.shrink_to(want);
        }
        count_bytes(self.buf.capacity(), before);
    }

    /// Finds `key`: binary-searches the restart points for the last one
    /// not greater than `key`, then scans its run. The scan keeps
    /// `matched`, the common prefix of `key` and the last entry passed
    /// (smaller than `key`): an entry that shares more than that with its
    /// predecessor is smaller too, one that shares less is greater; only one
    /// sharing exactly `matched` bytes needs its suffix compared.
    pub fn find(&self, key: &[u8]) -> Probe {
        let buf = &self.buf[..];
        let (lo, lcp_lo) = self.search_restarts(key);
        let run = lo.saturating_sub(1);
        let mut off = self.restarts.get(run).map_or(0, |&o| o as usize);
        let mut matched = 0usize;
        if lo > 0 {
            // The restart point's key is not greater than `key` and shares
            // `lcp_lo` bytes with it: equal, or passed with that prefix.
            let h = span(buf, off);
            if lcp_lo == h.end - h.body && lcp_lo == key.len() {
                return Probe {
                    found: true,
                    off,
                    run,
                    lcp_prev: 0,
                    lcp_next: 0,
                };
            }
            matched = lcp_lo;
            off = h.end;
        }
        while off < buf.len() {
            let h = span(buf, off);
            if h.shared > matched {
                off = h.end;
                continue;
            }
            let miss = |lcp_next| Probe {
                found: false,
                off,
                run,
                lcp_prev: matched,
                lcp_next,
            };
            if h.shared < matched {
                return miss(h.shared);
            }
            let suffix = h.suffix(buf);
            let rest = key.get(matched..).unwrap_or(&[]);
            let l = lcp(suffix, rest);
            if l == suffix.len() {
                if l == rest.len() {
                    return Probe {
                        found: true,
                        off,
                        run,
                        lcp_prev: matched,
                        lcp_next: 0,
                    };
                }
                // The entry is a prefix of `key`: smaller.
            } else if l == rest.len() || suffix[l] > rest[l] {
                return miss(matched + l);
            }
            matched += l;
            off = h.end;
        }
        Probe {
            found: false,
            off,
            run,
            lcp_prev: matched,
            lcp_next: 0,
        }
    }

    /// Binary-searches the restart points: returns how many have a key not
    /// greater than `key`, and the common prefix of `key` and the last of
    /// them (0 if none). Each step skips the bytes `key` is known to share
    /// with both bounds of the search (a key between two others shares at
    /// least the shorter of their common prefixes with `key`), so the
    /// prefix the leaf's keys share is compared once, eight bytes at a time.
    #[inline]
    fn search_restarts(&self, key: &[u8]) -> (usize, usize) {
        let buf = &self.buf[..];
        let (mut lo, mut hi) = (0, self.restarts.len());
        let (mut lcp_lo, mut lcp_hi) = (0, 0);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let whole = self
                .restarts
                .get(mid)
                .map_or(&[][..], |&o| span(buf, o as usize).suffix(buf));
            let skip = lcp_lo.min(lcp_hi);
            let (a, b) = (whole.get(skip..), key.get(skip..));
            let l = skip + lcp(a.unwrap_or(&[]), b.unwrap_or(&[]));
            let le = match (whole.get(l), key.get(l)) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(x), Some(y)) => x < y,
            };
            if le {
                lo = mid + 1;
                lcp_lo = l;
            } else {
                hi = mid;
                lcp_hi = l;
            }
        }
        (lo, if lo > 0 { lcp_lo } else { 0 })
    }

    /// Moves the restart points after `from` by `delta` bytes (an edit
    /// there changed the length of what precedes them); drops duplicates and
    /// points past the end.
    ///
    /// An edit never reorders the points: those moved stay after those
    /// kept, so the only duplicate possible is the first moved one landing
    /// on the last kept one, and the points past the end (or past `u16`)
    /// are the last ones.
    fn shift_restarts(&mut self, from: usize, delta: isize) {
        let len = self.buf.len();
        let mut kept = 0;
        let mut cut = self.restarts.len();
        for (i, o) in self.restarts.iter_mut().enumerate() {
            if *o as usize <= from {
                kept = i + 1;
                continue;
            }
            // Offsets past u16 are not kept (a leaf that large holds a few
            // huge keys: its runs are short in entries anyway).
            match u16::try_from(*o as isize + delta) {
                Ok(at) => *o = at,
                Err(_) => {
                    cut = i;
                    break;
                }
            }
        }
        if cut < self.restarts.len() {
            // The entries at the points dropped are still stored whole, and a
            // scan must not meet a whole entry that is not a restart point:
            // re-encode the leaf (only ever a leaf of huge keys).
            self.reindex();
            return;
        }
        if kept > 0 && kept < self.restarts.len() && self.restarts[kept - 1] == self.restarts[kept]
        {
            self.restarts.remove(kept);
        }
        while self.restarts.last().is_some_and(|&o| o as usize >= len) {
            self.restarts.pop();
        }
    }

    /// Gives the run of restart point `run` a restart point in its middle
    /// if it has grown past [`RUN_MAX`] bytes: the entry there is rewritten
    /// whole.
    fn bound_run(&mut self, run: usize) {
        let Some(&start) = self.restarts.get(run) else {
            return;
        };
        let start = start as usize;
        let end = self
            .restarts
            .get(run + 1)
            .map_or(self.buf.len(), |&o| o as usize);
        if end - start <= RUN_MAX || self.restarts.is_full() {
            return;
        }
        let mut off = span(&self.buf, start).end;
        let mid = start + (end - start) / 2;
        while off < mid {
            off = span(&self.buf, off).end;
        }
        if off >= end || off > u16::MAX as usize {
            return;
        }
        // The entry at `off` is rewritten whole: a new header, then the
        // `shared` bytes it took from its predecessor, then its suffix,
        // which stays in place.
        let h = hdr(&self.buf, off);
        let head = Head::new(0, h.shared + (h.end - h.body), h.entry);
        let new_len = head.len() + h.shared;
        self.rewrite(off..h.body, new_len, |pre, w| {
            let (hw, key) = w.split_at_mut(head.len().min(w.len()));
            write_parts(hw, &[head.bytes()]);
            prefix_into(pre, start, key.get_mut(..h.shared).unwrap_or(&mut []));
        });
        let delta = new_len as isize - (h.body - off) as isize;
        self.shift_restarts(off, delta);
        self.restarts.insert(run + 1, off as u16);
    }

    /// Rebuilds the restart points of a leaf whose buffer was rewritten
    /// (split or merged): the first entry stays whole, and entries are
    /// re-encoded whole about every [`RUN_MAX`] `* 3 / 4` bytes.
    fn reindex(&mut self) {
        let mut buf = Vec::with_capacity(self.buf.len() + 64);
        let mut restarts = ArrayVec::new();
        let mut run_start = 0;
        // The previous key and the current one, decoded (two buffers for
        // the whole leaf).
        let (mut prev, mut key) = (Vec::new(), Vec::new());
        let mut off = 0;
        while off < self.buf.len() {
            let h = hdr(&self.buf, off);
            key.clear();
            key.extend_from_slice(prev.get(..h.shared).unwrap_or(&prev));
            key.extend_from_slice(h.suffix(&self.buf));
            let restart = off == 0
                || (buf.len() - run_start >= RUN_MAX * 3 / 4
                    && !restarts.is_full()
                    && buf.len() <= u16::MAX as usize);
            if restart {
                run_start = buf.len();
                restarts.push(buf.len() as u16);
                encode(&mut buf, 0, &key, h.entry);
            } else {
                let shared = lcp(&prev, &key);
                encode(&mut buf, shared, &key[shared..], h.entry);
            }
            std::mem::swap(&mut prev, &mut key);
            off = h.end;
        }
        let len = self.buf.len();
        self.splice(0..len, &buf);
        self.restarts = restarts;
    }

    /// Prefetches the buffer's cache lines (see `KeyMap::get_many`).
    pub fn prefetch(&self) {
        for chunk in self.buf.chunks(64) {
            super::prefetch::prefetch(chunk.as_ptr());
        }
    }

    /// The key's entry, tombstone or not.
    pub fn get(&self, key: &[u8]) -> Option<Entry> {
        let p = self.find(key);
        p.found.then(|| hdr(&self.buf, p.off).entry)
    }

    /// The entry `p` found.
    pub fn entry_at(&self, p: &Probe) -> Entry {
        hdr(&self.buf, p.off).entry
    }

    /// Whether `p` points past the last entry.
    pub fn at_end(&self, p: &Probe) -> bool {
        p.off >= self.buf.len()
    }

    /// Sets the entry `p` found.
    pub fn set_entry(&mut self, p: &Probe, entry: Entry) {
        let h = hdr(&self.buf, p.off);
        self.stamped = (self.stamped + u16::from(!entry.stamp.is_none()))
            .saturating_sub(u16::from(!h.entry.stamp.is_none()));
        let head = Head::new(h.shared, h.end - h.body, entry);
        let delta = head.len() as isize - (h.body - p.off) as isize;
        self.rewrite(p.off..h.body, head.len(), |_, w| {
            write_parts(w, &[head.bytes()])
        });
        self.shift_restarts(p.off, delta);
    }

    /// Inserts `key` where `p` (a probe for `key` that did not find it)
    /// says: the new entry shares `lcp_prev` bytes with its predecessor, and
    /// its successor now shares `lcp_next` bytes with it (never fewer than
    /// before, so the successor only drops bytes from its suffix), unless
    /// the successor is a restart point, which stays whole.
    pub fn insert_at(&mut self, p: &Probe, key: &[u8], entry: Entry) {
        let suffix = key.get(p.lcp_prev..).unwrap_or(&[]);
        let head = Head::new(p.lcp_prev, suffix.len(), entry);
        // The successor's new header, and where its kept suffix starts.
        let mut next = None;
        let mut end = p.off;
        let next_is_restart =
            p.off > 0 && u16::try_from(p.off).is_ok_and(|o| self.restarts.contains(&o));
        if p.off < self.buf.len() && !next_is_restart {
            let h = hdr(&self.buf, p.off);
            if p.lcp_next > h.shared {
                let drop = (p.lcp_next - h.shared).min(h.end - h.body);
                next = Some(Head::new(p.lcp_next, h.end - h.body - drop, h.entry));
                end = h.body + drop;
            }
        }
        let next_head = next.as_ref().map_or(&[][..], |h| h.bytes());
        let new_len = head.len() + suffix.len() + next_head.len();
        let delta = new_len as isize - (end - p.off) as isize;
        self.rewrite(p.off..end, new_len, |_, w| {
            write_parts(w, &[head.bytes(), suffix, next_head])
        });
        self.len += 1;
        self.stamped += u16::from(!entry.stamp.is_none());
        if self.restarts.is_empty() {
            self.restarts.push(0);
        }
        // Restart points at or after the insertion moved (0 stays: the
        // new first entry is whole).
        self.shift_restarts(p.off.saturating_sub(1), delta);
        self.bound_run(p.run);
    }

    /// Removes the entry `p` found; returns it. Its successor takes over
    /// the bytes it shared through it.
    pub fn remove_at(&mut self, p: &Probe) -> Entry {
        let h = hdr(&self.buf, p.off);
        let next = (h.end < self.buf.len())
            .then(|| hdr(&self.buf, h.end))
            .filter(|n| n.shared > h.shared);
        let (range, new_len) = match next {
            Some(n) => {
                // The successor's new entry: a header, the bytes it took
                // from the removed entry's suffix (moved within the
                // window), then its own suffix, which stays in place.
                let took = (n.shared - h.shared).min(h.end - h.body);
                let head = Head::new(h.shared, took + (n.end - n.body), n.entry);
                let new_len = head.len() + took;
                let from = h.body - p.off;
                self.rewrite(p.off..n.body, new_len, |_, w| {
                    if from + took <= w.len() && head.len() + took <= w.len() {
                        w.copy_within(from..from + took, head.len());
                    }
                    write_parts(w, &[head.bytes()]);
                });
                (p.off..n.body, new_len)
            }
            None => {
                self.rewrite(p.off..h.end, 0, |_, _| {});
                (p.off..h.end, 0)
            }
        };
        let delta = new_len as isize - range.len() as isize;
        self.len -= 1;
        self.stamped = self
            .stamped
            .saturating_sub(u16::from(!h.entry.stamp.is_none()));
        self.shift_restarts(p.off, delta);
        h.entry
    }

    /// The first key (stored whole).
    pub fn first_key(&self) -> &[u8] {
        if self.buf.is_empty() {
            return &[];
        }
        hdr(&self.buf, 0).suffix(&self.buf)
    }

    /// The last key, decoded.
    pub fn last_key(&self) -> Vec<u8> {
        let mut key = Vec::new();
        let mut off = 0;
        while off < self.buf.len() {
            off = step(&self.buf, off, &mut key).0;
        }
        key
    }

    /// Moves the entries from index `at` (`0 < at < len`) into a new leaf.
    /// Returns it and the last key left here.
    pub fn split_off(&mut self, at: usize) -> (Leaf, Vec<u8>) {
        let mut key = Vec::new();
        let mut off = 0;
        for _ in 0..at {
            off = step(&self.buf, off, &mut key).0;
        }
        let last_left = key.clone();
        let h = hdr(&self.buf, off);
        key.truncate(h.shared);
        key.extend_from_slice(h.suffix(&self.buf));
        let mut right_buf = Vec::with_capacity(size_class(self.buf.len() - off + h.shared));
        encode(&mut right_buf, 0, &key, h.entry);
        right_buf.extend_from_slice(&self.buf[h.end..]);
        let mut right = Leaf::default();
        right.splice(0..0, &right_buf);
        right.len = self.len - at as u16;
        right.reindex();
        right.recount();
        self.len = at as u16;
        let len = self.buf.len();
        self.splice(off..len, &[]);
        self.restarts.retain(|o| (*o as usize) < off);
        if self.restarts.is_empty() && !self.buf.is_empty() {
            self.restarts.push(0);
        }
        self.recount();
        (right, last_left)
    }

    /// The index that splits the encoded bytes about in half (at least one
    /// entry on each side; needs two entries).
    pub fn middle(&self) -> usize {
        let half = self.buf.len() / 2;
        let (mut off, mut idx) = (0, 0);
        while off < half && idx + 1 < self.len() {
            off = span(&self.buf, off).end;
            idx += 1;
        }
        idx.max(1)
    }

    /// Appends every entry of `right` (all greater than ours).
    pub fn append(&mut self, right: &Leaf) {
        if right.is_empty() {
            return;
        }
        if self.is_empty() {
            let len = self.buf.len();
            self.splice(0..len, &right.buf);
            self.len = right.len;
            self.stamped = right.stamped;
            self.restarts = right.restarts.clone();
            return;
        }
        let last = self.last_key();
        let h = hdr(&right.buf, 0);
        let first = h.suffix(&right.buf);
        let shared = lcp(&last, first);
        let mut tail = Vec::with_capacity(right.buf.len());
        encode(&mut tail, shared, &first[shared..], h.entry);
        tail.extend_from_slice(&right.buf[h.end..]);
        let len = self.buf.len();
        self.splice(len..len, &tail);
        self.len += right.len;
        self.stamped += right.stamped;
        self.reindex();
    }

    /// Positions a reader at the first entry `>= key` (`inclusive`) or
    /// `> key`: returns the byte offset to read from and sets `prev` to the
    /// prefix the entry there is coded against.
    pub fn seek(&self, key: &[u8], inclusive: bool, prev: &mut Vec<u8>) -> usize {
        let p = self.find(key);
        prev.clear();
        prev.extend_from_slice(key);
        if p.found && !inclusive {
            hdr(&self.buf, p.off).end
        } else {
            // The entry at `p.off` shares its first `shared` bytes with
            // `key` (see `find`), so `key` serves as its predecessor.
            p.off
        }
    }

    /// Reads the entry at `off` into `key` (which holds the previous key);
    /// returns the next offset and the entry, or `None` at the end.
    #[inline]
    pub fn read(&self, off: usize, key: &mut Vec<u8>) -> Option<(usize, Entry)> {
        (off < self.buf.len()).then(|| step(&self.buf, off, key))
    }

    /// Checks the restart points (tests): each at an entry stored whole,
    /// ascending, the first at 0, no run over [`RUN_MAX`] bytes unless the
    /// list is full.
    #[cfg(test)]
    pub fn check_restarts(&self) {
        if self.buf.is_empty() {
            return;
        }
        assert_eq!(self.restarts.first(), Some(&0));
        assert!(self.restarts.windows(2).all(|w| w[0] < w[1]));
        let mut key = Vec::new();
        let mut off = 0;
        let mut starts = Vec::new();
        while off < self.buf.len() {
            starts.push(off as u16);
            let prev = key.clone();
            let shared = hdr(&self.buf, off).shared;
            let at_restart = u16::try_from(off).is_ok_and(|o| self.restarts.contains(&o));
            off = step(&self.buf, off, &mut key).0;
            // What `find` relies on: an entry that is not a restart point
            // shares exactly its common prefix with the one before.
            if !at_restart {
                assert_eq!(
                    shared,
                    lcp(&prev, &key),
                    "entry at {} mis-shared",
                    starts.len()
                );
            }
        }
        for r in &self.restarts {
            assert!(starts.contains(r), "restart {r} not at an entry");
            assert_eq!(
                hdr(&self.buf, *r as usize).shared,
                0,
                "restart {r} not whole"
            );
        }
    }

    /// All entries, tombstones included, decoded (tests).
    #[cfg(test)]
    pub fn entries(&self) -> Vec<(Vec<u8>, Entry)> {
        let mut out = Vec::new();
        let mut key = Vec::new();
        let mut off = 0;
        while let Some((next, m)) = self.read(off, &mut key) {
            out.push((key.clone(), m));
            off = next;
        }
        out
    }
}

/// Entries of a leaf merged with a sorted run of truths ([`Leaf::merge`]),
/// decoded: the keys one after the other in one buffer, and each entry's
/// end there and metadata. Reused from leaf to leaf. Test-only: the bulk
/// merge of issue 20's experiment (`index::tests::front`), not shipped
/// (docs/PERFORMANCE-JOURNAL.md, "A write-optimised front").
#[cfg(test)]
#[derive(Default)]
pub struct Merged {
    keys: Vec<u8>,
    ends: Vec<(usize, Meta)>,
    /// Encoded bytes the entries would take, front-coded one after the
    /// other (restart points aside).
    est: usize,
}

#[cfg(test)]
impl Merged {
    pub fn clear(&mut self) {
        self.keys.clear();
        self.ends.clear();
        self.est = 0;
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn key(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j].0);
        &self.keys[start..self.ends[i].0]
    }

    #[inline]
    fn push(&mut self, key: &[u8], meta: Meta) {
        let start = self.keys.len();
        let prev_start = match self.ends.len() {
            0 | 1 => 0,
            n => self.ends[n - 2].0,
        };
        let shared = lcp(&self.keys[prev_start..start], key);
        self.est +=
            Head::new(shared, key.len() - shared, Entry::plain(meta)).len() + key.len() - shared;
        self.keys.extend_from_slice(key);
        self.ends.push((self.keys.len(), meta));
    }

    /// Encodes the entries into leaves of about `LEAF_MAX` bytes or less
    /// (as few as hold them, of even sizes); calls `out` with each leaf and
    /// the last key of the one before it (for a separator).
    pub fn into_leaves(&self, mut out: impl FnMut(Leaf, &[u8])) {
        if self.ends.is_empty() {
            return;
        }
        let pieces = self.est.div_ceil(LEAF_MAX).max(1);
        let target = self.est.div_ceil(pieces);
        let mut buf: Vec<u8> = Vec::with_capacity(target + LEAF_MAX / 4);
        let mut restarts: ArrayVec<u16, RESTARTS> = ArrayVec::new();
        let mut run_start = 0;
        let mut n = 0u16;
        let mut prev_last: &[u8] = &[];
        for i in 0..self.ends.len() {
            let key = self.key(i);
            let meta = self.ends[i].1;
            let prev = if n == 0 { &[][..] } else { self.key(i - 1) };
            // Cut before this entry once the leaf holds its share, or if it
            // would take the leaf past twice the limit (huge keys).
            let entry = Head::new(0, key.len(), Entry::plain(meta)).len() + key.len();
            if n > 0 && (buf.len() >= target || buf.len() + entry > 2 * LEAF_MAX) {
                out(Leaf::of(&buf, n, std::mem::take(&mut restarts)), prev_last);
                prev_last = prev;
                buf.clear();
                n = 0;
            }
            let restart = n == 0
                || (buf.len() - run_start >= RUN_MAX * 3 / 4
                    && !restarts.is_full()
                    && buf.len() <= u16::MAX as usize);
            if restart {
                run_start = buf.len();
                restarts.push(buf.len() as u16);
                encode(&mut buf, 0, key, Entry::plain(meta));
            } else {
                let shared = lcp(self.key(i - 1), key);
                encode(&mut buf, shared, &key[shared..], Entry::plain(meta));
            }
            n += 1;
        }
        out(Leaf::of(&buf, n, restarts), prev_last);
    }
}

#[cfg(test)]
impl Leaf {
    /// A leaf holding `buf`'s entries (`n` of them, restart points at
    /// `restarts`), in a buffer of its size class.
    fn of(buf: &[u8], n: u16, restarts: ArrayVec<u16, RESTARTS>) -> Leaf {
        let mut b = Vec::with_capacity(size_class(buf.len()));
        b.extend_from_slice(buf);
        count_bytes(b.capacity(), 0);
        Leaf {
            buf: b,
            len: n,
            stamped: 0,
            restarts,
        }
    }

    /// Merges this leaf's entries with `ops` (sorted by key, distinct
    /// keys; `None`: remove) into `out`; returns how many entries changed
    /// (inserted, updated or removed) and how many were inserted minus
    /// removed.
    pub fn merge(&self, ops: &[(&[u8], Option<Meta>)], out: &mut Merged) -> (usize, isize) {
        out.clear();
        let (mut changed, mut delta) = (0usize, 0isize);
        let mut key: Vec<u8> = Vec::new();
        let mut off = 0;
        let mut cur = self.read(off, &mut key);
        let mut ops = ops.iter().peekable();
        loop {
            match (cur, ops.peek()) {
                (None, None) => break,
                (Some((next, e)), op) => {
                    let m = e.meta;
                    let ord = op.map_or(std::cmp::Ordering::Less, |(k, _)| key[..].cmp(k));
                    match ord {
                        std::cmp::Ordering::Less => {
                            out.push(&key, m);
                            off = next;
                            cur = self.read(off, &mut key);
                        }
                        std::cmp::Ordering::Equal => {
                            let (_, truth) = ops.next().copied().unwrap_or((&[], None));
                            match truth {
                                Some(t) => {
                                    if t != m {
                                        changed += 1;
                                    }
                                    out.push(&key, t);
                                }
                                None => {
                                    changed += 1;
                                    delta -= 1;
                                }
                            }
                            off = next;
                            cur = self.read(off, &mut key);
                        }
                        std::cmp::Ordering::Greater => {
                            if let Some((k, Some(t))) = ops.next() {
                                out.push(k, *t);
                                changed += 1;
                                delta += 1;
                            }
                        }
                    }
                }
                (None, Some(_)) => {
                    if let Some((k, Some(t))) = ops.next() {
                        out.push(k, *t);
                        changed += 1;
                        delta += 1;
                    }
                }
            }
        }
        (changed, delta)
    }
}

/// Decodes the entry at `off` over `key`; returns the next offset and the
/// entry's metadata.
#[inline]
fn step(buf: &[u8], off: usize, key: &mut Vec<u8>) -> (usize, Entry) {
    let h = hdr(buf, off);
    key.truncate(h.shared);
    key.extend_from_slice(h.suffix(buf));
    (h.end, h.entry)
}

/// Writes into `out` the first `out.len()` bytes of the key of the entry
/// that ends `buf`, decoding only the headers of the entries from `start`
/// (an entry stored whole, at or before it). Each entry rewrites the
/// positions from its `shared` on, so the last write of each position is
/// the right byte.
fn prefix_into(buf: &[u8], start: usize, out: &mut [u8]) {
    let mut off = start;
    while off < buf.len() {
        let h = span(buf, off);
        if let Some(dst) = out.get_mut(h.shared..) {
            let n = dst.len().min(h.end - h.body);
            if let (Some(d), Some(src)) = (dst.get_mut(..n), buf.get(h.body..h.body + n)) {
                d.copy_from_slice(src);
            }
        }
        off = h.end;
    }
}

/// The leaf's own cost per operation, in cache (no tree, no misses):
/// `cargo test --release --lib leaf::speed -- --ignored --nocapture`
#[cfg(test)]
mod speed {
    use super::*;
    use crate::index::meta::STRING;

    use crate::index::thread_cpu_ns as cpu_ns;

    #[test]
    #[ignore]
    fn ops() {
        let rounds = 1_000_000u64;
        for shape in ["seq", "uuid"] {
            let key = |i: u64| -> Vec<u8> {
                if shape == "seq" {
                    format!("key:{:012}", i * 2).into_bytes()
                } else {
                    let h = (i * 2).wrapping_mul(0x9E3779B97F4A7C15);
                    format!("{:016x}-{:019x}", h >> 8 << 8, h.rotate_left(17) >> 12).into_bytes()
                }
            };
            let meta = Entry::plain(Meta::new(STRING, None));
            let mut all: Vec<Vec<u8>> = Vec::new();
            let mut l = Leaf::default();
            let mut i = 0;
            while l.encoded_len() < LEAF_MAX * 3 / 4 {
                let k = key(i);
                let p = l.find(&k);
                if !p.found {
                    l.insert_at(&p, &k, meta);
                    all.push(k);
                }
                i += 1;
            }
            all.sort();
            // Absent keys between present ones.
            let absent: Vec<Vec<u8>> = all
                .iter()
                .map(|k| {
                    let mut a = k.clone();
                    a.push(b'x');
                    a
                })
                .collect();
            let n = all.len() as u64;
            let pick = |r: u64| (r.wrapping_mul(2654435761) % n) as usize;
            let t0 = cpu_ns();
            let mut hits = 0;
            for r in 0..rounds {
                hits += l.find(&all[pick(r)]).found as usize;
            }
            let find = (cpu_ns() - t0) as f64 / rounds as f64;
            let t0 = cpu_ns();
            for r in 0..rounds {
                let k = &absent[pick(r)];
                let p = l.find(k);
                l.insert_at(&p, k, meta);
                let p = l.find(k);
                l.remove_at(&p);
            }
            let edit = (cpu_ns() - t0) as f64 / rounds as f64;
            let t0 = cpu_ns();
            for r in 0..rounds {
                let p = l.find(&all[pick(r)]);
                l.set_entry(
                    &p,
                    Entry::plain(Meta::new(STRING, Some((r % 2) as i64 * 1_900_000_000_000))),
                );
            }
            let set = (cpu_ns() - t0) as f64 / rounds as f64;
            assert_eq!(hits, rounds as usize);
            eprintln!(
                "{shape}: {n} keys, {} B: find {find:.0} ns, find+insert+find+remove {edit:.0} ns, find+set_meta {set:.0} ns",
                l.encoded_len()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::meta::{HASH, STRING};
    use proptest::prelude::*;
    use rstest::rstest;
    use std::collections::BTreeMap;

    fn build(keys: &[&[u8]]) -> Leaf {
        let mut l = Leaf::default();
        for k in keys {
            let p = l.find(k);
            assert!(!p.found);
            l.insert_at(&p, k, Entry::plain(Meta::new(STRING, None)));
        }
        l
    }

    #[rstest]
    #[case(0, 0)]
    #[case(1, 16)]
    #[case(64, 64)]
    #[case(65, 80)]
    #[case(129, 160)]
    #[case(1000, 1024)]
    #[case(1025, 1280)]
    fn size_classes(#[case] n: usize, #[case] class: usize) {
        assert_eq!(size_class(n), class);
    }

    #[rstest]
    #[case(0)]
    #[case(127)]
    #[case(128)]
    #[case(300)]
    #[case(1 << 40)]
    fn varints_round_trip(#[case] v: usize) {
        let h = Head::new(v, 0, Entry::plain(Meta::new(STRING, None)));
        let b = h.bytes();
        let mut off = 0;
        assert_eq!(get_varint(b, &mut off), v);
        assert_eq!(get_varint(b, &mut off), 0);
        assert_eq!(off, b.len() - 1);
    }

    #[rstest]
    #[case(STRING, None)]
    #[case(HASH, Some(1_700_000_000_123))]
    #[case(0x7e, None)]
    #[case(0x7f, Some(0))]
    #[case(0xff, Some(i64::MAX / 4096))]
    fn metas_round_trip(
        #[case] ty: TypeId,
        #[case] exp: Option<i64>,
        #[values(Stamp::NONE, Stamp::born(1), Stamp::dead(1 << 40))] stamp: Stamp,
    ) {
        let m = Entry::new(Meta::new(ty, exp), stamp);
        let l = Leaf::with(b"k", m);
        assert_eq!(l.get(b"k"), Some(m));
        assert_eq!(l.entries(), vec![(b"k".to_vec(), m)]);
        assert_eq!(l.stamped(), usize::from(!stamp.is_none()));
    }

    #[test]
    fn a_sequential_key_costs_a_few_bytes() {
        let keys: Vec<Vec<u8>> = (0..60)
            .map(|i| format!("key:{i:012}").into_bytes())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let l = build(&refs);
        // 16 bytes whole for the first, then shared + len + tag + 1-2 bytes.
        assert!(l.encoded_len() <= 19 + 59 * 5, "{}", l.encoded_len());
    }

    #[rstest]
    #[case(&["b", "a"], "ab", false)]
    #[case(&["abc", "abd"], "ab", false)]
    #[case(&["ab", "abc"], "abc", true)]
    #[case(&["ab", "abcd"], "abc", false)]
    #[case(&["a", "b"], "", false)]
    #[case(&["", "a"], "", true)]
    fn finds_like_a_sorted_list(#[case] keys: &[&str], #[case] key: &str, #[case] found: bool) {
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let key = key.as_bytes();
        let l = build(&keys);
        let p = l.find(key);
        assert_eq!(p.found, found);
        let mut sorted: Vec<&[u8]> = keys.to_vec();
        sorted.sort();
        let before = sorted.partition_point(|k| *k < key);
        let mut k = Vec::new();
        let mut off = 0;
        for _ in 0..before {
            off = l.read(off, &mut k).map_or(off, |(next, _)| next);
        }
        assert_eq!(p.off, off);
    }

    #[rstest]
    #[case(&["ab", "c"], 5, b"abc\0\0")]
    #[case(&["ab", "cd"], 3, b"abc")]
    #[case(&["", "x"], 2, b"x\0")]
    #[case(&[], 1, b"\0")]
    fn parts_are_written_in_order(#[case] parts: &[&str], #[case] len: usize, #[case] want: &[u8]) {
        let mut dst = vec![0u8; len];
        let parts: Vec<&[u8]> = parts.iter().map(|p| p.as_bytes()).collect();
        write_parts(&mut dst, &parts);
        assert_eq!(dst, want);
    }

    fn leaf_with_restarts(len: usize, restarts: &[u16]) -> Leaf {
        let mut l = Leaf::default();
        l.splice(0..0, &vec![0; len]);
        l.restarts = restarts.iter().copied().collect();
        l
    }

    #[rstest]
    #[case::grow(&[0, 10, 20], 30, 5, 3, &[0, 13, 23])]
    #[case::after_the_edit_only(&[0, 10, 20], 30, 10, 3, &[0, 10, 23])]
    #[case::shrink(&[0, 10, 20], 30, 5, -4, &[0, 6, 16])]
    #[case::duplicate(&[0, 10, 20], 30, 10, -10, &[0, 10])]
    #[case::past_the_end(&[0, 10, 20], 20, 10, 0, &[0, 10])]
    #[case::kept_past_the_end(&[0, 10], 10, 10, -5, &[0])]
    fn restarts_shift(
        #[case] restarts: &[u16],
        #[case] len: usize,
        #[case] from: usize,
        #[case] delta: isize,
        #[case] want: &[u16],
    ) {
        let mut l = leaf_with_restarts(len, restarts);
        l.shift_restarts(from, delta);
        assert_eq!(&l.restarts[..], want);
    }

    /// An edit that moves a restart point past u16 offsets re-encodes the
    /// leaf, so no whole entry is left that is not a restart point.
    #[test]
    fn restart_points_pushed_past_u16_are_re_encoded() {
        let plain = Entry::plain(Meta::new(STRING, None));
        let huge = [b"b".as_slice(), &vec![b'x'; 65_300]].concat();
        let mut keys: Vec<Vec<u8>> = vec![b"a".to_vec(), huge.clone()];
        let mut l = Leaf::with(b"a", plain);
        let put = |l: &mut Leaf, k: &[u8]| {
            let p = l.find(k);
            assert!(!p.found);
            l.insert_at(&p, k, plain);
        };
        put(&mut l, &huge);
        // Entries after the huge key, enough for a restart point past it.
        for i in 0..40u32 {
            let k = [huge.as_slice(), format!("{i:04}").as_bytes(), &[b'y'; 20]].concat();
            put(&mut l, &k);
            keys.push(k);
        }
        assert!(l.restarts.iter().any(|&o| o > 65_000), "{:?}", l.restarts);
        // Grows the front of the leaf past what u16 offsets allow.
        let wide = [b"a".as_slice(), &[b'z'; 600]].concat();
        put(&mut l, &wide);
        keys.push(wide);
        l.check_restarts();
        keys.sort();
        for k in &keys {
            assert!(l.find(k).found, "lost a key of {} bytes", k.len());
        }
        let got: Vec<Vec<u8>> = l.entries().into_iter().map(|(k, _)| k).collect();
        assert_eq!(got, keys);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(Vec<u8>, u8, Option<i64>, u64),
        Del(Vec<u8>),
        Split(usize),
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        // Few distinct bytes: long shared prefixes, prefixes of each other.
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xff)],
            0..12,
        )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (key(), any::<u8>(), proptest::option::of(0i64..1 << 50), prop_oneof![3 => Just(0u64), 1 => 2u64..1 << 40])
                .prop_map(|(k, t, e, s)| Op::Put(k, t, e, s)),
            3 => key().prop_map(Op::Del),
            1 => (0usize..100).prop_map(Op::Split),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Put, delete, split and re-append against a BTreeMap.
        #[test]
        fn behaves_like_btreemap(ops in proptest::collection::vec(op(), 1..200)) {
            let mut l = Leaf::default();
            let mut model: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Put(k, t, e, s) => {
                        let m = Entry::new(Meta::new(t, e), Stamp::from_raw(s));
                        let p = l.find(&k);
                        prop_assert_eq!(p.found, model.contains_key(&k));
                        if p.found { l.set_entry(&p, m) } else { l.insert_at(&p, &k, m) }
                        model.insert(k, m);
                    }
                    Op::Del(k) => {
                        let p = l.find(&k);
                        let old = model.remove(&k);
                        prop_assert_eq!(p.found.then(|| l.remove_at(&p)), old);
                    }
                    Op::Split(at) => {
                        if l.len() >= 2 {
                            let at = 1 + at % (l.len() - 1);
                            let (right, last) = l.split_off(at);
                            prop_assert_eq!(Some(last), l.entries().last().map(|e| e.0.clone()));
                            prop_assert_eq!(right.len() + l.len(), model.len());
                            l.append(&right);
                        }
                    }
                }
                let want: Vec<(Vec<u8>, Entry)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(l.entries(), want);
                l.check_restarts();
                prop_assert_eq!(l.len(), model.len());
                prop_assert_eq!(l.stamped(), model.values().filter(|e| !e.stamp.is_none()).count());
                if let Some((k, _)) = model.iter().next() {
                    prop_assert_eq!(l.first_key(), &k[..]);
                }
            }
            // Seeks: every key and every position between keys.
            for probe in model.keys().cloned().chain([vec![], vec![b'a'], vec![0xff, 0xff]]) {
                for inclusive in [true, false] {
                    let mut key = Vec::new();
                    let mut off = l.seek(&probe, inclusive, &mut key);
                    let mut got = Vec::new();
                    while let Some((next, _)) = l.read(off, &mut key) {
                        got.push(key.clone());
                        off = next;
                    }
                    let want: Vec<Vec<u8>> = model.keys().filter(|k| if inclusive { **k >= probe } else { **k > probe }).cloned().collect();
                    prop_assert_eq!(got, want);
                }
            }
        }

        /// `rewrite` (through `splice`) gives the bytes of `Vec::splice`
        /// and the capacity of the size-class policy.
        #[test]
        fn splices_like_vec_splice(
            init in proptest::collection::vec(any::<u8>(), 0..3000),
            a in 0usize..3000,
            b in 0usize..3000,
            with in proptest::collection::vec(any::<u8>(), 0..1500),
        ) {
            let (a, b) = (a.min(init.len()), b.min(init.len()));
            let range = a.min(b)..a.max(b);
            let mut l = Leaf::default();
            l.splice(0..0, &init);
            let mut model = Vec::with_capacity(l.capacity());
            model.extend_from_slice(&init);
            let new_len = model.len() - range.len() + with.len();
            if new_len > model.capacity() {
                model.reserve_exact(size_class(new_len) - model.len());
            }
            model.splice(range.clone(), with.iter().copied());
            let want = size_class(model.len());
            if model.capacity() > want + want / 4 + 64 {
                model.shrink_to(want);
            }
            l.splice(range, &with);
            prop_assert_eq!(&l.buf, &model);
            prop_assert_eq!(l.capacity(), model.capacity());
        }

        #[test]
        fn heads_decode(shared in 0usize..1 << 40, len in 0usize..1 << 20, ty in any::<u8>(), exp in proptest::option::of(0i64..1 << 50), stamp in prop_oneof![Just(0u64), 2u64..1 << 40, Just(u64::MAX)]) {
            let m = Entry::new(Meta::new(ty, exp), Stamp::from_raw(stamp));
            let head = Head::new(shared, len, m);
            let mut buf = head.bytes().to_vec();
            buf.resize(buf.len() + len, 7);
            let h = hdr(&buf, 0);
            prop_assert_eq!(h.shared, shared);
            prop_assert_eq!(h.body, head.len());
            prop_assert_eq!(h.end, buf.len());
            prop_assert_eq!(h.entry, m);
            let s = span(&buf, 0);
            prop_assert_eq!((s.body, s.end), (h.body, h.end));
        }

        /// `prefix_into` rebuilds any prefix of every key from the headers.
        #[test]
        fn prefixes_decode(keys in proptest::collection::btree_set(key(), 1..40), cut in 0usize..12) {
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let l = build(&keys);
            let mut off = 0;
            for k in &keys {
                let n = cut.min(k.len());
                let mut out = vec![0u8; n];
                let end = hdr(&l.buf, off).end;
                prefix_into(&l.buf[..end], 0, &mut out);
                prop_assert_eq!(&out[..], &k[..n]);
                off = end;
            }
        }

        /// The restart search gives the count of a linear scan, and the
        /// common prefix with the last restart key not greater.
        #[test]
        fn restart_search_matches_a_linear_scan(keys in proptest::collection::btree_set(key(), 1..150), probes in proptest::collection::vec(key(), 1..20)) {
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let l = build(&keys);
            let wholes: Vec<&[u8]> = l.restarts.iter().map(|&o| hdr(&l.buf, o as usize).suffix(&l.buf)).collect();
            for probe in probes.iter().map(|p| &p[..]).chain(keys.iter().copied()) {
                let want = wholes.partition_point(|w| *w <= probe);
                let want_lcp = want.checked_sub(1).map_or(0, |i| lcp(wholes[i], probe));
                prop_assert_eq!(l.search_restarts(probe), (want, want_lcp));
            }
        }

        /// `find` gives the probe of a plain scan from the first entry
        /// (the same offsets and common prefixes, so edits through it are
        /// the same).
        #[test]
        fn probes_match_a_plain_scan(keys in proptest::collection::btree_set(key(), 0..150), probes in proptest::collection::vec(key(), 1..20)) {
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let l = build(&keys);
            for probe in probes.iter().map(|p| &p[..]).chain(keys.iter().copied()) {
                let p = l.find(probe);
                let mut off = 0;
                let mut prev: Vec<u8> = Vec::new();
                let mut k = Vec::new();
                while let Some((next, _)) = l.read(off, &mut k) {
                    if &k[..] >= probe {
                        break;
                    }
                    prev.clone_from(&k);
                    off = next;
                }
                let found = off < l.encoded_len() && &k[..] == probe;
                prop_assert_eq!(p.found, found);
                prop_assert_eq!(p.off, off);
                // The run scanned: the last restart point not greater than the key.
                let run = l.restarts.iter().rposition(|&r| (r as usize) < off || (found && r as usize == off));
                prop_assert_eq!(p.run, run.unwrap_or(0));
                if !found {
                    prop_assert_eq!(p.lcp_prev, if off == 0 { 0 } else { lcp(&prev, probe) });
                    let next = if off < l.encoded_len() { lcp(&k, probe) } else { 0 };
                    // Before a restart point (never re-encoded by an
                    // insertion) the scan may stop at its header (0 shared).
                    if off > 0 && l.restarts.contains(&(off as u16)) {
                        prop_assert!(p.lcp_next <= next);
                    } else {
                        prop_assert_eq!(p.lcp_next, next);
                    }
                }
            }
        }

        #[test]
        fn lcp_is_the_common_prefix(a in proptest::collection::vec(0u8..3, 0..40), b in proptest::collection::vec(0u8..3, 0..40)) {
            let want = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            prop_assert_eq!(lcp(&a, &b), want);
        }
    }
}
