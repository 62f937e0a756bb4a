//! The target session driven by a scripted initiator: PDUs in, stamped PDUs, SCSI work and
//! events out, virtual time. Each test checks one rule of RFC 7143 a broken target would get
//! wrong.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::pdu::codes::{
    AsyncEvent, LogoutReason, LogoutResponseCode, RejectReason, ScsiStatus, TmfFunction,
    TmfResponse,
};
use crate::pdu::{
    DataOut, LogoutRequest, NopOut, ScsiCommand, TaskAttr, TaskMgmtRequest, TextRequest,
};
use crate::seq::Ttt;

const BLOCK: u32 = 512;

/// A SCSI layer reduced to what the session asks: READ(10)/WRITE(10) lengths, LUN 0 only.
#[derive(Default)]
struct Env {
    resets: Vec<ResetKind>,
    /// LUNs told "commands cleared by iSCSI protocol event".
    cleared: Vec<Lun>,
    /// Whether LUN 0 keeps what is written (`false`: a null LUN).
    keeps_nothing: bool,
}

impl TargetSessionEnv for Env {
    fn transfer(&self, _lun: Lun, cdb: &Cdb) -> DataTransfer {
        let c: &[u8] = cdb;
        let blocks = u64::from(u16::from_be_bytes([c[7], c[8]]));
        match c[0] {
            0x28 => DataTransfer::FromDevice(blocks * u64::from(BLOCK)),
            0x2a => DataTransfer::ToDevice(blocks * u64::from(BLOCK)),
            _ => DataTransfer::None,
        }
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        lun == Lun(0)
    }

    fn keeps_data_out(&self, _lun: Lun, _cdb: &Cdb) -> bool {
        !self.keeps_nothing
    }

    fn reset(&mut self, kind: ResetKind) {
        self.resets.push(kind);
    }

    fn commands_cleared(&mut self, lun: Lun) {
        self.cleared.push(lun);
    }

    fn send_targets(&mut self, conn: ConnId, query: &str) -> Vec<(String, String)> {
        vec![
            ("TargetName".into(), format!("iqn.2026-11.test:{query}")),
            ("TargetAddress".into(), format!("127.0.0.{}:3260,1", conn.0)),
        ]
    }
}

/// The session under test, its environment and a virtual clock.
struct Rig {
    s: TargetSession,
    env: Env,
    now: Instant,
    /// Connection ids by CID.
    ids: Vec<(u16, ConnId)>,
}

fn setup(cid: u16, stat_sn: u32) -> ConnectionSetup {
    let params = SessionParams {
        max_connections: 4,
        initial_r2t: true,
        immediate_data: false,
        ..SessionParams::default()
    };
    ConnectionSetup {
        cid,
        params,
        next_stat_sn: SeqNum(stat_sn),
        exp_cmd_sn: SeqNum(1),
    }
}

impl Rig {
    /// A normal session, queue depth 8, with connections `cids` (the first is the leading one).
    fn new(cids: &[u16]) -> Self {
        Self::with_depth(cids, 8)
    }

    fn with_depth(cids: &[u16], depth: u32) -> Self {
        Self::with(cids, depth, setup(0, 0).params, RecoveryConfig::default())
    }

    /// A session with these negotiated `params` and recovery settings.
    fn with(cids: &[u16], depth: u32, params: SessionParams, recovery: RecoveryConfig) -> Self {
        let now = Instant::now();
        let config = SessionConfig {
            session_type: SessionType::Normal,
            queue_depth: depth,
            max_write_bytes_per_connection: 1 << 20,
            keepalive: None,
            recovery,
        };
        let setup = |cid: u16, stat_sn: u32| ConnectionSetup {
            params,
            ..setup(cid, stat_sn)
        };
        let mut env = Env::default();
        let (mut s, first) = TargetSession::new(config, setup(cids[0], 100), now);
        let mut ids = vec![(cids[0], first)];
        for &cid in &cids[1..] {
            let added = s.add_connection(setup(cid, 1000 * u32::from(cid)), now, &mut env);
            assert!(matches!(added, Added::New(_)));
            ids.push((cid, added.conn()));
        }
        Self { s, env, now, ids }
    }

    /// The live connection with this CID.
    fn id(&self, cid: u16) -> ConnId {
        self.ids
            .iter()
            .rev()
            .find(|(c, _)| *c == cid)
            .map(|(_, id)| *id)
            .expect("a connection with this CID")
    }

