//! Proptest strategies for every PDU, for round-trip and framing property tests here and in
//! other crates (enable the `proptest` feature).
//!
//! Every value generated is representable on the wire, so `parse(emit(pdu)) == pdu` holds:
//! CDBs are 16..=[`MAX_CDB_LEN`] bytes (capped lower to keep cases small), bit fields stay within
//! their width, and data segments are short. Code fields ([`super::codes`]) take any value of
//! their width, decoded through `From`, so unnamed codes (`Unknown`) are generated too.

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;

use super::codes::{
    AsyncEvent, LoginStatus, LogoutReason, LogoutResponseCode, RejectReason, ScsiResponseCode,
    ScsiStatus, SnackType, TmfFunction, TmfResponse,
};
use super::types::*;
use super::{Cdb, Pdu, MAX_CDB_LEN};
use crate::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};

/// Any PDU of any opcode, both directions.
pub fn pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        nop_out().prop_map(Pdu::NopOut),
        scsi_command().prop_map(Pdu::ScsiCommand),
        task_mgmt_request().prop_map(Pdu::TaskMgmtRequest),
        login_request().prop_map(Pdu::LoginRequest),
        text_request().prop_map(Pdu::TextRequest),
        data_out().prop_map(Pdu::DataOut),
        logout_request().prop_map(Pdu::LogoutRequest),
        snack_request().prop_map(Pdu::SnackRequest),
        nop_in().prop_map(Pdu::NopIn),
        scsi_response().prop_map(Pdu::ScsiResponse),
        task_mgmt_response().prop_map(Pdu::TaskMgmtResponse),
        login_response().prop_map(Pdu::LoginResponse),
        text_response().prop_map(Pdu::TextResponse),
        data_in().prop_map(Pdu::DataIn),
        logout_response().prop_map(Pdu::LogoutResponse),
        r2t().prop_map(Pdu::R2t),
        async_message().prop_map(Pdu::AsyncMessage),
        reject().prop_map(Pdu::Reject),
    ]
}

/// A data segment of 0 to 300 bytes (covers every padding length).
pub fn data() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..300).prop_map(Bytes::from)
}

/// A CDB of 16 to 260 bytes (the Extended CDB AHS is used above 16).
pub fn cdb() -> impl Strategy<Value = Cdb> {
    vec(any::<u8>(), 16..=260.min(MAX_CDB_LEN)).prop_map(Cdb::from)
}

/// Any serial number.
pub fn seq() -> impl Strategy<Value = SeqNum> {
    any::<u32>().prop_map(SeqNum)
}

/// Any LUN field.
pub fn lun() -> impl Strategy<Value = Lun> {
    any::<u64>().prop_map(Lun)
}

/// Any ITT, the reserved value included.
pub fn itt() -> impl Strategy<Value = Itt> {
    any::<u32>().prop_map(Itt)
}

/// Any TTT, the reserved value included.
pub fn ttt() -> impl Strategy<Value = Ttt> {
    any::<u32>().prop_map(Ttt)
}

/// Any ISID.
pub fn isid() -> impl Strategy<Value = Isid> {
    any::<[u8; 6]>().prop_map(Isid)
}

/// NOP-Out.
pub fn nop_out() -> impl Strategy<Value = NopOut> {
    (any::<bool>(), lun(), itt(), ttt(), seq(), seq(), data()).prop_map(
        |(immediate, lun, itt, ttt, cmd_sn, exp_stat_sn, data)| NopOut {
            immediate,
            lun,
            itt,
            ttt,
            cmd_sn,
            exp_stat_sn,
            data,
        },
    )
}

/// SCSI Command, with and without the Extended CDB and bidirectional AHSs.
pub fn scsi_command() -> impl Strategy<Value = ScsiCommand> {
    let flags = (any::<[bool; 4]>(), 0u8..8);
    let fields = (lun(), itt(), any::<u32>(), seq(), seq());
    let payload = (cdb(), proptest::option::of(any::<u32>()), data());
    (flags, fields, payload).prop_map(|(([i, f, r, w], attr), fields, payload)| {
        let (lun, itt, expected_data_transfer_length, cmd_sn, exp_stat_sn) = fields;
        let (cdb, bidi_read_length, data) = payload;
        ScsiCommand {
            immediate: i,
            final_bit: f,
            read: r,
            write: w,
            attr: TaskAttr::from_code(attr),
            lun,
            itt,
            expected_data_transfer_length,
            cmd_sn,
            exp_stat_sn,
            cdb,
            bidi_read_length,
            data,
        }
    })
}

