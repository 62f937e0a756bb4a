//! The initiator session under error recovery: what it does when a SNACK is refused, when a
//! window stays closed, when a connection joins a session being replaced, when a logout's
//! connection closes (RFC 7143 sections 7.3, 7.8, 7.11, 11.15, 11.16).

use super::*;
use crate::pdu::codes::SnackType;
use crate::pdu::BHS_LEN;

fn erl1() -> SessionParams {
    SessionParams {
        error_recovery_level: 1,
        max_connections: 4,
        initiator_max_recv_data_segment_length: 512,
        ..SessionParams::default()
    }
}

fn data_in(itt: Itt, data_sn: u32, status: Option<SeqNum>) -> Pdu {
    Pdu::DataIn(DataIn {
        final_bit: true,
        ack: false,
        overflow: false,
        underflow: false,
        status_present: status.is_some(),
        status: ScsiStatus::Good,
        lun: Lun(0),
        itt,
        ttt: Ttt::RESERVED,
        stat_sn: status.unwrap_or_default(),
        exp_cmd_sn: SeqNum(2),
        max_cmd_sn: SeqNum(9),
        data_sn,
        buffer_offset: data_sn * 512,
        residual: 0,
        data: Bytes::from(vec![data_sn as u8; 512]),
    })
}

fn snacks(pdus: &[Pdu]) -> Vec<(SnackType, Itt, u32, u32)> {
    pdus.iter()
        .filter_map(|p| match p {
            Pdu::SnackRequest(s) => Some((s.snack_type, s.itt, s.beg_run, s.run_length)),
            _ => None,
        })
        .collect()
}

/// A Reject whose data segment is the header of `pdu`.
fn reject_of(pdu: &Pdu, stat_sn: SeqNum) -> Pdu {
    let mut h = bytes::BytesMut::new();
    pdu.emit_header(&mut h);
    Pdu::Reject(Reject {
        reason: RejectReason::ProtocolError,
        stat_sn,
        exp_cmd_sn: SeqNum(2),
        max_cmd_sn: SeqNum(9),
        data_sn: 0,
        data: h.freeze().slice(..BHS_LEN),
    })
}

#[test]
fn a_read_whose_lost_data_the_target_cannot_resend_fails_and_is_aborted() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let id = r.s.submit(read(0, 1024), r.now);
    let [(itt, _)] = commands(&r.drain(0))[..] else {
        panic!()
    };
    // DataSN 0 lost: DataSN 1 (with the status) shows it.
    let sn = r.next_stat_sn(0);
    r.send(0, data_in(itt, 1, Some(sn)));
    let out = r.drain(0);
    let asked = snacks(&out);
    assert_eq!(asked, vec![(SnackType::DataR2t, itt, 0, 1)]);
    let snack = out
        .iter()
        .find(|p| matches!(p, Pdu::SnackRequest(_)))
        .cloned()
        .unwrap();
    let sn = r.next_stat_sn(0);
    r.send(0, reject_of(&snack, sn));
    let done = r.completions();
    let (got, result) = command_result(&done[0]);
    assert_eq!((got, result), (id, &Err(Failure::Unrecoverable)));
    // The target is told to forget the command.
    let out = r.drain(0);
    assert!(
        out.iter().any(|p| matches!(p, Pdu::TaskMgmtRequest(t)
            if t.function == TmfFunction::AbortTask && t.referenced_task_tag == itt)),
        "{out:?}"
    );
}

#[test]
fn statuses_the_target_cannot_resend_are_given_up() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    r.s.submit(read(0, 512), r.now);
    let [(itt, _)] = commands(&r.drain(0))[..] else {
        panic!()
    };
    // StatSN 0 lost; the status of the read (StatSN 1) shows the gap.
    r.next_stat_sn(0);
    let sn = r.next_stat_sn(0);
    r.send(0, data_in(itt, 0, Some(sn)));
    let out = r.drain(0);
    let status_snack = out
        .iter()
        .find(|p| matches!(p, Pdu::SnackRequest(s) if s.snack_type == SnackType::Status))
        .cloned()
        .expect("a Status SNACK for StatSN 0");
    let exp_stat_sn = |pdus: &[Pdu]| {
        pdus.iter()
            .find_map(|p| match p {
                Pdu::ScsiCommand(c) => Some(c.exp_stat_sn),
                _ => None,
            })
            .expect("a command")
    };
    // Held: ExpStatSN does not pass the gap.
    r.s.submit(tur(), r.now);
    assert_eq!(exp_stat_sn(&r.drain(0)), SeqNum(0));
    let sn = r.next_stat_sn(0);
    r.send(0, reject_of(&status_snack, sn));
    r.s.submit(tur(), r.now);
    assert_eq!(
        exp_stat_sn(&r.drain(0)),
        SeqNum(3),
        "acknowledgement goes on past the lost status"
    );
}