    fn send(&mut self, cid: u16, pdu: Pdu) {
        let id = self.id(cid);
        self.s.handle_pdu(id, pdu, self.now, &mut self.env);
    }

    /// Everything queued for `cid`.
    fn drain(&mut self, cid: u16) -> Vec<Pdu> {
        let id = self.id(cid);
        std::iter::from_fn(|| self.s.poll_transmit(id)).collect()
    }

    fn works(&mut self) -> Vec<ScsiWork> {
        std::iter::from_fn(|| self.s.poll_work()).collect()
    }

    /// Events of every connection, as (CID, event).
    fn events(&mut self) -> Vec<(u16, Event)> {
        let mut out = Vec::new();
        for (cid, id) in self.ids.clone() {
            while let Some(e) = self.s.poll_event(id) {
                out.push((cid, e));
            }
        }
        out
    }

    fn closed(&mut self, cid: u16) {
        let id = self.id(cid);
        self.s.handle_connection_closed(id, &mut self.env);
        self.ids.retain(|(_, i)| *i != id);
    }

    /// Completes `work` GOOD, with `data_in_len` bytes of data.
    fn complete(&mut self, work: &ScsiWork) {
        let done = ScsiCompletion {
            status: ScsiStatus::Good,
            sense: Bytes::new(),
            data: Bytes::from(vec![0xa5; work.data_in_len as usize]),
        };
        self.s.handle_completion(work.ticket, done, &mut self.env);
    }
}

fn cdb(op: u8, lba: u32, blocks: u16) -> Cdb {
    let mut c = [0u8; 16];
    c[0] = op;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    Cdb::new(&c)
}

fn read(itt: u32, cmd_sn: u32, blocks: u16) -> Pdu {
    Pdu::ScsiCommand(ScsiCommand {
        immediate: false,
        final_bit: true,
        read: true,
        write: false,
        attr: TaskAttr::Simple,
        lun: Lun(0),
        itt: Itt(itt),
        expected_data_transfer_length: u32::from(blocks) * BLOCK,
        cmd_sn: SeqNum(cmd_sn),
        exp_stat_sn: SeqNum(0),
        cdb: cdb(0x28, 0, blocks),
        bidi_read_length: None,
        data: Bytes::new(),
    })
}

fn write(itt: u32, cmd_sn: u32, blocks: u16) -> Pdu {
    let Pdu::ScsiCommand(mut c) = read(itt, cmd_sn, blocks) else {
        unreachable!()
    };
    c.read = false;
    c.write = true;
    c.cdb = cdb(0x2a, 0, blocks);
    Pdu::ScsiCommand(c)
}

fn immediate(pdu: Pdu) -> Pdu {
    match pdu {
        Pdu::ScsiCommand(mut c) => {
            c.immediate = true;
            Pdu::ScsiCommand(c)
        }
        other => other,
    }
}

fn with_exp_stat_sn(pdu: Pdu, exp: SeqNum) -> Pdu {
    match pdu {
        Pdu::ScsiCommand(mut c) => {
            c.exp_stat_sn = exp;
            Pdu::ScsiCommand(c)
        }
        other => other,
    }
}

fn data_out(itt: u32, ttt: Ttt, offset: u32, len: usize, last: bool) -> Pdu {
    Pdu::DataOut(DataOut {
        final_bit: last,
        lun: Lun(0),
        itt: Itt(itt),
        ttt,
        exp_stat_sn: SeqNum(0),
        data_sn: 0,
        buffer_offset: offset,
        data: Bytes::from(vec![0x3c; len]),
    })
}

fn tmf_req(itt: u32, cmd_sn: u32, function: TmfFunction, referenced: u32, ref_cmd_sn: u32) -> Pdu {
    Pdu::TaskMgmtRequest(TaskMgmtRequest {
        immediate: true,
        function,
        lun: Lun(0),
        itt: Itt(itt),
        referenced_task_tag: Itt(referenced),
        cmd_sn: SeqNum(cmd_sn),
        exp_stat_sn: SeqNum(0),
        ref_cmd_sn: SeqNum(ref_cmd_sn),
        exp_data_sn: 0,
    })
}

fn nop_out(itt: u32, cmd_sn: u32, ttt: Ttt, exp_stat_sn: SeqNum) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(itt),
        ttt,
        cmd_sn: SeqNum(cmd_sn),
        exp_stat_sn,
        data: Bytes::new(),
    })
}

