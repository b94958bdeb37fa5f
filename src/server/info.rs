//! INFO callbacks: registering one, opening the module's section, adding
//! fields. The raw side of `info.rs`.

use super::{api, Ctx};
use redis_module::raw;
use std::ffi::CString;
use std::os::raw::c_int;

/// The context of an INFO callback.
pub type InfoCtx = *mut raw::RedisModuleInfoCtx;

/// Registers the module's INFO callback (OnLoad only).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the OnLoad context the server passed to the module, live for this call"
)]
pub fn register(ctx: Ctx, cb: raw::RedisModuleInfoFunc) -> Result<(), &'static str> {
    let f = api!(RedisModule_RegisterInfoFunc).ok_or("no RegisterInfoFunc")?;
    // SAFETY: OnLoad context and a valid extern callback.
    if unsafe { f(ctx, cb) } != raw::REDISMODULE_OK as c_int {
        return Err("cannot register the INFO section");
    }
    Ok(())
}

/// Opens the section named after the module ("snapshot"); false if it was
/// not requested (or there is no API).
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the INFO context the server passed to the running INFO callback"
)]
pub fn add_module_section(ctx: InfoCtx) -> bool {
    let Some(add_section) = api!(RedisModule_InfoAddSection) else {
        return false;
    };
    // SAFETY: a NULL name asks for the section named after the module
    // ("snapshot"); ctx is the live INFO context.
    unsafe { add_section(ctx, std::ptr::null()) == raw::REDISMODULE_OK as c_int }
}

/// Opens the module's section `name` (the server names it
/// "snapshot_<name>"); false if it was not requested.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the INFO context the server passed to the running INFO callback"
)]
pub fn add_named_section(ctx: InfoCtx, name: &std::ffi::CStr) -> bool {
    let Some(add_section) = api!(RedisModule_InfoAddSection) else {
        return false;
    };
    // SAFETY: ctx is the live INFO context; name is a C string that
    // outlives the call (the server copies it).
    unsafe { add_section(ctx, name.as_ptr().cast_mut()) == raw::REDISMODULE_OK as c_int }
}

/// Adds field `name` with value `v` to the open section.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the INFO context the server passed to the running INFO callback"
)]
pub fn field(ctx: InfoCtx, name: &str, v: u64) {
    let (Some(f), Ok(n)) = (api!(RedisModule_InfoAddFieldULongLong), CString::new(name)) else {
        return;
    };
    // SAFETY: ctx is the live INFO context of this callback; n is a C string.
    unsafe { f(ctx, n.as_ptr(), v) };
}

/// Adds field `name` with the text `v` (no spaces, colons or newlines) to
/// the open section.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is the INFO context the server passed to the running INFO callback"
)]
pub fn field_str(ctx: InfoCtx, name: &str, v: &str) {
    let (Some(f), Ok(n), Ok(v)) = (
        api!(RedisModule_InfoAddFieldCString),
        CString::new(name),
        CString::new(v),
    ) else {
        return;
    };
    // SAFETY: ctx is the live INFO context of this callback; n and v are C
    // strings that outlive the call (the server copies the value).
    unsafe { f(ctx, n.as_ptr(), v.as_ptr()) };
}
