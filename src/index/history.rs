//! What open snapshots need of the past (issue 25): a database's undo log.
//!
//! A snapshot no longer keeps a clone of the tree it was cut from (a clone
//! pins every leaf a later write copies, about 1 KiB per write and per open
//! version). It keeps its version and reads the live map through a *view*
//! (a recent clone of the live map and of the undo log, published by
//! whoever applies the log), corrected by the undo log: for every change made
//! while a snapshot was open, the key's value before it, keyed by
//! `(key, version of the change)`. The value of a key at version `p` is the
//! old value of its first change after `p`, or the live value if it has
//! none. So an old version costs one small entry per changed key instead of
//! a leaf, and versions share them.
//!
//! An iteration only walks forward: its [`Pin`] says which keys it can
//! still read (those after its last page's start, for a retry), and the
//! collector drops every entry no open snapshot can read, so an iteration
//! near its end holds almost nothing.
//!
//! Locking: [`Undo`] lives in the index (under its mutex); [`History`] is
//! shared with the snapshots: its published [`View`] is an `ArcSwap`
//! (readers load it without a lock), its pin list a `Mutex` held only to
//! add a pin or to copy the list for a collection pass. A [`Pin`]'s
//! position is a `Mutex` held by its own iteration's page and by that copy.

use super::tree::Iter;
use super::{Entry, Key, KeyMap, Meta, Stamp};
use arc_swap::ArcSwap;
use std::cmp::Ordering as Cmp;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The old value of a key that did not exist (a type id no key has).
const ABSENT: Meta = Meta::plain(7);

/// Changes between two publications of the view: bounds what the view
/// pins of the live map (the leaves those changes copied).
pub const PUBLISH_EVERY: u64 = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Appends `key`, escaped so that byte order is kept whatever the bytes
/// (0x00 becomes 0x00 0xff) and terminated by 0x00 0x00.
fn escape(key: &[u8], out: &mut Vec<u8>) {
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
}

/// The undo log's key of a change of `key` at `version`: entries sort by
/// key, then by version. The version is written in as few bytes as it
/// needs, after their count (so a shorter one sorts first): most are 3-4
/// bytes, not 8, in an entry of about 20.
pub(crate) fn encode(key: &[u8], version: u64, out: &mut Vec<u8>) {
    out.clear();
    escape(key, out);
    out.extend_from_slice(&[0, 0]);
    let n = (8 - version.leading_zeros() as usize / 8).max(1);
    out.push(n as u8);
    out.extend_from_slice(&version.to_be_bytes()[8 - n..]);
}

/// Reads a version written by [`encode`] from `tail` (all of it).
fn read_version(tail: &[u8]) -> Option<u64> {
    let (&n, bytes) = tail.split_first()?;
    if n == 0 || n > 8 || bytes.len() != n as usize {
        return None;
    }
    let mut v = [0u8; 8];
    v[8 - n as usize..].copy_from_slice(bytes);
    Some(u64::from_be_bytes(v))
}

/// Splits an undo key into the key (written to `out`) and the version;
/// `None` for bytes [`encode`] never writes.
pub(crate) fn decode(enc: &[u8], out: &mut Vec<u8>) -> Option<u64> {
    out.clear();
    let mut i = 0;
    while i < enc.len() {
        let b = enc[i];
        if b != 0 {
            out.push(b);
            i += 1;
            continue;
        }
        match enc.get(i + 1) {
            Some(0xff) => {
                out.push(0);
                i += 2;
            }
            Some(0) => return read_version(enc.get(i + 2..)?),
            _ => return None,
        }
    }
    None
}

/// Whether the undo key `enc` is one of `key`'s (no allocation).
fn is_of(enc: &[u8], key: &[u8]) -> bool {
    let mut i = 0;
    for &b in key {
        match (enc.get(i), b) {
            (Some(0), 0) if enc.get(i + 1) == Some(&0xff) => i += 2,
            (Some(&e), b) if e == b && b != 0 => i += 1,
            _ => return false,
        }
    }
    enc.get(i..i + 2) == Some(&[0, 0])
}

/// A database generation's live map and undo log as of `version`, for
/// readers (an O(1) clone of both roots).
pub struct View {
    pub live: KeyMap,
    pub undo: KeyMap,
    pub version: u64,
}

/// What a database generation shares with its snapshots. A new generation
/// starts at every flush; swapped databases keep theirs.
pub struct History {
    view: ArcSwap<View>,
    pins: Mutex<Vec<Weak<Pin>>>,
    /// Pins alive (snapshots not yet dropped).
    open: AtomicUsize,
    /// The largest version pinned so far.
    newest: AtomicU64,
}

impl Default for History {
    fn default() -> Self {
        History {
            view: ArcSwap::from_pointee(View {
                live: KeyMap::new(),
                undo: KeyMap::new(),
                version: 0,
            }),
            pins: Mutex::new(Vec::new()),
            open: AtomicUsize::new(0),
            newest: AtomicU64::new(0),
        }
    }
}

