//! A blocked client that always gets exactly one reply.

use super::reply::Reply;
use super::{api, Ctx};
use redis_module::raw;

/// Owns a blocked client. Replying consumes it; dropping it without a reply
/// (a bug, or a panic unwinding through a worker) answers an error, so the
/// client is never left hanging. Either way the client is unblocked.
pub struct BlockedReply {
    bc: *mut raw::RedisModuleBlockedClient,
    replied: bool,
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
    /// Blocks the client of the command context `ctx`. `None` when the
    /// server cannot block it (the caller then answers synchronously).
    #[allow(
        clippy::not_unsafe_ptr_arg_deref,
        reason = "ctx is the context the server passed to the running command callback"
    )]
    pub fn block(ctx: Ctx) -> Option<Self> {
        let f = api!(RedisModule_BlockClient)?;
        // SAFETY: ctx is the live command context; no callbacks, no timeout.
        let bc = unsafe { f(ctx, None, None, None, 0) };
        if bc.is_null() {
            return None;
        }
        BLOCKED.with(|b| b.set(true));
        Some(BlockedReply { bc, replied: false })
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
}

impl Drop for BlockedReply {
    fn drop(&mut self) {
        if !self.replied {
            self.with_reply(|r| r.error("ERR snapscan: internal error while serving the request"));
        }
        if let Some(unblock) = api!(RedisModule_UnblockClient) {
            // SAFETY: bc is live and unblocked exactly once, here.
            unsafe { unblock(self.bc, std::ptr::null_mut()) };
        }
    }
}
