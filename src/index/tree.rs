//! `KeyMap`: a persistent (copy-on-write) B+tree from [`Key`] to [`Meta`].
//!
//! Pure Rust, no server types. Nodes are reference counted: `clone()` copies
//! the root pointer only (an O(1) snapshot), and a write copies just the
//! nodes on its path that a snapshot still shares (`Arc::make_mut`). A map
//! nobody shares is updated in place.
//!
//! Shaped for the index's memory target (docs/PERFORMANCE.md, analysis 8):
//! - wide nodes, one allocation each: a leaf holds [`LEAF_CAP`] 32-byte
//!   (key, meta) slots and, with its reference counts, fits a 2 KiB
//!   allocator class exactly;
//! - an insert that follows the previous one in the same leaf (an ascending
//!   stream: a loader writing `key:1, key:2, ...`, or `DEBUG POPULATE`)
//!   splits a full node at the insertion point, since no later insert of the
//!   stream lands to its left, and before that split moves what the stream
//!   has passed into the left neighbour while it has room: the leaves a
//!   stream leaves behind are full instead of half full. Other inserts split
//!   in the middle;
//! - a node that falls under a quarter full after a removal is merged with a
//!   neighbour when both fit in one node.
//!
//! Locking: none; `&mut self` methods need exclusive access to this handle
//! only, never to other clones (snapshots) of the same tree.

use super::{Key, Meta};
use arrayvec::ArrayVec;
use std::ops::Bound;
use std::sync::Arc;

/// Entries per leaf: 62 × 32 bytes + the length word + the node tag + the
/// two reference counts = 2,024 bytes, inside a 2,048-byte allocation.
pub const LEAF_CAP: usize = 62;
/// Children per branch (a branch is no bigger than a leaf).
pub const BRANCH_CAP: usize = 62;
const LEAF_MIN: usize = LEAF_CAP / 4;
const BRANCH_MIN: usize = BRANCH_CAP / 4;

type Entries = ArrayVec<(Key, Meta), LEAF_CAP>;

enum Node {
    Leaf(Entries),
    Branch(Branch),
}

// ---- Node byte accounting (snapshot-memory cap; keep across rewrites) ----
// Every node counts its allocation in a process-wide total from creation
// (`counted`, or a copy-on-write `clone`) to `Drop`; each map counts the
// nodes reachable from its root, adjusted where a node joins or leaves its
// tree (a copy-on-write replaces a node: the count stays). Bytes held by
// old versions only = `all_node_bytes()` - sum of the live maps' `live_bytes()`.

/// Bytes of one node's allocation (the node and its two reference counts).
pub const NODE_BYTES: usize = std::mem::size_of::<Node>() + 2 * std::mem::size_of::<usize>();

static ALL_NODES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// Nodes that joined (+) or left (-) the tree being edited on this thread.
    static TREE_DELTA: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

/// Bytes of every live node of every version (live maps, snapshots, maps
/// waiting to be freed).
pub fn all_node_bytes() -> usize {
    ALL_NODES.load(std::sync::atomic::Ordering::Relaxed) * NODE_BYTES
}

fn tree_delta(n: isize) {
    TREE_DELTA.with(|d| d.set(d.get() + n));
}

fn take_tree_delta() -> isize {
    TREE_DELTA.with(|d| d.replace(0))
}

/// A new node that joins the tree being edited.
fn counted(n: Node) -> Arc<Node> {
    ALL_NODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tree_delta(1);
    Arc::new(n)
}

