//! A blocked client that always gets exactly one reply.

use super::locked::ServerLock;
use super::reply::Reply;
use super::{api, Ctx};
use redis_module::raw;
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What answers a blocked client in place of an error (see
/// [`BlockedReply::block_with`]): run on the main thread, with the server
/// lock held, when the client is unblocked; it replies on the `Ctx` it is
/// given, the client's own context (e.g. with the native command's reply).
pub type Fallback = Box<dyn FnOnce(&ServerLock, Ctx) + Send>;

/// Owns a blocked client. Replying consumes it; dropping it without a reply
/// (a bug, or a panic unwinding through a worker) answers an error, so the
/// client is never left hanging. Either way the client is unblocked.
pub struct BlockedReply {
    bc: *mut raw::RedisModuleBlockedClient,
    replied: bool,
    /// Answers the client, on the main thread, where it would otherwise
    /// get an error (see [`BlockedReply::fail`] and the drop).
    fallback: Option<Fallback>,
    /// The count of clients the module keeps blocked: raised when blocked,
    /// lowered when unblocked.
    gauge: &'static AtomicU64,
    /// Whether [`BlockedReply::watch_disconnect`] registered it in
    /// [`WATCHED`].
    watched: bool,
    /// Whether the client was blocked with the reply callback (a fallback
    /// given), which runs [`BlockedReply::reply_then`]'s work.
    has_callback: bool,
    /// Main-thread work after the reply (see [`BlockedReply::reply_then`]).
    then: Option<Fallback>,
}

/// Global: the server's disconnect callback is given only the blocked
/// client's handle, and the handle's private data cannot be shared with a
/// worker safely. Blocked clients whose disconnection is watched (by
/// handle address): the flag their disconnect callback sets. Locking: held
/// for one insert, removal or lookup; the disconnect callback (main
/// thread) and the drop (any thread) take it.
static WATCHED: Mutex<Option<HashMap<usize, Arc<AtomicBool>>>> = Mutex::new(None);

fn watched() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Arc<AtomicBool>>>> {
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The disconnect callback of a watched blocked client (main thread):
/// sets its flag, so that work done for it can stop.
pub(super) fn on_disconnect(bc: *mut raw::RedisModuleBlockedClient) {
    if let Some(flag) = watched().as_ref().and_then(|m| m.get(&(bc as usize))) {
        flag.store(true, Ordering::Relaxed);
    }
}

// SAFETY: the module API allows a blocked-client handle to be used (replied
// to through its thread-safe context, then unblocked) from any one thread;
// we never share it, only move it.
unsafe impl Send for BlockedReply {}

// Global (per thread): set by a handler that blocked its client, read by
// the trampoline that called it on the same thread.
thread_local! {
    /// Set when the running command blocked its client: from then on only
    /// the [`BlockedReply`] answers it (see `commands::dispatch`).
    static BLOCKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the command running on this thread has blocked its client.
pub fn blocked_now() -> bool {
    BLOCKED.with(std::cell::Cell::get)
}

/// Clears and returns whether the command running on this thread blocked
/// its client.
pub fn take_blocked_flag() -> bool {
    BLOCKED.with(|b| b.replace(false))
}

impl BlockedReply {
    /// Blocks the client of the command context `ctx`, counted in `gauge`
    /// until it is unblocked. `None` when the server cannot block it (the
    /// caller then answers synchronously).
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is the context the server passed to the running command callback"
    )]
    pub fn block(ctx: Ctx, gauge: &'static AtomicU64) -> Option<Self> {
        Self::block_with(ctx, None, gauge)
    }

    /// [`block`](Self::block) with a `fallback` that answers the client
    /// instead of an error: when the work fails ([`fail`](Self::fail)) or
    /// the handle is dropped without a reply (a panic on a worker).
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is the context the server passed to the running command callback"
    )]
    pub fn block_with(
        ctx: Ctx,
        fallback: Option<Fallback>,
        gauge: &'static AtomicU64,
    ) -> Option<Self> {
        let f = api!(RedisModule_BlockClient)?;
        let bc = if fallback.is_some() {
            // SAFETY: ctx is the live command context; the reply callback
            // runs the fallback handed over with the unblock (if any), the
            // free callback frees it; no timeout.
            unsafe {
                f(
                    ctx,
                    Some(super::entry::blocked_reply),
                    None,
                    Some(free_fallback),
                    0,
                )
            }
        } else {
            // SAFETY: ctx is the live command context; no callbacks, no timeout.
            unsafe { f(ctx, None, None, None, 0) }
        };
        if bc.is_null() {
            return None;
        }
        BLOCKED.with(|b| b.set(true));
        gauge.fetch_add(1, Ordering::Relaxed);
        let has_callback = fallback.is_some();
        Some(BlockedReply {
            bc,
            replied: false,
            fallback,
            gauge,
            watched: false,
            has_callback,
            then: None,
        })
    }

    /// A flag that becomes true if the client disconnects while blocked:
    /// the work done for it can stop early (its reply would be dropped).
    pub fn watch_disconnect(&mut self) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        let Some(set) = api!(RedisModule_SetDisconnectCallback) else {
            return flag;
        };
        watched()
            .get_or_insert_with(HashMap::new)
            .insert(self.bc as usize, flag.clone());
        self.watched = true;
        // SAFETY: bc is a live blocked client we own; the callback only
        // looks the handle up in WATCHED, from which the drop removes it
        // before unblocking.
        unsafe { set(self.bc, Some(super::entry::blocked_disconnect)) };
        flag
    }

    fn with_reply(&mut self, write: impl FnOnce(&Reply)) {
        let (Some(get), Some(free)) = (
            api!(RedisModule_GetThreadSafeContext),
            api!(RedisModule_FreeThreadSafeContext),
        ) else {
            return;
        };
        // SAFETY: bc is a live blocked client we own; replies on its
        // thread-safe context need no server lock and are delivered when we
        // unblock. The context is freed before the client is unblocked.
        unsafe {
            let tctx = get(self.bc);
            if tctx.is_null() {
                return;
            }
            write(&Reply::new(tctx));
            free(tctx);
        }
        self.replied = true;
    }

    /// Sends the reply written by `write` and unblocks the client.
    pub fn reply(mut self, write: impl FnOnce(&Reply)) {
        self.with_reply(write);
    }

    /// Sends the reply written by `write`, unblocks the client, and then
    /// runs `then` on the main thread (with the client's context; it must
    /// not reply). Only for a client blocked with a fallback (whose reply
    /// callback runs it); otherwise `then` is dropped.
    pub fn reply_then(mut self, write: impl FnOnce(&Reply), then: Fallback) {
        self.with_reply(write);
        if self.has_callback {
            self.then = Some(then);
        }
    }

    /// Answers a failure: by the fallback when the client was blocked with
    /// one (on the main thread, once unblocked), else by `write` (an error).
    pub fn fail(self, write: impl FnOnce(&Reply)) {
        if self.fallback.is_none() {
            self.reply(write);
        }
    }
}

