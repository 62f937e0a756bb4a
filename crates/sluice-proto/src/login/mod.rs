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

use std::fmt;

/// Most bytes of text in one Login Response (or Request) data segment. During login the
/// default MaxRecvDataSegmentLength (8192, RFC 7143 section 13.12) applies, and open-iscsi's
/// kernel path receives login responses into an 8192-byte buffer and fails the connection on
/// a longer data segment (Linux `drivers/scsi/libiscsi_tcp.c`).
pub const LOGIN_SEGMENT_MAX: usize = 8192;

/// Status-Class and Status-Detail of a Login Response (RFC 7143 section 11.13.5).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct LoginStatus {
    /// Status-Class: 0 success, 1 redirection, 2 initiator error, 3 target error.
    pub class: u8,
    /// Status-Detail.
    pub detail: u8,
}

impl LoginStatus {
    /// 0x0000 Success.
    pub const SUCCESS: Self = Self::new(0x00, 0x00);
    /// 0x0101 Target moved temporarily.
    pub const MOVED_TEMPORARILY: Self = Self::new(0x01, 0x01);
    /// 0x0102 Target moved permanently.
    pub const MOVED_PERMANENTLY: Self = Self::new(0x01, 0x02);
    /// 0x0200 Initiator error (miscellaneous, including invalid stage transitions).
    pub const INITIATOR_ERROR: Self = Self::new(0x02, 0x00);
    /// 0x0201 Authentication failure.
    pub const AUTH_FAILURE: Self = Self::new(0x02, 0x01);
    /// 0x0202 Authorization failure (the initiator may not access this target).
    pub const AUTHORIZATION_FAILURE: Self = Self::new(0x02, 0x02);
    /// 0x0203 Not found (no such target).
    pub const NOT_FOUND: Self = Self::new(0x02, 0x03);
    /// 0x0204 Target removed.
    pub const TARGET_REMOVED: Self = Self::new(0x02, 0x04);
    /// 0x0205 Unsupported version.
    pub const UNSUPPORTED_VERSION: Self = Self::new(0x02, 0x05);
    /// 0x0206 Too many connections.
    pub const TOO_MANY_CONNECTIONS: Self = Self::new(0x02, 0x06);
    /// 0x0207 Missing parameter.
    pub const MISSING_PARAMETER: Self = Self::new(0x02, 0x07);
    /// 0x0208 Can't include in session.
    pub const CANT_INCLUDE_IN_SESSION: Self = Self::new(0x02, 0x08);
    /// 0x0209 Session type not supported.
    pub const SESSION_TYPE_NOT_SUPPORTED: Self = Self::new(0x02, 0x09);
    /// 0x020a Session does not exist.
    pub const SESSION_DOES_NOT_EXIST: Self = Self::new(0x02, 0x0a);
    /// 0x020b Invalid request during login.
    pub const INVALID_DURING_LOGIN: Self = Self::new(0x02, 0x0b);
    /// 0x0300 Target error (miscellaneous).
    pub const TARGET_ERROR: Self = Self::new(0x03, 0x00);
    /// 0x0301 Service unavailable.
    pub const SERVICE_UNAVAILABLE: Self = Self::new(0x03, 0x01);
    /// 0x0302 Out of resources.
    pub const OUT_OF_RESOURCES: Self = Self::new(0x03, 0x02);

    /// A status from its two bytes.
    pub const fn new(class: u8, detail: u8) -> Self {
        Self { class, detail }
    }

    /// The RFC 7143 section 11.13.5 description.
    pub fn description(self) -> &'static str {
        match (self.class, self.detail) {
            (0, 0) => "success",
            (1, 1) => "target moved temporarily",
            (1, 2) => "target moved permanently",
            (1, _) => "redirection",
            (2, 0) => "initiator error",
            (2, 1) => "authentication failure",
            (2, 2) => "authorization failure",
            (2, 3) => "target not found",
            (2, 4) => "target removed",
            (2, 5) => "unsupported version",
            (2, 6) => "too many connections",
            (2, 7) => "missing parameter",
            (2, 8) => "can't include in session",
            (2, 9) => "session type not supported",
            (2, 0x0a) => "session does not exist",
            (2, 0x0b) => "invalid request during login",
            (2, _) => "initiator error",
            (3, 0) => "target error",
            (3, 1) => "service unavailable",
            (3, 2) => "out of resources",
            (3, _) => "target error",
            _ => "unknown status",
        }
    }
}

impl fmt::Display for LoginStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#04x}{:02x} ({})",
            self.class,
            self.detail,
            self.description()
        )
    }
}

#[cfg(test)]
mod tests;
