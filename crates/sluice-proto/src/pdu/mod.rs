//! PDUs of RFC 7143 section 11: typed values ([`types`]), the zero-copy header view ([`bhs`]),
//! parse ([`Pdu::parse`]) and emit ([`Pdu::emit_header`]), and the named field codes
//! ([`codes`]).

// Declared first: `codes` uses the macro, and `macro_rules!` macros are visible only after
// their module in source order.
#[macro_use]
mod enum_with_unknown;

#[cfg(any(test, feature = "proptest"))]
pub mod arbitrary;
pub mod bhs;
mod cdb;
pub mod codes;
mod emit;
mod parse;
#[cfg(test)]
mod tests;
pub mod types;

pub use bhs::{Bhs, BHS_LEN, MAX_DATA_SEGMENT_LEN};
pub use cdb::{Cdb, BHS_CDB_LEN};
pub use emit::MAX_CDB_LEN;
pub use parse::{ahs_type, ParseError};
pub use types::*;

/// Any iSCSI PDU, in either direction.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Pdu {
    /// 0x00
    NopOut(NopOut),
    /// 0x01
    ScsiCommand(ScsiCommand),
    /// 0x02
    TaskMgmtRequest(TaskMgmtRequest),
    /// 0x03
    LoginRequest(LoginRequest),
    /// 0x04
    TextRequest(TextRequest),
    /// 0x05
    DataOut(DataOut),
    /// 0x06
    LogoutRequest(LogoutRequest),
    /// 0x10
    SnackRequest(SnackRequest),
    /// 0x20
    NopIn(NopIn),
    /// 0x21
    ScsiResponse(ScsiResponse),
    /// 0x22
    TaskMgmtResponse(TaskMgmtResponse),
    /// 0x23
    LoginResponse(LoginResponse),
    /// 0x24
    TextResponse(TextResponse),
    /// 0x25
    DataIn(DataIn),
    /// 0x26
    LogoutResponse(LogoutResponse),
    /// 0x31
    R2t(R2t),
    /// 0x32
    AsyncMessage(AsyncMessage),
    /// 0x3f
    Reject(Reject),
}