/// Positions an iteration told its snapshot, kept while a cursor of it may
/// still be sent again (see [`Pin::position`]).
#[derive(Default)]
struct Positions {
    /// Where its pages started (after this key), oldest first, in groups
    /// of the pages told within [`GRAIN`] of a group's first: the first
    /// page's position (the group's smallest) and the last one's time.
    recent: VecDeque<Told>,
    /// The last page's position.
    latest: Option<Key>,
    /// The furthest position handed to the collector: what was kept of the
    /// keys up to it may be gone.
    collected: Option<Key>,
}

/// Pages told within a [`GRAIN`]: the first one's position, when the first
/// and the last were told.
struct Told {
    from: Key,
    first: Instant,
    last: Instant,
}

/// The span of pages one group of [`Positions`] stands for.
const GRAIN: Duration = Duration::from_millis(50);

/// One open snapshot's claim on its generation's history: its version and
/// the keys it may still read.
pub struct Pin {
    hist: Arc<History>,
    version: u64,
    /// How long a cursor of the iteration may be sent again after its use
    /// (its page then read again): the collector's position for the
    /// snapshot lags that much behind its pages.
    hold: Duration,
    /// The positions its pages told (none: it reads every key).
    from: Mutex<Positions>,
    /// Bytes of the undo entries only this snapshot can still read, as of
    /// the collector's last full pass over the log (0 before one).
    alone: AtomicUsize,
}

impl Drop for Pin {
    fn drop(&mut self) {
        self.hist.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pin {
    /// A page of the iteration starts after `after`: once no cursor used
    /// before it can be sent again (the pin's hold), the snapshot will
    /// never read `after` or a key before it again.
    pub fn advance(&self, after: &Key) {
        let now = Instant::now();
        let mut f = lock(&self.from);
        if f.latest.as_ref().is_some_and(|l| l >= after) {
            return;
        }
        f.latest = Some(after.clone());
        match f.recent.back_mut() {
            Some(g) if now.saturating_duration_since(g.first) < GRAIN => g.last = now,
            _ => f.recent.push_back(Told {
                from: after.clone(),
                first: now,
                last: now,
            }),
        }
    }

    /// The position the collector may use now (`None`: every key may be
    /// read): the first page whose cursor may still be sent again (told
    /// within the hold), else the last page's. Recorded as handed to the
    /// collector (see [`Pin::passed`]).
    fn position(&self) -> Option<Key> {
        let now = Instant::now();
        let mut f = lock(&self.from);
        while f
            .recent
            .front()
            .is_some_and(|g| now.saturating_duration_since(g.last) >= self.hold)
        {
            f.recent.pop_front();
        }
        let pos = match f.recent.front() {
            Some(g) => g.from.clone(),
            None => f.latest.clone()?,
        };
        if f.collected.as_ref().is_none_or(|c| *c < pos) {
            f.collected = Some(pos.clone());
        }
        Some(pos)
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether the snapshot has been told it will never read keys after
    /// `after` again, some of them included (`None`: from the first key):
    /// what it kept of them may be gone, so a page from there could differ
    /// from the one first served.
    pub fn passed(&self, after: Option<&Key>) -> bool {
        match (lock(&self.from).collected.as_ref(), after) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(f), Some(a)) => f > a,
        }
    }

    /// Bytes of the undo log that only this snapshot can still read (the
    /// log would shrink by as much if it ended), as the collector's last
    /// full pass found them.
    pub fn alone_bytes(&self) -> usize {
        self.alone.load(Ordering::Relaxed)
    }

    /// What the snapshot reads now: the latest published view.
    pub fn read(&self) -> Reader {
        Reader {
            view: self.hist.view.load_full(),
            version: self.version,
        }
    }
}

/// A snapshot's reading of one view.
pub struct Reader {
    view: Arc<View>,
    version: u64,
}

/// A key's value at a snapshot: the value before its first change after
/// the snapshot's version, among the one its live entry keeps (`in_place`,
/// from [`Entry::at`]) and the undo log's first (`undo`: its version and
/// old value); the live value if neither is after the version.
#[inline]
fn choose(in_place: (Option<Meta>, Option<u64>), undo: Option<(u64, Meta)>) -> Option<Meta> {
    match (in_place.1, undo) {
        (Some(iv), Some((u, _))) if iv < u => in_place.0,
        (_, Some((_, old))) => (old != ABSENT).then_some(old),
        (_, None) => in_place.0,
    }
}

impl Reader {
    /// The key's value at the snapshot's version.
    pub fn get(&self, key: &[u8]) -> Option<Meta> {
        let mut enc = Vec::with_capacity(key.len() + 10);
        encode(key, self.version + 1, &mut enc);
        let mut it = self.view.undo.range_from(Bound::Included(&enc));
        let undo = match it.next_entry() {
            Some((e, m)) if is_of(e, key) => {
                let mut k = Vec::new();
                decode(e, &mut k).map(|v| (v, m))
            }
            _ => None,
        };
        let in_place = self
            .view
            .live
            .get_entry(key)
            .map_or((None, None), |e| e.at(self.version));
        choose(in_place, undo)
    }

