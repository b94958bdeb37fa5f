//! The module's entry points: the callbacks through which the server hands
//! control to the module (keyspace notifications, server events, command
//! handlers, the INFO callback; main-loop steps are in `mainloop`). They
//! are the only code that mints the server-lock token ([`ServerLock`]):
//! each trampoline here is registered with the server for a type that says
//! what to do, and hands it the token with the callback's arguments.

use super::locked::ServerLock;
use super::Ctx;
use redis_module::raw;
use std::os::raw::{c_char, c_int, c_void};

/// A keyspace notification handler (see [`keyspace_event`]).
pub trait KeyspaceEvent {
    fn on(
        lock: &ServerLock,
        ctx: Ctx,
        type_: c_int,
        event: *const c_char,
        key: *mut raw::RedisModuleString,
    );
}

/// The keyspace notification callback of `K`.
pub extern "C" fn keyspace_event<K: KeyspaceEvent>(
    ctx: *mut raw::RedisModuleCtx,
    type_: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: the server runs keyspace notifications on its main thread
    // (or a thread holding its lock), with the lock held.
    let lock = unsafe { ServerLock::new_unchecked() };
    K::on(&lock, ctx, type_, event, key);
    raw::REDISMODULE_OK as c_int
}

/// A server event handler (see [`server_event`]).
pub trait ServerEvent {
    fn on(lock: &ServerLock, ctx: Ctx, subevent: u64, data: *mut c_void);
}

/// The server event callback of `E`.
pub extern "C" fn server_event<E: ServerEvent>(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    // SAFETY: the server fires server events on its main thread, holding
    // its lock.
    let lock = unsafe { ServerLock::new_unchecked() };
    E::on(&lock, ctx, subevent, data);
}

/// A post-notification job (see [`post_job`]).
pub trait PostJob {
    fn run(lock: &ServerLock, ctx: Ctx);
}

/// The post-notification job callback of `J` (`RedisModule_AddPostNotificationJob`).
pub extern "C" fn post_job<J: PostJob>(ctx: *mut raw::RedisModuleCtx, _pd: *mut c_void) {
    // SAFETY: the server runs post-notification jobs on its main thread, at
    // the end of the execution unit that added them, holding its lock.
    let lock = unsafe { ServerLock::new_unchecked() };
    J::run(&lock, ctx);
}

/// A command handler (see [`command`]).
pub trait Command {
    fn call(
        lock: &ServerLock,
        ctx: Ctx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> c_int;
}

/// The command callback of `C`.
pub extern "C" fn command<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: the server runs module commands on its main thread, holding
    // its lock.
    let lock = unsafe { ServerLock::new_unchecked() };
    C::call(&lock, ctx, argv, argc)
}

/// An INFO callback (see [`info`]).
pub trait Info {
    fn fill(lock: &ServerLock, ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int);
}

/// The INFO callback of `I`.
pub extern "C" fn info<I: Info>(ctx: *mut raw::RedisModuleInfoCtx, for_crash_report: c_int) {
    // SAFETY: the server runs INFO callbacks on its main thread, holding
    // its lock.
    let lock = unsafe { ServerLock::new_unchecked() };
    I::fill(&lock, ctx, for_crash_report);
}

/// The reply callback of a client blocked with a fallback (see
/// `blocked::BlockedReply::block_with`).
pub extern "C" fn blocked_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: the server runs the reply callbacks of blocked clients on its
    // main thread, holding its lock.
    let lock = unsafe { ServerLock::new_unchecked() };
    super::blocked::on_reply(&lock, ctx);
    raw::REDISMODULE_OK as c_int
}

/// The disconnect callback of a blocked client whose disconnection is
/// watched (see `blocked::BlockedReply::watch_disconnect`); main thread.
pub extern "C" fn blocked_disconnect(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guarded(ctx, "disconnect", || super::blocked::on_disconnect(bc));
}

/// Runs `f` so that a panic never unwinds into the server.
#[inline(always)]
pub fn guarded(ctx: Ctx, what: &str, f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        super::log(
            ctx,
            "warning",
            &format!("snapscan: internal error in {what} handler"),
        );
    }
}

/// A command filter (see [`command_filter`]).
pub trait CommandFilter {
    fn on(lock: &ServerLock, call: &super::clientdb::FilterCall);
}

/// The command filter callback of `F`; a panic is swallowed (the command
/// runs as if unfiltered).
pub extern "C" fn command_filter<F: CommandFilter>(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    // SAFETY: the server runs command filters on its main thread, holding
    // its lock, before the command.
    let lock = unsafe { ServerLock::new_unchecked() };
    let call = super::clientdb::FilterCall(fctx);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| F::on(&lock, &call)));
}
