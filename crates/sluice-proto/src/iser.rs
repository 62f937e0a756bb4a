//! iSER wire formats (RFC 7145): the iSER header every RDMA Send starts with, the iSER Hello
//! and HelloReply messages iWARP peers exchange, and the RDMA-CM private data InfiniBand and
//! RoCE peers put in their connection request and reply. Typed values, parse and emit; no
//! state and no I/O.
//!
//! Reserved bits and bytes are emitted as zero and ignored on receipt, as RFC 7143 treats
//! reserved fields, so a field the value does not model never fails a parse; everything the
//! value does model round-trips.

use std::fmt;

pub use cm::IserCmHeader;
pub use header::{BufferAdvertisement, Hello, HelloReply, IserHeader, IserMessage};
pub use initiator_mover::{InitiatorDatamover, InitiatorMoverStats, InitiatorOut, Regions};
pub use target_mover::{encode_send, MoverError, MoverStats, TargetDatamover, TargetOp};

mod cm;
mod header;
mod initiator_mover;
pub mod keys;
pub mod login;
#[cfg(test)]
mod mover_tests;
mod read_order;
#[cfg(test)]
mod read_order_tests;
mod target_mover;
#[cfg(test)]
mod tests;
mod tmf_scope;
pub mod unexpected;
pub mod unsolicited;

/// Bytes of the iSER header at the start of every RDMA Send (RFC 7145 section 9.2): one flags
/// byte, three reserved bytes, Write STag (4), Write Base Offset (8), Read STag (4), Read Base
/// Offset (8). RFC 5046's header was 12 bytes without the base offsets, which is why an
/// iWARP peer could not advertise a buffer's base address in it.
pub const ISER_HEADER_LEN: usize = 28;

/// Bytes of the iSER CM private data header (RFC 7145 section 9.1).
pub const ISER_CM_HEADER_LEN: usize = 4;

/// The iSER version RFC 7145 defines (its Hello and HelloReply carry 4-bit versions).
pub const ISER_VERSION: u8 = 10;

/// Why bytes are not an iSER header or CM private data.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum IserError {
    /// Fewer bytes than the fixed header.
    #[error("{len} bytes are shorter than the {need}-byte iSER header")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The opcode (high nibble of byte 0) names no iSER message.
    #[error("unknown iSER opcode {0:#x}")]
    UnknownOpcode(u8),
    /// A Hello whose minimum version exceeds its maximum, or a HelloReply whose current
    /// version exceeds its maximum.
    #[error("iSER version {low} above maximum {max}")]
    VersionRange {
        /// The lower version.
        low: u8,
        /// The maximum.
        max: u8,
    },
}

/// The opcode of an iSER message: the high nibble of its first byte (RFC 7145 section 9.2).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum IserOpcode {
    /// An iSCSI control-type PDU follows the header.
    Control = 0x1,
    /// iSER Hello (iWARP only).
    Hello = 0x2,
    /// iSER HelloReply (iWARP only).
    HelloReply = 0x3,
}

impl IserOpcode {
    fn from_nibble(nibble: u8) -> Result<Self, IserError> {
        match nibble {
            0x1 => Ok(Self::Control),
            0x2 => Ok(Self::Hello),
            0x3 => Ok(Self::HelloReply),
            other => Err(IserError::UnknownOpcode(other)),
        }
    }
}

impl fmt::Display for IserOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Control => "iSCSI control-type PDU",
            Self::Hello => "iSER Hello",
            Self::HelloReply => "iSER HelloReply",
        })
    }
}