impl Clone for Node {
    /// A copy-on-write copy: a new allocation that replaces its original
    /// in the tree being edited.
    fn clone(&self) -> Self {
        ALL_NODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self {
            Node::Leaf(e) => Node::Leaf(e.clone()),
            Node::Branch(b) => Node::Branch(b.clone()),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        ALL_NODES.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl KeyMap {
    /// Bytes of the nodes reachable from this map's root (O(1)).
    pub fn live_bytes(&self) -> usize {
        self.nodes * NODE_BYTES
    }

    fn add_nodes(&mut self, delta: isize) {
        self.nodes = self.nodes.saturating_add_signed(delta);
    }
}
// ---- end of node byte accounting ----

/// `keys[i]` separates `children[i]` from `children[i + 1]`: every key of
/// `children[i]` is smaller, every key of `children[i + 1]` is not.
#[derive(Clone)]
struct Branch {
    keys: ArrayVec<Key, { BRANCH_CAP - 1 }>,
    children: ArrayVec<Arc<Node>, BRANCH_CAP>,
}

impl Branch {
    /// The child that holds (or would hold) `key`.
    fn child_for(&self, key: &Key) -> usize {
        self.keys.partition_point(|s| s <= key)
    }
}

impl Node {
    fn len(&self) -> usize {
        match self {
            Node::Leaf(e) => e.len(),
            Node::Branch(b) => b.children.len(),
        }
    }

    fn underfull(&self) -> bool {
        match self {
            Node::Leaf(e) => e.len() < LEAF_MIN,
            Node::Branch(b) => b.children.len() < BRANCH_MIN,
        }
    }
}

/// A node split in two by an insert: the separator, the new right node, and
/// whether the insert continued an ascending stream (the parent, if full
/// too, then splits the same way).
type Split = Option<(Key, Arc<Node>, bool)>;

/// Ordered map of one database's keys.
#[derive(Clone, Default)]
pub struct KeyMap {
    root: Option<Arc<Node>>,
    len: usize,
    /// The key most recently inserted: a greater one continues an ascending
    /// stream (see the module docs).
    last_insert: Option<Key>,
    /// Nodes reachable from `root` (see [`KeyMap::live_bytes`]).
    nodes: usize,
}

impl KeyMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, key: &Key) -> Option<&Meta> {
        let mut node = self.root.as_deref()?;
        loop {
            match node {
                Node::Branch(b) => node = &b.children[b.child_for(key)],
                Node::Leaf(e) => {
                    return e
                        .binary_search_by(|(k, _)| k.cmp(key))
                        .ok()
                        .map(|i| &e[i].1)
                }
            }
        }
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: Key, meta: Meta) -> Option<Meta> {
        let Some(root) = self.root.as_mut() else {
            let mut e = Entries::new();
            e.push((key.clone(), meta));
            self.root = Some(counted(Node::Leaf(e)));
            self.nodes = 1;
            take_tree_delta();
            self.len = 1;
            self.last_insert = Some(key);
            return None;
        };
        let hint = self.last_insert.take();
        take_tree_delta();
        let (old, split) = insert(root, key.clone(), meta, hint.as_ref());
        // The root split: a new root above its two halves.
        if let Some((sep, right, _)) = split {
            let mut b = Branch {
                keys: ArrayVec::new(),
                children: ArrayVec::new(),
            };
            b.keys.push(sep);
            b.children.extend(self.root.take());
            b.children.push(right);
            self.root = Some(counted(Node::Branch(b)));
        }
        let delta = take_tree_delta();
        self.add_nodes(delta);
        if old.is_none() {
            self.len += 1;
        }
        self.last_insert = Some(key);
        old
    }

    /// Removes `key`; returns the stored key and value if it was present.
    /// A missing key copies no node.
    pub fn remove(&mut self, key: &Key) -> Option<(Key, Meta)> {
        self.get(key)?;
        let root = self.root.as_mut()?;
        take_tree_delta();
        let removed = remove(root, key);
        if removed.is_some() {
            self.len -= 1;
        }
        // Collapse a root left with one child, or an empty root leaf.
        loop {
            match self.root.as_deref() {
                Some(Node::Branch(b)) if b.children.len() == 1 => {
                    let only = b.children[0].clone();
                    self.root = Some(only);
                    tree_delta(-1);
                }
                Some(Node::Leaf(e)) if e.is_empty() => {
                    self.root = None;
                    tree_delta(-1);
                    break;
                }
                Some(Node::Branch(b)) if b.children.is_empty() => {
                    self.root = None;
                    tree_delta(-1);
                    break;
                }
                _ => break,
            }
        }
        let delta = take_tree_delta();
        self.add_nodes(delta);
        removed
    }

    /// Entries from `lower` on, in key order.
    pub fn range_from(&self, lower: Bound<&Key>) -> Iter<'_> {
        let mut it = Iter {
            stack: Vec::new(),
            leaf: &[],
            pos: 0,
        };
        let Some(mut node) = self.root.as_deref() else {
            return it;
        };
        loop {
            match node {
                Node::Branch(b) => {
                    let i = match lower {
                        Bound::Unbounded => 0,
                        Bound::Included(k) | Bound::Excluded(k) => b.child_for(k),
                    };
                    it.stack.push((b, i));
                    node = &b.children[i];
                }
                Node::Leaf(e) => {
                    it.leaf = e.as_slice();
                    it.pos = match lower {
                        Bound::Unbounded => 0,
                        Bound::Included(k) => e.partition_point(|(x, _)| x < k),
                        Bound::Excluded(k) => e.partition_point(|(x, _)| x <= k),
                    };
                    return it;
                }
            }
        }
    }

