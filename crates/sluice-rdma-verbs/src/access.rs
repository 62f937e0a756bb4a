//! Access rights and addresses in verbs terms: sluice-rdma's [`Access`] and [`VaMode`] as
//! `ibv_access_flags` bits, and an [`Sge`] (STag, address in the region's addressing, length)
//! resolved to what a verbs scatter/gather entry holds (lkey, process address, length).

use sluice_rdma::{Access, STag, Sge, VaMode};

use crate::error::VerbsError;

/// `IBV_ACCESS_LOCAL_WRITE` (libibverbs `verbs.h`).
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
/// `IBV_ACCESS_ZERO_BASED`: the region's first byte is address 0 to the peer (RFC 7145's
/// ZBVA).
pub const IBV_ACCESS_ZERO_BASED: u32 = 1 << 5;

/// The `ibv_access_flags` bits a region registered with `access` and `va` needs. Remote
/// write without local write is refused here, as `ibv_reg_mr` would refuse it (EINVAL), so
/// both providers fail the same registration the same way. A base address other than the
/// region's own process address cannot be chosen through `ibv_reg_mr` (only through
/// `ibv_reg_mr_iova`), so [`VaMode::Based`] means "the process address" to this provider.
pub fn access_bits(access: Access, va: VaMode) -> Result<u32, VerbsError> {
    if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE) {
        return Err(VerbsError::InvalidAccess);
    }
    let mut bits = 0;
    for (right, bit) in [
        (Access::LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE),
        (Access::REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE),
        (Access::REMOTE_READ, IBV_ACCESS_REMOTE_READ),
    ] {
        if access.contains(right) {
            bits |= bit;
        }
    }
    if va == VaMode::ZeroBased {
        bits |= IBV_ACCESS_ZERO_BASED;
    }
    Ok(bits)
}

/// The length of a gathered region (chunks registered one after the other as one region
/// for reading), and its rights checked: write rights are refused
/// ([`VerbsError::ReadOnly`]), as the software provider refuses them, since the region
/// stands for data that does not change. A sum past `usize` saturates, for the registration
/// to refuse as too large.
pub fn gathered_len<B: AsRef<[u8]>>(chunks: &[B], access: Access) -> Result<usize, VerbsError> {
    if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
        return Err(VerbsError::ReadOnly);
    }
    Ok(chunks
        .iter()
        .fold(0usize, |n, c| n.saturating_add(c.as_ref().len())))
}

/// A registered region as the post path needs it: keys, where it lives in this process, how
/// the peer and the consumer address it, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionEntry {
    /// The MR's lkey (what sluice-rdma calls the region's STag on the local side).
    pub lkey: u32,
    /// The MR's rkey (what the peer is told).
    pub rkey: u32,
    /// Process address of the region's first byte.
    pub addr: u64,
    /// Address of the first byte as [`Sge::va`] names it: 0 when zero-based, else `addr`.
    pub base_va: u64,
    /// Bytes.
    pub len: u64,
    /// The `ibv_access_flags` bits it was registered with.
    pub access: u32,
}

/// Looks regions up by the STag a work request names: the one the provider handed out at
/// registration (for the verbs provider, the rkey; the entry gives the lkey to post with).
pub trait RegionTable {
    /// The region `stag` names, if registered.
    fn region(&self, stag: STag) -> Option<RegionEntry>;
}

/// A verbs scatter/gather entry: `ibv_sge`'s three fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerbsSge {
    /// Process address.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// The region's lkey.
    pub lkey: u32,
}

/// Resolves `sge` against `regions`, checking (with checked arithmetic) that every byte lies
/// inside the region, as sluice-rdma's `ProtectionDomain::check` does: a verbs device would
/// refuse a bad local access with a protection error completion after the fact; refusing it
/// before posting keeps a wrong address from ever reaching the device.
pub fn resolve(regions: &impl RegionTable, sge: Sge) -> Result<VerbsSge, VerbsError> {
    resolve_with(regions, sge, 0)
}

/// [`resolve`] for a buffer the device writes into (a receive, an RDMA Read's sink): the
/// region needs local write.
pub fn resolve_sink(regions: &impl RegionTable, sge: Sge) -> Result<VerbsSge, VerbsError> {
    resolve_with(regions, sge, IBV_ACCESS_LOCAL_WRITE)
}

