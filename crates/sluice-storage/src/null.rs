//! A device that stores nothing.

use crate::{check_range, checked_size, BlockDevice, StorageError};

/// Discards writes and reads zeros.
///
/// It takes the disk out of the measurement: with it, the perf lab measures the protocol alone.
/// It still checks every range, so a caller's bug shows up here as it would on a real device.
#[derive(Debug)]
pub struct NullDevice {
    block_size: u32,
    num_blocks: u64,
    size_bytes: u64,
}

impl NullDevice {
    /// A device of `num_blocks` blocks of `block_size` bytes.
    ///
    /// # Panics
    ///
    /// If `block_size` is not a power of two of at least 512, or the size overflows `u64`.
    pub fn new(block_size: u32, num_blocks: u64) -> Self {
        let size_bytes = match checked_size(block_size, num_blocks) {
            Ok(size) => size,
            Err(e) => panic!("NullDevice::new: {e}"),
        };
        Self {
            block_size,
            num_blocks,
            size_bytes,
        }
    }
}

impl BlockDevice for NullDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn blocks(&self) -> bool {
        false
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        buf.fill(0);
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), StorageError> {
        check_range(offset, data.len() as u64, self.size_bytes)
    }

    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, _fua: bool) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes)
    }
}
