//! Numeric codes carried in PDU fields, named as RFC 7143 section 11 lists them, each defined
//! once.
//!
//! Each code is an enum of its named values plus `Unknown(raw)` (see `enum_with_unknown!`), so
//! that the typed PDU values can hold any value the wire carries (unknown and vendor-specific
//! codes round-trip) while code matches on names. The Login Response status is two bytes,
//! Status-Class and Status-Detail, hence a struct with named constants instead ([`LoginStatus`]).

use std::fmt;

enum_with_unknown! {
    /// Reject reasons (RFC 7143 section 11.17.1).
    pub enum RejectReason(u8) {
        /// 0x02: Data (payload) digest error. "The original PDU can be resent."
        DataDigestError = 0x02 => "data digest error",
        /// 0x03: SNACK Reject. "The original PDU can be resent."
        SnackReject = 0x03 => "SNACK reject",
        /// 0x04: Protocol Error (e.g., SNACK Request for a status that was already
        /// acknowledged).
        ProtocolError = 0x04 => "protocol error",
        /// 0x05: Command not supported.
        CommandNotSupported = 0x05 => "command not supported",
        /// 0x06: Immediate command reject - too many immediate commands.
        ImmediateCommandReject = 0x06 => "too many immediate commands",
        /// 0x07: Task in progress.
        TaskInProgress = 0x07 => "task in progress",
        /// 0x08: Invalid data ack.
        InvalidDataAck = 0x08 => "invalid data ack",
        /// 0x09: Invalid PDU field.
        InvalidPduField = 0x09 => "invalid PDU field",
        /// 0x0a: Long op reject - can't generate Target Transfer Tag - out of resources.
        LongOpReject = 0x0a => "out of resources",
        /// 0x0b: Deprecated; MUST NOT be used (was Negotiation Reset in RFC 3720).
        DeprecatedNegotiationReset = 0x0b => "negotiation reset (deprecated)",
        /// 0x0c: Waiting for Logout.
        WaitingForLogout = 0x0c => "waiting for logout",
    }
}

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

enum_with_unknown! {
    /// Task management function codes (RFC 7143 section 11.5.1). The field is 7 bits wide.
    pub enum TmfFunction(u8) {
        /// 1: ABORT TASK.
        AbortTask = 1 => "ABORT TASK",
        /// 2: ABORT TASK SET.
        AbortTaskSet = 2 => "ABORT TASK SET",
        /// 3: CLEAR ACA.
        ClearAca = 3 => "CLEAR ACA",
        /// 4: CLEAR TASK SET.
        ClearTaskSet = 4 => "CLEAR TASK SET",
        /// 5: LOGICAL UNIT RESET.
        LogicalUnitReset = 5 => "LOGICAL UNIT RESET",
        /// 6: TARGET WARM RESET.
        TargetWarmReset = 6 => "TARGET WARM RESET",
        /// 7: TARGET COLD RESET.
        TargetColdReset = 7 => "TARGET COLD RESET",
        /// 8: TASK REASSIGN.
        TaskReassign = 8 => "TASK REASSIGN",
    }
}

enum_with_unknown! {
    /// Task management response codes (RFC 7143 section 11.6.1).
    pub enum TmfResponse(u8) {
        /// 0: Function complete.
        FunctionComplete = 0 => "function complete",
        /// 1: Task does not exist.
        TaskDoesNotExist = 1 => "task does not exist",
        /// 2: LUN does not exist.
        LunDoesNotExist = 2 => "LUN does not exist",
        /// 3: Task still allegiant.
        TaskStillAllegiant = 3 => "task still allegiant",
        /// 4: Task allegiance reassignment not supported.
        ReassignmentNotSupported = 4 => "task allegiance reassignment not supported",
        /// 5: Task management function not supported.
        NotSupported = 5 => "task management function not supported",
        /// 6: Function authorization failed.
        AuthorizationFailed = 6 => "function authorization failed",
        /// 255: Function rejected.
        FunctionRejected = 255 => "function rejected",
    }
}

