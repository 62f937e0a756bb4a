//! Typed PDU to bytes: [`Pdu::emit_header`] and the per-PDU helpers (opcode, ITT, data).
//!
//! RFC 7143 section 11: reserved fields are set to zero by the sender, which is what starting
//! from [`Bhs::zeroed`] gives. Emission never fails and never panics: values wider than
//! their wire field are truncated to it (see [`MAX_CDB_LEN`] and
//! [`MAX_DATA_SEGMENT_LEN`]); producing such a value is a bug in the caller, not a peer error.

use bytes::{BufMut, Bytes, BytesMut};

use super::bhs::{bits, field, Bhs, BHS_LEN, MAX_DATA_SEGMENT_LEN};
use super::parse::{ahs_type, flag};
use super::types::*;
use super::Pdu;
use crate::seq::Itt;

/// Longest CDB an Extended CDB AHS can carry within the 255-word TotalAHSLength (RFC 7143
/// section 11.2.1.5): 16 in the BHS plus 1016 in the AHS. With a bidirectional-read AHS (8
/// bytes) the limit is 8 bytes lower. Longer CDBs are truncated on emit.
pub const MAX_CDB_LEN: usize = 16 + 255 * 4 - 4;

/// The data segment of PDUs that carry none.
static EMPTY: Bytes = Bytes::new();

impl Pdu {
    /// The opcode (RFC 7143 section 11.2.1.2), without the I bit.
    pub fn opcode(&self) -> u8 {
        match self {
            Pdu::NopOut(_) => opcode::NOP_OUT,
            Pdu::ScsiCommand(_) => opcode::SCSI_COMMAND,
            Pdu::TaskMgmtRequest(_) => opcode::TASK_MGMT_REQUEST,
            Pdu::LoginRequest(_) => opcode::LOGIN_REQUEST,
            Pdu::TextRequest(_) => opcode::TEXT_REQUEST,
            Pdu::DataOut(_) => opcode::DATA_OUT,
            Pdu::LogoutRequest(_) => opcode::LOGOUT_REQUEST,
            Pdu::SnackRequest(_) => opcode::SNACK_REQUEST,
            Pdu::NopIn(_) => opcode::NOP_IN,
            Pdu::ScsiResponse(_) => opcode::SCSI_RESPONSE,
            Pdu::TaskMgmtResponse(_) => opcode::TASK_MGMT_RESPONSE,
            Pdu::LoginResponse(_) => opcode::LOGIN_RESPONSE,
            Pdu::TextResponse(_) => opcode::TEXT_RESPONSE,
            Pdu::DataIn(_) => opcode::DATA_IN,
            Pdu::LogoutResponse(_) => opcode::LOGOUT_RESPONSE,
            Pdu::R2t(_) => opcode::R2T,
            Pdu::AsyncMessage(_) => opcode::ASYNC_MESSAGE,
            Pdu::Reject(_) => opcode::REJECT,
        }
    }

    /// The Initiator Task Tag. Asynchronous Message and Reject carry the reserved 0xffffffff
    /// (RFC 7143 sections 11.9 and 11.17).
    pub fn itt(&self) -> Itt {
        match self {
            Pdu::NopOut(p) => p.itt,
            Pdu::ScsiCommand(p) => p.itt,
            Pdu::TaskMgmtRequest(p) => p.itt,
            Pdu::LoginRequest(p) => p.itt,
            Pdu::TextRequest(p) => p.itt,
            Pdu::DataOut(p) => p.itt,
            Pdu::LogoutRequest(p) => p.itt,
            Pdu::SnackRequest(p) => p.itt,
            Pdu::NopIn(p) => p.itt,
            Pdu::ScsiResponse(p) => p.itt,
            Pdu::TaskMgmtResponse(p) => p.itt,
            Pdu::LoginResponse(p) => p.itt,
            Pdu::TextResponse(p) => p.itt,
            Pdu::DataIn(p) => p.itt,
            Pdu::LogoutResponse(p) => p.itt,
            Pdu::R2t(p) => p.itt,
            Pdu::AsyncMessage(_) | Pdu::Reject(_) => Itt::RESERVED,
        }
    }

    /// The data segment (padding excluded); empty for PDUs that carry none.
    pub fn data(&self) -> &Bytes {
        match self {
            Pdu::NopOut(p) => &p.data,
            Pdu::ScsiCommand(p) => &p.data,
            Pdu::LoginRequest(p) => &p.data,
            Pdu::TextRequest(p) => &p.data,
            Pdu::DataOut(p) => &p.data,
            Pdu::NopIn(p) => &p.data,
            Pdu::ScsiResponse(p) => &p.data,
            Pdu::LoginResponse(p) => &p.data,
            Pdu::TextResponse(p) => &p.data,
            Pdu::DataIn(p) => &p.data,
            Pdu::AsyncMessage(p) => &p.data,
            Pdu::Reject(p) => &p.data,
            Pdu::TaskMgmtRequest(_)
            | Pdu::LogoutRequest(_)
            | Pdu::SnackRequest(_)
            | Pdu::TaskMgmtResponse(_)
            | Pdu::LogoutResponse(_)
            | Pdu::R2t(_) => &EMPTY,
        }
    }

