//! Protection domains and the memory regions registered in them, with the checks every
//! access goes through.

mod memory;

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use rustc_hash::FxHashMap;

use crate::access::{Access, STag, VaMode};
pub use memory::Contents;
use memory::{Gathered, LentMemory, Memory};

/// Largest region one registration may create. Registration allocates the region's memory,
/// so the bound keeps a caller's typo from asking for the machine.
pub const MAX_REGION_BYTES: u64 = 1 << 32;

/// Region indexes are 24 bits wide ([`STag`]); index 0 is never used, so an all-zero STag
/// never names a region.
const MAX_REGION_INDEX: u32 = 0x00ff_ffff;

/// A registered memory region as its owner describes it to the peer: STag, base address
/// (in the region's addressing) and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// The region's STag (lkey and rkey).
    pub stag: STag,
    /// The address of the region's first byte as the peer names it (0 when zero-based).
    pub base_va: u64,
    /// Bytes.
    pub len: u64,
    /// The rights granted.
    pub access: Access,
}

/// Why a registration failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// More than [`MAX_REGION_BYTES`], or a base address whose region would wrap.
    #[error("region of {0} bytes is too large or wraps the address space")]
    TooLarge(u64),
    /// Remote write without local write, which verbs forbid.
    #[error("remote write access requires local write access")]
    InvalidAccess,
    /// Every region index has been handed out.
    #[error("no region index left in this protection domain")]
    Exhausted,
    /// A fault plan failed this registration on purpose.
    #[error("registration failed by fault injection")]
    Injected,
}

/// Why an access to a region was refused. Each one is what hardware reports as a protection
/// (local) or access (remote) error; none of them ever reads or writes a byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No region of this protection domain has this STag (never registered, deregistered,
    /// or a stale key).
    #[error("STag {0} names no region")]
    UnknownStag(STag),
    /// The region was invalidated.
    #[error("STag {0} was invalidated")]
    Invalidated(STag),
    /// The region lacks the right the access needs.
    #[error("STag {0} lacks the access right")]
    NoRight(STag),
    /// The access leaves the region's `[base, base + len)`.
    #[error("access of {len} bytes at {va:#x} leaves the region of STag {stag}")]
    OutOfBounds {
        /// The region.
        stag: STag,
        /// The first address.
        va: u64,
        /// Bytes.
        len: u64,
    },
}

struct Region {
    stag: STag,
    base_va: u64,
    access: Access,
    valid: bool,
    bytes: Memory,
}

/// A protection domain: the regions one set of queue pairs may use. Its memory lives here,
/// so every access — local or remote — goes through [`ProtectionDomain::check`].
#[derive(Default)]
pub struct ProtectionDomain {
    regions: FxHashMap<u32, Region>,
    next_index: u32,
    next_key: u8,
}

impl ProtectionDomain {
    /// An empty protection domain.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `len` zeroed bytes with `access`, addressed as `va` says.
    pub fn register(
        &mut self,
        len: u64,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        if len > MAX_REGION_BYTES {
            return Err(RegisterError::TooLarge(len));
        }
        let size = usize::try_from(len).map_err(|_| RegisterError::TooLarge(len))?;
        self.register_vec(vec![0; size], access, va)
    }

    /// Registers the caller's memory in place, as real memory registration pins the
    /// consumer's buffer rather than allocating one: the region is `bytes` as they are, with
    /// no copy and no zero-filling. Every check a [`register`](Self::register)ed region gets
    /// applies unchanged; [`take`](Self::take) hands the memory back.
    pub fn register_vec(
        &mut self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.insert(Memory::Owned(bytes), access, va)
    }

    /// Registers `bytes` (a reused buffer, say) as a region of `bytes.len()` zeros without
    /// clearing it now: every access sees zeros until it is written. It is cleared at the
    /// first store or view that needs it, and never if one placement fills it whole
    /// ([`place`](Self::place)), the common fate of an RDMA Write's or Read's target buffer.
    pub fn register_cleared(
        &mut self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.insert(Memory::Cleared { bytes, valid: 0 }, access, va)
    }

