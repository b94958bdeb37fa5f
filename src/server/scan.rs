//! A RedisModule_Scan cursor over the selected database of a context, for
//! the index build (`backfill.rs`): each step calls a Rust closure per key.

use super::{api, Ctx};
use redis_module::raw;
use std::os::raw::c_void;

/// Whether this server can scan (RedisModule_Scan and a restartable cursor).
pub fn available() -> bool {
    api!(RedisModule_Scan).is_some() && api!(RedisModule_ScanCursorRestart).is_some()
}

/// A scan cursor, destroyed on drop. Main thread only.
pub struct Cursor(*mut raw::RedisModuleScanCursor);

impl Cursor {
    pub fn new() -> Option<Self> {
        let create = api!(RedisModule_ScanCursorCreate)?;
        // SAFETY: creates a cursor destroyed in Drop.
        Some(Cursor(unsafe { create() }))
    }

    /// Starts over (from the beginning of whatever database is scanned next).
    pub fn restart(&mut self) {
        if let Some(f) = api!(RedisModule_ScanCursorRestart) {
            // SAFETY: the cursor is live.
            unsafe { f(self.0) };
        }
    }

    /// One RedisModule_Scan call on the database selected on `ctx`: calls
    /// `on_key(ctx, keyname, key)` for each key it returns (`key` may be
    /// NULL; both live only for that call). A panic in `on_key` is caught
    /// and ends that key's call only. Returns whether keys remain; false
    /// without the API.
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is a live context owned by the calling main thread (server lock held), e.g. a Detached one"
    )]
    pub fn scan<F>(&mut self, ctx: Ctx, mut on_key: F) -> bool
    where
        F: FnMut(Ctx, *mut raw::RedisModuleString, *mut raw::RedisModuleKey),
    {
        let Some(scan) = api!(RedisModule_Scan) else {
            return false;
        };
        // SAFETY: main thread (server lock held); cursor and ctx are live;
        // the trampoline only uses `on_key` during this call, as an F.
        unsafe {
            scan(
                ctx,
                self.0,
                Some(trampoline::<F>),
                (&mut on_key as *mut F).cast(),
            ) != 0
        }
    }
}

extern "C" fn trampoline<F>(
    ctx: *mut raw::RedisModuleCtx,
    keyname: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    privdata: *mut c_void,
) where
    F: FnMut(Ctx, *mut raw::RedisModuleString, *mut raw::RedisModuleKey),
{
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: privdata is the `&mut F` passed to RedisModule_Scan by
        // `Cursor::scan` on this very thread, alive for the whole call.
        let on_key = unsafe { &mut *privdata.cast::<F>() };
        on_key(ctx, keyname, key);
    }));
}

impl Drop for Cursor {
    fn drop(&mut self) {
        if let Some(f) = api!(RedisModule_ScanCursorDestroy) {
            // SAFETY: destroys the cursor created in `new`, once.
            unsafe { f(self.0) };
        }
    }
}
