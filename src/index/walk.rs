//! One page of a snapshot iteration: walk the ordered map from a position,
//! filter by expiry, TYPE and MATCH, stop at COUNT matches or the work budget.

use super::history::Merged;
use super::tree::Iter;
use super::{Key, KeyMap, Meta, Snapshot, TypeId};
use crate::glob::Pattern;
use crate::slot::{prefix_slot, SlotSet};
use std::ops::Bound;

/// Filters and limits of one SNAPSHOT.SCAN call.
#[derive(Clone, Debug)]
pub struct ScanSpec {
    pub pattern: Option<Pattern>,
    pub type_filter: Option<TypeId>,
    /// Most keys one page carries (COUNT).
    pub count: usize,
    /// Most index entries one call examines (`snapshot.scan-budget`).
    pub budget: usize,
    /// Most keys expired at the walk's instant (and wanted but for that)
    /// the page lists in [`Page::expired`] (0: none), for a served SCAN to
    /// have the server expire them as native SCAN does; the page ends at
    /// the one that reaches it.
    pub expired_max: usize,
    /// Whether those are listed whatever the TYPE filter says (the
    /// pattern and slots still apply), as Redis's SCAN expires them.
    pub expired_any_type: bool,
}

/// Result of one walk.
#[derive(Debug)]
pub struct Page {
    pub keys: Vec<Key>,
    /// Position to resume after, or `None` when the iteration is complete.
    pub resume_after: Option<Key>,
    /// Entries examined (for stats).
    pub examined: usize,
    /// Keys passed over because they had expired (see
    /// [`ScanSpec::expired_max`]).
    pub expired: Vec<Key>,
}

/// Walks `map` (a snapshot taken at `at_ms`) strictly after `after`.
///
/// With a MATCH pattern that has a literal prefix, only keys with that
/// prefix are visited: the walk seeks to the prefix in O(log n) and stops at
/// the first key past it.
pub fn walk(map: &KeyMap, at_ms: i64, after: Option<&Key>, spec: &ScanSpec) -> Page {
    walk_in(|lower| map.range_from(lower), at_ms, after, spec, None)
}

/// An in-order reader of (key, metadata) entries that lends each key
/// until the next call: a live map's or a snapshot's.
pub trait Entries {
    fn next_entry(&mut self) -> Option<(&[u8], Meta)>;
}

impl Entries for Iter<'_> {
    #[inline]
    fn next_entry(&mut self) -> Option<(&[u8], Meta)> {
        Iter::next_entry(self)
    }
}

impl Entries for Merged<'_> {
    #[inline]
    fn next_entry(&mut self) -> Option<(&[u8], Meta)> {
        Merged::next_entry(self)
    }
}

/// [`walk`] over a snapshot, every slot's keys.
pub fn walk_all(snap: &Snapshot, after: Option<&Key>, spec: &ScanSpec) -> Page {
    let r = snap.read();
    walk_in(|lower| r.range_from(lower), snap.at_ms, after, spec, None)
}

/// One page of a snapshot: [`walk`] that, in cluster mode, also skips the
/// keys of slots the snapshot does not show. A MATCH prefix with a complete
/// hashtag (`{user42}:*`) decides the slot of every key it visits, so the
/// slot is checked once instead of per key, and the walk stays a seek.
pub fn walk_snapshot(snap: &Snapshot, after: Option<&Key>, spec: &ScanSpec) -> Page {
    walk_snapshot_at(snap, snap.at_ms, after, spec)
}

/// [`walk_snapshot`] judging expiry at `at_ms` instead of the snapshot's
/// instant (an iteration opened inside a script, see `commands::scan`).
pub fn walk_snapshot_at(snap: &Snapshot, at_ms: i64, after: Option<&Key>, spec: &ScanSpec) -> Page {
    let r = snap.read();
    let open = |lower: Bound<&[u8]>| r.range_from(lower);
    let Some(slots) = snap.slots.as_deref() else {
        return walk_in(open, at_ms, after, spec, None);
    };
    let prefix: &[u8] = spec.pattern.as_ref().map_or(&[], |p| p.prefix());
    match prefix_slot(prefix) {
        Some(slot) if slots.contains(slot) => walk_in(open, at_ms, after, spec, None),
        Some(_) => Page {
            keys: Vec::new(),
            resume_after: None,
            examined: 0,
            expired: Vec::new(),
        },
        None => walk_in(open, at_ms, after, spec, Some(slots)),
    }
}

fn walk_in<'a, E: Entries + 'a>(
    open: impl FnOnce(Bound<&[u8]>) -> E,
    at_ms: i64,
    after: Option<&Key>,
    spec: &ScanSpec,
    slots: Option<&SlotSet>,
) -> Page {
    let prefix: &[u8] = spec.pattern.as_ref().map_or(&[], |p| p.prefix());
    let check_glob = spec.pattern.as_ref().filter(|p| !p.matches_all());
    let lower: Bound<&[u8]> = match after {
        Some(k) if k.as_bytes() >= prefix => Bound::Excluded(k.as_bytes()),
        _ if prefix.is_empty() => Bound::Unbounded,
        _ => Bound::Included(prefix),
    };
    let count = spec.count.max(1);
    let budget = spec.budget.max(1);
    let mut keys = Vec::with_capacity(count.min(1024));
    let mut expired = Vec::new();
    let mut examined = 0usize;
    let mut iter = open(lower);
    while let Some((k, m)) = iter.next_entry() {
        // An empty prefix needs no check at all (and glibc's memcmp on an
        // empty slice is not free).
        if !prefix.is_empty() && !k.starts_with(prefix) {
            break;
        }
        examined += 1;
        let matching = |k: &[u8], any_type: bool| {
            (any_type || spec.type_filter.is_none_or(|t| t == m.type_id()))
                && check_glob.is_none_or(|p| p.is_match(k))
                && slots.is_none_or(|s| s.holds_key(k))
        };
        if m.alive_at(at_ms) {
            if matching(k, false) {
                keys.push(Key::new(k));
            }
        } else if expired.len() < spec.expired_max && matching(k, spec.expired_any_type) {
            expired.push(Key::new(k));
        }
        // A page that listed as many expired keys as it may ends there:
        // the next call goes on from them, so an iteration has the server
        // expire every expired key it passes, in bounded pages.
        let expired_full = spec.expired_max > 0 && expired.len() >= spec.expired_max;
        if keys.len() >= count || examined >= budget || expired_full {
            let last = Key::new(k);
            // More to come only if a next entry exists within the prefix.
            let more = iter
                .next_entry()
                .is_some_and(|(next, _)| next.starts_with(prefix));
            let resume_after = more.then_some(last);
            return Page {
                keys,
                resume_after,
                examined,
                expired,
            };
        }
    }
    Page {
        keys,
        resume_after: None,
        examined,
        expired,
    }
}
