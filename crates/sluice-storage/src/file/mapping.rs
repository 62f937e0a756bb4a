//! A read-only shared mapping of a RAM-backed file, handed out as [`Bytes`] so reads cost no
//! copy: the Data-In PDUs reference the page cache and the socket copies from there once.
//!
//! Only files on tmpfs or ramfs are mapped ([`FileDevice`](super::FileDevice) decides): their
//! pages are always resident, so touching the mapping never waits for a disk and the reading
//! task may stay on the network thread.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use bytes::Bytes;

/// `len` bytes of a file mapped `PROT_READ`, `MAP_SHARED`, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain read-only memory owned by this value; nothing in it is tied to
// the thread that created it, and `&Mapping` only ever gives out `&[u8]`.
unsafe impl Send for Mapping {}
// SAFETY: as above; concurrent readers of read-only memory are fine.
unsafe impl Sync for Mapping {}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of a live mapping of `len` readable bytes (created in
        // `map`, unmapped only in `drop`, so it outlives every borrow of `self`). The bytes
        // are initialized (file pages; beyond EOF is never mapped: `map` maps at most the
        // file's length). Like any shared file mapping (memmap2 has the same contract) the
        // bytes can change under the slice when the device itself writes through `pwrite` (the
        // same page cache) or another process writes the file; readers only copy them out
        // (socket, CRC), and SCSI makes no promise for reads that overlap a concurrent write.
        // If another process truncates the file below the mapped length, touching the lost
        // pages raises SIGBUS: the file must not be shrunk while it is served (documented on
        // `FileDevice`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and were never unmapped; every
        // `&[u8]` into the mapping borrows `self`, so none outlives this call.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Maps the first `len` bytes of `file` (which must be at least that long and fully
/// allocated: the mapping is populated at once) and returns them
/// as one [`Bytes`]; reads then `slice` it, which costs a reference count and no allocation.
pub(super) fn map(file: &File, len: u64) -> io::Result<Bytes> {
    let len = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
    if len == 0 || file.metadata()?.len() < len as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "file shorter than the mapping",
        ));
    }
    // SAFETY: a fresh mapping chosen by the kernel (addr NULL), read-only, of a valid open
    // descriptor; the result is checked against MAP_FAILED before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
    Ok(Bytes::from_owner(Mapping { ptr, len }))
}

/// Wraps the mapped bytes so that `Debug` does not print a whole LUN.
pub(super) struct Mapped(pub(super) Bytes);

impl std::fmt::Debug for Mapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapped({} bytes)", self.0.len())
    }
}
