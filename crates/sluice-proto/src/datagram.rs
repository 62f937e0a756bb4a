//! iSCSI PDUs carried in UDP datagrams (sluice's experimental UDP transport).
//!
//! RFC 7143 defines iSCSI over TCP only. Sajid Hussain's dissertation "Performance Evaluation
//! of iSCSI for IP Storage and Transport Protocols" (University of Manitoba, 2004, sections
//! 4.6 and 5.4) evaluates iSCSI over UDP: each PDU travels in its own framed unit, message
//! boundaries come from the datagrams, and what UDP loses is recovered by iSCSI's own error
//! recovery (SNACK, recovery R2T, command retry: ErrorRecoveryLevel 1). This module is that
//! framing for real sockets, sans-IO: it turns encoded PDUs into datagrams and datagrams back
//! into whole PDUs, and never reads a clock (time enters as `now`).
//!
//! # Wire format
//!
//! Every datagram carries one segment of exactly one PDU (the PDU as it would be on a TCP
//! stream: BHS, AHS, header digest, data, padding, data digest). A PDU longer than one
//! datagram's payload is cut into `count` segments. Each datagram starts with a 16-byte
//! header, all fields big-endian:
//!
//! | Bytes | Field | Meaning |
//! |---|---|---|
//! | 0 | version | [`VERSION`] (1); other values are dropped |
//! | 1 | flags | 0; other values are dropped (reserved for later versions) |
//! | 2-3 | index | this segment's position, `0..count` |
//! | 4-5 | count | segments of the PDU, `1..=65535` |
//! | 6-7 | reserved | 0 |
//! | 8-11 | PDU id | the sender's number for this PDU, +1 per PDU (wrapping) |
//! | 12-15 | total length | the PDU's length in bytes, `1..=` the receiver's bound |
//!
//! The segment lengths follow from `total` and `count` alone, so the receiver checks each one
//! exactly: with `stride = ceil(total / count)`, segments `0..count-1` carry `stride` bytes
//! each and the last carries the rest (`total - stride * (count - 1)`, at least one byte).
//! Segment `index` starts at byte `index * stride` of the PDU. The sender picks the smallest
//! `count` whose stride fits its datagram size ([`Segmenter`]), which makes every segment of
//! a PDU the same size but the last.
//!
//! # Reception
//!
//! [`Reassembler`] keeps the PDUs of which some segments arrived. A PDU is delivered once all
//! of its segments are in, never in part; a PDU missing a segment is dropped when it is older
//! than [`ReassemblyLimits::partial_timeout`] or when newer ones need its room
//! ([`ReassemblyLimits::max_partial`] PDUs and [`ReassemblyLimits::max_buffered_bytes`] bytes
//! at most), oldest first. A segment that disagrees with the PDU it names (another total or
//! count) discards that PDU. So a lost datagram becomes a missing PDU, which the iSCSI layer
//! recovers, and no loss, duplication or reordering pattern yields a PDU the sender did not
//! send (the property tests of this module check that). UDP's checksum guards the bytes; the
//! iSCSI digests, when negotiated, guard them further.

mod reassemble;
mod segment;

pub use reassemble::{Reassembler, ReassemblyLimits, ReassemblyStats};
pub use segment::{Segment, Segmenter};

/// The format version this module writes and accepts.
pub const VERSION: u8 = 1;

/// Bytes of the segment header at the front of every datagram.
pub const HEADER_LEN: usize = 16;

/// The smallest datagram a [`Segmenter`] may be given: big enough that any PDU (at most
/// [`crate::framing::max_frame_len`] of the 24-bit DataSegmentLength, about 16 MiB) fits in
/// 65535 segments.
pub const MIN_DATAGRAM_LEN: usize = 512;

/// The largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// An Ethernet path's datagram: 1500-byte MTU less the IPv4 (20) and UDP (8) headers.
pub const ETHERNET_DATAGRAM_LEN: usize = 1_472;

/// The segment header of one datagram, parsed and checked against itself.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SegmentHeader {
    /// This segment's position.
    pub index: u16,
    /// Segments of the PDU.
    pub count: u16,
    /// The sender's number for the PDU.
    pub pdu_id: u32,
    /// The PDU's length in bytes.
    pub total_len: u32,
}

