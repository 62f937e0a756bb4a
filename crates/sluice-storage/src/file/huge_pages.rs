//! Backing a mapped tmpfs LUN with 2 MiB pages, in the background.
//!
//! A 1 MiB read of a mapped LUN is one copy, page cache to socket, and that copy streams from
//! memory rather than cache; with 4 KiB pages it also takes a TLB miss every 4 KiB. Asking
//! the kernel to collapse the file's pages into transparent huge pages (`MADV_COLLAPSE`,
//! Linux 6.1) made 1 MiB reads 6 to 9 % faster on the development machine
//! (docs/performance.md). `MADV_COLLAPSE` works on tmpfs even when the mount says
//! `huge=never` (only `shmem_enabled=deny` refuses it); it changes how the file's pages are
//! held, never their contents, and the file keeps its huge pages after sluice exits.
//!
//! Collapsing copies each 2 MiB window once (about 1 to 3 s of CPU per GiB here), so a thread of
//! its own does it at the lowest priority (nice 19), one window at a time, while the LUN is
//! already being served: an access to a window being collapsed just waits for the kernel to
//! finish it. Only fully allocated files are mapped, so collapsing allocates no new memory
//! beyond one transient 2 MiB page.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

/// `MADV_COLLAPSE` from the Linux UAPI (`asm-generic/mman-common.h`), spelled out because not
/// every libc target of the `libc` crate exports it.
const MADV_COLLAPSE: libc::c_int = 25;

/// Size of a PMD-mapped transparent huge page on x86-64 and arm64 (4 KiB base pages).
pub(super) const HUGE_PAGE: usize = 2 << 20;

/// How far collapsing a mapped LUN into huge pages has come.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct HugePageStatus {
    /// Whole 2 MiB windows of the LUN (a partial window at the end is left as it is).
    pub windows: u64,
    /// Windows now backed by one huge page (including those that already were).
    pub collapsed: u64,
    /// Windows the kernel could not collapse (no free huge page, pages busy); they keep
    /// working with 4 KiB pages.
    pub failed: u64,
    /// The kernel refused huge pages for this file altogether (older than 6.1, or
    /// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` says `deny`).
    pub unsupported: bool,
    /// Every window has been tried, or collapsing stopped (unsupported, LUN closed).
    pub finished: bool,
}

#[derive(Default)]
struct Progress {
    collapsed: AtomicU64,
    failed: AtomicU64,
    unsupported: AtomicBool,
    finished: AtomicBool,
}

/// The background collapse of one mapping; dropping it stops the thread after its current
/// window.
pub(super) struct Collapser {
    windows: u64,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
}

impl Collapser {
    /// Starts collapsing `mapping` (a handle on the whole mapping, whose start must be 2 MiB
    /// aligned: the same alignment as file offset 0) into huge pages. `name` labels the log
    /// line written when done. Returns `None` if no thread could be started.
    pub(super) fn start(mapping: Bytes, name: String) -> Option<Self> {
        let windows = (mapping.len() / HUGE_PAGE) as u64;
        let progress = Arc::new(Progress::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&progress), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("sluice-hugepages".into())
            .spawn(move || run(&mapping, &name, &p, &s))
            .ok()?;
        Some(Self {
            windows,
            progress,
            stop,
        })
    }

    pub(super) fn status(&self) -> HugePageStatus {
        let p = &self.progress;
        HugePageStatus {
            windows: self.windows,
            collapsed: p.collapsed.load(Ordering::Relaxed),
            failed: p.failed.load(Ordering::Relaxed),
            unsupported: p.unsupported.load(Ordering::Relaxed),
            finished: p.finished.load(Ordering::Acquire),
        }
    }
}

impl Drop for Collapser {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The thread's body: `mapping` (kept alive by this handle until the thread returns) is
/// collapsed window by window.
fn run(mapping: &Bytes, name: &str, progress: &Progress, stop: &AtomicBool) {
    // The lowest CPU priority for this thread only (a thread is a task of its own for
    // setpriority); failing to lower it is harmless.
    // SAFETY: gettid and setpriority take and return integers only, so no memory of ours is
    // at stake; setpriority on this thread's own id changes nothing but its nice value.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
    }
    let started = Instant::now();
    debug_assert_eq!(
        mapping.as_ptr().addr() % HUGE_PAGE,
        0,
        "mapping not 2 MiB aligned"
    );
    for window in mapping.chunks_exact(HUGE_PAGE) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match collapse(window) {
            Ok(()) => progress.collapsed.fetch_add(1, Ordering::Relaxed),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                progress.unsupported.store(true, Ordering::Relaxed);
                break;
            }
            Err(_) => progress.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
    progress.finished.store(true, Ordering::Release);
    let collapsed = progress.collapsed.load(Ordering::Relaxed);
    if progress.unsupported.load(Ordering::Relaxed) {
        tracing::info!(
            lun = name,
            "huge pages unavailable (MADV_COLLAPSE refused); 4 KiB pages kept"
        );
    } else {
        tracing::info!(
            lun = name,
            windows = mapping.len() / HUGE_PAGE,
            collapsed,
            failed = progress.failed.load(Ordering::Relaxed),
            seconds = started.elapsed().as_secs_f32(),
            "LUN file backed by 2 MiB pages"
        );
    }
}

/// Asks the kernel to back `window` (2 MiB, aligned, inside a shared file mapping) with one
/// huge page.
fn collapse(window: &[u8]) -> std::io::Result<()> {
    // SAFETY: `window` is a live, aligned 2 MiB range of a mapping this thread keeps alive.
    // MADV_COLLAPSE only changes which physical pages back the range (the kernel copies the
    // contents under the page locks, so concurrent readers and writers see the same bytes);
    // it never changes the bytes or the mapping's extent.
    let rc = unsafe {
        libc::madvise(
            window.as_ptr().cast_mut().cast(),
            window.len(),
            MADV_COLLAPSE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
