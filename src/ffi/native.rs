//! The raw side of `native` (serving SCAN, KEYS, HSCAN, SSCAN, ZSCAN from
//! snapshots): the command-filter step that routes a native command to its
//! module command, and the call of the native command itself.

use super::call::CallReply;
use super::{api, string_bytes, Ctx};
use crate::native::mode::{self, Native};
use redis_module::raw;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A detached context made at load, used only on the main thread inside
/// the command filter: RM_GetClientUserNameById needs a context (it
/// registers the string for automatic memory when the context asks for
/// it, which this one never does), and a filter has none. Never freed (the
/// module is never unloaded).
static FILTER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// The filter's entry: routes the call when the mode or an issued cursor
/// asks for it. One relaxed load when the mode was never on.
pub fn on_command(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let mode_bits = crate::config::SERVE_NATIVE.load(Ordering::Relaxed);
    let Some(m) = crate::state::try_get() else {
        return;
    };
    if m.native.watching(mode_bits) {
        route(fctx, mode_bits, true);
    }
}

/// Makes [`FILTER_CTX`] (OnLoad).
pub fn init() {
    if let Some(d) = super::thread_ctx::Detached::new() {
        FILTER_CTX.store(d.ctx(), Ordering::Relaxed);
        std::mem::forget(d);
    }
}

/// The filter step (main thread, inside the module's command filter): when
/// `mode` serves the command in `fctx`, rewrites its name to the module
/// command, unless the client is in MULTI, is a script's or a module's
/// own client, or its user may not run the module command (then the native
/// command runs, with the server's own ACL check and replies). Where the
/// server cannot tell the filter which client runs the command (Redis 7.0),
/// every call is rewritten: the module command falls back to the native
/// one inside MULTI and scripts itself.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "fctx is the live filter context the server passed to the module's command filter"
)]
pub fn route(fctx: *mut raw::RedisModuleCommandFilterCtx, mode_bits: i64, ever: bool) {
    let Some(arg) = api!(RedisModule_CommandFilterArgGet) else {
        return;
    };
    // SAFETY: fctx is the live filter context of the running callback.
    let name = string_bytes(unsafe { arg(fctx, 0) });
    // SAFETY: as above; a position past the last argument gives NULL
    // (read as empty bytes).
    let Some(n) = mode::route(mode_bits, ever, name, |i| {
        string_bytes(unsafe { arg(fctx, i as c_int) })
    }) else {
        return;
    };
    let Some(count) = api!(RedisModule_CommandFilterArgsCount) else {
        return;
    };
    // SAFETY: as above.
    if (unsafe { count(fctx) }.max(0) as usize) < n.min_args() {
        return;
    }
    if let Some(client_id) = api!(RedisModule_CommandFilterGetClientId) {
        // SAFETY: as above.
        let id = unsafe { client_id(fctx) };
        if !may_serve(fctx, id, n) {
            return;
        }
    }
    let (Some(create), Some(replace)) = (
        api!(RedisModule_CreateString),
        api!(RedisModule_CommandFilterArgReplace),
    ) else {
        return;
    };
    let internal = n.internal();
    // SAFETY: a string with no context, owned by us until ArgReplace takes
    // it over (the filter then frees it with the command's arguments).
    let s = unsafe {
        create(
            std::ptr::null_mut(),
            internal.as_ptr().cast(),
            internal.len(),
        )
    };
    if !s.is_null() {
        // SAFETY: fctx is live; position 0 exists (the command name).
        unsafe { replace(fctx, 0, s) };
    }
}

/// Whether client `id` gets the snapshot: a client the server lists, not
/// in MULTI, whose user may run the module command with these arguments.
fn may_serve(fctx: *mut raw::RedisModuleCommandFilterCtx, id: u64, n: Native) -> bool {
    let Some(info) = api!(RedisModule_GetClientInfoById) else {
        return false;
    };
    let mut ci = raw::RedisModuleClientInfo {
        version: 1,
        flags: 0,
        id: 0,
        addr: [0; 46],
        port: 0,
        db: 0,
    };
    // SAFETY: `ci` is a V1 client info structure owned by us; the server
    // fills it for client `id` (main thread, inside a command filter).
    if unsafe { info((&mut ci as *mut raw::RedisModuleClientInfo).cast(), id) }
        != raw::REDISMODULE_OK as c_int
    {
        // A script's or a module's own client: native behaviour.
        return false;
    }
    if ci.flags & u64::from(raw::REDISMODULE_CLIENTINFO_FLAG_MULTI) != 0 {
        return false;
    }
    acl_allows(fctx, id, n).unwrap_or(false)
}

