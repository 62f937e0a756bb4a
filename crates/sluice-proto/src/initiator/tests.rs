//! The initiator session driven by a scripted target: what it sends, on which connection, and
//! how it completes each request.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::*;
use crate::pdu::codes::{
    AsyncEvent, LogoutReason, LogoutResponseCode, RejectReason, ScsiResponseCode, ScsiStatus,
    TmfFunction, TmfResponse,
};
use crate::pdu::{
    AsyncMessage, DataIn, LogoutResponse, NopIn, Pdu, R2t, Reject, ScsiResponse, TaskMgmtResponse,
    TextResponse,
};
use crate::seq::Ttt;

struct Rig {
    s: InitiatorSession,
    now: Instant,
    ids: Vec<ConnId>,
    /// Next StatSN the scripted target sends, per connection.
    stat_sn: Vec<u32>,
}

fn setup(cid: u16) -> ConnectionSetup {
    ConnectionSetup {
        cid,
        params: SessionParams {
            max_connections: 4,
            ..SessionParams::default()
        },
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(100 * u32::from(cid)),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(8),
    }
}

impl Rig {
    fn new(conns: u16, policy: Policy) -> Self {
        Self::with(conns, policy, setup(0).params)
    }

    /// A session with these negotiated `params` on every connection.
    fn with(conns: u16, policy: Policy, params: SessionParams) -> Self {
        let now = Instant::now();
        let config = SessionConfig {
            policy,
            max_retries: 2,
            keepalive: None,
            recovery: RecoveryConfig::default(),
        };
        let setup = |cid| ConnectionSetup {
            params,
            ..setup(cid)
        };
        let (mut s, first) = InitiatorSession::new(config, setup(0), now);
        let mut ids = vec![first];
        for cid in 1..conns {
            ids.push(s.add_connection(setup(cid), now));
        }
        let stat_sn = (0..conns).map(|c| 100 * u32::from(c)).collect();
        Self {
            s,
            now,
            ids,
            stat_sn,
        }
    }

    fn drain(&mut self, conn: usize) -> Vec<Pdu> {
        let id = self.ids[conn];
        std::iter::from_fn(|| self.s.poll_transmit(id)).collect()
    }

    fn completions(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.s.poll_completion()).collect()
    }

    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.s.poll_event()).collect()
    }

    fn next_stat_sn(&mut self, conn: usize) -> SeqNum {
        let sn = self.stat_sn[conn];
        self.stat_sn[conn] += 1;
        SeqNum(sn)
    }

    /// The target's answer to a command, with a window of `max` as MaxCmdSN.
    fn respond(&mut self, conn: usize, itt: Itt, exp: u32, max: u32) {
        let stat_sn = self.next_stat_sn(conn);
        let rsp = ScsiResponse {
            bidi_overflow: false,
            bidi_underflow: false,
            overflow: false,
            underflow: false,
            response: ScsiResponseCode::Completed,
            status: ScsiStatus::Good,
            itt,
            snack_tag: 0,
            stat_sn,
            exp_cmd_sn: SeqNum(exp),
            max_cmd_sn: SeqNum(max),
            exp_data_sn: 0,
            bidi_residual: 0,
            residual: 0,
            data: Bytes::new(),
        };
        self.send(conn, Pdu::ScsiResponse(rsp));
    }

    fn send(&mut self, conn: usize, pdu: Pdu) {
        let id = self.ids[conn];
        self.s.handle_pdu(id, pdu, self.now);
    }
}