    /// The snapshot's entries from `lower` on, in key order.
    pub fn range_from(&self, lower: Bound<&[u8]>) -> Merged<'_> {
        let mut probe = Vec::new();
        let undo_lower = match lower {
            Bound::Unbounded => Bound::Unbounded,
            // Every key from `k` on (also a MATCH prefix): escaped without
            // the terminator, it sorts before them and after smaller keys.
            Bound::Included(k) => {
                escape(k, &mut probe);
                Bound::Included(&probe[..])
            }
            Bound::Excluded(k) => {
                encode(k, u64::MAX, &mut probe);
                Bound::Excluded(&probe[..])
            }
        };
        let mut undo = self.view.undo.range_from(undo_lower);
        let undo_next = undo.next_entry().map(|(_, m)| m);
        Merged {
            live: self.view.live.range_from(lower),
            live_next: None,
            live_loaded: false,
            undo,
            undo_map: &self.view.undo,
            undo_next,
            group: None,
            key: Vec::new(),
            version: self.version,
        }
    }

    /// Every entry at the snapshot's version (tests).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<(Vec<u8>, Meta)> {
        let mut out = Vec::new();
        let mut it = self.range_from(Bound::Unbounded);
        while let Some((k, m)) = it.next_entry() {
            out.push((k.to_vec(), m));
        }
        out
    }
}

/// In-order reader of a snapshot: the view's live entries merged with the
/// undo log's, each key's value taken at the snapshot's version. Lends each
/// key until the next call, like [`Iter`].
pub struct Merged<'a> {
    live: Iter<'a>,
    /// The live entry not yet returned (its key is `live`'s), tombstones
    /// included.
    live_next: Option<Entry>,
    live_loaded: bool,
    undo: Iter<'a>,
    /// The map `undo` walks (sought past a key's many versions).
    undo_map: &'a KeyMap,
    /// The undo entry not yet read into a group (its key is `undo`'s).
    undo_next: Option<Meta>,
    /// The next undo key's first change after the version (its version
    /// and old value; `Some(None)`: no change after the version), its key
    /// in `key`.
    group: Option<Option<(u64, Meta)>>,
    key: Vec<u8>,
    version: u64,
}

impl Merged<'_> {
    /// Reads the next key's value at the version into `group`, and moves
    /// the undo iterator to the key after it. A key with one entry (the
    /// common case) is read in place; one with several is sought: the
    /// entry of the first change after the version, then the next key
    /// (a key changed at every version of many open snapshots must not
    /// cost a walk over all of them per read).
    fn load_group(&mut self) {
        let Some(first) = self.undo_next else {
            return;
        };
        let mut chosen = None;
        let ver = decode(self.undo.key(), &mut self.key);
        if let Some(v) = ver.filter(|v| *v > self.version) {
            chosen = Some((v, first));
        }
        self.undo_next = self.undo.next_entry().map(|(_, m)| m);
        if self.undo_next.is_some() && is_of(self.undo.key(), &self.key) {
            let mut probe = Vec::with_capacity(self.key.len() + 12);
            if chosen.is_none() {
                encode(&self.key, self.version.saturating_add(1), &mut probe);
                let mut it = self.undo_map.range_from(Bound::Included(&probe[..]));
                if let Some((e, m)) = it.next_entry() {
                    if is_of(e, &self.key) {
                        let mut k = Vec::new();
                        chosen = decode(e, &mut k).map(|v| (v, m));
                    }
                }
            }
            encode(&self.key, u64::MAX, &mut probe);
            self.undo = self.undo_map.range_from(Bound::Excluded(&probe[..]));
            self.undo_next = self.undo.next_entry().map(|(_, m)| m);
        }
        self.group = Some(chosen);
    }

    /// The next entry: its key (valid until the next call) and metadata.
    pub fn next_entry(&mut self) -> Option<(&[u8], Meta)> {
        // No undo entry left (the common case: few keys changed): the live
        // entries, each read as its own stamp says, without the merge.
        if self.group.is_none() && self.undo_next.is_none() && !self.live_loaded {
            loop {
                let e = self.live.next_raw()?.1;
                if let Some(m) = e.at(self.version).0 {
                    return Some((self.live.key(), m));
                }
            }
        }
        loop {
            if !self.live_loaded {
                self.live_next = self.live.next_raw().map(|(_, e)| e);
                self.live_loaded = true;
            }
            if self.group.is_none() {
                self.load_group();
            }
            let Some(chosen) = self.group else {
                // No undo entry left: the live entries as their stamps say.
                let e = self.live_next?;
                self.live_loaded = false;
                match e.at(self.version).0 {
                    Some(m) => return Some((self.live.key(), m)),
                    None => continue,
                }
            };
            let ord = match self.live_next {
                None => Cmp::Greater,
                Some(_) => self.live.key().cmp(&self.key),
            };
            match (ord, self.live_next) {
                (Cmp::Less, Some(e)) => {
                    self.live_loaded = false;
                    if let Some(m) = e.at(self.version).0 {
                        return Some((self.live.key(), m));
                    }
                }
                (Cmp::Equal, Some(e)) => {
                    self.live_loaded = false;
                    self.group = None;
                    if let Some(m) = choose(e.at(self.version), chosen) {
                        return Some((self.live.key(), m));
                    }
                }
                _ => {
                    // A key the live map no longer has.
                    self.group = None;
                    if let Some(m) = choose((None, None), chosen) {
                        return Some((&self.key, m));
                    }
                }
            }
        }
    }
}

