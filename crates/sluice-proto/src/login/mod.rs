//! Sans-IO login state machines (RFC 7143 sections 6.3, 11.12 and 11.13).
//!
//! - [`target`]: [`TargetLogin`] answers Login Requests; the driver supplies policy and session
//!   bookkeeping through [`TargetLoginEnv`] (see the `target` module docs for the exact driver
//!   contract).
//! - [`initiator`]: [`InitiatorLogin`] builds Login Requests and judges the responses.
//!
//! Both take typed [`LoginRequest`](crate::pdu::types::LoginRequest) /
//! [`LoginResponse`](crate::pdu::types::LoginResponse) values; byte parsing and emission belong
//! to [`crate::pdu`] and [`crate::framing`].

mod env;
pub mod initiator;
pub mod target;

pub use env::{
    ChapCredential, ChapSecrets, LoginOutcome, SessionBinding, TargetLoginEnv, TargetLoginPolicy,
};
pub use initiator::{
    InitiatorChap, InitiatorConfig, InitiatorLogin, InitiatorOutcome, InitiatorStep, LoginError,
};
pub use target::{LoginStep, TargetLogin};

// Defined with the other PDU field codes: the Login Response carries it.
pub use crate::pdu::codes::LoginStatus;

/// Most bytes of text in one Login Response (or Request) data segment. During login the
/// default MaxRecvDataSegmentLength (8192, RFC 7143 section 13.12) applies, and open-iscsi's
/// kernel path receives login responses into an 8192-byte buffer and fails the connection on
/// a longer data segment (Linux `drivers/scsi/libiscsi_tcp.c`).
pub const LOGIN_SEGMENT_MAX: usize = 8192;

#[cfg(test)]
mod tests;