fn read(lun: u16, len: u32) -> Command {
    Command {
        lun: Lun::from_number(lun),
        cdb: Cdb::new(&[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
        data: CommandData::Read(len),
        attr: TaskAttr::Simple,
    }
}

fn tur() -> Command {
    Command {
        lun: Lun::from_number(0),
        cdb: Cdb::new(&[0; 6]),
        data: CommandData::None,
        attr: TaskAttr::Simple,
    }
}

fn write(len: usize) -> Command {
    Command {
        lun: Lun::from_number(0),
        cdb: Cdb::new(&[0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
        data: CommandData::Write(Bytes::from(vec![7; len])),
        attr: TaskAttr::Simple,
    }
}

fn commands(pdus: &[Pdu]) -> Vec<(Itt, SeqNum)> {
    pdus.iter()
        .filter_map(|p| match p {
            Pdu::ScsiCommand(c) => Some((c.itt, c.cmd_sn)),
            _ => None,
        })
        .collect()
}

fn command_result(c: &Completion) -> (TaskId, &Result<CommandResult, Failure>) {
    match c {
        Completion::Command(id, r) => (*id, r),
        other => panic!("expected a command completion, got {other:?}"),
    }
}

#[test]
fn a_read_is_sent_and_its_data_in_completes_it() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let id = r.s.submit(read(0, 512), r.now);
    let pdus = r.drain(0);
    let [(itt, cmd_sn)] = commands(&pdus)[..] else {
        panic!("{pdus:?}")
    };
    assert_eq!(cmd_sn, SeqNum(1));
    let Pdu::ScsiCommand(c) = &pdus[0] else {
        panic!()
    };
    assert_eq!(c.exp_stat_sn, SeqNum(0), "ExpStatSN from the login");
    let stat_sn = r.next_stat_sn(0);
    r.send(
        0,
        Pdu::DataIn(DataIn {
            final_bit: true,
            ack: false,
            overflow: false,
            underflow: false,
            status_present: true,
            status: ScsiStatus::Good,
            lun: Lun(0),
            itt,
            ttt: Ttt::RESERVED,
            stat_sn,
            exp_cmd_sn: SeqNum(2),
            max_cmd_sn: SeqNum(9),
            data_sn: 0,
            buffer_offset: 0,
            residual: 0,
            data: Bytes::from(vec![3; 512]),
        }),
    );
    let done = r.completions();
    let (got, result) = command_result(&done[0]);
    assert_eq!(got, id);
    let result = result.as_ref().unwrap();
    assert_eq!(result.data.len(), 512);
    assert!(result.stats.phase_collapse);
    // The next command acknowledges the status.
    r.s.submit(read(0, 512), r.now);
    let Pdu::ScsiCommand(c) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!(c.exp_stat_sn, SeqNum(1));
}

#[test]
fn commands_wait_for_the_window_and_go_when_it_opens() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    for _ in 0..10 {
        r.s.submit(read(0, 512), r.now);
    }
    let sent = commands(&r.drain(0));
    assert_eq!(sent.len(), 8, "CmdSN 1..=8 fit the window");
    assert_eq!(r.s.waiting(), 2);
    r.respond(0, sent[0].0, 2, 10);
    let more = commands(&r.drain(0));
    assert_eq!(
        more.iter().map(|c| c.1).collect::<Vec<_>>(),
        [SeqNum(9), SeqNum(10)]
    );
}

#[test]
fn round_robin_least_commands_and_lu_affinity_spread_commands() {
    let mut r = Rig::new(3, Policy::RoundRobin);
    for _ in 0..6 {
        r.s.submit(read(0, 512), r.now);
    }
    for c in 0..3 {
        assert_eq!(commands(&r.drain(c)).len(), 2, "connection {c}");
    }

    let mut r = Rig::new(2, Policy::LuAffinity);
    for lun in [0, 1, 0, 1, 2, 2] {
        r.s.submit(read(lun, 512), r.now);
    }
    let luns = |pdus: Vec<Pdu>| -> Vec<u16> {
        pdus.iter()
            .filter_map(|p| match p {
                Pdu::ScsiCommand(c) => c.lun.number(),
                _ => None,
            })
            .collect()
    };
    let (a, b) = (luns(r.drain(0)), luns(r.drain(1)));
    assert_eq!(a, [0, 0, 2, 2]);
    assert_eq!(b, [1, 1]);

    let mut r = Rig::new(2, Policy::LeastCommands);
    r.s.submit(read(0, 512), r.now);
    r.s.submit(read(0, 512), r.now);
    let first = commands(&r.drain(0));
    assert_eq!((first.len(), commands(&r.drain(1)).len()), (1, 1));
    r.respond(0, first[0].0, 2, 10);
    r.s.submit(read(0, 512), r.now);
    assert_eq!(
        commands(&r.drain(0)).len(),
        1,
        "the idle connection takes the next one"
    );
}

#[test]
fn least_bytes_sends_small_commands_beside_a_large_one() {
    let mut r = Rig::new(2, Policy::LeastBytes);
    r.s.submit(read(0, 1 << 20), r.now);
    for _ in 0..3 {
        r.s.submit(read(0, 4096), r.now);
    }
    assert_eq!(commands(&r.drain(0)).len(), 1);
    assert_eq!(commands(&r.drain(1)).len(), 3);
}

#[test]
fn an_r2t_is_answered_on_the_task_connection() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    r.s.submit(read(0, 512), r.now);
    r.s.submit(write(8192), r.now);
    r.drain(0);
    let pdus = r.drain(1);
    let Pdu::ScsiCommand(cmd) = &pdus[0] else {
        panic!()
    };
    let stat_sn = r.next_stat_sn(1);
    r.send(
        1,
        Pdu::R2t(R2t {
            lun: cmd.lun,
            itt: cmd.itt,
            ttt: Ttt(5),
            stat_sn,
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(8),
            r2t_sn: 0,
            buffer_offset: 0,
            desired_data_transfer_length: 8192,
        }),
    );
    let out = r.drain(1);
    assert!(!out.is_empty());
    assert!(out
        .iter()
        .all(|p| matches!(p, Pdu::DataOut(d) if d.ttt == Ttt(5))));
    assert!(r.drain(0).is_empty());
}

#[test]
fn abort_task_ends_the_task_and_task_sets_end_what_came_before_them() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let a = r.s.submit(read(0, 512), r.now);
    let b = r.s.submit(read(0, 512), r.now);
    let sent = commands(&r.drain(0));
    let req =
        r.s.task_management(TmfFunction::AbortTask, Lun(0), Some(a), r.now);
    let Pdu::TaskMgmtRequest(t) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!((t.referenced_task_tag, t.ref_cmd_sn), sent[0]);
    let stat_sn = r.next_stat_sn(0);
    r.send(
        0,
        Pdu::TaskMgmtResponse(TaskMgmtResponse {
            response: TmfResponse::FunctionComplete,
            itt: t.itt,
            stat_sn,
            exp_cmd_sn: SeqNum(3),
            max_cmd_sn: SeqNum(10),
        }),
    );
    let done = r.completions();
    assert_eq!(
        done,
        [
            Completion::Command(a, Err(Failure::Aborted)),
            Completion::TaskMgmt(req, Ok(TmfResponse::FunctionComplete))
        ]
    );
    // ABORT TASK SET: B (before it) ends; C, sent after it, goes on.
    let set =
        r.s.task_management(TmfFunction::AbortTaskSet, Lun(0), None, r.now);
    let c = r.s.submit(read(0, 512), r.now);
    let pdus = r.drain(0);
    let Pdu::TaskMgmtRequest(t) = &pdus[0] else {
        panic!()
    };
    let stat_sn = r.next_stat_sn(0);
    r.send(
        0,
        Pdu::TaskMgmtResponse(TaskMgmtResponse {
            response: TmfResponse::FunctionComplete,
            itt: t.itt,
            stat_sn,
            exp_cmd_sn: SeqNum(4),
            max_cmd_sn: SeqNum(11),
        }),
    );
    let done = r.completions();
    assert_eq!(
        done,
        [
            Completion::Command(b, Err(Failure::Aborted)),
            Completion::TaskMgmt(set, Ok(TmfResponse::FunctionComplete))
        ]
    );
    assert_eq!(r.s.in_flight(), 1);
    let _ = c;
}