fn logout(itt: u32, cmd_sn: u32, reason: LogoutReason, cid: u16) -> Pdu {
    Pdu::LogoutRequest(LogoutRequest {
        immediate: true,
        reason,
        itt: Itt(itt),
        cid,
        cmd_sn: SeqNum(cmd_sn),
        exp_stat_sn: SeqNum(0),
    })
}

fn tmf_response_of(pdus: &[Pdu]) -> Option<TmfResponse> {
    pdus.iter().find_map(|p| match p {
        Pdu::TaskMgmtResponse(r) => Some(r.response),
        _ => None,
    })
}

fn reject_reason_of(pdus: &[Pdu]) -> Option<RejectReason> {
    pdus.iter().find_map(|p| match p {
        Pdu::Reject(r) => Some(r.reason),
        _ => None,
    })
}

/// Issue requirement: CmdSN 2 arriving on connection B before CmdSN 1 on connection A runs
/// after it, and each answer goes back on its own connection (RFC 7143 section 4.2.2.1:
/// ordered delivery across the session; section 4.2.4.1: allegiance).
#[test]
fn cmd_sn_2_on_b_before_cmd_sn_1_on_a_runs_after_it() {
    let mut r = Rig::new(&[1, 2]);
    r.send(2, read(20, 2, 1));
    assert!(r.works().is_empty(), "CmdSN 2 must wait for CmdSN 1");
    assert_eq!(r.s.commands_held(), 1);
    r.send(1, read(10, 1, 1));
    let works = r.works();
    let order: Vec<(ConnId, Itt)> = works.iter().map(|w| (w.conn, w.ticket.itt)).collect();
    assert_eq!(order, [(r.id(1), Itt(10)), (r.id(2), Itt(20))]);
    for w in &works {
        r.complete(w);
    }
    let on_a = r.drain(1);
    let on_b = r.drain(2);
    assert!(on_a.iter().all(|p| p.itt() == Itt(10)) && !on_a.is_empty());
    assert!(on_b.iter().all(|p| p.itt() == Itt(20)) && !on_b.is_empty());
    // Each connection numbers its own statuses.
    let stat_sn = |pdus: &[Pdu]| match pdus.last() {
        Some(Pdu::DataIn(d)) if d.status_present => d.stat_sn,
        other => panic!("expected a Data-In with status, got {other:?}"),
    };
    assert_eq!(stat_sn(&on_a), SeqNum(100));
    assert_eq!(stat_sn(&on_b), SeqNum(2000));
    assert_eq!(r.s.window_slots_held(), 0);
}

#[test]
fn an_immediate_command_takes_and_gives_back_no_slot() {
    let mut r = Rig::with_depth(&[1], 4);
    // A write waiting for its data holds a slot.
    r.send(1, write(1, 1, 1));
    assert!(matches!(r.drain(1)[..], [Pdu::R2t(_)]));
    r.send(1, immediate(read(2, 2, 1)));
    let works = r.works();
    r.complete(&works[0]);
    let pdus = r.drain(1);
    let Some(Pdu::DataIn(d)) = pdus.last() else {
        panic!("{pdus:?}")
    };
    // Depth 4, one slot held: MaxCmdSN = ExpCmdSN + 2.
    assert_eq!((d.exp_cmd_sn, d.max_cmd_sn), (SeqNum(2), SeqNum(4)));
    assert_eq!(r.s.window_slots_held(), 1);
}

#[test]
fn data_out_on_another_connection_or_for_no_task_is_rejected() {
    let mut r = Rig::new(&[1, 2]);
    r.send(1, write(1, 1, 1));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!()
    };
    r.send(2, data_out(1, r2t.ttt, 0, 512, true));
    assert_eq!(
        reject_reason_of(&r.drain(2)),
        Some(RejectReason::ProtocolError)
    );
    r.send(1, data_out(99, r2t.ttt, 0, 512, true));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::InvalidPduField)
    );
    // The right data on the right connection completes the write.
    r.send(1, data_out(1, r2t.ttt, 0, 512, true));
    let works = r.works();
    assert_eq!(works.len(), 1);
    assert_eq!(works[0].data_out.len(), 512);
}

