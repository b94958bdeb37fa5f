//! Reading a collection's elements from the server into a [`Builder`]:
//! the whole of it at once with the server's own commands (`HGETALL`,
//! `SMEMBERS`, or `ZSCAN` to the end, through `RedisModule_Call` on the
//! caller's context), or slice by slice with a [`KeyCursor`]
//! (`RedisModule_OpenKey` + `RedisModule_ScanKey`, on any context). The
//! caller holds the server lock. The server's rules apply (hash fields
//! whose TTL has passed are skipped), and sorted-set scores are the bytes
//! native `ZSCAN` replies (RESP2).
//!
//! Why two ways: `RedisModule_Call` on a cluster node checks that the keys
//! are served here with the flags of the context's client (READONLY,
//! ASKING). The caller's context has them; a context of the module's own
//! (the one later slices run on, after the caller's command returned) does
//! not, so on a replica or an importing node the call is refused. Opening
//! the key makes no such check: the caller's command passed it already.

use super::call::{bytes, element, reply_len, reply_type, CallReply};
use super::{api, string_bytes, Ctx, OwnedString};
use crate::collections::{Builder, Kind, OverLimit};
use redis_module::raw;
use std::os::raw::{c_longlong, c_void};

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
/// Upper bound on the calls of a copy to the end (`ZSCAN`, or
/// `RedisModule_ScanKey`: the server's cursor always ends; this only bounds
/// a misbehaving one). A `RedisModule_ScanKey` call walks about one bucket,
/// and a table of 2^k buckets takes 2^k calls: past any table's size.
const MAX_CALLS: usize = 1 << 40;
/// `RedisModule_ScanKey` calls a slice may make per element it wants (each
/// call walks one step of the table's cursor, one bucket or so, empty or
/// not; native `HSCAN` allows `COUNT * 10` steps the same way).
const CALLS_PER_ELEMENT: usize = 10;
/// How a slice opens the key: no side effects.
use super::keys::OPEN_FLAGS;

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
    // SAFETY: the server lock is held; "b" consumes (pointer, length); "E"
    // asks for errors the server raises before running the command as
    // error replies.
    let r = unsafe { call(ctx, cmd.as_ptr(), c"bE".as_ptr(), key.as_ptr(), key.len()) };
    let r = CallReply::new(r).ok_or_else(|| failed_call("the copy call failed"))?;
    check(r.0)?;
    push_elements(r.0, b)
}

/// `what` failed with no error reply (a server without the "E" flag, or
/// an error it reports by `errno` only): the `errno` it left.
fn failed_call(what: &str) -> CopyError {
    CopyError::Failed(format!("{what} ({})", std::io::Error::last_os_error()))
}

/// One `ZSCAN key cursor COUNT count` slice (or `HSCAN`/`SSCAN`); returns
/// the next cursor.
fn scan_slice(
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
    // len), a C string and a long long, exactly as passed ("E": errors as
    // error replies).
    let r = unsafe {
        call(
            ctx,
            cmd.as_ptr(),
            c"bbclE".as_ptr(),
            key.as_ptr(),
            key.len(),
            cursor.as_ptr(),
            cursor.len(),
            c"COUNT".as_ptr(),
            count as c_longlong,
        )
    };
    let r = CallReply::new(r).ok_or_else(|| failed_call("the scan call failed"))?;
    check(r.0)?;
    let next = bytes(element(r.0, 0)).to_vec();
    let items = element(r.0, 1);
    if next.is_empty() || items.is_null() {
        return Err(CopyError::Failed("malformed scan reply".into()));
    }
    push_elements(items, b)?;
    Ok(next)
}

/// A `RedisModule_ScanKey` cursor over one collection, kept between
/// slices (the key is opened again for each): a slice runs on any context,
/// the caller's or one of the module's own, and no cluster check applies
/// (see the top of this file). Like `HSCAN`'s cursor it returns every
/// element present from the first slice to the last at least once,
/// whatever rehashing happens in between (duplicates are removed by the
/// [`Builder`]); an element written meanwhile may or may not be, so the
/// caller restarts the cursor when the collection changes. Destroyed on
/// drop; used on the main thread (or with the server lock held) only.
pub struct KeyCursor(*mut raw::RedisModuleScanCursor);

impl KeyCursor {
    /// `None` when the server lacks the API.
    pub fn new() -> Option<Self> {
        api!(RedisModule_ScanKey)?;
        let create = api!(RedisModule_ScanCursorCreate)?;
        // SAFETY: creates a cursor that Drop destroys.
        let c = unsafe { create() };
        // Not `then_some`: it would build, then drop (destroy), a NULL cursor.
        (!c.is_null()).then(|| KeyCursor(c))
    }

