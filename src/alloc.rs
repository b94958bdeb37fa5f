//! The module's global allocator: the server's own (so our memory counts in
//! `used_memory` and `maxmemory`), plus a count of the bytes the module
//! holds, reported as `snapshot_module_heap_bytes`.
//!
//! The server's allocator promises malloc's alignment (16 bytes on the
//! platforms we build for), whatever the layout asks: libc malloc (Valkey
//! 9.1's PyPI build) returns blocks that are only 16-byte aligned. Types
//! aligned beyond that (the filter's 64-byte blocks, dashmap's shards) get
//! an over-allocated block, aligned inside it, with the server's pointer
//! stored in the 8 bytes right before the aligned one.

use redis_module::alloc::RedisAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Global: the `#[global_allocator]` has no instance and counts every
/// allocation of the process, before OnLoad too.
static HEAP: AtomicUsize = AtomicUsize::new(0);

/// Alignment every block of the server's allocator has.
const MALLOC_ALIGN: usize = 16;

/// Bytes currently allocated by the module (requested sizes).
pub fn heap_bytes() -> usize {
    HEAP.load(Ordering::Relaxed)
}

/// What to ask the server for to serve `layout`: `layout` itself when
/// malloc's alignment suffices, else room for the block at any alignment
/// plus the stored pointer (`None`: the size overflows).
fn server_layout(layout: Layout) -> Option<Layout> {
    if layout.align() <= MALLOC_ALIGN {
        return Some(layout);
    }
    let size = layout.size().checked_add(layout.align())?;
    Layout::from_size_align(size, MALLOC_ALIGN).ok()
}

/// Where the aligned block starts inside a server block at `base`
/// (`align` > [`MALLOC_ALIGN`], a power of two): past `base` by at least
/// [`MALLOC_ALIGN`] bytes (room for the stored pointer), by at most `align`.
fn aligned_start(base: usize, align: usize) -> usize {
    (base + align) & !(align - 1)
}

pub struct CountingAlloc;

// A block aligned beyond malloc's is carved out of a larger one (see
// `aligned_start`: it lies inside it, with `layout.size()` bytes after it
// and 8 bytes before it for the server's pointer, which `dealloc` reads
// back); the bookkeeping never touches the memory handed out.
// SAFETY: blocks come from RedisAlloc, a valid GlobalAlloc (see above).
unsafe impl GlobalAlloc for CountingAlloc {
    // SAFETY: callers uphold GlobalAlloc::alloc's contract (a non-zero-sized
    // layout), which is passed on as is.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(server) = server_layout(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: same contract as our caller's (`server` is non-zero-sized
        // when `layout` is, being at least as large).
        let base = unsafe { RedisAlloc.alloc(server) };
        if base.is_null() {
            return base;
        }
        HEAP.fetch_add(layout.size(), Ordering::Relaxed);
        if server == layout {
            return base;
        }
        let offset = aligned_start(base as usize, layout.align()) - base as usize;
        // SAFETY: `offset` is in MALLOC_ALIGN..=align, so the aligned block
        // and the 8 bytes before it lie inside the `size + align` bytes of
        // `base`, and the stored pointer is 8-byte aligned.
        unsafe {
            let p = base.add(offset);
            p.cast::<*mut u8>().sub(1).write(base);
            p
        }
    }

    // SAFETY: callers uphold GlobalAlloc::dealloc's contract: `ptr` came
    // from `alloc` with this `layout`.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(server) = server_layout(layout) else {
            return;
        };
        let base = if server == layout {
            ptr
        } else {
            // SAFETY: `alloc` stored the server's pointer right before `ptr`.
            unsafe { ptr.cast::<*mut u8>().sub(1).read() }
        };
        // SAFETY: `base` is the block RedisAlloc returned for `server`.
        unsafe { RedisAlloc.dealloc(base, server) };
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(8, 8, None)]
    #[case(100, 16, None)]
    #[case(4096, 64, Some(4096 + 64))]
    #[case(128, 128, Some(256))]
    fn only_over_aligned_layouts_ask_for_more(
        #[case] size: usize,
        #[case] align: usize,
        #[case] grown: Option<usize>,
    ) {
        let layout = Layout::from_size_align(size, align).unwrap();
        let server = server_layout(layout).unwrap();
        match grown {
            None => assert_eq!(server, layout),
            Some(n) => {
                assert_eq!(server.size(), n);
                assert_eq!(server.align(), MALLOC_ALIGN);
            }
        }
    }

    #[test]
    fn an_oversized_request_is_refused_not_wrapped() {
        let layout = Layout::from_size_align(isize::MAX as usize - 63, 64).unwrap();
        assert!(server_layout(layout).is_none());
    }

    #[rstest]
    fn the_aligned_block_fits_inside_with_room_for_the_pointer(
        #[values(32, 64, 128, 4096)] align: usize,
    ) {
        // Every 16-byte aligned base a malloc could return, over two periods.
        for base in (0x1000..0x1000 + 2 * align).step_by(MALLOC_ALIGN) {
            let start = aligned_start(base, align);
            assert_eq!(start % align, 0, "aligned");
            assert!(start - base >= MALLOC_ALIGN, "room for the pointer");
            assert!(start - base <= align, "the block fits in size + align");
        }
    }
}