#[test]
fn late_data_out_of_an_aborted_task_is_dropped_quietly() {
    let mut r = Rig::new(&[1]);
    r.send(1, write(1, 1, 1));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!()
    };
    r.send(1, tmf_req(50, 2, TmfFunction::AbortTask, 1, 1));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::FunctionComplete)
    );
    r.send(1, data_out(1, r2t.ttt, 0, 512, true));
    assert!(r.drain(1).is_empty());
    assert!(r.works().is_empty());
    assert_eq!(r.s.window_slots_held(), 0);
}

#[test]
fn a_reused_itt_is_rejected_as_task_in_progress() {
    let mut r = Rig::new(&[1]);
    r.send(1, write(7, 1, 1));
    r.drain(1);
    r.send(1, read(7, 2, 1));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::TaskInProgress)
    );
    assert_eq!(
        r.s.window_slots_held(),
        1,
        "the refused command gave its slot back"
    );
}

#[test]
fn abort_task_of_a_running_command_answers_after_its_result_and_drops_it() {
    let mut r = Rig::new(&[1]);
    r.send(1, read(1, 1, 8));
    let works = r.works();
    assert!(!r.s.work_abandoned(works[0].ticket));
    r.send(1, tmf_req(2, 2, TmfFunction::AbortTask, 1, 1));
    assert!(
        r.drain(1).is_empty(),
        "no answer while the SCSI layer still runs the task"
    );
    assert!(
        r.s.work_abandoned(works[0].ticket),
        "the driver may stop it"
    );
    r.complete(&works[0]);
    assert!(r.s.work_abandoned(works[0].ticket));
    let pdus = r.drain(1);
    assert!(matches!(pdus[..], [Pdu::TaskMgmtResponse(_)]), "{pdus:?}");
    assert_eq!(tmf_response_of(&pdus), Some(TmfResponse::FunctionComplete));
    assert_eq!(r.s.task_count(), 0);
    assert_eq!(r.s.stats().tasks_aborted, 1);
}

#[test]
fn abort_task_of_a_command_not_yet_arrived_fills_its_cmd_sn() {
    let mut r = Rig::new(&[1, 2]);
    r.send(2, read(20, 2, 1));
    // CmdSN 1 (ITT 10) is lost on its way; the initiator aborts it.
    r.send(1, tmf_req(30, 3, TmfFunction::AbortTask, 10, 1));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::FunctionComplete)
    );
    // The window moved past CmdSN 1: CmdSN 2 runs.
    let works = r.works();
    assert_eq!(works.len(), 1);
    assert_eq!(works[0].ticket.itt, Itt(20));
    // The aborted command arriving late is a stale duplicate.
    r.send(1, read(10, 1, 1));
    assert!(r.works().is_empty());
    // A RefCmdSN outside the window names no task.
    r.send(1, tmf_req(31, 3, TmfFunction::AbortTask, 11, 0));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::TaskDoesNotExist)
    );
}

#[test]
fn abort_task_set_waits_for_acknowledgement_on_the_other_connections() {
    let mut r = Rig::new(&[1, 2]);
    // A read on B completes; its status is sent but not acknowledged.
    r.send(2, read(20, 1, 1));
    let w = r.works();
    r.complete(&w[0]);
    let on_b = r.drain(2);
    assert!(!on_b.is_empty());
    // A write on A waits for data; ABORT TASK SET on A.
    r.send(1, write(10, 2, 1));
    r.drain(1);
    r.send(1, tmf_req(11, 3, TmfFunction::AbortTaskSet, 0, 0));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        None,
        "B has not acknowledged its status"
    );
    // The target asks B for an acknowledgement with a NOP-In ping.
    let ping = match r.drain(2)[..] {
        [Pdu::NopIn(ref n)] => n.clone(),
        ref other => panic!("expected a NOP-In on B, got {other:?}"),
    };
    assert_eq!(ping.itt, Itt::RESERVED);
    assert_ne!(ping.ttt, Ttt::RESERVED);
    // B answers, acknowledging StatSN 2000.
    r.send(2, nop_out(u32::MAX, 2, ping.ttt, SeqNum(2001)));
    let pdus = r.drain(1);
    assert_eq!(tmf_response_of(&pdus), Some(TmfResponse::FunctionComplete));
    assert!(r.works().is_empty(), "the aborted write never runs");
    assert_eq!(r.s.window_slots_held(), 0);
}