#[test]
fn commands_waiting_for_a_window_no_answer_will_open_probe_it() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    // MaxCmdSN 8 from the login, CmdSN from 1: eight commands fill the window.
    for _ in 0..9 {
        r.s.submit(tur(), r.now);
    }
    let sent = commands(&r.drain(0));
    assert_eq!(sent.len(), 8);
    assert_eq!(r.s.waiting(), 1);
    // The answers come, but none carries a wider window (the target widened it after).
    for (itt, _) in sent {
        r.respond(0, itt, 9, 8);
    }
    r.completions();
    assert_eq!(r.s.waiting(), 1);
    let at = r.s.poll_timeout().expect("the stuck command is watched");
    r.now = at;
    r.s.handle_timeout(at);
    let out = r.drain(0);
    assert!(
        out.iter()
            .any(|p| matches!(p, Pdu::NopOut(n) if n.itt != Itt::RESERVED)),
        "a NOP-Out asks for the current window: {out:?}"
    );
}

/// ExpStatSN is per connection: a target that holds its window shut until what it keeps for
/// retransmission is acknowledged (ErrorRecoveryLevel 1 and above) hears the acknowledgement
/// of each connection only on that connection, so the probe goes out on every one of them.
#[test]
fn a_window_held_shut_is_probed_on_every_connection_with_its_own_exp_stat_sn() {
    let mut r = Rig::with(2, Policy::RoundRobin, erl1());
    for _ in 0..9 {
        r.s.submit(tur(), r.now);
    }
    let on = [commands(&r.drain(0)), commands(&r.drain(1))];
    assert_eq!(on[0].len() + on[1].len(), 8);
    // The answers come on both connections, none with a wider window.
    for (conn, sent) in on.iter().enumerate() {
        for &(itt, _) in sent {
            r.respond(conn, itt, 9, 8);
        }
    }
    r.completions();
    assert_eq!(r.s.waiting(), 1);
    let at = r.s.poll_timeout().expect("the stuck command is watched");
    r.now = at;
    r.s.handle_timeout(at);
    for (conn, sent) in on.iter().enumerate() {
        let nops: Vec<SeqNum> = r
            .drain(conn)
            .iter()
            .filter_map(|p| match p {
                Pdu::NopOut(n) => Some(n.exp_stat_sn),
                _ => None,
            })
            .collect();
        // The rig's StatSNs on connection c start at 100 x c.
        let acknowledged = SeqNum(100 * conn as u32 + sent.len() as u32);
        assert_eq!(nops, vec![acknowledged], "connection {conn}");
    }
}

/// A status gap asked for again asks for its first hole only: not every status up to the
/// highest seen, which the initiator has (the target would resend them all, and a link that
/// drops the same place of every such burst would drop the missing one every time).
#[test]
fn a_stale_status_gap_asks_for_its_first_hole_only() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    for _ in 0..5 {
        r.s.submit(tur(), r.now);
    }
    let sent = commands(&r.drain(0));
    // StatSN 0 arrives, 1 is lost, 2 arrives, 3 is lost, 4 arrives.
    for (n, (itt, _)) in sent.iter().enumerate() {
        if n == 1 || n == 3 {
            let _lost = r.next_stat_sn(0);
            continue;
        }
        r.respond(0, *itt, 9, 16);
    }
    let first_asks = snacks(&r.drain(0));
    assert_eq!(
        first_asks,
        vec![
            (SnackType::Status, Itt::RESERVED, 1, 1),
            (SnackType::Status, Itt::RESERVED, 3, 1)
        ]
    );
    // Nothing comes back: a retry period later the gap is asked for again, from where
    // acknowledgement stands to the first status received past it.
    let at = r.now + RecoveryConfig::default().retry_timeout * 2;
    r.now = at;
    r.s.handle_timeout(at);
    let again: Vec<_> = snacks(&r.drain(0))
        .into_iter()
        .filter(|s| s.0 == SnackType::Status)
        .collect();
    assert_eq!(again, vec![(SnackType::Status, Itt::RESERVED, 1, 1)]);
}

