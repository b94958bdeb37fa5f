//! State that only the holder of the server lock touches (the main thread
//! in a callback, or a thread holding the lock), without a mutex of its
//! own: the server lock already serialises every access, so a notification
//! pays no locked instruction for it.
//!
//! Access needs a [`ServerLock`] token, which only the entry points the
//! server calls under its lock mint (`entry.rs`, `mainloop.rs`) and pass
//! down. The cell never lends a reference out (values
//! are moved in and out), so a callback the server re-enters from inside
//! another one cannot alias it either.

use std::cell::UnsafeCell;
use std::marker::PhantomData;

/// Proof that the server lock is held by the running thread. Neither
/// `Send` nor `Sync`: it cannot leave the callback that made it.
pub struct ServerLock(PhantomData<*const ()>);

impl ServerLock {
    /// The token of a callback the server runs under its lock: keyspace
    /// notifications, server events, command handlers, INFO callbacks and
    /// timers (all on the main thread).
    ///
    /// # Safety
    /// The calling thread holds the server lock for as long as the token
    /// lives: call it only at the top of such a callback (see `entry.rs`).
    #[inline]
    pub(super) unsafe fn new_unchecked() -> Self {
        ServerLock(PhantomData)
    }
}

/// A value read and written only under the server lock.
pub struct LockedCell<T>(UnsafeCell<T>);

// SAFETY: every access goes through a `ServerLock`, held by one thread at a
// time (the server lock), so the value is never touched by two threads at
// once; `T: Send` because successive holders may be different threads.
unsafe impl<T: Send> Sync for LockedCell<T> {}

impl<T> LockedCell<T> {
    pub const fn new(value: T) -> Self {
        LockedCell(UnsafeCell::new(value))
    }

    /// Puts `value` in the cell and returns the previous one.
    #[inline]
    pub fn replace(&self, _lock: &ServerLock, value: T) -> T {
        // No reference to the content outlives this call and nothing in it
        // calls back into the server: no aliasing access on this thread.
        // SAFETY: the server lock is held (the token), so no other thread
        // accesses the cell, and (above) nor does this one meanwhile.
        unsafe { std::ptr::replace(self.0.get(), value) }
    }
}

impl<T: Copy> LockedCell<T> {
    /// A copy of the value.
    #[inline]
    pub fn get(&self, _lock: &ServerLock) -> T {
        // SAFETY: as in `replace`: the lock is held and no reference to the
        // content exists meanwhile.
        unsafe { *self.0.get() }
    }
}

impl<T> LockedCell<Option<T>> {
    /// Takes the value out, leaving `None`.
    #[inline]
    pub fn take(&self, lock: &ServerLock) -> Option<T> {
        self.replace(lock, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_move_in_and_out() {
        static CELL: LockedCell<Option<u32>> = LockedCell::new(None);
        // SAFETY: a test thread, alone with these cells.
        let lock = unsafe { ServerLock::new_unchecked() };
        assert_eq!(CELL.take(&lock), None);
        assert_eq!(CELL.replace(&lock, Some(3)), None);
        assert_eq!(CELL.take(&lock), Some(3));
        assert_eq!(CELL.take(&lock), None);
        let flag = LockedCell::new(false);
        flag.replace(&lock, true);
        assert!(flag.get(&lock));
    }
}
