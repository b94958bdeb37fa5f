//! Command registration and the FFI trampolines. Handlers are plain Rust
//! functions `fn(Ctx, &[&[u8]]) -> Result<(), CmdError>` that either reply
//! themselves (or block the client) and return `Ok`, or return the error to
//! reply. No panic crosses into the server: it becomes an error reply.

pub mod args;
pub mod collection;
pub mod docs;
pub mod hscan;
pub mod scan;
pub mod sscan;
pub mod testhook;
pub mod unlink;
pub mod zscan;

use crate::ffi::{self, reply::Reply, Ctx};
use args::CmdError;
use redis_module::raw;
use std::ffi::CString;
use std::os::raw::c_int;

type Handler = fn(Ctx, &[&[u8]]) -> Result<(), CmdError>;

fn dispatch(
    ctx: Ctx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    let args = ffi::command::args(argv, argc);
    ffi::blocked::take_blocked_flag();
    let started = std::time::Instant::now();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(ctx, &args)));
    // A client blocked by the handler is answered by its BlockedReply only
    // (also when the handler panicked after blocking it).
    let blocked = ffi::blocked::take_blocked_flag();
    if !blocked {
        ffi::latency::report(ffi::latency::Event::Inline, started);
    }
    let r = Reply::new(ctx);
    match outcome {
        Ok(Ok(())) => {}
        _ if blocked => {}
        Ok(Err(CmdError::WrongArity)) => r.wrong_arity(),
        Ok(Err(CmdError::Msg(m))) => r.error(&m),
        Err(_) => r.error("ERR snapscan: internal error (the request was not served)"),
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn snapshot_scan(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, scan::run)
}

extern "C" fn snapshot_hscan(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, hscan::run)
}

extern "C" fn snapshot_sscan(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, sscan::run)
}

extern "C" fn snapshot_zscan(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, zscan::run)
}

extern "C" fn snapshot_unlink(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, unlink::run)
}

extern "C" fn snapshot_keys(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, crate::native::keys::run)
}

/// The module commands of `snapshot.serve-native` (see `native::serve`).
macro_rules! native_trampoline {
    ($name:ident, $n:expr) => {
        extern "C" fn $name(
            ctx: *mut raw::RedisModuleCtx,
            argv: *mut *mut raw::RedisModuleString,
            argc: c_int,
        ) -> c_int {
            dispatch(ctx, argv, argc, |ctx, args| {
                crate::native::serve::run(ctx, args, $n)
            })
        }
    };
}
native_trampoline!(native_scan, crate::native::mode::Native::Scan);
native_trampoline!(native_keys, crate::native::mode::Native::Keys);
native_trampoline!(native_hscan, crate::native::mode::Native::Hscan);
native_trampoline!(native_sscan, crate::native::mode::Native::Sscan);
native_trampoline!(native_zscan, crate::native::mode::Native::Zscan);

extern "C" fn snapshot_testhook(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    dispatch(ctx, argv, argc, testhook::run)
}

struct Spec {
    name: &'static str,
    func: raw::RedisModuleCmdFunc,
    flags: &'static str,
    keys: (c_int, c_int, c_int),
    acl: &'static str,
}

const COMMANDS: &[Spec] = &[
    Spec {
        name: "snapshot.scan",
        func: Some(snapshot_scan),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow",
    },
    Spec {
        name: "snapshot.hscan",
        func: Some(snapshot_hscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read hash slow",
    },
    Spec {
        name: "snapshot.sscan",
        func: Some(snapshot_sscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read set slow",
    },
    Spec {
        name: "snapshot.zscan",
        func: Some(snapshot_zscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read sortedset slow",
    },
    Spec {
        name: "snapshot.unlink",
        func: Some(snapshot_unlink),
        // No "denyoom": deleting is how memory is freed.
        flags: "write",
        keys: (0, 0, 0),
        acl: "keyspace write slow",
    },
    Spec {
        name: "snapshot.keys",
        func: Some(snapshot_keys),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow dangerous",
    },
    // What SCAN, KEYS, HSCAN, SSCAN, ZSCAN become under
    // snapshot.serve-native: the native command's flags and ACL categories.
    Spec {
        name: "snapshot.native-scan",
        func: Some(native_scan),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow",
    },
    Spec {
        name: "snapshot.native-keys",
        func: Some(native_keys),
        flags: "readonly",
        keys: (0, 0, 0),
        acl: "keyspace read slow dangerous",
    },
    Spec {
        name: "snapshot.native-hscan",
        func: Some(native_hscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read hash slow",
    },
    Spec {
        name: "snapshot.native-sscan",
        func: Some(native_sscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read set slow",
    },
    Spec {
        name: "snapshot.native-zscan",
        func: Some(native_zscan),
        flags: "readonly",
        keys: (1, 1, 1),
        acl: "read sortedset slow",
    },
];

/// Test-only fault injection (see `testhook`).
const TESTHOOK: Spec = Spec {
    name: "snapshot.testhook",
    func: Some(snapshot_testhook),
    flags: "admin",
    keys: (0, 0, 0),
    acl: "admin dangerous",
};

/// Registers every command. ACL categories are set where the server
/// supports them (Redis 7.2+/Valkey); on Redis 7.0 commands get none.
pub fn register(ctx: Ctx) -> Result<(), String> {
    let hooks = testhook::enabled().then_some(&TESTHOOK);
    for c in COMMANDS.iter().chain(hooks) {
        let name = CString::new(c.name).map_err(|e| e.to_string())?;
        let flags = CString::new(c.flags).map_err(|e| e.to_string())?;
        ffi::command::create(ctx, &name, c.func, &flags, c.keys)?;
        let acl = CString::new(c.acl).map_err(|e| e.to_string())?;
        if ffi::command::set_acl_categories(ctx, &name, &acl) == Some(false) {
            ffi::log(
                ctx,
                "warning",
                &format!("snapscan: cannot set ACL categories of {}", c.name),
            );
        }
    }
    set_docs(ctx);
    Ok(())
}

/// COMMAND DOCS / COMMAND INFO for every registered command that has an
/// entry in [`docs::DOCS`] (summary, arguments, tips, key specs, arity).
fn set_docs(ctx: Ctx) {
    for d in docs::DOCS {
        if let Err(e) = ffi::cmdinfo::set(ctx, d) {
            ffi::log(ctx, "warning", &format!("snapscan: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_command_has_docs() {
        for c in super::COMMANDS {
            assert!(super::docs::doc(c.name).is_some(), "{} has no docs", c.name);
        }
    }
}
