//! The UNMAP parameter list (SBC-4 5.31.2): an 8-byte header and 16-byte block descriptors.
//!
//! [`parse`] bounds everything by what arrived and by [`MAX_DESCRIPTORS`] before it trusts a
//! length or a count from the wire; the UNMAP command then checks the ranges against
//! the LU.

use crate::field::{be16, be32, be64};
use crate::sense::{invalid_field_in_param, param_list_length_error, SenseData};

/// Most block descriptors one UNMAP may carry: what a 16-bit PARAMETER LIST LENGTH can hold
/// ((65535 - 8) / 16). Reported as MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT in the Block Limits
/// VPD page, so every list an initiator can send is accepted.
pub const MAX_DESCRIPTORS: u32 = 4095;

/// Size of the parameter list header.
const HEADER_BYTES: usize = 8;
/// Size of one block descriptor.
const DESCRIPTOR_BYTES: usize = 16;

/// One UNMAP block descriptor: `blocks` logical blocks from `lba`.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Range {
    /// First logical block.
    pub lba: u64,
    /// Number of logical blocks (0 is allowed and unmaps nothing).
    pub blocks: u32,
}

/// Parses the parameter list of an UNMAP whose PARAMETER LIST LENGTH is `param_len`, from
/// the Data-Out `data` that arrived.
///
/// * A PARAMETER LIST LENGTH of 0 is no list at all: no ranges.
/// * Fewer than 8 bytes (announced, or arrived) is a PARAMETER LIST LENGTH ERROR.
/// * The UNMAP BLOCK DESCRIPTOR DATA LENGTH is bounded by what the parameter list holds; a
///   trailing partial descriptor is ignored (SBC-4 5.31.2).
/// * More than [`MAX_DESCRIPTORS`] descriptors is an INVALID FIELD IN PARAMETER LIST
///   (pointing at the descriptor data length).
pub fn parse(data: &[u8], param_len: usize) -> Result<Vec<Range>, SenseData> {
    if param_len == 0 {
        return Ok(Vec::new());
    }
    if param_len < HEADER_BYTES || data.len() < HEADER_BYTES {
        return Err(param_list_length_error());
    }
    // The list ends where the CDB says or where the data ends, whichever comes first. The
    // UNMAP DATA LENGTH (bytes 0-1) only restates that and is not relied on.
    let list = &data[..data.len().min(param_len)];
    let desc_len = usize::from(be16(list, 2)).min(list.len() - HEADER_BYTES);
    let count = desc_len / DESCRIPTOR_BYTES;
    if count > MAX_DESCRIPTORS as usize {
        return Err(invalid_field_in_param(2, Some(7)));
    }
    let ranges = (0..count)
        .map(|i| {
            let at = HEADER_BYTES + i * DESCRIPTOR_BYTES;
            Range {
                lba: be64(list, at),
                blocks: be32(list, at + 8),
            }
        })
        .collect();
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdb::{unmap, UnmapDescriptor};

    fn list(ranges: &[(u64, u32)]) -> Vec<u8> {
        let d: Vec<UnmapDescriptor> = ranges
            .iter()
            .map(|&(lba, blocks)| UnmapDescriptor { lba, blocks })
            .collect();
        unmap(&d).1
    }

    #[test]
    fn round_trips_the_builder() {
        let l = list(&[(5, 9), (u64::MAX, u32::MAX), (0, 0)]);
        let r = parse(&l, l.len()).unwrap();
        assert_eq!(
            r,
            vec![
                Range { lba: 5, blocks: 9 },
                Range {
                    lba: u64::MAX,
                    blocks: u32::MAX
                },
                Range { lba: 0, blocks: 0 },
            ]
        );
        assert!(parse(&list(&[]), 8).unwrap().is_empty());
        assert!(parse(&[], 0).unwrap().is_empty());
    }

    #[test]
    fn short_lists_and_lying_lengths() {
        let l = list(&[(1, 1), (2, 2)]);
        for short in 1..8 {
            assert_eq!(parse(&l, short).unwrap_err().asc, 0x1A);
            assert_eq!(parse(&l[..short], l.len()).unwrap_err().asc, 0x1A);
        }
        // The parameter list length cuts the second descriptor: it is ignored.
        assert_eq!(parse(&l, l.len() - 1).unwrap().len(), 1);
        // A descriptor data length beyond the list is bounded by it; so is the data that
        // arrived.
        let mut big = l.clone();
        big[2..4].copy_from_slice(&0xFFF0u16.to_be_bytes());
        assert_eq!(parse(&big, big.len()).unwrap().len(), 2);
        assert_eq!(parse(&big[..30], big.len()).unwrap().len(), 1);
        // A shorter descriptor data length is obeyed.
        let mut fewer = l.clone();
        fewer[2..4].copy_from_slice(&16u16.to_be_bytes());
        assert_eq!(parse(&fewer, fewer.len()).unwrap().len(), 1);
    }

    #[test]
    fn the_largest_list_fits_and_nothing_larger_parses() {
        let ranges: Vec<(u64, u32)> = (0..MAX_DESCRIPTORS as u64).map(|i| (i, 1)).collect();
        let l = list(&ranges);
        assert_eq!(l.len(), 65528);
        assert_eq!(parse(&l, l.len()).unwrap().len(), MAX_DESCRIPTORS as usize);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_bounded(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            param_len in 0usize..70000,
        ) {
            if let Ok(r) = parse(&data, param_len) {
                proptest::prop_assert!(r.len() * 16 + 8 <= data.len().max(8));
            }
        }
    }
}
