//! Incremental framing of the iSCSI byte stream (RFC 7143 sections 11.1-11.2).
//!
//! A PDU on the wire is: BHS (48 bytes), AHS (TotalAHSLength words), header digest (4 bytes, if
//! negotiated), data segment (DataSegmentLength bytes), padding to a multiple of 4, data digest
//! (4 bytes, if negotiated and the data segment is not empty).
//!
//! [`Framer::decode`] cuts whole PDUs off the front of a receive buffer, however the bytes were
//! split by the transport. Memory stays bounded: the length fields are checked as soon as the
//! header is in, before any data is waited for, so at most [`max_frame_len`] bytes ever need to
//! be buffered. Nothing here panics on any input.
//!
//! A large Data-In payload can also be received in place, outside the receive buffer:
//! [`Framer::peek_data_in`] and [`SegmentReceiver`] (module `split`).
//!
//! [`encode`] and [`encode_parts`] build the same layout for sending.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::params::SessionParams;
use crate::pdu::codes::RejectReason;
use crate::pdu::{opcode, Bhs, ParseError, Pdu, BHS_LEN, MAX_DATA_SEGMENT_LEN};
use crate::seq::Itt;
use crate::text::Role;

mod split;
pub use split::{PartialDataIn, SegmentReceiver};

/// MaxRecvDataSegmentLength in force during login.
///
/// RFC 7143 section 13.12 gives MaxRecvDataSegmentLength a default of 8192 bytes, and the
/// declared value only takes effect once login completes, so every Login and Text PDU exchanged
/// during login must fit in 8192 bytes. Accepting more would let a peer that has not yet
/// authenticated make us buffer more; a peer that sends more is broken.
pub const LOGIN_MAX_DATA_SEGMENT: u32 = 8192;

/// Largest AHS the 8-bit TotalAHSLength field can announce: 255 words. This is the bound on
/// header memory, so no separate setting is needed.
pub const MAX_AHS_LEN: usize = 255 * 4;

/// Length of a header or data digest (CRC32C, RFC 7143 sections 11.2.3 and 13.1).
pub const DIGEST_LEN: usize = 4;

/// Which digests are in force on the connection (HeaderDigest / DataDigest keys = CRC32C).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub struct Digests {
    /// A CRC32C header digest follows the AHS.
    pub header: bool,
    /// A CRC32C data digest follows the padded data segment, when there is one.
    pub data: bool,
}

impl Digests {
    /// No digests: the state during login.
    pub const NONE: Digests = Digests {
        header: false,
        data: false,
    };
    /// Both digests.
    pub const BOTH: Digests = Digests {
        header: true,
        data: true,
    };

    /// The digests a login negotiated, in force from the full feature phase on (RFC 7143
    /// section 13.1).
    #[must_use]
    pub const fn negotiated(params: &SessionParams) -> Digests {
        Digests {
            header: params.header_digest,
            data: params.data_digest,
        }
    }
}