#[test]
fn a_connection_that_joins_a_session_being_reinstated_is_closed() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    r.s.submit(read(0, 512), r.now);
    r.drain(0);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert!(r.events().contains(&Event::Reinstate));
    let late = r.s.add_connection(setup(1), r.now);
    assert_eq!(r.events(), vec![Event::Close(late, CloseReason::Reinstate)]);
}

#[test]
fn a_session_logout_whose_connection_closes_is_done() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let id = r.s.logout();
    assert!(matches!(r.drain(0)[..], [Pdu::LogoutRequest(_)]));
    // The Logout Response was lost; the target closed the connection after it.
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert!(r.completions().contains(&Completion::Logout(id, Ok(()))));
    assert!(r.events().contains(&Event::Ended));
}

#[test]
fn a_copy_of_a_status_reaches_a_read_that_discarded_its_data() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let id = r.s.submit(read(0, 1024), r.now);
    let [(itt, _)] = commands(&r.drain(0))[..] else {
        panic!()
    };
    let status_sn = r.next_stat_sn(0);
    // DataSN 0 lost, the status in DataSN 1 arrived: the read waits for its data.
    r.send(0, data_in(itt, 1, Some(status_sn)));
    r.drain(0);
    // Three retry periods without it: a Data SNACK, once more, then an R-Data SNACK (the read
    // discards what it had).
    for _ in 0..3 {
        let at = r.s.poll_timeout().unwrap();
        r.now = at + Duration::from_secs(2);
        r.s.handle_timeout(r.now);
    }
    let out = r.drain(0);
    let Some(tag) = out.iter().find_map(|p| match p {
        Pdu::SnackRequest(s) if s.snack_type == SnackType::RData => Some(s.ttt.0),
        _ => None,
    }) else {
        panic!("no R-Data SNACK in {out:?}")
    };
    // The target resends both Data-In (cut anew) and a SCSI Response with the tag and the
    // StatSN the status first had: a copy by its StatSN, but the read needs it.
    r.send(0, data_in(itt, 0, None));
    r.send(0, data_in(itt, 1, None));
    let rsp = ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: ScsiResponseCode::Completed,
        status: ScsiStatus::Good,
        itt,
        snack_tag: tag,
        stat_sn: status_sn,
        exp_cmd_sn: SeqNum(2),
        max_cmd_sn: SeqNum(9),
        exp_data_sn: 2,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    };
    r.send(0, Pdu::ScsiResponse(rsp));
    let done = r.completions();
    let (got, result) = command_result(&done[0]);
    assert_eq!(got, id);
    assert_eq!(result.as_ref().map(|r| r.data.len()), Ok(1024));
}

#[test]
fn a_status_snack_overtaken_by_its_statuses_asks_only_for_what_is_still_missing() {
    for delivered_late in [1usize, 2] {
        let mut r = Rig::with(1, Policy::RoundRobin, erl1());
        for _ in 0..3 {
            r.s.submit(read(0, 512), r.now);
        }
        let itts: Vec<Itt> = commands(&r.drain(0)).iter().map(|c| c.0).collect();
        let sns: Vec<SeqNum> = (0..3).map(|_| r.next_stat_sn(0)).collect();
        // The third status first: a SNACK for the first two is queued...
        r.send(0, data_in(itts[2], 0, Some(sns[2])));
        // ...and before it leaves, statuses it asks for arrive (reordered, not lost).
        for k in 0..delivered_late {
            r.send(0, data_in(itts[k], 0, Some(sns[k])));
        }
        let out = r.drain(0);
        let asked: Vec<_> = snacks(&out)
            .into_iter()
            .filter(|s| s.0 == SnackType::Status)
            .collect();
        if delivered_late == 2 {
            assert_eq!(asked, vec![], "nothing is missing any more");
        } else {
            // Its ExpStatSN acknowledges the first: asking for it again would be a protocol
            // error (section 11.16), so the run starts after it.
            assert_eq!(
                asked,
                vec![(SnackType::Status, Itt::RESERVED, sns[1].0, 1)],
                "only the second is still missing"
            );
        }
    }
}

