//! The target session under ErrorRecoveryLevel 2: a failed connection's tasks wait for a
//! logout for recovery (implicit or explicit) and TASK REASSIGN, reads resume from ExpDataSN cut
//! to the new connection, writes get new R2Ts, and Time2Retain running out discards everything
//! in order (RFC 7143 sections 6.3.4, 7.1.4.3, 7.2.2, 11.5.1, 11.14, 11.15).

use std::time::Duration;

use super::*;
use crate::pdu::{DataIn, R2t, ScsiResponse};

fn erl2() -> SessionParams {
    SessionParams {
        error_recovery_level: 2,
        max_connections: 4,
        initial_r2t: true,
        immediate_data: false,
        initiator_max_recv_data_segment_length: 512,
        target_max_recv_data_segment_length: 512,
        max_burst_length: 2048,
        first_burst_length: 512,
        default_time2wait: 1,
        default_time2retain: 5,
        ..SessionParams::default()
    }
}

fn rig(cids: &[u16]) -> Rig {
    Rig::with(cids, 8, erl2(), RecoveryConfig::default())
}

impl Rig {
    /// A login with `cid` joins the session (a new connection, or connection reinstatement),
    /// its initiator taking `mrdsl`-byte Data-In segments.
    fn login(&mut self, cid: u16, mrdsl: u32, stat_sn: u32) -> Added {
        let setup = ConnectionSetup {
            cid,
            params: SessionParams {
                initiator_max_recv_data_segment_length: mrdsl,
                ..erl2()
            },
            next_stat_sn: SeqNum(stat_sn),
            exp_cmd_sn: self.s.command_window().0,
        };
        let added = self.s.add_connection(setup, self.now, &mut self.env);
        self.ids.push((cid, added.conn()));
        added
    }

    fn tick(&mut self, by: Duration) {
        self.now += by;
        self.s.handle_timeout(self.now, &mut self.env);
    }
}

/// Sends the Data-Out answering `r2t` in 512-byte PDUs.
fn answer(r: &mut Rig, cid: u16, itt: u32, r2t: &R2t) {
    let pdus = r2t.desired_data_transfer_length / 512;
    for n in 0..pdus {
        let Pdu::DataOut(mut d) = data_out(
            itt,
            r2t.ttt,
            r2t.buffer_offset + n * 512,
            512,
            n + 1 == pdus,
        ) else {
            unreachable!()
        };
        d.data_sn = n;
        r.send(cid, Pdu::DataOut(d));
    }
}

fn reassign(itt: u32, referenced: u32, exp_data_sn: u32) -> Pdu {
    let Pdu::TaskMgmtRequest(mut t) = tmf_req(itt, 0, TmfFunction::TaskReassign, referenced, 0)
    else {
        unreachable!()
    };
    t.exp_data_sn = exp_data_sn;
    Pdu::TaskMgmtRequest(t)
}

