//! The software provider's wire protocol: how two endpoints frame their messages on a
//! reliable, ordered byte stream. The crate docs describe the layout; this module is its one
//! encoder and its one (bounded) decoder.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::access::STag;

/// Bytes of every frame's header: opcode, three reserved bytes, body length.
pub const FRAME_HEADER_LEN: usize = 8;

/// The version a Connect carries; a peer with another version is refused.
pub const WIRE_VERSION: u8 = 1;

/// The largest payload any endpoint accepts (Send, RDMA Write, RDMA Read Response, and the
/// length an RDMA Read Request may ask for). 16 MiB covers iSER's largest transfers in one
/// message; the decoder refuses a longer body before buffering a byte of it.
pub const MAX_PAYLOAD_BYTES: u32 = 16 << 20;

/// The largest fixed part of any message (RDMA Write: MSN, STag, VA).
const MAX_FIXED_LEN: usize = 16;

mod opcode {
    pub const CONNECT: u8 = 0x01;
    pub const SEND: u8 = 0x02;
    pub const SEND_INVALIDATE: u8 = 0x03;
    pub const WRITE: u8 = 0x04;
    pub const READ_REQUEST: u8 = 0x05;
    pub const READ_RESPONSE: u8 = 0x06;
    pub const ACK: u8 = 0x07;
    pub const TERMINATE: u8 = 0x08;
}

/// Why the sender of a Terminate stopped the connection (RFC 5040 section 7 reports such
/// errors in its Terminate message; these are the causes this provider distinguishes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TerminateCause {
    /// An RDMA Write, RDMA Read or Send with Invalidate named an STag, address range or right
    /// the receiver does not grant.
    RemoteAccess = 1,
    /// A Send arrived with no receive posted.
    ReceiverNotReady = 2,
    /// A Send carried more bytes than the receive buffer holds.
    Length = 3,
    /// A request the receiver may not serve (too many outstanding RDMA Reads, a read longer
    /// than the receiver allows).
    InvalidRequest = 4,
    /// The receiver failed locally while serving the request.
    RemoteOperation = 5,
    /// Undecodable or out-of-sequence traffic.
    Protocol = 6,
}

impl TerminateCause {
    fn from_u8(raw: u8) -> Option<Self> {
        Some(match raw {
            1 => Self::RemoteAccess,
            2 => Self::ReceiverNotReady,
            3 => Self::Length,
            4 => Self::InvalidRequest,
            5 => Self::RemoteOperation,
            6 => Self::Protocol,
            _ => return None,
        })
    }
}

/// One message between two software endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The first message each side sends: its wire version, how many RDMA Reads it serves at
    /// once (IRD) and the largest payload it accepts.
    Connect {
        /// [`WIRE_VERSION`].
        version: u8,
        /// Inbound RDMA Read depth.
        ird: u16,
        /// Largest payload accepted, at most [`MAX_PAYLOAD_BYTES`].
        max_payload: u32,
    },
    /// A Send, optionally with Invalidate of one of the receiver's STags.
    Send {
        /// Message sequence number of the request.
        msn: u32,
        /// The STag the receiver invalidates on delivery.
        invalidate: Option<STag>,
        /// The message.
        payload: Bytes,
    },
    /// An RDMA Write of `payload` at `va` in the receiver's region `stag`.
    Write {
        /// Message sequence number.
        msn: u32,
        /// The receiver's region.
        stag: STag,
        /// Address of the first byte.
        va: u64,
        /// The data.
        payload: Bytes,
    },
    /// An RDMA Read Request for `len` bytes at `va` of the receiver's region `stag`.
    ReadRequest {
        /// Message sequence number.
        msn: u32,
        /// The receiver's region.
        stag: STag,
        /// Address of the first byte.
        va: u64,
        /// Bytes, at most the receiver's `max_payload`.
        len: u32,
    },
    /// The data of the RDMA Read Request with this MSN.
    ReadResponse {
        /// The request's MSN.
        msn: u32,
        /// The data.
        payload: Bytes,
    },
    /// Every Send and RDMA Write up to this MSN was placed.
    Ack {
        /// The last MSN acknowledged.
        msn: u32,
    },
    /// The sender moved its queue pair to the error state.
    Terminate {
        /// The request that caused it, if one did.
        msn: Option<u32>,
        /// Why.
        cause: TerminateCause,
    },
}

