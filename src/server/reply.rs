//! Writing RESP replies on a context (a command's, or a blocked client's
//! thread-safe one; the server allows replies there without its lock).

use super::{api, Ctx};
use std::ffi::CString;

pub struct Reply(Ctx);

impl Reply {
    pub fn new(ctx: Ctx) -> Self {
        Reply(ctx)
    }

    pub fn array(&self, len: usize) {
        if let Some(f) = api!(RedisModule_ReplyWithArray) {
            // SAFETY: self.0 is a live context we may reply on.
            unsafe { f(self.0, len as libc::c_long) };
        }
    }

    pub fn bulk(&self, bytes: &[u8]) {
        if let Some(f) = api!(RedisModule_ReplyWithStringBuffer) {
            // SAFETY: the buffer is valid for `len` bytes; the server copies it.
            unsafe { f(self.0, bytes.as_ptr().cast(), bytes.len()) };
        }
    }

    pub fn long(&self, v: i64) {
        if let Some(f) = api!(RedisModule_ReplyWithLongLong) {
            // SAFETY: plain value reply on a live context.
            unsafe { f(self.0, v) };
        }
    }

    /// An error reply; `msg` starts with its code (`ERR ...`, `LOADING ...`).
    pub fn error(&self, msg: &str) {
        let text = msg.replace(['\r', '\n', '\0'], " ");
        let Ok(c) = CString::new(text) else { return };
        if let Some(f) = api!(RedisModule_ReplyWithError) {
            // SAFETY: c is a valid NUL-terminated string; the server copies it.
            unsafe { f(self.0, c.as_ptr()) };
        }
    }

    pub fn wrong_arity(&self) {
        if let Some(f) = api!(RedisModule_WrongArity) {
            // SAFETY: replies the standard arity error on a live command context.
            unsafe { f(self.0) };
        }
    }
}
