//! Reading a hash's fields and values from the server into a
//! [`Builder`], through `HGETALL` or one `HSCAN` slice at a time. The
//! caller holds the server lock. Both commands apply the server's own
//! rules (fields whose TTL has passed are skipped).

use super::call::{bytes, element, reply_len, reply_type, CallReply};
use super::{api, Ctx};
use crate::hash::{Builder, OverLimit};
use redis_module::raw;
use std::os::raw::c_longlong;

#[derive(Debug)]
pub enum CopyError {
    OverLimit(OverLimit),
    /// The key is gone or is no longer a hash.
    Gone,
    /// The server answered something unexpected.
    Failed(String),
}

impl From<OverLimit> for CopyError {
    fn from(e: OverLimit) -> Self {
        CopyError::OverLimit(e)
    }
}

fn check(r: *mut raw::RedisModuleCallReply) -> Result<(), CopyError> {
    match reply_type(r) {
        raw::REDISMODULE_REPLY_ARRAY => Ok(()),
        raw::REDISMODULE_REPLY_ERROR => {
            let msg = String::from_utf8_lossy(bytes(r));
            if msg.starts_with("WRONGTYPE") {
                Err(CopyError::Gone)
            } else {
                Err(CopyError::Failed(msg.into_owned()))
            }
        }
        t => Err(CopyError::Failed(format!("unexpected reply type {t}"))),
    }
}

/// Pushes `[f1, v1, f2, v2, ...]` into the builder.
fn push_pairs(arr: *mut raw::RedisModuleCallReply, b: &mut Builder) -> Result<(), CopyError> {
    let n = reply_len(arr);
    for i in (0..n.saturating_sub(1)).step_by(2) {
        b.push(bytes(element(arr, i)), bytes(element(arr, i + 1)))?;
    }
    Ok(())
}

/// The whole hash with one `HGETALL` (for small hashes, or the fallback).
pub fn hgetall(ctx: Ctx, key: &[u8], b: &mut Builder) -> Result<(), CopyError> {
    let call = api!(RedisModule_Call).ok_or(CopyError::Failed("no RM_Call".into()))?;
    // SAFETY: the server lock is held; "b" consumes (pointer, length).
    let r = unsafe {
        call(
            ctx,
            c"HGETALL".as_ptr(),
            c"b".as_ptr(),
            key.as_ptr(),
            key.len(),
        )
    };
    if r.is_null() {
        return Err(CopyError::Failed("HGETALL failed".into()));
    }
    let r = CallReply(r);
    check(r.0)?;
    push_pairs(r.0, b)
}

/// One `HSCAN key cursor COUNT count` slice; returns the next cursor.
pub fn hscan_slice(
    ctx: Ctx,
    key: &[u8],
    cursor: &[u8],
    count: usize,
    b: &mut Builder,
) -> Result<Vec<u8>, CopyError> {
    let call = api!(RedisModule_Call).ok_or(CopyError::Failed("no RM_Call".into()))?;
    // SAFETY: the server lock is held; "bbcl" consumes (ptr, len), (ptr,
    // len), a C string and a long long, exactly as passed.
    let r = unsafe {
        call(
            ctx,
            c"HSCAN".as_ptr(),
            c"bbcl".as_ptr(),
            key.as_ptr(),
            key.len(),
            cursor.as_ptr(),
            cursor.len(),
            c"COUNT".as_ptr(),
            count as c_longlong,
        )
    };
    if r.is_null() {
        return Err(CopyError::Failed("HSCAN failed".into()));
    }
    let r = CallReply(r);
    check(r.0)?;
    let next = bytes(element(r.0, 0)).to_vec();
    let items = element(r.0, 1);
    if next.is_empty() || items.is_null() {
        return Err(CopyError::Failed("malformed HSCAN reply".into()));
    }
    push_pairs(items, b)?;
    Ok(next)
}