/// Why the decoder refused a frame. Each one ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The opcode byte names no message.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// Reserved bytes were not zero.
    #[error("reserved header bytes are not zero")]
    Reserved,
    /// The body is shorter than the message's fixed part, or longer than a fixed-size
    /// message allows.
    #[error("body of {len} bytes does not fit opcode {opcode:#04x}")]
    BadLength {
        /// The opcode.
        opcode: u8,
        /// The claimed body length.
        len: u32,
    },
    /// A payload or read length above the negotiated limit.
    #[error("payload of {len} bytes exceeds the limit of {limit}")]
    TooLong {
        /// Claimed bytes.
        len: u32,
        /// The limit.
        limit: u32,
    },
    /// A Terminate's cause code is unknown.
    #[error("unknown terminate cause {0}")]
    UnknownCause(u8),
}

impl Message {
    fn fixed_len(opcode: u8) -> Option<(usize, bool)> {
        // (fixed part, whether a payload follows)
        Some(match opcode {
            opcode::CONNECT => (8, false),
            opcode::SEND => (4, true),
            opcode::SEND_INVALIDATE => (8, true),
            opcode::WRITE => (16, true),
            opcode::READ_REQUEST => (20, false),
            opcode::READ_RESPONSE => (4, true),
            opcode::ACK => (4, false),
            opcode::TERMINATE => (8, false),
            _ => return None,
        })
    }

    /// The payload a frame carries after its fixed part (empty for control messages).
    pub fn payload(&self) -> &[u8] {
        match self {
            Message::Send { payload, .. }
            | Message::Write { payload, .. }
            | Message::ReadResponse { payload, .. } => payload,
            _ => &[],
        }
    }

    /// Appends the frame header and fixed part; the caller sends [`payload`](Self::payload)
    /// right after it (kept apart so a large payload is never copied to frame it).
    pub fn encode_head(&self, out: &mut BytesMut) {
        let (op, fixed) = match self {
            Message::Connect { .. } => (opcode::CONNECT, 8),
            Message::Send {
                invalidate: None, ..
            } => (opcode::SEND, 4),
            Message::Send {
                invalidate: Some(_),
                ..
            } => (opcode::SEND_INVALIDATE, 8),
            Message::Write { .. } => (opcode::WRITE, 16),
            Message::ReadRequest { .. } => (opcode::READ_REQUEST, 20),
            Message::ReadResponse { .. } => (opcode::READ_RESPONSE, 4),
            Message::Ack { .. } => (opcode::ACK, 4),
            Message::Terminate { .. } => (opcode::TERMINATE, 8),
        };
        // Payloads are bounded by MAX_PAYLOAD_BYTES at every post, so the sum fits a u32.
        let body = fixed + self.payload().len();
        out.reserve(FRAME_HEADER_LEN + fixed);
        out.put_u8(op);
        out.put_bytes(0, 3);
        out.put_u32(u32::try_from(body).unwrap_or(u32::MAX));
        match self {
            Message::Connect {
                version,
                ird,
                max_payload,
            } => {
                out.put_u8(*version);
                out.put_u8(0);
                out.put_u16(*ird);
                out.put_u32(*max_payload);
            }
            Message::Send {
                msn, invalidate, ..
            } => {
                out.put_u32(*msn);
                if let Some(stag) = invalidate {
                    out.put_u32(stag.0);
                }
            }
            Message::Write { msn, stag, va, .. } => {
                out.put_u32(*msn);
                out.put_u32(stag.0);
                out.put_u64(*va);
            }
            Message::ReadRequest { msn, stag, va, len } => {
                out.put_u32(*msn);
                out.put_u32(stag.0);
                out.put_u64(*va);
                out.put_u32(*len);
            }
            Message::ReadResponse { msn, .. } | Message::Ack { msn } => out.put_u32(*msn),
            Message::Terminate { msn, cause } => {
                out.put_u32(msn.unwrap_or(0));
                out.put_u8(u8::from(msn.is_some()));
                out.put_u8(*cause as u8);
                out.put_u16(0);
            }
        }
    }

