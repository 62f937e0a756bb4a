//! A shared mapping of a RAM-backed file. Reads hand it out as [`Bytes`] (no copy: the Data-In
//! PDUs reference the page cache and the socket copies from there once); writes copy straight
//! into it (no `pwrite`: tmpfs's write path costs about twice a plain copy, per-page lookups
//! and folio locks included).
//!
//! Only files on tmpfs or ramfs are mapped ([`FileDevice`](super::FileDevice) decides): their
//! pages are always resident, so touching the mapping never waits for a disk and the task may
//! stay on the network thread.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Mutex;

use bytes::Bytes;

use super::huge_pages::{Collapser, HugePageStatus, HUGE_PAGE};
use crate::streaming;

/// Writers lock the stripe of every [`STRIPE_BYTES`] window they copy into, so two writes never
/// copy into the same bytes at once.
const STRIPE_BYTES: usize = 1 << 20;
/// Number of stripe locks (windows map onto them round robin).
const STRIPES: usize = 64;

/// `len` bytes of a file mapped `MAP_SHARED`, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; nothing in it is tied to the thread
// that created it. `&Mapping` only gives out `&[u8]`; writes go through `MappedFile::write`,
// which holds its own pointer with write provenance and serialises writers per stripe.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is the start of a live mapping of `len` readable bytes (created in
        // `map`, unmapped only in `drop`, so it outlives every borrow of `self`). The bytes
        // are initialized (file pages; beyond EOF is never mapped: `map` maps at most the
        // file's length). Like any shared file mapping (memmap2 has the same contract) the
        // bytes can change under the slice when the device writes the same range or another
        // process writes the file; readers only copy them out (socket, CRC), and SCSI makes no
        // promise for reads that overlap a concurrent write. If another process truncates the
        // file below the mapped length, touching the lost pages raises SIGBUS: the file must
        // not be shrunk while it is served (documented on `FileDevice`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned and were never unmapped; every
        // `&[u8]` into the mapping borrows `self` (through a `Bytes` that owns it), so none
        // outlives this call.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A mapped file: the bytes for readers, and, when mapped writable, a way to copy into them.
pub(super) struct MappedFile {
    /// Owns the mapping; reads slice it.
    bytes: Bytes,
    /// The mapping's start as mmap returned it (full provenance), when it is writable.
    write_ptr: Option<NonNull<u8>>,
    stripes: Box<[Mutex<()>]>,
    /// Its entry in the registry of per-chunk CRCs (see `crc_table`).
    crcs: std::sync::Arc<super::crc_table::Shared>,
    /// The background collapse into huge pages, when asked for; stopped on drop.
    collapser: Option<Collapser>,
}

// SAFETY: `write_ptr` points into the mapping that `bytes` keeps alive; it is only used in
// `write`, which bounds-checks and serialises overlapping writers. No thread affinity.
unsafe impl Send for MappedFile {}
// SAFETY: as above; `write` takes `&self` but copies only under the stripe locks.
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Maps the first `len` bytes of `file` (which must be at least that long and fully
    /// allocated: the mapping is populated at once), writable when `writable` (the file must
    /// then be open for writing). The mapping starts on a 2 MiB boundary, so huge pages of the
    /// file can be mapped whole; with `huge_pages`, a background thread asks the kernel to
    /// back the file with them (see `huge_pages`), and `name` labels its log line.
    pub(super) fn map(
        file: &File,
        len: u64,
        writable: bool,
        huge_pages: Option<String>,
    ) -> io::Result<Self> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        if len == 0 || file.metadata()?.len() < len as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "file shorter than the mapping",
            ));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // Its own descriptor for the registry: sendfile ranges keep it open (`FileRange`).
        let registered = std::sync::Arc::new(file.try_clone()?);
        let ptr = map_aligned(file, len, prot)?;
        let bytes = Bytes::from_owner(Mapping { ptr, len });
        let collapser = huge_pages.and_then(|name| Collapser::start(bytes.clone(), name));
        Ok(Self {
            bytes,
            write_ptr: writable.then_some(ptr),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            crcs: super::crc_table::Shared::register(ptr.as_ptr().addr(), len, registered),
            collapser,
        })
    }

    /// How far backing the file with huge pages has come, if it was asked for.
    pub(super) fn huge_pages(&self) -> Option<HugePageStatus> {
        self.collapser.as_ref().map(Collapser::status)
    }

    /// The mapped bytes (a cheap handle; `slice` it for a range).
    pub(super) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Copies `data` to byte `offset` of the mapping. Returns `false` (and writes nothing)
    /// when the mapping is read-only or the range does not fit.
    pub(super) fn write(&self, offset: u64, data: &[u8]) -> bool {
        let Some(ptr) = self.write_ptr else {
            return false;
        };
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        if start
            .checked_add(data.len())
            .is_none_or(|end| end > self.bytes.len())
        {
            return false;
        }
        let mut done = 0;
        while done < data.len() {
            let at = start + done;
            // Up to the end of this stripe window, so one lock covers the whole copy.
            let n = (STRIPE_BYTES - at % STRIPE_BYTES).min(data.len() - done);
            let _guard = self.stripes[(at / STRIPE_BYTES) % STRIPES]
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let copying = sluice_probe::span(sluice_probe::Stage::Copy);
            // SAFETY: `at + n <= len` (checked above), so the destination lies inside the live
            // writable mapping `ptr` came from (kept alive by `self.bytes`), and `data[done..]`
            // has at least `n` bytes. The stripe lock makes this the only writer of these
            // bytes; concurrent readers may see a torn mix of old and new bytes, which SCSI
            // allows for a read overlapping a write in flight.
            let dst = unsafe { ptr.as_ptr().add(at) };
            let src = &data[done..done + n];
            if self.crcs.has_table() {
                // The CRC refresh below reads the bytes back: leave them in the cache.
                // SAFETY: as above; `copy` (memmove) stays correct even if a caller passed
                // bytes of this very mapping as the source.
                unsafe { std::ptr::copy(src.as_ptr(), dst, n) };
            } else {
                // SAFETY: as above (`dst` is valid for `n` bytes of writes).
                unsafe { streaming::copy(dst, src) };
            }
            copying.close();
            self.crcs.written(&self.bytes, at, at + n);
            done += n;
        }
        true
    }
}