impl Drop for BlockedReply {
    fn drop(&mut self) {
        let mut privdata: *mut c_void = std::ptr::null_mut();
        if !self.replied {
            match self.fallback.take() {
                // Handed to the reply callback with the unblock.
                Some(f) => privdata = Box::into_raw(Box::new(Some(f))).cast(),
                None => self.with_reply(|r| {
                    r.error("ERR snapscan: internal error while serving the request")
                }),
            }
        } else if let Some(t) = self.then.take() {
            // Replied: the reply callback runs the work after it.
            privdata = Box::into_raw(Box::new(Some(t))).cast();
        }
        self.gauge.fetch_sub(1, Ordering::Relaxed);
        if self.watched {
            if let Some(m) = watched().as_mut() {
                m.remove(&(self.bc as usize));
            }
        }
        if let Some(unblock) = api!(RedisModule_UnblockClient) {
            // SAFETY: bc is live and unblocked exactly once, here; privdata
            // is null or a `Box<Option<Fallback>>` that the server hands to
            // `blocked_reply` and then to `free_fallback`, which frees it.
            unsafe { unblock(self.bc, privdata) };
        }
    }
}

/// The reply callback of a client blocked with a fallback (main thread,
/// `ctx` the client's reply context): runs the fallback it was unblocked
/// with, if any (none when it was answered by a worker). A panicking
/// fallback answers an error.
pub(super) fn on_reply(lock: &ServerLock, ctx: Ctx) {
    let Some(get) = api!(RedisModule_GetBlockedClientPrivateData) else {
        return;
    };
    // SAFETY: ctx is the reply callback's live context.
    let p = unsafe { get(ctx) }.cast::<Option<Fallback>>();
    if p.is_null() {
        return;
    }
    // SAFETY: a non-null private data of a client blocked by `block_with`
    // is the `Box<Option<Fallback>>` its drop made, freed only later by
    // `free_fallback`; only the main thread touches it now.
    let Some(f) = (unsafe { &mut *p }).take() else {
        return;
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(lock, ctx)));
    if ran.is_err() {
        Reply::new(ctx).error("ERR snapscan: internal error while serving the request");
    }
}

/// Frees the private data of a client blocked by [`BlockedReply::block_with`].
extern "C" fn free_fallback(_ctx: *mut raw::RedisModuleCtx, privdata: *mut c_void) {
    if !privdata.is_null() {
        // SAFETY: the server passes back the `Box<Option<Fallback>>` made
        // in the drop, once, after the reply callback (if any) ran.
        drop(unsafe { Box::from_raw(privdata.cast::<Option<Fallback>>()) });
    }
}
