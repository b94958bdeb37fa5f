//! Learning the truth about a key from the server, without side effects:
//! no LRU/LFU touch, no keyspace-miss event, no stats, no lazy expiry.

use super::call::CallReply;
use super::{api, Ctx};
use crate::index::meta::{self, TypeId};
use redis_module::raw;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A key's type as the server reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Builtin(TypeId),
    /// A module type (or a server type newer than this module knows), by
    /// the name `TYPE key` prints.
    Named(Arc<[u8]>),
}

/// What a probe found: the key's kind and absolute expiry (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub expire: Option<i64>,
}

/// How the module opens a key it only reads: no side effects (no LRU/LFU
/// touch, no keyspace-miss event, no stats, no lazy expiry or field reclaim).
pub(crate) const OPEN_FLAGS: u32 = raw::REDISMODULE_READ
    | raw::REDISMODULE_OPEN_KEY_NOTOUCH
    | raw::REDISMODULE_OPEN_KEY_NONOTIFY
    | raw::REDISMODULE_OPEN_KEY_NOSTATS
    | raw::REDISMODULE_OPEN_KEY_NOEXPIRE
    | raw::REDISMODULE_OPEN_KEY_NOEFFECTS;

/// Names of non-builtin key types, by (server key type, module type
/// pointer): what `TYPE` answered, asked once per type. A field of the
/// module's state (`state::Shared::named_types`), handed to each probe.
///
/// Locking: one mutex, held for a lookup or an insert (never while the
/// server is asked).
#[derive(Default)]
pub struct NamedTypes(Mutex<NameMap>);

/// A type name by (server key type, module type pointer).
type NameMap = HashMap<(i32, usize), Arc<[u8]>>;

impl NamedTypes {
    fn lock(&self) -> std::sync::MutexGuard<'_, NameMap> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Looks `keyname` up in the database selected on `ctx`. Must run with the
/// server lock held (a callback on the main thread, or a locked thread-safe
/// context). `None` when the key does not exist (or is logically expired).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx and keyname are live handles of the calling callback (the server lock is held)"
)]
pub fn probe(ctx: Ctx, keyname: *mut raw::RedisModuleString, names: &NamedTypes) -> Option<Found> {
    let (open, close, ktype) = (
        api!(RedisModule_OpenKey)?,
        api!(RedisModule_CloseKey)?,
        api!(RedisModule_KeyType)?,
    );
    // SAFETY: ctx and keyname are live for this callback and the server lock
    // is held; the key handle is closed before returning.
    let key = unsafe { open(ctx, keyname, OPEN_FLAGS as i32) };
    if key.is_null() {
        return None;
    }
    let found = probe_open(ctx, keyname, key, ktype, names);
    // SAFETY: key was opened above and is closed exactly once.
    unsafe { close(key) };
    found
}

/// Whether `keyname` exists in the database selected on `ctx` (opened
/// without touching it). Server lock held.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx and keyname are live handles of the calling callback (the server lock is held)"
)]
pub fn exists(ctx: Ctx, keyname: *mut raw::RedisModuleString) -> bool {
    let (Some(open), Some(close)) = (api!(RedisModule_OpenKey), api!(RedisModule_CloseKey)) else {
        return false;
    };
    // SAFETY: ctx and keyname are live for this callback and the server lock
    // is held; the key handle is closed before returning.
    unsafe {
        let key = open(ctx, keyname, OPEN_FLAGS as i32);
        if key.is_null() {
            return false;
        }
        close(key);
    }
    true
}

/// Like [`probe`], for a key name the server may have allocated on its
/// stack (the "loaded" notification during RDB load): OpenKey would retain
/// the name, so probe through a heap copy instead.
pub fn probe_copy(
    ctx: Ctx,
    keyname: *mut raw::RedisModuleString,
    names: &NamedTypes,
) -> Option<Found> {
    let copy = super::OwnedString::new(ctx, super::string_bytes(keyname))?;
    probe(ctx, copy.ptr(), names)
}

