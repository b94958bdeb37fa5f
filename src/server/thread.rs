//! Operating-system calls about the calling thread.

/// Lowers the calling thread's scheduling priority to `nice` (0-19).
pub fn set_nice(nice: usize) {
    // SAFETY: gettid and setpriority only read their arguments and affect
    // the calling thread's scheduling priority; failure is harmless.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice.min(19) as libc::c_int);
    }
}