    /// Starts over from the first element.
    pub fn restart(&mut self) {
        if let Some(f) = api!(RedisModule_ScanCursorRestart) {
            // SAFETY: the cursor is live.
            unsafe { f(self.0) };
        }
    }

    /// One slice: pushes at least `count` elements of the collection at
    /// `key` (in the database selected on `ctx`) into `b`, or all that
    /// remain (a listpack or intset encoding: all of them). Returns whether
    /// elements remain. `Gone` when the key is missing or not of the kind
    /// copied.
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is a live context of the calling thread with the server lock held (a main-thread callback's, a command's, or a locked thread-safe one)"
    )]
    pub fn slice(
        &mut self,
        ctx: Ctx,
        key: &[u8],
        count: usize,
        b: &mut Builder,
    ) -> Result<bool, CopyError> {
        let calls = count.saturating_mul(CALLS_PER_ELEMENT).max(1);
        self.scan(ctx, key, count, calls, b)
    }

    /// The rest of the collection in this one hold of the lock (from the
    /// start after [`KeyCursor::restart`]).
    pub fn to_end(&mut self, ctx: Ctx, key: &[u8], b: &mut Builder) -> Result<(), CopyError> {
        match self.scan(ctx, key, usize::MAX, MAX_CALLS, b)? {
            false => Ok(()),
            true => Err(CopyError::Failed("the key scan did not end".into())),
        }
    }

    fn scan(
        &mut self,
        ctx: Ctx,
        key: &[u8],
        count: usize,
        max_calls: usize,
        b: &mut Builder,
    ) -> Result<bool, CopyError> {
        let (Some(open), Some(close), Some(ktype), Some(scan)) = (
            api!(RedisModule_OpenKey),
            api!(RedisModule_CloseKey),
            api!(RedisModule_KeyType),
            api!(RedisModule_ScanKey),
        ) else {
            return Err(CopyError::Failed("no RM_ScanKey".into()));
        };
        let name = OwnedString::new(ctx, key).ok_or(CopyError::Failed("out of memory".into()))?;
        let want = match b.kind() {
            Kind::Hash => raw::REDISMODULE_KEYTYPE_HASH,
            Kind::Set => raw::REDISMODULE_KEYTYPE_SET,
            Kind::Zset => raw::REDISMODULE_KEYTYPE_ZSET,
        };
        // SAFETY: ctx and name are live and the server lock is held; the
        // key handle is closed below, before returning.
        let k = unsafe { open(ctx, name.ptr(), OPEN_FLAGS as i32) };
        if k.is_null() {
            return Err(CopyError::Gone);
        }
        let mut state = Slice {
            b,
            pushed: 0,
            err: None,
        };
        let mut more = true;
        // SAFETY: k is the live handle opened above.
        if unsafe { ktype(k) } as isize != want {
            more = false;
            state.err = Some(CopyError::Gone);
        }
        let mut calls = 0;
        while more && state.err.is_none() && state.pushed < count && calls < max_calls {
            calls += 1;
            // SAFETY: k and the cursor are live; the trampoline uses
            // `state` only during this call, as a `Slice`, on this thread.
            more = unsafe {
                scan(
                    k,
                    self.0,
                    Some(on_element),
                    (&mut state as *mut Slice).cast(),
                )
            } != 0;
        }
        // SAFETY: closes the handle opened above, once.
        unsafe { close(k) };
        match state.err {
            Some(e) => Err(e),
            None => Ok(more),
        }
    }
}

impl Drop for KeyCursor {
    fn drop(&mut self) {
        if let Some(f) = api!(RedisModule_ScanCursorDestroy) {
            // SAFETY: destroys the cursor created in `new`, once.
            unsafe { f(self.0) };
        }
    }
}

/// What one slice's callbacks share.
struct Slice<'a> {
    b: &'a mut Builder,
    pushed: usize,
    /// The first error; later elements are ignored.
    err: Option<CopyError>,
}

extern "C" fn on_element(
    _key: *mut raw::RedisModuleKey,
    field: *mut raw::RedisModuleString,
    value: *mut raw::RedisModuleString,
    privdata: *mut c_void,
) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: privdata is the `&mut Slice` `KeyCursor::scan` passed to
        // RedisModule_ScanKey on this very thread, alive for the whole call.
        let s = unsafe { &mut *privdata.cast::<Slice>() };
        if s.err.is_some() {
            return;
        }
        // The strings live for this callback (value is NULL for sets).
        match s.b.push(string_bytes(field), string_bytes(value)) {
            Ok(()) => s.pushed += 1,
            Err(e) => s.err = Some(e.into()),
        }
    }));
}
