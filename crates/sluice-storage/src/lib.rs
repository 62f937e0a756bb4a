//! Block devices that the target exports as logical units.
//!
//! One trait, [`BlockDevice`], is implemented by every backend. It is synchronous on purpose: the
//! target driver runs non-blocking backends (memory, null) inline on the connection's task and
//! blocking ones (file) on a worker thread, as [`BlockDevice::blocks`] says. A backend whose
//! store completes operations by itself (RBD) also takes plain reads, writes and flushes as
//! futures ([`BlockDevice::submit`], [`DeviceOp`]), so that no thread waits on each. Offsets and lengths
//! are in bytes and always whole blocks; callers (sluice-scsi) check ranges against
//! [`BlockDevice::num_blocks`] before calling, and every backend checks them again (defence in
//! depth), answering [`StorageError::OutOfRange`].
//!
//! Backends, one per module:
//!
//! * [`MemoryDevice`]: sparse RAM disk; memory is committed only for chunks that were written.
//! * [`NullDevice`]: discards writes and reads zeros; takes the disk out of protocol benchmarks.
//! * [`FileDevice`]: a regular file or a block device, through `pread`/`pwrite`, optionally with
//!   `O_DIRECT`; FUA and flush go through `fdatasync`. A thin one punches holes on discard and
//!   reports them.
//! * `RbdDevice` (with the `rbd` feature): an image of a Ceph cluster, through librbd's
//!   asynchronous API; FUA and flush go through `rbd_aio_flush`. [`RbdImage`], which names an
//!   image and its cluster, is in every build.
//!
//! Thin provisioning rests on three calls: [`BlockDevice::deallocates`] (discard frees space
//! and the range reads zeros), [`BlockDevice::discard`] and [`BlockDevice::provisioning`] (which
//! runs are mapped and which deallocated).
//!
//! Beside the blocks, [`StateFile`] keeps small state that must survive a crash (persistent
//! reservations with APTPL) in a file replaced atomically.
//!
//! The same contract tests (`conformance.rs`) run against every backend.
//!
//! `unsafe` is denied crate-wide and allowed in exactly four places, each block justified by a
//! `// SAFETY:` comment: the shared, 2 MiB-aligned `mmap` of RAM-backed files
//! (`file/mapping.rs`, which lets reads hand out the page-cache bytes without copying and writes
//! copy straight into them), the SSE2 streaming stores with which writes copy into that mapping
//! and into memory LUNs' chunks (`streaming.rs`), asking the kernel to back that mapping with
//! huge pages (`file/huge_pages.rs`: `MADV_COLLAPSE`, and `setpriority` for the thread that
//! does it) and `pread` into a buffer's spare capacity (`file.rs`: no zero-fill before a
//! read); with the `rbd` feature, a fifth: the calls into librados and librbd
//! (`rbd/librbd.rs` and its child `rbd/librbd/aio.rs`: handles owned and freed once, buffers
//! borrowed, or owned by the callback's side, until librbd's completion callback ran;
//! `rbd/rados.rs`: the shared gateway object, its watch context boxed until the watch is
//! gone). The `O_DIRECT` bounce buffer needs none (it is aligned by slicing a slightly larger
//! `Vec`).
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::io;

use bytes::{Bytes, BytesMut};

/// Zeros for reads handed out without a copy (a memory LUN's chunk never written, any read
/// of a null LUN). As long as the longest transfer the SCSI layer accepts (32 MiB): the array
/// is in `.bss`, so it costs no file size, and pages that are only read map the kernel's one
/// zero page, so it costs no memory either.
static ZEROS: [u8; 32 << 20] = [0; 32 << 20];

mod file;
mod memory;
mod null;
mod rbd;
mod state_file;
mod streaming;
mod submit;

#[cfg(test)]
mod conformance;

