//! `KeyMap`: a persistent (copy-on-write) B+tree from binary keys to
//! [`Meta`], with front-coded leaves.
//!
//! Pure Rust, no server types. Nodes are reference counted: `clone()` copies
//! the root pointer only (an O(1) snapshot), and a write copies just the
//! nodes on its path that a snapshot still shares (`Arc::make_mut`). A map
//! nobody shares is updated in place.
//!
//! Shaped for the index's memory and write-cost targets (docs/DESIGN.md):
//! - a leaf is a [`Leaf`]: its entries front-coded in one buffer of at most
//!   about [`LEAF_MAX`] bytes, sized to what it holds (a leaf copied for a
//!   snapshot costs its bytes, not a fixed node);
//! - branches hold the shortest separators that tell two leaves apart
//!   (usually a few bytes, stored inline in a [`Key`]) and up to
//!   [`BRANCH_CAP`] children;
//! - an insert past the end of a full leaf (an ascending stream) starts a
//!   new leaf instead of splitting this one in half; other inserts split a
//!   full leaf in the middle of its bytes;
//! - a leaf under [`LEAF_MIN`] bytes after a removal merges with a
//!   neighbour when both fit in one; branches likewise by children.
//!
//! Every node's bytes are counted ([`node_bytes`] for all versions), and
//! each map keeps the bytes reachable from its own root ([`KeyMap::live_bytes`]),
//! so the bytes only old versions hold are their difference.
//!
//! Locking: none; `&mut self` methods need exclusive access to this handle
//! only, never to other clones (snapshots) of the same tree.

#[cfg(test)]
use super::leaf::Merged;
use super::leaf::{count_bytes, lcp, Leaf, Probe, LEAF_MAX, LEAF_MIN};
use super::{Entry, Key, KeyProbe, Meta};
use arrayvec::ArrayVec;
use std::ops::Bound;
use std::sync::Arc;

pub use super::leaf::node_bytes;

/// Bytes of every tree node alive, in every version (same as [`node_bytes`]).
pub fn all_node_bytes() -> usize {
    node_bytes()
}

/// Children per branch.
pub const BRANCH_CAP: usize = 64;
/// Lookups [`KeyMap::get_many`] overlaps at most.
pub const GET_MANY: usize = 16;
const BRANCH_MIN: usize = BRANCH_CAP / 4;

enum Node {
    Leaf(Leaf),
    Branch(Box<Branch>),
}

/// `keys[i]` separates `children[i]` from `children[i + 1]`: every key of
/// `children[i]` is smaller, every key of `children[i + 1]` is not.
#[derive(Clone)]
struct Branch {
    keys: ArrayVec<Key, { BRANCH_CAP - 1 }>,
    children: ArrayVec<Arc<Node>, BRANCH_CAP>,
}

/// Bytes of a node beside its leaf buffer: the `Arc` allocation, and a
/// branch's box.
fn fixed_bytes(n: &Node) -> usize {
    const ARC: usize = std::mem::size_of::<Node>() + 2 * std::mem::size_of::<usize>();
    match n {
        Node::Leaf(_) => ARC,
        Node::Branch(_) => ARC + std::mem::size_of::<Branch>(),
    }
}

/// Bytes of a node (not of its children).
fn bytes(n: &Node) -> usize {
    fixed_bytes(n)
        + match n {
            Node::Leaf(l) => l.capacity(),
            Node::Branch(_) => 0,
        }
}

impl Clone for Node {
    fn clone(&self) -> Self {
        let n = match self {
            Node::Leaf(l) => Node::Leaf(l.clone()),
            Node::Branch(b) => Node::Branch(b.clone()),
        };
        count_bytes(fixed_bytes(&n), 0);
        n
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        count_bytes(0, fixed_bytes(self));
    }
}

fn new_node(n: Node) -> Arc<Node> {
    count_bytes(fixed_bytes(&n), 0);
    Arc::new(n)
}

impl Branch {
    /// The child that holds (or would hold) `key`.
    #[inline]
    fn child_for(&self, key: &KeyProbe<'_>) -> usize {
        self.keys.partition_point(|s| s.le(key))
    }

    /// Prefetches the separators the first steps of a binary search over a
    /// full branch read (see `locate_many`).
    #[inline]
    fn prefetch(&self) {
        for i in [31, 15, 47, 7, 23, 39, 55] {
            super::prefetch::prefetch(self.keys.as_ptr().wrapping_add(i));
        }
    }
}

impl Node {
    fn underfull(&self) -> bool {
        match self {
            Node::Leaf(l) => l.encoded_len() < LEAF_MIN,
            Node::Branch(b) => b.children.len() < BRANCH_MIN,
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Node::Leaf(l) => l.is_empty(),
            Node::Branch(b) => b.children.is_empty(),
        }
    }
}

/// The shortest key `s` with `left < s <= right` (`left < right`).
fn separator(left: &[u8], right: &[u8]) -> Key {
    let n = (lcp(left, right) + 1).min(right.len());
    Key::new(&right[..n])
}

/// A node split in two by an insert: the separator and the new right node.
type Split = Option<(Key, Arc<Node>)>;

/// What a write did beside its entry: the change of the map's node bytes,
/// the path it took, and the highest branch whose children it changed (a
/// node split, merged or removed), which moves other keys' paths.
#[derive(Default)]
struct Edit {
    bytes: isize,
    touched: Touched,
}

impl Edit {
    /// The children of the branch at `level` (0: the root; a new root is
    /// level 0 too) changed.
    #[inline]
    fn reshape(&mut self, level: usize) {
        let r = &mut self.touched.reshaped;
        *r = Some(r.map_or(level, |l| l.min(level)));
    }

    /// The write descends into child `ci` of the branch it is in.
    #[inline]
    fn descend(&mut self, ci: usize) {
        if !self.touched.path.push(ci) {
            self.touched.lost = true;
        }
    }

    /// Level of the branch the write is in (before [`descend`](Self::descend)).
    #[inline]
    fn level(&self) -> usize {
        self.touched.path.len()
    }
}

/// What the last write of a [`KeyMap`] changed, for the [`Located`]s found
/// before it ([`Located::survives`]).
#[derive(Clone, Debug, Default)]
pub struct Touched {
    /// The child taken at each branch level down to the leaf it edited.
    path: Path,
    /// The highest level whose branch had its children changed: every path
    /// through that branch may have moved (0: the root's, so every path).
    reshaped: Option<usize>,
    /// The path was too deep to record (never in practice): moves every path.
    lost: bool,
}

/// Branch levels a [`Located`] records (a tree this deep would hold more
/// keys than any memory: every branch but the root has at least
/// `BRANCH_MIN` children).
const MAX_HEIGHT: usize = 16;

/// The child index taken at each branch level, from the root: one byte per
/// level in one word, so two paths or their prefixes compare in a few
/// instructions (no `memcmp` call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Path {
    idx: [u8; MAX_HEIGHT],
    len: u8,
}