#[test]
fn abort_of_a_command_still_waiting_needs_no_target() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    for _ in 0..8 {
        r.s.submit(read(0, 512), r.now);
    }
    let waiting = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    let req =
        r.s.task_management(TmfFunction::AbortTask, Lun(0), Some(waiting), r.now);
    assert!(r.drain(0).is_empty());
    assert_eq!(
        r.completions(),
        [
            Completion::Command(waiting, Err(Failure::Aborted)),
            Completion::TaskMgmt(req, Ok(TmfResponse::FunctionComplete))
        ]
    );
}

#[test]
fn pings_both_ways() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let id = r.s.ping(r.now);
    let Pdu::NopOut(n) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!(n.ttt, Ttt::RESERVED);
    let itt = n.itt;
    r.now += Duration::from_millis(3);
    let stat_sn = r.next_stat_sn(0);
    let nop = |itt, ttt, stat_sn| {
        Pdu::NopIn(NopIn {
            lun: Lun(0),
            itt,
            ttt,
            stat_sn,
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(8),
            data: Bytes::new(),
        })
    };
    r.send(0, nop(itt, Ttt::RESERVED, stat_sn));
    assert_eq!(
        r.completions(),
        [Completion::Ping(id, Ok(Duration::from_millis(3)))]
    );
    // The target's ping is answered with its TTT and the reserved ITT.
    r.send(0, nop(Itt::RESERVED, Ttt(77), SeqNum(r.stat_sn[0])));
    let Pdu::NopOut(n) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!((n.itt, n.ttt), (Itt::RESERVED, Ttt(77)));
}