#[test]
fn unanswered_probes_are_forgotten_not_kept_for_ever() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    for _ in 0..9 {
        r.s.submit(tur(), r.now);
    }
    let sent = commands(&r.drain(0));
    for (itt, _) in sent {
        r.respond(0, itt, 9, 8);
    }
    r.completions();
    assert_eq!(r.s.waiting(), 1);
    // The window stays shut and every probe is lost: a new probe goes out each retry
    // period, and the old ones do not pile up as pending requests.
    let mut probes = 0;
    for _ in 0..20 {
        let at = r.s.poll_timeout().expect("the stuck command is watched");
        r.now = at;
        r.s.handle_timeout(at);
        probes += r
            .drain(0)
            .iter()
            .filter(|p| matches!(p, Pdu::NopOut(n) if n.itt != Itt::RESERVED))
            .count();
        assert!(r.s.requests_pending() <= 1, "{}", r.s.describe_requests());
    }
    assert!(probes >= 3, "probes went on: {probes}");
    assert!(
        r.completions().is_empty(),
        "a forgotten probe completes nothing"
    );
}

#[test]
fn a_read_whose_missing_data_never_comes_fails_after_the_retry_bound() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let id = r.s.submit(read(0, 1024), r.now);
    let [(itt, _)] = commands(&r.drain(0))[..] else {
        panic!()
    };
    // DataSN 0 lost, and every copy of it after.
    let sn = r.next_stat_sn(0);
    r.send(0, data_in(itt, 1, Some(sn)));
    r.drain(0);
    let config = RecoveryConfig::default();
    let (max, period) = (config.max_command_retries, config.retry_timeout);
    let start = r.now;
    let mut ticks = 0;
    loop {
        ticks += 1;
        assert!(ticks < 8 * (max + 4), "still waiting after {ticks} ticks");
        let t = r.s.poll_timeout().expect("the retry timer runs");
        r.now = t;
        r.s.handle_timeout(t);
        r.drain(0);
        let done = r.completions();
        if let Some(c) = done.first() {
            assert_eq!(command_result(c), (id, &Err(Failure::TooManyRetries)));
            break;
        }
    }
    // Asked for again once per retry period, `max` times without anything arriving.
    assert!(
        r.now - start >= period * max,
        "gave up after {:?}",
        r.now - start
    );
}

/// Seed 413401: a command given up on is ended at the target with an ABORT TASK whose answer
/// nobody reads. That PDU was never sent again, so when it was lost the target kept the task,
/// and its slot of the command window, for ever; with a queue depth of 1 the window never
/// opened again. Under recovery it is sent again like any request until something answers.
#[test]
fn an_abort_task_for_a_command_given_up_on_is_sent_again_when_lost() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let id = r.s.submit(read(0, 1024), r.now);
    let [(itt, _)] = commands(&r.drain(0))[..] else {
        panic!()
    };
    // DataSN 0 lost, and every copy of it after: the read is given up on.
    let sn = r.next_stat_sn(0);
    r.send(0, data_in(itt, 1, Some(sn)));
    r.drain(0);
    let aborts = |pdus: &[Pdu]| {
        pdus.iter()
            .filter(|p| {
                matches!(p, Pdu::TaskMgmtRequest(t)
                if t.function == TmfFunction::AbortTask && t.referenced_task_tag == itt)
            })
            .count()
    };
    let mut sent = 0;
    let mut given_up = false;
    for _ in 0..200 {
        let Some(t) = r.s.poll_timeout() else { break };
        r.now = t;
        r.s.handle_timeout(t);
        // Everything the initiator sends is lost.
        sent += aborts(&r.drain(0));
        if !given_up {
            let done = r.completions();
            if let Some(c) = done.first() {
                assert_eq!(command_result(c), (id, &Err(Failure::TooManyRetries)));
                given_up = true;
            }
        }
        if sent >= 2 {
            break;
        }
    }
    assert!(given_up);
    assert!(sent >= 2, "the lost ABORT TASK went out {sent} time(s)");
}