#[test]
fn an_immediate_task_set_function_waits_for_the_commands_before_it() {
    let mut r = Rig::new(&[1, 2]);
    r.send(1, read(10, 1, 1));
    let w1 = r.works();
    // CmdSN 2 is still on its way on B when the LU reset (immediate, CmdSN 3) arrives on A.
    r.send(1, tmf_req(30, 3, TmfFunction::LogicalUnitReset, 0, 0));
    r.complete(&w1[0]);
    assert_eq!(tmf_response_of(&r.drain(1)), None);
    assert!(r.env.resets.is_empty());
    // CmdSN 2 arrives: it is in the reset's scope, so it is aborted on arrival, unanswered.
    r.send(2, read(20, 2, 1));
    assert!(r.works().is_empty());
    assert!(r.drain(2).is_empty());
    assert_eq!(r.env.resets, [ResetKind::LogicalUnit(Lun(0))]);
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::FunctionComplete)
    );
    // A command issued after the reset runs normally.
    r.send(2, read(21, 3, 1));
    assert_eq!(r.works().len(), 1);
}

#[test]
fn tmf_on_a_missing_lun_and_unsupported_functions() {
    let mut r = Rig::new(&[1]);
    let Pdu::TaskMgmtRequest(mut t) = tmf_req(1, 1, TmfFunction::AbortTaskSet, 0, 0) else {
        unreachable!()
    };
    t.lun = Lun::from_number(5);
    r.send(1, Pdu::TaskMgmtRequest(t));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::LunDoesNotExist)
    );
    r.send(1, tmf_req(2, 1, TmfFunction::TaskReassign, 0, 0));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::ReassignmentNotSupported)
    );
    r.send(1, tmf_req(3, 1, TmfFunction::from(0x55), 0, 0));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::NotSupported)
    );
}

#[test]
fn target_cold_reset_answers_then_closes_every_connection() {
    let mut r = Rig::new(&[1, 2]);
    r.send(1, tmf_req(1, 1, TmfFunction::TargetColdReset, 0, 0));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::FunctionComplete)
    );
    let events = r.events();
    assert!(events.contains(&(1, Event::ColdReset)));
    for cid in [1, 2] {
        assert!(events.contains(&(cid, Event::Close(CloseReason::ColdReset))));
    }
    assert_eq!(r.env.resets, [ResetKind::TargetCold]);
}

#[test]
fn logout_of_one_connection_sent_on_another_leaves_the_rest_running() {
    let mut r = Rig::new(&[1, 2]);
    r.send(1, logout(5, 1, LogoutReason::CloseConnection, 2));
    let pdus = r.drain(1);
    let Some(Pdu::LogoutResponse(rsp)) = pdus.first() else {
        panic!("{pdus:?}")
    };
    assert_eq!(rsp.response, LogoutResponseCode::Closed);
    assert_eq!(r.events(), [(2, Event::Close(CloseReason::Logout))]);
    r.closed(2);
    assert!(!r.s.is_ended());
    r.send(1, read(1, 1, 1));
    assert_eq!(r.works().len(), 1);
    // A CID that is not (or no longer) there.
    r.send(1, logout(6, 2, LogoutReason::CloseConnection, 2));
    let Some(Pdu::LogoutResponse(rsp)) = r.drain(1).pop() else {
        panic!()
    };
    assert_eq!(rsp.response, LogoutResponseCode::CidNotFound);
    // Removing a connection for recovery needs ErrorRecoveryLevel 2.
    r.send(1, logout(7, 2, LogoutReason::RemoveForRecovery, 1));
    let Some(Pdu::LogoutResponse(rsp)) = r.drain(1).pop() else {
        panic!()
    };
    assert_eq!(rsp.response, LogoutResponseCode::RecoveryNotSupported);
}

#[test]
fn logout_of_the_session_closes_every_connection() {
    let mut r = Rig::new(&[1, 2, 3]);
    r.send(3, logout(5, 1, LogoutReason::CloseSession, 3));
    assert!(matches!(r.drain(3)[..], [Pdu::LogoutResponse(_)]));
    let closed: Vec<u16> = r
        .events()
        .into_iter()
        .map(|(cid, e)| {
            assert_eq!(e, Event::Close(CloseReason::Logout));
            cid
        })
        .collect();
    assert_eq!(closed, [1, 2, 3]);
    for cid in closed {
        r.closed(cid);
    }
    assert!(r.s.is_ended());
}