    pub fn iter(&self) -> Iter<'_> {
        self.range_from(Bound::Unbounded)
    }

    pub fn values(&self) -> impl Iterator<Item = &Meta> {
        self.iter().map(|(_, m)| m)
    }

    /// Checks the tree's invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        fn walk(
            n: &Node,
            lo: Option<&Key>,
            hi: Option<&Key>,
            depth: usize,
            leaves: &mut Vec<usize>,
        ) -> usize {
            match n {
                Node::Leaf(e) => {
                    assert!(!e.is_empty(), "empty leaf");
                    assert!(e.windows(2).all(|w| w[0].0 < w[1].0), "leaf out of order");
                    assert!(
                        lo.is_none_or(|lo| &e[0].0 >= lo),
                        "leaf below its separator"
                    );
                    assert!(
                        hi.is_none_or(|hi| &e[e.len() - 1].0 < hi),
                        "leaf above its separator"
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
                        let l = if i == 0 { lo } else { Some(&b.keys[i - 1]) };
                        let h = if i == b.keys.len() {
                            hi
                        } else {
                            Some(&b.keys[i])
                        };
                        total += walk(c, l, h, depth + 1, leaves);
                    }
                    total
                }
            }
        }
        let mut leaves = Vec::new();
        let n = self
            .root
            .as_deref()
            .map_or(0, |r| walk(r, None, None, 0, &mut leaves));
        assert_eq!(n, self.len, "len");
        fn nodes(n: &Node) -> usize {
            match n {
                Node::Leaf(_) => 1,
                Node::Branch(b) => 1 + b.children.iter().map(|c| nodes(c)).sum::<usize>(),
            }
        }
        let reachable = self.root.as_deref().map_or(0, nodes);
        assert_eq!(reachable * NODE_BYTES, self.live_bytes(), "live_bytes");
        assert!(
            leaves.windows(2).all(|w| w[0] == w[1]),
            "leaves at different depths"
        );
        if let Some(Node::Branch(b)) = self.root.as_deref() {
            assert!(b.children.len() >= 2, "root branch with one child");
        }
    }

    /// Leaves and their mean fill (tests and benchmarks of the layout).
    #[cfg(test)]
    pub fn leaf_fill(&self) -> (usize, f64) {
        fn count(n: &Node, leaves: &mut usize, entries: &mut usize) {
            match n {
                Node::Leaf(e) => {
                    *leaves += 1;
                    *entries += e.len();
                }
                Node::Branch(b) => b.children.iter().for_each(|c| count(c, leaves, entries)),
            }
        }
        let (mut leaves, mut entries) = (0, 0);
        if let Some(r) = self.root.as_deref() {
            count(r, &mut leaves, &mut entries);
        }
        (leaves, entries as f64 / (leaves.max(1) * LEAF_CAP) as f64)
    }
}

