//! The iSER CM private data header: what InfiniBand and RoCE peers, which exchange no iSER
//! Hello, put at the start of the RDMA-CM connection request and reply private data.

use super::{IserError, ISER_CM_HEADER_LEN};

/// In a request: the initiator does not support zero-based virtual addressing, so the
/// target must not assume advertised base offsets are zero-based. In a reply: the target
/// will not use it.
const ZBVA_NOT_SUPPORTED: u8 = 0x80;
/// In a request: the initiator does not support Send with Invalidate, so the target must
/// not use it. In a reply: the target will not use it.
const SEND_WITH_INVALIDATE_NOT_SUPPORTED: u8 = 0x40;

/// The iSER CM private data header (RFC 7145 section 9.1): one flags byte and three
/// reserved bytes, at the start of the RDMA-CM REQ and REP private data. Linux's iser
/// initiator and isert target both send it; the flags say what the sender does *not*
/// support, so all-zero private data means "both supported".
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, Default)]
pub struct IserCmHeader {
    /// The sender does not support (request) or will not use (reply) zero-based virtual
    /// addressing.
    pub zbva_not_supported: bool,
    /// The sender does not support (request) or will not use (reply) Send with Invalidate.
    pub send_with_invalidate_not_supported: bool,
}

impl IserCmHeader {
    /// Parses the header at the front of a CM private data block; the bytes after it (the
    /// rest of the fixed-size private data) are returned untouched.
    pub fn parse(private_data: &[u8]) -> Result<(IserCmHeader, &[u8]), IserError> {
        let Some((h, rest)) = private_data.split_first_chunk::<ISER_CM_HEADER_LEN>() else {
            return Err(IserError::Truncated {
                len: private_data.len(),
                need: ISER_CM_HEADER_LEN,
            });
        };
        Ok((
            IserCmHeader {
                zbva_not_supported: h[0] & ZBVA_NOT_SUPPORTED != 0,
                send_with_invalidate_not_supported: h[0] & SEND_WITH_INVALIDATE_NOT_SUPPORTED != 0,
            },
            rest,
        ))
    }

    /// The 4-byte header.
    pub fn emit(&self) -> [u8; ISER_CM_HEADER_LEN] {
        let mut flags = 0;
        if self.zbva_not_supported {
            flags |= ZBVA_NOT_SUPPORTED;
        }
        if self.send_with_invalidate_not_supported {
            flags |= SEND_WITH_INVALIDATE_NOT_SUPPORTED;
        }
        [flags, 0, 0, 0]
    }

    /// What a target answers to `request` when it supports `own`: a feature is used only if
    /// both sides support it.
    pub fn reply_to(request: &IserCmHeader, own: &IserCmHeader) -> IserCmHeader {
        IserCmHeader {
            zbva_not_supported: request.zbva_not_supported || own.zbva_not_supported,
            send_with_invalidate_not_supported: request.send_with_invalidate_not_supported
                || own.send_with_invalidate_not_supported,
        }
    }
}