impl Path {
    /// Appends a level; false if the path is full (or `ci` past a byte).
    #[inline]
    fn push(&mut self, ci: usize) -> bool {
        match (self.idx.get_mut(self.len as usize), u8::try_from(ci)) {
            (Some(slot), Ok(ci)) => {
                *slot = ci;
                self.len += 1;
                true
            }
            _ => false,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        self.idx.get(..self.len()).unwrap_or(&[])
    }

    /// Whether both paths go through the same branch at `level` (their
    /// first `level` steps are equal); true if either is shorter.
    #[inline]
    fn same_prefix(&self, other: &Path, level: usize) -> bool {
        if level > self.len() || level > other.len() {
            return true;
        }
        let diff = u128::from_le_bytes(self.idx) ^ u128::from_le_bytes(other.idx);
        let mask = u128::MAX
            .checked_shl(level as u32 * 8)
            .map_or(u128::MAX, |m| !m);
        diff & mask == 0
    }
}

/// Where a read-only lookup found a key, or where it would go: the child
/// taken at each branch level and the probe in the leaf. A write can reuse
/// it instead of searching again ([`KeyMap::insert_located`]): the whole of
/// it while no later write changed the children of a branch on its path or
/// edited its leaf, the path alone (the leaf searched again) after a write
/// edited its leaf without reshaping anything (see [`survives`](Self::survives)).
#[derive(Clone, Debug)]
pub struct Located {
    path: Path,
    /// `None` once the leaf was edited since the lookup.
    probe: Option<Probe>,
}

impl Located {
    /// Whether no write since the lookup edited the key's leaf (nor, so,
    /// changed the key): the probe and the value found still hold.
    pub fn probe_valid(&self) -> bool {
        self.probe.is_some()
    }

    /// Takes into account a write made since the lookup (`t`, from
    /// [`KeyMap::touched`]): returns whether the path still leads to the
    /// key's leaf, and forgets the probe if the write edited that leaf.
    ///
    /// Sound because a write changes the children of the branches at and
    /// below its reshaped level only, on its own path: a path that leaves
    /// that prefix meets only branches whose children did not move, so it
    /// still names the same leaf in the tree as it is now (and compares with
    /// later writes' paths in that tree).
    pub fn survives(&mut self, t: &Touched) -> bool {
        if t.lost {
            return false;
        }
        if let Some(level) = t.reshaped {
            if self.path.same_prefix(&t.path, level) {
                return false;
            }
        }
        if self.path == t.path {
            self.probe = None;
        }
        true
    }
}

#[cfg(test)]
thread_local! {
    /// Whether a write along a [`Located`] path checks it against a fresh
    /// search (tests); the speed tests turn it off for their thread.
    pub(crate) static VERIFY_REUSE: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// How a write finds its way: by searching, or along a [`Located`] path
/// (and its probe in the leaf, if still valid).
#[derive(Clone, Copy)]
enum Route<'a> {
    Search,
    Known(&'a [u8], Option<&'a Probe>),
}

impl Route<'_> {
    /// The child of `b` to descend into, and the route below it.
    #[inline]
    fn child(self, b: &Branch, key: &[u8]) -> (usize, Self) {
        match self {
            Route::Known([ci, rest @ ..], p) if (*ci as usize) < b.children.len() => {
                #[cfg(test)]
                if VERIFY_REUSE.get() {
                    let want = b.child_for(&KeyProbe::new(key));
                    assert_eq!(*ci as usize, want, "a stale path was reused");
                }
                (*ci as usize, Route::Known(rest, p))
            }
            _ => (b.child_for(&KeyProbe::new(key)), Route::Search),
        }
    }

    /// Where `key` is in `l`.
    #[inline]
    fn probe(self, l: &Leaf, key: &[u8]) -> Probe {
        match self {
            Route::Known([], Some(p)) => {
                // The unit tests check every reuse against a fresh search
                // (all but the speed tests, which measure what the module
                // does).
                #[cfg(test)]
                if VERIFY_REUSE.get() {
                    assert_eq!(*p, l.find(key), "a stale location was reused");
                }
                *p
            }
            _ => l.find(key),
        }
    }
}

/// Ordered map of one database's keys.
#[derive(Clone, Default)]
pub struct KeyMap {
    root: Option<Arc<Node>>,
    /// Entries that are not tombstones.
    len: usize,
    /// Tombstones (see [`Entry`]).
    dead: usize,
    /// Entries with a stamp, tombstones included.
    stamped: usize,
    /// Bytes of the nodes reachable from `root`.
    live_bytes: usize,
    /// What the last write changed (see [`Located::survives`]).
    touched: Touched,
}

