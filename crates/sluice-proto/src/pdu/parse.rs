//! Bytes to typed PDU: [`Pdu::parse`] (RFC 7143 section 11).
//!
//! RFC 7143 section 11: reserved fields are zero when sent and ignored when received, so
//! nothing here looks at them. A data segment on a PDU that carries none (R2T,
//! TMF, Logout, SNACK) is ignored too: the framer has already consumed it. Only the SCSI Command
//! defines AHSs (section 11.2.2); on other opcodes the AHS bytes are ignored likewise.

use bytes::Bytes;

use super::bhs::{bits, field, Bhs, BHS_LEN};
use super::codes::{
    AsyncEvent, LoginStatus, LogoutReason, LogoutResponseCode, RejectReason, ScsiResponseCode,
    ScsiStatus, SnackType, TmfFunction, TmfResponse,
};
use super::types::*;
use super::{Cdb, Pdu};
use crate::seq::{Itt, SeqNum};

/// Why a header (with its AHS and data segment) is not a valid PDU.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Fewer than 48 bytes were given for the BHS.
    #[error("header of {len} bytes is shorter than the 48-byte BHS")]
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// The opcode is not one RFC 7143 defines.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The AHS bytes given do not match TotalAHSLength.
    #[error("AHS of {actual} bytes but TotalAHSLength says {expected}")]
    AhsLength {
        /// Bytes announced by the header.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The data bytes given do not match DataSegmentLength.
    #[error("data segment of {actual} bytes but DataSegmentLength says {expected}")]
    DataLength {
        /// Bytes announced by the header.
        expected: u32,
        /// Bytes given.
        actual: usize,
    },
    /// An Additional Header Segment is malformed, duplicated or of an unsupported type.
    #[error("malformed AHS: {0}")]
    MalformedAhs(&'static str),
}

impl ParseError {
    /// The Reject reason (RFC 7143 section 11.17.1) a target answers this error with.
    pub fn reject_reason(&self) -> RejectReason {
        match self {
            ParseError::UnknownOpcode(_) => RejectReason::CommandNotSupported,
            _ => RejectReason::ProtocolError,
        }
    }
}

/// AHS type codes (RFC 7143 section 11.2.2.1).
pub mod ahs_type {
    /// Extended CDB: the CDB bytes beyond the first 16.
    pub const EXTENDED_CDB: u8 = 1;
    /// Expected Bidirectional Read Data Length.
    pub const BIDI_READ_LENGTH: u8 = 2;
}

impl Pdu {
    /// Whether RFC 7143 defines `code` (an opcode without the I bit) for either role
    /// (section 11.2.1.2): what [`Pdu::parse`] accepts.
    pub fn is_known_opcode(code: u8) -> bool {
        matches!(
            code,
            opcode::NOP_OUT
                | opcode::SCSI_COMMAND
                | opcode::TASK_MGMT_REQUEST
                | opcode::LOGIN_REQUEST
                | opcode::TEXT_REQUEST
                | opcode::DATA_OUT
                | opcode::LOGOUT_REQUEST
                | opcode::SNACK_REQUEST
                | opcode::NOP_IN
                | opcode::SCSI_RESPONSE
                | opcode::TASK_MGMT_RESPONSE
                | opcode::LOGIN_RESPONSE
                | opcode::TEXT_RESPONSE
                | opcode::DATA_IN
                | opcode::LOGOUT_RESPONSE
                | opcode::R2T
                | opcode::ASYNC_MESSAGE
                | opcode::REJECT
        )
    }

    /// Parses a BHS alone, as if its data segment and AHS were empty: what a header says when
    /// its data is elsewhere (received in place) or lost (a data digest error). Fields that
    /// describe the data, such as DataSegmentLength, are read from `header` by the caller.
    pub fn parse_header_only(header: &[u8; BHS_LEN]) -> Result<Pdu, ParseError> {
        let mut bare = *header;
        // TotalAHSLength and DataSegmentLength (bytes 4..8).
        bare[4..8].fill(0);
        Pdu::parse(&bare, &[], Bytes::new())
    }

    /// Parses one PDU from its 48-byte BHS, its AHS (exactly TotalAHSLength bytes) and its data
    /// segment (exactly DataSegmentLength bytes, padding and digests removed). `data` is shared,
    /// not copied.
    pub fn parse(header: &[u8; BHS_LEN], ahs: &[u8], data: Bytes) -> Result<Pdu, ParseError> {
        let h = Bhs::from_array(header);
        if ahs.len() != h.total_ahs_len() {
            return Err(ParseError::AhsLength {
                expected: h.total_ahs_len(),
                actual: ahs.len(),
            });
        }
        let dsl = h.data_segment_len();
        if usize::try_from(dsl).ok() != Some(data.len()) {
            return Err(ParseError::DataLength {
                expected: dsl,
                actual: data.len(),
            });
        }
        let f = h.flags();
        let pdu = match h.opcode() {
            opcode::NOP_OUT => Pdu::NopOut(NopOut {
                immediate: h.is_immediate(),
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                cmd_sn: h.cmd_sn(),
                exp_stat_sn: h.exp_stat_sn(),
                data,
            }),
            opcode::SCSI_COMMAND => Pdu::ScsiCommand(parse_scsi_command(&h, ahs, data)?),
            opcode::TASK_MGMT_REQUEST => Pdu::TaskMgmtRequest(TaskMgmtRequest {
                immediate: h.is_immediate(),
                function: TmfFunction::from(f & 0x7f),
                lun: h.lun(),
                itt: h.itt(),
                referenced_task_tag: Itt(h.u32_at(field::WORD20)),
                cmd_sn: h.cmd_sn(),
                exp_stat_sn: h.exp_stat_sn(),
                ref_cmd_sn: SeqNum(h.u32_at(field::WORD32)),
                exp_data_sn: h.data_sn(),
            }),
            // RFC 7143 section 11.12: a Login Request is always immediate; the I bit is not
            // represented.
            opcode::LOGIN_REQUEST => Pdu::LoginRequest(LoginRequest {
                transit: f & bits::FINAL != 0,
                cont: f & flag::CONTINUE != 0,
                csg: (f >> 2) & 3,
                nsg: f & 3,
                version_max: h.byte2(),
                version_min: h.byte3(),
                isid: h.isid(),
                tsih: h.tsih(),
                itt: h.itt(),
                cid: h.cid(),
                cmd_sn: h.cmd_sn(),
                exp_stat_sn: h.exp_stat_sn(),
                data,
            }),
            opcode::TEXT_REQUEST => Pdu::TextRequest(TextRequest {
                immediate: h.is_immediate(),
                final_bit: h.is_final(),
                cont: f & flag::CONTINUE != 0,
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                cmd_sn: h.cmd_sn(),
                exp_stat_sn: h.exp_stat_sn(),
                data,
            }),
            opcode::DATA_OUT => Pdu::DataOut(DataOut {
                final_bit: h.is_final(),
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                exp_stat_sn: h.exp_stat_sn(),
                data_sn: h.data_sn(),
                buffer_offset: h.buffer_offset(),
                data,
            }),
            opcode::LOGOUT_REQUEST => Pdu::LogoutRequest(LogoutRequest {
                immediate: h.is_immediate(),
                reason: LogoutReason::from(f & 0x7f),
                itt: h.itt(),
                cid: h.cid(),
                cmd_sn: h.cmd_sn(),
                exp_stat_sn: h.exp_stat_sn(),
            }),
            opcode::SNACK_REQUEST => Pdu::SnackRequest(SnackRequest {
                snack_type: SnackType::from(f & 0x0f),
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                exp_stat_sn: h.exp_stat_sn(),
                beg_run: h.buffer_offset(),
                run_length: h.word44(),
            }),
            opcode::NOP_IN => Pdu::NopIn(NopIn {
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                data,
            }),
            opcode::SCSI_RESPONSE => Pdu::ScsiResponse(ScsiResponse {
                bidi_overflow: f & flag::BIDI_OVERFLOW != 0,
                bidi_underflow: f & flag::BIDI_UNDERFLOW != 0,
                overflow: f & flag::RESP_OVERFLOW != 0,
                underflow: f & flag::RESP_UNDERFLOW != 0,
                response: ScsiResponseCode::from(h.byte2()),
                status: ScsiStatus::from(h.byte3()),
                itt: h.itt(),
                snack_tag: h.u32_at(field::WORD20),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                exp_data_sn: h.data_sn(),
                bidi_residual: h.buffer_offset(),
                residual: h.word44(),
                data,
            }),
            opcode::TASK_MGMT_RESPONSE => Pdu::TaskMgmtResponse(TaskMgmtResponse {
                response: TmfResponse::from(h.byte2()),
                itt: h.itt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
            }),
            opcode::LOGIN_RESPONSE => Pdu::LoginResponse(LoginResponse {
                transit: f & bits::FINAL != 0,
                cont: f & flag::CONTINUE != 0,
                csg: (f >> 2) & 3,
                nsg: f & 3,
                version_max: h.byte2(),
                version_active: h.byte3(),
                isid: h.isid(),
                tsih: h.tsih(),
                itt: h.itt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                status: LoginStatus::new(header[field::WORD36], header[field::WORD36 + 1]),
                data,
            }),
            opcode::TEXT_RESPONSE => Pdu::TextResponse(TextResponse {
                final_bit: h.is_final(),
                cont: f & flag::CONTINUE != 0,
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                data,
            }),
            opcode::DATA_IN => Pdu::DataIn(DataIn {
                final_bit: h.is_final(),
                ack: f & flag::ACK != 0,
                overflow: f & flag::DATA_IN_OVERFLOW != 0,
                underflow: f & flag::DATA_IN_UNDERFLOW != 0,
                status_present: f & flag::STATUS != 0,
                status: ScsiStatus::from(h.byte3()),
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                data_sn: h.data_sn(),
                buffer_offset: h.buffer_offset(),
                residual: h.word44(),
                data,
            }),
            opcode::LOGOUT_RESPONSE => Pdu::LogoutResponse(LogoutResponse {
                response: LogoutResponseCode::from(h.byte2()),
                itt: h.itt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                time2wait: h.u16_at(field::WORD40),
                time2retain: h.u16_at(field::WORD40 + 2),
            }),
            opcode::R2T => Pdu::R2t(R2t {
                lun: h.lun(),
                itt: h.itt(),
                ttt: h.ttt(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                r2t_sn: h.data_sn(),
                buffer_offset: h.buffer_offset(),
                desired_data_transfer_length: h.word44(),
            }),
            opcode::ASYNC_MESSAGE => Pdu::AsyncMessage(AsyncMessage {
                lun: h.lun(),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                async_event: AsyncEvent::from(header[field::WORD36]),
                async_vcode: header[field::WORD36 + 1],
                parameter1: h.u16_at(field::WORD36 + 2),
                parameter2: h.u16_at(field::WORD40),
                parameter3: h.u16_at(field::WORD40 + 2),
                data,
            }),
            opcode::REJECT => Pdu::Reject(Reject {
                reason: RejectReason::from(h.byte2()),
                stat_sn: h.stat_sn(),
                exp_cmd_sn: h.exp_cmd_sn(),
                max_cmd_sn: h.max_cmd_sn(),
                data_sn: h.data_sn(),
                data,
            }),
            other => return Err(ParseError::UnknownOpcode(other)),
        };
        Ok(pdu)
    }
}

/// Opcode-specific flag bits of byte 1 (RFC 7143 sections 11.3-11.13).
pub(crate) mod flag {
    /// SCSI Command R bit.
    pub(crate) const READ: u8 = 0x40;
    /// SCSI Command W bit.
    pub(crate) const WRITE: u8 = 0x20;
    /// SCSI Command ATTR field.
    pub(crate) const ATTR_MASK: u8 = 0x07;
    /// C (continue) bit of Text and Login PDUs.
    pub(crate) const CONTINUE: u8 = 0x40;
    /// SCSI Response o bit.
    pub(crate) const BIDI_OVERFLOW: u8 = 0x10;
    /// SCSI Response u bit.
    pub(crate) const BIDI_UNDERFLOW: u8 = 0x08;
    /// SCSI Response O bit.
    pub(crate) const RESP_OVERFLOW: u8 = 0x04;
    /// SCSI Response U bit.
    pub(crate) const RESP_UNDERFLOW: u8 = 0x02;
    /// Data-In A bit.
    pub(crate) const ACK: u8 = 0x40;
    /// Data-In O bit.
    pub(crate) const DATA_IN_OVERFLOW: u8 = 0x04;
    /// Data-In U bit.
    pub(crate) const DATA_IN_UNDERFLOW: u8 = 0x02;
    /// Data-In S bit.
    pub(crate) const STATUS: u8 = 0x01;
}

fn parse_scsi_command(
    h: &Bhs<&[u8; BHS_LEN]>,
    ahs: &[u8],
    data: Bytes,
) -> Result<ScsiCommand, ParseError> {
    let f = h.flags();
    let (ext_cdb, bidi_read_length) = parse_ahs(ahs)?;
    Ok(ScsiCommand {
        immediate: h.is_immediate(),
        final_bit: h.is_final(),
        read: f & flag::READ != 0,
        write: f & flag::WRITE != 0,
        attr: TaskAttr::from_code(f & flag::ATTR_MASK),
        lun: h.lun(),
        itt: h.itt(),
        expected_data_transfer_length: h.expected_data_transfer_length(),
        cmd_sn: h.cmd_sn(),
        exp_stat_sn: h.exp_stat_sn(),
        cdb: Cdb::from_parts(h.cdb(), ext_cdb),
        bidi_read_length,
        data,
    })
}

/// Walks the AHS list of a SCSI Command (RFC 7143 section 11.2.2): each AHS is AHSLength (2
/// bytes, "excluding AHSType and AHSLength and padding"), AHSType (1 byte), then AHSLength bytes
/// of AHS-Specific data, padded to a multiple of 4.
fn parse_ahs(mut rest: &[u8]) -> Result<(&[u8], Option<u32>), ParseError> {
    let mut ext_cdb: Option<&[u8]> = None;
    let mut bidi = None;
    while !rest.is_empty() {
        let [l0, l1, ty, ..] = *rest else {
            return Err(ParseError::MalformedAhs("truncated AHS header"));
        };
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        let padded = (3 + len).div_ceil(4) * 4;
        let (Some(specific), Some(next)) = (rest.get(3..3 + len), rest.get(padded..)) else {
            return Err(ParseError::MalformedAhs("AHS runs past TotalAHSLength"));
        };
        // AHSType: "bit 0-1 - Reserved", bits 2-7 the AHS code.
        match ty & 0x3f {
            ahs_type::EXTENDED_CDB => {
                // RFC 7143 section 11.2.2.3: AHSLength = CDBLength - 15 (one reserved byte, then
                // the CDB bytes beyond 16).
                let Some(ext) = specific.get(1..) else {
                    return Err(ParseError::MalformedAhs("empty Extended CDB AHS"));
                };
                if ext_cdb.replace(ext).is_some() {
                    return Err(ParseError::MalformedAhs("two Extended CDB AHSs"));
                }
            }
            ahs_type::BIDI_READ_LENGTH => {
                // RFC 7143 section 11.2.2.4: AHSLength = 0x0005, reserved byte, then the 4-byte
                // Expected Read-Data Length.
                let [_, a, b, c, d] = *specific else {
                    return Err(ParseError::MalformedAhs("bidirectional AHSLength is not 5"));
                };
                if bidi.replace(u32::from_be_bytes([a, b, c, d])).is_some() {
                    return Err(ParseError::MalformedAhs("two bidirectional read AHSs"));
                }
            }
            _ => return Err(ParseError::MalformedAhs("unsupported AHS type")),
        }
        rest = next;
    }
    Ok((ext_cdb.unwrap_or(&[]), bidi))
}