#[test]
fn text_fetches_a_continued_answer() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let id = r.s.text(&[("SendTargets".into(), "All".into())]);
    let Pdu::TextRequest(t) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!(&t.data[..], b"SendTargets=All\0");
    let itt = t.itt;
    let part = |data: &'static [u8], last: bool, stat_sn| {
        Pdu::TextResponse(TextResponse {
            final_bit: last,
            cont: !last,
            lun: Lun(0),
            itt,
            ttt: if last { Ttt::RESERVED } else { Ttt(9) },
            stat_sn,
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(8),
            data: Bytes::from_static(data),
        })
    };
    let sn = r.next_stat_sn(0);
    r.send(0, part(b"TargetName=iqn.2026-11.a:b\0Target", false, sn));
    let Pdu::TextRequest(c) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!((c.itt, c.ttt, c.data.len()), (itt, Ttt(9), 0));
    let sn = r.next_stat_sn(0);
    r.send(0, part(b"Address=10.0.0.1:3260,1\0", true, sn));
    let expected = vec![
        ("TargetName".to_owned(), "iqn.2026-11.a:b".to_owned()),
        ("TargetAddress".to_owned(), "10.0.0.1:3260,1".to_owned()),
    ];
    assert_eq!(r.completions(), [Completion::Text(id, Ok(expected))]);
}

fn logout_response(itt: Itt, response: LogoutResponseCode, stat_sn: SeqNum) -> Pdu {
    Pdu::LogoutResponse(LogoutResponse {
        response,
        itt,
        stat_sn,
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(8),
        time2wait: 0,
        time2retain: 0,
    })
}

#[test]
fn logging_out_one_connection_drains_it_and_the_others_go_on() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    r.s.submit(read(0, 512), r.now);
    let on_a = commands(&r.drain(0));
    let id = r.s.logout_connection(r.ids[0]);
    assert!(
        r.drain(0).is_empty(),
        "the logout waits for the outstanding read"
    );
    r.s.submit(read(0, 512), r.now);
    r.s.submit(read(0, 512), r.now);
    assert_eq!(
        commands(&r.drain(1)).len(),
        2,
        "new commands go to the other connection"
    );
    r.respond(0, on_a[0].0, 2, 9);
    let pdus = r.drain(0);
    let Pdu::LogoutRequest(l) = &pdus[0] else {
        panic!("{pdus:?}")
    };
    assert_eq!((l.reason, l.cid), (LogoutReason::CloseConnection, 0));
    let sn = r.next_stat_sn(0);
    r.send(0, logout_response(l.itt, LogoutResponseCode::Closed, sn));
    assert!(r.completions().contains(&Completion::Logout(id, Ok(()))));
    assert_eq!(r.events(), [Event::Close(r.ids[0], CloseReason::Logout)]);
    // Logged out: no longer listed, though its transport is still being closed.
    let cids: Vec<u16> = r.s.connection_stats().iter().map(|c| c.cid).collect();
    assert_eq!(cids, [1]);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert_eq!(r.s.live_connections().count(), 1);
    assert!(r.events().is_empty(), "no recovery after a logout");
}

#[test]
fn logging_out_the_session_ends_everything() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let cmd = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    let id = r.s.logout();
    let Pdu::LogoutRequest(l) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!(l.reason, LogoutReason::CloseSession);
    let sn = r.next_stat_sn(0);
    r.send(0, logout_response(l.itt, LogoutResponseCode::Closed, sn));
    let done = r.completions();
    assert!(done.contains(&Completion::Logout(id, Ok(()))));
    assert!(done.contains(&Completion::Command(cmd, Err(Failure::Closed))));
    assert_eq!(
        r.events(),
        [Event::Close(r.ids[0], CloseReason::Logout), Event::Ended]
    );
}