fn insert(node: &mut Arc<Node>, key: Key, meta: Meta, hint: Option<&Key>) -> (Option<Meta>, Split) {
    match Arc::make_mut(node) {
        Node::Leaf(e) => {
            let i = match e.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => return (Some(std::mem::replace(&mut e[i].1, meta)), None),
                Err(i) => i,
            };
            if e.len() < LEAF_CAP {
                e.insert(i, (key, meta));
                return (None, None);
            }
            // The previous insert sits in this leaf before this one: an
            // ascending stream, whose later inserts all land further right.
            // Split at the insertion point: what is left behind is final.
            // Any other insert splits in the middle.
            let ascending = i > 0 && hint.is_some_and(|h| *h < key && e[0].0 <= *h);
            let at = if ascending { i } else { LEAF_CAP / 2 };
            let mut right = Entries::new();
            right.extend(e.drain(at..));
            if ascending {
                if e.len() < LEAF_CAP {
                    e.push((key, meta));
                } else {
                    right.insert(0, (key, meta));
                }
            } else if i <= at {
                e.insert(i, (key, meta));
            } else {
                right.insert(i - at, (key, meta));
            }
            let sep = right[0].0.clone();
            (None, Some((sep, counted(Node::Leaf(right)), ascending)))
        }
        Node::Branch(b) => {
            let mut ci = b.child_for(&key);
            if ci > 0 && pack_left(b, ci, &key, hint) {
                ci = b.child_for(&key);
            }
            if goes_right(b, ci, &key) {
                // The new key becomes the right neighbour's first.
                b.keys[ci] = key.clone();
                ci += 1;
            }
            let (old, split) = insert(&mut b.children[ci], key, meta, hint);
            let Some((sep, child, ascending)) = split else {
                return (old, None);
            };
            if b.children.len() < BRANCH_CAP {
                b.keys.insert(ci, sep);
                b.children.insert(ci + 1, child);
                return (old, None);
            }
            // Full branch: split as the leaf did, right before the new child
            // in an ascending stream, else in the middle.
            let at = if ascending { ci + 1 } else { BRANCH_CAP / 2 };
            if at == BRANCH_CAP {
                let mut right = Branch {
                    keys: ArrayVec::new(),
                    children: ArrayVec::new(),
                };
                right.children.push(child);
                return (old, Some((sep, counted(Node::Branch(right)), ascending)));
            }
            let (up, mut right) = split_branch(b, at);
            if ci < at {
                b.keys.insert(ci, sep);
                b.children.insert(ci + 1, child);
            } else {
                right.keys.insert(ci - at, sep);
                right.children.insert(ci - at + 1, child);
            }
            (old, Some((up, counted(Node::Branch(right)), ascending)))
        }
    }
}

/// Before an ascending stream's insert splits the full leaf `children[ci]`,
/// moves the entries it has passed (those before the insertion point) to the
/// end of the left neighbour, as many as fit. The stream leaves nothing
/// behind it but full leaves, whatever older keys it runs between (DEBUG
/// POPULATE inserts `key:1000..key:1009` between `key:100` and `key:101`).
/// Returns whether entries moved (the separator changed).
fn pack_left(b: &mut Branch, ci: usize, key: &Key, hint: Option<&Key>) -> bool {
    let (Node::Leaf(left), Node::Leaf(cur)) = (&*b.children[ci - 1], &*b.children[ci]) else {
        return false;
    };
    if cur.len() < LEAF_CAP || left.len() == LEAF_CAP {
        return false;
    }
    let i = cur.partition_point(|(k, _)| k < key);
    let Some(h) = hint else {
        return false;
    };
    if i == 0 || !(cur[0].0 <= *h && *h < *key) || cur.get(i).is_some_and(|(k, _)| k == key) {
        return false;
    }
    let n = (LEAF_CAP - left.len()).min(i);
    let moved: Entries = match Arc::make_mut(&mut b.children[ci]) {
        Node::Leaf(cur) => cur.drain(..n).collect(),
        Node::Branch(_) => unreachable!("checked above"),
    };
    if let Node::Leaf(left) = Arc::make_mut(&mut b.children[ci - 1]) {
        left.extend(moved);
    }
    if let Node::Leaf(cur) = &*b.children[ci] {
        b.keys[ci - 1] = cur[0].0.clone();
    }
    true
}