    /// Registers the caller's immutable buffer in place for reading only (a Send's or an
    /// RDMA Write's source, or a buffer the peer RDMA-Reads): local and remote reads of it
    /// share its bytes instead of copying them. Write rights are refused
    /// ([`RegisterError::InvalidAccess`]): the memory cannot change.
    pub fn register_shared(
        &mut self,
        bytes: Bytes,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
            return Err(RegisterError::InvalidAccess);
        }
        self.insert(Memory::Shared(bytes), access, va)
    }

    /// Registers the caller's immutable buffers in place, in order, as one region for
    /// reading only (a gather list made one region, as a write's data the peer RDMA-Reads
    /// arrives in pieces): a read inside one chunk slices it, a read spanning chunks copies
    /// the pieces it covers. Every check is that of any region; write rights are refused
    /// ([`RegisterError::InvalidAccess`]), as for [`register_shared`](Self::register_shared).
    pub fn register_gathered(
        &mut self,
        chunks: Vec<Bytes>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
            return Err(RegisterError::InvalidAccess);
        }
        self.insert(Memory::Gathered(Gathered::new(chunks)), access, va)
    }

    fn insert(
        &mut self,
        bytes: Memory,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        let len = bytes.len() as u64;
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
            return Err(RegisterError::InvalidAccess);
        }
        let base_va = match va {
            VaMode::ZeroBased => 0,
            VaMode::Based(base) => base,
        };
        if len > MAX_REGION_BYTES || base_va.checked_add(len).is_none() {
            return Err(RegisterError::TooLarge(len));
        }
        if self.next_index >= MAX_REGION_INDEX {
            return Err(RegisterError::Exhausted);
        }
        self.next_index += 1;
        self.next_key = self.next_key.wrapping_add(1);
        let stag = STag::new(self.next_index, self.next_key);
        self.regions.insert(
            stag.index(),
            Region {
                stag,
                base_va,
                access,
                valid: true,
                bytes,
            },
        );
        Ok(MemoryRegion {
            stag,
            base_va,
            len,
            access,
        })
    }

    /// Deregisters a region and hands its memory back to the owner as one vector: the STag
    /// names nothing afterwards, as after [`deregister`](Self::deregister). A region that
    /// owns its vector gives it back as it is; any other (a caller's shared or gathered
    /// buffers, contents placed from the stream) is copied into one, so a caller that only
    /// wants the region gone uses [`retire`](Self::retire).
    pub fn take(&mut self, stag: STag) -> Result<Vec<u8>, AccessError> {
        self.region(stag)?;
        self.regions
            .remove(&stag.index())
            .map(|r| r.bytes.into_vec())
            .ok_or(AccessError::UnknownStag(stag))
    }

    /// Deregisters a region and hands back the memory it owned ([`register`](Self::register)
    /// or [`register_vec`](Self::register_vec)); a shared or gathered region's memory is
    /// the caller's, and the region only drops its references to it (`None`: no copy).
    pub fn retire(&mut self, stag: STag) -> Result<Option<Vec<u8>>, AccessError> {
        self.region(stag)?;
        self.regions
            .remove(&stag.index())
            .map(|r| r.bytes.into_owned())
            .ok_or(AccessError::UnknownStag(stag))
    }

    /// Deregisters a writable region and hands back its memory and contents without a copy
    /// ([`Contents`]); `Ok(None)` for a shared or gathered region, whose memory is the
    /// caller's (the region only drops its references to it).
    pub fn take_contents(&mut self, stag: STag) -> Result<Option<Contents>, AccessError> {
        self.region(stag)?;
        self.regions
            .remove(&stag.index())
            .map(|r| r.bytes.into_contents())
            .ok_or(AccessError::UnknownStag(stag))
    }

    /// Removes a region; its STag names nothing afterwards.
    pub fn deregister(&mut self, stag: STag) -> Result<(), AccessError> {
        self.region(stag)?;
        self.regions.remove(&stag.index());
        Ok(())
    }

    /// Invalidates a region (local invalidate, or the target of a Send with Invalidate): every
    /// later access through its STag fails, its memory stays for the owner to read.
    pub fn invalidate(&mut self, stag: STag) -> Result<(), AccessError> {
        let region = self.region_mut(stag)?;
        if !region.valid {
            return Err(AccessError::Invalidated(stag));
        }
        region.valid = false;
        Ok(())
    }

    /// The region's description, if `stag` names one (valid or not).
    pub fn describe(&self, stag: STag) -> Option<(MemoryRegion, bool)> {
        let r = self.region(stag).ok()?;
        Some((
            MemoryRegion {
                stag: r.stag,
                base_va: r.base_va,
                len: r.bytes.len() as u64,
                access: r.access,
            },
            r.valid,
        ))
    }

    /// Checks an access of `len` bytes at `va` through `stag` that needs `need`, and returns
    /// the byte range it covers in the region. This is the one gate: an unknown or invalidated
    /// STag, a missing right or any byte outside `[base, base + len)` is refused.
    pub fn check(
        &self,
        stag: STag,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Range<usize>, AccessError> {
        let region = self.region(stag)?;
        if !region.valid {
            return Err(AccessError::Invalidated(stag));
        }
        if !region.access.contains(need) {
            return Err(AccessError::NoRight(stag));
        }
        region_range(region, va, len).ok_or(AccessError::OutOfBounds { stag, va, len })
    }

    /// Copies `len` bytes out of a region after [`check`](Self::check) with `need`.
    pub fn read(
        &self,
        stag: STag,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Vec<u8>, AccessError> {
        let range = self.check(stag, va, len, need)?;
        Ok(self.region(stag)?.bytes.view(range).into_owned())
    }

    /// As [`read`](Self::read), as `Bytes`: a slice of a shared region's buffer, or of the
    /// one chunk of a gathered region the read lies in (no copy); a copy of anything else.
    pub fn read_bytes(
        &self,
        stag: STag,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Bytes, AccessError> {
        let range = self.check(stag, va, len, need)?;
        Ok(self.region(stag)?.bytes.bytes(range))
    }

    /// Copies `data` into a region after [`check`](Self::check) with `need`.
    pub fn write(
        &mut self,
        stag: STag,
        va: u64,
        data: &[u8],
        need: Access,
    ) -> Result<(), AccessError> {
        let range = self.check(stag, va, data.len() as u64, need)?;
        store(self.region_mut(stag)?, range, data)
    }

    /// As [`write`](Self::write), for data received in a buffer of its own: when it fills
    /// the whole of a writable region, it becomes the region's contents without a copy (the
    /// region's own memory is kept for the owner, [`take_contents`](Self::take_contents)).
    /// Anything else is copied in as `write` does.
    pub fn place(
        &mut self,
        stag: STag,
        va: u64,
        data: Bytes,
        need: Access,
    ) -> Result<(), AccessError> {
        let range = self.check(stag, va, data.len() as u64, need)?;
        let region = self.region_mut(stag)?;
        if range.start == 0 && range.end == region.bytes.len() && !data.is_empty() {
            return match region.bytes.place_whole(data) {
                true => Ok(()),
                false => Err(AccessError::NoRight(stag)),
            };
        }
        store(region, range, &data)
    }

    /// Lends a region's memory out for a tagged placement of `len` bytes at `va` that will
    /// be read from the stream straight into it: the access passes the same checks as
    /// [`place`](Self::place) first. `None` if it does not (the placement then takes the
    /// ordinary path, which reports the error), if it would fill the region whole (placed
    /// without a copy anyway), or if the memory is not the region's own.
    pub(crate) fn lend(&mut self, stag: STag, va: u64, len: u64, need: Access) -> Option<Lent> {
        let range = self.check(stag, va, len, need).ok()?;
        let region = self.region_mut(stag).ok()?;
        if range.is_empty() || (range.start == 0 && range.end == region.bytes.len()) {
            return None;
        }
        let memory = region.bytes.lend(range.clone())?;
        Some(Lent {
            stag,
            range,
            memory,
        })
    }

    /// Takes back memory lent by [`lend`](Self::lend), its placement read in (or cut
    /// short: then the range holds what arrived, as a buffer does after a failed
    /// placement). `false` if the region was deregistered or invalidated meanwhile, which
    /// refuses the placement as it would have refused it later; the memory is dropped with
    /// a deregistered region, and an invalidated one keeps it for its owner.
    pub(crate) fn give_back(&mut self, lent: Lent) -> bool {
        let Ok(region) = self.region_mut(lent.stag) else {
            return false;
        };
        region.bytes.restore(lent.memory) && region.valid
    }

    /// The owner's own view of its memory (a CPU load, not a verb): bounds are checked, rights
    /// and validity are not. Borrowed, except a range spanning a gathered region's chunks,
    /// which is copied.
    pub fn contents(&self, stag: STag, va: u64, len: u64) -> Result<Cow<'_, [u8]>, AccessError> {
        let region = self.region(stag)?;
        let range =
            region_range(region, va, len).ok_or(AccessError::OutOfBounds { stag, va, len })?;
        Ok(region.bytes.view(range))
    }

    /// The owner filling its own memory (a CPU store, not a verb): bounds are checked, rights
    /// and validity are not.
    pub fn fill(&mut self, stag: STag, va: u64, data: &[u8]) -> Result<(), AccessError> {
        let region = self.region_mut(stag)?;
        let len = data.len() as u64;
        let range =
            region_range(region, va, len).ok_or(AccessError::OutOfBounds { stag, va, len })?;
        store(region, range, data)
    }

    fn region(&self, stag: STag) -> Result<&Region, AccessError> {
        match self.regions.get(&stag.index()) {
            Some(r) if r.stag == stag => Ok(r),
            _ => Err(AccessError::UnknownStag(stag)),
        }
    }

    fn region_mut(&mut self, stag: STag) -> Result<&mut Region, AccessError> {
        match self.regions.get_mut(&stag.index()) {
            Some(r) if r.stag == stag => Ok(r),
            _ => Err(AccessError::UnknownStag(stag)),
        }
    }
}

/// Stores `data` at `range` of a region's memory; the caller's immutable buffers have no
/// write right.
/// A region's memory out for one placement read straight from the stream
/// ([`ProtectionDomain::lend`]).
pub(crate) struct Lent {
    stag: STag,
    range: Range<usize>,
    memory: LentMemory,
}

impl Lent {
    /// Where the placement's bytes go.
    pub(crate) fn target(&mut self) -> &mut [u8] {
        &mut self.memory.bytes[self.range.clone()]
    }
}

fn store(region: &mut Region, range: Range<usize>, data: &[u8]) -> Result<(), AccessError> {
    match region.bytes.store(range, data) {
        true => Ok(()),
        false => Err(AccessError::NoRight(region.stag)),
    }
}

/// `[va, va + len)` as a range of the region's bytes, if it lies inside `[base, base + size)`.
/// Checked arithmetic throughout: addresses come from the wire.
fn region_range(region: &Region, va: u64, len: u64) -> Option<Range<usize>> {
    let offset = va.checked_sub(region.base_va)?;
    let end = offset.checked_add(len)?;
    if end > region.bytes.len() as u64 {
        return None;
    }
    Some(usize::try_from(offset).ok()?..usize::try_from(end).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pd_with(len: u64, access: Access, va: VaMode) -> (ProtectionDomain, MemoryRegion) {
        let mut pd = ProtectionDomain::new();
        let mr = pd.register(len, access, va).expect("register");
        (pd, mr)
    }

    #[test]
    fn bounds_are_base_relative_and_exclusive_at_the_end() {
        let (pd, mr) = pd_with(100, Access::REMOTE_READ, VaMode::Based(0x1000));
        assert_eq!(
            pd.check(mr.stag, 0x1000, 100, Access::REMOTE_READ),
            Ok(0..100)
        );
        assert_eq!(
            pd.check(mr.stag, 0x1063, 1, Access::REMOTE_READ),
            Ok(99..100)
        );
        for (va, len) in [
            (0x1000, 101),
            (0x0fff, 1),
            (0x1064, 1),
            (0x1063, 2),
            (u64::MAX, 2),
        ] {
            assert!(
                matches!(
                    pd.check(mr.stag, va, len, Access::REMOTE_READ),
                    Err(AccessError::OutOfBounds { .. })
                ),
                "{va:#x}+{len}"
            );
        }
    }

    #[test]
    fn zero_based_regions_start_at_zero() {
        let (pd, mr) = pd_with(64, Access::REMOTE_READ, VaMode::ZeroBased);
        assert_eq!(mr.base_va, 0);
        assert_eq!(pd.check(mr.stag, 0, 64, Access::REMOTE_READ), Ok(0..64));
        assert!(pd.check(mr.stag, 1, 64, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn rights_are_enforced() {
        let (pd, mr) = pd_with(8, Access::REMOTE_READ, VaMode::ZeroBased);
        assert_eq!(
            pd.check(mr.stag, 0, 8, Access::REMOTE_WRITE),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(
            pd.check(mr.stag, 0, 8, Access::LOCAL_WRITE),
            Err(AccessError::NoRight(mr.stag))
        );
    }

    #[test]
    fn remote_write_needs_local_write() {
        let mut pd = ProtectionDomain::new();
        assert_eq!(
            pd.register(8, Access::REMOTE_WRITE, VaMode::ZeroBased),
            Err(RegisterError::InvalidAccess)
        );
    }

    #[test]
    fn oversized_and_wrapping_registrations_are_refused() {
        let mut pd = ProtectionDomain::new();
        assert!(pd
            .register(MAX_REGION_BYTES + 1, Access::NONE, VaMode::ZeroBased)
            .is_err());
        assert!(pd
            .register(16, Access::NONE, VaMode::Based(u64::MAX - 8))
            .is_err());
    }

    #[test]
    fn wrong_stale_and_invalidated_keys_are_refused() {
        let (mut pd, mr) = pd_with(8, Access::REMOTE_READ, VaMode::ZeroBased);
        let wrong_key = STag::new(mr.stag.index(), mr.stag.key().wrapping_add(1));
        assert_eq!(
            pd.check(wrong_key, 0, 8, Access::REMOTE_READ),
            Err(AccessError::UnknownStag(wrong_key))
        );
        pd.invalidate(mr.stag).expect("invalidate");
        assert_eq!(
            pd.check(mr.stag, 0, 8, Access::REMOTE_READ),
            Err(AccessError::Invalidated(mr.stag))
        );
        assert_eq!(
            pd.invalidate(mr.stag),
            Err(AccessError::Invalidated(mr.stag))
        );
        // The owner still sees its memory.
        assert_eq!(pd.contents(mr.stag, 0, 8).map(|c| c.len()), Ok(8));
        pd.deregister(mr.stag).expect("deregister");
        assert_eq!(
            pd.check(mr.stag, 0, 8, Access::REMOTE_READ),
            Err(AccessError::UnknownStag(mr.stag))
        );
    }

    #[test]
    fn stags_are_never_reused() {
        let mut pd = ProtectionDomain::new();
        let a = pd.register(8, Access::NONE, VaMode::ZeroBased).expect("a");
        pd.deregister(a.stag).expect("dereg");
        let b = pd.register(8, Access::NONE, VaMode::ZeroBased).expect("b");
        assert_ne!(a.stag, b.stag);
        assert!(pd.contents(a.stag, 0, 1).is_err());
    }

    #[test]
    fn memory_registered_in_place_is_checked_like_any_region() {
        let mut pd = ProtectionDomain::new();
        let mr = pd
            .register_vec(vec![7; 16], Access::REMOTE_READ, VaMode::Based(0x2000))
            .expect("register");
        assert_eq!(mr.len, 16);
        assert_eq!(
            pd.read(mr.stag, 0x2000, 16, Access::REMOTE_READ),
            Ok(vec![7; 16])
        );
        assert!(matches!(
            pd.read(mr.stag, 0x2008, 9, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert_eq!(
            pd.write(mr.stag, 0x2000, &[1], Access::REMOTE_WRITE),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(
            pd.register_vec(vec![0; 4], Access::REMOTE_WRITE, VaMode::ZeroBased),
            Err(RegisterError::InvalidAccess)
        );
    }

    #[test]
    fn a_placement_that_fills_the_region_becomes_its_contents_without_a_copy() {
        let mut pd = ProtectionDomain::new();
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = pd
            .register_vec(vec![0; 4], access, VaMode::Based(0x100))
            .expect("register");
        let data = Bytes::from(b"abcd".to_vec());
        pd.place(mr.stag, 0x100, data.clone(), Access::REMOTE_WRITE)
            .expect("place");
        assert_eq!(
            pd.contents(mr.stag, 0x100, 4).expect("contents")[..],
            *b"abcd"
        );
        // Reads slice the very buffer placed.
        let read = pd
            .read_bytes(mr.stag, 0x101, 2, Access::REMOTE_READ)
            .expect("read");
        assert_eq!(read.as_ptr(), data[1..].as_ptr());
        // The owner gets that buffer back, and the region's own memory, untouched.
        match pd.take_contents(mr.stag) {
            Ok(Some(Contents::Placed { data: back, spare })) => {
                assert_eq!(back.as_ptr(), data.as_ptr());
                assert_eq!(spare, vec![0; 4]);
            }
            other => panic!("expected placed contents, got {other:?}"),
        }
        assert_eq!(
            pd.take_contents(mr.stag).map(|_| ()),
            Err(AccessError::UnknownStag(mr.stag))
        );
    }

    #[test]
    fn a_region_registered_cleared_reads_as_zeros_until_written() {
        let mut pd = ProtectionDomain::new();
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let dirty = || vec![0xee; 4];
        let cleared = |pd: &mut ProtectionDomain| {
            pd.register_cleared(dirty(), access, VaMode::ZeroBased)
                .expect("register")
        };
        // Every view of it, local or remote, is zeros; so is what its owner takes back.
        let mr = cleared(&mut pd);
        assert_eq!(pd.contents(mr.stag, 0, 4).expect("contents")[..], [0; 4]);
        assert_eq!(pd.read(mr.stag, 1, 3, Access::REMOTE_READ), Ok(vec![0; 3]));
        assert_eq!(
            pd.read_bytes(mr.stag, 0, 2, Access::REMOTE_READ).as_deref(),
            Ok(&[0u8, 0][..])
        );
        assert!(matches!(
            pd.take_contents(mr.stag),
            Ok(Some(Contents::Owned(v))) if v == [0; 4]
        ));
        let mr = cleared(&mut pd);
        assert_eq!(pd.retire(mr.stag), Ok(Some(vec![0; 4])));
        // A partial store clears the rest.
        let mr = cleared(&mut pd);
        pd.write(mr.stag, 1, b"xy", Access::REMOTE_WRITE)
            .expect("write");
        assert_eq!(pd.take(mr.stag), Ok(b"\0xy\0".to_vec()));
        let mr = cleared(&mut pd);
        pd.fill(mr.stag, 3, b"z").expect("fill");
        assert_eq!(pd.take(mr.stag), Ok(b"\0\0\0z".to_vec()));
        // Stores in order, as a read's bursts arrive, clear nothing; what is not stored yet
        // still reads as zeros.
        let mr = cleared(&mut pd);
        pd.write(mr.stag, 0, b"ab", Access::REMOTE_WRITE)
            .expect("write");
        assert_eq!(
            pd.contents(mr.stag, 0, 4).expect("contents")[..],
            *b"ab\0\0"
        );
        assert_eq!(pd.contents(mr.stag, 1, 1).expect("contents")[..], *b"b");
        pd.place(mr.stag, 2, Bytes::from_static(b"cd"), Access::REMOTE_WRITE)
            .expect("place");
        assert_eq!(pd.take(mr.stag), Ok(b"abcd".to_vec()));
        // A whole placement never clears it: the buffer comes back as it was.
        let mr = cleared(&mut pd);
        pd.place(
            mr.stag,
            0,
            Bytes::from_static(b"abcd"),
            Access::REMOTE_WRITE,
        )
        .expect("place");
        match pd.take_contents(mr.stag) {
            Ok(Some(Contents::Placed { data, spare })) => {
                assert_eq!(&data[..], b"abcd");
                assert_eq!(spare, dirty(), "not cleared");
            }
            other => panic!("expected placed contents, got {other:?}"),
        }
    }

    #[test]
    fn a_placement_is_checked_and_a_partial_one_is_copied() {
        let mut pd = ProtectionDomain::new();
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mr = pd
            .register_vec(vec![0; 4], access, VaMode::ZeroBased)
            .expect("register");
        let bytes = |b: &[u8]| Bytes::copy_from_slice(b);
        // Out of bounds, or without the right: refused, nothing placed.
        assert!(matches!(
            pd.place(mr.stag, 1, bytes(b"wxyz"), Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert_eq!(
            pd.place(mr.stag, 0, bytes(b"wxyz"), Access::REMOTE_READ),
            Err(AccessError::NoRight(mr.stag))
        );
        pd.place(mr.stag, 1, bytes(b"xy"), Access::REMOTE_WRITE)
            .expect("partial");
        assert!(matches!(
            pd.take_contents(mr.stag),
            Ok(Some(Contents::Owned(v))) if v == b"\0xy\0"
        ));
        // A shared region has no write right to place with.
        let shared = pd
            .register_shared(bytes(b"1234"), Access::REMOTE_READ, VaMode::ZeroBased)
            .expect("register");
        assert_eq!(
            pd.place(shared.stag, 0, bytes(b"wxyz"), Access::LOCAL_WRITE),
            Err(AccessError::NoRight(shared.stag))
        );
        assert!(matches!(pd.take_contents(shared.stag), Ok(None)));
    }

    #[test]
    fn a_store_into_a_placed_region_copies_its_contents_first() {
        let mut pd = ProtectionDomain::new();
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let mr = pd
            .register_vec(vec![0; 4], access, VaMode::ZeroBased)
            .expect("register");
        let placed = Bytes::from(b"abcd".to_vec());
        pd.place(mr.stag, 0, placed.clone(), Access::REMOTE_WRITE)
            .expect("place");
        pd.write(mr.stag, 2, b"Z", Access::REMOTE_WRITE)
            .expect("write");
        pd.fill(mr.stag, 0, b"Y").expect("fill");
        assert_eq!(&placed[..], b"abcd", "the received buffer never changes");
        assert_eq!(pd.take(mr.stag), Ok(b"YbZd".to_vec()));
        // A whole placement over a placed region replaces it; taking the memory copies the
        // contents into it.
        let mr = pd
            .register_vec(vec![0; 2], access, VaMode::ZeroBased)
            .expect("register");
        for data in [&b"ab"[..], b"cd"] {
            pd.place(
                mr.stag,
                0,
                Bytes::copy_from_slice(data),
                Access::REMOTE_WRITE,
            )
            .expect("place");
        }
        assert_eq!(pd.retire(mr.stag), Ok(Some(b"cd".to_vec())));
    }

    #[test]
    fn taking_a_region_returns_its_memory_and_retires_its_stag() {
        let mut pd = ProtectionDomain::new();
        let mr = pd
            .register(
                4,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                VaMode::ZeroBased,
            )
            .expect("register");
        pd.write(mr.stag, 1, &[9, 9], Access::REMOTE_WRITE)
            .expect("write");
        assert_eq!(pd.take(mr.stag), Ok(vec![0, 9, 9, 0]));
        assert_eq!(pd.take(mr.stag), Err(AccessError::UnknownStag(mr.stag)));
        assert_eq!(
            pd.check(mr.stag, 0, 1, Access::REMOTE_WRITE),
            Err(AccessError::UnknownStag(mr.stag))
        );
    }

    #[test]
    fn shared_memory_is_read_only_and_bounded() {
        let mut pd = ProtectionDomain::new();
        let data = Bytes::from_static(b"0123456789");
        assert_eq!(
            pd.register_shared(data.clone(), Access::LOCAL_WRITE, VaMode::ZeroBased),
            Err(RegisterError::InvalidAccess)
        );
        let mr = pd
            .register_shared(data, Access::REMOTE_READ, VaMode::Based(0x100))
            .expect("register");
        assert_eq!(
            pd.read_bytes(mr.stag, 0x102, 3, Access::REMOTE_READ),
            Ok(Bytes::from_static(b"234"))
        );
        assert!(matches!(
            pd.read_bytes(mr.stag, 0x108, 3, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds { .. })
        ));
        assert_eq!(
            pd.fill(mr.stag, 0x100, b"x"),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(pd.take(mr.stag), Ok(b"0123456789".to_vec()));
    }

    fn gathered(pd: &mut ProtectionDomain, access: Access) -> (MemoryRegion, Bytes) {
        let second = Bytes::from(b"456789".to_vec());
        let chunks = vec![
            Bytes::from_static(b"0123"),
            Bytes::new(),
            second.clone(),
            Bytes::from_static(b"ab"),
        ];
        let mr = pd
            .register_gathered(chunks, access, VaMode::Based(0x4000))
            .expect("register");
        (mr, second)
    }

    #[test]
    fn a_gathered_region_is_its_chunks_in_order() {
        let mut pd = ProtectionDomain::new();
        let (mr, second) = gathered(&mut pd, Access::REMOTE_READ);
        assert_eq!(mr.len, 12);
        assert_eq!(mr.base_va, 0x4000);
        // Inside one chunk: the caller's bytes themselves.
        let inside = pd
            .read_bytes(mr.stag, 0x4005, 4, Access::REMOTE_READ)
            .expect("inside");
        assert_eq!(inside, Bytes::from_static(b"5678"));
        assert_eq!(inside.as_ptr(), second[1..].as_ptr());
        // Across chunks: their bytes in order.
        assert_eq!(
            pd.read_bytes(mr.stag, 0x4002, 9, Access::REMOTE_READ),
            Ok(Bytes::from_static(b"23456789a"))
        );
        assert_eq!(
            pd.read(mr.stag, 0x4000, 12, Access::REMOTE_READ),
            Ok(b"0123456789ab".to_vec())
        );
        assert_eq!(&*pd.contents(mr.stag, 0x4003, 2).expect("c"), b"34");
    }

    #[test]
    fn a_gathered_region_is_checked_like_any_region() {
        let mut pd = ProtectionDomain::new();
        let (mr, _) = gathered(&mut pd, Access::REMOTE_READ);
        for (va, len) in [(0x4000, 13), (0x3fff, 1), (0x400c, 1), (0x400b, 2)] {
            assert!(
                matches!(
                    pd.read_bytes(mr.stag, va, len, Access::REMOTE_READ),
                    Err(AccessError::OutOfBounds { .. })
                ),
                "{va:#x}+{len}"
            );
        }
        assert_eq!(
            pd.write(mr.stag, 0x4000, b"x", Access::REMOTE_WRITE),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(
            pd.fill(mr.stag, 0x4000, b"x"),
            Err(AccessError::NoRight(mr.stag))
        );
        pd.invalidate(mr.stag).expect("invalidate");
        assert_eq!(
            pd.read_bytes(mr.stag, 0x4000, 1, Access::REMOTE_READ),
            Err(AccessError::Invalidated(mr.stag))
        );
        assert_eq!(pd.retire(mr.stag), Ok(None));
        assert_eq!(
            pd.read_bytes(mr.stag, 0x4000, 1, Access::REMOTE_READ),
            Err(AccessError::UnknownStag(mr.stag))
        );
    }

    #[test]
    fn a_gathered_region_refuses_write_rights() {
        let mut pd = ProtectionDomain::new();
        for access in [
            Access::LOCAL_WRITE,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ] {
            assert_eq!(
                pd.register_gathered(vec![Bytes::from_static(b"x")], access, VaMode::ZeroBased),
                Err(RegisterError::InvalidAccess)
            );
        }
        let (mr, _) = gathered(&mut pd, Access::NONE);
        assert_eq!(
            pd.check(mr.stag, 0x4000, 1, Access::REMOTE_READ),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(pd.take(mr.stag), Ok(b"0123456789ab".to_vec()));
    }

    #[test]
    fn retiring_hands_back_only_owned_memory() {
        let mut pd = ProtectionDomain::new();
        let owned = pd
            .register_vec(vec![1, 2], Access::NONE, VaMode::ZeroBased)
            .expect("owned");
        let shared = pd
            .register_shared(Bytes::from_static(b"ab"), Access::NONE, VaMode::ZeroBased)
            .expect("shared");
        assert_eq!(pd.retire(owned.stag), Ok(Some(vec![1, 2])));
        assert_eq!(pd.retire(shared.stag), Ok(None));
        assert_eq!(
            pd.retire(owned.stag),
            Err(AccessError::UnknownStag(owned.stag))
        );
    }

    fn rw() -> Access {
        Access::LOCAL_WRITE | Access::REMOTE_WRITE
    }

    #[test]
    fn lent_memory_takes_a_partial_placement_in_place() {
        let (mut pd, mr) = pd_with(8, rw(), VaMode::Based(0x1000));
        let mut lent = pd
            .lend(mr.stag, 0x1002, 4, Access::REMOTE_WRITE)
            .expect("lent");
        assert_eq!(lent.target().len(), 4);
        // While it is out, the owner sees zeros and cannot store.
        assert_eq!(
            pd.fill(mr.stag, 0x1000, &[9]),
            Err(AccessError::NoRight(mr.stag))
        );
        assert_eq!(
            pd.contents(mr.stag, 0x1000, 8).expect("contents").as_ref(),
            &[0; 8]
        );
        lent.target().copy_from_slice(b"abcd");
        assert!(pd.give_back(lent));
        assert_eq!(
            pd.contents(mr.stag, 0x1000, 8).expect("contents").as_ref(),
            b"\0\0abcd\0\0"
        );
    }

    #[test]
    fn only_checked_partial_placements_into_own_memory_are_lent() {
        let (mut pd, mr) = pd_with(8, rw(), VaMode::ZeroBased);
        let w = Access::REMOTE_WRITE;
        assert!(
            pd.lend(mr.stag, 0, 8, w).is_none(),
            "whole: placed as received"
        );
        assert!(pd.lend(mr.stag, 4, 8, w).is_none(), "out of bounds");
        assert!(
            pd.lend(mr.stag, 0, 4, Access::REMOTE_READ).is_none(),
            "no right"
        );
        let shared = pd
            .register_shared(
                Bytes::from_static(b"abcdefgh"),
                Access::NONE,
                VaMode::ZeroBased,
            )
            .expect("shared");
        assert!(
            pd.lend(shared.stag, 0, 4, Access::NONE).is_none(),
            "not its memory"
        );
        pd.invalidate(mr.stag).expect("invalidate");
        assert!(pd.lend(mr.stag, 0, 4, w).is_none(), "invalidated");
    }

    #[test]
    fn a_region_gone_while_lent_refuses_the_placement() {
        let (mut pd, mr) = pd_with(8, rw(), VaMode::ZeroBased);
        let lent = pd.lend(mr.stag, 0, 4, Access::REMOTE_WRITE).expect("lent");
        pd.deregister(mr.stag).expect("deregister");
        assert!(!pd.give_back(lent));
        let (mut pd, mr) = pd_with(8, rw(), VaMode::ZeroBased);
        let mut lent = pd.lend(mr.stag, 0, 4, Access::REMOTE_WRITE).expect("lent");
        lent.target().copy_from_slice(b"abcd");
        pd.invalidate(mr.stag).expect("invalidate");
        assert!(
            !pd.give_back(lent),
            "refused, but the owner keeps its memory"
        );
        assert_eq!(pd.take(mr.stag), Ok(b"abcd\0\0\0\0".to_vec()));
    }

    #[test]
    fn a_cleared_region_lent_past_what_it_holds_reads_zeros_in_the_gap() {
        let mut pd = ProtectionDomain::new();
        let mr = pd
            .register_cleared(vec![7; 8], rw(), VaMode::ZeroBased)
            .expect("cleared");
        let mut lent = pd.lend(mr.stag, 4, 2, Access::REMOTE_WRITE).expect("lent");
        lent.target().copy_from_slice(b"ab");
        assert!(pd.give_back(lent));
        assert_eq!(
            pd.contents(mr.stag, 0, 8).expect("contents").as_ref(),
            b"\0\0\0\0ab\0\0"
        );
        let mut lent = pd.lend(mr.stag, 6, 2, Access::REMOTE_WRITE).expect("lent");
        lent.target().copy_from_slice(b"cd");
        assert!(pd.give_back(lent));
        assert_eq!(pd.take(mr.stag), Ok(b"\0\0\0\0abcd".to_vec()));
    }
}
