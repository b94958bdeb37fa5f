//! `Entry`: what the live map holds for a key. Its metadata and, while an
//! open snapshot may need it, a [`Stamp`] of its last change: old values
//! kept in place (issue 25).
//!
//! A key created while a snapshot was open carries its creation version
//! (snapshots older than it do not see the key); a key deleted while one
//! was open stays in its leaf as a *tombstone* with its deletion version
//! and the metadata it had (snapshots older than it still see it; every
//! live reader skips it). So the commonest changes under an open snapshot
//! cost a few bytes in the leaf the key already occupies instead of an
//! undo entry that repeats the key (see `history`). The collector strips
//! stamps, and purges tombstones, that no open snapshot can read.
//!
//! Locking: none; plain values.

use super::Meta;

/// The last change of a key, kept in place for open snapshots: none, the
/// key's creation at a version, or its deletion at a version. Encoded in
/// one `u64` (`version << 1 | deleted`, 0 for none), as leaves store it
/// (a varint: 3-5 bytes for the versions of a busy server).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Stamp(u64);

impl Stamp {
    /// No change kept.
    pub const NONE: Stamp = Stamp(0);

    /// Created at `version` (at least 1).
    #[inline]
    pub fn born(version: u64) -> Stamp {
        Stamp(version.max(1) << 1)
    }

    /// Deleted at `version` (at least 1).
    #[inline]
    pub fn dead(version: u64) -> Stamp {
        Stamp((version.max(1) << 1) | 1)
    }

    #[inline]
    pub fn is_none(self) -> bool {
        self.0 == 0
    }

    /// The version of the change kept (`None`: no change kept).
    #[inline]
    pub fn version(self) -> Option<u64> {
        (self.0 != 0).then_some(self.0 >> 1)
    }

    /// Whether the change kept is a deletion (the entry is a tombstone).
    #[inline]
    pub fn is_dead(self) -> bool {
        self.0 & 1 == 1
    }

    /// The encoded form (see the type's docs).
    #[inline]
    pub fn raw(self) -> u64 {
        self.0
    }

    /// From [`raw`](Self::raw).
    #[inline]
    pub fn from_raw(raw: u64) -> Stamp {
        Stamp(raw)
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version() {
            None => write!(f, "-"),
            Some(v) if self.is_dead() => write!(f, "dead@{v}"),
            Some(v) => write!(f, "born@{v}"),
        }
    }
}

/// A live map's value: the key's metadata (for a tombstone, what it had
/// when deleted) and its stamp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Entry {
    pub meta: Meta,
    pub stamp: Stamp,
}

impl Entry {
    /// An entry with no change kept.
    #[inline]
    pub fn plain(meta: Meta) -> Entry {
        Entry {
            meta,
            stamp: Stamp::NONE,
        }
    }

    #[inline]
    pub fn new(meta: Meta, stamp: Stamp) -> Entry {
        Entry { meta, stamp }
    }

    /// The key's metadata now (`None` for a tombstone).
    #[inline]
    pub fn alive(self) -> Option<Meta> {
        (!self.stamp.is_dead()).then_some(self.meta)
    }

    /// Whether the entry is a tombstone.
    #[inline]
    pub fn is_dead(self) -> bool {
        self.stamp.is_dead()
    }

    /// The key's metadata at a snapshot of `version`, from this entry
    /// alone: before the stamped change if it came after the version (none
    /// before a creation, the kept metadata before a deletion), else now.
    /// Returns also the version of the stamped change when it decided.
    #[inline]
    pub fn at(self, version: u64) -> (Option<Meta>, Option<u64>) {
        match self.stamp.version() {
            Some(v) if v > version => {
                let before = self.stamp.is_dead().then_some(self.meta);
                (before, Some(v))
            }
            _ => (self.alive(), None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::meta::STRING;
    use rstest::rstest;

    #[rstest]
    // (stamp, snapshot version) -> seen, deciding version
    #[case::plain(Stamp::NONE, 5, true, None)]
    #[case::born_before(Stamp::born(3), 5, true, None)]
    #[case::born_at(Stamp::born(5), 5, true, None)]
    #[case::born_after(Stamp::born(6), 5, false, Some(6))]
    #[case::dead_before(Stamp::dead(3), 5, false, None)]
    #[case::dead_after(Stamp::dead(9), 5, true, Some(9))]
    fn an_entry_answers_for_a_snapshot(
        #[case] stamp: Stamp,
        #[case] version: u64,
        #[case] seen: bool,
        #[case] decided: Option<u64>,
    ) {
        let m = Meta::plain(STRING);
        let e = Entry::new(m, stamp);
        assert_eq!(e.at(version), (seen.then_some(m), decided));
        assert_eq!(Stamp::from_raw(stamp.raw()), stamp);
        assert_eq!(e.alive().is_none(), stamp.is_dead());
    }
}
