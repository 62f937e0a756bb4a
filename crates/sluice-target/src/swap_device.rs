//! A LUN's device that can be replaced while the LUN is served: how a LUN grows without a
//! restart. Each access holds a read lock for its duration; a resize takes every lock, so it
//! waits for the accesses in flight and no write reaches the old device after the new one was
//! made from it.
//!
//! The lock is split into one cache line per thread slot: an access locks only its thread's
//! slot, so connections on different cores never write the same cache line (one shared
//! reader count would bounce between cores on every command). A resize locks every slot, in
//! order.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use bytes::{Bytes, BytesMut};
use sluice_storage::{BlockDevice, DeviceOp, Extent, MemoryDevice, StorageError, Submission};

/// Lock slots: threads beyond this many share slots (still correct, only slower).
const SLOTS: usize = 16;

/// The concrete device behind a LUN, kept typed where growing needs the type.
#[derive(Clone, Debug)]
pub(crate) enum Backing {
    /// A memory LUN: grown by [`MemoryDevice::grown`].
    Memory(Arc<MemoryDevice>),
    /// Anything else: replaced by a device opened again with the new size.
    Other(Arc<dyn BlockDevice>),
}

impl Backing {
    fn device(&self) -> &dyn BlockDevice {
        match self {
            Backing::Memory(m) => m.as_ref(),
            Backing::Other(d) => d.as_ref(),
        }
    }
}

/// One slot's lock, alone in its cache line.
#[derive(Debug)]
#[repr(align(128))]
struct Slot(RwLock<Backing>);

/// A [`BlockDevice`] whose backing device can be swapped for a larger one.
#[derive(Debug)]
pub(crate) struct SwapDevice {
    slots: Box<[Slot]>,
    /// Fixed for the device's life: a resize keeps the backend and its kind.
    blocks: bool,
    block_size: u32,
    read_only: bool,
    /// The device's size, read without a lock (the SCSI layer asks for it on every
    /// command); changed only while every slot is write-locked.
    num_blocks: AtomicU64,
}

thread_local! {
    /// This thread's lock slot, handed out round robin on first use.
    static SLOT: Cell<usize> = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        Cell::new(NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS)
    };
}

impl SwapDevice {
    pub(crate) fn new(backing: Backing) -> Self {
        let d = backing.device();
        let (blocks, block_size, read_only) = (d.blocks(), d.block_size(), d.read_only());
        let num_blocks = AtomicU64::new(d.num_blocks());
        Self {
            slots: (0..SLOTS)
                .map(|_| Slot(RwLock::new(backing.clone())))
                .collect(),
            blocks,
            block_size,
            read_only,
            num_blocks,
        }
    }

    /// This thread's slot, read-locked.
    fn read(&self) -> RwLockReadGuard<'_, Backing> {
        let i = SLOT.with(Cell::get);
        // A poisoned slot still holds a whole device (replaced only by assignment).
        self.slots[i]
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the size the device reports now, for a backend whose size changes outside
    /// sluice (an RBD image resized with `rbd resize`). Returns the new number of blocks when
    /// it changed.
    pub(crate) fn refresh_size(&self) -> Option<u64> {
        let now = self.read().device().num_blocks();
        let before = self.num_blocks.swap(now, Ordering::AcqRel);
        (before != now).then_some(now)
    }

    /// Replaces the device by what `grow` makes of it, with every access held off meanwhile.
    /// The new device must have the same block size and kind.
    pub(crate) fn replace(
        &self,
        grow: impl FnOnce(&Backing) -> io::Result<Backing>,
    ) -> io::Result<()> {
        let mut guards: Vec<_> = self
            .slots
            .iter()
            .map(|s| s.0.write().unwrap_or_else(PoisonError::into_inner))
            .collect();
        let new = grow(&guards[0])?;
        if new.device().block_size() != self.block_size {
            return Err(io::Error::other(
                "a resized device must keep its block size",
            ));
        }
        self.num_blocks
            .store(new.device().num_blocks(), Ordering::Release);
        for g in &mut guards {
            **g = new.clone();
        }
        Ok(())
    }
}