/// Task Management Function Request.
pub fn task_mgmt_request() -> impl Strategy<Value = TaskMgmtRequest> {
    let a = (any::<bool>(), 0u8..0x80, lun(), itt(), itt());
    let b = (seq(), seq(), seq(), any::<u32>());
    (a, b).prop_map(
        |(
            (immediate, function, lun, itt, referenced_task_tag),
            (cmd_sn, exp_stat_sn, ref_cmd_sn, exp_data_sn),
        )| {
            TaskMgmtRequest {
                immediate,
                function: TmfFunction::from(function),
                lun,
                itt,
                referenced_task_tag,
                cmd_sn,
                exp_stat_sn,
                ref_cmd_sn,
                exp_data_sn,
            }
        },
    )
}

/// Login Request (stage codes include the reserved value 2).
pub fn login_request() -> impl Strategy<Value = LoginRequest> {
    let a = (any::<[bool; 2]>(), 0u8..4, 0u8..4, any::<[u8; 2]>());
    let b = (
        isid(),
        any::<u16>(),
        itt(),
        any::<u16>(),
        seq(),
        seq(),
        data(),
    );
    (a, b).prop_map(|(([transit, cont], csg, nsg, [vmax, vmin]), b)| {
        let (isid, tsih, itt, cid, cmd_sn, exp_stat_sn, data) = b;
        LoginRequest {
            transit,
            cont,
            csg,
            nsg,
            version_max: vmax,
            version_min: vmin,
            isid,
            tsih: Tsih(tsih),
            itt,
            cid,
            cmd_sn,
            exp_stat_sn,
            data,
        }
    })
}

/// Text Request.
pub fn text_request() -> impl Strategy<Value = TextRequest> {
    let a = (any::<[bool; 3]>(), lun(), itt(), ttt());
    (a, seq(), seq(), data()).prop_map(
        |(([immediate, final_bit, cont], lun, itt, ttt), cmd_sn, exp_stat_sn, data)| TextRequest {
            immediate,
            final_bit,
            cont,
            lun,
            itt,
            ttt,
            cmd_sn,
            exp_stat_sn,
            data,
        },
    )
}

/// SCSI Data-Out.
pub fn data_out() -> impl Strategy<Value = DataOut> {
    let a = (any::<bool>(), lun(), itt(), ttt(), seq());
    (a, any::<[u32; 2]>(), data()).prop_map(
        |((final_bit, lun, itt, ttt, exp_stat_sn), [data_sn, buffer_offset], data)| DataOut {
            final_bit,
            lun,
            itt,
            ttt,
            exp_stat_sn,
            data_sn,
            buffer_offset,
            data,
        },
    )
}

/// Logout Request.
pub fn logout_request() -> impl Strategy<Value = LogoutRequest> {
    (any::<bool>(), 0u8..0x80, itt(), any::<u16>(), seq(), seq()).prop_map(
        |(immediate, reason, itt, cid, cmd_sn, exp_stat_sn)| LogoutRequest {
            immediate,
            reason: LogoutReason::from(reason),
            itt,
            cid,
            cmd_sn,
            exp_stat_sn,
        },
    )
}

/// SNACK Request.
pub fn snack_request() -> impl Strategy<Value = SnackRequest> {
    (0u8..16, lun(), itt(), ttt(), seq(), any::<[u32; 2]>()).prop_map(
        |(snack_type, lun, itt, ttt, exp_stat_sn, [beg_run, run_length])| SnackRequest {
            snack_type: SnackType::from(snack_type),
            lun,
            itt,
            ttt,
            exp_stat_sn,
            beg_run,
            run_length,
        },
    )
}

/// NOP-In.
pub fn nop_in() -> impl Strategy<Value = NopIn> {
    (lun(), itt(), ttt(), seq(), seq(), seq(), data()).prop_map(
        |(lun, itt, ttt, stat_sn, exp_cmd_sn, max_cmd_sn, data)| NopIn {
            lun,
            itt,
            ttt,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            data,
        },
    )
}

/// SCSI Response.
pub fn scsi_response() -> impl Strategy<Value = ScsiResponse> {
    let a = (any::<[bool; 4]>(), any::<[u8; 2]>(), itt(), any::<u32>());
    let b = (seq(), seq(), seq(), any::<[u32; 3]>(), data());
    (a, b).prop_map(
        |(([o, u, big_o, big_u], [response, status], itt, snack_tag), b)| {
            let (stat_sn, exp_cmd_sn, max_cmd_sn, [exp_data_sn, bidi_residual, residual], data) = b;
            ScsiResponse {
                bidi_overflow: o,
                bidi_underflow: u,
                overflow: big_o,
                underflow: big_u,
                response: ScsiResponseCode::from(response),
                status: ScsiStatus::from(status),
                itt,
                snack_tag,
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                exp_data_sn,
                bidi_residual,
                residual,
                data,
            }
        },
    )
}