impl KeyMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys (tombstones are not keys).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map has no key (it may still hold tombstones).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tombstones.
    pub fn dead(&self) -> usize {
        self.dead
    }

    /// Entries with a stamp (tombstones included): what the collector
    /// has to examine in the live map.
    pub fn stamped(&self) -> usize {
        self.stamped
    }

    /// An estimate of the node bytes that only old versions need: each
    /// tombstone at the map's mean bytes per entry, and 4 bytes per stamp
    /// of a key that is alive.
    pub fn kept_bytes(&self) -> usize {
        let entries = self.len + self.dead;
        let per_entry = self.live_bytes.checked_div(entries).unwrap_or(0);
        (self.dead * per_entry + (self.stamped - self.dead.min(self.stamped)) * 4)
            .min(self.live_bytes)
    }

    /// Adjusts the counts for an entry that went from `old` to `new`.
    #[inline]
    fn count(&mut self, old: Option<Entry>, new: Option<Entry>) {
        for (e, add) in [(old, false), (new, true)] {
            let Some(e) = e else { continue };
            let (alive, dead, stamped) = (
                usize::from(!e.is_dead()),
                usize::from(e.is_dead()),
                usize::from(!e.stamp.is_none()),
            );
            if add {
                self.len += alive;
                self.dead += dead;
                self.stamped += stamped;
            } else {
                self.len -= alive;
                self.dead -= dead;
                self.stamped -= stamped;
            }
        }
    }

    /// Bytes of the nodes this version reaches (shared ones included).
    pub fn live_bytes(&self) -> usize {
        self.live_bytes
    }

    fn leaf_for(&self, key: &[u8]) -> Option<&Leaf> {
        let key = KeyProbe::new(key);
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Branch(b) => node = &b.children[b.child_for(&key)],
                Node::Leaf(l) => return Some(l),
            }
        }
    }

    /// The key's metadata (`None` for a tombstone).
    pub fn get(&self, key: &[u8]) -> Option<Meta> {
        self.leaf_for(key)?.get(key)?.alive()
    }

    /// The key's entry, tombstone or not.
    pub fn get_entry(&self, key: &[u8]) -> Option<Entry> {
        self.leaf_for(key)?.get(key)
    }

    /// Looks up several keys, overlapping their cache misses: first every
    /// key's leaf is located through the branches (small, usually cached)
    /// and prefetched without being read, then every leaf's bytes are
    /// prefetched, then each is searched. A lookup in a large index is
    /// bound by memory latency, and this lets up to [`GET_MANY`] of them
    /// wait together instead of one after the other. Each key's value comes
    /// with where it was found, for a write that follows
    /// ([`insert_located`](Self::insert_located)).
    pub fn locate_many(&self, keys: &[&[u8]], out: &mut Vec<(Option<Entry>, Option<Located>)>) {
        out.clear();
        let Some(root) = self.root.as_ref() else {
            out.resize(keys.len(), (None, None));
            return;
        };
        // Branch levels above the leaves (all leaves are at one depth).
        let mut height = 0;
        let mut n = &**root;
        while let Node::Branch(b) = n {
            height += 1;
            n = &b.children[0];
        }
        let mut paths: ArrayVec<Path, GET_MANY> = ArrayVec::new();
        for chunk in keys.chunks(GET_MANY) {
            let probes: ArrayVec<KeyProbe<'_>, GET_MANY> =
                chunk.iter().map(|k| KeyProbe::new(k)).collect();
            let mut leaves: ArrayVec<&Arc<Node>, GET_MANY> = chunk.iter().map(|_| root).collect();
            paths.clear();
            paths.extend(chunk.iter().map(|_| Path::default()));
            // Level by level, every key at once: the separators a search
            // reads first are prefetched for all keys before any is
            // searched, and each child node as soon as it is chosen.
            for _ in 0..height {
                for arc in &leaves {
                    if let Node::Branch(b) = &***arc {
                        b.prefetch();
                    }
                }
                for ((arc, probe), path) in leaves.iter_mut().zip(&probes).zip(&mut paths) {
                    if let Node::Branch(b) = &***arc {
                        let ci = b.child_for(probe);
                        // A child index fits a byte (BRANCH_CAP); a path
                        // too deep to record is searched again.
                        let _ = path.push(ci);
                        *arc = &b.children[ci];
                        super::prefetch::prefetch(Arc::as_ptr(*arc));
                    }
                }
            }
            for arc in &leaves {
                if let Node::Leaf(l) = &***arc {
                    l.prefetch();
                }
            }
            for ((arc, k), path) in leaves.iter().zip(chunk).zip(paths.drain(..)) {
                out.push(match &***arc {
                    Node::Leaf(l) if path.len() == height => {
                        let probe = l.find(k);
                        let meta = probe.found.then(|| l.entry_at(&probe));
                        (
                            meta,
                            Some(Located {
                                path,
                                probe: Some(probe),
                            }),
                        )
                    }
                    _ => (self.get_entry(k), None),
                });
            }
        }
    }

    /// What the last write changed: a [`Located`] found before it is
    /// valid only if it [survives](Located::survives) this.
    pub fn touched(&self) -> &Touched {
        &self.touched
    }

    /// Inserts or replaces a key with no stamp; returns its previous
    /// metadata (`None` if it was absent or a tombstone). A write that
    /// changes nothing copies no node (a first, read-only descent checks).
    pub fn insert(&mut self, key: &[u8], meta: Meta) -> Option<Meta> {
        self.put(key, Entry::plain(meta)).and_then(Entry::alive)
    }

    /// Inserts or replaces the key's entry; returns the previous one. A
    /// write that changes nothing copies no node.
    pub fn put(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        if let Some(old) = self.get_entry(key) {
            if old == entry {
                return Some(old);
            }
        }
        self.put_changed(key, entry)
    }

    /// [`put`](Self::put) for a caller that knows the key does not
    /// already hold `entry` (no read-only descent first).
    pub fn put_changed(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        self.insert_by(key, entry, Route::Search)
    }

    /// [`put_changed`](Self::put_changed) where `at` says (see
    /// [`Located`]: the caller guarantees it is still valid), without
    /// searching the branches or the leaf again.
    pub fn put_located(&mut self, key: &[u8], entry: Entry, at: &Located) -> Option<Entry> {
        self.insert_by(
            key,
            entry,
            Route::Known(at.path.as_slice(), at.probe.as_ref()),
        )
    }

    fn insert_by(&mut self, key: &[u8], entry: Entry, route: Route<'_>) -> Option<Entry> {
        let mut e = Edit::default();
        let Some(root) = self.root.as_mut() else {
            let root = new_node(Node::Leaf(Leaf::with(key, entry)));
            self.live_bytes = bytes(&root);
            self.root = Some(root);
            self.count(None, Some(entry));
            self.touched = Touched::default();
            self.touched.reshaped = Some(0);
            return None;
        };
        let (old, split) = insert(root, key, entry, &mut e, route);
        // The root split: a new root above its two halves.
        if let Some((sep, right)) = split {
            let mut b = Branch {
                keys: ArrayVec::new(),
                children: ArrayVec::new(),
            };
            b.keys.push(sep);
            b.children.extend(self.root.take());
            b.children.push(right);
            let root = new_node(Node::Branch(Box::new(b)));
            e.bytes += bytes(&root) as isize;
            e.reshape(0);
            self.root = Some(root);
        }
        self.count(old, Some(entry));
        self.touched = e.touched;
        self.live_bytes = self.live_bytes.saturating_add_signed(e.bytes);
        old
    }

    /// Applies `ops` (sorted by key, no key twice; `None`: remove the
    /// key) as [`insert`](Self::insert) and [`remove`](Self::remove) would
    /// one after the other, but re-encoding each leaf they touch once, into
    /// new leaves (a snapshot keeps the old ones as they are). Returns how
    /// many changed the map. Any [`Located`] found before is stale after.
    /// Test-only: issue 20's experiment (`index::tests::front`) measured it
    /// 1.4-25x slower than the indexer's per-key edits, so it is not used.
    #[cfg(test)]
    pub fn merge_sorted(&mut self, ops: &[(&[u8], Option<Meta>)]) -> usize {
        debug_assert!(ops.windows(2).all(|w| w[0].0 < w[1].0), "unsorted run");
        if ops.is_empty() {
            return 0;
        }
        let mut st = MergeStats::default();
        let mut scratch = Merged::default();
        let out = match &self.root {
            Some(root) => merge_node(root, ops, &mut st, &mut scratch),
            None => {
                let (changed, delta) = Leaf::default().merge(ops, &mut scratch);
                st.changed = changed;
                st.delta = delta;
                Outcome::Replace(leaves_of(&scratch, &mut st))
            }
        };
        let Outcome::Replace(mut items) = out else {
            return 0;
        };
        while items.len() > 1 {
            items = branches_of(items, &mut st);
        }
        self.root = items.pop().map(|(_, n)| n);
        while let Some(Node::Branch(b)) = self.root.as_deref() {
            if b.children.len() != 1 {
                break;
            }
            let only = b.children[0].clone();
            st.bytes -= self.root.as_deref().map_or(0, bytes) as isize;
            self.root = Some(only);
        }
        self.len = self.len.saturating_add_signed(st.delta);
        self.live_bytes = self.live_bytes.saturating_add_signed(st.bytes);
        self.touched = Touched {
            lost: true,
            ..Touched::default()
        };
        st.changed
    }

    /// Removes `key`'s entry (a tombstone too); returns its metadata if
    /// it was a key. A missing key copies no node.
    pub fn remove(&mut self, key: &[u8]) -> Option<Meta> {
        self.get_entry(key)?;
        self.remove_present(key).and_then(Entry::alive)
    }

    /// Removes the entry of a key the caller knows is present (no
    /// read-only descent first; a missing key would copy its path);
    /// returns it.
    pub fn remove_present(&mut self, key: &[u8]) -> Option<Entry> {
        self.remove_by(key, Route::Search)
    }

    /// [`remove_present`](Self::remove_present) where `at` says (see
    /// [`put_located`](Self::put_located)).
    pub fn remove_located(&mut self, key: &[u8], at: &Located) -> Option<Entry> {
        self.remove_by(key, Route::Known(at.path.as_slice(), at.probe.as_ref()))
    }

    fn remove_by(&mut self, key: &[u8], route: Route<'_>) -> Option<Entry> {
        let mut e = Edit::default();
        let root = self.root.as_mut()?;
        let removed = remove(root, key, &mut e, route);
        self.count(removed, None);
        // Collapse a root left with one child, or an empty root.
        while let Some(r) = self.root.as_deref() {
            match r {
                Node::Branch(b) if b.children.len() == 1 => {
                    e.bytes -= bytes(r) as isize;
                    e.reshape(0);
                    let only = b.children[0].clone();
                    self.root = Some(only);
                }
                n if n.is_empty() => {
                    e.bytes -= bytes(n) as isize;
                    e.reshape(0);
                    self.root = None;
                    break;
                }
                _ => break,
            }
        }
        self.touched = e.touched;
        self.live_bytes = self.live_bytes.saturating_add_signed(e.bytes);
        removed
    }

    /// Entries from `lower` on, in key order.
    pub fn range_from(&self, lower: Bound<&[u8]>) -> Iter<'_> {
        let mut it = Iter {
            stack: Vec::new(),
            leaf: None,
            off: 0,
            key: Vec::new(),
            skipped: None,
        };
        let Some(mut node) = self.root.as_deref() else {
            return it;
        };
        loop {
            match node {
                Node::Branch(b) => {
                    let i = match lower {
                        Bound::Unbounded => 0,
                        Bound::Included(k) | Bound::Excluded(k) => b.child_for(&KeyProbe::new(k)),
                    };
                    it.stack.push((b, i));
                    node = &b.children[i];
                }
                Node::Leaf(l) => {
                    it.leaf = Some(l);
                    it.off = match lower {
                        Bound::Unbounded => 0,
                        Bound::Included(k) => l.seek(k, true, &mut it.key),
                        Bound::Excluded(k) => l.seek(k, false, &mut it.key),
                    };
                    return it;
                }
            }
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range_from(Bound::Unbounded)
    }

    /// Every entry, in order (tests).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<(Vec<u8>, Meta)> {
        let mut out = Vec::with_capacity(self.len);
        let mut it = self.iter();
        while let Some((k, m)) = it.next_entry() {
            out.push((k.to_vec(), m));
        }
        out
    }

    /// Checks the tree's invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        fn walk(
            n: &Node,
            lo: Option<&[u8]>,
            hi: Option<&[u8]>,
            depth: usize,
            leaves: &mut Vec<usize>,
            bytes_seen: &mut usize,
            kept: &mut [usize; 2],
        ) -> usize {
            *bytes_seen += bytes(n);
            match n {
                Node::Leaf(l) => {
                    assert!(!l.is_empty(), "empty leaf");
                    let e = l.entries();
                    let stamped = e.iter().filter(|(_, x)| !x.stamp.is_none()).count();
                    assert_eq!(l.stamped(), stamped, "leaf's stamp count");
                    kept[0] += e.iter().filter(|(_, x)| x.is_dead()).count();
                    kept[1] += stamped;
                    assert!(e.windows(2).all(|w| w[0].0 < w[1].0), "leaf out of order");
                    assert!(
                        lo.is_none_or(|lo| &e[0].0[..] >= lo),
                        "leaf below its separator"
                    );
                    assert!(
                        hi.is_none_or(|hi| &e[e.len() - 1].0[..] < hi),
                        "leaf above its separator"
                    );
                    assert!(
                        l.len() == 1 || l.encoded_len() <= 2 * LEAF_MAX,
                        "oversized leaf"
                    );
                    leaves.push(depth);
                    e.len()
                }
                Node::Branch(b) => {
                    assert!(!b.children.is_empty(), "empty branch");
                    assert_eq!(b.keys.len() + 1, b.children.len());
                    assert!(b.keys.windows(2).all(|w| w[0] < w[1]));
                    let mut total = 0;
                    for (i, c) in b.children.iter().enumerate() {
                        let l = if i == 0 {
                            lo
                        } else {
                            Some(b.keys[i - 1].as_bytes())
                        };
                        let h = if i == b.keys.len() {
                            hi
                        } else {
                            Some(b.keys[i].as_bytes())
                        };
                        total += walk(c, l, h, depth + 1, leaves, bytes_seen, kept);
                    }
                    total
                }
            }
        }
        let mut leaves = Vec::new();
        let mut seen = 0;
        let mut kept = [0, 0];
        let n = self.root.as_deref().map_or(0, |r| {
            walk(r, None, None, 0, &mut leaves, &mut seen, &mut kept)
        });
        assert_eq!(n, self.len + self.dead, "entries");
        assert_eq!(kept, [self.dead, self.stamped], "tombstones and stamps");
        assert_eq!(seen, self.live_bytes, "live bytes");
        assert!(
            leaves.windows(2).all(|w| w[0] == w[1]),
            "leaves at different depths"
        );
        if let Some(Node::Branch(b)) = self.root.as_deref() {
            assert!(b.children.len() >= 2, "root branch with one child");
        }
    }

    /// A copy sharing no node with `self` (speed tests: a map no
    /// snapshot shares, without building it again).
    #[cfg(test)]
    pub fn deep_clone(&self) -> KeyMap {
        fn copy(n: &Arc<Node>) -> Arc<Node> {
            match &**n {
                Node::Leaf(l) => new_node(Node::Leaf(l.clone())),
                Node::Branch(b) => new_node(Node::Branch(Box::new(Branch {
                    keys: b.keys.clone(),
                    children: b.children.iter().map(copy).collect(),
                }))),
            }
        }
        KeyMap {
            root: self.root.as_ref().map(copy),
            len: self.len,
            live_bytes: self.live_bytes,
            touched: Touched::default(),
            dead: self.dead,
            stamped: self.stamped,
        }
    }

    /// Branch levels above the leaves (tests).
    #[cfg(test)]
    pub fn height(&self) -> usize {
        let mut height = 0;
        let mut n = self.root.as_deref();
        while let Some(Node::Branch(b)) = n {
            height += 1;
            n = b.children.first().map(|c| &**c);
        }
        height
    }

    /// Leaves and their mean encoded size (tests and benchmarks).
    #[cfg(test)]
    pub fn leaf_stats(&self) -> (usize, f64) {
        fn count(n: &Node, leaves: &mut usize, bytes: &mut usize) {
            match n {
                Node::Leaf(l) => {
                    *leaves += 1;
                    *bytes += l.encoded_len();
                }
                Node::Branch(b) => b.children.iter().for_each(|c| count(c, leaves, bytes)),
            }
        }
        let (mut leaves, mut bytes) = (0, 0);
        if let Some(r) = self.root.as_deref() {
            count(r, &mut leaves, &mut bytes);
        }
        (leaves, bytes as f64 / leaves.max(1) as f64)
    }
}