pub use file::{cached_crc32c, file_range, FileDevice, FileOptions, FileRange, HugePageStatus};
pub use memory::MemoryDevice;
pub use null::NullDevice;
#[cfg(feature = "rbd")]
pub use rbd::{decode_notify_reply, Ack, LuObject, NotifyHandler, RbdDevice, MSG_STATE_CHANGED};
pub use rbd::{RbdImage, DEFAULT_CLIENT_ID as DEFAULT_RBD_CLIENT_ID};
pub use state_file::{StateFile, StateStore, MAX_STATE_FILE_BYTES};
pub use submit::{run_now, DeviceOp, Submission};

/// Why a block operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The range is outside the device.
    #[error("range {offset}+{len} is outside the device ({size} bytes)")]
    OutOfRange {
        /// Byte offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
        /// Device size in bytes.
        size: u64,
    },
    /// The underlying file or device reported an error.
    ///
    /// A write to a read-only device is reported here with
    /// [`io::ErrorKind::ReadOnlyFilesystem`] (the SCSI layer answers DATA PROTECT; it can tell
    /// in advance from [`BlockDevice::read_only`]).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// A block device. Implementations must be safe to call from several threads at once.
pub trait BlockDevice: Send + Sync + std::fmt::Debug {
    /// Logical block size in bytes (512 or 4096).
    fn block_size(&self) -> u32;

    /// Number of logical blocks.
    fn num_blocks(&self) -> u64;

    /// Whether calls may block the thread (file I/O): the driver then runs them off the
    /// network reactor.
    fn blocks(&self) -> bool;

    /// Fills `buf` from byte `offset`.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError>;

    /// Reads `len` bytes from byte `offset` without copying them, when the backend can: the
    /// returned [`Bytes`] share the backend's memory (e.g. a mapping of a tmpfs file).
    ///
    /// `None` means the backend cannot (the caller then uses [`read_append`](Self::read_append)).
    /// The bytes are a view, not a snapshot: a later overlapping write may show through while
    /// the caller still holds them, as it may for any read that overlaps a concurrent write
    /// (SAM-5 makes no promise about the order of overlapping SIMPLE commands). The default
    /// returns `None`.
    fn read_shared(&self, offset: u64, len: usize) -> Option<Result<Bytes, StorageError>> {
        let _ = (offset, len);
        None
    }

