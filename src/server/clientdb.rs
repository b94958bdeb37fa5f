//! The server side of the Valkey 8 client-database workaround
//! (`keyspace::clientdb` decides): registering a command filter, reading
//! the filtered command and its client, and selecting a database back on
//! the executing client.

use super::{api, Ctx};
use redis_module::raw;

/// Registers `filter` (the router's `entry::command_filter::<F>`) as a
/// command filter (OnLoad); false if the server lacks what the workaround
/// needs.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn register_filter(ctx: Ctx, filter: raw::RedisModuleCommandFilterFunc) -> bool {
    let Some(register) = api!(RedisModule_RegisterCommandFilter) else {
        return false;
    };
    if api!(RedisModule_CommandFilterGetClientId).is_none()
        || api!(RedisModule_GetClientInfoById).is_none()
        || api!(RedisModule_CommandFilterArgGet).is_none()
    {
        return false;
    }
    // SAFETY: ctx is the OnLoad context; the callback is a valid extern fn
    // that lives as long as the module (which is never unloaded).
    let f = unsafe { register(ctx, filter, raw::REDISMODULE_CMDFILTER_NOSELF as i32) };
    !f.is_null()
}

/// The command a filter sees (valid during the filter callback only).
pub struct FilterCall(pub(super) *mut raw::RedisModuleCommandFilterCtx);

impl FilterCall {
    /// The argument at `i` (the command name at 0; empty if missing).
    pub fn arg(&self, i: usize) -> &[u8] {
        let Some(arg) = api!(RedisModule_CommandFilterArgGet) else {
            return &[];
        };
        // SAFETY: the filter context is live during the callback; a
        // missing argument is NULL (read as empty).
        super::string_bytes(unsafe { arg(self.0, i as i32) })
    }

    /// The id of the client running the command.
    pub fn client_id(&self) -> u64 {
        match api!(RedisModule_CommandFilterGetClientId) {
            // SAFETY: the filter context is live during the callback.
            Some(f) => unsafe { f(self.0) },
            None => 0,
        }
    }
}

/// The client's database and whether it is in MULTI (`None`: a client the
/// server does not list, such as a script's own).
pub fn client_state(id: u64) -> Option<(u64, bool)> {
    let get = api!(RedisModule_GetClientInfoById)?;
    let mut ci = raw::RedisModuleClientInfo {
        version: 1,
        flags: 0,
        id: 0,
        addr: [0; 46],
        port: 0,
        db: 0,
    };
    // SAFETY: `ci` is a V1 client info structure owned by us; the server
    // fills it for client `id` (on the main thread, in a command filter).
    let ok = unsafe { get((&mut ci as *mut raw::RedisModuleClientInfo).cast(), id) };
    (ok == raw::REDISMODULE_OK as i32).then_some((
        u64::from(ci.db),
        ci.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0,
    ))
}

/// The id of the client of `ctx` (0 when the server does not say).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the live context of the running notification callback"
)]
pub fn client_of(ctx: Ctx) -> u64 {
    match api!(RedisModule_GetClientId) {
        // SAFETY: ctx is the live context of the notification callback.
        Some(f) => unsafe { f(ctx) },
        None => 0,
    }
}

/// The name of the command the client of `ctx` runs (inside `EXEC`, the
/// queued command being executed); empty when the server does not say.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the live context of the running notification callback"
)]
pub fn current_command(ctx: Ctx) -> Vec<u8> {
    let Some(f) = api!(RedisModule_GetCurrentCommandName) else {
        return vec![];
    };
    // SAFETY: ctx is live; the server returns NULL or a C string of the
    // running command, valid during this callback (copied out here).
    let name = unsafe { f(ctx) };
    if name.is_null() {
        return vec![];
    }
    // SAFETY: a non-NULL, NUL-terminated C string (above).
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_bytes()
        .to_vec()
}

/// Whether `key` exists in database `db`, read through the client of `ctx`
/// (selected on `db` for the read: the caller selects its database back
/// after). No touch, no expiry, no statistics.
pub fn exists_in(ctx: Ctx, db: u64, key: &[u8]) -> bool {
    if !super::select_db(ctx, db as usize) {
        return false;
    }
    super::OwnedString::new(ctx, key).is_some_and(|k| super::keys::exists(ctx, k.ptr()))
}

/// Selects `db` on the client of `ctx` if it is `client` and is elsewhere.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the live context of the running notification callback"
)]
pub fn select_back(ctx: Ctx, client: u64, db: usize) {
    let Some(get_id) = api!(RedisModule_GetClientId) else {
        return;
    };
    // SAFETY: ctx is the live context of the notification callback.
    if unsafe { get_id(ctx) } != client {
        return;
    }
    if super::selected_db(ctx) != db {
        super::select_db(ctx, db);
    }
}
