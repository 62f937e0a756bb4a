//! A sparse RAM disk.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use crate::streaming;
use crate::{check_range, checked_size, BlockDevice, Extent, Provisioning, StorageError};

/// Bytes per chunk: the unit in which memory is committed and locked.
///
/// 1 MiB keeps the chunk table small (a 1 TiB LUN needs a million empty slots, about 16 MiB)
/// while one small write commits little memory. Most SCSI transfers (up to 256 KiB) then touch
/// one chunk and take one lock.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// Reads at least this long, inside one chunk, are handed out without a copy
/// ([`BlockDevice::read_shared`]); shorter ones are copied, which costs little and keeps small
/// random reads from pinning chunks that writes would then have to copy.
const SHARED_READ_MIN: usize = 64 * 1024;

/// A written chunk's bytes. Reads handed out without a copy hold a reference; a write to a
/// chunk that is still referenced so copies it first (copy on write), so such a read keeps
/// the bytes it was served.
type Chunk = Option<Arc<Box<[u8]>>>;

/// A RAM disk whose memory is committed only for chunks that have been written.
///
/// The device is cut into 1 MiB chunks, each behind its own [`RwLock`]. A chunk
/// that was never written holds nothing and reads as zeros, so a 1 GiB LUN costs a few kilobytes
/// until it is used. Readers of one chunk run in parallel; writers to different chunks too. An
/// access that spans chunks takes their locks one after the other, so it is not atomic as a
/// whole (SCSI does not require it to be; each chunk's part is).
///
/// [`write_zeroes`](BlockDevice::write_zeroes) and [`discard`](BlockDevice::discard) release
/// whole chunks and zero partial ones: discarded blocks read as zeros, and a chunk that a
/// discard leaves all zeros is released too. A chunk holding memory is reported mapped
/// ([`BlockDevice::provisioning`]), one without deallocated.
///
/// Reads of 64 KiB or more inside one chunk are served without a copy
/// ([`BlockDevice::read_shared`]): the socket copies straight from the chunk, as it does from
/// a mapped tmpfs file. While such a read is in flight, a write to its chunk copies the chunk
/// first (1 MiB, about 100 µs), so the read still sends what it read.
#[derive(Debug)]
pub struct MemoryDevice {
    block_size: u32,
    num_blocks: u64,
    size_bytes: u64,
    chunks: Vec<RwLock<Chunk>>,
    /// Bytes of the chunks that hold memory, kept as chunks come and go so that asking costs
    /// nothing (a thin LU's soft threshold asks as writes go by).
    resident: AtomicU64,
}

impl MemoryDevice {
    /// A zero-filled device of `num_blocks` blocks of `block_size` bytes. Commits no data memory.
    ///
    /// # Panics
    ///
    /// If `block_size` is not a power of two of at least 512, or the size does not fit in
    /// memory addresses (`u64` bytes, or a chunk table larger than `usize`).
    pub fn new(block_size: u32, num_blocks: u64) -> Self {
        let size_bytes = match checked_size(block_size, num_blocks) {
            Ok(size) => size,
            Err(e) => panic!("MemoryDevice::new: {e}"),
        };
        let num_chunks = size_bytes.div_ceil(CHUNK_BYTES as u64);
        let Ok(num_chunks) = usize::try_from(num_chunks) else {
            panic!("MemoryDevice::new: {size_bytes} bytes do not fit in memory");
        };
        let chunks = (0..num_chunks).map(|_| RwLock::new(None)).collect();
        Self {
            block_size,
            num_blocks,
            size_bytes,
            chunks,
            resident: AtomicU64::new(0),
        }
    }

