//! The kinds of PDU a fault rule can name (one per opcode of RFC 7143 section 11.2.1.2), and
//! the sequence number a fault event reports for each.
//!
//! A kind has one short name, used by [`FromStr`] and [`fmt::Display`] alike, so that whatever
//! a plan or a log prints can be typed back: `command`, `response`, `data-out`, `data-in`,
//! `r2t`, `nop-out`, `nop-in`, `tmf-req`, `tmf-rsp`, `text-req`, `text-rsp`, `login-req`,
//! `login-rsp`, `logout-req`, `logout-rsp`, `snack`, `reject`, `async`.

use std::fmt;
use std::str::FromStr;

use sluice_proto::pdu::{opcode, Bhs, BHS_LEN};

/// One iSCSI opcode, by the name fault rules use.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub enum PduKind {
    /// `command`: SCSI Command (0x01).
    Command,
    /// `response`: SCSI Response (0x21).
    Response,
    /// `data-out`: SCSI Data-Out (0x05).
    DataOut,
    /// `data-in`: SCSI Data-In (0x25).
    DataIn,
    /// `r2t`: Ready To Transfer (0x31).
    R2t,
    /// `nop-out`: NOP-Out (0x00).
    NopOut,
    /// `nop-in`: NOP-In (0x20).
    NopIn,
    /// `tmf-req`: Task Management Function Request (0x02).
    TmfRequest,
    /// `tmf-rsp`: Task Management Function Response (0x22).
    TmfResponse,
    /// `text-req`: Text Request (0x04).
    TextRequest,
    /// `text-rsp`: Text Response (0x24).
    TextResponse,
    /// `login-req`: Login Request (0x03).
    LoginRequest,
    /// `login-rsp`: Login Response (0x23).
    LoginResponse,
    /// `logout-req`: Logout Request (0x06).
    LogoutRequest,
    /// `logout-rsp`: Logout Response (0x26).
    LogoutResponse,
    /// `snack`: SNACK Request (0x10).
    Snack,
    /// `reject`: Reject (0x3f).
    Reject,
    /// `async`: Asynchronous Message (0x32).
    Async,
}

/// Which end of the connection sends a kind of PDU (RFC 7143 section 11.2.1.2: opcodes
/// 0x00-0x1f are initiator opcodes, 0x20-0x3f target opcodes).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum Sender {
    /// The initiator.
    Initiator,
    /// The target.
    Target,
}

impl PduKind {
    /// Every kind, in the order of the module documentation.
    pub const ALL: [PduKind; 18] = [
        PduKind::Command,
        PduKind::Response,
        PduKind::DataOut,
        PduKind::DataIn,
        PduKind::R2t,
        PduKind::NopOut,
        PduKind::NopIn,
        PduKind::TmfRequest,
        PduKind::TmfResponse,
        PduKind::TextRequest,
        PduKind::TextResponse,
        PduKind::LoginRequest,
        PduKind::LoginResponse,
        PduKind::LogoutRequest,
        PduKind::LogoutResponse,
        PduKind::Snack,
        PduKind::Reject,
        PduKind::Async,
    ];

    /// The kind of an opcode (without the I bit); `None` for opcodes RFC 7143 does not define.
    pub const fn from_opcode(code: u8) -> Option<PduKind> {
        Some(match code {
            opcode::SCSI_COMMAND => PduKind::Command,
            opcode::SCSI_RESPONSE => PduKind::Response,
            opcode::DATA_OUT => PduKind::DataOut,
            opcode::DATA_IN => PduKind::DataIn,
            opcode::R2T => PduKind::R2t,
            opcode::NOP_OUT => PduKind::NopOut,
            opcode::NOP_IN => PduKind::NopIn,
            opcode::TASK_MGMT_REQUEST => PduKind::TmfRequest,
            opcode::TASK_MGMT_RESPONSE => PduKind::TmfResponse,
            opcode::TEXT_REQUEST => PduKind::TextRequest,
            opcode::TEXT_RESPONSE => PduKind::TextResponse,
            opcode::LOGIN_REQUEST => PduKind::LoginRequest,
            opcode::LOGIN_RESPONSE => PduKind::LoginResponse,
            opcode::LOGOUT_REQUEST => PduKind::LogoutRequest,
            opcode::LOGOUT_RESPONSE => PduKind::LogoutResponse,
            opcode::SNACK_REQUEST => PduKind::Snack,
            opcode::REJECT => PduKind::Reject,
            opcode::ASYNC_MESSAGE => PduKind::Async,
            _ => return None,
        })
    }