/// Whether the collection at `keyname` is kept in a compact encoding
/// (`listpack`, `ziplist`, `intset`: the server's `*-max-listpack-entries`
/// and `set-max-intset-entries` as configured now), which native HSCAN,
/// SSCAN and ZSCAN return whole in one call whatever the COUNT. `None`: the
/// server did not say (a missing key, a refused call).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx and keyname are live handles of the calling command (the server lock is held)"
)]
pub fn compact(ctx: Ctx, keyname: *mut raw::RedisModuleString) -> Option<bool> {
    let call = api!(RedisModule_Call)?;
    // SAFETY: the server lock is held; "cs" consumes one C string and one
    // server string, both live. OBJECT ENCODING looks the key up without
    // touching it (no LRU/LFU update, no keyspace event).
    let r = unsafe {
        call(
            ctx,
            c"OBJECT".as_ptr(),
            c"cs".as_ptr(),
            c"ENCODING".as_ptr(),
            keyname,
        )
    };
    let r = CallReply::new(r)?;
    let enc = r.string()?;
    Some(matches!(enc, b"listpack" | b"ziplist" | b"intset"))
}

/// Number of elements of the value at `keyname` (0 when missing).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx and keyname are live handles of the calling callback (the server lock is held)"
)]
pub fn value_len(ctx: Ctx, keyname: *mut raw::RedisModuleString) -> usize {
    let (Some(open), Some(close), Some(len)) = (
        api!(RedisModule_OpenKey),
        api!(RedisModule_CloseKey),
        api!(RedisModule_ValueLength),
    ) else {
        return 0;
    };
    // SAFETY: ctx/keyname are live and the server lock is held; the key
    // handle is closed before returning.
    unsafe {
        let key = open(ctx, keyname, OPEN_FLAGS as i32);
        if key.is_null() {
            return 0;
        }
        let n = len(key);
        close(key);
        n
    }
}

/// Reads kind and expiry from an already-open key handle (also used by the
/// backfill, which gets handles from RedisModule_Scan).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx, keyname and key are live handles of the calling callback (RedisModule_Scan's, server lock held)"
)]
pub fn probe_open(
    ctx: Ctx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    ktype: unsafe extern "C" fn(*mut raw::RedisModuleKey) -> i32,
    names: &NamedTypes,
) -> Option<Found> {
    // SAFETY: key is a live, open key handle.
    let t = unsafe { ktype(key) };
    let kind = match t as isize {
        raw::REDISMODULE_KEYTYPE_EMPTY => return None,
        raw::REDISMODULE_KEYTYPE_STRING => Kind::Builtin(meta::STRING),
        raw::REDISMODULE_KEYTYPE_LIST => Kind::Builtin(meta::LIST),
        raw::REDISMODULE_KEYTYPE_HASH => Kind::Builtin(meta::HASH),
        raw::REDISMODULE_KEYTYPE_SET => Kind::Builtin(meta::SET),
        raw::REDISMODULE_KEYTYPE_ZSET => Kind::Builtin(meta::ZSET),
        raw::REDISMODULE_KEYTYPE_STREAM => Kind::Builtin(meta::STREAM),
        _ => Kind::Named(named_type(ctx, keyname, key, t, names)?),
    };
    Some(Found {
        kind,
        expire: expire_of(key),
    })
}

/// The absolute expiry (Unix ms) of an open key handle, if it has one.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "key is a live, open key handle of the calling callback (server lock held)"
)]
pub fn expire_of(key: *mut raw::RedisModuleKey) -> Option<i64> {
    let abs = if let Some(f) = api!(RedisModule_GetAbsExpire) {
        // SAFETY: key is a live, open key handle.
        unsafe { f(key) }
    } else {
        let f = api!(RedisModule_GetExpire)?;
        // SAFETY: key is a live, open key handle.
        let rel = unsafe { f(key) };
        if rel < 0 {
            rel
        } else {
            super::now_ms() + rel
        }
    };
    (abs >= 0).then_some(abs)
}