/// Why the framer could not produce a PDU.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The header digest does not match: the header, and with it every length field, cannot be
    /// trusted. Fatal: the receive buffer is left untouched and the connection must be closed
    /// (RFC 7143 section 7.8 allows discarding up to a later PDU only with sync and steering,
    /// which this implementation does not have).
    #[error("header digest mismatch (received {received:#010x}, computed {computed:#010x})")]
    HeaderDigest {
        /// Digest carried on the wire.
        received: u32,
        /// Digest computed over BHS and AHS.
        computed: u32,
    },
    /// The header digest did not match, and the framer skipped to the next header that
    /// verifies (header resynchronisation, see [`Framer::set_header_resync`]). Nothing of the
    /// skipped bytes can be believed; the stream goes on.
    #[error("header digest mismatch; {skipped} bytes skipped")]
    HeaderDigestSkipped {
        /// Bytes discarded.
        skipped: usize,
    },
    /// The data digest does not match. The PDU has been consumed, so the stream can continue;
    /// RFC 7143 section 7.8 says the target discards the PDU and answers with a Reject (reason
    /// 0x02) carrying `header`.
    #[error("data digest mismatch on opcode {opcode:#04x}, ITT {itt:?}")]
    DataDigest {
        /// Opcode of the damaged PDU.
        opcode: u8,
        /// ITT of the damaged PDU.
        itt: Itt,
        /// Its complete BHS (verified by the header digest when that is in force).
        header: [u8; BHS_LEN],
    },
    /// DataSegmentLength exceeds the MaxRecvDataSegmentLength we declared. Fatal: the buffer
    /// is left untouched and no data was waited for.
    #[error("data segment of {len} bytes exceeds MaxRecvDataSegmentLength {max}")]
    SegmentTooLong {
        /// Announced DataSegmentLength.
        len: u32,
        /// Limit in force.
        max: u32,
    },
    /// The opcode is unknown. The PDU has been consumed; a target answers with a Reject
    /// (reason 0x05, "Command not supported") carrying `header`.
    #[error("unknown opcode {opcode:#04x}")]
    UnknownOpcode {
        /// The opcode found.
        opcode: u8,
        /// The complete BHS.
        header: [u8; BHS_LEN],
    },
    /// The framing is sound but the PDU is not (for example a malformed AHS). The PDU has been
    /// consumed; a target answers with a Reject (reason 0x04, "Protocol Error").
    #[error("malformed PDU: {error}")]
    Malformed {
        /// What is wrong.
        error: ParseError,
        /// The complete BHS.
        header: [u8; BHS_LEN],
    },
}

impl FrameError {
    /// Whether the byte stream is still in sync, so decoding can go on with the next PDU.
    /// `false` means the transport connection must be closed.
    pub fn can_continue(&self) -> bool {
        match self {
            FrameError::HeaderDigest { .. } | FrameError::SegmentTooLong { .. } => false,
            FrameError::DataDigest { .. }
            | FrameError::HeaderDigestSkipped { .. }
            | FrameError::UnknownOpcode { .. }
            | FrameError::Malformed { .. } => true,
        }
    }

    /// The Reject reason (RFC 7143 section 11.17.1) and the header to put in the Reject's data
    /// segment, for the errors a target answers with a Reject.
    pub fn reject(&self) -> Option<(RejectReason, &[u8; BHS_LEN])> {
        match self {
            FrameError::DataDigest { header, .. } => Some((RejectReason::DataDigestError, header)),
            FrameError::UnknownOpcode { header, .. } => {
                Some((RejectReason::CommandNotSupported, header))
            }
            FrameError::Malformed { error, header } => Some((error.reject_reason(), header)),
            FrameError::HeaderDigest { .. }
            | FrameError::HeaderDigestSkipped { .. }
            | FrameError::SegmentTooLong { .. } => None,
        }
    }
}

/// The largest frame a [`Framer`] with this limit and these digests can ask to buffer.
pub fn max_frame_len(max_data_segment: u32, digests: Digests) -> usize {
    let max = max_data_segment.min(MAX_DATA_SEGMENT_LEN) as usize;
    BHS_LEN + MAX_AHS_LEN + 2 * DIGEST_LEN + max + pad_len(max)
        - usize::from(!digests.header) * DIGEST_LEN
        - usize::from(!digests.data) * DIGEST_LEN
}

/// Cuts whole PDUs from a receive buffer.
#[derive(Clone, Debug)]
pub struct Framer {
    digests: Digests,
    max_data_segment: u32,
    /// Skip a PDU whose header digest fails instead of giving up on the stream: our role,
    /// when on (a header found by resynchronisation must carry one of the peer's opcodes).
    resync: Option<Role>,
    /// While resynchronising: the next offset in the buffer to try as the start of a header
    /// (every offset before it was tried and failed).
    scan_from: usize,
}

