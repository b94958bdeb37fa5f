//! Reading a collection's elements from the server into a [`Builder`],
//! with the server's own commands: the whole of it at once (`HGETALL`,
//! `SMEMBERS`, or `ZSCAN` to the end), or one `HSCAN`/`SSCAN`/`ZSCAN`
//! slice at a time. The caller holds the server lock. The server's rules
//! apply (hash fields whose TTL has passed are skipped), and sorted-set
//! scores are the bytes native `ZSCAN` replies (RESP2).

use super::call::{bytes, element, reply_len, reply_type, CallReply};
use super::{api, Ctx};
use crate::hash::{Builder, Kind, OverLimit};
use redis_module::raw;
use std::os::raw::c_longlong;

#[derive(Debug)]
pub enum CopyError {
    OverLimit(OverLimit),
    /// The key is gone or no longer of the kind copied.
    Gone,
    /// The server answered something unexpected.
    Failed(String),
}

impl From<OverLimit> for CopyError {
    fn from(e: OverLimit) -> Self {
        CopyError::OverLimit(e)
    }
}

/// Elements a `ZSCAN`-to-the-end copy reads per call.
const ZSCAN_STEP: usize = 1000;
/// Upper bound on the calls of a `ZSCAN`-to-the-end copy (the server's
/// cursor always ends; this only bounds a misbehaving one).
const MAX_CALLS: usize = 1 << 24;

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

/// Pushes `[f1, v1, f2, v2, ...]` (or `[m1, m2, ...]` for sets).
fn push_elements(arr: *mut raw::RedisModuleCallReply, b: &mut Builder) -> Result<(), CopyError> {
    let n = reply_len(arr);
    if b.kind().has_second() {
        for i in (0..n.saturating_sub(1)).step_by(2) {
            b.push(bytes(element(arr, i)), bytes(element(arr, i + 1)))?;
        }
    } else {
        for i in 0..n {
            b.push(bytes(element(arr, i)), b"")?;
        }
    }
    Ok(())
}

/// The whole collection in this one hold of the lock.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's or a locked thread-safe one)"
)]
pub fn copy_all(ctx: Ctx, key: &[u8], b: &mut Builder) -> Result<(), CopyError> {
    let cmd = match b.kind() {
        Kind::Hash => c"HGETALL",
        Kind::Set => c"SMEMBERS",
        Kind::Zset => {
            // No command returns members with ZSCAN's score format in one
            // go: scan to the end without letting go of the lock.
            let mut cursor = b"0".to_vec();
            for _ in 0..MAX_CALLS {
                cursor = scan_slice(ctx, key, &cursor, ZSCAN_STEP, b)?;
                if cursor == b"0" {
                    return Ok(());
                }
            }
            return Err(CopyError::Failed("ZSCAN did not end".into()));
        }
    };
    let call = api!(RedisModule_Call).ok_or(CopyError::Failed("no RM_Call".into()))?;
    // SAFETY: the server lock is held; "b" consumes (pointer, length).
    let r = unsafe { call(ctx, cmd.as_ptr(), c"b".as_ptr(), key.as_ptr(), key.len()) };
    let r = CallReply::new(r).ok_or_else(|| CopyError::Failed("the copy call failed".into()))?;
    check(r.0)?;
    push_elements(r.0, b)
}

/// One `HSCAN`/`SSCAN`/`ZSCAN key cursor COUNT count` slice; returns the
/// next cursor.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's or a locked thread-safe one)"
)]
pub fn scan_slice(
    ctx: Ctx,
    key: &[u8],
    cursor: &[u8],
    count: usize,
    b: &mut Builder,
) -> Result<Vec<u8>, CopyError> {
    let cmd = match b.kind() {
        Kind::Hash => c"HSCAN",
        Kind::Set => c"SSCAN",
        Kind::Zset => c"ZSCAN",
    };
    let call = api!(RedisModule_Call).ok_or(CopyError::Failed("no RM_Call".into()))?;
    // SAFETY: the server lock is held; "bbcl" consumes (ptr, len), (ptr,
    // len), a C string and a long long, exactly as passed.
    let r = unsafe {
        call(
            ctx,
            cmd.as_ptr(),
            c"bbcl".as_ptr(),
            key.as_ptr(),
            key.len(),
            cursor.as_ptr(),
            cursor.len(),
            c"COUNT".as_ptr(),
            count as c_longlong,
        )
    };
    let r = CallReply::new(r).ok_or_else(|| CopyError::Failed("the scan call failed".into()))?;
    check(r.0)?;
    let next = bytes(element(r.0, 0)).to_vec();
    let items = element(r.0, 1);
    if next.is_empty() || items.is_null() {
        return Err(CopyError::Failed("malformed scan reply".into()));
    }
    push_elements(items, b)?;
    Ok(next)
}
