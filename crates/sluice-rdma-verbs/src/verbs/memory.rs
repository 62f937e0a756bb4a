//! Memory regions: an allocation this crate owns, registered with the device for as long as
//! the region lives.
//!
//! The device reads and writes a registered region behind the program's back (the peer's
//! RDMA Writes land in it at any time the rights allow), so its bytes are never lent out as a
//! Rust reference: they are reached only by [`Region::fill`] and [`Region::copy_out`], which
//! copy through the raw pointer after checking the range. When a remote write and a copy
//! overlap in time is for the protocol above to prevent, as it is on hardware (iSER reads a
//! buffer only after the completion that says its data arrived).
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;

use sideway::ibverbs::memory_region::MemoryRegion as VerbsMr;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::AccessFlags;
use sluice_rdma::{Access, MemoryRegion, STag, VaMode};

use crate::access::{access_bits, RegionEntry};
use crate::error::VerbsError;

/// Largest region this provider registers: a bound on one allocation (1 GiB).
pub const MAX_REGION_BYTES: usize = 1 << 30;

/// A registered region: the allocation and its registration.
pub struct Region {
    // Field order is drop order: the registration goes before the memory it names.
    _registration: Arc<VerbsMr>,
    memory: Allocation,
    entry: RegionEntry,
    access: Access,
}

/// Zeroed bytes on the heap, owned through a raw pointer so that no `&mut` to them exists
/// while the device may write them.
struct Allocation {
    ptr: NonNull<[u8]>,
}

impl Allocation {
    fn zeroed(len: usize) -> Self {
        let boxed: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        Self {
            ptr: NonNull::from(Box::leak(boxed)),
        }
    }

    fn addr(&self) -> u64 {
        self.ptr.as_ptr().cast::<u8>() as usize as u64
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `Box::leak` in `zeroed` and is freed only here, once; the
        // registration that let the device reach it was dropped before (field order of
        // `Region`), so nothing else refers to it.
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

// SAFETY: the allocation is plain bytes reached only through range-checked copies.
unsafe impl Send for Allocation {}
// SAFETY: as above; shared use copies in or out, never hands out references.
unsafe impl Sync for Allocation {}

impl Region {
    /// Registers `len` zeroed bytes with `access` on `pd`.
    pub fn register(
        pd: &Arc<ProtectionDomain>,
        len: usize,
        access: Access,
        va: VaMode,
    ) -> Result<Self, VerbsError> {
        if len == 0 || len > MAX_REGION_BYTES {
            return Err(VerbsError::Verbs {
                call: "ibv_reg_mr",
                reason: format!("{len} bytes: a region is 1 to {MAX_REGION_BYTES} bytes"),
            });
        }
        let bits = access_bits(access, va)?;
        let flags = AccessFlags::from(bits as i32);
        let memory = Allocation::zeroed(len);
        // SAFETY: `memory` is `len` bytes this region owns; it stays allocated until after
        // the registration is dropped (field order of `Region`), so the device never reaches
        // freed memory through this MR.
        let mr = unsafe { pd.reg_mr(memory.addr() as usize, len, flags) }
            .map_err(|e| super::failed("ibv_reg_mr")(&e))?;
        let addr = memory.addr();
        let entry = RegionEntry {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            addr,
            base_va: if va == VaMode::ZeroBased { 0 } else { addr },
            len: len as u64,
            access: bits,
        };
        Ok(Self {
            _registration: mr,
            memory,
            entry,
            access,
        })
    }

    /// What the post path needs to know of it.
    pub fn entry(&self) -> RegionEntry {
        self.entry
    }

    /// The region as sluice-rdma describes regions to a peer: the rkey as its STag, its base
    /// address in its own addressing, its length and rights.
    pub fn describe(&self) -> MemoryRegion {
        MemoryRegion {
            stag: STag(self.entry.rkey),
            base_va: self.entry.base_va,
            len: self.entry.len,
            access: self.access,
        }
    }

    /// The offset of `[va, va + len)` in the region, if it lies inside.
    fn offset(&self, va: u64, len: usize) -> Result<usize, VerbsError> {
        let out = || VerbsError::OutOfRegion {
            stag: STag(self.entry.lkey),
            va,
            len: u32::try_from(len).unwrap_or(u32::MAX),
        };
        let off = va.checked_sub(self.entry.base_va).ok_or_else(out)?;
        let end = off.checked_add(len as u64).ok_or_else(out)?;
        if end > self.entry.len {
            return Err(out());
        }
        usize::try_from(off).map_err(|_| out())
    }

    /// Copies `data` into the region at `va`.
    pub fn fill(&self, va: u64, data: &[u8]) -> Result<(), VerbsError> {
        let off = self.offset(va, data.len())?;
        // SAFETY: `offset` checked that `[off, off + data.len())` lies inside the allocation,
        // which lives as long as `self`; `data` is a distinct Rust slice, so they cannot
        // overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.memory.ptr.as_ptr().cast::<u8>().add(off),
                data.len(),
            );
        }
        Ok(())
    }

    /// Copies `len` bytes of the region at `va` out.
    pub fn copy_out(&self, va: u64, len: usize) -> Result<Vec<u8>, VerbsError> {
        let off = self.offset(va, len)?;
        let mut out = vec![0u8; len];
        // SAFETY: as in `fill`, the range is inside the live allocation and `out` is a new
        // vector of exactly `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.memory.ptr.as_ptr().cast::<u8>().add(off),
                out.as_mut_ptr(),
                len,
            );
        }
        Ok(out)
    }
}
