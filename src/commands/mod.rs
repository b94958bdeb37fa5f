//! Command registration and the FFI trampolines. Handlers are plain Rust
//! functions `fn(Ctx, &[&[u8]]) -> Result<(), CmdError>` that either reply
//! themselves (or block the client) and return `Ok`, or return the error to
//! reply. No panic crosses into the server: it becomes an error reply.

pub mod args;
pub mod collection;
pub mod hscan;
pub mod scan;
pub mod sscan;
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
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(ctx, &args)));
    // A client blocked by the handler is answered by its BlockedReply only
    // (also when the handler panicked after blocking it).
    let blocked = ffi::blocked::take_blocked_flag();
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
];

/// What a collection command's COMMAND DOCS summary says.
fn collection_summary(name: &str) -> Option<&'static std::ffi::CStr> {
    match name {
        "snapshot.hscan" => {
            Some(c"Iterates a point-in-time snapshot of a hash's fields and values.")
        }
        "snapshot.sscan" => Some(c"Iterates a point-in-time snapshot of a set's members."),
        "snapshot.zscan" => {
            Some(c"Iterates a point-in-time snapshot of a sorted set's members and scores.")
        }
        _ => None,
    }
}

/// Declares a collection command's key (position 1, read-only, values
/// accessed) and docs; arity -3.
fn set_collection_info(ctx: Ctx, name: &CString, summary: &std::ffi::CStr) {
    let docs = ffi::command::Docs {
        summary,
        complexity: c"O(1) per call after an O(N) copy made in bounded slices.",
        arity: -3,
    };
    if ffi::command::set_key_at_1_info(ctx, name, &docs) == Some(false) {
        ffi::log(
            ctx,
            "warning",
            &format!(
                "snapscan: cannot set key specs of {}",
                name.to_string_lossy()
            ),
        );
    }
}

/// Registers every command. ACL categories are set where the server
/// supports them (Redis 7.2+/Valkey); on Redis 7.0 commands get none.
pub fn register(ctx: Ctx) -> Result<(), String> {
    for c in COMMANDS {
        let name = CString::new(c.name).map_err(|e| e.to_string())?;
        let flags = CString::new(c.flags).map_err(|e| e.to_string())?;
        ffi::command::create(ctx, &name, c.func, &flags, c.keys)?;
        if let Some(summary) = collection_summary(c.name) {
            set_collection_info(ctx, &name, summary);
        }
        let acl = CString::new(c.acl).map_err(|e| e.to_string())?;
        if ffi::command::set_acl_categories(ctx, &name, &acl) == Some(false) {
            ffi::log(
                ctx,
                "warning",
                &format!("snapscan: cannot set ACL categories of {}", c.name),
            );
        }
    }
    Ok(())
}