/// Seeds 551134 and 693047: a write acknowledged on a connection that failed was issued again
/// on another one at once, and the target, still reading the failed connection, ran the
/// original after a newer write to the same blocks. Below ErrorRecoveryLevel 2 nothing says
/// when the target has ended a failed connection's tasks, so the session is reinstated.
#[test]
fn a_lost_connection_with_acknowledged_commands_reinstates_the_session() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    let a = r.s.submit(tur(), r.now);
    r.s.submit(tur(), r.now);
    r.drain(0);
    r.drain(1);
    // The target acknowledged both (ExpCmdSN 3) on connection 1.
    r.send(
        1,
        Pdu::NopIn(NopIn {
            lun: Lun(0),
            itt: Itt::RESERVED,
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum(r.stat_sn[1]),
            exp_cmd_sn: SeqNum(3),
            max_cmd_sn: SeqNum(10),
            data: Bytes::new(),
        }),
    );
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert!(
        r.drain(1).is_empty(),
        "nothing is issued again beside a command the target may still run"
    );
    assert_eq!(
        r.events(),
        [
            Event::Close(r.ids[1], CloseReason::Reinstate),
            Event::Reinstate
        ]
    );
    r.s.handle_connection_closed(r.ids[1], r.now);
    let mut fresh = setup(0);
    fresh.cmd_sn = SeqNum(50);
    fresh.exp_cmd_sn = SeqNum(50);
    fresh.max_cmd_sn = SeqNum(60);
    let id = r.s.reinstate(fresh, r.now);
    let pdus: Vec<Pdu> = std::iter::from_fn(|| r.s.poll_transmit(id)).collect();
    assert_eq!(commands(&pdus).len(), 2, "both go again in the new session");
    assert!(r.completions().is_empty());
    let _ = a;
}

#[test]
fn a_lost_connection_with_nothing_on_it_leaves_the_others_going() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert!(r.events().is_empty(), "no session recovery needed");
    r.s.submit(tur(), r.now);
    assert_eq!(commands(&r.drain(1)).len(), 1);
}

#[test]
fn a_lost_connection_with_unacknowledged_commands_reinstates_the_session() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    let a = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert_eq!(
        r.events(),
        [
            Event::Close(r.ids[1], CloseReason::Reinstate),
            Event::Reinstate
        ]
    );
    r.s.handle_connection_closed(r.ids[1], r.now);
    let mut fresh = setup(0);
    fresh.cmd_sn = SeqNum(50);
    fresh.exp_cmd_sn = SeqNum(50);
    fresh.max_cmd_sn = SeqNum(60);
    let id = r.s.reinstate(fresh, r.now);
    let pdus: Vec<Pdu> = std::iter::from_fn(|| r.s.poll_transmit(id)).collect();
    assert_eq!(commands(&pdus).len(), 1);
    assert_eq!(commands(&pdus)[0].1, SeqNum(50));
    let _ = a;
}

#[test]
fn retries_are_bounded() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let a = r.s.submit(read(0, 512), r.now);
    for attempt in 0..3 {
        r.drain(0);
        r.s.handle_connection_closed(r.ids[0], r.now);
        assert!(r.events().contains(&Event::Reinstate));
        r.ids[0] = r.s.reinstate(setup(0), r.now);
        let done = r.completions();
        if attempt == 2 {
            assert_eq!(done, [Completion::Command(a, Err(Failure::TooManyRetries))]);
        } else {
            assert!(done.is_empty());
        }
    }
}