/// Where the collector is in its pass over the undo log.
#[derive(Default)]
struct Pass {
    /// The last undo key examined (the pass resumes after it).
    at: Option<Vec<u8>>,
    /// The key and version of the last entry examined.
    prev: Option<(Vec<u8>, u64)>,
    /// The open snapshots as the pass began: (version, reads keys after).
    pins: Vec<(u64, Option<Key>)>,
    /// The same snapshots, to tell each at the pass's end what it alone
    /// holds: the count of undo entries, and of tombstones, only it can
    /// read.
    owners: Vec<(Weak<Pin>, usize, usize)>,
    /// The undo log is examined; the live map's stamps are next.
    undo_done: bool,
    /// The last live key examined (the live sweep resumes after it).
    live_at: Option<Vec<u8>>,
    /// The database's version as the pass began: an entry of a later
    /// change may be needed by a snapshot cut since, unknown to the pass.
    version: u64,
    /// Range minimum of `pins`' positions (a segment tree of indices).
    tree: Vec<usize>,
}

impl Pass {
    fn begin(hist: &History, version: u64) -> Pass {
        let mut open: Vec<(u64, Option<Key>, Weak<Pin>)> = {
            let mut list = lock(&hist.pins);
            list.retain(|w| w.strong_count() > 0);
            list.iter()
                .filter_map(|w| w.upgrade().map(|p| (p, w.clone())))
                .map(|(p, w)| (p.version, p.position(), w))
                .collect()
        };
        open.sort_by_key(|p| p.0);
        let (pins, owners): (Vec<_>, Vec<_>) = open
            .into_iter()
            .map(|(v, from, w)| ((v, from), (w, 0, 0)))
            .unzip();
        let n = pins.len();
        let mut tree = vec![usize::MAX; 2 * n.max(1)];
        for i in 0..n {
            tree[n + i] = i;
        }
        for i in (1..n).rev() {
            tree[i] = Self::lesser(&pins, tree[2 * i], tree[2 * i + 1]);
        }
        Pass {
            at: None,
            prev: None,
            pins,
            owners,
            undo_done: false,
            live_at: None,
            version,
            tree,
        }
    }

    /// Of two pins, the one reading from the smaller key.
    fn lesser(pins: &[(u64, Option<Key>)], a: usize, b: usize) -> usize {
        match (pins.get(a), pins.get(b)) {
            (Some(x), Some(y)) => match (&x.1, &y.1) {
                (None, _) => a,
                (_, None) => b,
                (Some(kx), Some(ky)) if kx <= ky => a,
                _ => b,
            },
            (Some(_), None) => a,
            _ => b,
        }
    }

    /// Of the pins `a..b` (indices), the one reading from the smallest key
    /// (`usize::MAX` for none).
    fn least_in(&self, a: usize, b: usize) -> usize {
        let n = self.pins.len();
        let (mut l, mut r) = (a + n, b + n);
        let mut best = usize::MAX;
        while l < r {
            if l & 1 == 1 {
                best = Self::lesser(&self.pins, best, self.tree[l]);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                best = Self::lesser(&self.pins, best, self.tree[r]);
            }
            l /= 2;
            r /= 2;
        }
        best
    }

    /// Whether pin `i` may still read `key`.
    fn reads(&self, i: usize, key: &[u8]) -> bool {
        match self.pins.get(i) {
            None => false,
            Some((_, None)) => true,
            Some((_, Some(from))) => key > from.as_bytes(),
        }
    }

    /// Who may still read `key` at a version in `lo..hi`: nobody, one
    /// snapshot alone (its index), or several.
    fn readers(&self, key: &[u8], lo: u64, hi: u64) -> Readers {
        let a = self.pins.partition_point(|p| p.0 < lo);
        let b = self.pins.partition_point(|p| p.0 < hi);
        let best = self.least_in(a, b);
        if !self.reads(best, key) {
            return Readers::None;
        }
        let other = Self::lesser(
            &self.pins,
            self.least_in(a, best),
            self.least_in(best + 1, b),
        );
        if self.reads(other, key) {
            Readers::Many
        } else {
            Readers::One(best)
        }
    }

    /// The pass has examined the whole log of `entries` entries in `bytes`
    /// and the live map's stamps: tells each snapshot it began with the
    /// bytes only it can read (its entries' share of the log's bytes: a
    /// node holds many entries; its tombstones at `per_dead` bytes each).
    /// Returns whether it told any a figure above 0.
    fn publish_alone(&self, bytes: usize, entries: usize, per_dead: usize) -> bool {
        let mut told = false;
        for (w, n, dead) in &self.owners {
            if let Some(p) = w.upgrade() {
                let share = (*n as u128 * bytes as u128) / entries.max(1) as u128
                    + (*dead * per_dead) as u128;
                p.alone.store(share as usize, Ordering::Relaxed);
                told |= share > 0;
            }
        }
        told
    }
}

