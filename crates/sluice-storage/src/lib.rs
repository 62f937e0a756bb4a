//! Block devices that the target exports as logical units.
//!
//! One trait, [`BlockDevice`], is implemented by every backend (memory, file, null). It is
//! synchronous on purpose: the target driver runs non-blocking backends (memory, null) inline on
//! the connection's task and blocking ones (file) on a worker thread, as [`BlockDevice::blocks`]
//! says. Offsets and lengths are in bytes and always whole blocks; callers (sluice-scsi) check
//! ranges against [`BlockDevice::num_blocks`] before calling.

use std::io;

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

    /// Writes `data` at byte `offset`. With `fua`, returns only once the data is durable.
    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError>;

    /// Makes every completed write durable (SYNCHRONIZE CACHE).
    fn flush(&self) -> Result<(), StorageError>;

    /// Size in bytes.
    fn size_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size())
    }
}
