//! Typed PDU values: one struct per PDU of RFC 7143 section 11.
//!
//! These hold only values the wire can carry; reserved fields are not represented (they are
//! emitted as zero and ignored on parse, RFC 7143 section 11: "Reserved fields ... MUST be set
//! to zero by the sender and ignored by the receiver"). Data segments are `Bytes` so that a PDU
//! parsed from a frozen receive buffer shares it instead of copying.

use bytes::Bytes;

use super::codes::{
    AsyncEvent, LoginStatus, LogoutReason, LogoutResponseCode, RejectReason, ScsiResponseCode,
    ScsiStatus, SnackType, TmfFunction, TmfResponse,
};
use super::Cdb;
use crate::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};

/// Login stages (CSG/NSG, RFC 7143 section 11.12.3).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum Stage {
    /// 0: SecurityNegotiation.
    Security,
    /// 1: LoginOperationalNegotiation.
    Operational,
    /// 3: FullFeaturePhase.
    FullFeature,
}

impl Stage {
    /// The two-bit wire code.
    pub const fn code(self) -> u8 {
        match self {
            Stage::Security => 0,
            Stage::Operational => 1,
            Stage::FullFeature => 3,
        }
    }

    /// Decodes a two-bit stage code; 2 is reserved and yields `None`.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code & 3 {
            0 => Some(Stage::Security),
            1 => Some(Stage::Operational),
            3 => Some(Stage::FullFeature),
            _ => None,
        }
    }
}

/// SCSI task attributes (RFC 7143 section 11.3.1 ATTR field).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, Default)]
pub enum TaskAttr {
    /// 0: Untagged.
    Untagged,
    /// 1: Simple.
    #[default]
    Simple,
    /// 2: Ordered.
    Ordered,
    /// 3: Head of queue.
    HeadOfQueue,
    /// 4: ACA.
    Aca,
    /// 5-7: reserved values, kept so that parse and emit round-trip.
    Reserved(u8),
}

impl TaskAttr {
    /// The three-bit wire code.
    pub const fn code(self) -> u8 {
        match self {
            TaskAttr::Untagged => 0,
            TaskAttr::Simple => 1,
            TaskAttr::Ordered => 2,
            TaskAttr::HeadOfQueue => 3,
            TaskAttr::Aca => 4,
            TaskAttr::Reserved(c) => c & 7,
        }
    }

    /// Decodes the three-bit code.
    pub const fn from_code(code: u8) -> Self {
        match code & 7 {
            0 => TaskAttr::Untagged,
            1 => TaskAttr::Simple,
            2 => TaskAttr::Ordered,
            3 => TaskAttr::HeadOfQueue,
            4 => TaskAttr::Aca,
            c => TaskAttr::Reserved(c),
        }
    }
}

/// NOP-Out (opcode 0x00, RFC 7143 section 11.18).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct NopOut {
    /// I bit.
    pub immediate: bool,
    /// LUN (relevant only when TTT is not reserved).
    pub lun: Lun,
    /// 0xffffffff when this answers a NOP-In (no response wanted).
    pub itt: Itt,
    /// Echoes a NOP-In's TTT, or 0xffffffff.
    pub ttt: Ttt,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// Ping data.
    pub data: Bytes,
}

/// NOP-In (opcode 0x20, RFC 7143 section 11.19).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct NopIn {
    /// LUN (echoed, or set when TTT is not reserved).
    pub lun: Lun,
    /// ITT: echoes a NOP-Out's, or 0xffffffff for a target-initiated ping.
    pub itt: Itt,
    /// 0xffffffff when answering; a real tag when the target wants a NOP-Out back.
    pub ttt: Ttt,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// Ping data (echoed from the NOP-Out).
    pub data: Bytes,
}

