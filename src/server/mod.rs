//! The server layer: thin, audited wrappers over the raw module API.
//! Everything that touches server pointers, and every `unsafe` of the crate
//! (but the global allocator, `alloc.rs`, and the CPU prefetch hint,
//! `index/prefetch.rs`), lives here; the rest is plain Rust. The entry
//! points the server calls (`entry`, `mainloop`) are the only code that
//! mints the server-lock token (`locked`).
//!
//! Owns: the raw API, its types and callbacks, and the server-facing state
//! the `Module` holds in its fields (`subscribe::Subscriptions`,
//! `expiry::LoopTurns`, `latency::Latency`, `keys::NamedTypes`); of its
//! own only the module's context (`native`) and the blocked-client flag of
//! the running handler (`blocked`, per thread). May touch: the pure core
//! only (key metadata, slot sets, collection copies); what the module
//! registers (configs and their values, command docs, the router's
//! callbacks) is handed in by the layers above.

pub mod blocked;
pub mod call;
pub mod clientdb;
pub mod cmdinfo;
pub mod collcopy;
pub mod command;
pub mod configs;
pub mod deletion;
pub mod entry;
pub mod expiry;
pub mod host;
pub mod info;
pub mod keys;
pub mod latency;
pub mod locked;
pub mod mainloop;
pub mod native;
pub mod reply;
pub mod scan;
pub mod subscribe;
pub mod thread;
pub mod thread_ctx;

use redis_module::raw;
use std::ffi::CString;

pub type Ctx = *mut raw::RedisModuleCtx;

/// Fetches a module API function pointer (`None` when this server lacks it).
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: the server fills these pointers once in RedisModule_Init,
        // before any of our code runs, and never changes them afterwards;
        // we copy the Option<fn> out without creating a reference.
        unsafe { redis_module::raw::$name }
    }};
}
pub(crate) use api;

/// Bytes of a server string. The slice borrows the string: callers use it
/// only while the server keeps the string alive (the current callback).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "s is a live server string (or NULL) of the calling callback; the slice is used only while it lives"
)]
pub fn string_bytes<'a>(s: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(f) = api!(RedisModule_StringPtrLen) else {
        return &[];
    };
    if s.is_null() {
        return &[];
    }
    let mut len = 0usize;
    // SAFETY: `s` is a live RedisModuleString handed to us by the server;
    // StringPtrLen returns a pointer to its `len` bytes, valid while it lives.
    unsafe {
        let p = f(s, &mut len);
        if p.is_null() {
            return &[];
        }
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// A server string we created and free on drop.
pub struct OwnedString {
    ctx: Ctx,
    s: *mut raw::RedisModuleString,
}

impl OwnedString {
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is a live context of the calling thread (main thread or a locked thread-safe one)"
    )]
    pub fn new(ctx: Ctx, bytes: &[u8]) -> Option<Self> {
        let create = api!(RedisModule_CreateString)?;
        // SAFETY: creates a string owned by us from valid bytes.
        let s = unsafe { create(ctx, bytes.as_ptr().cast(), bytes.len()) };
        // Not `then_some`: it would build, then drop (free), a NULL string.
        (!s.is_null()).then(|| OwnedString { ctx, s })
    }

    pub fn ptr(&self) -> *mut raw::RedisModuleString {
        self.s
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeString) {
            // SAFETY: frees the string created in `new`, exactly once, with
            // the same context.
            unsafe { free(self.ctx, self.s) };
        }
    }
}

/// A string the server handed a callback (a notification's key), kept past
/// the callback: `RedisModule_HoldString` takes a reference (a static string
/// is copied). Used and released by the holder of the server lock only.
pub struct HeldString(*mut raw::RedisModuleString);

// SAFETY: a held string is only read and released by whichever thread holds
// the server lock (it lives in a `LockedCell`); the server's reference count
// is never touched without that lock.
unsafe impl Send for HeldString {}

impl HeldString {
    /// Holds `s`, a live string of the running callback (server lock held).
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "s is a live string of the running callback, the server lock held"
    )]
    pub fn hold(s: *mut raw::RedisModuleString) -> Option<Self> {
        let hold = api!(RedisModule_HoldString)?;
        // SAFETY: s is live; a NULL context takes a plain reference, released
        // in Drop.
        let h = unsafe { hold(std::ptr::null_mut(), s) };
        (!h.is_null()).then(|| HeldString(h))
    }

    pub fn ptr(&self) -> *mut raw::RedisModuleString {
        self.0
    }
}

impl Drop for HeldString {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeString) {
            // SAFETY: releases the reference taken in `hold`, exactly once,
            // under the server lock (see the type's doc).
            unsafe { free(std::ptr::null_mut(), self.0) };
        }
    }
}

/// The database selected on `ctx`.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling callback"
)]
pub fn selected_db(ctx: Ctx) -> usize {
    match api!(RedisModule_GetSelectedDb) {
        // SAFETY: ctx is the live context of the current callback.
        Some(f) => unsafe { f(ctx) }.max(0) as usize,
        None => 0,
    }
}