enum_with_unknown! {
    /// Logout Request reason codes (RFC 7143 section 11.14.1). The field is 7 bits wide.
    pub enum LogoutReason(u8) {
        /// 0: close the session.
        CloseSession = 0 => "close the session",
        /// 1: close the connection.
        CloseConnection = 1 => "close the connection",
        /// 2: remove the connection for recovery.
        RemoveForRecovery = 2 => "remove the connection for recovery",
    }
}

enum_with_unknown! {
    /// Logout Response codes (RFC 7143 section 11.15.1).
    pub enum LogoutResponseCode(u8) {
        /// 0: connection or session closed successfully.
        Closed = 0 => "closed successfully",
        /// 1: CID not found.
        CidNotFound = 1 => "CID not found",
        /// 2: connection recovery is not supported.
        RecoveryNotSupported = 2 => "connection recovery is not supported",
        /// 3: cleanup failed for various reasons.
        CleanupFailed = 3 => "cleanup failed",
    }
}

enum_with_unknown! {
    /// AsyncEvent codes of the Asynchronous Message (RFC 7143 section 11.9.1).
    pub enum AsyncEvent(u8) {
        /// 0: a SCSI asynchronous event is reported in the sense data.
        ScsiEvent = 0 => "SCSI asynchronous event",
        /// 1: the target requests a logout (Parameter3 = seconds to wait).
        LogoutRequested = 1 => "logout requested",
        /// 2: the target will drop this connection (Parameter1 = CID).
        DropConnection = 2 => "connection will be dropped",
        /// 3: the target will drop all connections of the session.
        DropAllConnections = 3 => "all connections will be dropped",
        /// 4: the target requests parameter negotiation on this connection.
        NegotiationRequested = 4 => "parameter negotiation requested",
        /// 255: vendor-specific iSCSI event (AsyncVCode says which).
        VendorSpecific = 255 => "vendor-specific event",
    }
}

enum_with_unknown! {
    /// SCSI Response "Response" field (RFC 7143 section 11.4.3); 0x80-0xff are
    /// vendor-specific.
    pub enum ScsiResponseCode(u8) {
        /// 0x00: Command Completed at Target.
        Completed = 0x00 => "command completed at target",
        /// 0x01: Target Failure.
        TargetFailure = 0x01 => "target failure",
    }
}

enum_with_unknown! {
    /// SCSI status as the transport carries it (SAM-5 5.3, listed in RFC 7143 section
    /// 11.4.2). sluice-scsi keeps its own `u8` constants (it knows nothing of iSCSI); convert
    /// with `ScsiStatus::from` where a status crosses over.
    pub enum ScsiStatus(u8) {
        /// 0x00: GOOD.
        Good = 0x00 => "GOOD",
        /// 0x02: CHECK CONDITION: sense data follows in the data segment.
        CheckCondition = 0x02 => "CHECK CONDITION",
        /// 0x04: CONDITION MET.
        ConditionMet = 0x04 => "CONDITION MET",
        /// 0x08: BUSY.
        Busy = 0x08 => "BUSY",
        /// 0x18: RESERVATION CONFLICT.
        ReservationConflict = 0x18 => "RESERVATION CONFLICT",
        /// 0x28: TASK SET FULL.
        TaskSetFull = 0x28 => "TASK SET FULL",
        /// 0x30: ACA ACTIVE.
        AcaActive = 0x30 => "ACA ACTIVE",
        /// 0x40: TASK ABORTED.
        TaskAborted = 0x40 => "TASK ABORTED",
    }
}

