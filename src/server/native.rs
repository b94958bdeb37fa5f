//! The server side of serving the native commands from snapshots
//! (`native` decides): registering its command filter, reading and
//! rewriting the filtered call, the caller's ACL check of the rewritten
//! call, and running a native command with its reply passed on.

use super::call::CallReply;
use super::clientdb::FilterCall;
use super::entry::{command_filter, CommandFilter};
use super::{api, Ctx, OwnedString};
use redis_module::raw;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A detached context of this module made at load: RM_GetClientUserNameById
/// needs a context (a filter has none) and registering a filter after load
/// needs one of this module. Main thread only; never freed (the module is
/// never unloaded).
///
/// Global: the module API needs a context where the server hands none.
static MODULE_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// Makes [`MODULE_CTX`] (OnLoad; `ctx` the OnLoad context).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn init(ctx: Ctx) {
    if !MODULE_CTX.load(Ordering::Relaxed).is_null() {
        return;
    }
    let Some(get) = api!(RedisModule_GetDetachedThreadSafeContext) else {
        return;
    };
    // SAFETY: ctx is the OnLoad context: the detached context belongs to
    // this module and lives until freed, which it never is.
    MODULE_CTX.store(unsafe { get(ctx) }, Ordering::Relaxed);
}

/// Registers `F` as a command filter (main thread: OnLoad, or a config
/// change); whether it is registered. Unlike the Valkey 8 workaround's,
/// it needs no client id from the filter (Redis 7.0 has none).
pub fn register_filter<F: CommandFilter>() -> bool {
    let ctx = MODULE_CTX.load(Ordering::Relaxed);
    let Some(register) = api!(RedisModule_RegisterCommandFilter) else {
        return false;
    };
    if ctx.is_null() || api!(RedisModule_CommandFilterArgGet).is_none() {
        return false;
    }
    // The server appends the filter to its list, read only before a
    // command runs, never while one (CONFIG SET) does.
    // SAFETY: ctx is a context of this module, used on the main thread;
    // the callback is a valid extern fn that lives as long as the module.
    let f = unsafe {
        register(
            ctx,
            Some(command_filter::<F>),
            raw::REDISMODULE_CMDFILTER_NOSELF as i32,
        )
    };
    !f.is_null()
}

/// The reply of `COMMAND <sub> <name>` through the module's own context
/// (OnLoad or main thread); `None` if the call failed.
fn command_reply(sub: &std::ffi::CStr, name: &std::ffi::CStr) -> Option<CallReply> {
    let ctx = MODULE_CTX.load(Ordering::Relaxed);
    let call = api!(RedisModule_Call)?;
    if ctx.is_null() {
        return None;
    }
    // SAFETY: ctx is our detached context, used on the main thread; "cc"
    // consumes exactly two C strings.
    let r = unsafe {
        call(
            ctx,
            c"COMMAND".as_ptr(),
            c"cc".as_ptr(),
            sub.as_ptr(),
            name.as_ptr(),
        )
    };
    CallReply::new(r)
}

/// Whether the server has a command named `name` (`COMMAND INFO name`): a
/// command renamed or removed by `rename-command` has not.
pub fn command_exists(name: &std::ffi::CStr) -> bool {
    command_reply(c"INFO", name).is_some_and(|r| {
        let info = super::call::element(r.0, 0);
        !info.is_null() && super::call::reply_type(info) == raw::REDISMODULE_REPLY_ARRAY
    })
}

/// Whether the server's `COMMAND DOCS cmd` names `token` (any case)
/// anywhere: whether its version of the command has that option
/// (`ZSCAN ... NOSCORES`: Valkey 8+; `HSCAN ... NOVALUES`: Redis 7.4+,
/// Valkey 8+).
pub fn command_has_token(cmd: &std::ffi::CStr, token: &[u8]) -> bool {
    command_reply(c"DOCS", cmd).is_some_and(|r| mentions(r.0, token, 0))
}