#[test]
fn the_target_asking_one_of_two_connections_to_log_out() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    let msg = |event, stat_sn| {
        Pdu::AsyncMessage(AsyncMessage {
            lun: Lun(0),
            stat_sn,
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(8),
            async_event: event,
            async_vcode: 0,
            parameter1: 0,
            parameter2: 0,
            parameter3: 5,
            data: Bytes::new(),
        })
    };
    let sn = r.next_stat_sn(1);
    r.send(1, msg(AsyncEvent::LogoutRequested, sn));
    let Pdu::LogoutRequest(l) = &r.drain(1)[0] else {
        panic!()
    };
    assert_eq!((l.reason, l.cid), (LogoutReason::CloseConnection, 1));
    // Now the last one: the session logs out and is reinstated.
    let sn = r.next_stat_sn(1);
    r.send(1, logout_response(l.itt, LogoutResponseCode::Closed, sn));
    r.s.handle_connection_closed(r.ids[1], r.now);
    r.events();
    let sn = r.next_stat_sn(0);
    r.send(0, msg(AsyncEvent::LogoutRequested, sn));
    let Pdu::LogoutRequest(l) = &r.drain(0)[0] else {
        panic!()
    };
    assert_eq!(l.reason, LogoutReason::CloseSession);
    let sn = r.next_stat_sn(0);
    r.send(0, logout_response(l.itt, LogoutResponseCode::Closed, sn));
    assert!(r.events().contains(&Event::Reinstate));
}

#[test]
fn a_rejected_command_fails() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let a = r.s.submit(read(0, 512), r.now);
    let pdus = r.drain(0);
    let mut header = bytes::BytesMut::new();
    pdus[0].emit_header(&mut header);
    let sn = r.next_stat_sn(0);
    r.send(
        0,
        Pdu::Reject(Reject {
            reason: RejectReason::InvalidPduField,
            stat_sn: sn,
            exp_cmd_sn: SeqNum(2),
            max_cmd_sn: SeqNum(9),
            data_sn: 0,
            data: header.freeze(),
        }),
    );
    assert_eq!(
        r.completions(),
        [Completion::Command(
            a,
            Err(Failure::Rejected(RejectReason::InvalidPduField))
        )]
    );
}

#[test]
fn keepalive_pings_then_gives_the_connection_up() {
    let now = Instant::now();
    let config = SessionConfig {
        policy: Policy::RoundRobin,
        max_retries: 1,
        keepalive: Some((Duration::from_secs(5), Duration::from_secs(5))),
        recovery: RecoveryConfig::default(),
    };
    let (mut s, c) = InitiatorSession::new(config, setup(0), now);
    let t = s.poll_timeout().unwrap();
    s.handle_timeout(t);
    assert!(matches!(s.poll_transmit(c), Some(Pdu::NopOut(_))));
    let t = s.poll_timeout().unwrap();
    s.handle_timeout(t);
    assert_eq!(
        s.poll_event(),
        Some(Event::Close(c, CloseReason::KeepaliveTimeout))
    );
}

/// A target that answers for tasks it was not given, on the wrong connection, or with a
/// window that cannot be (RFC 7143 section 4.2.2.1: MaxCmdSN >= ExpCmdSN - 1) loses the
/// initiator nothing: those answers are ignored and the real ones still complete.
#[test]
fn answers_for_unknown_tasks_wrong_connections_or_impossible_windows_are_ignored() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    let a = r.s.submit(read(0, 512), r.now);
    let b = r.s.submit(read(0, 512), r.now);
    let on_a = commands(&r.drain(0));
    let on_b = commands(&r.drain(1));
    let (itt_a, itt_b) = (on_a[0].0, on_b[0].0);
    // No such task.
    r.respond(0, Itt(0x5555), 1, 8);
    // Task b's answer on connection 0 (its allegiance is connection 1).
    r.respond(0, itt_b, 1, 8);
    assert!(r.completions().is_empty());
    assert_eq!(r.s.in_flight(), 2);
    // An impossible window does not move the initiator's.
    for _ in 0..8 {
        r.s.submit(read(0, 512), r.now);
    }
    let sent: usize = (0..2).map(|c| commands(&r.drain(c)).len()).sum();
    assert_eq!(sent, 6, "CmdSN 3..=8 fit the window 1..=8");
    // MaxCmdSN 50 would open the window if it were believed; ExpCmdSN 100 makes it impossible.
    r.respond(1, Itt(0x6666), 100, 50);
    assert_eq!(
        (0..2).map(|c| commands(&r.drain(c)).len()).sum::<usize>(),
        0
    );
    assert_eq!(r.s.waiting(), 2);
    // The real answers complete their tasks.
    r.respond(0, itt_a, 3, 10);
    r.respond(1, itt_b, 3, 10);
    let done: Vec<TaskId> = r
        .completions()
        .iter()
        .map(|c| command_result(c).0)
        .collect();
    assert_eq!(done, [a, b]);
    assert!(r.events().is_empty(), "no connection was given up");
}

