//! The 28-byte iSER header and the Hello and HelloReply messages that share its first byte.

use super::{IserError, IserOpcode, ISER_HEADER_LEN};

/// Write Valid (RFC 7145 section 9.2): the Write STag and Write Base Offset advertise the
/// buffer the target RDMA-Reads Data-Out from.
const WSV: u8 = 0x08;
/// Read Valid: the Read STag and Read Base Offset advertise the buffer the target
/// RDMA-Writes Data-In into.
const RSV: u8 = 0x04;
/// HelloReply's reject bit (RFC 7145 section 9.3).
const REJECT: u8 = 0x01;

/// An advertised buffer: the STag of a registered region and the base offset (virtual
/// address, or offset when the region is zero-based) of the task's data in it.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct BufferAdvertisement {
    /// The region's STag.
    pub stag: u32,
    /// The address of the first byte of the task's buffer.
    pub base_offset: u64,
}

/// The iSER header of an iSCSI control-type PDU (RFC 7145 section 9.2).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, Default)]
pub struct IserHeader {
    /// With WSV set: the initiator's buffer holding the write data (the target RDMA-Reads
    /// it in place of Data-Out PDUs).
    pub write: Option<BufferAdvertisement>,
    /// With RSV set: the initiator's buffer for the read data (the target RDMA-Writes it in
    /// place of Data-In PDUs).
    pub read: Option<BufferAdvertisement>,
}

/// iSER Hello (RFC 7145 section 9.3), the initiator's first Send on an iWARP connection.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct Hello {
    /// Highest iSER version the initiator supports (4 bits).
    pub max_version: u8,
    /// Lowest iSER version the initiator supports (4 bits, at most `max_version`).
    pub min_version: u8,
    /// RDMA Read Requests the initiator serves at once (iSER-IRD).
    pub ird: u16,
}

/// iSER HelloReply (RFC 7145 section 9.3), the target's answer to a Hello.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct HelloReply {
    /// The target refused the connection (no common version).
    pub reject: bool,
    /// Highest iSER version the target supports (4 bits).
    pub max_version: u8,
    /// The version the connection uses (4 bits, at most `max_version`).
    pub current_version: u8,
    /// RDMA Read Requests the target keeps outstanding at once (iSER-ORD), at most the
    /// Hello's IRD.
    pub ord: u16,
}

impl Hello {
    /// The target's reply: the highest version both support, and an ORD no deeper than the
    /// initiator's IRD; a reject when the version ranges do not
    /// overlap.
    pub fn reply(&self, target_min: u8, target_max: u8, target_ord: u16) -> HelloReply {
        let current = self.max_version.min(target_max);
        let overlap = current >= self.min_version.max(target_min);
        HelloReply {
            reject: !overlap,
            max_version: target_max & 0x0f,
            current_version: if overlap { current & 0x0f } else { 0 },
            ord: target_ord.min(self.ird),
        }
    }
}

/// One iSER message: the header's opcode decides which.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum IserMessage {
    /// An iSCSI control-type PDU follows this header.
    Control(IserHeader),
    /// iSER Hello.
    Hello(Hello),
    /// iSER HelloReply.
    HelloReply(HelloReply),
}

impl IserMessage {
    /// The message's opcode.
    pub fn opcode(&self) -> IserOpcode {
        match self {
            Self::Control(_) => IserOpcode::Control,
            Self::Hello(_) => IserOpcode::Hello,
            Self::HelloReply(_) => IserOpcode::HelloReply,
        }
    }

    /// Parses the 28-byte header at the front of a Send's payload and returns it with the
    /// bytes after it (the iSCSI PDU of a control-type message).
    pub fn parse(bytes: &[u8]) -> Result<(IserMessage, &[u8]), IserError> {
        let Some((h, rest)) = bytes.split_first_chunk::<ISER_HEADER_LEN>() else {
            return Err(IserError::Truncated {
                len: bytes.len(),
                need: ISER_HEADER_LEN,
            });
        };
        let flags = h[0];
        let message = match IserOpcode::from_nibble(flags >> 4)? {
            IserOpcode::Control => {
                let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
                let be64 = |at: usize| (u64::from(be32(at)) << 32) | u64::from(be32(at + 4));
                let advert = |valid: bool, at: usize| {
                    valid.then(|| BufferAdvertisement {
                        stag: be32(at),
                        base_offset: be64(at + 4),
                    })
                };
                IserMessage::Control(IserHeader {
                    write: advert(flags & WSV != 0, 4),
                    read: advert(flags & RSV != 0, 16),
                })
            }
            IserOpcode::Hello => {
                let (max_version, min_version) = (h[1] >> 4, h[1] & 0x0f);
                if min_version > max_version {
                    return Err(IserError::VersionRange {
                        low: min_version,
                        max: max_version,
                    });
                }
                IserMessage::Hello(Hello {
                    max_version,
                    min_version,
                    ird: u16::from_be_bytes([h[2], h[3]]),
                })
            }
            IserOpcode::HelloReply => {
                let (max_version, current_version) = (h[1] >> 4, h[1] & 0x0f);
                if current_version > max_version {
                    return Err(IserError::VersionRange {
                        low: current_version,
                        max: max_version,
                    });
                }
                IserMessage::HelloReply(HelloReply {
                    reject: flags & REJECT != 0,
                    max_version,
                    current_version,
                    ord: u16::from_be_bytes([h[2], h[3]]),
                })
            }
        };
        Ok((message, rest))
    }

    /// The 28-byte header. Versions are emitted as their low 4 bits.
    pub fn emit(&self) -> [u8; ISER_HEADER_LEN] {
        let mut h = [0u8; ISER_HEADER_LEN];
        let opcode = (self.opcode() as u8) << 4;
        match self {
            IserMessage::Control(header) => {
                h[0] = opcode;
                if let Some(w) = header.write {
                    h[0] |= WSV;
                    h[4..8].copy_from_slice(&w.stag.to_be_bytes());
                    h[8..16].copy_from_slice(&w.base_offset.to_be_bytes());
                }
                if let Some(r) = header.read {
                    h[0] |= RSV;
                    h[16..20].copy_from_slice(&r.stag.to_be_bytes());
                    h[20..28].copy_from_slice(&r.base_offset.to_be_bytes());
                }
            }
            IserMessage::Hello(hello) => {
                h[0] = opcode;
                h[1] = ((hello.max_version & 0x0f) << 4) | (hello.min_version & 0x0f);
                h[2..4].copy_from_slice(&hello.ird.to_be_bytes());
            }
            IserMessage::HelloReply(reply) => {
                h[0] = opcode | if reply.reject { REJECT } else { 0 };
                h[1] = ((reply.max_version & 0x0f) << 4) | (reply.current_version & 0x0f);
                h[2..4].copy_from_slice(&reply.ord.to_be_bytes());
            }
        }
        h
    }
}