/// SCSI Command (opcode 0x01, RFC 7143 section 11.3).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ScsiCommand {
    /// I bit.
    pub immediate: bool,
    /// F bit: no unsolicited Data-Out PDUs follow.
    pub final_bit: bool,
    /// R bit: data is expected from the target.
    pub read: bool,
    /// W bit: data is expected from the initiator.
    pub write: bool,
    /// Task attribute.
    pub attr: TaskAttr,
    /// LUN.
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// Expected Data Transfer Length (for bidirectional: the write length).
    pub expected_data_transfer_length: u32,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// The whole CDB: the 16 bytes of the BHS field, followed by the rest from an Extended CDB
    /// AHS when the CDB is longer than 16 bytes. Always at least 16 bytes long.
    pub cdb: Cdb,
    /// Expected Bidirectional Read Data Length AHS (type 2), when present.
    pub bidi_read_length: Option<u32>,
    /// Immediate data.
    pub data: Bytes,
}

/// SCSI Response (opcode 0x21, RFC 7143 section 11.4).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ScsiResponse {
    /// o bit: bidirectional read residual overflow.
    pub bidi_overflow: bool,
    /// u bit: bidirectional read residual underflow.
    pub bidi_underflow: bool,
    /// O bit: residual overflow.
    pub overflow: bool,
    /// U bit: residual underflow.
    pub underflow: bool,
    /// iSCSI response code (0x00 command completed at target, 0x01 target failure).
    pub response: ScsiResponseCode,
    /// SCSI status byte.
    pub status: ScsiStatus,
    /// ITT.
    pub itt: Itt,
    /// SNACK Tag.
    pub snack_tag: u32,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// ExpDataSN: number of Data-In PDUs sent for this command (0 for a write).
    pub exp_data_sn: u32,
    /// Bidirectional Read Residual Count.
    pub bidi_residual: u32,
    /// Residual Count.
    pub residual: u32,
    /// Data segment: 2-byte SenseLength, sense data, then response data (section 11.4.7).
    pub data: Bytes,
}

/// Task Management Function Request (opcode 0x02, RFC 7143 section 11.5).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TaskMgmtRequest {
    /// I bit.
    pub immediate: bool,
    /// Function code (1 ABORT TASK ... 8 TASK REASSIGN, and others). A 7-bit field: emit
    /// keeps only the low 7 bits of an `Unknown` code.
    pub function: TmfFunction,
    /// LUN.
    pub lun: Lun,
    /// ITT of this request.
    pub itt: Itt,
    /// Referenced Task Tag (ITT of the task to abort), 0xffffffff when not relevant.
    pub referenced_task_tag: Itt,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// RefCmdSN.
    pub ref_cmd_sn: SeqNum,
    /// ExpDataSN.
    pub exp_data_sn: u32,
}

/// Task Management Function Response (opcode 0x22, RFC 7143 section 11.6).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TaskMgmtResponse {
    /// Response code (0 function complete ... 255 function rejected).
    pub response: TmfResponse,
    /// ITT.
    pub itt: Itt,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
}

/// Login Request (opcode 0x03, always immediate, RFC 7143 section 11.12).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LoginRequest {
    /// T bit: the initiator is ready to move to `nsg`.
    pub transit: bool,
    /// C bit: the text continues in the next PDU.
    pub cont: bool,
    /// Current stage (CSG). Kept raw so a reserved value can be refused with a Login status.
    pub csg: u8,
    /// Next stage (NSG), raw two-bit code.
    pub nsg: u8,
    /// Version-max.
    pub version_max: u8,
    /// Version-min.
    pub version_min: u8,
    /// ISID.
    pub isid: Isid,
    /// TSIH.
    pub tsih: Tsih,
    /// ITT.
    pub itt: Itt,
    /// Connection ID.
    pub cid: u16,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// Text key=value pairs.
    pub data: Bytes,
}

