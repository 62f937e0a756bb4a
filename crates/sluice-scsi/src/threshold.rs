//! The soft threshold of a thin LU (SBC-4 4.7.3.7): when the space allocated to the LU grows
//! past a configured share of its capacity, every I_T nexus gets the unit attention THIN
//! PROVISIONING SOFT THRESHOLD REACHED (38h/07h), once; the threshold is armed again when the
//! allocation falls back below it (after UNMAP). The Logical Block Provisioning mode page
//! (1Ch/02h) reports the threshold, in units of 2^THRESHOLD EXPONENT blocks (Logical Block
//! Provisioning VPD page).
//!
//! Writes count the bytes they wrote; every `check_every` bytes (1/256 of the capacity,
//! between 1 MiB and 64 MiB) the LU asks its device how much is allocated (a memory LU keeps
//! the count, a file costs one `fstat`). A write of a fully provisioned LU, or of a thin one
//! without a threshold, pays one branch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::lu::LogicalUnit;
use crate::unit_attention::SOFT_THRESHOLD_REACHED;

/// THRESHOLD RESOURCE: LBA mapping resources.
const LBA_MAPPING_RESOURCES: u8 = 0x01;

/// A thin LU's soft threshold, a share of its capacity (which follows the LU when it grows).
#[derive(Debug)]
pub(crate) struct SoftThreshold {
    /// Percent of the capacity.
    percent: u8,
    /// Whether crossing the threshold upwards raises the unit attention.
    armed: AtomicBool,
    /// Bytes written since the allocation was last looked at.
    since_check: AtomicU64,
}

/// The smallest THRESHOLD EXPONENT (at least 1: 0 means "no thresholds") with which a count
/// of `blocks`, rounded up, fits the 32-bit THRESHOLD COUNT.
fn exponent_for(blocks: u64) -> u8 {
    let mut e = 1u8;
    while blocks.div_ceil(1 << e) > u64::from(u32::MAX) {
        e += 1;
    }
    e
}

/// Bytes written between two looks at the allocation for a LU of `size` bytes.
pub(crate) fn check_every(size: u64) -> u64 {
    (size / 256).clamp(1 << 20, 64 << 20)
}

/// THRESHOLD COUNT of `percent` of `blocks` blocks, in units of 2^`exponent` blocks,
/// rounded up: the unit attention comes at or after the share asked for.
fn count_for(blocks: u64, percent: u8, exponent: u8) -> u32 {
    let percent = u128::from(percent.clamp(1, 100));
    // In u128: blocks x 100 may not fit a u64. The quotient is at most `blocks`.
    let threshold = (u128::from(blocks) * percent).div_ceil(100) as u64;
    u32::try_from(threshold.div_ceil(1 << exponent)).unwrap_or(u32::MAX)
}

impl SoftThreshold {
    /// The threshold at `percent` (1 to 100) of the LU's capacity.
    pub(crate) fn new(percent: u8) -> Self {
        Self {
            percent,
            armed: AtomicBool::new(true),
            since_check: AtomicU64::new(0),
        }
    }

    /// THRESHOLD EXPONENT for the LU's capacity now.
    pub(crate) fn exponent(&self, lu: &LogicalUnit) -> u8 {
        exponent_for(lu.num_blocks())
    }

    /// THRESHOLD COUNT for the LU's capacity now.
    fn count(&self, lu: &LogicalUnit) -> u32 {
        count_for(lu.num_blocks(), self.percent, self.exponent(lu))
    }

    /// The threshold in blocks.
    fn blocks(&self, lu: &LogicalUnit) -> u64 {
        u64::from(self.count(lu)) << self.exponent(lu)
    }

    /// `bytes` were written: look at the allocation once enough have been.
    pub(crate) fn wrote(&self, lu: &LogicalUnit, bytes: u64) {
        let before = self.since_check.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes >= check_every(lu.device().size_bytes()) {
            self.since_check.store(0, Ordering::Relaxed);
            self.check(lu);
        }
    }

    /// Compares the allocation with the threshold: raises the unit attention on the way up
    /// (once), arms it again on the way down.
    pub(crate) fn check(&self, lu: &LogicalUnit) {
        let Some(allocated) = lu.device().allocated_bytes() else {
            return;
        };
        let used = allocated / u64::from(lu.block_size().max(1));
        if used >= self.blocks(lu) {
            if self.armed.swap(false, Ordering::AcqRel) {
                lu.state().ua.establish_others(None, SOFT_THRESHOLD_REACHED);
            }
        } else {
            self.armed.store(true, Ordering::Release);
        }
    }

    /// The Logical Block Provisioning mode page (1Ch/02h; SBC-4 6.5.7), current and default
    /// values (nothing is changeable): SITUA=0 (the unit attention goes to every I_T nexus)
    /// and one soft threshold descriptor, enabled, armed for increases of the LBA mapping
    /// resources.
    pub(crate) fn mode_page(&self, lu: &LogicalUnit, changeable: bool) -> Vec<u8> {
        let mut p = vec![0u8; 24];
        p[0] = 0x40 | 0x1C; // SPF=1, page 1Ch
        p[1] = 0x02;
        p[2..4].copy_from_slice(&20u16.to_be_bytes());
        if !changeable {
            p[16] = 0x80; // ENABLED, THRESHOLD TYPE 000b (soft), THRESHOLD ARMING 000b (increase)
            p[17] = LBA_MAPPING_RESOURCES;
            p[20..24].copy_from_slice(&self.count(lu).to_be_bytes());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_fit_and_round_up() {
        assert_eq!(exponent_for(100), 1);
        assert_eq!(exponent_for(1 << 33), 2);
        assert_eq!(exponent_for(u64::MAX), 33);
        assert_eq!(count_for(1000, 80, 1), 400);
        assert_eq!(count_for(1001, 50, 1), 251, "501 blocks, rounded up to 502");
        let n = u64::MAX / 512;
        let e = exponent_for(n);
        assert!(u64::from(count_for(n, 100, e)) << e >= n);
        assert_eq!(check_every(1 << 20), 1 << 20);
        assert_eq!(check_every(1 << 40), 64 << 20);
    }
}
