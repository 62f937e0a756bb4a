//! The sending side: one encoded PDU into datagrams.

use bytes::BytesMut;

use super::{SegmentHeader, HEADER_LEN, MAX_DATAGRAM_LEN, MIN_DATAGRAM_LEN};

/// Numbers PDUs and cuts them into datagrams of at most `max_datagram` bytes (see the
/// [module docs](super) for the format).
#[derive(Clone, Debug)]
pub struct Segmenter {
    next_id: u32,
    max_datagram: usize,
}

/// One datagram of a PDU: its header and its slice of the PDU.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// The segment header.
    pub header: SegmentHeader,
    /// The PDU bytes it carries.
    pub payload: &'a [u8],
}

impl Segment<'_> {
    /// Appends the datagram (header, then payload) to `buf`.
    pub fn write_to(&self, buf: &mut BytesMut) {
        buf.reserve(HEADER_LEN + self.payload.len());
        buf.extend_from_slice(&self.header.to_bytes());
        buf.extend_from_slice(self.payload);
    }

    /// Bytes of the datagram.
    pub fn len(&self) -> usize {
        HEADER_LEN + self.payload.len()
    }

    /// Never: a segment carries at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Segmenter {
    /// A segmenter writing datagrams of at most `max_datagram` bytes, clamped to
    /// [`MIN_DATAGRAM_LEN`]`..=`[`MAX_DATAGRAM_LEN`]; PDU ids start at `first_id`.
    pub fn new(max_datagram: usize, first_id: u32) -> Segmenter {
        Segmenter {
            next_id: first_id,
            max_datagram: max_datagram.clamp(MIN_DATAGRAM_LEN, MAX_DATAGRAM_LEN),
        }
    }

    /// The largest datagram this segmenter writes.
    pub fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    /// The segments of `pdu`, which takes the next PDU id. `None` for an empty PDU or one
    /// longer than 65535 segments or 4 GiB (no encoded PDU is: the 24-bit DataSegmentLength
    /// bounds a PDU near 16 MiB, which [`MIN_DATAGRAM_LEN`] keeps within the count).
    pub fn segment<'a>(&mut self, pdu: &'a [u8]) -> Option<impl Iterator<Item = Segment<'a>>> {
        let total_len = u32::try_from(pdu.len()).ok().filter(|&n| n > 0)?;
        let payload = self.max_datagram - HEADER_LEN;
        let count = u16::try_from(pdu.len().div_ceil(payload)).ok()?;
        let pdu_id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let first = SegmentHeader {
            index: 0,
            count,
            pdu_id,
            total_len,
        };
        Some((0..count).map(move |index| {
            let header = SegmentHeader { index, ..first };
            Segment {
                header,
                payload: &pdu[header.range()],
            }
        }))
    }
}