    /// The data segment exactly as emitted: [`Pdu::data`] cut to [`MAX_DATA_SEGMENT_LEN`] so it
    /// always matches the DataSegmentLength written by [`Pdu::emit_header`].
    pub fn wire_data(&self) -> Bytes {
        let data = self.data();
        let max = MAX_DATA_SEGMENT_LEN as usize;
        if data.len() > max {
            data.slice(..max)
        } else {
            data.clone()
        }
    }

    /// Appends the BHS and AHS (no digest, no data) to `out`. DataSegmentLength is the length
    /// of [`Pdu::wire_data`].
    pub fn emit_header(&self, out: &mut BytesMut) {
        let mut h = Bhs::zeroed();
        let data_len = u32::try_from(self.data().len()).unwrap_or(u32::MAX);
        h.set_data_segment_len(data_len.min(MAX_DATA_SEGMENT_LEN));
        let mut ahs = BytesMut::new();
        self.fill(&mut h, &mut ahs);
        h.set_total_ahs_len(ahs.len());
        out.reserve(BHS_LEN + ahs.len());
        out.put_slice(&h.into_inner());
        out.put_slice(&ahs);
    }

    /// Writes the opcode-specific fields into `h`, and any AHS into `ahs`.
    fn fill(&self, h: &mut Bhs<[u8; BHS_LEN]>, ahs: &mut BytesMut) {
        let op = self.opcode();
        let final_bit = |f: bool| if f { bits::FINAL } else { 0 };
        let bit = |on: bool, mask: u8| if on { mask } else { 0 };
        h.set_u32(field::ITT, self.itt().0);
        match self {
            Pdu::NopOut(p) => {
                h.set_opcode(op, p.immediate);
                h.set_u8(field::FLAGS, bits::FINAL);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
            }
            Pdu::ScsiCommand(p) => {
                h.set_opcode(op, p.immediate);
                let f = final_bit(p.final_bit)
                    | bit(p.read, flag::READ)
                    | bit(p.write, flag::WRITE)
                    | p.attr.code();
                h.set_u8(field::FLAGS, f);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.expected_data_transfer_length);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
                let bidi_len = if p.bidi_read_length.is_some() { 8 } else { 0 };
                let cdb = &p.cdb[..p.cdb.len().min(MAX_CDB_LEN - bidi_len)];
                h.set_bytes(field::CDB, &cdb[..cdb.len().min(16)]);
                if let Some(ext) = cdb.get(16..).filter(|ext| !ext.is_empty()) {
                    // RFC 7143 section 11.2.2.3: AHSLength = CDBLength - 15, AHSType 1,
                    // a reserved byte, then the ExtendedCDB bytes, padded to 4.
                    put_ahs(ahs, ahs_type::EXTENDED_CDB, ext);
                }
                if let Some(len) = p.bidi_read_length {
                    // RFC 7143 section 11.2.2.4: AHSLength = 5, AHSType 2, reserved byte,
                    // Expected Read-Data Length.
                    put_ahs(ahs, ahs_type::BIDI_READ_LENGTH, &len.to_be_bytes());
                }
            }
            Pdu::TaskMgmtRequest(p) => {
                h.set_opcode(op, p.immediate);
                h.set_u8(field::FLAGS, bits::FINAL | (p.function.code() & 0x7f));
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.referenced_task_tag.0);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
                h.set_u32(field::WORD32, p.ref_cmd_sn.0);
                h.set_u32(field::WORD36, p.exp_data_sn);
            }
            Pdu::LoginRequest(p) => {
                // RFC 7143 section 11.12: the I bit of a Login Request is always 1.
                h.set_opcode(op, true);
                let stages = ((p.csg & 3) << 2) | (p.nsg & 3);
                let f = final_bit(p.transit) | bit(p.cont, flag::CONTINUE) | stages;
                h.set_u8(field::FLAGS, f);
                h.set_u8(field::BYTE2, p.version_max);
                h.set_u8(field::BYTE3, p.version_min);
                h.set_bytes(field::ISID, &p.isid.0);
                h.set_u16(field::TSIH, p.tsih.0);
                h.set_u16(field::CID, p.cid);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
            }
            Pdu::TextRequest(p) => {
                h.set_opcode(op, p.immediate);
                h.set_u8(
                    field::FLAGS,
                    final_bit(p.final_bit) | bit(p.cont, flag::CONTINUE),
                );
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
            }
            Pdu::DataOut(p) => {
                h.set_opcode(op, false);
                h.set_u8(field::FLAGS, final_bit(p.final_bit));
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
                h.set_u32(field::WORD36, p.data_sn);
                h.set_u32(field::WORD40, p.buffer_offset);
            }
            Pdu::LogoutRequest(p) => {
                h.set_opcode(op, p.immediate);
                h.set_u8(field::FLAGS, bits::FINAL | (p.reason.code() & 0x7f));
                h.set_u16(field::CID, p.cid);
                h.set_u32(field::WORD24, p.cmd_sn.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
            }
            Pdu::SnackRequest(p) => {
                h.set_opcode(op, false);
                h.set_u8(field::FLAGS, bits::FINAL | (p.snack_type.code() & 0x0f));
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD28, p.exp_stat_sn.0);
                h.set_u32(field::WORD40, p.beg_run);
                h.set_u32(field::WORD44, p.run_length);
            }
            Pdu::NopIn(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
            }
            Pdu::ScsiResponse(p) => {
                let f = bits::FINAL
                    | bit(p.bidi_overflow, flag::BIDI_OVERFLOW)
                    | bit(p.bidi_underflow, flag::BIDI_UNDERFLOW)
                    | bit(p.overflow, flag::RESP_OVERFLOW)
                    | bit(p.underflow, flag::RESP_UNDERFLOW);
                response(h, op, f, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE2, p.response.code());
                h.set_u8(field::BYTE3, p.status.code());
                h.set_u32(field::WORD20, p.snack_tag);
                h.set_u32(field::WORD36, p.exp_data_sn);
                h.set_u32(field::WORD40, p.bidi_residual);
                h.set_u32(field::WORD44, p.residual);
            }
            Pdu::TaskMgmtResponse(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE2, p.response.code());
            }
            Pdu::LoginResponse(p) => {
                let stages = ((p.csg & 3) << 2) | (p.nsg & 3);
                let f = final_bit(p.transit) | bit(p.cont, flag::CONTINUE) | stages;
                response(h, op, f, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE2, p.version_max);
                h.set_u8(field::BYTE3, p.version_active);
                h.set_bytes(field::ISID, &p.isid.0);
                h.set_u16(field::TSIH, p.tsih.0);
                h.set_u8(field::WORD36, p.status.class);
                h.set_u8(field::WORD36 + 1, p.status.detail);
            }
            Pdu::TextResponse(p) => {
                let f = final_bit(p.final_bit) | bit(p.cont, flag::CONTINUE);
                response(h, op, f, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
            }
            Pdu::DataIn(p) => {
                let f = final_bit(p.final_bit)
                    | bit(p.ack, flag::ACK)
                    | bit(p.overflow, flag::DATA_IN_OVERFLOW)
                    | bit(p.underflow, flag::DATA_IN_UNDERFLOW)
                    | bit(p.status_present, flag::STATUS);
                response(h, op, f, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE3, p.status.code());
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD36, p.data_sn);
                h.set_u32(field::WORD40, p.buffer_offset);
                h.set_u32(field::WORD44, p.residual);
            }
            Pdu::LogoutResponse(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE2, p.response.code());
                h.set_u16(field::WORD40, p.time2wait);
                h.set_u16(field::WORD40 + 2, p.time2retain);
            }
            Pdu::R2t(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u32(field::WORD20, p.ttt.0);
                h.set_u32(field::WORD36, p.r2t_sn);
                h.set_u32(field::WORD40, p.buffer_offset);
                h.set_u32(field::WORD44, p.desired_data_transfer_length);
            }
            Pdu::AsyncMessage(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u64(field::LUN, p.lun.0);
                h.set_u8(field::WORD36, p.async_event.code());
                h.set_u8(field::WORD36 + 1, p.async_vcode);
                h.set_u16(field::WORD36 + 2, p.parameter1);
                h.set_u16(field::WORD40, p.parameter2);
                h.set_u16(field::WORD40 + 2, p.parameter3);
            }
            Pdu::Reject(p) => {
                response(h, op, bits::FINAL, [p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn]);
                h.set_u8(field::BYTE2, p.reason.code());
                h.set_u32(field::WORD36, p.data_sn);
            }
        }
    }
}

