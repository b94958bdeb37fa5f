//! Registering commands with the server, and reading a command's arguments:
//! the raw side of `commands/mod.rs`.

use super::{api, string_bytes, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::c_int;

/// The arguments of a command call. The slices borrow the server's strings,
/// alive for the duration of the call (the caller uses them only then).
pub fn args<'a>(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Vec<&'a [u8]> {
    if argv.is_null() {
        return Vec::new();
    }
    (0..argc.max(0) as usize)
        .map(|i| {
            // SAFETY: the server passes `argc` valid string pointers in argv,
            // alive for the duration of this command call.
            string_bytes(unsafe { *argv.add(i) })
        })
        .collect()
}

/// Creates command `name` (OnLoad only). `keys`: first, last, step.
pub fn create(
    ctx: Ctx,
    name: &CStr,
    func: raw::RedisModuleCmdFunc,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
) -> Result<(), String> {
    let create = api!(RedisModule_CreateCommand).ok_or("no CreateCommand")?;
    // SAFETY: OnLoad context, valid C strings, a valid extern callback.
    let rc = unsafe {
        create(
            ctx,
            name.as_ptr(),
            func,
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    };
    if rc != raw::REDISMODULE_OK as c_int {
        return Err(format!("cannot create command {}", name.to_string_lossy()));
    }
    Ok(())
}

fn command(ctx: Ctx, name: &CStr) -> Option<*mut raw::RedisModuleCommand> {
    let get = api!(RedisModule_GetCommand)?;
    // SAFETY: OnLoad context; a valid C string naming a command we created.
    let cmd = unsafe { get(ctx, name.as_ptr()) };
    (!cmd.is_null()).then_some(cmd)
}

/// Sets the ACL categories of command `name`. `None` when the server has
/// no API for it (Redis 7.0); `Some(false)` when it refuses them.
pub fn set_acl_categories(ctx: Ctx, name: &CStr, acl: &CStr) -> Option<bool> {
    let set_acl = api!(RedisModule_SetCommandACLCategories)?;
    let cmd = command(ctx, name)?;
    // SAFETY: cmd is the live command handle; acl a valid C string.
    Some(unsafe { set_acl(cmd, acl.as_ptr()) } == raw::REDISMODULE_OK as c_int)
}

/// What [`set_key_at_1_info`] declares besides the key.
pub struct Docs<'a> {
    pub summary: &'a CStr,
    pub complexity: &'a CStr,
    pub arity: c_int,
}

/// Declares command `name`'s one key precisely: position 1, read-only,
/// values accessed (so ACL read-only key patterns like `%R~` allow it),
/// with its docs. `None` without the API; `Some(false)` if refused.
pub fn set_key_at_1_info(ctx: Ctx, name: &CStr, docs: &Docs) -> Option<bool> {
    let set_info = api!(RedisModule_SetCommandInfo)?;
    let cmd = command(ctx, name)?;
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
        summary: docs.summary.as_ptr(),
        complexity: docs.complexity.as_ptr(),
        since: c"0.1.0".as_ptr(),
        history: std::ptr::null_mut(),
        tips: c"nondeterministic_output".as_ptr(),
        arity: docs.arity,
        key_specs: specs.as_mut_ptr(),
        args: std::ptr::null_mut(),
    };
    // SAFETY: cmd is live; `info` and everything it points to live until
    // SetCommandInfo returns (the server copies what it keeps).
    Some(unsafe { set_info(cmd, &info) } == raw::REDISMODULE_OK as c_int)
}
