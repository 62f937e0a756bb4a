//! Allocator policy for sluice's long-running processes (glibc only; no-ops elsewhere).
//!
//! Large payloads (a burst of write data, a read spanning chunks, an RDMA Read Response)
//! come and go in freshly allocated buffers. With glibc's defaults a buffer above the mmap
//! threshold is mapped, faulted in page by page and unmapped on every command, and freed heap
//! above the trim threshold goes back to the kernel only to be faulted in again by the next
//! command: with four 16 MiB writes in flight a target spent a third of its time in page
//! faults. [`keep_freed_buffers`] raises both thresholds so that freed buffers serve the next
//! command, as fio's own buffer pool would. What the heap keeps then goes back once the
//! process has nothing to do: [`return_freed_buffers_when_idle`] watches the process's CPU
//! time and calls `malloc_trim` while the process is idle, and [`use_one_heap`] keeps all of
//! that memory where `malloc_trim` can return it, so an idle target does not keep the memory
//! of the last burst of large I/O.
#![allow(unsafe_code)] // mallopt, malloc_trim, mallinfo2 (a test); see the SAFETY comments

use std::time::Duration;

use crate::cpu::CpuTime;

/// Keeps freed buffers of up to 64 MiB in the process's heap instead of returning them to the
/// kernel. Call once, before the process's threads start allocating.
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

/// Makes every thread allocate from the one main heap (`M_ARENA_MAX` 1), whose free memory
/// [`return_freed_buffers`] can give back whole. glibc trims a thread arena's top only as a
/// free crosses the trim threshold, which [`keep_freed_buffers`] raised past a thread heap's
/// 64 MiB: after a burst of 16 MiB I/O and a trim, an idle target's RSS was 32 to 131 MB
/// with per-thread arenas, 28 MB with one heap. One heap costs the data path nothing
/// measurable (it allocates little, and per-thread caches serve small allocations without
/// the arena lock): 4 KiB reads and writes at QD 32 moved the same with and without it,
/// 16 MiB writes 5 to 25 % more.
/// Call once, before the process's threads start allocating.
pub fn use_one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: as in `keep_freed_buffers`: two integers, no pointer, glibc's own lock.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Gives the free memory of every heap arena back to the kernel now; `true` when some was.
pub fn return_freed_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes an integer and no pointer; it works under each arena's
        // own lock and releases only memory no allocation holds.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// How often the idle watcher looks at the process's CPU time.
pub const IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Starts a thread that calls [`return_freed_buffers`] every [`IDLE_CHECK_INTERVAL`] in which
/// the process was idle ([`is_idle`]). The thread runs for the life of the process.
///
/// Trimming while busy would take arena locks the data path waits on and hand back pages the
/// next command faults in again. Trimming at every idle interval, not once per idle spell,
/// also catches buffers freed after the spell began without costing CPU (a closing
/// connection's queue flushed late); on an idle heap a trim finds little to do.
pub fn return_freed_buffers_when_idle() -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("sluice-idle-trim".into())
        .spawn(|| {
            let mut last = CpuTime::now();
            loop {
                std::thread::sleep(IDLE_CHECK_INTERVAL);
                let now = CpuTime::now();
                if is_idle(now.since(&last).total(), IDLE_CHECK_INTERVAL) {
                    return_freed_buffers();
                }
                last = now;
            }
        })
        .map(drop)
}

/// Below this share of one CPU over an interval, the process counts as idle (a target
/// answering NOP-Outs and scrapes uses far less; one moving data uses far more).
pub const IDLE_SHARE: f64 = 0.01;

/// Whether a process that used `used` of CPU time over `interval` was idle.
pub fn is_idle(used: Duration, interval: Duration) -> bool {
    used.as_secs_f64() < IDLE_SHARE * interval.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_a_share_of_the_interval() {
        let five_s = Duration::from_secs(5);
        // 1 % of 5 s is 50 ms.
        assert!(!is_idle(Duration::from_millis(60), five_s));
        assert!(!is_idle(Duration::from_millis(800), five_s));
        assert!(is_idle(Duration::from_millis(40), five_s));
        assert!(is_idle(Duration::ZERO, five_s));
    }

    /// Free bytes the heap arenas hold (glibc's `mallinfo2`, summed over arenas).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn heap_free_bytes() -> usize {
        // SAFETY: mallinfo2 takes no argument and returns a struct of integers by value.
        unsafe { libc::mallinfo2() }.fordblks
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_freed_large_buffer_stays_in_the_heap_until_returned() {
        keep_freed_buffers();
        let len = 32 << 20;
        let before = heap_free_bytes();
        let buf = std::hint::black_box(vec![1u8; len]);
        drop(buf);
        // With glibc's defaults a 32 MiB buffer is mmapped and unmapped on free: the heap's
        // free bytes would not grow by it.
        let kept = heap_free_bytes().saturating_sub(before);
        assert!(
            kept >= len / 2,
            "only {kept} bytes of a freed {len}-byte buffer kept"
        );
        assert!(return_freed_buffers(), "kept memory is given back");
    }
}