/// A PDU only an initiator may send, arriving from the target, is a protocol error: the
/// connection is closed (RFC 7143 section 7.1.5 at ErrorRecoveryLevel 0), not the process.
#[test]
fn an_initiator_opcode_from_the_target_fails_the_connection() {
    let mut r = Rig::new(2, Policy::RoundRobin);
    r.s.submit(tur(), r.now);
    let pdus = r.drain(0);
    r.send(0, pdus[0].clone());
    let events = r.events();
    assert!(
        matches!(events[..], [Event::Close(c, CloseReason::Protocol(_))] if c == r.ids[0]),
        "{events:?}"
    );
}

#[test]
fn a_connection_logout_waiting_for_its_commands_completes_when_the_session_goes() {
    // Giving up: fail_all completes every request, the logout parked on a draining connection
    // too.
    let mut r = Rig::new(2, Policy::RoundRobin);
    let cmd = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    let logout = r.s.logout_connection(r.ids[0]);
    assert!(r.drain(0).is_empty(), "the logout waits for the read");
    r.s.fail_all(Failure::ConnectionLost);
    let done = r.completions();
    assert!(done.contains(&Completion::Command(cmd, Err(Failure::ConnectionLost))));
    assert!(done.contains(&Completion::Logout(logout, Err(Failure::ConnectionLost))));

    // Reinstatement forgets the connection as well, whether or not the driver reported it
    // closed: the reads are sent again, the logout of the old connection ends.
    let mut r = Rig::new(2, Policy::RoundRobin);
    r.s.submit(read(0, 512), r.now);
    r.s.submit(read(0, 512), r.now);
    r.drain(0);
    r.drain(1);
    let logout = r.s.logout_connection(r.ids[0]);
    // The other connection fails with a command the target may not have received.
    r.s.handle_connection_closed(r.ids[1], r.now);
    assert!(r.events().contains(&Event::Reinstate));
    r.s.reinstate(setup(0), r.now);
    assert_eq!(
        r.completions(),
        [Completion::Logout(logout, Err(Failure::ConnectionLost))]
    );
}

#[test]
fn a_target_ping_is_echoed_within_the_targets_max_recv_data_segment_length() {
    // RFC 7143 section 13.12: nothing the initiator sends may exceed the target's
    // MaxRecvDataSegmentLength (4 KiB here), though the target's ping may carry up to ours.
    let mut leading = setup(0);
    leading.params.target_max_recv_data_segment_length = 4096;
    leading.params.initiator_max_recv_data_segment_length = 65536;
    let config = SessionConfig {
        policy: Policy::RoundRobin,
        max_retries: 2,
        keepalive: None,
        recovery: RecoveryConfig::default(),
    };
    let now = Instant::now();
    let (mut s, conn) = InitiatorSession::new(config, leading, now);
    let data: Bytes = (0..8192u32).map(|i| i as u8).collect();
    let ping = Pdu::NopIn(NopIn {
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt: Ttt(77),
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(8),
        data: data.clone(),
    });
    s.handle_pdu(conn, ping, now);
    match s.poll_transmit(conn) {
        Some(Pdu::NopOut(answer)) => {
            assert_eq!(answer.ttt, Ttt(77));
            assert_eq!(answer.data, data.slice(..4096));
        }
        other => panic!("expected the NOP-Out answer, got {other:?}"),
    }
}

#[path = "recovery_tests.rs"]
mod recovery;

#[test]
fn connection_recovery_that_never_gets_an_answer_gives_way_to_reinstatement() {
    let params = SessionParams {
        error_recovery_level: 2,
        ..setup(0).params
    };
    let mut r = Rig::with(1, Policy::RoundRobin, params);
    let max = RecoveryConfig::default().max_command_retries;
    let _ = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    // Each replacement fails before the target answers anything (RFC 7143 section 6.3.4).
    for _ in 0..max {
        r.s.handle_connection_closed(r.ids[0], r.now);
        assert_eq!(r.events(), [Event::RecoverConnection { cid: 0 }]);
        r.ids[0] =
            r.s.add_connection(ConnectionSetup { params, ..setup(0) }, r.now);
        r.drain(0);
    }
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert_eq!(r.events(), [Event::Reinstate]);
}

