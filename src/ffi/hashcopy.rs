//! Reading a hash's fields and values from the server into a
//! [`Builder`], through `HGETALL` or one `HSCAN` slice at a time. The
//! caller holds the server lock. Both commands apply the server's own
//! rules (fields whose TTL has passed are skipped).

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

/// An owned RedisModule_Call reply, freed on drop.
struct CallReply(*mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeCallReply) {
            // SAFETY: the reply came from RedisModule_Call and is freed once.
            unsafe { free(self.0) };
        }
    }
}

fn reply_type(r: *mut raw::RedisModuleCallReply) -> isize {
    match api!(RedisModule_CallReplyType) {
        // SAFETY: r is a live reply (or an element of one).
        Some(f) => (unsafe { f(r) }) as isize,
        None => raw::REDISMODULE_REPLY_UNKNOWN,
    }
}

fn reply_len(r: *mut raw::RedisModuleCallReply) -> usize {
    match api!(RedisModule_CallReplyLength) {
        // SAFETY: r is a live reply.
        Some(f) => unsafe { f(r) },
        None => 0,
    }
}

fn element(r: *mut raw::RedisModuleCallReply, i: usize) -> *mut raw::RedisModuleCallReply {
    match api!(RedisModule_CallReplyArrayElement) {
        // SAFETY: r is a live array reply; out-of-range indexes return NULL.
        Some(f) => unsafe { f(r, i) },
        None => std::ptr::null_mut(),
    }
}

/// Bytes of a string element; the slice lives as long as the whole reply.
fn bytes<'a>(r: *mut raw::RedisModuleCallReply) -> &'a [u8] {
    let Some(f) = api!(RedisModule_CallReplyStringPtr) else {
        return &[];
    };
    if r.is_null() {
        return &[];
    }
    let mut len = 0usize;
    // SAFETY: r is a live string reply; the pointer is valid for `len` bytes
    // while the top-level reply is alive (callers keep it alive).
    unsafe {
        let p = f(r, &mut len);
        if p.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
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
