//! What SNAPSHOT.UNLINK needs from the server: the calling user and its
//! key permissions, the server's own `UNLINK` (replicated like any write),
//! and whether this server is a read-only replica.

use super::call::{reply_type, CallReply};
use super::{api, string_bytes, Ctx, OwnedString};
use redis_module::raw;

/// The name of the user running the command of `ctx`.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the context the server passed to the running command callback"
)]
pub fn current_user_name(ctx: Ctx) -> Option<Vec<u8>> {
    let (get, free) = (
        api!(RedisModule_GetCurrentUserName)?,
        api!(RedisModule_FreeString)?,
    );
    // SAFETY: ctx is the live command context; the returned string is ours
    // and freed below, after its bytes were copied.
    unsafe {
        let s = get(ctx);
        if s.is_null() {
            return None;
        }
        let name = string_bytes(s).to_vec();
        free(ctx, s);
        Some(name)
    }
}

/// Whether this server can check a user's key permissions for a module.
pub fn acl_checks_available() -> bool {
    api!(RedisModule_GetModuleUserFromUserName).is_some()
        && api!(RedisModule_ACLCheckCommandPermissions).is_some()
        && api!(RedisModule_FreeModuleUser).is_some()
}

/// A handle on an ACL user, looked up by name for the duration of one
/// callback (the user may be deleted between two callbacks: look it up
/// again each time), with the `UNLINK` command name to check against.
pub struct User {
    user: *mut raw::RedisModuleUser,
    unlink: OwnedString,
}

impl User {
    /// The user called `name` now; `None` if there is none (deleted).
    pub fn by_name(ctx: Ctx, name: &[u8]) -> Option<User> {
        let get = api!(RedisModule_GetModuleUserFromUserName)?;
        let s = OwnedString::new(ctx, name)?;
        let unlink = OwnedString::new(ctx, b"UNLINK")?;
        // SAFETY: the server lock is held; `s` is a live string.
        let user = unsafe { get(s.ptr()) };
        // Not `then_some`: it would build (and drop, freeing NULL) a User.
        if user.is_null() {
            return None;
        }
        Some(User { user, unlink })
    }

    /// Whether the user may run `UNLINK key` itself: the command (ACL
    /// categories and commands) and the key (write permission), as the
    /// server would check them. Also right on servers where module commands
    /// have no ACL categories (Redis 7.0).
    pub fn may_unlink(&self, key: &OwnedString) -> bool {
        let Some(check) = api!(RedisModule_ACLCheckCommandPermissions) else {
            return false;
        };
        let mut argv = [self.unlink.ptr(), key.ptr()];
        // SAFETY: the user handle and both strings are live; the server
        // lock is held; argv holds exactly 2 strings.
        let rc = unsafe { check(self.user, argv.as_mut_ptr(), 2) };
        rc == raw::REDISMODULE_OK as i32
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeModuleUser) {
            // SAFETY: frees the handle from GetModuleUserFromUserName once
            // (it does not free the ACL user itself).
            unsafe { free(self.user) };
        }
    }
}

/// `UNLINK key...` through the server, in the database selected on `ctx`,
/// propagated to replicas and the AOF like the client's own command would
/// be; returns how many keys it removed, or the server's error text (the
/// `E` flag: a refusal before the command runs, such as a key of a slot
/// this node does not own, comes back as an error reply, not a bare NULL).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live main-thread context (a timer callback's) with the server lock held"
)]
pub fn unlink(ctx: Ctx, keys: &[OwnedString]) -> Result<u64, String> {
    unlink_refs(ctx, &keys.iter().collect::<Vec<_>>())
}

/// [`unlink`] of borrowed names.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live main-thread context (a timer callback's) with the server lock held"
)]
pub fn unlink_refs(ctx: Ctx, keys: &[&OwnedString]) -> Result<u64, String> {
    let call = api!(RedisModule_Call).ok_or("no RM_Call")?;
    let mut argv: Vec<*mut raw::RedisModuleString> = keys.iter().map(|k| k.ptr()).collect();
    // SAFETY: main thread (a timer callback); "!vE" consumes an array of
    // live strings and its length, exactly as passed.
    let r = unsafe {
        call(
            ctx,
            c"UNLINK".as_ptr(),
            c"!vE".as_ptr(),
            argv.as_mut_ptr(),
            argv.len(),
        )
    };
    let r = CallReply::new(r).ok_or_else(|| {
        // Servers without the `E` flag: only errno tells why.
        format!(
            "UNLINK refused by the server ({})",
            std::io::Error::last_os_error()
        )
    })?;
    if reply_type(r.0) != raw::REDISMODULE_REPLY_INTEGER {
        return Err(String::from_utf8_lossy(super::call::bytes(r.0)).into_owned());
    }
    let f = api!(RedisModule_CallReplyInteger).ok_or("no CallReplyInteger")?;
    // SAFETY: r is a live integer reply.
    Ok(unsafe { f(r.0) }.max(0) as u64)
}

/// Whether this server is a replica that refuses writes now.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live main-thread context of the calling callback"
)]
pub fn read_only_replica(ctx: Ctx) -> bool {
    let Some(f) = api!(RedisModule_GetContextFlags) else {
        return false;
    };
    // SAFETY: ctx is a live context on the main thread.
    let flags = unsafe { f(ctx) } as u32;
    let ro = raw::REDISMODULE_CTX_FLAGS_SLAVE | raw::REDISMODULE_CTX_FLAGS_READONLY;
    flags & ro == ro
}

/// CPU time of the calling thread, in microseconds (0 if unavailable).
pub fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

/// Voluntary context switches of the calling thread so far (it blocked:
/// waited for a lock or I/O), 0 if unavailable.
pub fn thread_voluntary_switches() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return 0;
    }
    ru.ru_nvcsw.max(0) as u64
}