    /// The opcode (without the I bit).
    pub const fn opcode(self) -> u8 {
        match self {
            PduKind::Command => opcode::SCSI_COMMAND,
            PduKind::Response => opcode::SCSI_RESPONSE,
            PduKind::DataOut => opcode::DATA_OUT,
            PduKind::DataIn => opcode::DATA_IN,
            PduKind::R2t => opcode::R2T,
            PduKind::NopOut => opcode::NOP_OUT,
            PduKind::NopIn => opcode::NOP_IN,
            PduKind::TmfRequest => opcode::TASK_MGMT_REQUEST,
            PduKind::TmfResponse => opcode::TASK_MGMT_RESPONSE,
            PduKind::TextRequest => opcode::TEXT_REQUEST,
            PduKind::TextResponse => opcode::TEXT_RESPONSE,
            PduKind::LoginRequest => opcode::LOGIN_REQUEST,
            PduKind::LoginResponse => opcode::LOGIN_RESPONSE,
            PduKind::LogoutRequest => opcode::LOGOUT_REQUEST,
            PduKind::LogoutResponse => opcode::LOGOUT_RESPONSE,
            PduKind::Snack => opcode::SNACK_REQUEST,
            PduKind::Reject => opcode::REJECT,
            PduKind::Async => opcode::ASYNC_MESSAGE,
        }
    }

    /// The short name ([`FromStr`] reads it back).
    pub const fn name(self) -> &'static str {
        match self {
            PduKind::Command => "command",
            PduKind::Response => "response",
            PduKind::DataOut => "data-out",
            PduKind::DataIn => "data-in",
            PduKind::R2t => "r2t",
            PduKind::NopOut => "nop-out",
            PduKind::NopIn => "nop-in",
            PduKind::TmfRequest => "tmf-req",
            PduKind::TmfResponse => "tmf-rsp",
            PduKind::TextRequest => "text-req",
            PduKind::TextResponse => "text-rsp",
            PduKind::LoginRequest => "login-req",
            PduKind::LoginResponse => "login-rsp",
            PduKind::LogoutRequest => "logout-req",
            PduKind::LogoutResponse => "logout-rsp",
            PduKind::Snack => "snack",
            PduKind::Reject => "reject",
            PduKind::Async => "async",
        }
    }

    /// Who sends this kind.
    pub const fn sender(self) -> Sender {
        // RFC 7143 section 11.2.1.2: target opcodes are 0x20-0x3f.
        if self.opcode() & 0x20 == 0 {
            Sender::Initiator
        } else {
            Sender::Target
        }
    }

    /// Login Request or Login Response: the PDUs of the login phase, which a plan leaves alone
    /// unless it says otherwise ([`LoginFaults`](crate::LoginFaults)).
    pub const fn is_login(self) -> bool {
        matches!(self, PduKind::LoginRequest | PduKind::LoginResponse)
    }

    /// Every name, comma-separated: for error messages.
    pub fn names() -> String {
        let names: Vec<&str> = PduKind::ALL.iter().map(|k| k.name()).collect();
        names.join(", ")
    }
}

impl fmt::Display for PduKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A PDU kind name that is not one of [`PduKind::ALL`]'s.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[error("unknown PDU kind {given:?}: use one of {}", PduKind::names())]
pub struct UnknownKind {
    /// The name given.
    pub given: String,
}

