//! Errors, each saying what failed in words (login status, sense key and ASC/ASCQ names).

use std::fmt;

use sluice_proto::framing::FrameError;
use sluice_proto::login::{LoginError, LoginStatus};
use sluice_proto::pdu::codes::{RejectReason, ScsiResponseCode, ScsiStatus};
use sluice_proto::task::TaskError;
use sluice_proto::text::KeyValueError;
use sluice_scsi::SenseData;

use crate::url::UrlError;

/// Anything the initiator can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A malformed `iscsi://` URL.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// A bad option or option combination.
    #[error("{0}")]
    Option(String),
    /// An RFC 7143 key given as an option with a value its entry in the key table refuses
    /// (out of range, or not of the key's type).
    #[error(transparent)]
    Key(#[from] KeyValueError),
    /// The TCP connection could not be made.
    #[error("cannot connect to {portal}: {error}")]
    Connect {
        /// `host:port`.
        portal: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// Reading or writing the connection failed.
    #[error("connection to {portal}: {error}")]
    Io {
        /// `host:port`.
        portal: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The login failed; the message gives the target's status in words.
    #[error("login to {target} at {portal} failed: {error}")]
    Login {
        /// Target name (or "discovery").
        target: String,
        /// `host:port`.
        portal: String,
        /// What went wrong.
        error: LoginError,
    },
    /// More redirects than allowed.
    #[error("login gave up after {0} redirects")]
    TooManyRedirects(u32),
    /// The byte stream from the target is broken (bad digest, oversized segment, ...).
    #[error("bad PDU from the target: {0}")]
    Frame(FrameError),
    /// The target broke a protocol rule.
    #[error("target protocol error: {0}")]
    Protocol(String),
    /// A data transfer rule was broken for one command.
    #[error("command data transfer: {0}")]
    Task(TaskError),
    /// The command completed with a non-GOOD SCSI status.
    #[error("{0}")]
    Scsi(ScsiFailure),
    /// The target answered with an iSCSI response code other than "completed at target".
    #[error("target failure (iSCSI response {code:#04x})", code = .0.code())]
    TargetFailure(ScsiResponseCode),
    /// Task management (ABORT TASK, ABORT TASK SET, a reset) ended the command.
    #[error("command aborted by task management")]
    Aborted,
    /// The target rejected a PDU (RFC 7143 section 11.17.1 reason code).
    #[error(
        "target rejected the PDU: reason {code:#04x} ({words})",
        code = .0.code(),
        words = .0.description()
    )]
    Rejected(RejectReason),
    /// A timer ran out.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// The connection was lost and could not be restored within the configured bounds.
    #[error("{}", connection_lost_message(*attempts, last))]
    ConnectionLost {
        /// Reconnect attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The session was logged out or its driver stopped.
    #[error("session closed")]
    Closed,
    /// Multipath: a command that is not safe to run twice was in flight on a path that
    /// failed. It may or may not have run at the target, so it was not resent on another
    /// path; the caller must find out (read the data, READ KEYS) and decide.
    #[error(
        "command {opcode:#04x} was in flight on path {portal} when it failed ({error}); it \
         may have run, and it is not safe to run twice, so it was not resent on another path"
    )]
    NotResent {
        /// The command's operation code.
        opcode: u8,
        /// The portal of the path that failed.
        portal: String,
        /// How the path failed.
        error: String,
    },
    /// Multipath: no path could serve I/O within the wait allowed.
    #[error("{0}")]
    NoPath(String),
    /// Multipath: a path reaches a different logical unit than the others.
    #[error("{0}")]
    PathIdentity(String),
}

impl Error {
    /// The login status, if this is a login rejected by the target.
    pub fn login_status(&self) -> Option<LoginStatus> {
        match self {
            Error::Login {
                error: LoginError::Rejected { status },
                ..
            } => Some(*status),
            _ => None,
        }
    }

    /// The decoded sense data, if this is a CHECK CONDITION.
    pub fn sense(&self) -> Option<&SenseData> {
        match self {
            Error::Scsi(f) => f.sense.as_ref(),
            _ => None,
        }
    }
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::Frame(e)
    }
}

impl From<TaskError> for Error {
    fn from(e: TaskError) -> Self {
        Error::Task(e)
    }
}

/// A command that ended with a non-GOOD status.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ScsiFailure {
    /// The SCSI status.
    pub status: ScsiStatus,
    /// Decoded sense data, if the target sent any it could decode.
    pub sense: Option<SenseData>,
}

impl fmt::Display for ScsiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SCSI status {}", self.status)?;
        if let Some(s) = &self.sense {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_scsi::SenseKey;

    #[test]
    fn messages_are_in_words() {
        let e = Error::Scsi(ScsiFailure {
            status: ScsiStatus::from(2),
            sense: Some(SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x21, 0x00)),
        });
        let text = e.to_string();
        assert!(text.contains("CHECK CONDITION"), "{text}");
        assert!(text.contains("ILLEGAL REQUEST"), "{text}");
        let e = Error::Login {
            target: "iqn.x".into(),
            portal: "h:1".into(),
            error: LoginError::Rejected {
                status: LoginStatus::AUTH_FAILURE,
            },
        };
        assert!(e.to_string().contains("authentication failure"), "{e}");
        assert_eq!(e.login_status(), Some(LoginStatus::AUTH_FAILURE));
        let e = Error::Rejected(RejectReason::from(9));
        assert_eq!(
            e.to_string(),
            "target rejected the PDU: reason 0x09 (invalid PDU field)"
        );
        let e = Error::Rejected(RejectReason::from(0x42));
        assert_eq!(
            e.to_string(),
            "target rejected the PDU: reason 0x42 (unknown)"
        );
    }
}

/// The text of [`Error::ConnectionLost`]: a request can fail with the connection before any
/// reconnect was tried (a Text or task management request whose connection went, a command
/// the target kept allegiant to the failed connection), and "not recovered after 0 attempts"
/// would then read as if recovery had been tried and had failed.
fn connection_lost_message(attempts: u32, last: &str) -> String {
    match (attempts, last.is_empty()) {
        (0, true) => "connection lost".to_string(),
        (0, false) => format!("connection lost: {last}"),
        (n, _) => format!("connection lost and not recovered after {n} reconnect attempts: {last}"),
    }
}

#[cfg(test)]
mod connection_lost_tests {
    use super::Error;

    #[test]
    fn says_attempts_only_when_reconnects_were_tried() {
        let lost = |attempts, last: &str| {
            Error::ConnectionLost {
                attempts,
                last: last.into(),
            }
            .to_string()
        };
        assert_eq!(lost(0, ""), "connection lost");
        assert_eq!(lost(0, "reset by peer"), "connection lost: reset by peer");
        assert_eq!(
            lost(3, "refused"),
            "connection lost and not recovered after 3 reconnect attempts: refused"
        );
    }
}
