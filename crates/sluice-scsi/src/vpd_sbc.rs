//! The SBC-4 VPD pages that describe what the LU does with its blocks: Block Limits (B0h),
//! Logical Block Provisioning (B2h); and the Third-Party Copy page (8Fh) of its copy manager.
//! Every value states a limit the command code enforces.

use crate::lu::LogicalUnit;
use crate::{compare_and_write, unmap_list, write_same, MAX_TRANSFER_BYTES};

/// Block Limits (SBC-4 6.6.4): the page body, PAGE LENGTH 3Ch as SBC-3 requires when 04C0h is
/// claimed.
pub(crate) fn block_limits(lu: &LogicalUnit) -> Vec<u8> {
    let bs = lu.block_size().max(1);
    let mut b = vec![0u8; 0x3C];
    let max_blocks = (MAX_TRANSFER_BYTES / u64::from(bs)) as u32;
    // WSNZ=0: WRITE SAME with 0 blocks means "to the end of the LU".
    b[1] = compare_and_write::MAX_BLOCKS;
    // OPTIMAL TRANSFER LENGTH GRANULARITY: one block.
    b[2..4].copy_from_slice(&1u16.to_be_bytes());
    // MAXIMUM TRANSFER LENGTH.
    b[4..8].copy_from_slice(&max_blocks.to_be_bytes());
    // MAXIMUM PREFETCH LENGTH.
    b[12..16].copy_from_slice(&max_blocks.to_be_bytes());
    if lu.thin() {
        // MAXIMUM UNMAP LBA COUNT: FFFFFFFFh, no limit (deallocation costs the backend the
        // same whatever the length). MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT: every list a
        // 16-bit parameter list length can carry.
        b[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
        b[20..24].copy_from_slice(&unmap_list::MAX_DESCRIPTORS.to_be_bytes());
        // OPTIMAL UNMAP GRANULARITY: the unit the device frees space in (a file system block,
        // a memory chunk); UGAVALID=1 with UNMAP GRANULARITY ALIGNMENT 0.
        let unit = lu.device().deallocation_granularity() / u64::from(bs);
        b[24..28].copy_from_slice(&u32::try_from(unit.max(1)).unwrap_or(u32::MAX).to_be_bytes());
        b[28..32].copy_from_slice(&0x8000_0000u32.to_be_bytes());
    }
    // MAXIMUM WRITE SAME LENGTH.
    b[32..40].copy_from_slice(&write_same::max_blocks(bs).to_be_bytes());
    if lu.device().atomic_writes() {
        // MAXIMUM ATOMIC TRANSFER LENGTH: as long as any write; ATOMIC ALIGNMENT and ATOMIC
        // TRANSFER LENGTH GRANULARITY 0 (any); no atomic boundaries.
        b[40..44].copy_from_slice(&max_blocks.to_be_bytes());
    }
    b
}

/// Logical Block Provisioning (SBC-4 6.6.6): the page body. A thin LU has LBPU (UNMAP),
/// LBPWS and LBPWS10 (WRITE SAME with UNMAP=1), LBPRZ=001b (deallocated blocks read zeros)
/// and PROVISIONING TYPE 010b; a fully provisioned one none of them. ANC_SUP=0 (no anchored
/// blocks), DP=0 (no provisioning group descriptor). THRESHOLD EXPONENT: 0 (no thresholds)
/// unless the LU has a soft threshold.
pub(crate) fn logical_block_provisioning(lu: &LogicalUnit) -> Vec<u8> {
    if lu.thin() {
        let exponent = lu.threshold().map_or(0, |t| t.exponent(lu));
        vec![exponent, 0x80 | 0x40 | 0x20 | 0x04, 0x02, 0x00]
    } else {
        vec![0u8; 4]
    }
}