/// Who may still read an undo entry (see [`Pass::readers`]).
enum Readers {
    None,
    One(usize),
    Many,
}

/// What a change must keep for open snapshots ([`Undo::keeps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// No snapshot is open: nothing (stamps may go too).
    Nothing,
    /// Snapshots are open, but none reads this change (the key changed
    /// after the newest one): what is kept of earlier changes stays.
    Kept,
    /// The value before this change, and what is kept of earlier ones.
    This,
}

/// A database generation's undo log, in the index.
#[derive(Default)]
pub struct Undo {
    map: KeyMap,
    hist: Arc<History>,
    /// Version of the last published view.
    published: u64,
    /// Whether the published view holds maps (it pins the live map's
    /// leaves that later changes copy: dropped once no snapshot is open).
    viewed: bool,
    pass: Option<Pass>,
    /// A pass told some snapshot it alone reads part of the log (set back
    /// to 0 for all once the log is emptied or retired).
    alone_told: bool,
    /// Work the collector may spend beginning a pass (which copies every
    /// open snapshot's position): budgets accrue here while no pass runs,
    /// so that with many snapshots open and a small log a pass does not
    /// begin at every batch (that cost grew as snapshots times batches).
    credit: usize,
    /// Where the sweep of the live map's stamps, while no snapshot is
    /// open, resumes (after this key).
    sweep_at: Option<Vec<u8>>,
    /// Every open snapshot has passed the keys up to this one (`None`:
    /// not known to have passed any): a change there is kept for nobody,
    /// and what is kept of it can go. Refreshed by the collector from the
    /// snapshots' positions, forgotten when a snapshot is cut (it reads
    /// every key).
    low: Option<Key>,
    /// Budget accrued towards the next refresh of `low` (which copies
    /// every open snapshot's position).
    low_credit: usize,
    /// Where the trailing sweep behind `low` resumes, in the live map and
    /// in the log (after these keys).
    trail_at: Option<Vec<u8>>,
    trail_undo_at: Option<Vec<u8>>,
    scratch: Vec<u8>,
}

impl Undo {
    /// Whether an open snapshot of this generation may need old values.
    #[inline]
    fn pinned(&self) -> bool {
        self.hist.open.load(Ordering::Relaxed) > 0
    }

    /// The newest version an open snapshot was cut at (or one that has
    /// ended since).
    pub fn newest(&self) -> u64 {
        self.hist.newest.load(Ordering::Relaxed)
    }

    /// Entries in the log.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Whether a view of the live map is published (see [`Undo::collect`]).
    pub fn viewed(&self) -> bool {
        self.viewed
    }

    /// What a change of `key`, whose live entry has `stamp`, must keep
    /// for open snapshots (see [`Keep`]).
    pub fn keeps(&mut self, key: &[u8], stamp: Stamp) -> Keep {
        if !self.pinned() || self.low.as_ref().is_some_and(|l| key <= l.as_bytes()) {
            return Keep::Nothing;
        }
        let newest = self.hist.newest.load(Ordering::Relaxed);
        if stamp.version().is_some_and(|v| v > newest) {
            return Keep::Kept;
        }
        encode(key, newest.saturating_add(1), &mut self.scratch);
        let later = self
            .map
            .range_from(Bound::Included(&self.scratch))
            .next_entry()
            .is_some_and(|(e, _)| is_of(e, key));
        if later {
            Keep::Kept
        } else {
            Keep::This
        }
    }

    /// Keeps `key`'s value before its change at `version` (`None`: it did
    /// not exist) in the log.
    pub fn record(&mut self, key: &[u8], version: u64, old: Option<Meta>) {
        encode(key, version, &mut self.scratch);
        self.map.insert(&self.scratch, old.unwrap_or(ABSENT));
    }

    /// Publishes the view if enough changed since the last one.
    #[inline]
    pub fn changed(&mut self, live: &KeyMap, version: u64) {
        if version.wrapping_sub(self.published) >= PUBLISH_EVERY && self.pinned() {
            self.publish(live, version);
        }
    }

    fn publish(&mut self, live: &KeyMap, version: u64) {
        self.hist.view.store(Arc::new(View {
            live: live.clone(),
            undo: self.map.clone(),
            version,
        }));
        self.published = version;
        self.viewed = true;
    }