/// Whether a string anywhere in the reply `r` (arrays walked, at most 16
/// deep) equals `token`, case-insensitively.
fn mentions(r: *mut raw::RedisModuleCallReply, token: &[u8], depth: usize) -> bool {
    use super::call::{bytes, element, reply_len, reply_type};
    match reply_type(r) {
        raw::REDISMODULE_REPLY_STRING => bytes(r).eq_ignore_ascii_case(token),
        raw::REDISMODULE_REPLY_ARRAY if depth < 16 => {
            (0..reply_len(r)).any(|i| mentions(element(r, i), token, depth + 1))
        }
        _ => false,
    }
}

/// Whether the server tells a filter which client runs the command.
pub fn filter_knows_client() -> bool {
    api!(RedisModule_CommandFilterGetClientId).is_some()
}

/// Whether a script or function is running, or EXEC is (main thread): a
/// command filtered now is a script's, or one called by a module from
/// either. The filter cannot tell by the client id alone: Valkey 9 runs
/// scripts on the server's pooled temporary clients, and a pooled client
/// keeps the id of the blocked client whose thread-safe context it was
/// (RM_GetThreadSafeContext copies that id into it), so a script can run
/// under the id of a live client, even of its caller.
pub fn script_or_exec_running() -> bool {
    let ctx = MODULE_CTX.load(Ordering::Relaxed);
    let Some(flags) = api!(RedisModule_GetContextFlags) else {
        return false;
    };
    if ctx.is_null() {
        return false;
    }
    // SAFETY: ctx is our detached context, used on the main thread; the
    // script and EXEC flags are read from the server's state.
    let f = unsafe { flags(ctx) } as u32;
    f & (raw::REDISMODULE_CTX_FLAGS_LUA | raw::REDISMODULE_CTX_FLAGS_MULTI) != 0
}

impl FilterCall {
    /// Arguments of the call, its name included.
    pub fn len(&self) -> usize {
        match api!(RedisModule_CommandFilterArgsCount) {
            // SAFETY: the filter context is live during the callback.
            Some(f) => unsafe { f(self.0) }.max(0) as usize,
            None => 0,
        }
    }

    /// Whether the call has no arguments at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the argument at `i` (0: the command name) by `bytes`.
    pub fn replace(&self, i: usize, bytes: &[u8]) {
        let (Some(create), Some(replace)) = (
            api!(RedisModule_CreateString),
            api!(RedisModule_CommandFilterArgReplace),
        ) else {
            return;
        };
        // SAFETY: a string with no context, owned by us until ArgReplace
        // takes it over (the server frees it with the call's arguments).
        let s = unsafe { create(std::ptr::null_mut(), bytes.as_ptr().cast(), bytes.len()) };
        if !s.is_null() {
            // SAFETY: the filter context is live; position i exists (the
            // caller checked `len`).
            unsafe { replace(self.0, i as c_int, s) };
        }
    }

    /// Whether the user of client `id` may run the call with its name
    /// replaced by each of `names` (`None`: the server cannot say).
    pub fn acl_allows_all(&self, id: u64, names: &[&[u8]]) -> Option<bool> {
        let user_name = api!(RedisModule_GetClientUserNameById)?;
        let check = api!(RedisModule_ACLCheckCommandPermissions)?;
        let arg = api!(RedisModule_CommandFilterArgGet)?;
        let ctx = MODULE_CTX.load(Ordering::Relaxed);
        if ctx.is_null() {
            return None;
        }
        // SAFETY: ctx is our detached context (no automatic memory), on
        // the main thread; the name string is ours, freed by `as_user`.
        let uname = unsafe { user_name(ctx, id) };
        as_user(ctx, uname, |user| {
            let argc = self.len();
            let mut allowed = Some(true);
            for name in names {
                let ok = OwnedString::new(std::ptr::null_mut(), name).map(|name| {
                    let mut argv: Vec<*mut raw::RedisModuleString> =
                        Vec::with_capacity(argc.max(1));
                    argv.push(name.ptr());
                    // SAFETY: the filter context is live; positions 1..argc exist
                    // and their strings live for the whole callback.
                    argv.extend((1..argc).map(|i| unsafe { arg(self.0, i as c_int) }));
                    // SAFETY: user is a live module user; argv holds argc live strings.
                    (unsafe { check(user, argv.as_mut_ptr(), argv.len() as c_int) })
                        == raw::REDISMODULE_OK as c_int
                });
                if ok != Some(true) {
                    allowed = ok;
                    break;
                }
            }
            allowed
        })?
    }
}