#[test]
fn a_failed_connection_ends_its_tasks_and_its_held_commands_do_not_block_the_window() {
    let mut r = Rig::new(&[1, 2]);
    r.send(2, read(21, 2, 1)); // held for CmdSN 1
    r.send(2, write(22, 4, 1)); // held for CmdSN 3
    r.send(1, read(11, 3, 1)); // held
    r.closed(2);
    // CmdSN 1 arrives on A: CmdSN 2 (B's, gone) is skipped, CmdSN 3 runs, CmdSN 4 skipped.
    r.send(1, read(10, 1, 1));
    let itts: Vec<Itt> = r.works().iter().map(|w| w.ticket.itt).collect();
    assert_eq!(itts, [Itt(10), Itt(11)]);
    assert_eq!(r.s.command_window().0, SeqNum(5));
}

#[test]
fn connection_reinstatement_closes_the_old_connection_and_ends_its_tasks() {
    let mut r = Rig::new(&[1, 2]);
    r.send(2, write(20, 1, 1));
    r.drain(2);
    assert_eq!(r.s.window_slots_held(), 1);
    let old = r.id(2);
    let added = r.s.add_connection(setup(2, 5000), r.now, &mut r.env);
    assert_eq!(
        added,
        Added::Reinstated {
            conn: added.conn(),
            replaced: old
        }
    );
    assert_eq!(r.events(), [(2, Event::Close(CloseReason::Reinstated))]);
    assert_eq!(
        r.s.window_slots_held(),
        0,
        "the old connection's write ended"
    );
    r.ids.push((2, added.conn()));
    // The old connection takes no more input, and sends nothing the new one queues.
    r.s.handle_pdu(old, read(77, 2, 1), r.now, &mut r.env);
    assert!(r.works().is_empty());
    // The new connection numbers from its own login.
    let (exp, _) = r.s.command_window();
    r.send(2, nop_out(3, exp.0, Ttt::RESERVED, SeqNum(5000)));
    let Some(Pdu::NopIn(n)) = r.drain(2).pop() else {
        panic!()
    };
    assert_eq!(n.stat_sn, SeqNum(5000));
}

#[test]
fn a_joining_connection_keeps_the_session_wide_values() {
    let mut r = Rig::new(&[1]);
    let mut s2 = setup(2, 1);
    s2.params.max_burst_length = 512;
    s2.params.initiator_max_recv_data_segment_length = 4096;
    let id = r.s.add_connection(s2, r.now, &mut r.env).conn();
    let p = r.s.connection_params(id).unwrap();
    assert_eq!(p.max_burst_length, r.s.params().max_burst_length);
    assert_eq!(p.initiator_max_recv_data_segment_length, 4096);
}

#[test]
fn too_many_immediate_commands_are_rejected() {
    let mut r = Rig::new(&[1]);
    for i in 0..16 {
        r.send(1, immediate(write(100 + i, 1, 1)));
    }
    r.drain(1);
    r.send(1, immediate(write(200, 1, 1)));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ImmediateCommandReject)
    );
}

#[test]
fn keepalive_pings_an_idle_initiator_and_closes_a_silent_one() {
    let now = Instant::now();
    let config = SessionConfig {
        session_type: SessionType::Normal,
        queue_depth: 8,
        max_write_bytes_per_connection: 1 << 20,
        keepalive: Some(KeepaliveConfig {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(5),
        }),
        recovery: RecoveryConfig::default(),
    };
    let mut env = Env::default();
    let (mut s, c) = TargetSession::new(config, setup(1, 1), now);
    let t = s.poll_timeout().unwrap();
    assert_eq!(t, now + Duration::from_secs(5));
    s.handle_timeout(t, &mut env);
    let Some(Pdu::NopIn(ping)) = s.poll_transmit(c) else {
        panic!()
    };
    assert_eq!(ping.itt, Itt::RESERVED);
    let t = s.poll_timeout().unwrap();
    s.handle_timeout(t, &mut env);
    assert_eq!(
        s.poll_event(c),
        Some(Event::Close(CloseReason::KeepaliveTimeout))
    );
}

#[test]
fn shutdown_asks_for_logout_then_closes_after_the_grace_period() {
    let mut r = Rig::new(&[1, 2]);
    r.s.request_logout(r.now, Duration::from_secs(3));
    for cid in [1, 2] {
        let Some(Pdu::AsyncMessage(m)) = r.drain(cid).pop() else {
            panic!()
        };
        assert_eq!(
            (m.async_event, m.parameter3),
            (AsyncEvent::LogoutRequested, 3)
        );
    }
    let t = r.s.poll_timeout().unwrap();
    assert_eq!(t, r.now + Duration::from_secs(3));
    r.s.handle_timeout(t, &mut r.env);
    assert_eq!(r.events().len(), 2);
}

