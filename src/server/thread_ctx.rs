//! A detached context of the module's own: a fake client whose selected
//! database can be changed without touching any real client. Used on the
//! main thread (index build, hash copies, re-reading keys in other
//! databases).

use super::{api, Ctx};

/// Owns a detached thread-safe context; lock it around every server call.
pub struct Detached(Ctx);

// SAFETY: a detached thread-safe context may be moved between threads; it
// is only ever used on the main thread (or with the server lock held), and
// never from two threads at once (it is not Sync).
unsafe impl Send for Detached {}

impl Detached {
    pub fn new() -> Option<Self> {
        let get = api!(RedisModule_GetThreadSafeContext)?;
        // SAFETY: a NULL blocked client asks for a detached context.
        let c = unsafe { get(std::ptr::null_mut()) };
        // Not `then_some`: it would build, then drop (free), a NULL context.
        (!c.is_null()).then(|| Detached(c))
    }

    /// The context itself, for code on the main thread.
    pub fn ctx(&self) -> Ctx {
        self.0
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