    /// A device of `num_blocks` blocks with this one's contents, for growing a LUN: the
    /// written chunks are shared, not copied (copy on write keeps the two apart), except a
    /// last chunk shorter than 1 MiB, which is copied into one of its new length.
    /// The caller keeps writes away from `self` from now on: a write to it after this call
    /// does not reach the new device.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] when `num_blocks` is fewer than this
    /// device has (data past the new end would be cut off) or the size does not fit in
    /// memory addresses.
    pub fn grown(&self, num_blocks: u64) -> io::Result<Self> {
        if num_blocks < self.num_blocks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{num_blocks} blocks is fewer than the {} the device has",
                    self.num_blocks
                ),
            ));
        }
        let size_bytes = checked_size(self.block_size, num_blocks)?;
        let num_chunks = usize::try_from(size_bytes.div_ceil(CHUNK_BYTES as u64))
            .map_err(|_| io::Error::other(format!("{size_bytes} bytes do not fit in memory")))?;
        let mut chunks = Vec::with_capacity(num_chunks);
        let mut resident = 0u64;
        for index in 0..num_chunks {
            let chunk = match self.chunks.get(index).map(|c| self.read_chunk_at(c)) {
                Some(Some(data)) if data.len() == new_chunk_len(size_bytes, index) => {
                    Some(Arc::clone(&data))
                }
                Some(Some(data)) => {
                    let mut longer = vec![0; new_chunk_len(size_bytes, index)];
                    longer[..data.len()].copy_from_slice(&data);
                    Some(Arc::new(longer.into_boxed_slice()))
                }
                Some(None) | None => None,
            };
            if chunk.is_some() {
                resident += new_chunk_len(size_bytes, index) as u64;
            }
            chunks.push(RwLock::new(chunk));
        }
        Ok(Self {
            block_size: self.block_size,
            num_blocks,
            size_bytes,
            chunks,
            resident: AtomicU64::new(resident),
        })
    }

    fn read_chunk_at(&self, chunk: &RwLock<Chunk>) -> Chunk {
        chunk.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Bytes of data memory committed so far (written chunks times their size).
    pub fn resident_bytes(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    /// Drops chunk `index`'s memory, if it holds any (its lock held by the caller).
    fn release(&self, index: usize, chunk: &mut Chunk) {
        if chunk.take().is_some() {
            self.resident
                .fetch_sub(self.chunk_len(index) as u64, Ordering::Relaxed);
        }
    }

    /// Length of chunk `index`: [`CHUNK_BYTES`], except the last one, which may be shorter.
    fn chunk_len(&self, index: usize) -> usize {
        let start = index as u64 * CHUNK_BYTES as u64;
        // At most CHUNK_BYTES, so it fits in usize.
        (self.size_bytes - start).min(CHUNK_BYTES as u64) as usize
    }

    // Poisoning cannot leave a chunk half-valid: a chunk is plain bytes, and every state of
    // them is a state the device may be in. So a poisoned lock is simply taken over.
    fn read_chunk(&self, index: usize) -> RwLockReadGuard<'_, Chunk> {
        self.chunks[index]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write_chunk(&self, index: usize) -> RwLockWriteGuard<'_, Chunk> {
        self.chunks[index]
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `f(chunk index, offset in chunk, range in the caller's buffer)` for each chunk that
    /// `len` bytes from `offset` touch. The range must have been checked.
    fn for_each_chunk(
        offset: u64,
        len: usize,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0;
        while done < len {
            let pos = offset + done as u64;
            // The device size fits in usize chunks (checked in `new`), so both casts are exact.
            let index = (pos / CHUNK_BYTES as u64) as usize;
            let in_chunk = (pos % CHUNK_BYTES as u64) as usize;
            let n = (len - done).min(CHUNK_BYTES - in_chunk);
            f(index, in_chunk, done..done + n);
            done += n;
        }
    }

    fn read_piece(&self, index: usize, in_chunk: usize, out: &mut [u8]) {
        let _probe = sluice_probe::span(sluice_probe::Stage::Copy);
        match &*self.read_chunk(index) {
            Some(data) => out.copy_from_slice(&data[in_chunk..in_chunk + out.len()]),
            None => out.fill(0),
        }
    }

    fn write_piece(&self, index: usize, in_chunk: usize, data: &[u8]) {
        let mut chunk = self.write_chunk(index);
        let arc = chunk.get_or_insert_with(|| {
            let len = self.chunk_len(index);
            self.resident.fetch_add(len as u64, Ordering::Relaxed);
            zeroed_chunk(len)
        });
        let _probe = sluice_probe::span(sluice_probe::Stage::Copy);
        // Copies the chunk only if a read handed out without a copy still holds it. Streaming
        // stores, as for mapped files: the chunk's lines are mostly not cached, and an
        // ordinary copy would read each one from memory before overwriting it.
        streaming::copy_into(
            &mut Arc::make_mut(arc)[in_chunk..in_chunk + data.len()],
            data,
        );
    }

    fn zero_piece(&self, index: usize, in_chunk: usize, len: usize) {
        let mut chunk = self.write_chunk(index);
        if len == self.chunk_len(index) {
            self.release(index, &mut chunk);
        } else if let Some(arc) = chunk.as_mut() {
            Arc::make_mut(arc)[in_chunk..in_chunk + len].fill(0);
        }
    }

    /// Like [`zero_piece`](Self::zero_piece), and a chunk that is then all zeros is released
    /// too: discarding a chunk piece by piece (UNMAP in 4 KiB pieces, say) ends up giving its
    /// memory back, as discarding it at once does.
    fn discard_piece(&self, index: usize, in_chunk: usize, len: usize) {
        let mut chunk = self.write_chunk(index);
        if len == self.chunk_len(index) {
            self.release(index, &mut chunk);
            return;
        }
        let Some(arc) = chunk.as_mut() else {
            return;
        };
        Arc::make_mut(arc)[in_chunk..in_chunk + len].fill(0);
        if arc.iter().all(|&b| b == 0) {
            self.release(index, &mut chunk);
        }
    }

    /// Walks `len` bytes from `offset` (checked) in `usize`-sized steps: `len` itself may
    /// exceed `usize` on 32-bit targets, while the chunk table fits in memory.
    fn for_each_chunk_u64(
        offset: u64,
        len: u64,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0u64;
        while done < len {
            let step = (len - done).min(usize::MAX as u64 / 2) as usize;
            Self::for_each_chunk(offset + done, step, &mut f);
            done += step as u64;
        }
    }
}

/// Length of chunk `index` of a device of `size_bytes`.
fn new_chunk_len(size_bytes: u64, index: usize) -> usize {
    let start = index as u64 * CHUNK_BYTES as u64;
    // At most CHUNK_BYTES, so it fits in usize.
    size_bytes.saturating_sub(start).min(CHUNK_BYTES as u64) as usize
}

/// A new chunk of `len` zero bytes: `vec![0; len]` asks the allocator for zeroed memory, which
/// comes from the kernel already zero, its pages faulted in only as writes reach them. (The
/// chunk used to be an `Arc<[u8]>` made with `Arc::from(vec![0; len])`, which allocated twice
/// and copied a mebibyte of zeros: 4 KiB writes to a fresh memory LUN ran at 83K IOPS, against
/// 109K to 144K like this.)
fn zeroed_chunk(len: usize) -> Arc<Box<[u8]>> {
    Arc::new(vec![0; len].into_boxed_slice())
}

/// A chunk handed to a reader: the bytes stay valid while any `Bytes` of it lives.
struct SharedChunk(Arc<Box<[u8]>>);

impl AsRef<[u8]> for SharedChunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl BlockDevice for MemoryDevice {
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
        if buf.is_empty() {
            // At the very end of a device of whole chunks there is no chunk to look at.
            return Ok(());
        }
        let in_chunk = (offset % CHUNK_BYTES as u64) as usize;
        if in_chunk + buf.len() <= CHUNK_BYTES {
            // Fast path: one chunk, one lock.
            self.read_piece((offset / CHUNK_BYTES as u64) as usize, in_chunk, buf);
            return Ok(());
        }
        Self::for_each_chunk(offset, buf.len(), |index, in_chunk, range| {
            self.read_piece(index, in_chunk, &mut buf[range]);
        });
        Ok(())
    }

    fn read_shared(&self, offset: u64, len: usize) -> Option<Result<Bytes, StorageError>> {
        if let Err(e) = check_range(offset, len as u64, self.size_bytes) {
            return Some(Err(e));
        }
        let in_chunk = (offset % CHUNK_BYTES as u64) as usize;
        if len < SHARED_READ_MIN || in_chunk + len > CHUNK_BYTES {
            return None;
        }
        Some(Ok(
            match &*self.read_chunk((offset / CHUNK_BYTES as u64) as usize) {
                // The Bytes keeps the chunk alive (and so unwritten in place).
                Some(chunk) => Bytes::from_owner(SharedChunk(Arc::clone(chunk)))
                    .slice(in_chunk..in_chunk + len),
                // Never written: it reads as zeros.
                None => Bytes::from_static(&crate::ZEROS[..len]),
            },
        ))
    }

    fn read_append(
        &self,
        offset: u64,
        len: usize,
        out: &mut bytes::BytesMut,
    ) -> Result<(), StorageError> {
        check_range(offset, len as u64, self.size_bytes)?;
        out.reserve(len);
        let _probe = sluice_probe::span(sluice_probe::Stage::Copy);
        // One copy out of the chunk, no zero-fill of `out` first.
        Self::for_each_chunk(offset, len, |index, in_chunk, range| {
            match &*self.read_chunk(index) {
                Some(data) => out.extend_from_slice(&data[in_chunk..in_chunk + range.len()]),
                None => out.resize(out.len() + range.len(), 0),
            }
        });
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), StorageError> {
        // Memory is as durable as it gets once the copy is done, so FUA needs nothing more.
        check_range(offset, data.len() as u64, self.size_bytes)?;
        if data.is_empty() {
            return Ok(());
        }
        let in_chunk = (offset % CHUNK_BYTES as u64) as usize;
        if in_chunk + data.len() <= CHUNK_BYTES {
            // Fast path: one chunk, one lock.
            self.write_piece((offset / CHUNK_BYTES as u64) as usize, in_chunk, data);
            return Ok(());
        }
        Self::for_each_chunk(offset, data.len(), |index, in_chunk, range| {
            self.write_piece(index, in_chunk, &data[range]);
        });
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, _fua: bool) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes)?;
        Self::for_each_chunk_u64(offset, len, |index, in_chunk, range| {
            self.zero_piece(index, in_chunk, range.len());
        });
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes)?;
        Self::for_each_chunk_u64(offset, len, |index, in_chunk, range| {
            self.discard_piece(index, in_chunk, range.len());
        });
        Ok(())
    }

    fn deallocates(&self) -> bool {
        true
    }

    fn deallocation_granularity(&self) -> u64 {
        CHUNK_BYTES as u64
    }

    /// A chunk is mapped while it holds memory; runs end at chunk boundaries where the state
    /// changes.
    fn provisioning(&self, offset: u64, len: u64) -> Result<Extent, StorageError> {
        check_range(offset, len, self.size_bytes)?;
        if len == 0 {
            return Ok(Extent {
                state: Provisioning::Mapped,
                len: 0,
            });
        }
        let chunk = CHUNK_BYTES as u64;
        // In range, so the chunk index fits in usize (checked in `new`).
        let state_of = |index: u64| {
            if self.read_chunk(index as usize).is_some() {
                Provisioning::Mapped
            } else {
                Provisioning::Deallocated
            }
        };
        let first = offset / chunk;
        let state = state_of(first);
        let end = offset.saturating_add(len);
        let mut run_end = ((first + 1) * chunk).min(end);
        while run_end < end && state_of(run_end / chunk) == state {
            run_end = (run_end + chunk).min(end);
        }
        Ok(Extent {
            state,
            len: run_end - offset,
        })
    }

    fn allocated_bytes(&self) -> Option<u64> {
        Some(self.resident_bytes())
    }

    /// The data lives as long as the process: no crash can leave a write half done on a
    /// medium that outlives it. (Concurrent commands are kept apart by the SCSI layer's
    /// exclusive lock.)
    fn atomic_writes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_device_keeps_the_data_and_reads_zeros_beyond() {
        // 1.5 MiB: the second chunk is half a chunk long.
        let dev = MemoryDevice::new(512, 3072);
        dev.write_at(4096, &[7; 512], false).unwrap();
        dev.write_at(CHUNK_BYTES as u64 + 512, &[9; 512], false)
            .unwrap();
        let big = dev.grown(8192).unwrap();
        assert_eq!(big.size_bytes(), 4 << 20);
        let mut buf = vec![0; 512];
        big.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf, [7; 512]);
        big.read_at(CHUNK_BYTES as u64 + 512, &mut buf).unwrap();
        assert_eq!(buf, [9; 512]);
        big.read_at(3 << 20, &mut buf).unwrap();
        assert_eq!(buf, [0; 512]);
        // The written second chunk grew to a whole chunk; writes past the old end land.
        big.write_at(
            CHUNK_BYTES as u64 + (CHUNK_BYTES as u64 / 2),
            &[3; 512],
            false,
        )
        .unwrap();
        assert_eq!(big.resident_bytes(), 2 * CHUNK_BYTES as u64);
        // The two devices are apart: a write to the grown one leaves the old one alone.
        big.write_at(4096, &[1; 512], false).unwrap();
        dev.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf, [7; 512]);
        assert!(dev.grown(100).is_err(), "shrinking is refused");
    }

    #[test]
    fn a_gibibyte_lun_commits_nothing_until_written() {
        let dev = MemoryDevice::new(512, 2 * 1024 * 1024);
        assert_eq!(dev.size_bytes(), 1 << 30);
        assert_eq!(dev.resident_bytes(), 0);
        let mut buf = vec![0xaa; 4096];
        dev.read_at(123 * 4096, &mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        assert_eq!(dev.resident_bytes(), 0, "reads commit nothing");

        dev.write_at(5 * CHUNK_BYTES as u64 + 512, &[1; 512], false)
            .unwrap();
        assert_eq!(dev.resident_bytes(), CHUNK_BYTES as u64);
        dev.write_at(CHUNK_BYTES as u64 - 512, &[2; 1024], false)
            .unwrap();
        assert_eq!(dev.resident_bytes(), 3 * CHUNK_BYTES as u64);
    }

    #[test]
    fn empty_accesses_at_the_end_of_whole_chunks_touch_nothing() {
        // Found by fuzzing: a device of whole chunks has no chunk at its end offset.
        let dev = MemoryDevice::new(512, 2 * CHUNK_BYTES as u64 / 512);
        let end = dev.size_bytes();
        dev.read_at(end, &mut []).unwrap();
        dev.write_at(end, &[], true).unwrap();
        let mut out = bytes::BytesMut::new();
        dev.read_append(end, 0, &mut out).unwrap();
        assert!(dev.read_shared(end, 0).is_none());
        dev.discard(end, 0).unwrap();
        assert_eq!(dev.provisioning(end, 0).unwrap().len, 0);
    }

    #[test]
    fn a_chunk_discarded_piece_by_piece_is_released() {
        let dev = MemoryDevice::new(512, 8192); // 4 MiB
        dev.write_at(0, &[7; 3 * CHUNK_BYTES], false).unwrap();
        assert_eq!(dev.resident_bytes(), 3 * CHUNK_BYTES as u64);
        for piece in 0..(CHUNK_BYTES / 4096) as u64 {
            assert_eq!(dev.resident_bytes(), 3 * CHUNK_BYTES as u64);
            dev.discard(CHUNK_BYTES as u64 + piece * 4096, 4096)
                .unwrap();
        }
        assert_eq!(dev.resident_bytes(), 2 * CHUNK_BYTES as u64);
        let e = dev.provisioning(0, 4 * CHUNK_BYTES as u64).unwrap();
        assert_eq!((e.state, e.len), (Provisioning::Mapped, CHUNK_BYTES as u64));
        let e = dev
            .provisioning(CHUNK_BYTES as u64 + 512, 3 * CHUNK_BYTES as u64 - 512)
            .unwrap();
        assert_eq!(
            (e.state, e.len),
            (Provisioning::Deallocated, CHUNK_BYTES as u64 - 512)
        );
        // Written zeros are data too: a write never releases a chunk.
        dev.write_at(0, &vec![0; CHUNK_BYTES], false).unwrap();
        assert_eq!(dev.resident_bytes(), 2 * CHUNK_BYTES as u64);
    }

    #[test]
    fn large_reads_inside_a_chunk_are_shared_and_others_copied() {
        let dev = MemoryDevice::new(512, 8192); // 4 MiB
        let data: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i * 7 / 5) as u8).collect();
        dev.write_at(CHUNK_BYTES as u64, &data, false).unwrap();
        let shared = dev.read_shared(CHUNK_BYTES as u64 + 4096, 256 * 1024);
        let shared = shared.expect("large read inside a chunk").unwrap();
        assert_eq!(&shared[..], &data[4096..4096 + 256 * 1024]);
        let zeros = dev.read_shared(3 * CHUNK_BYTES as u64, CHUNK_BYTES);
        let zeros = zeros.expect("unwritten chunk").unwrap();
        assert_eq!(zeros.len(), CHUNK_BYTES);
        assert!(zeros.iter().all(|&b| b == 0));
        assert_eq!(
            dev.resident_bytes(),
            CHUNK_BYTES as u64,
            "zeros commit nothing"
        );
        assert!(dev.read_shared(CHUNK_BYTES as u64, 4096).is_none(), "small");
        let across = dev.read_shared(CHUNK_BYTES as u64 - 4096, 128 * 1024);
        assert!(across.is_none(), "spans two chunks");
        assert!(
            dev.read_shared(4 << 20, 64 * 1024).unwrap().is_err(),
            "past the end"
        );
    }

    #[test]
    fn a_shared_read_keeps_its_bytes_when_its_chunk_is_written() {
        let dev = MemoryDevice::new(512, 4096); // 2 MiB
        dev.write_at(0, &vec![1; CHUNK_BYTES], false).unwrap();
        let held = dev.read_shared(0, CHUNK_BYTES).unwrap().unwrap();
        // The write copies the chunk (a read still holds it) and lands in the copy.
        dev.write_at(8192, &[2; 4096], false).unwrap();
        assert!(held.iter().all(|&b| b == 1), "the in-flight read changed");
        let mut now = vec![0; 3 * 4096];
        dev.read_at(4096, &mut now).unwrap();
        assert_eq!(&now[..4096], &[1; 4096][..]);
        assert_eq!(&now[4096..8192], &[2; 4096][..]);
        drop(held);
        // With nothing holding it, a write goes in place: the chunk keeps its address.
        let before = dev.read_shared(0, CHUNK_BYTES).unwrap().unwrap().as_ptr();
        dev.write_at(0, &[3; 512], false).unwrap();
        let after = dev.read_shared(0, CHUNK_BYTES).unwrap().unwrap();
        assert_eq!(
            after.as_ptr(),
            before,
            "copied although nothing held the chunk"
        );
        assert_eq!(after[0], 3);
        assert_eq!(dev.resident_bytes(), CHUNK_BYTES as u64);
    }

    #[test]
    fn zeroing_whole_chunks_releases_them() {
        let dev = MemoryDevice::new(4096, 1024);
        dev.write_at(0, &vec![7; 2 * CHUNK_BYTES], false).unwrap();
        assert_eq!(dev.resident_bytes(), 2 * CHUNK_BYTES as u64);
        // Zero chunk 0 entirely and the first 4 KiB of chunk 1.
        dev.write_zeroes(0, CHUNK_BYTES as u64 + 4096, false)
            .unwrap();
        assert_eq!(dev.resident_bytes(), CHUNK_BYTES as u64);
        let mut buf = vec![0xaa; 8192];
        dev.read_at(CHUNK_BYTES as u64, &mut buf).unwrap();
        assert!(buf[..4096].iter().all(|&b| b == 0));
        assert!(buf[4096..].iter().all(|&b| b == 7));
        dev.discard(CHUNK_BYTES as u64, CHUNK_BYTES as u64).unwrap();
        assert_eq!(dev.resident_bytes(), 0);
    }

    #[test]
    fn the_last_chunk_may_be_short() {
        let dev = MemoryDevice::new(512, 2048 + 3);
        let last = dev.size_bytes() - 512;
        dev.write_at(last, &[9; 512], false).unwrap();
        assert_eq!(dev.resident_bytes(), 1536);
    }

    #[test]
    #[should_panic(expected = "block size")]
    fn a_bad_block_size_is_refused() {
        let _ = MemoryDevice::new(1000, 8);
    }
}