/// An identity of the ACL user running the command on `ctx` (a hash of its
/// name; 0 where the server cannot tell), to bind an iteration to the user
/// who opened it.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling callback"
)]
pub fn current_user(ctx: Ctx) -> u64 {
    use std::hash::{Hash, Hasher};
    let (Some(get), Some(free)) = (
        api!(RedisModule_GetCurrentUserName),
        api!(RedisModule_FreeString),
    ) else {
        return 0;
    };
    // SAFETY: ctx is the live context of the current callback; the string
    // it returns is ours, read here and freed once.
    unsafe {
        let name = get(ctx);
        if name.is_null() {
            return 0;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        string_bytes(name).hash(&mut h);
        free(ctx, name);
        h.finish()
    }
}

/// The database a notification running on `ctx` is about: the selected
/// one, except inside `EXEC` on Valkey 9.1, where the callback runs on the
/// transaction's own client and `GetSelectedDb` answers the transaction's
/// database while the event's is the client's current one (asked through
/// `GetClientInfoById`). Costs a context-flags read, and two calls in MULTI.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling callback"
)]
pub fn event_db(ctx: Ctx) -> usize {
    let selected = selected_db(ctx);
    if host::context_flags(ctx) & raw::REDISMODULE_CTX_FLAGS_MULTI == 0 {
        return selected;
    }
    let Some(get_id) = api!(RedisModule_GetClientId) else {
        return selected;
    };
    // SAFETY: ctx is the live context of the notification callback.
    let id = unsafe { get_id(ctx) };
    match clientdb::client_state(id) {
        Some((db, true)) => db as usize,
        _ => selected,
    }
}

/// Selects `db` on `ctx`; false if the server refuses.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context owned by the calling thread"
)]
pub fn select_db(ctx: Ctx, db: usize) -> bool {
    match api!(RedisModule_SelectDb) {
        // SAFETY: ctx is a live context owned by the calling thread.
        Some(f) => (unsafe { f(ctx, db as i32) }) == raw::REDISMODULE_OK as i32,
        None => false,
    }
}

/// Server wall clock, Unix milliseconds.
pub fn now_ms() -> i64 {
    match api!(RedisModule_Milliseconds) {
        // SAFETY: takes no arguments, reads the server clock.
        Some(f) => unsafe { f() },
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    }
}

/// The server's time for the running command, Unix milliseconds: frozen
/// for the whole of a MULTI/EXEC or script, as the server uses it to decide
/// expiry. Falls back to the wall clock where the API is missing (7.0).
pub fn command_time_ms() -> i64 {
    match api!(RedisModule_CachedMicroseconds) {
        // SAFETY: takes no arguments, reads the server's cached clock.
        Some(f) => (unsafe { f() }) / 1000,
        None => now_ms(),
    }
}

/// Whether the running command was called from a script or function.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn in_script(ctx: Ctx) -> bool {
    let Some(f) = api!(RedisModule_GetContextFlags) else {
        return false;
    };
    // SAFETY: ctx is the live context of the current command.
    (unsafe { f(ctx) } as u32) & raw::REDISMODULE_CTX_FLAGS_LUA != 0
}

/// Whether the client behind `ctx` may not be blocked (MULTI, Lua,
/// functions, or other contexts where the server denies blocking), or
/// should not be: during a replica's async load the server answers blocked
/// clients only once the load is over.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn blocking_denied(ctx: Ctx) -> bool {
    let Some(f) = api!(RedisModule_GetContextFlags) else {
        return true;
    };
    // SAFETY: ctx is the live context of the current command.
    let flags = unsafe { f(ctx) } as u32;
    flags
        & (raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING
            | raw::REDISMODULE_CTX_FLAGS_MULTI
            | raw::REDISMODULE_CTX_FLAGS_LUA
            | raw::REDISMODULE_CTX_FLAGS_ASYNC_LOADING)
        != 0
}

/// Number of keys in the database selected on `ctx`.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's or a locked thread-safe one)"
)]
pub fn db_size(ctx: Ctx) -> u64 {
    match api!(RedisModule_DbSize) {
        // SAFETY: ctx is a live context and the server lock is held.
        Some(f) => unsafe { f(ctx) },
        None => 0,
    }
}

/// Writes a line to the server log (`level`: "notice", "warning", ...).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling callback, or NULL (logs as the module)"
)]
pub fn log(ctx: Ctx, level: &str, msg: &str) {
    let (Some(f), Ok(level), Ok(msg)) = (
        api!(RedisModule_Log),
        CString::new(level),
        CString::new(msg.replace('\0', " ")),
    ) else {
        return;
    };
    // SAFETY: all pointers are valid NUL-terminated strings; "%s" consumes
    // exactly the one vararg we pass. A null ctx logs as the module.
    unsafe { f(ctx, level.as_ptr(), c"%s".as_ptr(), msg.as_ptr()) };
}
