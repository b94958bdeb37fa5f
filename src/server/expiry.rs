//! Asking the server how it judges a key's expiry right now, without side
//! effects. Inside a script the server judges expiry at the script's frozen
//! start time, which a module cannot read directly: `RedisModule_Milliseconds`
//! is the wall clock, and `RedisModule_CachedMicroseconds` is refreshed while
//! a script that has run past `busy-reply-threshold` lets the server answer
//! other clients. Only a key with a TTL reveals it: a key opened with
//! `NOEXPIRE` is empty when it is logically expired at the command time,
//! and `RedisModule_GetExpire` is its expiry minus that time.

use super::{api, Ctx, OwnedString};
use redis_module::raw;

/// The server's verdict on a key at the running command's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Visible with a TTL (whatever its expiry now): the command time is
    /// `now_ms` exactly.
    Alive { now_ms: i64 },
    /// Logically expired (or gone).
    Expired,
    /// Visible without a TTL, or the server cannot tell.
    Unknown,
}

use super::keys::OPEN_FLAGS;

/// Whether this server opens keys without lazy expiry (`NOEXPIRE`: Redis
/// 7.2+, Valkey), which [`judge`] needs.
pub fn supported() -> bool {
    match api!(RedisModule_GetOpenKeyModesAll) {
        // SAFETY: takes no arguments, returns a constant bit set.
        Some(f) => (unsafe { f() } as u32) & raw::REDISMODULE_OPEN_KEY_NOEXPIRE != 0,
        None => false,
    }
}

/// The server's verdict on `name` (in the database selected on `ctx`).
/// Main thread only (the server lock is held during a command).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context of the running command on the main thread (server lock held)"
)]
pub fn judge(ctx: Ctx, name: &[u8]) -> Verdict {
    let (Some(open), Some(close), Some(ktype), Some(abs), Some(rel)) = (
        api!(RedisModule_OpenKey),
        api!(RedisModule_CloseKey),
        api!(RedisModule_KeyType),
        api!(RedisModule_GetAbsExpire),
        api!(RedisModule_GetExpire),
    ) else {
        return Verdict::Unknown;
    };
    if !supported() {
        return Verdict::Unknown;
    }
    let Some(keyname) = OwnedString::new(ctx, name) else {
        return Verdict::Unknown;
    };
    // SAFETY: ctx is the live command context with the server lock held;
    // keyname lives until the end of this function; the key handle is
    // closed exactly once before returning.
    unsafe {
        let key = open(ctx, keyname.ptr(), OPEN_FLAGS as i32);
        if key.is_null() {
            return Verdict::Expired;
        }
        let at = abs(key);
        let verdict = if ktype(key) == raw::REDISMODULE_KEYTYPE_EMPTY as i32 {
            Verdict::Expired
        } else if at < 0 {
            Verdict::Unknown
        } else {
            // Visible, so the command time is at most its expiry `at`;
            // GetExpire is `at` minus the command time, never clamped here.
            Verdict::Alive {
                now_ms: at - rel(key).max(0),
            }
        };
        close(key);
        verdict
    }
}

/// Whether database `db` holds keys with a TTL (the `expires` figure of
/// `INFO keyspace`); `None` when the server cannot tell.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context of the running command on the main thread (server lock held)"
)]
pub fn db_has_ttls(ctx: Ctx, db: usize) -> Option<bool> {
    let (get, field, free) = (
        api!(RedisModule_GetServerInfo)?,
        api!(RedisModule_ServerInfoGetFieldC)?,
        api!(RedisModule_FreeServerInfo)?,
    );
    let name = std::ffi::CString::new(format!("db{db}")).ok()?;
    // SAFETY: ctx is the live command context with the server lock held;
    // the field's text is read while `data` lives, and `data` is freed
    // exactly once.
    unsafe {
        let data = get(ctx, c"keyspace".as_ptr());
        if data.is_null() {
            return None;
        }
        let v = field(data, name.as_ptr());
        let line =
            (!v.is_null()).then(|| std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned());
        free(ctx, data);
        match line {
            // A database without keys is not listed.
            None => Some(false),
            Some(l) => expires_in(&l).map(|n| n > 0),
        }
    }
}

/// The `expires` count of an `INFO keyspace` line (`keys=3,expires=1,...`).
fn expires_in(line: &str) -> Option<u64> {
    line.split(',')
        .find_map(|kv| kv.strip_prefix("expires="))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::expires_in;

    #[test]
    fn expires_of_a_keyspace_line() {
        assert_eq!(expires_in("keys=3,expires=1,avg_ttl=100"), Some(1));
        assert_eq!(
            expires_in("keys=3,expires=0,avg_ttl=0,subexpiry=0"),
            Some(0)
        );
        assert_eq!(expires_in("keys=3"), None);
    }
}