fn insert(
    node: &mut Arc<Node>,
    key: &[u8],
    meta: Entry,
    e: &mut Edit,
    route: Route<'_>,
) -> (Option<Entry>, Split) {
    let before = bytes(node) as isize;
    let out = match Arc::make_mut(node) {
        Node::Leaf(l) => {
            let p = route.probe(l, key);
            if p.found {
                let old = l.entry_at(&p);
                l.set_entry(&p, meta);
                (Some(old), None)
            } else {
                // Past the end of a full leaf: an ascending stream, whose
                // later keys all land further right. Split off the new key
                // alone and leave this leaf full.
                let at_end = l.at_end(&p);
                l.insert_at(&p, key, meta);
                if l.encoded_len() > LEAF_MAX && l.len() >= 2 {
                    let at = if at_end { l.len() - 1 } else { l.middle() };
                    let (right, last_left) = l.split_off(at);
                    let sep = separator(&last_left, right.first_key());
                    let right = new_node(Node::Leaf(right));
                    e.bytes += bytes(&right) as isize;
                    (None, Some((sep, right)))
                } else {
                    (None, None)
                }
            }
        }
        Node::Branch(b) => {
            let level = e.level();
            let (ci, below) = route.child(b, key);
            e.descend(ci);
            let (old, split) = insert(&mut b.children[ci], key, meta, e, below);
            let Some((sep, child)) = split else {
                return (old, None);
            };
            // This branch's children change (and its parent's, if it
            // splits: marked there).
            e.reshape(level);
            if b.children.len() < BRANCH_CAP {
                b.keys.insert(ci, sep);
                b.children.insert(ci + 1, child);
                (old, None)
            } else {
                // Full branch: split right before the new child if it is
                // the last (an ascending stream), else in the middle.
                let at = if ci + 1 == BRANCH_CAP {
                    BRANCH_CAP
                } else {
                    BRANCH_CAP / 2
                };
                let right = if at == BRANCH_CAP {
                    let mut right = Branch {
                        keys: ArrayVec::new(),
                        children: ArrayVec::new(),
                    };
                    right.children.push(child);
                    (sep, right)
                } else {
                    let (up, mut right) = split_branch(b, at);
                    if ci < at {
                        b.keys.insert(ci, sep);
                        b.children.insert(ci + 1, child);
                    } else {
                        right.keys.insert(ci - at, sep);
                        right.children.insert(ci - at + 1, child);
                    }
                    (up, right)
                };
                let node = new_node(Node::Branch(Box::new(right.1)));
                e.bytes += bytes(&node) as isize;
                (old, Some((right.0, node)))
            }
        }
    };
    e.bytes += bytes(node) as isize - before;
    out
}

