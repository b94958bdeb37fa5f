//! Replies of `RedisModule_Call`: ownership and reading.

use super::api;
use redis_module::raw;

/// An owned RedisModule_Call reply, freed on drop.
pub struct CallReply(pub *mut raw::RedisModuleCallReply);

impl Drop for CallReply {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeCallReply) {
            // SAFETY: the reply came from RedisModule_Call and is freed once.
            unsafe { free(self.0) };
        }
    }
}

#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "r is a RedisModule_Call reply (or an element of one) kept alive by its owning CallReply"
)]
pub fn reply_type(r: *mut raw::RedisModuleCallReply) -> isize {
    match api!(RedisModule_CallReplyType) {
        // SAFETY: r is a live reply (or an element of one).
        Some(f) => (unsafe { f(r) }) as isize,
        None => raw::REDISMODULE_REPLY_UNKNOWN,
    }
}

#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "r is a RedisModule_Call reply (or an element of one) kept alive by its owning CallReply"
)]
pub fn reply_len(r: *mut raw::RedisModuleCallReply) -> usize {
    match api!(RedisModule_CallReplyLength) {
        // SAFETY: r is a live reply.
        Some(f) => unsafe { f(r) },
        None => 0,
    }
}

#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "r is a RedisModule_Call reply (or an element of one) kept alive by its owning CallReply"
)]
pub fn element(r: *mut raw::RedisModuleCallReply, i: usize) -> *mut raw::RedisModuleCallReply {
    match api!(RedisModule_CallReplyArrayElement) {
        // SAFETY: r is a live array reply; out-of-range indexes return NULL.
        Some(f) => unsafe { f(r, i) },
        None => std::ptr::null_mut(),
    }
}

/// Bytes of a string element; the slice lives as long as the whole reply.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "r is a RedisModule_Call reply (or an element of one) kept alive by its owning CallReply, or NULL"
)]
pub fn bytes<'a>(r: *mut raw::RedisModuleCallReply) -> &'a [u8] {
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

impl CallReply {
    /// Takes ownership of a reply; `None` for a failed call (NULL).
    pub fn new(r: *mut raw::RedisModuleCallReply) -> Option<Self> {
        // Not `then_some`: it would build, then drop (free), a NULL reply.
        (!r.is_null()).then(|| CallReply(r))
    }

    /// The bytes of a string (bulk or status) reply; `None` for any other
    /// kind (an error reply, for instance).
    pub fn string(&self) -> Option<&[u8]> {
        (reply_type(self.0) == raw::REDISMODULE_REPLY_STRING).then(|| bytes(self.0))
    }
}