impl SegmentHeader {
    /// Bytes each segment but the last carries.
    pub fn stride(&self) -> usize {
        (self.total_len as usize).div_ceil(usize::from(self.count))
    }

    /// Where this segment's bytes lie in the PDU.
    pub fn range(&self) -> std::ops::Range<usize> {
        let stride = self.stride();
        let start = usize::from(self.index) * stride;
        let end = (start + stride).min(self.total_len as usize);
        start..end
    }

    /// The header's 16 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0] = VERSION;
        h[2..4].copy_from_slice(&self.index.to_be_bytes());
        h[4..6].copy_from_slice(&self.count.to_be_bytes());
        h[8..12].copy_from_slice(&self.pdu_id.to_be_bytes());
        h[12..16].copy_from_slice(&self.total_len.to_be_bytes());
        h
    }

    /// Parses a datagram's header and checks it against its payload and `max_pdu_len`;
    /// returns the header and the payload.
    pub fn parse(datagram: &[u8], max_pdu_len: usize) -> Result<(Self, &[u8]), DatagramError> {
        let Some((head, payload)) = datagram.split_first_chunk::<HEADER_LEN>() else {
            return Err(DatagramError::Truncated {
                len: datagram.len(),
            });
        };
        if head[0] != VERSION {
            return Err(DatagramError::Version(head[0]));
        }
        if head[1] != 0 || head[6] != 0 || head[7] != 0 {
            return Err(DatagramError::Reserved);
        }
        let be16 = |i: usize| u16::from_be_bytes([head[i], head[i + 1]]);
        let be32 = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let h = SegmentHeader {
            index: be16(2),
            count: be16(4),
            pdu_id: be32(8),
            total_len: be32(12),
        };
        if h.total_len == 0 || h.total_len as usize > max_pdu_len {
            return Err(DatagramError::TotalLength {
                len: h.total_len,
                max: max_pdu_len,
            });
        }
        // count >= 1 and at most one segment per byte, so that the last segment is not empty.
        if h.count == 0 || u32::from(h.count) > h.total_len || h.index >= h.count {
            return Err(DatagramError::Count {
                index: h.index,
                count: h.count,
            });
        }
        // With stride = ceil(total / count), the last segment must still hold a byte.
        if h.stride() * (usize::from(h.count) - 1) >= h.total_len as usize {
            return Err(DatagramError::Count {
                index: h.index,
                count: h.count,
            });
        }
        if payload.len() != h.range().len() {
            return Err(DatagramError::SegmentLength {
                expected: h.range().len(),
                actual: payload.len(),
            });
        }
        Ok((h, payload))
    }
}

/// Why a datagram was dropped.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DatagramError {
    /// Shorter than the segment header.
    #[error("datagram of {len} bytes is shorter than the {HEADER_LEN}-byte segment header")]
    Truncated {
        /// The datagram's length.
        len: usize,
    },
    /// Another format version.
    #[error("unknown datagram format version {0}")]
    Version(u8),
    /// A reserved field is not zero.
    #[error("reserved segment header bits set")]
    Reserved,
    /// The PDU length is zero or above the bound.
    #[error("PDU length {len} outside 1..={max}")]
    TotalLength {
        /// The length announced.
        len: u32,
        /// The receiver's bound.
        max: usize,
    },
    /// The segment count or index is impossible for the PDU's length.
    #[error("segment {index} of {count} is impossible for the PDU length")]
    Count {
        /// The index announced.
        index: u16,
        /// The count announced.
        count: u16,
    },
    /// The payload's length is not what the header implies.
    #[error("segment carries {actual} bytes, the header implies {expected}")]
    SegmentLength {
        /// Bytes implied by total and count.
        expected: usize,
        /// Bytes carried.
        actual: usize,
    },
    /// The segment disagrees with earlier segments of the same PDU id.
    #[error("segment of PDU {pdu_id} disagrees with its earlier segments")]
    Conflict {
        /// The PDU id.
        pdu_id: u32,
    },
    /// The PDU is larger than the whole reassembly budget.
    #[error("PDU of {len} bytes exceeds the reassembly budget")]
    Budget {
        /// The PDU's length.
        len: usize,
    },
}

#[cfg(test)]
mod tests;
