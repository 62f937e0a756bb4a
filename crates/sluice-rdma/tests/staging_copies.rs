//! Bytes the stager allocates when an RDMA Write completes, counted by a global allocator
//! that counts only while the test says so on its own thread.
//!
//! An RDMA Write's source is registered as the caller's buffer (a LUN's memory, the null
//! LUN's shared zeros); once the write completes the stager only has to drop its reference.
//! Taking the region back as a vector copied every byte of it first, for nothing: an iSER
//! target paid one memcpy of all the read data it served.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sluice_rdma::*;

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}
static BYTES: AtomicU64 = AtomicU64::new(0);

/// The system allocator, counting bytes allocated on a thread while it is counted.
struct Counting;

impl Counting {
    fn note(&self, bytes: usize) {
        // `try_with`: the allocator is also called while thread-locals are torn down.
        if COUNTED.try_with(Cell::get).unwrap_or(false) {
            BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, so this allocator
// meets `GlobalAlloc`'s contract exactly when `System` does; counting touches only atomics and
// a thread-local `Cell` and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.note(layout.size());
        // SAFETY: our caller upholds `GlobalAlloc::alloc`'s contract (a non-zero-size
        // layout), which is exactly what `System.alloc` requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.note(layout.size());
        // SAFETY: as for `alloc`: our caller's contract is `System.alloc_zeroed`'s.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.note(new_size);
        // SAFETY: our caller guarantees `ptr` is live, came from this allocator with `layout`,
        // and `new_size` is valid for it; every block of ours came from `System`, so the same
        // holds for `System.realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: our caller guarantees `ptr` is live and came from this allocator with
        // `layout`; every block of ours came from `System`, so it is `System`'s to free.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const LEN: usize = 1 << 20;
static ZEROS: [u8; LEN] = [0; LEN];

#[tokio::test(flavor = "current_thread")]
async fn a_completed_rdma_write_drops_its_source_without_copying_it() {
    let (x, y) = tokio::io::duplex(64 << 10);
    let a = SoftRdma::spawn(x, QpConfig::default());
    let b = SoftRdma::spawn(y, QpConfig::default());
    let sink = b
        .register(
            LEN as u64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            VaMode::ZeroBased,
        )
        .expect("sink");
    let mut stager = Stager::new();
    // A shared source (as a null LUN's reads are) and one the caller keeps a handle to (as a
    // memory LUN's are): neither is the stager's to copy.
    let kept = Bytes::from(vec![7u8; LEN]);
    let sources = [Bytes::from_static(&ZEROS), kept.clone()];
    for source in sources {
        let id = stager
            .write(
                &a,
                source,
                RemoteAddr {
                    stag: sink.stag,
                    va: 0,
                },
            )
            .expect("post the write");
        let wc = tokio::time::timeout(Duration::from_secs(10), a.next_completion())
            .await
            .expect("a completion within 10 s");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
        COUNTED.with(|c| c.set(true));
        let before = BYTES.load(Ordering::Relaxed);
        let done = stager.complete(&a, &wc);
        let allocated = BYTES.load(Ordering::Relaxed) - before;
        COUNTED.with(|c| c.set(false));
        assert!(matches!(done, Some(Ok(None))), "a write hands no data back");
        assert!(
            allocated < 4096,
            "completing a {LEN}-byte write allocated {allocated} bytes"
        );
    }
    assert_eq!(stager.outstanding(), 0);
    assert!(kept.is_unique(), "the region let go of the caller's buffer");
    assert_eq!(
        b.contents(sink.stag, 0, LEN as u64).expect("contents"),
        vec![7u8; LEN],
        "the second write landed"
    );
}
