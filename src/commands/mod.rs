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

use crate::ffi::{self, api, reply::Reply, Ctx};
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
    let args: Vec<&[u8]> = (0..argc.max(0) as usize)
        .map(|i| {
            // SAFETY: the server passes `argc` valid string pointers in argv,
            // alive for the duration of this command call.
            ffi::string_bytes(unsafe { *argv.add(i) })
        })
        .collect();
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

/// Declares a collection command's key precisely: position 1, read-only,
/// values accessed (so ACL read-only key patterns like `%R~` allow it),
/// arity -3.
fn set_collection_info(ctx: Ctx, name: &CString, summary: &std::ffi::CStr) {
    let (Some(get), Some(set_info)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        return;
    };
    let mut specs = [
        raw::RedisModuleCommandKeySpec {
            notes: std::ptr::null(),
            flags: u64::from(raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS),
            begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
            bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
                index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos: 1 },
            },
            find_keys_type: raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            fk: raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        },
        // SAFETY: the key-spec list ends with an all-zero entry; every field
        // of this plain C struct is valid when zeroed (null pointer, 0 enums).
        unsafe { std::mem::zeroed() },
    ];
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: summary.as_ptr(),
        complexity: c"O(1) per call after an O(N) copy made in bounded slices.".as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: c"nondeterministic_output".as_ptr(),
        arity: -3,
        key_specs: specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    // SAFETY: the command exists; `info` and everything it points to live
    // until SetCommandInfo returns (the server copies what it keeps).
    unsafe {
        let cmd = get(ctx, name.as_ptr());
        if !cmd.is_null() && set_info(cmd, &info) != raw::REDISMODULE_OK as c_int {
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
}

/// Registers every command. ACL categories are set where the server
/// supports them (Redis 7.2+/Valkey); on Redis 7.0 commands get none.
pub fn register(ctx: Ctx) -> Result<(), String> {
    let create = api!(RedisModule_CreateCommand).ok_or("no CreateCommand")?;
    for c in COMMANDS {
        let name = CString::new(c.name).map_err(|e| e.to_string())?;
        let flags = CString::new(c.flags).map_err(|e| e.to_string())?;
        // SAFETY: OnLoad context, valid C strings, a valid extern callback.
        let rc = unsafe {
            create(
                ctx,
                name.as_ptr(),
                c.func,
                flags.as_ptr(),
                c.keys.0,
                c.keys.1,
                c.keys.2,
            )
        };
        if rc != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot create command {}", c.name));
        }
        if let Some(summary) = collection_summary(c.name) {
            set_collection_info(ctx, &name, summary);
        }
        if let (Some(get), Some(set_acl)) = (
            api!(RedisModule_GetCommand),
            api!(RedisModule_SetCommandACLCategories),
        ) {
            let acl = CString::new(c.acl).map_err(|e| e.to_string())?;
            // SAFETY: the command was just created under this name.
            let cmd = unsafe { get(ctx, name.as_ptr()) };
            // SAFETY: cmd is the live command handle; acl a valid C string.
            if !cmd.is_null()
                && unsafe { set_acl(cmd, acl.as_ptr()) } != raw::REDISMODULE_OK as c_int
            {
                ffi::log(
                    ctx,
                    "warning",
                    &format!("snapscan: cannot set ACL categories of {}", c.name),
                );
            }
        }
    }
    Ok(())
}
