//! The unexpected-PDU count: what counts, what releases it, and tasks ended by a TMF.

use bytes::{Bytes, BytesMut};

use super::UnexpectedWindow;
use crate::pdu::codes::{
    LogoutReason, LogoutResponseCode, RejectReason, ScsiResponseCode, ScsiStatus, TmfFunction,
    TmfResponse,
};
use crate::pdu::{
    Cdb, LogoutRequest, LogoutResponse, NopIn, NopOut, Pdu, Reject, ScsiCommand, ScsiResponse,
    TaskAttr, TaskMgmtRequest, TaskMgmtResponse,
};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

pub(crate) fn command(itt: u32, lun: u64, immediate: bool) -> Pdu {
    Pdu::ScsiCommand(ScsiCommand {
        immediate,
        final_bit: true,
        read: false,
        write: false,
        attr: TaskAttr::Simple,
        lun: Lun(lun),
        itt: Itt(itt),
        expected_data_transfer_length: 0,
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        cdb: Cdb::new(&[0; 16]),
        bidi_read_length: None,
        data: Bytes::new(),
    })
}

pub(crate) fn response(itt: u32, exp_cmd_sn: u32) -> Pdu {
    Pdu::ScsiResponse(ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: ScsiResponseCode::Completed,
        status: ScsiStatus::Good,
        itt: Itt(itt),
        snack_tag: 0,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(exp_cmd_sn),
        max_cmd_sn: SeqNum::new(exp_cmd_sn.wrapping_add(64)),
        exp_data_sn: 0,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    })
}

pub(crate) fn tmf(itt: u32, function: TmfFunction, lun: u64, rtt: u32) -> Pdu {
    Pdu::TaskMgmtRequest(TaskMgmtRequest {
        immediate: true,
        function,
        lun: Lun(lun),
        itt: Itt(itt),
        referenced_task_tag: Itt(rtt),
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
        ref_cmd_sn: SeqNum::new(0),
        exp_data_sn: 0,
    })
}

pub(crate) fn tmf_response(itt: u32, response: TmfResponse) -> Pdu {
    Pdu::TaskMgmtResponse(TaskMgmtResponse {
        response,
        itt: Itt(itt),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(64),
    })
}

pub(crate) fn nop_out(itt: u32, ttt: u32, cmd_sn: u32) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt(ttt),
        cmd_sn: SeqNum::new(cmd_sn),
        exp_stat_sn: SeqNum::new(1),
        data: Bytes::new(),
    })
}

pub(crate) fn nop_in(itt: u32, ttt: u32, exp_cmd_sn: u32) -> Pdu {
    Pdu::NopIn(NopIn {
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt(ttt),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(exp_cmd_sn),
        max_cmd_sn: SeqNum::new(exp_cmd_sn.wrapping_add(64)),
        data: Bytes::new(),
    })
}

const RESERVED: u32 = 0xffff_ffff;

/// `pdu` (a SCSI Command, TMF request or NOP-Out) with CmdSN `sn`.
pub(crate) fn at(pdu: Pdu, sn: u32) -> Pdu {
    let sn = SeqNum::new(sn);
    match pdu {
        Pdu::ScsiCommand(mut c) => {
            c.cmd_sn = sn;
            Pdu::ScsiCommand(c)
        }
        Pdu::TaskMgmtRequest(mut t) => {
            t.cmd_sn = sn;
            Pdu::TaskMgmtRequest(t)
        }
        Pdu::NopOut(mut n) => {
            n.cmd_sn = sn;
            Pdu::NopOut(n)
        }
        other => other,
    }
}