fn resolve_with(regions: &impl RegionTable, sge: Sge, needs: u32) -> Result<VerbsSge, VerbsError> {
    let r = regions
        .region(sge.stag)
        .ok_or(VerbsError::UnknownStag(sge.stag))?;
    if r.access & needs != needs {
        return Err(VerbsError::NoLocalWrite(sge.stag));
    }
    let offset = sge
        .va
        .checked_sub(r.base_va)
        .filter(|off| {
            off.checked_add(u64::from(sge.len))
                .is_some_and(|end| end <= r.len)
        })
        .ok_or(VerbsError::OutOfRegion {
            stag: sge.stag,
            va: sge.va,
            len: sge.len,
        })?;
    let addr = r.addr.checked_add(offset).ok_or(VerbsError::OutOfRegion {
        stag: sge.stag,
        va: sge.va,
        len: sge.len,
    })?;
    Ok(VerbsSge {
        addr,
        length: sge.len,
        lkey: r.lkey,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    struct Table(BTreeMap<u32, RegionEntry>);

    impl RegionTable for Table {
        fn region(&self, stag: STag) -> Option<RegionEntry> {
            self.0.get(&stag.0).copied()
        }
    }

    fn table() -> Table {
        let based = RegionEntry {
            lkey: 0x100,
            rkey: 0x200,
            addr: 0x7f00_0000_1000,
            base_va: 0x7f00_0000_1000,
            len: 4096,
            access: IBV_ACCESS_REMOTE_READ,
        };
        let zero = RegionEntry {
            lkey: 0x101,
            rkey: 0x201,
            addr: 0x7f00_0001_0000,
            base_va: 0,
            len: 8192,
            access: IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED,
        };
        Table([(0x100, based), (0x101, zero)].into())
    }

    #[test]
    fn a_gathered_region_is_as_long_as_its_chunks_and_read_only() {
        let chunks: [&[u8]; 3] = [b"abc", b"", b"defg"];
        assert_eq!(gathered_len(&chunks, Access::REMOTE_READ), Ok(7));
        assert_eq!(gathered_len::<&[u8]>(&[], Access::NONE), Ok(0));
        for access in [
            Access::LOCAL_WRITE,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        ] {
            assert_eq!(gathered_len(&chunks, access), Err(VerbsError::ReadOnly));
        }
    }

    #[test]
    fn access_rights_become_verbs_bits() {
        assert_eq!(access_bits(Access::NONE, VaMode::Based(0)), Ok(0));
        assert_eq!(
            access_bits(Access::LOCAL_WRITE | Access::REMOTE_WRITE, VaMode::Based(0)),
            Ok(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
        );
        assert_eq!(
            access_bits(Access::REMOTE_READ, VaMode::ZeroBased),
            Ok(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED)
        );
        assert_eq!(
            access_bits(Access::REMOTE_WRITE, VaMode::ZeroBased),
            Err(VerbsError::InvalidAccess)
        );
    }

    #[test]
    fn sges_resolve_inside_their_region_only() {
        let t = table();
        let s = |stag, va, len| Sge {
            stag: STag(stag),
            va,
            len,
        };
        assert_eq!(
            resolve(&t, s(0x100, 0x7f00_0000_1000 + 96, 100)),
            Ok(VerbsSge {
                addr: 0x7f00_0000_1000 + 96,
                length: 100,
                lkey: 0x100
            })
        );
        assert_eq!(
            resolve(&t, s(0x101, 4096, 4096)).map(|v| v.addr),
            Ok(0x7f00_0001_1000)
        );
        for bad in [
            s(0x101, 4097, 4096),          // one byte past the end
            s(0x100, 0x7f00_0000_0fff, 1), // one byte before the start
            s(0x101, u64::MAX, 2),         // wraps
        ] {
            assert!(
                matches!(resolve(&t, bad), Err(VerbsError::OutOfRegion { .. })),
                "{bad:?}"
            );
        }
        assert!(resolve_sink(&t, s(0x101, 0, 1)).is_ok());
        assert_eq!(
            resolve_sink(&t, s(0x100, 0x7f00_0000_1000, 1)),
            Err(VerbsError::NoLocalWrite(STag(0x100)))
        );
        assert_eq!(
            resolve(&t, s(0x999, 0, 1)),
            Err(VerbsError::UnknownStag(STag(0x999)))
        );
    }

    proptest! {
        // A resolved entry always lies inside the region it names.
        #[test]
        fn resolved_ranges_stay_inside(va in any::<u64>(), len in any::<u32>(), which in 0u32..2) {
            let t = table();
            let stag = STag(0x100 + which);
            if let Ok(v) = resolve(&t, Sge { stag, va, len }) {
                let r = t.region(stag).unwrap();
                prop_assert!(v.addr >= r.addr);
                prop_assert!(v.addr + u64::from(v.length) <= r.addr + r.len);
            }
        }
    }
}