    /// The whole frame in one buffer (tests, fuzzing, fault injection).
    pub fn encode(&self) -> BytesMut {
        let mut out = BytesMut::new();
        self.encode_head(&mut out);
        out.extend_from_slice(self.payload());
        out
    }
}

/// The incremental decoder: whole messages from any split of the byte stream, every length
/// bounded before it is trusted.
#[derive(Clone, Debug)]
pub struct Decoder {
    max_payload: u32,
}

impl Decoder {
    /// A decoder that refuses payloads (and read lengths) above `max_payload`, itself capped
    /// at [`MAX_PAYLOAD_BYTES`].
    pub fn new(max_payload: u32) -> Self {
        Decoder {
            max_payload: max_payload.min(MAX_PAYLOAD_BYTES),
        }
    }

    /// Takes one whole message off the front of `buf`, or returns `Ok(None)` when more bytes
    /// are needed. A header is judged as soon as it arrives: a body longer than the limit is
    /// refused before any of it is buffered.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<Message>, WireError> {
        let Some(frame) = self.judge(buf)? else {
            return Ok(None);
        };
        let body = frame.fixed + frame.payload_len as usize;
        if buf.len() < FRAME_HEADER_LEN + body {
            buf.reserve(FRAME_HEADER_LEN + body - buf.len());
            return Ok(None);
        }
        let frame = Self::take_fixed(buf, frame);
        let payload = buf.split_to(frame.payload_len as usize).freeze();
        self.finish(frame, payload).map(Some)
    }

    /// Takes the header and fixed part of the next frame off `buf` when its payload is at
    /// least `min_payload` bytes and not all of it is in `buf` yet, so that the caller can
    /// read the payload into a buffer of its own (straight from the stream: no growing of
    /// `buf`, no copy) and give it to [`finish`](Self::finish). `Ok(None)` (and `buf`
    /// untouched) otherwise: [`decode`](Self::decode) takes it.
    pub fn take_large_head(
        &self,
        buf: &mut BytesMut,
        min_payload: u32,
    ) -> Result<Option<PendingFrame>, WireError> {
        let Some(frame) = self.judge(buf)? else {
            return Ok(None);
        };
        let whole = FRAME_HEADER_LEN + frame.fixed + frame.payload_len as usize;
        if frame.payload_len < min_payload
            || buf.len() < FRAME_HEADER_LEN + frame.fixed
            || buf.len() >= whole
        {
            return Ok(None);
        }
        Ok(Some(Self::take_fixed(buf, frame)))
    }

    /// Whether the next frame in `buf` has a payload of at least `min_payload` bytes and has
    /// not all arrived (its header judged valid): a caller reading such payloads apart waits
    /// for the fixed part without [`decode`](Self::decode) growing `buf` for the payload.
    pub fn awaits_large(&self, buf: &[u8], min_payload: u32) -> bool {
        match self.judge(buf) {
            Ok(Some(frame)) => {
                frame.payload_len >= min_payload
                    && buf.len() < FRAME_HEADER_LEN + frame.fixed + frame.payload_len as usize
            }
            _ => false,
        }
    }

    /// The message of a frame whose header [`take_large_head`](Self::take_large_head) took,
    /// with its payload (exactly [`PendingFrame::payload_len`] bytes).
    pub fn finish(&self, frame: PendingFrame, payload: Bytes) -> Result<Message, WireError> {
        if payload.len() != frame.payload_len as usize {
            return Err(WireError::BadLength {
                opcode: frame.op,
                len: (frame.fixed + payload.len()) as u32,
            });
        }
        let op = frame.op;
        let mut h = &frame.head[..frame.fixed];
        let msg = match op {
            opcode::CONNECT => {
                let version = h.get_u8();
                if h.get_u8() != 0 {
                    return Err(WireError::Reserved);
                }
                let ird = h.get_u16();
                let max_payload = h.get_u32();
                Message::Connect {
                    version,
                    ird,
                    max_payload,
                }
            }
            opcode::SEND => Message::Send {
                msn: h.get_u32(),
                invalidate: None,
                payload,
            },
            opcode::SEND_INVALIDATE => Message::Send {
                msn: h.get_u32(),
                invalidate: Some(STag(h.get_u32())),
                payload,
            },
            opcode::WRITE => Message::Write {
                msn: h.get_u32(),
                stag: STag(h.get_u32()),
                va: h.get_u64(),
                payload,
            },
            opcode::READ_REQUEST => {
                let (msn, stag, va, len) =
                    (h.get_u32(), STag(h.get_u32()), h.get_u64(), h.get_u32());
                if len > self.max_payload {
                    return Err(WireError::TooLong {
                        len,
                        limit: self.max_payload,
                    });
                }
                Message::ReadRequest { msn, stag, va, len }
            }
            opcode::READ_RESPONSE => Message::ReadResponse {
                msn: h.get_u32(),
                payload,
            },
            opcode::ACK => Message::Ack { msn: h.get_u32() },
            _ => {
                // TERMINATE: the only opcode left after `fixed_len`.
                let msn = h.get_u32();
                let has_msn = h.get_u8();
                let raw_cause = h.get_u8();
                if has_msn > 1 || h.get_u16() != 0 {
                    return Err(WireError::Reserved);
                }
                let cause =
                    TerminateCause::from_u8(raw_cause).ok_or(WireError::UnknownCause(raw_cause))?;
                if has_msn == 0 && msn != 0 {
                    return Err(WireError::Reserved);
                }
                Message::Terminate {
                    msn: (has_msn == 1).then_some(msn),
                    cause,
                }
            }
        };
        Ok(msg)
    }

    /// The next frame's header, judged: opcode, reserved bytes, lengths against the limit.
    /// `Ok(None)` until the eight header bytes are in.
    fn judge(&self, buf: &[u8]) -> Result<Option<PendingFrame>, WireError> {
        let Some(header) = buf.first_chunk::<FRAME_HEADER_LEN>() else {
            return Ok(None);
        };
        let op = header[0];
        if header[1..4] != [0, 0, 0] {
            return Err(WireError::Reserved);
        }
        let body_len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let (fixed, has_payload) = Message::fixed_len(op).ok_or(WireError::UnknownOpcode(op))?;
        let body = body_len as usize;
        if body < fixed || (!has_payload && body != fixed) {
            return Err(WireError::BadLength {
                opcode: op,
                len: body_len,
            });
        }
        let payload_len = body_len - fixed as u32;
        if payload_len > self.max_payload {
            return Err(WireError::TooLong {
                len: payload_len,
                limit: self.max_payload,
            });
        }
        Ok(Some(PendingFrame {
            op,
            head: [0; MAX_FIXED_LEN + 4],
            fixed,
            payload_len,
        }))
    }

    /// Consumes a judged frame's header and fixed part (all in `buf`) into `frame`.
    fn take_fixed(buf: &mut BytesMut, mut frame: PendingFrame) -> PendingFrame {
        buf.advance(FRAME_HEADER_LEN);
        frame.head[..frame.fixed].copy_from_slice(&buf[..frame.fixed]);
        buf.advance(frame.fixed);
        frame
    }
}

/// A frame whose header and fixed part were taken off the stream, its payload still to come
/// ([`Decoder::take_large_head`]).
#[derive(Clone, Debug)]
pub struct PendingFrame {
    op: u8,
    head: [u8; MAX_FIXED_LEN + 4],
    fixed: usize,
    payload_len: u32,
}

impl PendingFrame {
    /// The payload's length: bounded by the decoder's limit before this was returned.
    pub fn payload_len(&self) -> u32 {
        self.payload_len
    }

    /// For an RDMA Write, its MSN, STag and tagged offset: where its payload goes, known
    /// before the payload is read.
    pub fn tagged_write(&self) -> Option<(u32, STag, u64)> {
        if self.op != opcode::WRITE {
            return None;
        }
        let mut h = &self.head[..self.fixed];
        Some((h.get_u32(), STag(h.get_u32()), h.get_u64()))
    }
}

#[cfg(test)]
mod tests;