/// Moves `children[at..]` into a new branch; returns the separator that goes
/// up and the new branch. `at` is in `1..BRANCH_CAP`.
fn split_branch(b: &mut Branch, at: usize) -> (Key, Branch) {
    let children: ArrayVec<Arc<Node>, BRANCH_CAP> = b.children.drain(at..).collect();
    let mut keys: ArrayVec<Key, { BRANCH_CAP - 1 }> = b.keys.drain(at - 1..).collect();
    let up = keys.remove(0);
    (up, Branch { keys, children })
}

fn remove(node: &mut Arc<Node>, key: &[u8], e: &mut Edit, route: Route<'_>) -> Option<Entry> {
    let before = bytes(node) as isize;
    let out = match Arc::make_mut(node) {
        Node::Leaf(l) => {
            let p = route.probe(l, key);
            p.found.then(|| l.remove_at(&p))
        }
        Node::Branch(b) => {
            let level = e.level();
            let (ci, below) = route.child(b, key);
            e.descend(ci);
            let removed = remove(&mut b.children[ci], key, e, below);
            if b.children[ci].is_empty() {
                // An empty child goes with a separator, if it has one (a
                // branch may have a single child after an ascending split;
                // emptied, it is removed by its own parent in turn).
                let gone = b.children.remove(ci);
                e.bytes -= bytes(&gone) as isize;
                e.reshape(level);
                if !b.keys.is_empty() {
                    b.keys.remove(ci.saturating_sub(1));
                }
            } else if b.children[ci].underfull() {
                // Merge with the left neighbour, else the right one.
                let merged = ci > 0 && merge_if_fits(b, ci - 1, e);
                let merged = merged || (ci + 1 < b.children.len() && merge_if_fits(b, ci, e));
                if merged {
                    e.reshape(level);
                }
            }
            removed
        }
    };
    e.bytes += bytes(node) as isize - before;
    out
}

/// Merges `children[i + 1]` into `children[i]` if their entries fit in one
/// node; returns whether it did.
fn merge_if_fits(b: &mut Branch, i: usize, e: &mut Edit) -> bool {
    let (l, r) = (&b.children[i], &b.children[i + 1]);
    let fits = match (&**l, &**r) {
        (Node::Leaf(x), Node::Leaf(y)) => x.encoded_len() + y.encoded_len() <= LEAF_MAX,
        (Node::Branch(x), Node::Branch(y)) => x.children.len() + y.children.len() <= BRANCH_CAP,
        _ => false,
    };
    if !fits {
        return false;
    }
    let right = b.children.remove(i + 1);
    let sep = b.keys.remove(i);
    e.bytes -= bytes(&right) as isize;
    let before = bytes(&b.children[i]) as isize;
    match (Arc::make_mut(&mut b.children[i]), &*right) {
        (Node::Leaf(x), Node::Leaf(y)) => x.append(y),
        (Node::Branch(x), Node::Branch(y)) => {
            x.keys.push(sep);
            x.keys.extend(y.keys.iter().cloned());
            x.children.extend(y.children.iter().cloned());
        }
        _ => {}
    }
    e.bytes += bytes(&b.children[i]) as isize - before;
    true
}

#[cfg(test)]
/// What a bulk merge ([`KeyMap::merge_sorted`]) made of a node: nothing
/// changed, or the nodes of the same height that replace it (none if it
/// emptied), each with the separator before it (the first one's unused).
enum Outcome {
    Same,
    Replace(Vec<(Option<Key>, Arc<Node>)>),
}

#[cfg(test)]
/// Counts of a bulk merge.
#[derive(Default)]
struct MergeStats {
    changed: usize,
    /// Entries inserted minus entries removed.
    delta: isize,
    /// Change of the bytes reachable from the root.
    bytes: isize,
}

#[cfg(test)]
/// New leaves holding `m`'s entries, with their separators.
fn leaves_of(m: &Merged, st: &mut MergeStats) -> Vec<(Option<Key>, Arc<Node>)> {
    let mut out = Vec::new();
    m.into_leaves(|leaf, prev_last| {
        let sep = (!out.is_empty()).then(|| separator(prev_last, leaf.first_key()));
        let node = new_node(Node::Leaf(leaf));
        st.bytes += bytes(&node) as isize;
        out.push((sep, node));
    });
    out
}

#[cfg(test)]
/// Whether two neighbours fit in one node.
fn fit_together(l: &Node, r: &Node) -> bool {
    match (l, r) {
        (Node::Leaf(x), Node::Leaf(y)) => x.encoded_len() + y.encoded_len() <= LEAF_MAX,
        (Node::Branch(x), Node::Branch(y)) => x.children.len() + y.children.len() <= BRANCH_CAP,
        _ => false,
    }
}

#[cfg(test)]
/// Groups `items` (nodes of one height, with the separators before them)
/// into branches of at most [`BRANCH_CAP`] children, as few as hold them,
/// of even sizes.
fn branches_of(
    mut items: Vec<(Option<Key>, Arc<Node>)>,
    st: &mut MergeStats,
) -> Vec<(Option<Key>, Arc<Node>)> {
    let n = items.len();
    let pieces = n.div_ceil(BRANCH_CAP).max(1);
    let mut out = Vec::with_capacity(pieces);
    let mut rest = items.drain(..);
    for p in 0..pieces {
        let take = n * (p + 1) / pieces - n * p / pieces;
        let mut b = Branch {
            keys: ArrayVec::new(),
            children: ArrayVec::new(),
        };
        let mut up = None;
        for (j, (sep, child)) in rest.by_ref().take(take).enumerate() {
            if j == 0 {
                up = sep;
            } else if let Some(sep) = sep {
                b.keys.push(sep);
            }
            b.children.push(child);
        }
        let node = new_node(Node::Branch(Box::new(b)));
        st.bytes += bytes(&node) as isize;
        out.push((up, node));
    }
    out
}