#[test]
fn text_send_targets_and_a_renegotiation_attempt() {
    let mut r = Rig::new(&[1, 2]);
    let req = |data: &str| {
        Pdu::TextRequest(TextRequest {
            immediate: true,
            final_bit: true,
            cont: false,
            lun: Lun(0),
            itt: Itt(9),
            ttt: Ttt::RESERVED,
            cmd_sn: SeqNum(1),
            exp_stat_sn: SeqNum(0),
            data: Bytes::from(data.to_owned()),
        })
    };
    r.send(2, req("SendTargets=All\0"));
    let Some(Pdu::TextResponse(t)) = r.drain(2).pop() else {
        panic!()
    };
    assert!(t.final_bit);
    assert_eq!(
        &t.data[..],
        b"TargetName=iqn.2026-11.test:All\0TargetAddress=127.0.0.1:3260,1\0"
    );
    r.send(1, req("MaxBurstLength=512\0X-vendor=1\0"));
    let Some(Pdu::TextResponse(t)) = r.drain(1).pop() else {
        panic!()
    };
    assert_eq!(
        &t.data[..],
        b"MaxBurstLength=Reject\0X-vendor=NotUnderstood\0"
    );
}

#[test]
fn discovery_sessions_take_only_text_logout_and_nop() {
    let now = Instant::now();
    let config = SessionConfig {
        session_type: SessionType::Discovery,
        queue_depth: 8,
        max_write_bytes_per_connection: 1 << 20,
        keepalive: None,
        recovery: RecoveryConfig::default(),
    };
    let mut env = Env::default();
    let (mut s, c) = TargetSession::new(config, setup(0, 1), now);
    s.handle_pdu(c, read(1, 1, 1), now, &mut env);
    assert!(matches!(s.poll_transmit(c), Some(Pdu::Reject(_))));
    assert!(s.poll_work().is_none());
}

#[test]
fn exp_stat_sn_cannot_acknowledge_a_status_not_sent() {
    let mut r = Rig::new(&[1, 2]);
    r.send(2, read(20, 1, 1));
    let w = r.works();
    r.complete(&w[0]);
    r.drain(2);
    // B claims to have seen far more than was sent: ignored, so the TMF still waits.
    r.send(2, with_exp_stat_sn(immediate(read(21, 2, 1)), SeqNum(9999)));
    let w = r.works();
    r.complete(&w[0]);
    r.send(1, tmf_req(1, 2, TmfFunction::AbortTaskSet, 0, 0));
    assert_eq!(tmf_response_of(&r.drain(1)), None);
}

#[test]
fn ping_data_is_echoed_within_the_initiators_max_recv_data_segment_length() {
    // RFC 7143 section 11.18.5: the reflected data is limited to MaxRecvDataSegmentLength. The
    // initiator may send up to the target's (64 KiB here) but receives at most its own (4 KiB).
    let mut leading = setup(1, 100);
    leading.params.initiator_max_recv_data_segment_length = 4096;
    leading.params.target_max_recv_data_segment_length = 65536;
    let config = SessionConfig {
        session_type: SessionType::Normal,
        queue_depth: 8,
        max_write_bytes_per_connection: 1 << 20,
        keepalive: None,
        recovery: RecoveryConfig::default(),
    };
    let now = Instant::now();
    let mut env = Env::default();
    let (mut s, conn) = TargetSession::new(config, leading, now);
    let data: Bytes = (0..65536u32).map(|i| i as u8).collect();
    let Pdu::NopOut(mut ping) = nop_out(7, 1, Ttt::RESERVED, SeqNum(100)) else {
        unreachable!()
    };
    ping.data = data.clone();
    s.handle_pdu(conn, Pdu::NopOut(ping), now, &mut env);
    match s.poll_transmit(conn) {
        Some(Pdu::NopIn(echo)) => {
            assert_eq!(echo.itt, Itt(7));
            assert_eq!(echo.data, data.slice(..4096));
        }
        other => panic!("expected the NOP-In echo, got {other:?}"),
    }
}

#[path = "recovery_tests.rs"]
mod recovery;

#[path = "reassign_tests.rs"]
mod reassign;

#[path = "ordering_tests.rs"]
mod ordering;