#[test]
fn only_requests_outside_iscsi_flow_control_count() {
    // Non-immediate commands are bounded by the CmdSN window, a NOP-Out echoing the
    // target's ping answers it: the target expects both.
    assert!(!UnexpectedWindow::counts(&command(1, 0, false)));
    assert!(!UnexpectedWindow::counts(&nop_out(RESERVED, 9, 1)));
    assert!(UnexpectedWindow::counts(&command(1, 0, true)));
    assert!(UnexpectedWindow::counts(&tmf(
        2,
        TmfFunction::AbortTask,
        0,
        1
    )));
    assert!(UnexpectedWindow::counts(&nop_out(3, RESERVED, 1)));
    assert!(UnexpectedWindow::counts(&nop_out(RESERVED, RESERVED, 1)));
    let Pdu::NopOut(mut windowed) = nop_out(3, RESERVED, 1) else {
        unreachable!()
    };
    windowed.immediate = false;
    assert!(!UnexpectedWindow::counts(&Pdu::NopOut(windowed)));
}

#[test]
fn a_request_is_outstanding_until_its_response() {
    let mut w = UnexpectedWindow::new(2);
    w.sent(&command(1, 0, true));
    w.sent(&nop_out(2, RESERVED, 5));
    assert_eq!(w.outstanding(), 2);
    assert!(!w.has_room());
    assert!(w.may_send(&command(3, 0, false)), "expected PDUs always go");
    assert!(!w.may_send(&command(3, 0, true)));
    // Another task's response releases nothing.
    w.received(&response(7, 5));
    assert_eq!(w.outstanding(), 2);
    w.received(&nop_in(2, RESERVED, 5));
    assert_eq!(w.outstanding(), 1);
    w.received(&response(1, 5));
    assert_eq!(w.outstanding(), 0);
    // A target's ping (ITT reserved) releases nothing either.
    w.sent(&command(4, 0, true));
    w.received(&nop_in(RESERVED, 77, 5));
    assert_eq!(w.outstanding(), 1);
}

#[test]
fn zero_means_no_limit() {
    let mut w = UnexpectedWindow::new(0);
    for itt in 0..1000 {
        w.sent(&command(itt, 0, true));
    }
    assert!(w.has_room());
}

