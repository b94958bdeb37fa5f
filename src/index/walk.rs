//! One page of a snapshot iteration: walk the ordered map from a position,
//! filter by expiry, TYPE and MATCH, stop at COUNT matches or the work budget.

use super::{Key, KeyMap, Snapshot, TypeId};
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
}

/// Result of one walk.
#[derive(Debug)]
pub struct Page {
    pub keys: Vec<Key>,
    /// Position to resume after, or `None` when the iteration is complete.
    pub resume_after: Option<Key>,
    /// Entries examined (for stats).
    pub examined: usize,
}

/// Walks `map` (a snapshot taken at `at_ms`) strictly after `after`.
///
/// With a MATCH pattern that has a literal prefix, only keys with that
/// prefix are visited: the walk seeks to the prefix in O(log n) and stops at
/// the first key past it.
pub fn walk(map: &KeyMap, at_ms: i64, after: Option<&Key>, spec: &ScanSpec) -> Page {
    walk_in(map, at_ms, after, spec, None)
}

/// One page of a snapshot: [`walk`] that, in cluster mode, also skips the
/// keys of slots the snapshot does not show. A MATCH prefix with a complete
/// hashtag (`{user42}:*`) decides the slot of every key it visits, so the
/// slot is checked once instead of per key, and the walk stays a seek.
pub fn walk_snapshot(snap: &Snapshot, after: Option<&Key>, spec: &ScanSpec) -> Page {
    let Some(slots) = snap.slots.as_deref() else {
        return walk(&snap.map, snap.at_ms, after, spec);
    };
    let prefix: &[u8] = spec.pattern.as_ref().map_or(&[], |p| p.prefix());
    match prefix_slot(prefix) {
        Some(slot) if slots.contains(slot) => walk(&snap.map, snap.at_ms, after, spec),
        Some(_) => Page {
            keys: Vec::new(),
            resume_after: None,
            examined: 0,
        },
        None => walk_in(&snap.map, snap.at_ms, after, spec, Some(slots)),
    }
}

fn walk_in(
    map: &KeyMap,
    at_ms: i64,
    after: Option<&Key>,
    spec: &ScanSpec,
    slots: Option<&SlotSet>,
) -> Page {
    let prefix: &[u8] = spec.pattern.as_ref().map_or(&[], |p| p.prefix());
    let check_glob = spec.pattern.as_ref().filter(|p| !p.matches_all());
    let prefix_key;
    let lower: Bound<&Key> = match after {
        Some(k) if k.as_bytes() >= prefix => Bound::Excluded(k),
        _ if prefix.is_empty() => Bound::Unbounded,
        _ => {
            prefix_key = Key::new(prefix);
            Bound::Included(&prefix_key)
        }
    };
    let count = spec.count.max(1);
    let budget = spec.budget.max(1);
    let mut keys = Vec::with_capacity(count.min(1024));
    let mut examined = 0usize;
    // An empty prefix needs no check at all (and glibc's memcmp on an empty
    // slice is not free).
    let mut iter = map
        .range_from(lower)
        .take_while(|(k, _)| prefix.is_empty() || k.as_bytes().starts_with(prefix))
        .peekable();
    while let Some((k, m)) = iter.next() {
        examined += 1;
        let wanted = m.alive_at(at_ms)
            && spec.type_filter.is_none_or(|t| t == m.type_id())
            && check_glob.is_none_or(|p| p.is_match(k.as_bytes()))
            && slots.is_none_or(|s| s.holds_key(k.as_bytes()));
        if wanted {
            keys.push(k.clone());
        }
        if keys.len() >= count || examined >= budget {
            let resume_after = iter.peek().map(|_| k.clone());
            return Page {
                keys,
                resume_after,
                examined,
            };
        }
    }
    Page {
        keys,
        resume_after: None,
        examined,
    }
}