/// Runs `f` with the module user named `uname` (a string created for the
/// caller, or NULL), then frees both; `None` when there is no such user.
fn as_user<R>(
    ctx: Ctx,
    uname: *mut raw::RedisModuleString,
    f: impl FnOnce(*mut raw::RedisModuleUser) -> R,
) -> Option<R> {
    let from_name = api!(RedisModule_GetModuleUserFromUserName)?;
    let free_user = api!(RedisModule_FreeModuleUser)?;
    let free = api!(RedisModule_FreeString)?;
    if uname.is_null() {
        return None;
    }
    // SAFETY: uname is a live string; the user handle is ours, freed below.
    let user = unsafe { from_name(uname) };
    // SAFETY: uname was created for the caller (no automatic memory): freed once.
    unsafe { free(ctx, uname) };
    if user.is_null() {
        return None;
    }
    let r = f(user);
    // SAFETY: the user handle created above, freed once.
    unsafe { free_user(user) };
    Some(r)
}

/// Runs the native command `cmd` with `args` as the caller's own call
/// would (same database, same protocol) and passes its reply, errors
/// included, to the client of `ctx`. The module's filters do not see
/// this call (they are registered NOSELF), so it is never routed again.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn forward(ctx: Ctx, cmd: &std::ffi::CStr, args: &[&[u8]]) -> Result<(), String> {
    forward_with(ctx, cmd, args, c"v0E")
}

/// Whether the user of the client running `ctx` is refused `cmd` with
/// `args` by its ACL; a refusal is logged in ACL LOG (reason `command`,
/// object `cmd`) as the server logs its own. `None`: the server cannot
/// say.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn caller_refused_logged(ctx: Ctx, cmd: &[u8], args: &[&[u8]]) -> Option<bool> {
    let current = api!(RedisModule_GetCurrentUserName)?;
    let check = api!(RedisModule_ACLCheckCommandPermissions)?;
    // SAFETY: ctx is the live command context; the name string is ours,
    // freed by `as_user`.
    let uname = unsafe { current(ctx) };
    as_user(ctx, uname, |user| {
        let strings: Option<Vec<OwnedString>> = std::iter::once(cmd)
            .chain(args.iter().copied())
            .map(|a| OwnedString::new(ctx, a))
            .collect();
        let refused = strings.map(|strings| {
            let mut argv: Vec<*mut raw::RedisModuleString> =
                strings.iter().map(|s| s.ptr()).collect();
            // SAFETY: user is a live module user; argv holds live strings.
            let refused = (unsafe { check(user, argv.as_mut_ptr(), argv.len() as c_int) })
                != raw::REDISMODULE_OK as c_int;
            if refused {
                if let Some(log) = api!(RedisModule_ACLAddLogEntry) {
                    // SAFETY: ctx, user and the command name string are live.
                    unsafe {
                        log(
                            ctx,
                            user,
                            argv[0],
                            raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_CMD,
                        )
                    };
                }
            }
            refused
        });
        refused
    })?
}

#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
fn forward_with(
    ctx: Ctx,
    cmd: &std::ffi::CStr,
    args: &[&[u8]],
    flags: &std::ffi::CStr,
) -> Result<(), String> {
    let call = api!(RedisModule_Call).ok_or("no RM_Call")?;
    let reply_with = api!(RedisModule_ReplyWithCallReply).ok_or("no ReplyWithCallReply")?;
    let strings: Vec<OwnedString> = args
        .iter()
        .map(|a| OwnedString::new(ctx, a).ok_or("out of memory"))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*mut raw::RedisModuleString> = strings.iter().map(|s| s.ptr()).collect();
    // SAFETY: ctx is the live command context; "v0E" consumes an array of
    // live strings and its length, exactly as passed ("0": the caller's
    // protocol, "E": errors come back as replies; "C": as the caller's user).
    let r = unsafe {
        call(
            ctx,
            cmd.as_ptr(),
            flags.as_ptr(),
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