fn data_ins(pdus: &[Pdu]) -> Vec<DataIn> {
    pdus.iter()
        .filter_map(|p| match p {
            Pdu::DataIn(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

fn r2ts(pdus: &[Pdu]) -> Vec<R2t> {
    pdus.iter()
        .filter_map(|p| match p {
            Pdu::R2t(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn response_of(pdus: &[Pdu]) -> Option<ScsiResponse> {
    pdus.iter().find_map(|p| match p {
        Pdu::ScsiResponse(r) => Some(r.clone()),
        _ => None,
    })
}

#[test]
fn a_failed_connections_tasks_move_to_the_connection_that_replaces_it() {
    let mut r = rig(&[1]);
    // A read the SCSI layer is running, and a write waiting for its second burst.
    r.send(1, read(10, 1, 4));
    let read_work = r.works();
    r.send(1, write(20, 2, 8));
    let first = r2ts(&r.drain(1));
    assert_eq!(first.len(), 1);
    answer(&mut r, 1, 20, &first[0]);
    let second = r2ts(&r.drain(1));
    assert_eq!(second.len(), 1, "the second burst is asked for");
    // The transport dies: nothing is ended, the session outlives its last connection.
    r.closed(1);
    assert_eq!(r.s.task_count(), 2);
    assert!(!r.s.is_ended());
    // The read finishes meanwhile: its answer waits.
    r.complete(&read_work[0]);
    // Connection reinstatement (same CID) is the implicit logout; the initiator now takes
    // 256-byte segments.
    assert!(matches!(r.login(1, 256, 500), Added::New(_)));
    r.send(1, reassign(30, 10, 0));
    let out = r.drain(1);
    assert_eq!(tmf_response_of(&out), Some(TmfResponse::FunctionComplete));
    assert!(
        matches!(out[0], Pdu::TaskMgmtResponse(_)),
        "the answer comes first"
    );
    let data = data_ins(&out);
    assert_eq!(data.len(), 8, "2048 bytes resegmented to 256");
    assert!(data
        .iter()
        .all(|d| d.data.len() == 256 && !d.status_present));
    assert_eq!(
        data.iter().map(|d| d.data_sn).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
    let rsp = response_of(&out).expect("the status goes again");
    assert_eq!((rsp.itt, rsp.exp_data_sn, rsp.snack_tag), (Itt(10), 8, 0));
    assert_eq!(rsp.stat_sn, SeqNum(501), "a StatSN of the new connection");
    // The write: new R2Ts for what is missing.
    r.send(1, reassign(31, 20, 0));
    let out = r.drain(1);
    assert_eq!(tmf_response_of(&out), Some(TmfResponse::FunctionComplete));
    let again = r2ts(&out);
    assert_eq!(again.len(), 1);
    assert_eq!(
        (
            again[0].buffer_offset,
            again[0].desired_data_transfer_length
        ),
        (2048, 2048)
    );
    assert!(again[0].r2t_sn > second[0].r2t_sn, "R2TSNs go on");
    answer(&mut r, 1, 20, &again[0]);
    let works = r.works();
    assert_eq!(works.len(), 1);
    assert_eq!(works[0].data_out.len(), 4096);
    r.complete(&works[0]);
    let rsp = response_of(&r.drain(1)).expect("the write's status");
    assert_eq!((rsp.itt, rsp.status), (Itt(20), ScsiStatus::Good));
    assert_eq!(r.s.window_slots_held(), 0);
}

#[test]
fn reassignment_waits_for_the_logout_of_the_failed_connection() {
    let mut r = rig(&[1, 2]);
    r.send(1, read(10, 1, 1));
    let work = r.works();
    r.closed(1);
    // No logout yet: "Task still allegiant" (section 7.2.2).
    r.send(2, reassign(30, 10, 0));
    assert_eq!(
        tmf_response_of(&r.drain(2)),
        Some(TmfResponse::TaskStillAllegiant)
    );
    // An explicit logout for recovery, on another connection, of a CID whose transport is
    // gone (section 11.14).
    r.send(2, logout(31, 2, LogoutReason::RemoveForRecovery, 1));
    let out = r.drain(2);
    let Some(Pdu::LogoutResponse(rsp)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(rsp.response, LogoutResponseCode::Closed);
    assert_eq!((rsp.time2wait, rsp.time2retain), (1, 5));
    assert!(r.events().is_empty(), "the connection it is sent on stays");
    r.send(2, reassign(32, 10, 0));
    assert_eq!(
        tmf_response_of(&r.drain(2)),
        Some(TmfResponse::FunctionComplete)
    );
    assert_eq!(
        (
            r.s.stats().connections_orphaned,
            r.s.stats().tasks_reassigned
        ),
        (1, 1)
    );
    // Still running when reassigned: the answer goes to the new connection.
    r.complete(&work[0]);
    let out = r.drain(2);
    assert_eq!(data_ins(&out).len(), 1);
    assert!(data_ins(&out)[0].status_present);
    // Unknown tags and unknown CIDs.
    r.send(2, reassign(33, 99, 0));
    assert_eq!(
        tmf_response_of(&r.drain(2)),
        Some(TmfResponse::TaskDoesNotExist)
    );
    r.send(2, logout(34, 3, LogoutReason::RemoveForRecovery, 7));
    assert!(matches!(
        r.drain(2).first(),
        Some(Pdu::LogoutResponse(l)) if l.response == LogoutResponseCode::CidNotFound
    ));
}

#[test]
fn a_live_connection_logged_out_for_recovery_closes_and_its_tasks_wait() {
    let mut r = rig(&[1, 2]);
    r.send(1, write(20, 1, 4));
    let first = r2ts(&r.drain(1));
    assert_eq!(first.len(), 1);
    r.send(2, logout(30, 2, LogoutReason::RemoveForRecovery, 1));
    assert!(matches!(
        r.drain(2).first(),
        Some(Pdu::LogoutResponse(l)) if l.response == LogoutResponseCode::Closed
    ));
    assert_eq!(
        r.events(),
        vec![(1, Event::Close(CloseReason::RemovedForRecovery))]
    );
    // Reassigned before its transport is even gone.
    r.send(2, reassign(31, 20, 0));
    let out = r.drain(2);
    assert_eq!(tmf_response_of(&out), Some(TmfResponse::FunctionComplete));
    assert_eq!(r2ts(&out).len(), 1, "its data is asked for on connection 2");
    r.closed(1);
    assert_eq!(
        r.s.task_count(),
        1,
        "the task is no longer the dead connection's"
    );
}

#[test]
fn a_read_resumes_from_the_exp_data_sn_the_initiator_acknowledges() {
    let mut r = rig(&[1]);
    r.send(1, read(10, 1, 4));
    let work = r.works();
    r.complete(&work[0]);
    let sent = data_ins(&r.drain(1));
    assert_eq!(sent.len(), 4);
    // The connection fails before the initiator saw more than two of them.
    r.closed(1);
    r.login(1, 512, 700);
    r.send(1, reassign(30, 10, 2));
    let out = r.drain(1);
    let again = data_ins(&out);
    assert_eq!(
        again
            .iter()
            .map(|d| (d.data_sn, d.buffer_offset))
            .collect::<Vec<_>>(),
        vec![(2, 1024), (3, 1536)]
    );
    assert_eq!(response_of(&out).map(|r| r.exp_data_sn), Some(4));
    // An ExpDataSN past what was sent is ignored (section 11.5.6): from the last
    // acknowledgement, here DataSN 2.
    r.closed(1);
    r.login(1, 512, 800);
    r.send(1, reassign(31, 10, 9));
    let again = data_ins(&r.drain(1));
    assert_eq!(again.first().map(|d| d.data_sn), Some(2));
}

#[test]
fn time2retain_running_out_discards_in_order_even_with_work_in_the_scsi_layer() {
    let mut r = rig(&[1]);
    // A read whose work the driver took (the SCSI layer runs it), a write collecting data,
    // and a command held for an earlier CmdSN that never came.
    r.send(1, read(10, 1, 1));
    let running = r.works();
    assert_eq!(running.len(), 1);
    r.send(1, write(20, 2, 4));
    r.send(1, read(30, 4, 1));
    assert_eq!(r.s.commands_held(), 1);
    r.drain(1);
    r.closed(1);
    assert_eq!(r.s.commands_held(), 0, "its held command was discarded");
    assert_eq!(r.s.window_slots_held(), 2);
    assert!(!r.s.is_ended());
    // Time2Wait (1 s) + Time2Retain (5 s), with nobody coming back.
    r.tick(Duration::from_secs(5));
    assert_eq!(r.s.task_count(), 2, "not yet");
    r.tick(Duration::from_secs(2));
    assert_eq!(r.env.cleared, vec![Lun(0)], "commands cleared (47h/7Fh)");
    // The running read is not freed under the SCSI layer: it is marked, and the session
    // waits for its result before it ends.
    assert_eq!(r.s.task_count(), 1);
    assert!(!r.s.is_ended());
    r.complete(&running[0]);
    assert_eq!(r.s.task_count(), 0);
    assert_eq!(r.s.window_slots_held(), 0);
    assert!(r.s.is_ended());
    assert!(r.s.poll_work().is_none(), "nothing left to run");
}

#[test]
fn discarded_held_commands_are_waited_for_again_and_run_when_retried() {
    let mut r = rig(&[1]);
    r.send(1, read(11, 2, 1));
    assert_eq!(r.s.commands_held(), 1);
    r.closed(1);
    r.login(1, 512, 900);
    // The initiator retries both with their CmdSNs on the new connection.
    r.send(1, read(10, 1, 1));
    r.send(1, read(11, 2, 1));
    let works = r.works();
    assert_eq!(
        works.iter().map(|w| w.ticket.itt).collect::<Vec<_>>(),
        vec![Itt(10), Itt(11)]
    );
}

#[test]
fn answered_tasks_whose_status_went_out_are_discarded_without_a_unit_attention() {
    let mut r = rig(&[1]);
    r.send(1, read(10, 1, 1));
    let work = r.works();
    r.complete(&work[0]);
    r.drain(1);
    r.closed(1);
    r.tick(Duration::from_secs(7));
    assert!(r.env.cleared.is_empty());
    assert_eq!(r.s.task_count(), 0);
    assert!(r.s.is_ended());
}

#[test]
fn a_time2retain_of_zero_discards_at_once_and_below_level_2_nothing_waits() {
    let params = SessionParams {
        default_time2retain: 0,
        ..erl2()
    };
    let mut r = Rig::with(&[1], 8, params, RecoveryConfig::default());
    r.send(1, write(20, 1, 4));
    r.closed(1);
    assert_eq!(r.s.task_count(), 0);
    assert_eq!(r.env.cleared, vec![Lun(0)]);
    assert!(r.s.is_ended());
    let params = SessionParams {
        error_recovery_level: 1,
        ..erl2()
    };
    let mut r = Rig::with(&[1], 8, params, RecoveryConfig::default());
    r.send(1, write(20, 1, 4));
    r.closed(1);
    assert!(r.s.is_ended());
    assert!(r.env.cleared.is_empty());
}

#[test]
fn a_connection_the_operator_closed_is_not_kept_for_recovery() {
    let mut r = rig(&[1]);
    r.send(1, read(10, 1, 1));
    let work = r.works();
    r.s.close_all(CloseReason::Administrative);
    assert_eq!(
        r.events(),
        vec![(1, Event::Close(CloseReason::Administrative))]
    );
    r.closed(1);
    assert_eq!(r.s.stats().connections_orphaned, 0);
    assert!(!r.s.is_ended(), "its command is still with the SCSI layer");
    r.complete(&work[0]);
    assert!(r.s.is_ended(), "nothing waits for reassignment");
}