/// Login Response (opcode 0x23, RFC 7143 section 11.13).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LoginResponse {
    /// T bit.
    pub transit: bool,
    /// C bit.
    pub cont: bool,
    /// CSG, raw two-bit code.
    pub csg: u8,
    /// NSG, raw two-bit code.
    pub nsg: u8,
    /// Version-max.
    pub version_max: u8,
    /// Version-active.
    pub version_active: u8,
    /// ISID.
    pub isid: Isid,
    /// TSIH.
    pub tsih: Tsih,
    /// ITT.
    pub itt: Itt,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// Status-Class and Status-Detail (section 11.13.5).
    pub status: LoginStatus,
    /// Text key=value pairs.
    pub data: Bytes,
}

/// Text Request (opcode 0x04, RFC 7143 section 11.10).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TextRequest {
    /// I bit.
    pub immediate: bool,
    /// F bit.
    pub final_bit: bool,
    /// C bit.
    pub cont: bool,
    /// LUN (reserved unless a key needs it).
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// TTT: 0xffffffff for a new request, else echoes the target's tag to continue.
    pub ttt: Ttt,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// Text key=value pairs.
    pub data: Bytes,
}

/// Text Response (opcode 0x24, RFC 7143 section 11.11).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TextResponse {
    /// F bit.
    pub final_bit: bool,
    /// C bit.
    pub cont: bool,
    /// LUN.
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// TTT: not reserved when more response text follows.
    pub ttt: Ttt,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// Text key=value pairs.
    pub data: Bytes,
}

/// SCSI Data-Out (opcode 0x05, RFC 7143 section 11.7).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct DataOut {
    /// F bit: last PDU of the sequence.
    pub final_bit: bool,
    /// LUN (must echo the R2T's for solicited data).
    pub lun: Lun,
    /// ITT of the command.
    pub itt: Itt,
    /// TTT of the R2T, or 0xffffffff for unsolicited data.
    pub ttt: Ttt,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// DataSN within the sequence.
    pub data_sn: u32,
    /// Buffer Offset.
    pub buffer_offset: u32,
    /// The data.
    pub data: Bytes,
}

/// SCSI Data-In (opcode 0x25, RFC 7143 section 11.7).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct DataIn {
    /// F bit.
    pub final_bit: bool,
    /// A bit: acknowledge requested (ErrorRecoveryLevel > 0).
    pub ack: bool,
    /// O bit (only with S).
    pub overflow: bool,
    /// U bit (only with S).
    pub underflow: bool,
    /// S bit: status is carried in this PDU (phase collapse).
    pub status_present: bool,
    /// SCSI status, meaningful only with S.
    pub status: ScsiStatus,
    /// LUN (with A bit set, else reserved).
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// TTT (with A bit set, else reserved).
    pub ttt: Ttt,
    /// StatSN, meaningful only with S.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// DataSN.
    pub data_sn: u32,
    /// Buffer Offset.
    pub buffer_offset: u32,
    /// Residual Count, meaningful only with S.
    pub residual: u32,
    /// The data.
    pub data: Bytes,
}

/// Ready To Transfer (opcode 0x31, RFC 7143 section 11.8).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct R2t {
    /// LUN.
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// TTT the initiator echoes in the Data-Out.
    pub ttt: Ttt,
    /// StatSN (the next one, not incremented by R2T).
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// R2TSN.
    pub r2t_sn: u32,
    /// Buffer Offset.
    pub buffer_offset: u32,
    /// Desired Data Transfer Length.
    pub desired_data_transfer_length: u32,
}

/// Asynchronous Message (opcode 0x32, RFC 7143 section 11.9).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct AsyncMessage {
    /// LUN (for SCSI async events).
    pub lun: Lun,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// AsyncEvent code (1 = target requests logout, ...).
    pub async_event: AsyncEvent,
    /// AsyncVCode.
    pub async_vcode: u8,
    /// Parameter1.
    pub parameter1: u16,
    /// Parameter2.
    pub parameter2: u16,
    /// Parameter3.
    pub parameter3: u16,
    /// Sense data and iSCSI event data.
    pub data: Bytes,
}