#[test]
fn a_one_way_nop_out_ends_when_exp_cmd_sn_passes_it() {
    let mut w = UnexpectedWindow::new(2);
    // Immediate, CmdSN 10 not advanced: the next command also carries 10.
    w.sent(&nop_out(RESERVED, RESERVED, 10));
    assert_eq!(w.outstanding(), 1);
    w.received(&response(1, 10));
    assert_eq!(w.outstanding(), 1, "ExpCmdSN 10: command 10 not yet taken");
    w.received(&response(1, 11));
    assert_eq!(w.outstanding(), 0);
    // Serial arithmetic across the wrap.
    w.sent(&nop_out(RESERVED, RESERVED, u32::MAX));
    w.received(&nop_in(RESERVED, RESERVED, u32::MAX));
    assert_eq!(w.outstanding(), 1);
    w.received(&nop_in(RESERVED, RESERVED, 0));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn abort_task_releases_the_aborted_task_whose_response_never_comes() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&command(1, 0, true));
    w.sent(&tmf(2, TmfFunction::AbortTask, 0, 1));
    assert_eq!(w.outstanding(), 2);
    w.received(&tmf_response(2, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 0);
    // "Task does not exist": its response came first (and released it), or never will.
    w.sent(&command(3, 0, true));
    w.sent(&tmf(4, TmfFunction::AbortTask, 0, 3));
    w.received(&tmf_response(4, TmfResponse::TaskDoesNotExist));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_refused_tmf_leaves_its_tasks_outstanding() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&command(1, 0, true));
    w.sent(&tmf(2, TmfFunction::AbortTask, 0, 1));
    w.received(&tmf_response(2, TmfResponse::FunctionRejected));
    assert_eq!(
        w.outstanding(),
        1,
        "the task goes on; its response will come"
    );
    w.received(&response(1, 1));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_logical_unit_reset_releases_that_units_earlier_tasks_only() {
    let mut w = UnexpectedWindow::new(8);
    // Immediate commands at CmdSN 3 and 4 (a non-immediate one at 3 went between them).
    w.sent(&at(command(1, 0, true), 3));
    w.sent(&at(command(2, 0, true), 4));
    w.sent(&at(command(3, 1, true), 4));
    // A non-immediate command advanced CmdSN to 5: the reset is issued after the three.
    w.sent(&at(tmf(4, TmfFunction::LogicalUnitReset, 0, RESERVED), 5));
    assert_eq!(w.outstanding(), 4);
    // A task sent after the reset is not reached by it.
    w.sent(&at(command(5, 0, true), 5));
    w.received(&tmf_response(4, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 2, "LUN 1's task and the later one remain");
    w.received(&response(3, 1));
    w.received(&response(5, 1));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_non_immediate_tmf_still_ends_counted_tasks() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&at(command(1, 2, true), 7));
    let Pdu::TaskMgmtRequest(mut t) = at(tmf(2, TmfFunction::AbortTaskSet, 2, RESERVED), 8) else {
        unreachable!()
    };
    t.immediate = false;
    w.sent(&Pdu::TaskMgmtRequest(t));
    assert_eq!(w.outstanding(), 1);
    w.received(&tmf_response(2, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_target_reset_releases_every_earlier_command() {
    let mut w = UnexpectedWindow::new(8);
    w.sent(&at(command(1, 0, true), 3));
    w.sent(&at(command(2, 3, true), 4));
    w.sent(&at(tmf(9, TmfFunction::TargetWarmReset, 0, RESERVED), 5));
    w.received(&tmf_response(9, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 0);
}

/// RFC 7143 section 11.5.1: a task management function acts on the commands "having a CmdSN
/// lower than the task management CmdSN". An immediate command does not advance CmdSN, so
/// one sent right before an immediate ABORT TASK SET carries the function's own CmdSN: the
/// function does not end it, and the target (sluice's ends tasks by exactly this rule)
/// answers it. Released at the function's response, as the count once did by LUN alone, it
/// would be outstanding at the target while the initiator counted it gone: one unexpected PDU
/// more than the target's limit could be sent and find no receive buffer.
#[test]
fn an_immediate_command_with_the_functions_own_cmd_sn_is_not_ended_by_it() {
    let mut w = UnexpectedWindow::new(2);
    w.sent(&at(command(1, 0, true), 5));
    w.sent(&at(tmf(2, TmfFunction::AbortTaskSet, 0, RESERVED), 5));
    w.received(&tmf_response(2, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 1, "its response is still to come");
    assert!(w.has_room());
    w.sent(&nop_out(3, RESERVED, 5));
    assert!(
        !w.has_room(),
        "the command and the ping fill the target's limit of 2"
    );
    w.received(&response(1, 5));
    assert_eq!(w.outstanding(), 1);
}

/// The scope is applied when the function completes, to the requests outstanding then: a
/// request that reuses the tag of a task that ended before the function completed came after
/// the function (its CmdSN is not below the function's), and is not ended by it. Noting the
/// tags at request time released the newcomer, whose response was still to come.
#[test]
fn a_tag_reused_after_the_function_is_not_released_by_it() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&at(command(1, 0, true), 4));
    w.sent(&at(tmf(2, TmfFunction::AbortTaskSet, 0, RESERVED), 5));
    // The command completed before the function reached it; its tag is free again.
    w.received(&response(1, 5));
    w.sent(&at(command(1, 0, true), 5));
    w.received(&tmf_response(2, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 1, "the new task with tag 1 goes on");
    w.received(&response(1, 5));
    assert_eq!(w.outstanding(), 0);
}

/// Only SCSI tasks are in a logical unit's task set: a NOP-Out ping, whatever its LUN field,
/// is answered by its NOP-In even when a task-set function or a reset completes meanwhile.
#[test]
fn a_ping_is_not_ended_by_a_task_set_function_or_a_reset() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&nop_out(3, RESERVED, 4));
    w.sent(&at(tmf(4, TmfFunction::AbortTaskSet, 0, RESERVED), 5));
    w.received(&tmf_response(4, TmfResponse::FunctionComplete));
    w.sent(&at(tmf(5, TmfFunction::TargetWarmReset, 0, RESERVED), 5));
    w.received(&tmf_response(5, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 1, "the ping awaits its NOP-In");
    w.received(&nop_in(3, RESERVED, 5));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_logout_is_released_by_its_response() {
    let mut w = UnexpectedWindow::new(2);
    w.sent(&Pdu::LogoutRequest(LogoutRequest {
        immediate: true,
        reason: LogoutReason::CloseSession,
        itt: Itt(6),
        cid: 0,
        cmd_sn: SeqNum::new(1),
        exp_stat_sn: SeqNum::new(1),
    }));
    assert_eq!(w.outstanding(), 1);
    w.received(&Pdu::LogoutResponse(LogoutResponse {
        response: LogoutResponseCode::Closed,
        itt: Itt(6),
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(1),
        time2wait: 0,
        time2retain: 0,
    }));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn a_rejected_immediate_request_is_released() {
    let mut w = UnexpectedWindow::new(2);
    let ping = nop_out(5, RESERVED, 1);
    w.sent(&ping);
    let mut header = BytesMut::new();
    ping.emit_header(&mut header);
    header.truncate(crate::pdu::BHS_LEN);
    w.received(&Pdu::Reject(Reject {
        reason: RejectReason::ProtocolError,
        stat_sn: SeqNum::new(1),
        exp_cmd_sn: SeqNum::new(1),
        max_cmd_sn: SeqNum::new(1),
        data_sn: 0,
        data: header.freeze(),
    }));
    assert_eq!(w.outstanding(), 0);
}

#[test]
fn an_itt_used_again_is_counted_once() {
    let mut w = UnexpectedWindow::new(4);
    w.sent(&nop_out(5, RESERVED, 1));
    w.sent(&nop_out(5, RESERVED, 1));
    assert_eq!(w.outstanding(), 1);
}

/// A target that never answers task management requests: the record of them stays at
/// [`MAX_TMFS_IN_FLIGHT`] however many are sent, and forgetting the oldest never releases a
/// task early. A task the oldest function would have ended stays counted when that
/// function's response finally comes; the newest functions still release theirs.
#[test]
fn tmfs_never_answered_are_bounded_and_forgetting_one_releases_nothing() {
    use super::MAX_TMFS_IN_FLIGHT;
    let mut w = UnexpectedWindow::new(0);
    // Task 1 (immediate, LUN 3), then an ABORT TASK for it that is never answered.
    w.sent(&command(1, 3, true));
    w.sent(&non_immediate(tmf(2, TmfFunction::AbortTask, 3, 1)));
    // Non-immediate functions (they take a CmdSN, so the unexpected count does not bound
    // them) for tasks that are not counted, never answered.
    let sent = MAX_TMFS_IN_FLIGHT as u32 * 4;
    for i in 0..sent {
        w.sent(&non_immediate(tmf(
            1000 + i,
            TmfFunction::AbortTask,
            0,
            500_000 + i,
        )));
        assert!(w.tmfs_in_flight() <= MAX_TMFS_IN_FLIGHT);
    }
    assert_eq!(w.tmfs_in_flight(), MAX_TMFS_IN_FLIGHT);
    assert_eq!(w.outstanding(), 1);
    // The first function was forgotten: its late answer ends nothing here, task 1 stays
    // counted until its own response.
    w.received(&tmf_response(2, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 1, "released by a forgotten function");
    // The newest functions are still on record: one that ends task 7 releases it.
    w.sent(&command(7, 0, true));
    w.sent(&non_immediate(tmf(9, TmfFunction::AbortTask, 0, 7)));
    assert_eq!(w.tmfs_in_flight(), MAX_TMFS_IN_FLIGHT);
    w.received(&tmf_response(9, TmfResponse::FunctionComplete));
    assert_eq!(w.outstanding(), 1, "task 7 released, task 1 still counted");
    assert_eq!(w.tmfs_in_flight(), MAX_TMFS_IN_FLIGHT - 1);
    w.received(&response(1, 1));
    assert_eq!(w.outstanding(), 0);
}

fn non_immediate(pdu: Pdu) -> Pdu {
    let Pdu::TaskMgmtRequest(mut t) = pdu else {
        unreachable!()
    };
    t.immediate = false;
    Pdu::TaskMgmtRequest(t)
}

mod target_side {
    use super::*;
    use crate::iser::unexpected::TargetUnexpectedWindow;
    use crate::pdu::codes::AsyncEvent;
    use crate::pdu::AsyncMessage;

    pub(crate) fn async_message(stat_sn: u32) -> Pdu {
        Pdu::AsyncMessage(AsyncMessage {
            lun: Lun(0),
            stat_sn: SeqNum::new(stat_sn),
            exp_cmd_sn: SeqNum::new(1),
            max_cmd_sn: SeqNum::new(64),
            async_event: AsyncEvent::LogoutRequested,
            async_vcode: 0,
            parameter1: 0,
            parameter2: 0,
            parameter3: 0,
            data: Bytes::new(),
        })
    }

    fn command_acking(exp_stat_sn: u32) -> Pdu {
        let Pdu::ScsiCommand(mut c) = command(1, 0, false) else {
            unreachable!()
        };
        c.exp_stat_sn = SeqNum::new(exp_stat_sn);
        Pdu::ScsiCommand(c)
    }

    #[test]
    fn what_the_target_sends_unasked_counts() {
        assert!(TargetUnexpectedWindow::counts(&nop_in(RESERVED, 7, 1)));
        assert!(TargetUnexpectedWindow::counts(&nop_in(
            RESERVED, RESERVED, 1
        )));
        assert!(TargetUnexpectedWindow::counts(&async_message(3)));
        // The answer to the initiator's ping, and responses, it expects.
        assert!(!TargetUnexpectedWindow::counts(&nop_in(4, RESERVED, 1)));
        assert!(!TargetUnexpectedWindow::counts(&response(4, 1)));
    }

    #[test]
    fn a_ping_is_outstanding_until_its_echo() {
        let mut w = TargetUnexpectedWindow::new(2);
        w.sent(&nop_in(RESERVED, 7, 1));
        w.sent(&nop_in(RESERVED, 8, 1));
        assert!(!w.may_send(&nop_in(RESERVED, 9, 1)));
        assert!(w.may_send(&response(1, 1)));
        w.received(&nop_out(RESERVED, 99, 1));
        assert_eq!(w.outstanding(), 2, "another TTT's echo");
        w.received(&nop_out(RESERVED, 7, 1));
        assert_eq!(w.outstanding(), 1);
        assert!(w.may_send(&nop_in(RESERVED, 9, 1)));
    }

    #[test]
    fn an_async_message_is_outstanding_until_exp_stat_sn_passes_it() {
        let mut w = TargetUnexpectedWindow::new(2);
        let Pdu::NopIn(mut one_way) = nop_in(RESERVED, RESERVED, 1) else {
            unreachable!()
        };
        one_way.stat_sn = SeqNum::new(5);
        w.sent(&Pdu::NopIn(one_way));
        w.sent(&async_message(5));
        assert_eq!(w.outstanding(), 2);
        w.received(&command_acking(5));
        assert_eq!(w.outstanding(), 2, "StatSN 5 not yet acknowledged");
        w.received(&command_acking(6));
        assert_eq!(w.outstanding(), 0);
    }
}
