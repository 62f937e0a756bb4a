//! A device that stores nothing.

use bytes::Bytes;

use crate::{check_range, checked_size, BlockDevice, StorageError, ZEROS};

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

    /// Every read is zeros, so one static buffer serves them all without a copy (up to
    /// 32 MiB, the SCSI layer's longest transfer; longer ones are filled): a null LUN costs its
    /// reader no memory pass, as a target that keeps no data (a benchmark's, or the MEMORYIO
    /// mode of the UNH target) reads from one buffer.
    fn read_shared(&self, offset: u64, len: usize) -> Option<Result<Bytes, StorageError>> {
        if let Err(e) = check_range(offset, len as u64, self.size_bytes) {
            return Some(Err(e));
        }
        (len <= ZEROS.len()).then(|| Ok(Bytes::from_static(&ZEROS[..len])))
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

    /// Nothing written is kept, so a transport need not hold a write's data until the
    /// command runs: with it, a null LUN fetches a write into no memory of its own, as a
    /// target that keeps no data (the MEMORYIO mode of the UNH target) reads every write
    /// into one buffer.
    fn keeps_writes(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_one_static_buffer_of_zeros_up_to_the_longest_transfer_and_checked() {
        let dev = NullDevice::new(512, (64 << 20) / 512);
        let a = dev.read_shared(4096, 65536).expect("shared").expect("read");
        let b = dev.read_shared(0, 32 << 20).expect("shared").expect("read");
        assert!(a.iter().all(|&x| x == 0) && a.len() == 65536);
        assert!(b.iter().all(|&x| x == 0) && b.len() == 32 << 20);
        assert_eq!(a.as_ptr(), b.as_ptr(), "the same buffer, not a copy");
        assert!(
            dev.read_shared(0, (32 << 20) + 512).is_none(),
            "longer: filled"
        );
        assert!(matches!(dev.read_shared(64 << 20, 1024), Some(Err(_))));
    }
}