fn named_type(
    ctx: Ctx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    ktype: i32,
    names: &NamedTypes,
) -> Option<Arc<[u8]>> {
    let ptr = if ktype as isize == raw::REDISMODULE_KEYTYPE_MODULE {
        match api!(RedisModule_ModuleTypeGetType) {
            // SAFETY: key is a live handle of a module-typed key.
            Some(f) => (unsafe { f(key) }) as usize,
            None => 0,
        }
    } else {
        0
    };
    let cached = names.lock().get(&(ktype, ptr)).cloned();
    if cached.is_some() {
        return cached;
    }
    // Not under our lock: TYPE may fire a notification that re-enters us.
    let name: Arc<[u8]> = Arc::from(call_type(ctx, keyname)?);
    names.lock().insert((ktype, ptr), Arc::clone(&name));
    Some(name)
}

/// `TYPE key` through RedisModule_Call (read-only; the key is known alive).
fn call_type(ctx: Ctx, keyname: *mut raw::RedisModuleString) -> Option<Vec<u8>> {
    let call = api!(RedisModule_Call)?;
    // SAFETY: ctx/keyname are live; "s" consumes exactly one
    // RedisModuleString vararg. The reply is owned (and freed) by CallReply.
    let reply = CallReply::new(unsafe { call(ctx, c"TYPE".as_ptr(), c"s".as_ptr(), keyname) })?;
    reply
        .string()
        .filter(|n| !n.is_empty() && *n != b"none")
        .map(<[u8]>::to_vec)
}

/// Smallest field TTL of the hash at `keyname`: `Some(None)` when no field
/// has one, `None` when this server cannot tell (no API).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx and keyname are live handles of the calling callback (the server lock is held)"
)]
pub fn hash_min_field_expire(
    ctx: Ctx,
    keyname: *mut raw::RedisModuleString,
) -> Option<Option<i64>> {
    let (open, close, min) = (
        api!(RedisModule_OpenKey)?,
        api!(RedisModule_CloseKey)?,
        api!(RedisModule_HashFieldMinExpire)?,
    );
    // SAFETY: ctx/keyname are live and the server lock is held; the key
    // handle is closed before returning.
    unsafe {
        let key = open(ctx, keyname, OPEN_FLAGS as i32);
        if key.is_null() {
            return Some(None);
        }
        let t = min(key);
        close(key);
        Some((t >= 0).then_some(t))
    }
}

/// Whether database `db` may hold hashes with field TTLs, from the
/// `keys_with_volatile_items` figure of `INFO keyspace` (Valkey 9+) or its
/// `subexpiry` (Redis 7.4+, which has no `HashFieldMinExpire` before 8.0).
/// `true` when the server does not say.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's or a locked thread-safe one)"
)]
pub fn db_may_have_field_ttls(ctx: Ctx, db: usize) -> bool {
    let Some(call) = api!(RedisModule_Call) else {
        return true;
    };
    // SAFETY: the server lock is held; "c" consumes one C string. The reply
    // is owned (and freed) by CallReply.
    let reply =
        CallReply::new(unsafe { call(ctx, c"INFO".as_ptr(), c"c".as_ptr(), c"keyspace".as_ptr()) });
    let text = reply
        .as_ref()
        .and_then(CallReply::string)
        .map(|t| String::from_utf8_lossy(t).into_owned());
    let Some(text) = text else { return true };
    let prefix = format!("db{db}:");
    match text.lines().find_map(|l| l.strip_prefix(prefix.as_str())) {
        // No line: the database is empty.
        None => false,
        Some(fields) => fields
            .split(',')
            .find_map(|kv| {
                kv.strip_prefix("keys_with_volatile_items=")
                    .or_else(|| kv.strip_prefix("subexpiry="))
            })
            .is_none_or(|n| n.trim() != "0"),
    }
}
