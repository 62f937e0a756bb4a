//! Receiving a Data-In payload in place (RFC 7143 sections 11.1, 11.7).
//!
//! [`Framer::decode`] needs a whole PDU in the receive buffer. A large Data-In payload can
//! instead go straight to where the read wants it: [`Framer::peek_data_in`] reads the header
//! of a Data-In whose data segment has not all arrived yet, [`PartialDataIn::start`] takes
//! that header off the receive buffer, and a [`SegmentReceiver`] follows the data segment as
//! the caller puts it elsewhere, digesting it where it landed, and finally consumes and checks
//! the padding and data digest. The bounds are the framer's: the header digest is verified
//! and DataSegmentLength checked against MaxRecvDataSegmentLength before anything is trusted.

use bytes::{Buf, Bytes, BytesMut};

use super::{pad_len, wire_digest, FrameError, Framer, Layout, DIGEST_LEN};
use crate::pdu::{opcode, Bhs, DataIn, Pdu, BHS_LEN};

/// Bytes 5..8 of the BHS: DataSegmentLength (RFC 7143 section 11.2.1).
const DATA_SEGMENT_LENGTH: std::ops::Range<usize> = 5..8;

/// The header of a Data-In whose data segment is still (partly) to come.
#[derive(Clone, Debug)]
pub struct PartialDataIn {
    pdu: DataIn,
    header: [u8; BHS_LEN],
    head_len: usize,
    data_len: usize,
    data_digest: bool,
}

impl Framer {
    /// The Data-In at the front of `buf`, when its header is whole but the PDU is not.
    ///
    /// Consumes nothing. `Ok(None)` when the header is not all there, the PDU is already whole
    /// (use [`Framer::decode`]), it is not a Data-In, or its header would not parse (then
    /// `decode` reports the problem once the PDU is whole). The errors are the fatal ones
    /// `decode` would return for the same bytes (header digest, oversized segment).
    pub fn peek_data_in(&self, buf: &[u8]) -> Result<Option<PartialDataIn>, FrameError> {
        if buf.first().map(|b| b & 0x3f) != Some(opcode::DATA_IN) {
            return Ok(None);
        }
        let Layout::Known {
            header,
            head_len,
            data_len,
            total,
        } = self.layout(buf)?
        else {
            return Ok(None);
        };
        if buf.len() >= total {
            return Ok(None);
        }
        // Parse the header as if the segment were empty; the data goes elsewhere.
        let mut empty = header;
        empty[DATA_SEGMENT_LENGTH].fill(0);
        let ahs_len = Bhs::from_array(&header).total_ahs_len();
        let ahs = buf.get(BHS_LEN..BHS_LEN + ahs_len).unwrap_or_default();
        let Ok(Pdu::DataIn(pdu)) = Pdu::parse(&empty, ahs, Bytes::new()) else {
            return Ok(None);
        };
        Ok(Some(PartialDataIn {
            pdu,
            header,
            head_len,
            data_len,
            data_digest: self.digests.data && data_len > 0,
        }))
    }
}

impl PartialDataIn {
    /// The header, parsed (its `data` is empty).
    pub fn pdu(&self) -> &DataIn {
        &self.pdu
    }

    /// DataSegmentLength: at most the framer's MaxRecvDataSegmentLength.
    pub fn data_len(&self) -> usize {
        self.data_len
    }

    /// Data segment bytes already in the buffer the header was peeked from.
    pub fn data_in(&self, buf: &[u8]) -> usize {
        buf.len().saturating_sub(self.head_len).min(self.data_len)
    }

    /// Removes the header (BHS, AHS, header digest) from the front of `buf`, which must be the
    /// buffer it was peeked from. The data segment bytes that follow in `buf` are the caller's
    /// to move and report to the returned receiver first.
    pub fn start(self, buf: &mut BytesMut) -> (DataIn, SegmentReceiver) {
        buf.advance(self.head_len.min(buf.len()));
        let rx = SegmentReceiver {
            header: self.header,
            data_left: self.data_len,
            pad: pad_len(self.data_len),
            crc: self.data_digest.then(sluice_digest::Crc32c::new),
        };
        (self.pdu, rx)
    }
}

/// Follows one data segment received outside the receive buffer, then checks its trailer.
#[derive(Clone, Debug)]
pub struct SegmentReceiver {
    header: [u8; BHS_LEN],
    data_left: usize,
    pad: usize,
    crc: Option<sluice_digest::Crc32c>,
}

impl SegmentReceiver {
    /// Data segment bytes still to come.
    pub fn data_left(&self) -> usize {
        self.data_left
    }

    /// Takes note of the next data segment bytes, where they landed (they are digested there
    /// when a data digest is in force). Bytes past the segment are not taken; returns how
    /// many were.
    pub fn handle_data(&mut self, landed: &[u8]) -> usize {
        let n = landed.len().min(self.data_left);
        if let Some(crc) = &mut self.crc {
            crc.update(&landed[..n]);
        }
        self.data_left -= n;
        n
    }

    /// With the data segment all in and `buf` starting right after it: removes the padding and
    /// the data digest from `buf` and checks the digest. `Ok(false)`: more bytes are needed
    /// (nothing consumed). A digest mismatch is [`FrameError::DataDigest`] with the PDU
    /// consumed, as [`Framer::decode`] reports it.
    pub fn finish(&mut self, buf: &mut BytesMut) -> Result<bool, FrameError> {
        let digest_len = if self.crc.is_some() { DIGEST_LEN } else { 0 };
        let trailer = self.pad + digest_len;
        if self.data_left > 0 || buf.len() < trailer {
            return Ok(false);
        }
        let pad = &buf[..self.pad];
        let result = match &mut self.crc {
            Some(crc) => {
                // RFC 7143 section 11.2.3: the padding is covered by the data digest.
                crc.update(pad);
                let computed = sluice_digest::to_wire(crc.finish());
                let received = wire_digest(&buf[self.pad..trailer]);
                if received == computed {
                    Ok(true)
                } else {
                    let bhs = Bhs::from_array(&self.header);
                    Err(FrameError::DataDigest {
                        opcode: bhs.opcode(),
                        itt: bhs.itt(),
                        header: self.header,
                    })
                }
            }
            None => Ok(true),
        };
        buf.advance(trailer);
        result
    }
}

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