/// Whether `key` belongs after every entry of the full leaf `children[ci]`
/// and the leaf to its right has room: it can start that leaf instead of
/// splitting this one.
fn goes_right(b: &Branch, ci: usize, key: &Key) -> bool {
    let (Node::Leaf(cur), Some(right)) = (&*b.children[ci], b.children.get(ci + 1)) else {
        return false;
    };
    matches!(&**right, Node::Leaf(r) if r.len() < LEAF_CAP)
        && cur.len() == LEAF_CAP
        && cur.last().is_some_and(|(k, _)| k < key)
}

/// Moves `children[at..]` into a new branch; returns the separator that goes
/// up and the new branch. `at` is in `1..BRANCH_CAP`.
fn split_branch(b: &mut Branch, at: usize) -> (Key, Branch) {
    let children: ArrayVec<Arc<Node>, BRANCH_CAP> = b.children.drain(at..).collect();
    let mut keys: ArrayVec<Key, { BRANCH_CAP - 1 }> = b.keys.drain(at - 1..).collect();
    let up = keys.remove(0);
    (up, Branch { keys, children })
}

fn remove(node: &mut Arc<Node>, key: &Key) -> Option<(Key, Meta)> {
    match Arc::make_mut(node) {
        Node::Leaf(e) => {
            let i = e.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
            Some(e.remove(i))
        }
        Node::Branch(b) => {
            let ci = b.child_for(key);
            let removed = remove(&mut b.children[ci], key)?;
            if b.children[ci].len() == 0 {
                // An empty child goes with a separator, if it has one (a
                // branch may have a single child after an ascending split;
                // emptied, it is removed by its own parent in turn).
                b.children.remove(ci);
                tree_delta(-1);
                if !b.keys.is_empty() {
                    b.keys.remove(ci.saturating_sub(1));
                }
            } else if b.children[ci].underfull() {
                // Merge with the left neighbour, else the right one.
                let merged = ci > 0 && merge_if_fits(b, ci - 1);
                if !merged && ci + 1 < b.children.len() {
                    merge_if_fits(b, ci);
                }
            }
            Some(removed)
        }
    }
}

/// Merges `children[i + 1]` into `children[i]` if their entries fit in one
/// node; returns whether it did.
fn merge_if_fits(b: &mut Branch, i: usize) -> bool {
    let (l, r) = (&b.children[i], &b.children[i + 1]);
    let fits = match (&**l, &**r) {
        (Node::Leaf(x), Node::Leaf(y)) => x.len() + y.len() <= LEAF_CAP,
        (Node::Branch(x), Node::Branch(y)) => x.children.len() + y.children.len() <= BRANCH_CAP,
        _ => false,
    };
    if !fits {
        return false;
    }
    let right = b.children.remove(i + 1);
    tree_delta(-1);
    let sep = b.keys.remove(i);
    let mut right = Arc::try_unwrap(right).unwrap_or_else(|shared| (*shared).clone());
    match (Arc::make_mut(&mut b.children[i]), &mut right) {
        (Node::Leaf(x), Node::Leaf(y)) => x.extend(std::mem::take(y)),
        (Node::Branch(x), Node::Branch(y)) => {
            x.keys.push(sep);
            x.keys.extend(std::mem::take(&mut y.keys));
            x.children.extend(std::mem::take(&mut y.children));
        }
        _ => unreachable!("siblings are at the same depth"),
    }
    true
}