/// Seeds 589339, 721496, 977824 (and 568265, 697031): the session logout was asked for while
/// every connection was closing for session reinstatement. It completed at once, and the
/// session ended; the driver then logged in the replacement session, which nobody logged out
/// (the target kept it for ever, pinged by the keepalive). The logout now waits for the new
/// session and goes out on its leading connection.
#[test]
fn a_session_logout_asked_for_during_reinstatement_goes_out_on_the_new_session() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let cmd = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert_eq!(r.events(), [Event::Reinstate]);
    let id = r.s.logout();
    assert!(
        r.completions().is_empty(),
        "not over before the new session"
    );
    assert!(r.events().is_empty(), "the session has not ended");
    let mut fresh = setup(0);
    fresh.params = erl1();
    fresh.cmd_sn = SeqNum(50);
    fresh.exp_cmd_sn = SeqNum(50);
    fresh.max_cmd_sn = SeqNum(60);
    r.ids[0] = r.s.reinstate(fresh, r.now);
    r.stat_sn[0] = 0;
    let out = r.drain(0);
    let Some(Pdu::LogoutRequest(l)) = out.iter().find(|p| matches!(p, Pdu::LogoutRequest(_)))
    else {
        panic!("no Logout Request on the new session: {out:?}")
    };
    assert_eq!(l.reason, LogoutReason::CloseSession);
    let sn = r.next_stat_sn(0);
    r.send(0, logout_response(l.itt, LogoutResponseCode::Closed, sn));
    let done = r.completions();
    assert!(done.contains(&Completion::Logout(id, Ok(()))), "{done:?}");
    assert!(done.contains(&Completion::Command(cmd, Err(Failure::Closed))));
    assert!(r.events().contains(&Event::Ended));
}

/// Seed 438501 (found checking these fixes): at ErrorRecoveryLevel 0 a command's header was
/// damaged so the target's connection stalled; the command timed out and its ABORT TASK,
/// meant to plug its CmdSN (section 7.11), went nowhere either. The target's ExpCmdSN stayed
/// on that CmdSN, the window filled, and nothing was ever sent again. When such an ABORT TASK
/// expires unacknowledged the session is reinstated.
#[test]
fn an_unanswered_abort_task_that_was_to_plug_a_cmdsn_reinstates_the_session() {
    let mut r = Rig::new(1, Policy::RoundRobin);
    let id = r.s.submit(tur(), r.now);
    r.drain(0);
    let mut reinstated = false;
    let mut timed_out = false;
    // The recovery tick comes once a second; the command times out after 120 s, its ABORT
    // TASK 120 s later.
    for _ in 0..1000 {
        let Some(t) = r.s.poll_timeout() else { break };
        r.now = t;
        r.s.handle_timeout(t);
        // Nothing reaches the target, nothing comes back.
        r.drain(0);
        timed_out |= r
            .completions()
            .contains(&Completion::Command(id, Err(Failure::Timeout)));
        if r.events().contains(&Event::Reinstate) {
            reinstated = true;
            break;
        }
    }
    assert!(timed_out, "the command timed out first");
    assert!(reinstated, "the CmdSN hole was left for ever");
}

/// Found by the initiator_session fuzz target: two logouts asked for while the session was
/// being reinstated kept only the second, so the first never completed when the session was
/// then given up.
#[test]
fn every_logout_asked_for_during_reinstatement_completes_when_the_session_is_given_up() {
    let mut r = Rig::with(1, Policy::RoundRobin, erl1());
    let _cmd = r.s.submit(read(0, 512), r.now);
    r.drain(0);
    r.s.handle_connection_closed(r.ids[0], r.now);
    assert_eq!(r.events(), [Event::Reinstate]);
    let first = r.s.logout();
    let second = r.s.logout();
    assert!(r.completions().is_empty());
    r.s.fail_all(Failure::ConnectionLost);
    let done = r.completions();
    for id in [first, second] {
        assert_eq!(
            done.iter()
                .filter(|c| **c == Completion::Logout(id, Err(Failure::ConnectionLost)))
                .count(),
            1,
            "{id:?}: {done:?}"
        );
    }
}
