//! Allocator tuning for a load generator. Large reads come back in freshly allocated buffers;
//! with glibc's defaults a 1 MiB buffer is mmapped, faulted in page by page and unmapped again
//! on every command. Raising the mmap and trim thresholds keeps freed buffers in the heap for
//! the next command, as fio's own buffer pool would.
#![allow(unsafe_code)] // mallopt; see the SAFETY comment

/// Keeps freed buffers of up to 64 MiB in the process's heap instead of returning them to the
/// kernel (glibc only; a no-op elsewhere). Call once, before the run.
pub fn keep_freed_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_THRESHOLD: libc::c_int = 64 << 20;
        const TRIM_THRESHOLD: libc::c_int = 256 << 20;
        // SAFETY: mallopt takes two integers and no pointer, so no memory of ours is at stake;
        // it only changes glibc's thresholds for later allocations and frees, under glibc's
        // own arena lock. It is called before the run's threads start allocating.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