/// Where the PDU at the front of the buffer ends, as far as the header tells.
enum Layout {
    /// Not enough bytes to know; this many more are needed at least.
    Need(usize),
    /// A header that failed its digest, with resynchronisation on: the next PDU has to be
    /// found ([`Framer::resync`]).
    Damaged,
    /// Header (verified, if digested) in; the whole PDU is `total` bytes.
    Known {
        header: [u8; BHS_LEN],
        head_len: usize,
        data_len: usize,
        total: usize,
    },
}

impl Framer {
    /// A framer refusing data segments above `max_data_segment` bytes, without digests. Use
    /// [`LOGIN_MAX_DATA_SEGMENT`] until login completes.
    pub fn new(max_data_segment: u32) -> Self {
        Self {
            digests: Digests::NONE,
            max_data_segment: max_data_segment.min(MAX_DATA_SEGMENT_LEN),
            resync: None,
            scan_from: RESYNC_FIRST,
        }
    }

    /// Whether a PDU whose header digest fails is skipped rather than ending the stream (for
    /// ErrorRecoveryLevel 1 and above, where sequence numbers and timeouts recover what the
    /// PDU carried).
    ///
    /// RFC 7143 section 7.8: the receiver "MUST either discard the header and all data up to
    /// the beginning of a later PDU or close the connection. Because the digest error
    /// indicates that the length field of the header may have been corrupted, the location of
    /// the beginning of a later PDU needs to be reliably ascertained by other means". Here the
    /// other means is the next header's own digest: every 4-byte-aligned offset after the
    /// damaged header (PDUs are padded to 4 bytes, section 11.2), up to the largest PDU the
    /// stream may carry, is tried in order, and the stream goes on from the first offset where
    /// a whole header verifies (a wrong offset passes a CRC32C with probability 2^-32). The
    /// damaged header's own length fields are not trusted: a flipped bit in
    /// DataSegmentLength would otherwise lose the stream. If no header verifies within that
    /// distance the error is fatal as before. The offset the damaged header's own length
    /// fields point to is tried first: it is right unless the damage hit them.
    ///
    /// `ours` is the role of the end receiving (`None` turns resynchronisation off): a header
    /// found must carry an opcode of the other role (section 11.2.1.2). Besides halving the
    /// chance of a false find, this passes over the one place where a well-formed header of
    /// our own is sure to sit inside a PDU: a Reject's data segment is the rejected PDU's BHS,
    /// and its data digest is then exactly that header's digest.
    pub fn set_header_resync(&mut self, ours: Option<Role>) {
        self.resync = ours;
    }

    /// Switches digests on or off from the next PDU on (after the login that negotiated them).
    pub fn set_digests(&mut self, digests: Digests) {
        self.digests = digests;
    }

    /// The digests in force.
    pub fn digests(&self) -> Digests {
        self.digests
    }

    /// Sets the MaxRecvDataSegmentLength we declared (capped at the 24-bit field maximum).
    pub fn set_max_data_segment(&mut self, len: u32) {
        self.max_data_segment = len.min(MAX_DATA_SEGMENT_LEN);
    }

    /// The data segment limit in force.
    pub fn max_data_segment(&self) -> u32 {
        self.max_data_segment
    }