#[test]
fn an_answer_on_a_replacement_resets_the_bound_on_connection_recoveries() {
    let params = SessionParams {
        error_recovery_level: 2,
        ..setup(0).params
    };
    let mut r = Rig::with(1, Policy::RoundRobin, params);
    let max = RecoveryConfig::default().max_command_retries;
    for round in 0..=max {
        let _ = r.s.submit(read(0, 512), r.now);
        let itt = commands(&r.drain(0))[0].0;
        r.s.handle_connection_closed(r.ids[0], r.now);
        assert_eq!(
            r.events(),
            [Event::RecoverConnection { cid: 0 }],
            "round {round}"
        );
        r.ids[0] =
            r.s.add_connection(ConnectionSetup { params, ..setup(0) }, r.now);
        r.drain(0);
        // The reassigned command is answered on the replacement.
        r.stat_sn[0] = 0;
        let exp = 2 + round;
        r.respond(0, itt, exp, exp + 7);
    }
}

#[test]
fn unanswered_keepalive_pings_neither_pile_up_nor_hold_a_logout_back() {
    let now = Instant::now();
    let config = SessionConfig {
        policy: Policy::RoundRobin,
        max_retries: 1,
        // A long timeout: pings whose answers are lost go on being sent.
        keepalive: Some((Duration::from_secs(1), Duration::from_secs(3600))),
        recovery: RecoveryConfig::default(),
    };
    let mut setup2 = setup(1);
    setup2.params.max_connections = 4;
    let (mut s, a) = InitiatorSession::new(config, setup(0), now);
    let b = s.add_connection(setup2, now);
    let mut pings = Vec::new();
    for _ in 0..5 {
        let t = s.poll_timeout().unwrap();
        s.handle_timeout(t);
        while let Some(pdu) = s.poll_transmit(a) {
            if let Pdu::NopOut(p) = pdu {
                pings.push(p.itt);
            }
        }
        while s.poll_transmit(b).is_some() {}
        // The answers are lost, but the connections are heard from (a NOP-In that carries
        // the next StatSN only), so the keepalive pings again instead of giving up.
        for (conn, stat_sn) in [(a, 0), (b, 100)] {
            let nop = NopIn {
                lun: Lun::default(),
                itt: Itt::RESERVED,
                ttt: Ttt::RESERVED,
                stat_sn: SeqNum(stat_sn),
                exp_cmd_sn: SeqNum(1),
                max_cmd_sn: SeqNum(8),
                data: Bytes::new(),
            };
            s.handle_pdu(conn, Pdu::NopIn(nop), t);
        }
    }
    assert!(pings.len() >= 3, "{pings:?}");
    // Only the latest of them is still waited for.
    let waited = s.describe_requests();
    assert_eq!(
        waited.matches("Ping").count(),
        2,
        "one per connection: {waited}"
    );
    // Connection a has no command: its logout goes out at once, ping or not.
    let _ = s.logout_connection(a);
    let pdus: Vec<Pdu> = std::iter::from_fn(|| s.poll_transmit(a)).collect();
    assert!(
        pdus.iter().any(|p| matches!(p, Pdu::LogoutRequest(_))),
        "{pdus:?}"
    );
}

#[test]
fn a_command_still_waiting_for_the_window_fails_at_its_deadline_too() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    // The window admits CmdSN 1 to 8: the ninth command waits for room.
    let sent: Vec<TaskId> = (0..8).map(|_| r.s.submit(read(0, 512), r.now)).collect();
    let waiting = r.s.submit(read(0, 512), r.now);
    assert_eq!(commands(&r.drain(0)).len(), 8);
    assert_eq!(r.s.waiting(), 1);
    let limit = RecoveryConfig::default().command_timeout.unwrap();
    r.s.handle_timeout(r.now + limit);
    let done = r.completions();
    for id in sent.iter().chain([&waiting]) {
        assert!(
            done.iter()
                .any(|c| matches!(c, Completion::Command(i, Err(Failure::Timeout)) if i == id)),
            "{id:?} did not time out: {done:?}"
        );
    }
    assert_eq!(r.s.waiting(), 0);
    assert!(
        commands(&r.drain(0)).is_empty(),
        "the waiting one never goes out"
    );
}
