//! The module's global allocator: the server's own (so our memory counts in
//! `used_memory` and `maxmemory`), plus a count of the bytes the module
//! holds, reported as `snapshot_module_heap_bytes`.

use redis_module::alloc::RedisAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

static HEAP: AtomicUsize = AtomicUsize::new(0);

/// Bytes currently allocated by the module (requested sizes).
pub fn heap_bytes() -> usize {
    HEAP.load(Ordering::Relaxed)
}

pub struct CountingAlloc;

// SAFETY: every call is forwarded unchanged to RedisAlloc, a valid
// GlobalAlloc; we only add bookkeeping that never touches the memory.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as our caller's.
        let p = unsafe { RedisAlloc.alloc(layout) };
        if !p.is_null() {
            HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    // SAFETY: callers uphold GlobalAlloc::dealloc's contract, which is
    // forwarded as is.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's (ptr came from `alloc`).
        unsafe { RedisAlloc.dealloc(ptr, layout) };
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}