/// Task Management Function Response.
pub fn task_mgmt_response() -> impl Strategy<Value = TaskMgmtResponse> {
    (any::<u8>(), itt(), seq(), seq(), seq()).prop_map(
        |(response, itt, stat_sn, exp_cmd_sn, max_cmd_sn)| TaskMgmtResponse {
            response: TmfResponse::from(response),
            itt,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
        },
    )
}

/// Login Response.
pub fn login_response() -> impl Strategy<Value = LoginResponse> {
    let a = (any::<[bool; 2]>(), 0u8..4, 0u8..4, any::<[u8; 4]>());
    let b = (isid(), any::<u16>(), itt(), seq(), seq(), seq(), data());
    (a, b).prop_map(
        |(([transit, cont], csg, nsg, [vmax, vact, class, detail]), b)| {
            let (isid, tsih, itt, stat_sn, exp_cmd_sn, max_cmd_sn, data) = b;
            LoginResponse {
                transit,
                cont,
                csg,
                nsg,
                version_max: vmax,
                version_active: vact,
                isid,
                tsih: Tsih(tsih),
                itt,
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                status: LoginStatus::new(class, detail),
                data,
            }
        },
    )
}

/// Text Response.
pub fn text_response() -> impl Strategy<Value = TextResponse> {
    let a = (any::<[bool; 2]>(), lun(), itt(), ttt());
    (a, seq(), seq(), seq(), data()).prop_map(
        |(([final_bit, cont], lun, itt, ttt), stat_sn, exp_cmd_sn, max_cmd_sn, data)| {
            TextResponse {
                final_bit,
                cont,
                lun,
                itt,
                ttt,
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                data,
            }
        },
    )
}

/// SCSI Data-In, with and without the S bit.
pub fn data_in() -> impl Strategy<Value = DataIn> {
    let a = (any::<[bool; 5]>(), any::<u8>(), lun(), itt(), ttt());
    let b = (seq(), seq(), seq(), any::<[u32; 3]>(), data());
    (a, b).prop_map(|(([f, ack, o, u, s], status, lun, itt, ttt), b)| {
        let (stat_sn, exp_cmd_sn, max_cmd_sn, [data_sn, buffer_offset, residual], data) = b;
        DataIn {
            final_bit: f,
            ack,
            overflow: o,
            underflow: u,
            status_present: s,
            status: ScsiStatus::from(status),
            lun,
            itt,
            ttt,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            data_sn,
            buffer_offset,
            residual,
            data,
        }
    })
}

/// Logout Response.
pub fn logout_response() -> impl Strategy<Value = LogoutResponse> {
    (any::<u8>(), itt(), seq(), seq(), seq(), any::<[u16; 2]>()).prop_map(
        |(response, itt, stat_sn, exp_cmd_sn, max_cmd_sn, [time2wait, time2retain])| {
            LogoutResponse {
                response: LogoutResponseCode::from(response),
                itt,
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                time2wait,
                time2retain,
            }
        },
    )
}

/// Ready To Transfer.
pub fn r2t() -> impl Strategy<Value = R2t> {
    (lun(), itt(), ttt(), seq(), seq(), seq(), any::<[u32; 3]>()).prop_map(
        |(lun, itt, ttt, stat_sn, exp_cmd_sn, max_cmd_sn, [r2t_sn, buffer_offset, desired])| R2t {
            lun,
            itt,
            ttt,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            r2t_sn,
            buffer_offset,
            desired_data_transfer_length: desired,
        },
    )
}

/// Asynchronous Message.
pub fn async_message() -> impl Strategy<Value = AsyncMessage> {
    let a = (lun(), seq(), seq(), seq());
    (a, any::<[u8; 2]>(), any::<[u16; 3]>(), data()).prop_map(
        |((lun, stat_sn, exp_cmd_sn, max_cmd_sn), [event, vcode], [p1, p2, p3], data)| {
            AsyncMessage {
                lun,
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                async_event: AsyncEvent::from(event),
                async_vcode: vcode,
                parameter1: p1,
                parameter2: p2,
                parameter3: p3,
                data,
            }
        },
    )
}

/// Reject.
pub fn reject() -> impl Strategy<Value = Reject> {
    (any::<u8>(), seq(), seq(), seq(), any::<u32>(), data()).prop_map(
        |(reason, stat_sn, exp_cmd_sn, max_cmd_sn, data_sn, data)| Reject {
            reason: RejectReason::from(reason),
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            data_sn,
            data,
        },
    )
}