    /// Appends `len` bytes from byte `offset` to `out`.
    ///
    /// The default zero-fills the new space and calls [`read_at`](Self::read_at); backends
    /// override it to read straight into `out`'s spare capacity (no `memset` first). On error,
    /// `out` keeps its old length.
    fn read_append(&self, offset: u64, len: usize, out: &mut BytesMut) -> Result<(), StorageError> {
        let start = out.len();
        out.resize(start + len, 0);
        let r = self.read_at(offset, &mut out[start..]);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Writes `data` at byte `offset`. With `fua`, returns only once the data is durable.
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError>;

    /// Writes `segments` back to back from byte `offset` (a write whose data arrived in
    /// several PDUs, without gluing them together first). Each segment may have any length;
    /// their sum is a whole number of blocks. With `fua`, returns only once all are durable.
    ///
    /// The default writes a single segment, or segments that are each whole blocks, through
    /// [`write_at`](Self::write_at) (FUA on the last), and otherwise copies them into one
    /// buffer first. Backends that take any byte range override it.
    fn write_vectored_at(
        &self,
        offset: u64,
        segments: &[&[u8]],
        fua: bool,
    ) -> Result<(), StorageError> {
        let bs = self.block_size().max(1) as usize;
        let total: usize = segments.iter().map(|s| s.len()).sum();
        check_range(offset, total as u64, self.size_bytes())?;
        if segments.len() > 1 && segments.iter().any(|s| s.len() % bs != 0) {
            return self.write_at(offset, &segments.concat(), fua);
        }
        let mut at = offset;
        for (i, s) in segments.iter().enumerate() {
            self.write_at(at, s, fua && i + 1 == segments.len())?;
            at += s.len() as u64;
        }
        Ok(())
    }

    /// Makes every completed write durable (SYNCHRONIZE CACHE).
    fn flush(&self) -> Result<(), StorageError>;

    /// Whether [`submit`](Self::submit) completes operations without a thread waiting for
    /// them (an RBD image, through librbd's asynchronous calls): the target then awaits its
    /// plain reads, writes and flushes instead of parking a thread on each. The default is
    /// `false`.
    fn submits(&self) -> bool {
        false
    }

    /// Submits one plain read, write or flush; the returned future completes when the
    /// backend says it ended. A backend that [`submits`](Self::submits) starts the operation
    /// here and returns at once; the default runs it now through the synchronous calls
    /// ([`run_now`]), on the calling thread, and returns a completed future. Ranges are
    /// checked as for the synchronous calls.
    fn submit(&self, op: DeviceOp) -> Submission {
        Box::pin(std::future::ready(run_now(self, op)))
    }

    /// Writes `data`, which is one `unit`-byte block repeated (WRITE SAME with a pattern), at
    /// byte `offset`. With `fua`, returns only once it is durable.
    ///
    /// The default writes `data` through [`write_at`](Self::write_at). A backend that can
    /// repeat a block itself (RBD's write-same) sends the block once.
    fn write_repeated(
        &self,
        offset: u64,
        data: &[u8],
        unit: usize,
        fua: bool,
    ) -> Result<(), StorageError> {
        let _ = unit;
        self.write_at(offset, data, fua)
    }

    /// Writes `data` at byte `offset` only if the device holds `compare` there (as long as
    /// `data`), as one atomic operation of the backing store: COMPARE AND WRITE done where
    /// every client of a shared store sees it (SBC-4 5.3). `Some(Ok(None))`: written;
    /// `Some(Ok(Some(at)))`: nothing written, byte `at` of the range is the first that
    /// differs; `None`: the backend has no such operation for this range, and the caller
    /// compares and writes under its own lock.
    ///
    /// The default is `None`.
    fn compare_and_write(
        &self,
        offset: u64,
        compare: &[u8],
        data: &[u8],
        fua: bool,
    ) -> Option<Result<Option<u64>, StorageError>> {
        let _ = (offset, compare, data, fua);
        None
    }

    /// Size in bytes.
    fn size_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size())
    }

    /// Whether the device refuses writes (the SCSI layer reports it as write-protected).
    ///
    /// The default is `false`.
    fn read_only(&self) -> bool {
        false
    }

    /// Writes `len` bytes of zeros from byte `offset` (WRITE SAME with a zero block, WRITE
    /// ZEROES). With `fua`, returns only once the zeros are durable.
    ///
    /// The default checks the range, then writes a zeroed buffer of at most
    /// [`ZERO_BUFFER_BYTES`] at a time through [`write_at`](Self::write_at), and flushes at the
    /// end when `fua` is set. Backends with a cheaper way (dropping memory, punching holes)
    /// override it.
    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes())?;
        if len == 0 {
            return Ok(());
        }
        // The piece is at most ZERO_BUFFER_BYTES, so it fits in usize.
        let piece_len = len.min(ZERO_BUFFER_BYTES as u64) as usize;
        let zeros = vec![0u8; piece_len];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(piece_len as u64) as usize;
            self.write_at(offset + done, &zeros[..n], false)?;
            done += n as u64;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Tells the device that `len` bytes from byte `offset` are no longer needed (UNMAP, TRIM).
    ///
    /// Afterwards a read of the range returns either the old data or zeros; backends document
    /// which. The default checks the range and does nothing, which is always correct.
    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes())
    }

    /// Whether [`discard`](Self::discard) gives the space of the range back and the range then
    /// reads as zeros: what a thin-provisioned logical unit needs (UNMAP with LBPRZ=1, SBC-4
    /// 4.7.3). The default is `false`.
    fn deallocates(&self) -> bool {
        false
    }

    /// The unit, in bytes, in which [`discard`](Self::discard) releases space (a discarded
    /// range that does not cover whole units is zeroed where it does not). The default is one
    /// block.
    fn deallocation_granularity(&self) -> u64 {
        u64::from(self.block_size())
    }

    /// Whether `len` bytes from `offset` have space allocated: the state of the byte at
    /// `offset`, and how many bytes from there (at least one, at most `len`; 0 when `len` is
    /// 0) share it. Only
    /// meaningful when the device [`deallocates`](Self::deallocates); the default reports the
    /// whole range mapped.
    fn provisioning(&self, offset: u64, len: u64) -> Result<Extent, StorageError> {
        check_range(offset, len, self.size_bytes())?;
        Ok(Extent {
            state: Provisioning::Mapped,
            len,
        })
    }

    /// Bytes of backing store allocated to the device now, when the backend can tell (memory
    /// committed, a file's allocated blocks). The default is `None`.
    fn allocated_bytes(&self) -> Option<u64> {
        None
    }

    /// The size of the unit the backing store allocates and writes in (READ CAPACITY(16)'s
    /// physical block): a power of two, at least the block size. The default is the block
    /// size.
    fn physical_block_size(&self) -> u32 {
        self.block_size()
    }

    /// Whether one [`write_at`](Self::write_at) call is all or nothing, even if the process or
    /// the machine stops in the middle of it (WRITE ATOMIC, SBC-4 4.29). The default is
    /// `false`: a file write interrupted by a crash may land in part.
    fn atomic_writes(&self) -> bool {
        false
    }

    /// Whether what is written is kept. `false` for a device that discards every write (the
    /// null device): a transport may then drop a WRITE's data as it arrives, rather than hold
    /// it until the command runs, and hand the device a write of the same length. The
    /// default is `true`.
    fn keeps_writes(&self) -> bool {
        true
    }
}