    /// Removes one whole PDU from the front of `buf` when it is complete; `Ok(None)` means more
    /// bytes are needed. After an error for which [`FrameError::can_continue`] is true the PDU
    /// has been removed; after a fatal one `buf` is untouched.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Pdu>, FrameError> {
        let (header, head_len, data_len, total) = match self.layout(buf)? {
            Layout::Need(_) => return Ok(None),
            Layout::Damaged => return self.resync(buf),
            Layout::Known {
                header,
                head_len,
                data_len,
                total,
            } => (header, head_len, data_len, total),
        };
        if buf.len() < total {
            return Ok(None);
        }
        let frame = buf.split_to(total).freeze();
        let padded_end = head_len + data_len + pad_len(data_len);
        if self.digests.data && data_len > 0 {
            // RFC 7143 section 13.1: padding bytes covered by a CRC "are included in the CRC".
            let computed = crc32c(&frame[head_len..padded_end]);
            if frame.get(padded_end..total) != Some(&computed[..]) {
                let bhs = Bhs::from_array(&header);
                return Err(FrameError::DataDigest {
                    opcode: bhs.opcode(),
                    itt: bhs.itt(),
                    header,
                });
            }
        }
        let ahs = frame.get(BHS_LEN..BHS_LEN + Bhs::from_array(&header).total_ahs_len());
        let data = frame.slice(head_len..head_len + data_len);
        match Pdu::parse(&header, ahs.unwrap_or_default(), data) {
            Ok(pdu) => Ok(Some(pdu)),
            Err(ParseError::UnknownOpcode(opcode)) => {
                Err(FrameError::UnknownOpcode { opcode, header })
            }
            Err(error) => Err(FrameError::Malformed { error, header }),
        }
    }

    /// Bytes still needed before the PDU at the front of `buf` is complete: a hint for sizing
    /// the next read. 0 means [`Framer::decode`] will make progress (or fail) now.
    pub fn bytes_needed(&self, buf: &BytesMut) -> usize {
        match self.layout(buf) {
            Ok(Layout::Need(n)) => n,
            Ok(Layout::Known { total, .. }) => total.saturating_sub(buf.len()),
            // The next candidate's whole header, at least.
            Ok(Layout::Damaged) => (self.scan_from + BHS_LEN + DIGEST_LEN)
                .saturating_sub(buf.len())
                .max(1),
            Err(_) => 0,
        }
    }

    /// Reads and checks the header, without consuming anything.
    fn layout(&self, buf: &[u8]) -> Result<Layout, FrameError> {
        let Some(bhs) = buf.get(..BHS_LEN) else {
            return Ok(Layout::Need(BHS_LEN - buf.len()));
        };
        let mut header = [0u8; BHS_LEN];
        header.copy_from_slice(bhs);
        let h = Bhs::from_array(&header);
        // TotalAHSLength is 8 bits of words, so this is at most MAX_AHS_LEN bytes.
        let covered = BHS_LEN + h.total_ahs_len();
        let mut head_len = covered;
        if self.digests.header {
            // RFC 7143 section 11.2.3: the header digest covers the BHS and the AHS. Verify it
            // before believing any length field (at most MAX_AHS_LEN + 4 more bytes to wait).
            head_len += DIGEST_LEN;
            let (Some(head), Some(received)) = (buf.get(..covered), buf.get(covered..head_len))
            else {
                return Ok(Layout::Need(head_len - buf.len()));
            };
            let computed = crc32c(head);
            if received != computed {
                if self.resync.is_some() {
                    return Ok(Layout::Damaged);
                }
                return Err(FrameError::HeaderDigest {
                    received: u32::from_le_bytes(wire_digest(received)),
                    computed: u32::from_le_bytes(computed),
                });
            }
        }
        let len = h.data_segment_len();
        if len > self.max_data_segment {
            return Err(FrameError::SegmentTooLong {
                len,
                max: self.max_data_segment,
            });
        }
        // `len` is below 2^24 here, so none of the sums below can overflow.
        let data_len = len as usize;
        let digest = if self.digests.data && data_len > 0 {
            DIGEST_LEN
        } else {
            0
        };
        Ok(Layout::Known {
            header,
            head_len,
            data_len,
            total: head_len + data_len + pad_len(data_len) + digest,
        })
    }
}

/// The first offset where a PDU after a damaged one can start: after the damaged one's BHS and
/// header digest.
const RESYNC_FIRST: usize = BHS_LEN + DIGEST_LEN;

/// What a look for the next header at one offset found.
enum Candidate {
    /// A header whose digest verifies starts here.
    Verified,
    /// No header starts here.
    No,
    /// Not enough bytes yet to tell.
    Wait,
}

