//! Subscribing to keyspace notifications and server events, and reading
//! the payloads the server hands to their callbacks: the raw side of
//! `events.rs`.

use super::{api, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// Subscribes `cb` to the keyspace notifications in `types` (OnLoad only).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn keyspace_events(
    ctx: Ctx,
    types: c_int,
    cb: raw::RedisModuleNotificationFunc,
) -> Result<(), &'static str> {
    let sub = api!(RedisModule_SubscribeToKeyspaceEvents).ok_or("no keyspace event API")?;
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn.
    if unsafe { sub(ctx, types, cb) } != raw::REDISMODULE_OK as c_int {
        return Err("cannot subscribe to keyspace events");
    }
    Ok(())
}

/// Whether this server has the server event API.
pub fn has_server_events() -> bool {
    api!(RedisModule_SubscribeToServerEvent).is_some()
}

/// Subscribes `cb` to server event `id` (a `None` callback unsubscribes).
/// `None` without the API; `Some(false)` if the server refuses (an event it
/// does not know).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a module context live for this call: OnLoad's or a server event callback's"
)]
pub fn server_event(ctx: Ctx, id: u64, cb: raw::RedisModuleEventCallback) -> Option<bool> {
    let server = api!(RedisModule_SubscribeToServerEvent)?;
    let ev = raw::RedisModuleEvent { id, dataver: 1 };
    // SAFETY: ctx is a module context (OnLoad or a server event's); ev names
    // a server event (an unknown one is refused); a NULL callback
    // unsubscribes.
    Some(unsafe { server(ctx, ev, cb) } == raw::REDISMODULE_OK as c_int)
}

/// The event name of a notification ("set", "del", ...).
#[inline]
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "event is the name the server passed to the running notification callback (or NULL), NUL-terminated and live for the callback"
)]
pub fn event_name<'a>(event: *const c_char) -> &'a [u8] {
    if event.is_null() {
        return b"";
    }
    // SAFETY: the server passes a NUL-terminated event name that lives for
    // the callback.
    unsafe { CStr::from_ptr(event) }.to_bytes()
}

/// The database a FlushDB event names (negative: all of them), from the
/// payload the server passed to the running FlushDB callback; `None` for a
/// NULL payload.
pub fn flush_dbnum(data: *mut c_void) -> Option<i32> {
    if data.is_null() {
        return None;
    }
    // SAFETY: for FlushDB events the server passes a RedisModuleFlushInfo.
    Some(unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum })
}

/// The two databases a SwapDB event exchanges, from the payload the server
/// passed to the running SwapDB callback; `None` for a NULL payload.
pub fn swapdb_dbs(data: *mut c_void) -> Option<(i32, i32)> {
    if data.is_null() {
        return None;
    }
    // SAFETY: for SwapDB events the server passes a RedisModuleSwapDbInfo.
    let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
    Some((info.dbnum_first, info.dbnum_second))
}