    /// A snapshot of `live` at `version`: publishes it unless the view is
    /// that version already.
    /// `hold`: how long a used cursor of its iteration may be sent again
    /// (see [`Pin::position`]).
    pub fn pin(&mut self, live: &KeyMap, version: u64, hold: Duration) -> Arc<Pin> {
        if !self.viewed || self.published != version {
            self.publish(live, version);
        }
        // The new snapshot reads every key: what is kept behind the others
        // may be its, until it passes it too (the trailing sweep starts
        // again then).
        self.low = None;
        self.trail_at = None;
        self.trail_undo_at = None;
        let pin = Arc::new(Pin {
            hist: self.hist.clone(),
            version,
            hold,
            from: Mutex::new(Positions::default()),
            alone: AtomicUsize::new(0),
        });
        self.hist.open.fetch_add(1, Ordering::Relaxed);
        self.hist.newest.fetch_max(version, Ordering::Relaxed);
        let mut list = lock(&self.hist.pins);
        if list.len() >= 64 && list.len() > 2 * self.hist.open.load(Ordering::Relaxed) {
            list.retain(|w| w.strong_count() > 0);
        }
        list.push(Arc::downgrade(&pin));
        pin
    }

    /// The generation ends (its database is flushed): its snapshots keep
    /// the final view; returns the log to free off the main thread.
    pub fn retire(&mut self, live: &KeyMap, version: u64) -> KeyMap {
        if self.pinned() {
            self.publish(live, version);
        }
        self.forget_alone();
        std::mem::take(self).map
    }

    /// The collector's fast path behind every open snapshot: refreshes
    /// [`Undo::low`] once the budgets since the last refresh cover the
    /// snapshots open, then removes what is kept of the keys up to it (no
    /// open snapshot reads them again; one cut since reads only later
    /// changes), resuming where it stopped. A pass over everything
    /// ([`Pass`]) finds the rest, slower: an iteration that trails far
    /// behind the others, say, holds back only this.
    fn trail(&mut self, live: &mut KeyMap, left: &mut usize) {
        self.low_credit = self.low_credit.saturating_add(*left);
        let open = self.hist.open.load(Ordering::Relaxed);
        if self.low_credit >= open {
            self.low_credit = 0;
            self.low = self.lowest_position();
        }
        let Some(low) = self.low.clone() else {
            return;
        };
        let low = low.as_bytes();
        // A snapshot cut since the last round reads from an earlier key:
        // the round starts again.
        if self.trail_at.as_deref().is_some_and(|t| t > low) {
            self.trail_at = None;
        }
        if self.trail_undo_at.as_deref().is_some_and(|t| t > low) {
            self.trail_undo_at = None;
        }
        if self.trail_at.as_deref() != Some(low) && live.stamped() > 0 {
            sweep_upto(live, &mut self.trail_at, low, left);
        }
        if self.trail_undo_at.as_deref() != Some(low) && !self.map.is_empty() {
            trail_undo(&mut self.map, &mut self.trail_undo_at, low, left);
        }
    }

    /// The smallest position of the open snapshots (`None` if one reads
    /// every key).
    fn lowest_position(&self) -> Option<Key> {
        let list = lock(&self.hist.pins);
        let mut low: Option<Key> = None;
        for p in list.iter().filter_map(Weak::upgrade) {
            let from = p.position()?;
            if low.as_ref().is_none_or(|l| from < *l) {
                low = Some(from);
            }
        }
        low
    }

    /// The log is gone or empty: no snapshot alone reads any of it.
    fn forget_alone(&mut self) {
        if !std::mem::take(&mut self.alone_told) {
            return;
        }
        for p in lock(&self.hist.pins).iter().filter_map(Weak::upgrade) {
            p.alone.store(0, Ordering::Relaxed);
        }
    }

    /// The next collection starts a new pass (with the snapshots open
    /// now: those that ended since the pass began no longer count).
    pub fn restart_collection(&mut self) {
        self.pass = None;
        self.credit = usize::MAX;
    }

    /// Bytes of the log's nodes.
    pub fn bytes(&self) -> usize {
        self.map.live_bytes()
    }

