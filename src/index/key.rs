//! `Key`: a compact, cheaply clonable byte string for index entries.
//!
//! Keys up to [`INLINE_CAP`] bytes live inline (no heap allocation, clone is a
//! 24-byte copy); longer keys share one reference-counted allocation. Cloning
//! matters because the persistent index copies B-tree leaves when a snapshot
//! shares them (see docs/DESIGN.md).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Longest key stored without a heap allocation.
pub const INLINE_CAP: usize = 22;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE_CAP] },
    Heap(Arc<[u8]>),
}

/// An immutable binary key (never assumed to be UTF-8).
#[derive(Clone)]
pub struct Key(Repr);

impl Key {
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_CAP {
            let mut buf = [0u8; INLINE_CAP];
            buf[..bytes.len()].copy_from_slice(bytes);
            Key(Repr::Inline {
                len: bytes.len() as u8,
                buf,
            })
        } else {
            Key(Repr::Heap(Arc::from(bytes)))
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as usize],
            Repr::Heap(a) => a,
        }
    }

    /// Bytes this key owns on the heap (0 when inline).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(a) => a.len() + 2 * std::mem::size_of::<usize>(),
        }
    }
}

impl From<&[u8]> for Key {
    fn from(b: &[u8]) -> Self {
        Key::new(b)
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Key {
    /// Two inline keys compare by their length and padded words (no
    /// `memcmp` call).
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Inline { len: la, buf: a }, Repr::Inline { len: lb, buf: b }) => {
                la == lb && words(a) == words(b)
            }
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}
impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
/// The inline buffer as three big-endian words (the last zero-padded):
/// fixed-size loads and byte swaps, no branches and no memcpy.
#[inline]
fn words(buf: &[u8; INLINE_CAP]) -> (u128, u64) {
    let head = buf
        .first_chunk::<16>()
        .map_or(0, |c| u128::from_be_bytes(*c));
    let tail = buf.last_chunk::<8>().map_or(0, |c| u64::from_be_bytes(*c));
    // Bytes 16..22 of the buffer, then two zero bytes.
    (head, tail << 16)
}

/// A key being searched for, with the word form of its first
/// [`INLINE_CAP`] bytes computed once, so comparing it with many inline keys
/// (a branch's separators) costs a few integer compares each instead of a
/// `memcmp` call.
pub struct KeyProbe<'a> {
    bytes: &'a [u8],
    /// Words of the zero-padded bytes, when they fit inline.
    words: Option<(u128, u64)>,
}

impl<'a> KeyProbe<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        let words = (bytes.len() <= INLINE_CAP).then(|| {
            let mut buf = [0u8; INLINE_CAP];
            buf[..bytes.len()].copy_from_slice(bytes);
            words(&buf)
        });
        KeyProbe { bytes, words }
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl Key {
    /// `self <= probe` in byte order.
    #[inline]
    pub fn le(&self, probe: &KeyProbe<'_>) -> bool {
        match (&self.0, probe.words) {
            (Repr::Inline { len, buf }, Some(w)) => {
                (words(buf), *len as usize) <= (w, probe.bytes.len())
            }
            _ => self.as_bytes() <= probe.bytes,
        }
    }
}

impl Ord for Key {
    /// Byte order. Two inline keys compare as big-endian words of their
    /// zero-padded buffers, then by length (equal padded buffers mean
    /// one key is the other followed by zero bytes): no call to memcmp on
    /// the hot path of every index lookup.
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            (Repr::Inline { len: la, buf: a }, Repr::Inline { len: lb, buf: b }) => {
                words(a).cmp(&words(b)).then_with(|| la.cmp(lb))
            }
            _ => self.as_bytes().cmp(other.as_bytes()),
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn key_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
    }

    #[rstest]
    #[case(b"")]
    #[case(b"a")]
    #[case(b"exactly-22-bytes-long!")]
    #[case(b"twenty-three bytes long")]
    #[case(b"\x00\xff binary \x80 key that is definitely longer than inline")]
    fn round_trips(#[case] bytes: &[u8]) {
        let k = Key::new(bytes);
        assert_eq!(k.as_bytes(), bytes);
        assert_eq!(k.clone(), k);
        assert_eq!(k.heap_bytes() > 0, bytes.len() > INLINE_CAP);
    }

    proptest::proptest! {
        /// The word-wise comparison is exactly byte order.
        #[test]
        fn fast_compare_is_byte_order(a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30),
                                      b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..30)) {
            proptest::prop_assert_eq!(Key::new(&a).cmp(&Key::new(&b)), a.cmp(&b));
        }

        #[test]
        fn fast_equality_is_byte_equality(a in proptest::collection::vec(0u8..2, 0..26),
                                          b in proptest::collection::vec(0u8..2, 0..26)) {
            proptest::prop_assert_eq!(Key::new(&a) == Key::new(&b), a == b);
        }

        #[test]
        fn fast_compare_with_zero_tails(a in proptest::collection::vec(0u8..3, 0..22), z in 0usize..4) {
            let mut b = a.clone();
            b.extend(std::iter::repeat_n(0u8, z));
            proptest::prop_assert_eq!(Key::new(&a).cmp(&Key::new(&b)), a.cmp(&b));
        }
    }

    proptest::proptest! {
        /// `le` against a probe is byte order, inline or not.
        #[test]
        fn probe_compare_is_byte_order(a in proptest::collection::vec(0u8..3, 0..30),
                                       b in proptest::collection::vec(0u8..3, 0..30)) {
            proptest::prop_assert_eq!(Key::new(&a).le(&KeyProbe::new(&b)), a <= b);
        }
    }

    #[test]
    fn orders_like_byte_slices_across_representations() {
        let mut v: Vec<Vec<u8>> = vec![
            b"b".to_vec(),
            b"a".repeat(30),
            b"a".to_vec(),
            b"\xff".to_vec(),
            b"a".repeat(22),
            Vec::new(),
        ];
        let mut keys: Vec<Key> = v.iter().map(|b| Key::new(b)).collect();
        v.sort();
        keys.sort();
        let back: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(back, v);
    }
}