/// In-order iterator over a range of a [`KeyMap`].
pub struct Iter<'a> {
    /// Branches above the current leaf and the child index taken in each.
    stack: Vec<(&'a Branch, usize)>,
    leaf: &'a [(Key, Meta)],
    pos: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Key, &'a Meta);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((k, m)) = self.leaf.get(self.pos) {
                self.pos += 1;
                return Some((k, m));
            }
            // Climb to the first branch with a child to the right, then
            // descend to that child's leftmost leaf.
            let mut node = loop {
                let (b, i) = self.stack.last_mut()?;
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
                    Node::Leaf(e) => {
                        self.leaf = e.as_slice();
                        self.pos = 0;
                        break;
                    }
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

    fn k(i: u32) -> Key {
        Key::new(format!("key:{i}").as_bytes())
    }

    /// A distinct value per `i` (as an expiry).
    fn m(i: u64) -> Meta {
        Meta::new(crate::index::meta::STRING, Some(i as i64))
    }

    #[test]
    fn node_fits_a_2k_allocation() {
        // Node + two reference counts (ArcInner).
        assert!(
            std::mem::size_of::<Node>() + 16 <= 2048,
            "{}",
            std::mem::size_of::<Node>()
        );
        assert_eq!(std::mem::size_of::<(Key, Meta)>(), 32);
    }

    #[rstest]
    // Byte order ascending: key:00000000, key:00000001, ...
    #[case::ascending(|i: u32| format!("key:{i:08}"), false, 0.95)]
    #[case::descending(|i: u32| format!("key:{i:08}"), true, 0.45)]
    // DEBUG POPULATE's order: key:0, key:1, ..., key:10, ... (runs that
    // start in the middle of earlier keys).
    #[case::populate_order(|i: u32| format!("key:{i}"), false, 0.95)]
    fn fill_by_insert_order(
        #[case] name: fn(u32) -> String,
        #[case] rev: bool,
        #[case] min_fill: f64,
    ) {
        let mut t = KeyMap::new();
        let n = 50_000u32;
        for j in 0..n {
            let i = if rev { n - 1 - j } else { j };
            t.insert(Key::new(name(i).as_bytes()), m(i as u64));
        }
        t.check();
        assert_eq!(t.len(), n as usize);
        let (leaves, fill) = t.leaf_fill();
        eprintln!("fill {fill:.3} over {leaves} leaves");
        assert!(fill >= min_fill, "fill {fill:.2} over {leaves} leaves");
    }

    #[test]
    fn random_order_fills_about_two_thirds() {
        let mut rng = 12345u64;
        let mut t = KeyMap::new();
        for _ in 0..50_000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (rng >> 33) as u32;
            t.insert(Key::new(&i.to_be_bytes()), m(0));
        }
        t.check();
        let (_, fill) = t.leaf_fill();
        eprintln!("fill {fill:.3}");
        assert!(fill > 0.6, "fill {fill:.2}");
    }

    #[test]
    fn snapshots_never_change() {
        let mut t = KeyMap::new();
        for i in 0..5_000 {
            t.insert(k(i), m(i as u64));
        }
        let snap = t.clone();
        for i in 0..5_000 {
            if i % 3 == 0 {
                t.remove(&k(i));
            } else {
                t.insert(k(i), m(7));
            }
        }
        for i in 5_000..6_000 {
            t.insert(k(i), m(1));
        }
        t.check();
        snap.check();
        assert_eq!(snap.len(), 5_000);
        assert!(snap.iter().all(|(key, meta)| {
            let i: u64 = std::str::from_utf8(&key.as_bytes()[4..])
                .unwrap()
                .parse()
                .unwrap();
            *meta == m(i)
        }));
    }

    #[test]
    fn removing_everything_empties_the_tree() {
        let mut t = KeyMap::new();
        for i in 0..10_000 {
            t.insert(k(i), m(0));
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
        assert_eq!(t.iter().count(), 0);
    }

    /// Enough keys for full branches (62 × 62 leaves' worth and more), in
    /// ascending order, which makes single-child branches at every split.
    fn ascending(n: u32) -> (KeyMap, Vec<Key>) {
        let keys: Vec<Key> = (0..n)
            .map(|i| Key::new(format!("k{i:08}").as_bytes()))
            .collect();
        let mut t = KeyMap::new();
        for k in &keys {
            t.insert(k.clone(), m(0));
        }
        t.check();
        (t, keys)
    }

    #[rstest]
    #[case::last_after_a_branch_split(LEAF_CAP as u32 * BRANCH_CAP as u32 + 1, "last")]
    #[case::ascending(3 * (LEAF_CAP * BRANCH_CAP) as u32, "ascending")]
    #[case::descending(3 * (LEAF_CAP * BRANCH_CAP) as u32, "descending")]
    #[case::second_branch(3 * (LEAF_CAP * BRANCH_CAP) as u32, "second_branch")]
    #[case::strided(3 * (LEAF_CAP * BRANCH_CAP) as u32, "strided")]
    fn removals_from_large_trees(#[case] n: u32, #[case] how: &str) {
        let (mut t, keys) = ascending(n);
        let snap = t.clone();
        let order: Vec<&Key> = match how {
            "last" => vec![&keys[keys.len() - 1]],
            "ascending" => keys.iter().collect(),
            "descending" => keys.iter().rev().collect(),
            "second_branch" => keys[LEAF_CAP * BRANCH_CAP..2 * LEAF_CAP * BRANCH_CAP]
                .iter()
                .collect(),
            _ => keys
                .iter()
                .step_by(3)
                .chain(keys.iter().skip(1).step_by(3))
                .collect(),
        };
        for (j, k) in order.iter().enumerate() {
            assert!(t.remove(k).is_some(), "{how}: remove #{j}");
            if j % 1009 == 0 {
                t.check();
            }
        }
        t.check();
        assert_eq!(t.len(), keys.len() - order.len());
        // Whatever is left stays reachable and no sparse leaves linger.
        assert_eq!(t.iter().count(), t.len());
        if t.len() > 4 * LEAF_CAP {
            let (leaves, fill) = t.leaf_fill();
            assert!(fill > 0.2, "{how}: fill {fill:.2} over {leaves} leaves");
        }
        // The same keys can be inserted again.
        for k in &order {
            t.insert((*k).clone(), m(1));
        }
        t.check();
        assert_eq!(t.len(), keys.len());
        snap.check();
        assert_eq!(snap.len(), keys.len());
    }

    #[test]
    fn few_keys_left_after_descending_removals_share_leaves() {
        let (mut t, keys) = ascending(20_000);
        for k in keys[50..].iter().rev() {
            t.remove(k);
        }
        t.check();
        let (leaves, _) = t.leaf_fill();
        assert!(leaves <= 4, "50 keys over {leaves} leaves");
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
            // Ascending runs exercise the sequential split.
            2 => (0u16..3000).prop_map(|k| Op::Insert(k, 0)),
            3 => (0u16..3000).prop_map(Op::Remove),
            1 => Just(Op::Snapshot),
        ]
    }

    fn key16(i: u16) -> Key {
        // Mixed lengths, some stored on the heap.
        let mut v = format!("{i:05}").into_bytes();
        if i.is_multiple_of(7) {
            v.extend_from_slice(&[b'x'; 30]);
        }
        Key::new(&v)
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
                        let old = model.insert(key.as_bytes().to_vec(), m(v as u64));
                        prop_assert_eq!(t.insert(key, m(v as u64)), old);
                    }
                    Op::Remove(i) => {
                        let key = key16(i);
                        let old = model.remove(key.as_bytes());
                        prop_assert_eq!(t.remove(&key).map(|(_, v)| v), old);
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
            let got: Vec<(Vec<u8>, Meta)> = t.iter().map(|(k, v)| (k.as_bytes().to_vec(), *v)).collect();
            let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(got, want);
            let s = key16(seek);
            for (lower, range) in [
                (Bound::Included(&s), model.range::<[u8], _>((Bound::Included(s.as_bytes()), Bound::Unbounded))),
                (Bound::Excluded(&s), model.range::<[u8], _>((Bound::Excluded(s.as_bytes()), Bound::Unbounded))),
            ] {
                let got: Vec<Vec<u8>> = t.range_from(lower).map(|(k, _)| k.as_bytes().to_vec()).collect();
                let want: Vec<Vec<u8>> = range.map(|(k, _)| k.clone()).collect();
                prop_assert_eq!(got, want);
            }
            for (snap, model) in &snaps {
                snap.check();
                let got: Vec<(Vec<u8>, Meta)> = snap.iter().map(|(k, v)| (k.as_bytes().to_vec(), *v)).collect();
                let want: Vec<(Vec<u8>, Meta)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