/// Whether backing store is allocated to a range (SBC-4 4.7.1: mapped or deallocated).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Provisioning {
    /// Space is allocated; the range reads as what was written.
    Mapped,
    /// No space is allocated; the range reads as zeros.
    Deallocated,
}

/// A run of bytes in one [`Provisioning`] state, from [`BlockDevice::provisioning`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Extent {
    /// The state of the run.
    pub state: Provisioning,
    /// Its length in bytes.
    pub len: u64,
}

/// Largest zeroed buffer the default [`BlockDevice::write_zeroes`] allocates: 1 MiB, so zeroing
/// a whole LUN does not allocate a whole LUN.
pub const ZERO_BUFFER_BYTES: usize = 1 << 20;

/// Checks that `len` bytes from `offset` lie inside a device of `size` bytes, without
/// overflowing.
///
/// Every backend calls it at the top of every operation, even though sluice-scsi has already
/// checked: a backend must never touch bytes outside its device because of a caller's bug.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), StorageError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(StorageError::OutOfRange { offset, len, size }),
    }
}

/// Checks a geometry and returns the device size in bytes.
///
/// The block size must be a power of two of at least 512 bytes, and the size must fit in a
/// `u64`.
fn checked_size(block_size: u32, num_blocks: u64) -> io::Result<u64> {
    if block_size < 512 || !block_size.is_power_of_two() {
        return Err(invalid_input(format!(
            "block size {block_size} is not a power of two of at least 512"
        )));
    }
    num_blocks
        .checked_mul(u64::from(block_size))
        .ok_or_else(|| {
            invalid_input(format!(
                "{num_blocks} blocks of {block_size} bytes overflow"
            ))
        })
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn read_only_error() -> StorageError {
    StorageError::Io(io::Error::new(
        io::ErrorKind::ReadOnlyFilesystem,
        "the device is read-only",
    ))
}