/// Maps `len` bytes of `file` from offset 0, shared and populated, at an address aligned to
/// [`HUGE_PAGE`]: a huge page of the file can only be mapped by one page-table entry when the
/// virtual address and the file offset agree modulo 2 MiB, and the kernel aligns tmpfs
/// mappings only on mounts with huge pages enabled. The address range is first reserved
/// (`PROT_NONE`, no memory committed), then the file is mapped over its aligned part.
fn map_aligned(file: &File, len: usize, prot: libc::c_int) -> io::Result<NonNull<u8>> {
    let flags = libc::MAP_SHARED | libc::MAP_POPULATE;
    let reserve = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
    // SAFETY: an anonymous PROT_NONE reservation at an address of the kernel's choosing; it
    // is checked against MAP_FAILED and is only ever replaced or unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = {
        let start = base.addr();
        let aligned = start.next_multiple_of(HUGE_PAGE);
        // SAFETY: sysconf takes an integer and touches no memory of ours; it has no
        // preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let end = aligned + len.next_multiple_of(page);
        // SAFETY: [aligned, aligned + len) lies inside the reservation (aligned - start <
        // HUGE_PAGE), which this function owns, so MAP_FIXED replaces only our own PROT_NONE
        // pages. The unmapped head [start, aligned) and tail [end, start + reserve) are the
        // reservation's leftovers, page aligned (mmap results and `end` are), and nothing
        // else refers to them.
        unsafe {
            let at = base.cast::<u8>().add(aligned - start);
            let mapped = libc::mmap(
                at.cast(),
                len,
                prot,
                flags | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            );
            let error = io::Error::last_os_error();
            if aligned > start {
                libc::munmap(base, aligned - start);
            }
            if start + reserve > end {
                libc::munmap(
                    base.cast::<u8>().add(end - start).cast(),
                    start + reserve - end,
                );
            }
            if mapped == libc::MAP_FAILED {
                libc::munmap(at.cast(), end - aligned);
                return Err(error);
            }
            mapped
        }
    };
    NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MappedFile({} bytes, {})",
            self.bytes.len(),
            if self.write_ptr.is_some() { "rw" } else { "ro" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shm_file(len: usize) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("map.img");
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        (dir, file)
    }

    #[test]
    fn writes_land_in_the_file_and_out_of_range_or_read_only_writes_are_refused() {
        use std::os::unix::fs::FileExt;
        let len = 3 * STRIPE_BYTES;
        let (_dir, file) = shm_file(len);
        let m = MappedFile::map(&file, len as u64, true, None).unwrap();
        // Across a stripe boundary.
        let data: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8).collect();
        assert!(m.write((STRIPE_BYTES - 4000) as u64, &data));
        let mut back = vec![0u8; data.len()];
        file.read_exact_at(&mut back, (STRIPE_BYTES - 4000) as u64)
            .unwrap();
        assert_eq!(back, data, "pread sees what the mapping wrote");
        assert_eq!(&m.bytes()[STRIPE_BYTES - 4000..][..10_000], &data[..]);
        assert!(!m.write((len - 10) as u64, &data), "past the end");
        assert!(!m.write(u64::MAX, &data));
        let ro = MappedFile::map(&file, len as u64, false, None).unwrap();
        assert!(!ro.write(0, &data), "read-only mapping");
    }

    /// Writers to the same stripe are serialised: a write inside one stripe is never torn by
    /// another writer, whatever the interleaving.
    #[test]
    fn concurrent_writes_within_a_stripe_are_not_torn() {
        let len = 2 * STRIPE_BYTES;
        let (_dir, file) = shm_file(len);
        let m = MappedFile::map(&file, len as u64, true, None).unwrap();
        std::thread::scope(|s| {
            for w in 1..=4u8 {
                let m = &m;
                s.spawn(move || {
                    let block = vec![w; STRIPE_BYTES];
                    for _ in 0..20 {
                        assert!(m.write(0, &block));
                        assert!(m.write(STRIPE_BYTES as u64, &block));
                    }
                });
            }
        });
        for stripe in m.bytes().chunks(STRIPE_BYTES) {
            let first = stripe[0];
            assert!((1..=4).contains(&first));
            assert!(stripe.iter().all(|b| *b == first), "torn stripe");
        }
    }
}