/// Logout Request (opcode 0x06, RFC 7143 section 11.14).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LogoutRequest {
    /// I bit.
    pub immediate: bool,
    /// Reason code (0 close session, 1 close connection, 2 remove connection for recovery).
    /// A 7-bit field: emit keeps only the low 7 bits of an `Unknown` code.
    pub reason: LogoutReason,
    /// ITT.
    pub itt: Itt,
    /// CID of the connection to close (reasons 1 and 2).
    pub cid: u16,
    /// CmdSN.
    pub cmd_sn: SeqNum,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
}

/// Logout Response (opcode 0x26, RFC 7143 section 11.15).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LogoutResponse {
    /// Response code (0 closed successfully, 1 CID not found, 2 recovery not supported,
    /// 3 cleanup failed).
    pub response: LogoutResponseCode,
    /// ITT.
    pub itt: Itt,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// Time2Wait.
    pub time2wait: u16,
    /// Time2Retain.
    pub time2retain: u16,
}

/// SNACK Request (opcode 0x10, RFC 7143 section 11.16).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct SnackRequest {
    /// Type (0 Data/R2T, 1 Status, 2 DataACK, 3 R-Data). A 4-bit field: emit keeps only the
    /// low 4 bits of an `Unknown` code.
    pub snack_type: SnackType,
    /// LUN.
    pub lun: Lun,
    /// ITT.
    pub itt: Itt,
    /// TTT (or SNACK Tag).
    pub ttt: Ttt,
    /// ExpStatSN.
    pub exp_stat_sn: SeqNum,
    /// BegRun.
    pub beg_run: u32,
    /// RunLength.
    pub run_length: u32,
}

/// Reject (opcode 0x3f, RFC 7143 section 11.17).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Reject {
    /// Reason code (section 11.17.1).
    pub reason: RejectReason,
    /// StatSN.
    pub stat_sn: SeqNum,
    /// ExpCmdSN.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN.
    pub max_cmd_sn: SeqNum,
    /// DataSN/R2TSN (for data SNACK rejects), else 0.
    pub data_sn: u32,
    /// The complete header of the rejected PDU (48 bytes).
    pub data: Bytes,
}

/// Opcodes of RFC 7143 section 11.2.1.2, without the I bit.
pub mod opcode {
    /// NOP-Out.
    pub const NOP_OUT: u8 = 0x00;
    /// SCSI Command.
    pub const SCSI_COMMAND: u8 = 0x01;
    /// SCSI Task Management Function Request.
    pub const TASK_MGMT_REQUEST: u8 = 0x02;
    /// Login Request.
    pub const LOGIN_REQUEST: u8 = 0x03;
    /// Text Request.
    pub const TEXT_REQUEST: u8 = 0x04;
    /// SCSI Data-Out.
    pub const DATA_OUT: u8 = 0x05;
    /// Logout Request.
    pub const LOGOUT_REQUEST: u8 = 0x06;
    /// SNACK Request.
    pub const SNACK_REQUEST: u8 = 0x10;
    /// NOP-In.
    pub const NOP_IN: u8 = 0x20;
    /// SCSI Response.
    pub const SCSI_RESPONSE: u8 = 0x21;
    /// SCSI Task Management Function Response.
    pub const TASK_MGMT_RESPONSE: u8 = 0x22;
    /// Login Response.
    pub const LOGIN_RESPONSE: u8 = 0x23;
    /// Text Response.
    pub const TEXT_RESPONSE: u8 = 0x24;
    /// SCSI Data-In.
    pub const DATA_IN: u8 = 0x25;
    /// Logout Response.
    pub const LOGOUT_RESPONSE: u8 = 0x26;
    /// Ready To Transfer.
    pub const R2T: u8 = 0x31;
    /// Asynchronous Message.
    pub const ASYNC_MESSAGE: u8 = 0x32;
    /// Reject.
    pub const REJECT: u8 = 0x3f;
}
