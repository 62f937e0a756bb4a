//! PDU boundaries in a byte stream, found from the length fields alone.
//!
//! A party in the middle must not judge what it forwards: a digest it checked, or a field it
//! parsed, could make it drop what the receiver would have accepted, or hide what the receiver
//! should see. So the cutter reads only what RFC 7143 section 11.2 needs to find where a PDU
//! ends (TotalAHSLength in byte 4, DataSegmentLength in bytes 5-7, the padding to 4 bytes, and
//! the digests in force) and verifies nothing. Memory stays bounded: the length is checked
//! against the limit as soon as the 48-byte BHS is in, so no frame longer than
//! [`max_frame_len`] is ever waited for.

use std::ops::Range;

use bytes::BytesMut;
use sluice_proto::framing::{max_frame_len, pad_len, Digests, DIGEST_LEN};
use sluice_proto::pdu::{Bhs, BHS_LEN, MAX_DATA_SEGMENT_LEN};

/// Where the parts of one frame lie, from its BHS and the digests in force.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct FrameLayout {
    /// BHS plus AHS: the bytes a header digest covers (RFC 7143 section 11.2.3).
    pub header_len: usize,
    /// `header_len` plus the header digest, if in force: where the data segment starts.
    pub head_len: usize,
    /// DataSegmentLength: the data bytes, padding excluded.
    pub data_len: usize,
    /// The whole frame: head, data, padding and the data digest (present only when in force
    /// and the data segment is not empty, RFC 7143 section 11.1).
    pub total: usize,
}

impl FrameLayout {
    /// The layout announced by `header` under `digests`.
    pub fn of(header: &[u8; BHS_LEN], digests: Digests) -> FrameLayout {
        let bhs = Bhs::from_array(header);
        // TotalAHSLength is 8 bits of words and DataSegmentLength 24 bits: these sums stay far
        // below any overflow.
        let header_len = BHS_LEN + bhs.total_ahs_len();
        let head_len = header_len + if digests.header { DIGEST_LEN } else { 0 };
        let data_len = bhs.data_segment_len() as usize;
        let data_digest = if digests.data && data_len > 0 {
            DIGEST_LEN
        } else {
            0
        };
        FrameLayout {
            header_len,
            head_len,
            data_len,
            total: head_len + data_len + pad_len(data_len) + data_digest,
        }
    }

    /// The BHS and AHS bytes.
    pub fn header_range(&self) -> Range<usize> {
        0..self.header_len
    }

    /// The data segment bytes, padding excluded.
    pub fn data_range(&self) -> Range<usize> {
        self.head_len..self.head_len + self.data_len
    }
}

/// A stream that cannot be framed within the limit.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CutError {
    /// DataSegmentLength above the limit: waiting for the frame would buffer more than
    /// allowed, so the stream is refused instead.
    #[error(
        "DataSegmentLength {len} exceeds the limit of {max} bytes: the stream cannot be framed"
    )]
    SegmentTooLong {
        /// The length announced.
        len: u32,
        /// The limit.
        max: u32,
    },
}

/// Cuts whole frames off the front of a byte stream; see the [module docs](self).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct FrameCutter {
    max_data_segment: u32,
}

impl Default for FrameCutter {
    /// A cutter accepting any data segment the 24-bit field can announce.
    fn default() -> Self {
        FrameCutter::new(MAX_DATA_SEGMENT_LEN)
    }
}

impl FrameCutter {
    /// A cutter refusing data segments longer than `max_data_segment` bytes (capped at the
    /// field's maximum, 2^24-1).
    pub fn new(max_data_segment: u32) -> FrameCutter {
        FrameCutter {
            max_data_segment: max_data_segment.min(MAX_DATA_SEGMENT_LEN),
        }
    }

    /// The largest frame this cutter waits for under `digests`: the bound on buffered bytes.
    pub fn max_frame_len(&self, digests: Digests) -> usize {
        max_frame_len(self.max_data_segment, digests)
    }

    /// The layout of the frame at the front of `buf`: `None` until its BHS is in.
    pub fn layout(&self, buf: &[u8], digests: Digests) -> Result<Option<FrameLayout>, CutError> {
        let Some(header) = buf.first_chunk::<BHS_LEN>() else {
            return Ok(None);
        };
        let len = Bhs::from_array(header).data_segment_len();
        if len > self.max_data_segment {
            return Err(CutError::SegmentTooLong {
                len,
                max: self.max_data_segment,
            });
        }
        Ok(Some(FrameLayout::of(header, digests)))
    }

    /// Bytes still missing before the frame at the front of `buf` is whole (0 when it is, or
    /// when the stream cannot be framed): a hint for sizing the next read.
    pub fn bytes_needed(&self, buf: &[u8], digests: Digests) -> usize {
        match self.layout(buf, digests) {
            Ok(None) => BHS_LEN - buf.len(),
            Ok(Some(l)) => l.total.saturating_sub(buf.len()),
            Err(_) => 0,
        }
    }

    /// Removes the frame at the front of `buf` once it is whole. `Ok(None)`: more bytes are
    /// needed. After an error `buf` is untouched.
    pub fn cut(&self, buf: &mut BytesMut, digests: Digests) -> Result<Option<BytesMut>, CutError> {
        match self.layout(buf, digests)? {
            Some(l) if buf.len() >= l.total => Ok(Some(buf.split_to(l.total))),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
