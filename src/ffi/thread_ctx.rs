//! A detached thread-safe context for background threads that must take
//! the server lock (backfill slices, hash copy slices).

use super::{api, Ctx};

/// Owns a detached thread-safe context; lock it around every server call.
pub struct Detached(Ctx);

// SAFETY: a detached thread-safe context may be used from any thread as
// long as the server lock is taken around server calls, which `lock` does;
// we never use it from two threads at once (it is not Sync).
unsafe impl Send for Detached {}

impl Detached {
    pub fn new() -> Option<Self> {
        let get = api!(RedisModule_GetThreadSafeContext)?;
        // SAFETY: a NULL blocked client asks for a detached context.
        let c = unsafe { get(std::ptr::null_mut()) };
        (!c.is_null()).then_some(Detached(c))
    }

    /// The context itself, for a caller that already holds the server lock
    /// (e.g. code running on the main thread).
    pub fn ctx(&self) -> Ctx {
        self.0
    }

    /// Takes the server lock until the guard drops (also on unwind).
    pub fn lock(&self) -> Locked<'_> {
        if let Some(f) = api!(RedisModule_ThreadSafeContextLock) {
            // SAFETY: self.0 is live; this thread does not hold the lock yet.
            unsafe { f(self.0) };
        }
        Locked(self)
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(f) = api!(RedisModule_FreeThreadSafeContext) {
            // SAFETY: frees the context created in `new`, exactly once.
            unsafe { f(self.0) };
        }
    }
}

/// The server lock, held; gives the context to call the server with.
pub struct Locked<'a>(&'a Detached);

impl Locked<'_> {
    pub fn ctx(&self) -> Ctx {
        self.0 .0
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(f) = api!(RedisModule_ThreadSafeContextUnlock) {
            // SAFETY: this thread locked it in `Detached::lock`.
            unsafe { f(self.0 .0) };
        }
    }
}