#[cfg(test)]
/// Merges `ops` (sorted, distinct keys, all within `node`'s key range)
/// into `node`, building new nodes for those that change and sharing the
/// rest; `node` itself is left as it is (a snapshot may hold it).
fn merge_node(
    node: &Arc<Node>,
    ops: &[(&[u8], Option<Meta>)],
    st: &mut MergeStats,
    scratch: &mut Merged,
) -> Outcome {
    match &**node {
        Node::Leaf(l) => {
            let (changed, delta) = l.merge(ops, scratch);
            if changed == 0 {
                return Outcome::Same;
            }
            st.changed += changed;
            st.delta += delta;
            st.bytes -= bytes(node) as isize;
            Outcome::Replace(leaves_of(scratch, st))
        }
        Node::Branch(b) => {
            let sep_before = |ci: usize| ci.checked_sub(1).map(|i| b.keys[i].clone());
            let mut items: Vec<(Option<Key>, Arc<Node>)> = Vec::new();
            // Children before this one are in `items` (or were replaced).
            let mut copied = 0;
            let mut any = false;
            let mut rest = ops;
            while let Some((first, _)) = rest.first() {
                let ci = b.child_for(&KeyProbe::new(first));
                let end = match b.keys.get(ci) {
                    Some(sep) => rest.partition_point(|(k, _)| !sep.le(&KeyProbe::new(k))),
                    None => rest.len(),
                };
                let (mine, later) = rest.split_at(end.max(1));
                rest = later;
                if let Outcome::Replace(new) = merge_node(&b.children[ci], mine, st, scratch) {
                    if !any {
                        items.reserve(b.children.len() + new.len());
                        any = true;
                    }
                    items.extend((copied..ci).map(|i| (sep_before(i), b.children[i].clone())));
                    // The first piece keeps the old separator (its keys are
                    // still at or past it); a child that emptied takes its
                    // separator with it.
                    items.extend(
                        new.into_iter()
                            .enumerate()
                            .map(|(j, (sep, n))| (if j == 0 { sep_before(ci) } else { sep }, n)),
                    );
                    copied = ci + 1;
                }
            }
            if !any {
                return Outcome::Same;
            }
            items
                .extend((copied..b.children.len()).map(|i| (sep_before(i), b.children[i].clone())));
            st.bytes -= bytes(node) as isize;
            if let Some(first) = items.first_mut() {
                first.0 = None;
            }
            rebalance(&mut items, st);
            if items.is_empty() {
                return Outcome::Replace(items);
            }
            Outcome::Replace(branches_of(items, st))
        }
    }
}

#[cfg(test)]
/// Merges neighbours of which one is under its minimum, where they fit in
/// one node (as removals do).
fn rebalance(items: &mut Vec<(Option<Key>, Arc<Node>)>, st: &mut MergeStats) {
    let mut i = 0;
    while i + 1 < items.len() {
        let (l, r) = (&items[i].1, &items[i + 1].1);
        if !((l.underfull() || r.underfull()) && fit_together(l, r)) {
            i += 1;
            continue;
        }
        let (sep, right) = items.remove(i + 1);
        st.bytes -= bytes(&right) as isize;
        let before = bytes(&items[i].1) as isize;
        match (Arc::make_mut(&mut items[i].1), &*right) {
            (Node::Leaf(x), Node::Leaf(y)) => x.append(y),
            (Node::Branch(x), Node::Branch(y)) => {
                x.keys.extend(sep);
                x.keys.extend(y.keys.iter().cloned());
                x.children.extend(y.children.iter().cloned());
            }
            _ => {}
        }
        st.bytes += bytes(&items[i].1) as isize - before;
    }
}

/// In-order reader over a range of a [`KeyMap`]. Keys are decoded into a
/// buffer the reader owns, so it lends each one until the next call
/// ([`next_entry`](Self::next_entry)) instead of implementing `Iterator`.
pub struct Iter<'a> {
    /// Branches above the current leaf and the child index taken in each.
    stack: Vec<(&'a Branch, usize)>,
    leaf: Option<&'a Leaf>,
    /// Offset of the next entry in `leaf`.
    off: usize,
    /// The last key read (the next entry is coded against it).
    key: Vec<u8>,
    /// A leaf [`next_stamped`](Iter::next_stamped) passed whole since the
    /// last entry decoded.
    skipped: Option<&'a Leaf>,
}

