//! CPU hints used by the index's batched lookups.

/// Asks the CPU to bring the cache line at `p` into its caches. Only a
/// hint: the address is never dereferenced, so any pointer is fine.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect
    // whatever the address; SSE is part of the x86_64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
