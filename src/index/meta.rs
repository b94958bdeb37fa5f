//! `Meta`: what the index remembers about a key (its type and absolute expiry),
//! packed into 8 bytes.

/// Type of a key. Built-in types have fixed ids; module types are interned
/// names (see [`TypeNames`]) with ids from [`FIRST_MODULE_TYPE`].
pub type TypeId = u8;

pub const STRING: TypeId = 0;
pub const LIST: TypeId = 1;
pub const SET: TypeId = 2;
pub const ZSET: TypeId = 3;
pub const HASH: TypeId = 4;
pub const STREAM: TypeId = 5;
pub const FIRST_MODULE_TYPE: TypeId = 8;

/// Names accepted by `TYPE`, as `TYPE key` prints them.
pub const BUILTIN_NAMES: [(&str, TypeId); 6] = [
    ("string", STRING),
    ("list", LIST),
    ("set", SET),
    ("zset", ZSET),
    ("hash", HASH),
    ("stream", STREAM),
];

/// Absolute expiry in Unix milliseconds; `None` for a persistent key.
pub type ExpireAt = Option<i64>;

const EXPIRE_BITS: u32 = 56;
const EXPIRE_MASK: u64 = (1 << EXPIRE_BITS) - 1;

/// Type and expiry of one key. `expire` is stored as `ms + 1` (0 = none) in the
/// low 56 bits, good until the year 2^56 ms ≈ 2.28 million AD.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Meta(u64);

impl Meta {
    pub fn new(ty: TypeId, expire: ExpireAt) -> Self {
        let e = match expire {
            // Negative or absurd values clamp into range instead of wrapping.
            Some(ms) => (ms.max(0) as u64).min(EXPIRE_MASK - 1) + 1,
            None => 0,
        };
        Meta(((ty as u64) << EXPIRE_BITS) | e)
    }

    /// A key of type `ty` without expiry (usable in constants).
    pub const fn plain(ty: TypeId) -> Self {
        Meta((ty as u64) << EXPIRE_BITS)
    }

    #[inline]
    pub fn type_id(self) -> TypeId {
        (self.0 >> EXPIRE_BITS) as TypeId
    }

    #[inline]
    pub fn expire_at(self) -> ExpireAt {
        match self.0 & EXPIRE_MASK {
            0 => None,
            e => Some((e - 1) as i64),
        }
    }

    /// The expiry field as stored (`ms + 1`, 0 = none): 56 bits.
    #[inline]
    pub(crate) fn raw_expire(self) -> u64 {
        self.0 & EXPIRE_MASK
    }

    /// Rebuilds a meta from [`type_id`](Self::type_id) and
    /// [`raw_expire`](Self::raw_expire).
    #[inline]
    pub(crate) fn from_raw(ty: TypeId, raw_expire: u64) -> Self {
        Meta(((ty as u64) << EXPIRE_BITS) | (raw_expire & EXPIRE_MASK))
    }

    /// Whether the key was still alive at `now_ms`. Like the server, a key
    /// is expired only once the clock is strictly past its expiry time.
    #[inline]
    pub fn alive_at(self, now_ms: i64) -> bool {
        match self.expire_at() {
            None => true,
            Some(at) => now_ms <= at,
        }
    }
}

impl std::fmt::Debug for Meta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Meta(type={}, expire={:?})",
            self.type_id(),
            self.expire_at()
        )
    }
}

/// Interned module type names (`TYPE` output such as `ReJSON-RL`).
///
/// Locking: callers wrap it in a mutex; it is only written on the main thread
/// when a key of a new module type is first seen.
#[derive(Default, Debug, Clone)]
pub struct TypeNames {
    modules: Vec<Vec<u8>>,
}

impl TypeNames {
    /// Id of a module type name, interning it on first sight. `None` when
    /// the id space is exhausted (the key is then indexed without a type
    /// filter match for module names).
    pub fn intern(&mut self, name: &[u8]) -> Option<TypeId> {
        if let Some(i) = self.modules.iter().position(|n| n == name) {
            return Some(FIRST_MODULE_TYPE + i as u8);
        }
        if self.modules.len() >= (u8::MAX - FIRST_MODULE_TYPE) as usize {
            return None;
        }
        self.modules.push(name.to_vec());
        Some(FIRST_MODULE_TYPE + (self.modules.len() - 1) as u8)
    }

    /// Resolves a `TYPE` option: built-ins case-insensitively, module types
    /// by exact (case-insensitive) name among those seen so far.
    pub fn lookup(&self, name: &[u8]) -> Option<TypeId> {
        BUILTIN_NAMES
            .iter()
            .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            .map(|(_, id)| *id)
            .or_else(|| {
                self.modules
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(name))
                    .map(|i| FIRST_MODULE_TYPE + i as u8)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(STRING, None)]
    #[case(HASH, Some(0))]
    #[case(STREAM, Some(1_700_000_000_123))]
    #[case(FIRST_MODULE_TYPE + 3, Some(i64::MAX / 4096))]
    fn packs_and_unpacks(#[case] ty: TypeId, #[case] exp: ExpireAt) {
        let m = Meta::new(ty, exp);
        assert_eq!(m.type_id(), ty);
        assert_eq!(m.expire_at(), exp);
        assert_eq!(std::mem::size_of::<Meta>(), 8);
    }

    #[rstest]
    #[case(None, 5, true)]
    #[case(Some(10), 9, true)]
    #[case(Some(10), 10, true)]
    #[case(Some(10), 11, false)]
    fn alive_at_matches_server_rule(#[case] exp: ExpireAt, #[case] now: i64, #[case] alive: bool) {
        assert_eq!(Meta::new(STRING, exp).alive_at(now), alive);
    }

    #[rstest]
    #[case(b"string", Some(STRING))]
    #[case(b"HASH", Some(HASH))]
    #[case(b"ZSet", Some(ZSET))]
    #[case(b"ReJSON-RL", Some(FIRST_MODULE_TYPE))]
    #[case(b"rejson-rl", Some(FIRST_MODULE_TYPE))]
    #[case(b"nosuchtype", None)]
    fn type_lookup(#[case] name: &[u8], #[case] id: Option<TypeId>) {
        let mut names = TypeNames::default();
        assert_eq!(names.intern(b"ReJSON-RL"), Some(FIRST_MODULE_TYPE));
        assert_eq!(names.intern(b"ReJSON-RL"), Some(FIRST_MODULE_TYPE));
        assert_eq!(names.lookup(name), id);
    }
}