    /// Examines at most `budget` entries of the log, then of the live
    /// map's stamped entries, and removes what no open snapshot can read:
    /// undo entries, tombstones, stamps; all of it when none is open.
    /// A new pass begins only once the budgets given since the last one
    /// ended add up to the number of open snapshots (or right after
    /// [`Undo::restart_collection`]): the collector's work stays
    /// proportional to its budgets. `live` is the database's live map,
    /// `version` its version now. Returns a log to free off the main
    /// thread, if one was dropped, whether a pass ended (or none was
    /// needed), and the part of the budget used.
    pub fn collect(
        &mut self,
        live: &mut KeyMap,
        budget: usize,
        version: u64,
    ) -> (Option<KeyMap>, bool, usize) {
        if self.viewed && !self.pinned() {
            // Nobody reads the view: it would keep what the live map's
            // changes copy since it was published.
            self.hist.view.store(Arc::new(View {
                live: KeyMap::new(),
                undo: KeyMap::new(),
                version: self.published,
            }));
            self.viewed = false;
        }
        if !self.pinned() {
            self.pass = None;
            let log = (!self.map.is_empty()).then(|| std::mem::take(&mut self.map));
            if log.is_some() {
                self.forget_alone();
            }
            let mut left = budget;
            if live.stamped() == 0 {
                self.sweep_at = None;
            }
            let done =
                live.stamped() == 0 || sweep(live, &mut self.sweep_at, &mut left, |_, _| false);
            return (log, done && live.stamped() == 0, budget - left);
        }
        if self.map.is_empty() && live.stamped() == 0 {
            self.pass = None;
            self.forget_alone();
            return (None, true, 0);
        }
        let mut left = budget;
        self.trail(live, &mut left);
        if self.pass.is_none() {
            self.credit = self.credit.saturating_add(budget);
            let cost = self.hist.open.load(Ordering::Relaxed);
            if self.credit < cost || left == 0 {
                return (None, false, budget - left);
            }
            self.credit = 0;
        }
        let pass = self
            .pass
            .get_or_insert_with(|| Pass::begin(&self.hist, version));
        if !pass.undo_done {
            pass.undo_done = collect_undo(&mut self.map, pass, &mut left);
        }
        if !pass.undo_done || left == 0 {
            return (None, false, budget - left);
        }
        let mut live_at = pass.live_at.take();
        let done = live.stamped() == 0
            || sweep(live, &mut live_at, &mut left, |key, e| {
                let Some(s) = e.stamp.version() else {
                    return true;
                };
                // A snapshot cut since the pass began may read a later
                // change; one older than the change reads it if it still
                // reads the key.
                if s > pass.version {
                    return true;
                }
                match pass.readers(key, 0, s) {
                    Readers::None => false,
                    Readers::One(i) => {
                        if let Some(o) = pass.owners.get_mut(i) {
                            o.2 += usize::from(e.is_dead());
                        }
                        true
                    }
                    Readers::Many => true,
                }
            });
        pass.live_at = live_at;
        if done {
            if let Some(pass) = self.pass.take() {
                let per_dead = live
                    .live_bytes()
                    .checked_div(live.len() + live.dead())
                    .unwrap_or(0);
                self.alone_told |=
                    pass.publish_alone(self.map.live_bytes(), self.map.len(), per_dead);
            }
        }
        (None, done, budget - left)
    }
}

/// Examines undo entries from where `pass` is, at most `left` of them
/// (counted down), and removes those no snapshot of the pass can read.
/// Returns whether the pass reached the log's end.
fn collect_undo(map: &mut KeyMap, pass: &mut Pass, left: &mut usize) -> bool {
    let mut doomed: Vec<Vec<u8>> = Vec::new();
    let mut key = Vec::new();
    let mut done = false;
    {
        let lower = match &pass.at {
            Some(at) => Bound::Excluded(&at[..]),
            None => Bound::Unbounded,
        };
        let mut it = map.range_from(lower);
        loop {
            if *left == 0 {
                break;
            }
            let Some((enc, _)) = it.next_entry() else {
                done = true;
                break;
            };
            *left -= 1;
            let Some(v) = decode(enc, &mut key) else {
                doomed.push(enc.to_vec());
                continue;
            };
            let lo = match &pass.prev {
                Some((k, pv)) if *k == key => *pv,
                _ => 0,
            };
            if v <= pass.version {
                match pass.readers(&key, lo, v) {
                    Readers::None => doomed.push(enc.to_vec()),
                    Readers::One(i) => {
                        if let Some(o) = pass.owners.get_mut(i) {
                            o.1 += 1;
                        }
                    }
                    Readers::Many => {}
                }
            }
            pass.at = Some(enc.to_vec());
            match &mut pass.prev {
                Some((k, pv)) => {
                    k.clone_from(&key);
                    *pv = v;
                }
                None => pass.prev = Some((key.clone(), v)),
            }
        }
    }
    for d in &doomed {
        map.remove(d);
    }
    done
}

/// Strips every stamp (and removes every tombstone) of the live map's keys
/// after `at` up to `upto`, for at most `left` units of work (see
/// [`sweep`]); `at` moves to where it stopped (`upto` once there).
fn sweep_upto(live: &mut KeyMap, at: &mut Option<Vec<u8>>, upto: &[u8], left: &mut usize) {
    let mut edits: Vec<(Vec<u8>, Entry)> = Vec::new();
    {
        let lower = match at.as_ref() {
            Some(k) => Bound::Excluded(&k[..]),
            None => Bound::Unbounded,
        };
        let mut it = live.range_from(lower);
        let mut past = false;
        while let Some((k, e)) = it.next_stamped(left) {
            if k > upto {
                past = true;
                break;
            }
            edits.push((k.to_vec(), e));
        }
        // Past the bound (or the map's end): everything up to it was seen.
        let pos = it.position();
        *at = Some(if past || it.at_end() || pos.as_slice() > upto {
            upto.to_vec()
        } else {
            pos
        });
    }
    forget(live, edits);
}

/// Strips each of `edits`' stamps from the live map (removes it if a
/// tombstone): nothing is kept of those keys any more.
fn forget(live: &mut KeyMap, edits: Vec<(Vec<u8>, Entry)>) {
    for (k, e) in edits {
        if e.is_dead() {
            live.remove_present(&k);
        } else {
            live.put_changed(&k, Entry::plain(e.meta));
        }
    }
}