impl Framer {
    /// After a header digest error: skips to the first later offset where a header verifies
    /// (see [`Framer::set_header_resync`]), waits for more bytes, or gives up.
    fn resync(&mut self, buf: &mut BytesMut) -> Result<Option<Pdu>, FrameError> {
        let limit = max_frame_len(self.max_data_segment, self.digests);
        let declared = self.declared_end(buf).filter(|end| *end <= limit);
        if let Some(end) = declared {
            if let Candidate::Verified = self.candidate(buf.get(end..).unwrap_or_default()) {
                return Err(self.skip(buf, end));
            }
        }
        while self.scan_from <= limit {
            match self.candidate(buf.get(self.scan_from..).unwrap_or_default()) {
                Candidate::Verified => return Err(self.skip(buf, self.scan_from)),
                Candidate::No => self.scan_from += 4,
                Candidate::Wait => return Ok(None),
            }
        }
        self.scan_from = RESYNC_FIRST;
        let (received, computed) = header_digests(buf);
        Err(FrameError::HeaderDigest { received, computed })
    }

    /// Drops the `skipped` bytes before the header resynchronisation found.
    fn skip(&mut self, buf: &mut BytesMut, skipped: usize) -> FrameError {
        buf.advance(skipped);
        self.scan_from = RESYNC_FIRST;
        FrameError::HeaderDigestSkipped { skipped }
    }

    /// Where the damaged PDU at the front of `buf` ends if its length fields are right.
    fn declared_end(&self, buf: &[u8]) -> Option<usize> {
        let h = Bhs::from_array(buf.first_chunk::<BHS_LEN>()?);
        let len = h.data_segment_len();
        if len > self.max_data_segment {
            return None;
        }
        let data_len = len as usize;
        let data_digest = if self.digests.data && data_len > 0 {
            DIGEST_LEN
        } else {
            0
        };
        Some(BHS_LEN + h.total_ahs_len() + DIGEST_LEN + data_len + pad_len(data_len) + data_digest)
    }

    /// Whether `bytes` starts with a header (BHS, AHS, header digest) that verifies and whose
    /// data segment is within our limit.
    fn candidate(&self, bytes: &[u8]) -> Candidate {
        let Some(bhs) = bytes.first_chunk::<BHS_LEN>() else {
            return Candidate::Wait;
        };
        let h = Bhs::from_array(bhs);
        // Cheap tests first, so that data bytes that cannot be a header are passed over
        // without waiting for the bytes their "AHS" would need: bit 7 of byte 0 is reserved
        // (section 11.2.1.1), the opcode must be one RFC 7143 defines for the peer's role
        // (section 11.2.1.2: 0x00-0x1f initiator, 0x20-0x3f target), and only SCSI Command
        // PDUs carry AHS (sections 11.2.2 and 11.3.2).
        let from_peer = match self.resync {
            Some(Role::Initiator) => h.opcode() >= 0x20,
            Some(Role::Target) => h.opcode() < 0x20,
            None => false,
        };
        let plausible = bhs[0] & 0x80 == 0
            && from_peer
            && Pdu::is_known_opcode(h.opcode())
            && (h.total_ahs_len() == 0 || h.opcode() == opcode::SCSI_COMMAND);
        if !plausible {
            return Candidate::No;
        }
        let covered = BHS_LEN + h.total_ahs_len();
        let (Some(head), Some(received)) = (
            bytes.get(..covered),
            bytes.get(covered..covered + DIGEST_LEN),
        ) else {
            return Candidate::Wait;
        };
        if received == crc32c(head) && h.data_segment_len() <= self.max_data_segment {
            Candidate::Verified
        } else {
            Candidate::No
        }
    }
}

/// The received and computed header digests of the (damaged) header at the front of `buf`,
/// for the error report.
fn header_digests(buf: &[u8]) -> (u32, u32) {
    let Some(bhs) = buf.first_chunk::<BHS_LEN>() else {
        return (0, 0);
    };
    let covered = BHS_LEN + Bhs::from_array(bhs).total_ahs_len();
    match (buf.get(..covered), buf.get(covered..covered + DIGEST_LEN)) {
        (Some(head), Some(received)) => (
            u32::from_le_bytes(wire_digest(received)),
            u32::from_le_bytes(crc32c(head)),
        ),
        _ => (0, 0),
    }
}