/// Byte 0 and 1 plus StatSN, ExpCmdSN and MaxCmdSN (bytes 24-35), common to target PDUs.
fn response(
    h: &mut Bhs<[u8; BHS_LEN]>,
    op: u8,
    flags: u8,
    [stat_sn, exp_cmd_sn, max_cmd_sn]: [crate::seq::SeqNum; 3],
) {
    h.set_opcode(op, false);
    h.set_u8(field::FLAGS, flags);
    h.set_u32(field::WORD24, stat_sn.0);
    h.set_u32(field::WORD28, exp_cmd_sn.0);
    h.set_u32(field::WORD32, max_cmd_sn.0);
}

/// Appends one AHS whose AHS-Specific part is a reserved zero byte followed by `body`
/// (RFC 7143 section 11.2.2), padded to a multiple of 4 bytes.
fn put_ahs(ahs: &mut BytesMut, ty: u8, body: &[u8]) {
    // Callers bound `body` by MAX_CDB_LEN, so the length fits a u16.
    let len = u16::try_from(body.len() + 1).unwrap_or(u16::MAX);
    ahs.put_u16(len);
    ahs.put_u8(ty);
    ahs.put_u8(0);
    ahs.put_slice(body);
    let pad = (4 - ahs.len() % 4) % 4;
    ahs.put_bytes(0, pad);
}