/// Whether the user of client `id` may run the module command of `n` with
/// the filtered call's arguments (`None`: the server cannot say).
fn acl_allows(fctx: *mut raw::RedisModuleCommandFilterCtx, id: u64, n: Native) -> Option<bool> {
    let user_name = api!(RedisModule_GetClientUserNameById)?;
    let from_name = api!(RedisModule_GetModuleUserFromUserName)?;
    let free_user = api!(RedisModule_FreeModuleUser)?;
    let check = api!(RedisModule_ACLCheckCommandPermissions)?;
    let count = api!(RedisModule_CommandFilterArgsCount)?;
    let arg = api!(RedisModule_CommandFilterArgGet)?;
    let free = api!(RedisModule_FreeString)?;
    let ctx = FILTER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return None;
    }
    // SAFETY: ctx is our detached context (no automatic memory), used on
    // the main thread; the name string is ours and freed below.
    let uname = unsafe { user_name(ctx, id) };
    if uname.is_null() {
        return None;
    }
    // SAFETY: uname is a live string; the user handle is ours, freed below.
    let user = unsafe { from_name(uname) };
    // SAFETY: created above, not registered for automatic memory: freed
    // once, here.
    unsafe { free(ctx, uname) };
    if user.is_null() {
        return None;
    }
    let internal = super::OwnedString::new(std::ptr::null_mut(), n.internal().as_bytes());
    let allowed = internal.map(|name| {
        // SAFETY: fctx is live; ArgsCount/ArgGet read its arguments, which
        // stay alive for the whole filter callback.
        let argc = unsafe { count(fctx) };
        let mut argv: Vec<*mut raw::RedisModuleString> = Vec::with_capacity(argc.max(1) as usize);
        argv.push(name.ptr());
        // SAFETY: as above, positions 1..argc exist.
        argv.extend((1..argc).map(|i| unsafe { arg(fctx, i) }));
        // SAFETY: user is a live module user; argv holds argc live strings.
        (unsafe { check(user, argv.as_mut_ptr(), argv.len() as c_int) })
            == raw::REDISMODULE_OK as c_int
    });
    // SAFETY: the user handle created above, freed once.
    unsafe { free_user(user) };
    allowed
}

/// Runs the native command `cmd` with `args` as the caller's own call
/// would (same database, same protocol) and forwards its reply, errors
/// included, to the client of `ctx`. The module's command filter does not
/// see this call (it is registered NOSELF), so it is never routed again.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn forward(ctx: Ctx, cmd: &std::ffi::CStr, args: &[&[u8]]) -> Result<(), String> {
    let call = api!(RedisModule_Call).ok_or("no RM_Call")?;
    let reply_with = api!(RedisModule_ReplyWithCallReply).ok_or("no ReplyWithCallReply")?;
    let strings: Vec<super::OwnedString> = args
        .iter()
        .map(|a| super::OwnedString::new(ctx, a).ok_or("out of memory"))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*mut raw::RedisModuleString> = strings.iter().map(|s| s.ptr()).collect();
    // SAFETY: ctx is the live command context; "v0E" consumes an array of
    // live strings and its length, exactly as passed ("0": the caller's
    // protocol, "E": errors come back as replies).
    let r = unsafe {
        call(
            ctx,
            cmd.as_ptr(),
            c"v0E".as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        )
    };
    let r = CallReply::new(r).ok_or_else(|| {
        format!(
            "the server refused the call ({})",
            std::io::Error::last_os_error()
        )
    })?;
    // SAFETY: ctx is live; r is a live reply, copied into the client's
    // reply (then freed by CallReply's drop).
    unsafe { reply_with(ctx, r.0) };
    Ok(())
}