#[test]
fn work_carries_the_data_out_length_the_initiator_announced() {
    let mut r = Rig::new(&[1]);
    // A one-block WRITE whose Expected Data Transfer Length says two blocks: the SCSI layer
    // gets the one block it asked for, and hears of the two.
    let Pdu::ScsiCommand(mut c) = write(1, 1, 1) else {
        unreachable!()
    };
    c.expected_data_transfer_length = 2 * BLOCK;
    r.send(1, Pdu::ScsiCommand(c));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!("no R2T")
    };
    assert_eq!(r2t.desired_data_transfer_length, BLOCK);
    r.send(1, data_out(1, r2t.ttt, 0, BLOCK as usize, true));
    let works = r.works();
    assert_eq!(works[0].data_out.len(), BLOCK as usize);
    assert_eq!(works[0].data_out_len, 2 * BLOCK);
    assert_eq!(works[0].data_in_len, 0);
    r.send(1, read(2, 2, 1));
    assert_eq!(r.works()[0].data_out_len, 0);
}

#[test]
fn a_write_to_a_lun_that_keeps_nothing_runs_with_its_length_only() {
    let mut r = Rig::new(&[1]);
    r.env.keeps_nothing = true;
    r.send(1, write(1, 1, 2));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!("no R2T")
    };
    r.send(1, data_out(1, r2t.ttt, 0, 2 * BLOCK as usize, true));
    let works = r.works();
    assert_eq!(works[0].data_out.unkept(), Some(2 * BLOCK as usize));
    assert!(works[0].data_out.segments().is_empty());
    // A LUN that keeps what it is written gets the bytes.
    r.env.keeps_nothing = false;
    r.send(1, write(2, 2, 2));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!("no R2T")
    };
    r.send(1, data_out(2, r2t.ttt, 0, 2 * BLOCK as usize, true));
    let works = r.works();
    assert_eq!(works[0].data_out.unkept(), None);
    assert_eq!(works[0].data_out.len(), 2 * BLOCK as usize);
}

#[test]
fn writes_that_keep_nothing_count_nothing_against_the_buffered_write_limit() {
    // The rig buffers at most 1 MiB of write data per connection: a second 1 MiB write
    // waiting for its data gets TASK SET FULL, unless neither holds any.
    for keeps_nothing in [false, true] {
        let mut r = Rig::new(&[1]);
        r.env.keeps_nothing = keeps_nothing;
        r.send(1, write(1, 1, 2048));
        r.send(1, write(2, 2, 2048));
        let out = r.drain(1);
        let r2ts = out.iter().filter(|p| matches!(p, Pdu::R2t(_))).count();
        let full = out
            .iter()
            .filter(
                |p| matches!(p, Pdu::ScsiResponse(rsp) if rsp.status == ScsiStatus::TaskSetFull),
            )
            .count();
        let expected = if keeps_nothing { (2, 0) } else { (1, 1) };
        assert_eq!((r2ts, full), expected, "keeps_nothing {keeps_nothing}");
    }
}

#[test]
fn tasks_aborted_by_another_nexus_end_without_status() {
    let mut r = Rig::new(&[1]);
    // Two reads the SCSI layer runs, a write waiting for its data.
    r.send(1, read(1, 1, 1));
    r.send(1, read(2, 2, 1));
    let works = r.works();
    assert_eq!(works.len(), 2);
    r.send(1, write(3, 3, 1));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!("expected an R2T")
    };
    // PREEMPT AND ABORT: read 2 is the preempting command itself and survives.
    assert_eq!(r.s.abort_tasks_of_lun(Lun(0), Some(works[1].ticket)), 2);
    assert_eq!(r.s.abort_tasks_of_lun(Lun(1), None), 0, "another LUN");
    r.complete(&works[0]);
    assert!(r.drain(1).is_empty(), "the aborted read gets no status");
    r.send(1, data_out(3, r2t.ttt, 0, 512, true));
    assert!(
        r.drain(1).is_empty(),
        "late data of the aborted write is dropped"
    );
    assert!(r.works().is_empty());
    r.complete(&works[1]);
    let pdus = r.drain(1);
    assert!(
        pdus.iter()
            .any(|p| matches!(p, Pdu::ScsiResponse(_) | Pdu::DataIn(_))),
        "{pdus:?}"
    );
    assert_eq!(r.s.task_count(), 0);
    assert_eq!(r.s.window_slots_held(), 0);
}