impl BlockDevice for SwapDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks.load(Ordering::Acquire)
    }

    fn blocks(&self) -> bool {
        self.blocks
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        self.read().device().read_at(offset, buf)
    }

    fn read_shared(&self, offset: u64, len: usize) -> Option<Result<Bytes, StorageError>> {
        self.read().device().read_shared(offset, len)
    }

    fn read_append(&self, offset: u64, len: usize, out: &mut BytesMut) -> Result<(), StorageError> {
        self.read().device().read_append(offset, len, out)
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError> {
        self.read().device().write_at(offset, data, fua)
    }

    fn write_vectored_at(
        &self,
        offset: u64,
        segments: &[&[u8]],
        fua: bool,
    ) -> Result<(), StorageError> {
        self.read()
            .device()
            .write_vectored_at(offset, segments, fua)
    }

    fn flush(&self) -> Result<(), StorageError> {
        self.read().device().flush()
    }

    fn submits(&self) -> bool {
        self.read().device().submits()
    }

    fn submit(&self, op: DeviceOp) -> Submission {
        // The submission holds what it needs of the backend (an RBD image stays open until
        // its operations complete), so a swap while it is in flight takes nothing from it.
        self.read().device().submit(op)
    }

    fn size_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), StorageError> {
        self.read().device().write_zeroes(offset, len, fua)
    }

    fn write_repeated(
        &self,
        offset: u64,
        data: &[u8],
        unit: usize,
        fua: bool,
    ) -> Result<(), StorageError> {
        self.read().device().write_repeated(offset, data, unit, fua)
    }

    fn compare_and_write(
        &self,
        offset: u64,
        compare: &[u8],
        data: &[u8],
        fua: bool,
    ) -> Option<Result<Option<u64>, StorageError>> {
        self.read()
            .device()
            .compare_and_write(offset, compare, data, fua)
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        self.read().device().discard(offset, len)
    }

    fn deallocates(&self) -> bool {
        self.read().device().deallocates()
    }

    fn deallocation_granularity(&self) -> u64 {
        self.read().device().deallocation_granularity()
    }

    fn provisioning(&self, offset: u64, len: u64) -> Result<Extent, StorageError> {
        self.read().device().provisioning(offset, len)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        self.read().device().allocated_bytes()
    }

    fn physical_block_size(&self) -> u32 {
        self.read().device().physical_block_size()
    }

    fn atomic_writes(&self) -> bool {
        self.read().device().atomic_writes()
    }

    fn keeps_writes(&self) -> bool {
        self.read().device().keeps_writes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_device_grows_and_keeps_its_data() {
        let dev = SwapDevice::new(Backing::Memory(Arc::new(MemoryDevice::new(512, 2048))));
        dev.write_at(512, &[5; 512], false).unwrap();
        assert!(dev.write_at(1 << 20, &[1; 512], false).is_err());
        dev.replace(|b| match b {
            Backing::Memory(m) => Ok(Backing::Memory(Arc::new(m.grown(4096)?))),
            Backing::Other(_) => unreachable!(),
        })
        .unwrap();
        assert_eq!(dev.num_blocks(), 4096);
        dev.write_at(1 << 20, &[1; 512], false).unwrap();
        let mut buf = [0; 512];
        dev.read_at(512, &mut buf).unwrap();
        assert_eq!(buf, [5; 512]);
        let refused = dev.replace(|_| {
            Ok(Backing::Other(Arc::new(sluice_storage::NullDevice::new(
                4096, 10,
            ))))
        });
        assert!(refused.is_err(), "another block size");
        assert_eq!(dev.num_blocks(), 4096);
    }

    #[test]
    fn every_thread_sees_the_new_size() {
        let dev = Arc::new(SwapDevice::new(Backing::Memory(Arc::new(
            MemoryDevice::new(512, 8),
        ))));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let d = Arc::clone(&dev);
                std::thread::spawn(move || d.num_blocks())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 8);
        }
        dev.replace(|b| match b {
            Backing::Memory(m) => Ok(Backing::Memory(Arc::new(m.grown(16)?))),
            Backing::Other(_) => unreachable!(),
        })
        .unwrap();
        let threads: Vec<_> = (0..SLOTS + 2)
            .map(|_| {
                let d = Arc::clone(&dev);
                std::thread::spawn(move || d.num_blocks())
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 16);
        }
    }
}