impl FromStr for PduKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PduKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownKind {
                given: s.to_owned(),
            })
    }
}

/// The header field a fault event quotes as the PDU's sequence number.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum SeqField {
    /// CmdSN of a request (bytes 24-27).
    CmdSn,
    /// StatSN of a response (bytes 24-27).
    StatSn,
    /// DataSN of Data-In and Data-Out (bytes 36-39).
    DataSn,
    /// R2TSN of an R2T (bytes 36-39).
    R2tSn,
    /// BegRun of a SNACK (bytes 40-43).
    BegRun,
}

impl SeqField {
    /// The field's name in a log line.
    pub const fn name(self) -> &'static str {
        match self {
            SeqField::CmdSn => "cmdsn",
            SeqField::StatSn => "statsn",
            SeqField::DataSn => "datasn",
            SeqField::R2tSn => "r2tsn",
            SeqField::BegRun => "begrun",
        }
    }

    /// The field a kind's events quote: the one that orders PDUs of that kind (RFC 7143
    /// section 4.2.2: CmdSN for requests, StatSN for responses, DataSN/R2TSN within a task,
    /// BegRun for what a SNACK asks again).
    pub const fn of(kind: PduKind) -> SeqField {
        match kind {
            PduKind::DataOut | PduKind::DataIn => SeqField::DataSn,
            PduKind::R2t => SeqField::R2tSn,
            PduKind::Snack => SeqField::BegRun,
            k => match k.sender() {
                Sender::Initiator => SeqField::CmdSn,
                Sender::Target => SeqField::StatSn,
            },
        }
    }

    /// The field's value in `header`.
    pub fn read(self, header: &[u8; BHS_LEN]) -> u32 {
        let h = Bhs::from_array(header);
        match self {
            SeqField::CmdSn => h.cmd_sn().0,
            SeqField::StatSn => h.stat_sn().0,
            SeqField::DataSn | SeqField::R2tSn => h.data_sn(),
            SeqField::BegRun => h.buffer_offset(),
        }
    }
}

impl fmt::Display for SeqField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_every_opcode_maps_back() {
        for kind in PduKind::ALL {
            assert_eq!(kind.name().parse::<PduKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
            assert_eq!(PduKind::from_opcode(kind.opcode()), Some(kind));
        }
        let opcodes = (0..=0x3f).filter_map(PduKind::from_opcode).count();
        assert_eq!(opcodes, PduKind::ALL.len(), "one kind per defined opcode");
    }

    #[test]
    fn an_unknown_name_lists_the_valid_ones() {
        let e = "datain".parse::<PduKind>().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"datain\""), "{text}");
        for kind in PduKind::ALL {
            assert!(text.contains(kind.name()), "{text}");
        }
    }

    #[test]
    fn senders_follow_the_opcode_ranges() {
        assert_eq!(PduKind::DataOut.sender(), Sender::Initiator);
        assert_eq!(PduKind::Snack.sender(), Sender::Initiator);
        assert_eq!(PduKind::R2t.sender(), Sender::Target);
        assert_eq!(PduKind::Reject.sender(), Sender::Target);
        assert!(PduKind::LoginResponse.is_login());
        assert!(!PduKind::TextRequest.is_login());
    }

    #[test]
    fn sequence_fields_are_read_where_the_rfc_puts_them() {
        let mut header = [0u8; BHS_LEN];
        header[24..28].copy_from_slice(&7u32.to_be_bytes());
        header[36..40].copy_from_slice(&9u32.to_be_bytes());
        header[40..44].copy_from_slice(&11u32.to_be_bytes());
        assert_eq!(SeqField::of(PduKind::Command).read(&header), 7);
        assert_eq!(SeqField::of(PduKind::NopIn), SeqField::StatSn);
        assert_eq!(SeqField::of(PduKind::R2t).read(&header), 9);
        assert_eq!(SeqField::of(PduKind::DataIn).read(&header), 9);
        assert_eq!(SeqField::of(PduKind::Snack).read(&header), 11);
    }
}
