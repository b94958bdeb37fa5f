//! Asking the server how it judges a key's expiry right now, without side
//! effects. Inside a script the server judges expiry at the script's frozen
//! start time, which a module cannot read directly: `RedisModule_Milliseconds`
//! is the wall clock, and `RedisModule_CachedMicroseconds` is refreshed while
//! a script that has run past `busy-reply-threshold` lets the server answer
//! other clients. Only a key with a TTL reveals it: a key opened with
//! `NOEXPIRE` is empty when it is logically expired at the command time,
//! and `RedisModule_GetExpire` is its expiry minus that time.

use super::locked::{LockedCell, ServerLock};
use super::{api, Ctx, OwnedString};
use redis_module::raw;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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

/// Has the server expire each of `names` that has expired, as its own
/// lookups do (lazy expiry: deleted and propagated on a primary, the
/// `expired` event fired; a replica only hides it), in the database
/// selected on `ctx`. No LRU/LFU touch, no keyspace hit or miss. A key
/// that was written again meanwhile is left alone: only the server judges.
/// Main thread only (the server lock is held during a callback).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of a callback on the main thread (server lock held)"
)]
pub fn expire_if_needed<'a>(ctx: Ctx, names: impl Iterator<Item = &'a [u8]>) {
    let (Some(open), Some(close)) = (api!(RedisModule_OpenKey), api!(RedisModule_CloseKey)) else {
        return;
    };
    let flags = raw::REDISMODULE_READ
        | raw::REDISMODULE_OPEN_KEY_NOTOUCH
        | raw::REDISMODULE_OPEN_KEY_NONOTIFY
        | raw::REDISMODULE_OPEN_KEY_NOSTATS;
    for name in names {
        let Some(keyname) = OwnedString::new(ctx, name) else {
            continue;
        };
        // SAFETY: ctx is live with the server lock held; keyname lives
        // until the end of the iteration; the handle is closed once.
        unsafe {
            let key = open(ctx, keyname.ptr(), flags as i32);
            if !key.is_null() {
                close(key);
            }
        }
    }
}

/// The event loop's turns, followed for a floor on the frozen clock of
/// scripts (a field of the `Module`; `subscribe::Subscriptions` subscribes
/// them on first use): the wall clock (Unix µs) and the monotonic instant
/// when the last turn began.
///
/// Locking: main thread only (`LockedCell`): written by the event loop's
/// event, read by SNAPSHOT.SCAN.
#[derive(Default)]
pub struct LoopTurns {
    last: LockedCell<Option<(i64, Instant)>>,
}

impl LoopTurns {
    /// The event loop's event: a turn begins at its after-sleep subevent,
    /// which the server fires only from its main loop, never while a busy
    /// script or a load lets it process events: every command run from now
    /// on, and every script's frozen clock, is at or after this instant.
    pub fn on_event(&self, lock: &ServerLock, subevent: u64) {
        if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_AFTER_SLEEP {
            let wall = wall_us();
            self.last.replace(lock, Some((wall, Instant::now())));
        }
    }

    /// A lower bound (Unix ms) on the frozen clock of the running script:
    /// the start of the event loop's turn in which it began (`None` before
    /// the first turn seen, e.g. while the server loads its data at
    /// startup).
    pub fn script_clock_floor_ms(&self, lock: &ServerLock) -> Option<i64> {
        let (turn_wall, turn_at) = self.last.get(lock)?;
        let wall = wall_us();
        let mono = turn_at.elapsed().as_micros() as i64;
        Some(turn_floor_ms((turn_wall, 0), (wall, mono)))
    }
}

/// The wall clock, Unix µs (0 if it is before the epoch).
fn wall_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The floor of [`LoopTurns::script_clock_floor_ms`] from the wall and
/// monotonic clocks (µs) at the turn's start and now: the turn's wall time in ms,
/// less 1 ms, less whatever the wall clock fell behind the monotonic clock
/// since (a step back of the system clock, or slewing), so that it stays a
/// lower bound wherever in between the step happened.
pub fn turn_floor_ms(turn: (i64, i64), now: (i64, i64)) -> i64 {
    let wall_elapsed = now.0.saturating_sub(turn.0);
    let mono_elapsed = now.1.saturating_sub(turn.1);
    let fell_behind = mono_elapsed.saturating_sub(wall_elapsed).max(0);
    turn.0.saturating_sub(fell_behind).div_euclid(1000) - 1
}

/// The server's `busy-reply-threshold` (ms): a script that has run for
/// less never lets the server process events, so its frozen clock is the
/// server's cached clock. `None` if the server cannot tell.
pub fn busy_threshold_ms(ctx: Ctx) -> Option<i64> {
    let v = super::host::config_get(ctx, c"busy-reply-threshold")?;
    std::str::from_utf8(&v).ok()?.trim().parse().ok()
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
    use super::{expires_in, turn_floor_ms};

    #[test]
    fn the_turn_floor_is_a_lower_bound_whatever_the_clock_did() {
        // Clocks in step: the turn's ms, less one.
        assert_eq!(
            turn_floor_ms((10_500_700, 0), (10_900_000, 399_300)),
            10_499
        );
        // The wall clock stepped forward: still the turn's time.
        assert_eq!(turn_floor_ms((10_500_700, 0), (20_000_000, 1_000)), 10_499);
        // It fell 3 ms behind: lowered by as much.
        assert_eq!(turn_floor_ms((10_500_700, 0), (10_500_700, 3_000)), 10_496);
    }

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