/// The pad-and-data-digest trailer of an encoded PDU (at most 3 + 4 bytes).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct Trailer {
    bytes: [u8; 7],
    len: u8,
}

impl Trailer {
    /// The trailer bytes to send after the data.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(self.bytes.len())]
    }

    fn push(&mut self, bytes: &[u8]) {
        for b in bytes {
            if let Some(slot) = self.bytes.get_mut(usize::from(self.len)) {
                *slot = *b;
                self.len += 1;
            }
        }
    }
}

impl AsRef<[u8]> for Trailer {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Appends a whole PDU (BHS, AHS, header digest, data, pad, data digest) to `out`.
pub fn encode(pdu: &Pdu, digests: Digests, out: &mut BytesMut) {
    let (data, trailer) = encode_parts(pdu, digests, out);
    out.reserve(data.len() + trailer.as_bytes().len());
    out.put_slice(&data);
    out.put_slice(trailer.as_bytes());
}

/// For vectored, zero-copy sends: appends the header part (BHS, AHS, header digest) to `out`
/// and returns the data segment (shared, not copied) and the padding-plus-data-digest trailer.
/// Send `out`'s new bytes, then the data, then the trailer.
pub fn encode_parts(pdu: &Pdu, digests: Digests, out: &mut BytesMut) -> (Bytes, Trailer) {
    let start = out.len();
    pdu.emit_header(out);
    if digests.header {
        let digest = crc32c(out.get(start..).unwrap_or_default());
        out.put_slice(&digest);
    }
    let data = pdu.wire_data();
    let pad = &[0u8; 3][..pad_len(data.len())];
    let mut trailer = Trailer::default();
    // RFC 7143 section 11.1: padding bytes SHOULD be sent as 0.
    trailer.push(pad);
    if digests.data && !data.is_empty() {
        let mut crc = sluice_digest::Crc32c::new();
        crc.update(&data);
        crc.update(pad);
        trailer.push(&sluice_digest::to_wire(crc.finish()));
    }
    (data, trailer)
}

/// Encodes `pdus` as the chunks to write to a byte stream, in order: headers, short data
/// segments, padding and digests gathered in `out` (no copy per PDU of its own), data
/// segments of at least `own_chunk_min` bytes as the `Bytes` they already are (no copy at
/// all). Writing the chunks back to back gives what [`encode`] gives PDU after PDU.
pub fn encode_chunks(
    pdus: impl IntoIterator<Item = Pdu>,
    digests: Digests,
    own_chunk_min: usize,
    out: &mut BytesMut,
) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    for pdu in pdus {
        let (data, trailer) = encode_parts(&pdu, digests, out);
        if data.len() >= own_chunk_min {
            if !out.is_empty() {
                chunks.push(out.split().freeze());
            }
            chunks.push(data);
        } else {
            out.extend_from_slice(&data);
        }
        out.extend_from_slice(trailer.as_bytes());
    }
    if !out.is_empty() {
        chunks.push(out.split().freeze());
    }
    chunks
}

/// Bytes of padding after a data segment of `len` bytes (RFC 7143 section 11.1: the data
/// segment is padded to a whole number of 4-byte words).
pub fn pad_len(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// CRC32C of `bytes` in wire order (least significant byte first).
fn crc32c(bytes: &[u8]) -> [u8; 4] {
    sluice_digest::to_wire(sluice_digest::crc32c(bytes))
}

/// The four received digest bytes as an array (they are always four; zeros otherwise).
fn wire_digest(received: &[u8]) -> [u8; 4] {
    let mut out = [0u8; 4];
    for (slot, b) in out.iter_mut().zip(received) {
        *slot = *b;
    }
    out
}

#[cfg(test)]
mod tests;