/// Removes the undo entries of keys after `at` up to `upto`, examining at
/// most `left` of them; `at` moves to where it stopped (`upto` once there).
fn trail_undo(map: &mut KeyMap, at: &mut Option<Vec<u8>>, upto: &[u8], left: &mut usize) {
    let mut doomed: Vec<Vec<u8>> = Vec::new();
    let mut key = Vec::new();
    let mut reached = false;
    {
        let mut probe = Vec::new();
        let lower = match at.as_ref() {
            Some(k) => {
                encode(k, u64::MAX, &mut probe);
                Bound::Excluded(&probe[..])
            }
            None => Bound::Unbounded,
        };
        let mut it = map.range_from(lower);
        while *left > 0 {
            let Some((enc, _)) = it.next_entry() else {
                reached = true;
                break;
            };
            *left -= 1;
            match decode(enc, &mut key) {
                Some(_) if key.as_slice() > upto => {
                    reached = true;
                    break;
                }
                _ => doomed.push(enc.to_vec()),
            }
        }
    }
    for d in &doomed {
        map.remove(d);
    }
    *at = if reached {
        Some(upto.to_vec())
    } else {
        doomed.last().and_then(|d| {
            let mut k = Vec::new();
            decode(d, &mut k).map(|_| k)
        })
    }
    .or(at.take());
}

/// Examines the live map's stamped entries after `at`, for at most `left`
/// units of work (an entry decoded, or a leaf with no stamp passed whole;
/// counted down), and strips the stamp of each that `keep` refuses (a
/// tombstone is removed). Returns whether the sweep reached the map's end
/// (`at` is then reset for the next one).
fn sweep(
    live: &mut KeyMap,
    at: &mut Option<Vec<u8>>,
    left: &mut usize,
    mut keep: impl FnMut(&[u8], Entry) -> bool,
) -> bool {
    if *left == 0 {
        return false;
    }
    let mut edits: Vec<(Vec<u8>, Entry)> = Vec::new();
    let done = {
        let lower = match at.as_ref() {
            Some(k) => Bound::Excluded(&k[..]),
            None => Bound::Unbounded,
        };
        let mut it = live.range_from(lower);
        while let Some((k, e)) = it.next_stamped(left) {
            if !keep(k, e) {
                edits.push((k.to_vec(), e));
            }
        }
        let done = it.at_end();
        *at = (!done).then(|| it.position());
        done
    };
    forget(live, edits);
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rstest::rstest;

    #[rstest]
    #[case(b"", 0)]
    #[case(b"a", 7)]
    #[case(b"a\x00", u64::MAX - 1)]
    #[case(b"\x00\x00\xff", 1 << 40)]
    fn undo_keys_decode_to_what_was_encoded(#[case] key: &[u8], #[case] v: u64) {
        let mut enc = Vec::new();
        encode(key, v, &mut enc);
        let mut out = Vec::new();
        assert_eq!(decode(&enc, &mut out), Some(v));
        assert_eq!(out, key);
        assert!(is_of(&enc, key));
        assert!(!is_of(&enc, b"zz"));
    }

    /// The collector's position for a snapshot lags its pages by the hold
    /// (a used cursor may be sent again that long): the first page told
    /// within it; with no hold, the last page. What it was handed says
    /// which pages may no longer be read exactly.
    #[rstest]
    #[case::no_hold(Duration::ZERO, "c")]
    #[case::held(Duration::from_secs(3600), "a")]
    fn a_pin_is_collected_up_to_its_oldest_page_still_answerable(
        #[case] hold: Duration,
        #[case] at: &str,
    ) {
        let mut undo = Undo::default();
        let pin = undo.pin(&KeyMap::new(), 0, hold);
        assert_eq!(pin.position(), None, "no page yet: every key");
        assert!(!pin.passed(None));
        for k in ["a", "b", "c", "b"] {
            pin.advance(&Key::new(k.as_bytes()));
        }
        assert_eq!(pin.position(), Some(Key::new(at.as_bytes())));
        assert!(pin.passed(None), "the first page's keys may be gone");
        for (after, passed) in [("a", at > "a"), ("b", at > "b"), ("c", false)] {
            assert_eq!(
                pin.passed(Some(&Key::new(after.as_bytes()))),
                passed,
                "{after}"
            );
        }
    }

    proptest! {
        /// Undo keys sort by key (bytes), then by version; a key's escaped
        /// prefix sorts between the smaller keys and its own.
        #[test]
        fn undo_keys_keep_the_order(
            a in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..6),
            b in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..6),
            va in prop::sample::select(vec![0u64, 1, 255, 256, 65_535, 1 << 40, u64::MAX]),
            vb in prop::sample::select(vec![0u64, 1, 255, 256, 65_535, 1 << 40, u64::MAX]),
        ) {
            let (mut ea, mut eb) = (Vec::new(), Vec::new());
            encode(&a, va, &mut ea);
            encode(&b, vb, &mut eb);
            prop_assert_eq!(ea.cmp(&eb), a.cmp(&b).then(va.cmp(&vb)));
            let mut pa = Vec::new();
            escape(&a, &mut pa);
            prop_assert_eq!(eb >= pa, b >= a);
        }
    }
}
