//! Registering commands with the server, and reading a command's arguments:
//! the raw side of `commands/mod.rs`.

use super::{api, string_bytes, Ctx};
use redis_module::raw;
use std::ffi::CStr;
use std::os::raw::c_int;

/// The arguments of a command call. The slices borrow the server's strings,
/// alive for the duration of the call (the caller uses them only then).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "argv holds the argc live strings the server passed to the running command callback (or is NULL)"
)]
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
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
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