impl Iter<'_> {
    /// The key of the entry last returned (empty before the first).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The next key (tombstones skipped): its key (valid until the next
    /// call) and metadata.
    #[inline]
    pub fn next_entry(&mut self) -> Option<(&[u8], Meta)> {
        loop {
            let e = self.next_raw()?.1;
            if !e.is_dead() {
                return Some((&self.key, e.meta));
            }
        }
    }

    /// The next entry, tombstones included.
    pub fn next_raw(&mut self) -> Option<(&[u8], Entry)> {
        loop {
            if let Some(e) = self.step() {
                return Some((&self.key, e));
            }
            self.next_leaf()?;
        }
    }

    /// The next entry with a stamp, examining at most `budget` entries
    /// (`None` when the budget runs out first, or at the end: see
    /// [`at_end`](Self::at_end) and [`position`](Self::position)). A leaf
    /// with no stamp is passed whole without being decoded, for one unit
    /// of the budget.
    pub fn next_stamped(&mut self, budget: &mut usize) -> Option<(&[u8], Entry)> {
        while *budget > 0 {
            *budget -= 1;
            let leaf = self.leaf?;
            if self.off == 0 && leaf.stamped() == 0 {
                self.skipped = Some(leaf);
                self.next_leaf();
                continue;
            }
            match self.step() {
                Some(e) if !e.stamp.is_none() => return Some((&self.key, e)),
                Some(_) => {}
                None => {
                    self.next_leaf();
                }
            }
        }
        None
    }

    /// Whether the reader has passed the last entry of its map.
    pub fn at_end(&self) -> bool {
        self.leaf.is_none()
    }

    /// The last key examined (decoded if [`next_stamped`](Self::next_stamped)
    /// passed its leaf whole): a later reader resumes after it.
    pub fn position(&self) -> Vec<u8> {
        match self.skipped {
            Some(l) => l.last_key(),
            None => self.key.clone(),
        }
    }

    /// Decodes the next entry of the current leaf.
    #[inline]
    fn step(&mut self) -> Option<Entry> {
        let (next, e) = self.leaf?.read(self.off, &mut self.key)?;
        self.off = next;
        self.skipped = None;
        Some(e)
    }

    /// Moves to the first entry of the next leaf; `None` at the map's end.
    fn next_leaf(&mut self) -> Option<()> {
        // Climb to the first branch with a child to the right, then
        // descend to that child's leftmost leaf.
        let mut node = loop {
            let Some((b, i)) = self.stack.last_mut() else {
                self.leaf = None;
                return None;
            };
            if *i + 1 < b.children.len() {
                *i += 1;
                break &*b.children[*i];
            }
            self.stack.pop();
        };
        loop {
            match node {
                Node::Branch(b) => {
                    self.stack.push((b, 0));
                    node = &b.children[0];
                }
                Node::Leaf(l) => {
                    self.leaf = Some(l);
                    self.off = 0;
                    return Some(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;
    use std::collections::BTreeMap;

    fn k(i: u32) -> Vec<u8> {
        format!("key:{i}").into_bytes()
    }

    /// A distinct value per `i` (as an expiry).
    fn m(i: u64) -> Meta {
        Meta::new(crate::index::meta::STRING, Some(i as i64))
    }

    fn none() -> Meta {
        Meta::new(crate::index::meta::STRING, None)
    }

    #[rstest]
    // Byte order ascending: key:000000000000, key:000000000001, ...
    #[case::ascending(|i: u32| format!("key:{i:012}"), false, 9.0)]
    #[case::descending(|i: u32| format!("key:{i:012}"), true, 9.0)]
    // DEBUG POPULATE's order: key:0, key:1, ..., key:10, ... (runs that
    // start in the middle of earlier keys).
    #[case::populate_order(|i: u32| format!("key:{i}"), false, 9.0)]
    fn compact_whatever_the_insert_order(
        #[case] name: fn(u32) -> String,
        #[case] rev: bool,
        #[case] max_bytes_per_key: f64,
    ) {
        let mut t = KeyMap::new();
        let n = 50_000u32;
        for j in 0..n {
            let i = if rev { n - 1 - j } else { j };
            t.insert(name(i).as_bytes(), none());
        }
        t.check();
        assert_eq!(t.len(), n as usize);
        let per_key = t.live_bytes() as f64 / n as f64;
        let (leaves, mean) = t.leaf_stats();
        eprintln!("{per_key:.2} B/key, {leaves} leaves of {mean:.0} B");
        assert!(per_key <= max_bytes_per_key, "{per_key:.2} B/key");
    }

    /// The process-wide node-byte counter (what `snapshot_retained_bytes` is
    /// computed from) rises by a tree's bytes while it lives and falls back
    /// when it is dropped. Other tests of this process allocate and free
    /// trees at the same time, so one attempt can be disturbed: the counter
    /// must show it in one of several attempts (a counter that does not count
    /// fails every one).
    #[test]
    fn the_node_byte_counter_follows_a_tree() {
        let attempts = 20;
        let ok = (0..attempts).any(|_| {
            let before = node_bytes();
            let mut t = KeyMap::new();
            for i in 0..20_000u32 {
                t.insert(format!("key:{i:012}").as_bytes(), none());
            }
            let live = t.live_bytes();
            let with = node_bytes();
            drop(t);
            let after = node_bytes();
            with >= before + live / 2 && with >= after + live / 2 && live > 0
        });
        assert!(
            ok,
            "the counter never followed a tree in {attempts} attempts"
        );
    }

    #[test]
    fn random_36_byte_keys_cost_little_more_than_their_bytes() {
        let mut rng = 12345u64;
        let mut t = KeyMap::new();
        let n = 50_000;
        for _ in 0..n {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = format!("{:016x}-{:019x}", rng, rng.rotate_left(17) >> 12);
            assert_eq!(key.len(), 36);
            t.insert(key.as_bytes(), none());
        }
        t.check();
        let per_key = t.live_bytes() as f64 / n as f64;
        eprintln!("{per_key:.2} B/key");
        assert!(per_key <= 36.0 + 12.0, "{per_key:.2} B/key");
    }

    #[test]
    fn snapshots_never_change() {
        let mut t = KeyMap::new();
        for i in 0..5_000 {
            t.insert(&k(i), m(i as u64));
        }
        let snap = t.clone();
        for i in 0..5_000 {
            if i % 3 == 0 {
                t.remove(&k(i));
            } else {
                t.insert(&k(i), m(7));
            }
        }
        for i in 5_000..6_000 {
            t.insert(&k(i), m(1));
        }
        t.check();
        snap.check();
        assert_eq!(snap.len(), 5_000);
        assert!(snap.to_vec().iter().all(|(key, meta)| {
            let i: u64 = std::str::from_utf8(&key[4..]).unwrap().parse().unwrap();
            *meta == m(i)
        }));
    }

    #[test]
    fn an_unchanged_write_copies_nothing() {
        let mut t = KeyMap::new();
        for i in 0..5_000 {
            t.insert(&k(i), none());
        }
        let snap = t.clone();
        for i in 0..5_000 {
            assert_eq!(t.insert(&k(i), none()), Some(none()));
        }
        let (Some(a), Some(b)) = (&t.root, &snap.root) else {
            panic!("no root")
        };
        assert!(Arc::ptr_eq(a, b), "the root was copied");
        t.insert(&k(1), m(1));
        let (Some(a), Some(b)) = (&t.root, &snap.root) else {
            panic!("no root")
        };
        assert!(!Arc::ptr_eq(a, b), "a change copies the path");
    }

    #[test]
    fn removing_everything_empties_the_tree() {
        let mut t = KeyMap::new();
        for i in 0..10_000 {
            t.insert(&k(i), m(0));
        }
        assert_eq!(t.remove(&k(10_001)), None);
        for i in (0..10_000).step_by(2).chain((1..10_000).step_by(2)) {
            assert!(t.remove(&k(i)).is_some(), "{i}");
            if i % 997 == 0 {
                t.check();
            }
        }
        t.check();
        assert!(t.is_empty());
        assert!(t.root.is_none());
        assert_eq!(t.live_bytes(), 0);
        assert!(t.iter().next_entry().is_none());
    }

    /// Enough keys for full branches, in ascending order, which makes
    /// single-child branches at every split.
    fn ascending(n: u32) -> (KeyMap, Vec<Vec<u8>>) {
        let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i:08}").into_bytes()).collect();
        let mut t = KeyMap::new();
        for k in &keys {
            t.insert(k, m(0));
        }
        t.check();
        (t, keys)
    }

    #[rstest]
    #[case::ascending(300_000, "ascending")]
    #[case::descending(300_000, "descending")]
    #[case::second_branch(300_000, "second_branch")]
    #[case::strided(300_000, "strided")]
    fn removals_from_large_trees(#[case] n: u32, #[case] how: &str) {
        let (mut t, keys) = ascending(n);
        let snap = t.clone();
        let order: Vec<&Vec<u8>> = match how {
            "ascending" => keys.iter().collect(),
            "descending" => keys.iter().rev().collect(),
            "second_branch" => keys[100_000..200_000].iter().collect(),
            _ => keys
                .iter()
                .step_by(3)
                .chain(keys.iter().skip(1).step_by(3))
                .collect(),
        };
        for (j, k) in order.iter().enumerate() {
            assert!(t.remove(k).is_some(), "{how}: remove #{j}");
            if j % 30_011 == 0 {
                t.check();
            }
        }
        t.check();
        assert_eq!(t.len(), keys.len() - order.len());
        assert_eq!(t.to_vec().len(), t.len());
        // The same keys can be inserted again.
        for k in &order {
            t.insert(k, m(1));
        }
        t.check();
        assert_eq!(t.len(), keys.len());
        snap.check();
        assert_eq!(snap.len(), keys.len());
    }

    /// Keys of tens of KB (a leaf past 64 KiB cannot keep restart points
    /// past its u16 offsets): the tree splits any leaf with two or more
    /// such keys, so lookups, updates and removals stay exact.
    #[test]
    fn huge_keys_behave_like_small_ones() {
        let mut t = KeyMap::new();
        let mut model = BTreeMap::new();
        let mut x: u64 = 7;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..600u64 {
            let r = next();
            let len = [1, 30, 5_000, 40_000, 70_000, 130_000][(r % 6) as usize];
            let mut key = vec![b'k'; len];
            // Neighbours share long prefixes: the differing bytes are at the end.
            key.extend_from_slice(&(r % 97).to_be_bytes());
            match i % 5 {
                0 => {
                    assert_eq!(t.remove(&key), model.remove(&key));
                }
                _ => {
                    let meta = m(r % 3);
                    assert_eq!(t.insert(&key, meta), model.insert(key.clone(), meta));
                }
            }
            assert_eq!(t.get(&key), model.get(&key).copied());
        }
        t.check();
        let want: Vec<(Vec<u8>, Meta)> = model.into_iter().collect();
        assert_eq!(t.to_vec(), want);
    }

    #[test]
    fn few_keys_left_after_descending_removals_share_leaves() {
        let (mut t, keys) = ascending(20_000);
        for k in keys[50..].iter().rev() {
            t.remove(k);
        }
        t.check();
        let (leaves, _) = t.leaf_stats();
        assert!(leaves <= 2, "50 keys over {leaves} leaves");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u8),
        Remove(u16),
        Snapshot,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u16..3000, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0u16..3000).prop_map(|k| Op::Insert(k, 0)),
            3 => (0u16..3000).prop_map(Op::Remove),
            1 => Just(Op::Snapshot),
        ]
    }

    fn key16(i: u16) -> Vec<u8> {
        // Mixed lengths, some long, some prefixes of others.
        let mut v = format!("{i:05}").into_bytes();
        if i.is_multiple_of(7) {
            v.extend_from_slice(&[b'x'; 30]);
        }
        if i.is_multiple_of(11) {
            v.truncate(3);
        }
        v
    }

    /// Runs of truths (sorted, one per key) merged in bulk.
    fn run_op() -> impl Strategy<Value = Vec<(u16, Option<u8>)>> {
        proptest::collection::vec(
            (0u16..3000, proptest::option::weighted(0.6, any::<u8>())),
            0..1500,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Bulk merges, one-by-one writes and snapshots, against a model:
        /// the map, and every snapshot, hold what the model does, and the
        /// tree keeps its invariants (sizes, separators, byte counts).
        #[test]
        fn bulk_merges_behave_like_btreemap(
            runs in proptest::collection::vec((run_op(), any::<bool>(), 0u8..4), 1..12),
        ) {
            let mut t = KeyMap::new();
            let mut model: BTreeMap<Vec<u8>, Meta> = BTreeMap::new();
            let mut snaps: Vec<(KeyMap, BTreeMap<Vec<u8>, Meta>)> = Vec::new();
            for (run, bulk, snap) in runs {
                if snap == 0 {
                    snaps.push((t.clone(), model.clone()));
                }
                // The last truth of each key wins (as the indexer dedups).
                let mut last: BTreeMap<Vec<u8>, Option<Meta>> = BTreeMap::new();
                for (k, v) in &run {
                    last.insert(key16(*k), v.map(|v| m(v as u64)));
                }
                let mut want_changed = 0;
                for (k, v) in &last {
                    let old = match v {
                        Some(v) => model.insert(k.clone(), *v),
                        None => model.remove(k),
                    };
                    want_changed += usize::from(old != *v);
                }
                if bulk {
                    let ops: Vec<(&[u8], Option<Meta>)> =
                        last.iter().map(|(k, v)| (&k[..], *v)).collect();
                    prop_assert_eq!(t.merge_sorted(&ops), want_changed);
                } else {
                    for (k, v) in &last {
                        match v {
                            Some(v) => t.insert(k, *v),
                            None => t.remove(k),
                        };
                    }
                }
                t.check();
                let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(t.to_vec(), want);
            }
            for (snap, model) in &snaps {
                snap.check();
                let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(snap.to_vec(), want);
            }
        }
    }

    /// A bulk merge into a large tree: growing it from nothing, then runs
    /// that touch many leaves, some removing whole ranges.
    #[test]
    fn bulk_merges_of_large_runs() {
        let keys: Vec<Vec<u8>> = (0..200_000u32)
            .map(|i| format!("k{i:08}").into_bytes())
            .collect();
        let mut t = KeyMap::new();
        let ops: Vec<(&[u8], Option<Meta>)> = keys
            .iter()
            .step_by(2)
            .map(|k| (&k[..], Some(m(1))))
            .collect();
        assert_eq!(t.merge_sorted(&ops), 100_000);
        t.check();
        let snap = t.clone();
        let ops: Vec<(&[u8], Option<Meta>)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                (
                    &k[..],
                    (i % 3 != 0 && !(50_000..150_000).contains(&i)).then(|| m(2)),
                )
            })
            .collect();
        t.merge_sorted(&ops);
        t.check();
        let want: Vec<Vec<u8>> = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0 && !(50_000..150_000).contains(i))
            .map(|(_, k)| k.clone())
            .collect();
        assert_eq!(
            t.to_vec().into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            want
        );
        snap.check();
        assert_eq!(snap.len(), 100_000);
        let all: Vec<(&[u8], Option<Meta>)> = keys.iter().map(|k| (&k[..], None)).collect();
        t.merge_sorted(&all);
        t.check();
        assert!(t.is_empty() && t.root.is_none());
        assert_eq!(t.live_bytes(), 0);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn behaves_like_btreemap(ops in proptest::collection::vec(op(), 1..6000), seek in 0u16..3100) {
            let mut t = KeyMap::new();
            let mut model: BTreeMap<Vec<u8>, Meta> = BTreeMap::new();
            let mut snaps: Vec<(KeyMap, BTreeMap<Vec<u8>, Meta>)> = Vec::new();
            for (n, o) in ops.iter().enumerate() {
                match *o {
                    Op::Insert(i, v) => {
                        let key = key16(i);
                        let old = model.insert(key.clone(), m(v as u64));
                        prop_assert_eq!(t.insert(&key, m(v as u64)), old);
                    }
                    Op::Remove(i) => {
                        let key = key16(i);
                        let old = model.remove(&key);
                        prop_assert_eq!(t.remove(&key), old);
                    }
                    Op::Snapshot => {
                        if snaps.len() < 4 {
                            snaps.push((t.clone(), model.clone()));
                        }
                    }
                }
                if n % 500 == 0 {
                    t.check();
                }
            }
            t.check();
            let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(t.to_vec(), want);
            let s = key16(seek);
            for (lower, range) in [
                (Bound::Included(&s[..]), model.range::<[u8], _>((Bound::Included(&s[..]), Bound::Unbounded))),
                (Bound::Excluded(&s[..]), model.range::<[u8], _>((Bound::Excluded(&s[..]), Bound::Unbounded))),
            ] {
                let mut it = t.range_from(lower);
                let mut got = Vec::new();
                while let Some((k, _)) = it.next_entry() {
                    got.push(k.to_vec());
                }
                let want: Vec<Vec<u8>> = range.map(|(k, _)| k.clone()).collect();
                prop_assert_eq!(got, want);
            }
            for (snap, model) in &snaps {
                snap.check();
                let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(snap.to_vec(), want);
            }
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    use crate::index::thread_cpu_ns as cpu_ns;

    /// `cargo test --release --lib speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn lookups() {
        let n: u64 = std::env::var("SPEED_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        for shape in ["seq", "uuid"] {
            let key = |i: u64| -> Vec<u8> {
                if shape == "seq" {
                    format!("key:{i:012}").into_bytes()
                } else {
                    let h = i.wrapping_mul(0x9E3779B97F4A7C15);
                    format!("{:016x}-{:019x}", h, h.rotate_left(17) >> 12).into_bytes()
                }
            };
            let mut t = KeyMap::new();
            let meta = Meta::new(0, None);
            let t0 = cpu_ns();
            for i in 0..n {
                t.insert(&key(i), meta);
            }
            let ins = cpu_ns() - t0;
            let keys: Vec<Vec<u8>> = (0..n / 5)
                .map(|i| key(i.wrapping_mul(2654435761) % n))
                .collect();
            let t0 = cpu_ns();
            let mut hit = 0;
            for k in &keys {
                hit += t.get(k).is_some() as usize;
            }
            let el = cpu_ns() - t0;
            eprintln!(
                "{shape}: insert {:.0} ns/key, get {:.0} ns, {:.1} B/key, hits {hit}",
                ins as f64 / n as f64,
                el as f64 / keys.len() as f64,
                t.live_bytes() as f64 / n as f64
            );
        }
    }
}