enum_with_unknown! {
    /// SNACK types (RFC 7143 section 11.16.1). The field is 4 bits wide.
    pub enum SnackType(u8) {
        /// 0: Data/R2T SNACK.
        DataR2t = 0 => "Data/R2T SNACK",
        /// 1: Status SNACK.
        Status = 1 => "Status SNACK",
        /// 2: DataACK.
        DataAck = 2 => "DataACK",
        /// 3: R-Data SNACK.
        RData = 3 => "R-Data SNACK",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte decodes and encodes back to itself, every named value decodes to its own
    /// variant (no two names share a value), and an unknown value shows its number.
    fn round_trips<E>(known: &[E], unknown: u8)
    where
        E: Copy + Eq + std::fmt::Debug + std::fmt::Display + From<u8>,
        u8: From<E>,
    {
        for code in 0..=u8::MAX {
            assert_eq!(u8::from(E::from(code)), code);
        }
        for &k in known {
            assert_eq!(E::from(u8::from(k)), k);
        }
        let e = E::from(unknown);
        assert!(!known.contains(&e), "{e:?} is named");
        assert_eq!(format!("{e:?}"), format!("Unknown({unknown:#04x})"));
        assert_eq!(e.to_string(), format!("unknown ({unknown:#04x})"));
    }

    #[test]
    fn reject_reasons() {
        round_trips(RejectReason::KNOWN, 0x0d);
        assert_eq!(RejectReason::KNOWN.len(), 11);
        assert_eq!(RejectReason::from(0x09), RejectReason::InvalidPduField);
        assert_eq!(
            RejectReason::InvalidPduField.to_string(),
            "invalid PDU field"
        );
    }

    #[test]
    fn tmf_functions_and_responses() {
        round_trips(TmfFunction::KNOWN, 0x09);
        assert_eq!(TmfFunction::KNOWN.len(), 8);
        assert_eq!(TmfFunction::from(5), TmfFunction::LogicalUnitReset);
        round_trips(TmfResponse::KNOWN, 0x07);
        assert_eq!(TmfResponse::KNOWN.len(), 8);
        assert_eq!(u8::from(TmfResponse::FunctionRejected), 255);
    }

    #[test]
    fn logout_reasons_and_responses() {
        round_trips(LogoutReason::KNOWN, 0x03);
        assert_eq!(LogoutReason::KNOWN.len(), 3);
        round_trips(LogoutResponseCode::KNOWN, 0x04);
        assert_eq!(LogoutResponseCode::KNOWN.len(), 4);
    }

    #[test]
    fn async_events_and_snack_types() {
        round_trips(AsyncEvent::KNOWN, 0x05);
        assert_eq!(AsyncEvent::KNOWN.len(), 6);
        assert_eq!(AsyncEvent::from(255), AsyncEvent::VendorSpecific);
        round_trips(SnackType::KNOWN, 0x04);
        assert_eq!(SnackType::KNOWN.len(), 4);
    }

    #[test]
    fn scsi_response_codes() {
        round_trips(ScsiResponseCode::KNOWN, 0x80);
        assert_eq!(ScsiResponseCode::KNOWN.len(), 2);
        assert_eq!(ScsiResponseCode::from(0), ScsiResponseCode::Completed);
    }

    #[test]
    fn scsi_statuses() {
        round_trips(ScsiStatus::KNOWN, 0x22);
        assert_eq!(ScsiStatus::KNOWN.len(), 8);
        assert_eq!(ScsiStatus::from(0x02), ScsiStatus::CheckCondition);
        assert_eq!(ScsiStatus::TaskSetFull.to_string(), "TASK SET FULL");
    }

    #[test]
    fn login_status_shows_its_number() {
        assert_eq!(
            LoginStatus::AUTH_FAILURE.to_string(),
            "0x0201 (authentication failure)"
        );
        let unknown = LoginStatus::new(0x04, 0x07);
        assert_eq!(unknown.to_string(), "0x0407 (unknown status)");
        assert_eq!(
            format!("{unknown:?}"),
            "LoginStatus { class: 4, detail: 7 }"
        );
    }
}
