//! The target session under ErrorRecoveryLevel 1: SNACKs of every type, DataACK, recovery R2Ts
//! for Data-Out lost to a digest error or a timeout, and command retry (RFC 7143 sections 7.2.1,
//! 7.8, 7.9, 11.16).

use super::*;
use crate::framing::FrameError;
use crate::pdu::codes::SnackType;
use crate::pdu::{DataIn, R2t, SnackRequest, BHS_LEN};

fn erl1() -> SessionParams {
    SessionParams {
        error_recovery_level: 1,
        max_connections: 4,
        initial_r2t: true,
        immediate_data: true,
        initiator_max_recv_data_segment_length: 512,
        target_max_recv_data_segment_length: 512,
        max_burst_length: 1024,
        first_burst_length: 512,
        ..SessionParams::default()
    }
}

fn rig() -> Rig {
    Rig::with(&[1], 8, erl1(), RecoveryConfig::default())
}

fn snack(kind: SnackType, itt: Itt, ttt: Ttt, beg_run: u32, run_length: u32) -> Pdu {
    Pdu::SnackRequest(SnackRequest {
        snack_type: kind,
        lun: Lun(0),
        itt,
        ttt,
        exp_stat_sn: SeqNum(0),
        beg_run,
        run_length,
    })
}

fn data_ins(pdus: &[Pdu]) -> Vec<DataIn> {
    pdus.iter()
        .filter_map(|p| match p {
            Pdu::DataIn(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// Runs a read of `blocks` blocks as command `itt`/`cmd_sn` and returns what it sent.
fn run_read(r: &mut Rig, itt: u32, cmd_sn: u32, blocks: u16) -> Vec<Pdu> {
    r.send(1, read(itt, cmd_sn, blocks));
    for w in r.works() {
        r.complete(&w);
    }
    r.drain(1)
}

/// NOP-In pings (a TTT to answer with) among `pdus`.
fn pings(pdus: &[Pdu]) -> usize {
    pdus.iter()
        .filter(|p| matches!(p, Pdu::NopIn(n) if n.ttt != Ttt::RESERVED))
        .count()
}

fn header_of(pdu: &Pdu) -> [u8; BHS_LEN] {
    let mut h = bytes::BytesMut::new();
    pdu.emit_header(&mut h);
    let mut out = [0u8; BHS_LEN];
    out.copy_from_slice(&h[..BHS_LEN]);
    out
}

fn data_digest_error(pdu: &Pdu) -> FrameError {
    FrameError::DataDigest {
        opcode: pdu.opcode(),
        itt: pdu.itt(),
        header: header_of(pdu),
    }
}

#[test]
fn a_status_snack_resends_lost_statuses_with_their_stat_sns() {
    let mut r = rig();
    let first = run_read(&mut r, 1, 1, 1);
    let second = run_read(&mut r, 2, 2, 1);
    let status = |pdus: &[Pdu]| match pdus.last() {
        Some(Pdu::DataIn(d)) if d.status_present => d.stat_sn,
        other => panic!("expected status in the last Data-In, got {other:?}"),
    };
    assert_eq!(
        (status(&first), status(&second)),
        (SeqNum(100), SeqNum(101))
    );
    // The initiator lost StatSN 100.
    r.send(
        1,
        snack(SnackType::Status, Itt::RESERVED, Ttt::RESERVED, 100, 1),
    );
    let again = r.drain(1);
    let mut original = first[first.len() - 1].clone();
    if let (Pdu::DataIn(o), [Pdu::DataIn(a)]) = (&mut original, &again[..]) {
        // Section 11.16: replicas except ExpCmdSN and MaxCmdSN, which are current.
        (o.exp_cmd_sn, o.max_cmd_sn) = (a.exp_cmd_sn, a.max_cmd_sn);
    }
    assert_eq!(again, vec![original], "an exact replica");
    // The resend took no new StatSN.
    let third = run_read(&mut r, 3, 3, 1);
    assert_eq!(status(&third), SeqNum(102));
}

#[test]
fn acknowledged_statuses_are_released_and_cannot_be_asked_for() {
    let mut r = rig();
    run_read(&mut r, 1, 1, 1);
    run_read(&mut r, 2, 2, 1);
    assert_eq!(r.s.task_count(), 2, "kept until acknowledged");
    r.send(1, nop_out(Itt::RESERVED.0, 3, Ttt::RESERVED, SeqNum(101)));
    assert_eq!(r.s.task_count(), 1, "StatSN 100 acknowledged");
    r.send(
        1,
        snack(SnackType::Status, Itt::RESERVED, Ttt::RESERVED, 100, 1),
    );
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError)
    );
    r.send(
        1,
        snack(SnackType::Status, Itt::RESERVED, Ttt::RESERVED, 102, 1),
    );
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError),
        "not sent yet"
    );
    r.send(1, snack(SnackType::DataR2t, Itt(1), Ttt::RESERVED, 0, 1));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError)
    );
}

#[test]
fn a_data_snack_replays_the_data_in_pdus_asked_for() {
    let mut r = rig();
    let sent = data_ins(&run_read(&mut r, 5, 1, 4));
    assert_eq!(sent.len(), 4, "2 KiB in 512-byte PDUs");
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 1, 2));
    assert_eq!(data_ins(&r.drain(1)), sent[1..3].to_vec());
    // RunLength 0: everything from BegRun, the status-carrying last PDU as stamped.
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 2, 0));
    assert_eq!(data_ins(&r.drain(1)), sent[2..].to_vec());
    assert_eq!(r.s.stats().pdus_resent, 4, "two Data-In, then two more");
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 3, 2));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError),
        "DataSN 4 was never sent"
    );
}

#[test]
fn a_data_ack_frees_data_and_the_a_bit_follows_the_interval() {
    let recovery = RecoveryConfig {
        data_ack_every: Some(2),
        ..RecoveryConfig::default()
    };
    let mut r = Rig::with(&[1], 8, erl1(), recovery);
    let sent = data_ins(&run_read(&mut r, 5, 1, 4));
    let acks: Vec<(u32, Ttt)> = sent
        .iter()
        .filter(|d| d.ack)
        .map(|d| (d.data_sn, d.ttt))
        .collect();
    // MaxBurstLength is 2 PDUs here: the A bit on DataSN 1 and 3.
    assert_eq!(acks.iter().map(|a| a.0).collect::<Vec<_>>(), vec![1, 3]);
    let ttt = acks[0].1;
    assert_ne!(ttt, Ttt::RESERVED);
    r.send(1, snack(SnackType::DataAck, Itt::RESERVED, ttt, 2, 0));
    assert!(r.drain(1).is_empty(), "a DataACK is answered by nothing");
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 1, 1));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError),
        "acknowledged data is not resent"
    );
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 2, 1));
    assert_eq!(data_ins(&r.drain(1)), sent[2..3].to_vec());
}

#[test]
fn an_r_data_snack_resends_from_the_last_data_ack_and_ends_with_a_tagged_response() {
    let mut r = rig();
    let sent = run_read(&mut r, 5, 1, 4);
    let stat_sn = match sent.last() {
        Some(Pdu::DataIn(d)) => d.stat_sn,
        other => panic!("{other:?}"),
    };
    r.send(1, snack(SnackType::RData, Itt(5), Ttt(0x77), 0, 0));
    let again = r.drain(1);
    let data = data_ins(&again);
    assert_eq!(data.len(), 4);
    assert!(
        data.iter().all(|d| !d.status_present),
        "the status goes in a Response"
    );
    assert_eq!(
        data.iter().map(|d| d.data_sn).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    let Some(Pdu::ScsiResponse(rsp)) = again.last() else {
        panic!("{again:?}")
    };
    assert_eq!(
        (rsp.snack_tag, rsp.stat_sn, rsp.exp_data_sn),
        (0x77, stat_sn, 4)
    );
    // A later Status SNACK gets the latest content: the tagged Response.
    r.send(
        1,
        snack(
            SnackType::Status,
            Itt::RESERVED,
            Ttt::RESERVED,
            stat_sn.0,
            1,
        ),
    );
    assert!(matches!(&r.drain(1)[..], [Pdu::ScsiResponse(x)] if x.snack_tag == 0x77));
    // Tags 0 and 0xffffffff are not SNACK Tags.
    r.send(1, snack(SnackType::RData, Itt(5), Ttt(0), 0, 0));
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::ProtocolError)
    );
}

#[test]
fn an_r2t_snack_resends_the_outstanding_r2t() {
    let mut r = rig();
    r.send(1, write(7, 1, 2));
    let r2ts = r.drain(1);
    let [Pdu::R2t(first)] = &r2ts[..] else {
        panic!("{r2ts:?}")
    };
    r.send(1, snack(SnackType::DataR2t, Itt(7), Ttt::RESERVED, 0, 1));
    let again = r.drain(1);
    let [Pdu::R2t(replica)] = &again[..] else {
        panic!("{again:?}")
    };
    assert_eq!(
        (replica.ttt, replica.r2t_sn, replica.buffer_offset),
        (first.ttt, first.r2t_sn, first.buffer_offset)
    );
}

/// The simulation study's section 4.8 case at the target: lost Data-Out is asked for again by
/// a recovery R2T, here after a data digest error (RFC 7143 section 7.8 a).
#[test]
fn a_data_out_digest_error_gets_a_reject_and_a_recovery_r2t() {
    let mut r = rig();
    r.send(1, write(7, 1, 2));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!()
    };
    assert_eq!(r2t.desired_data_transfer_length, 1024);
    r.send(1, data_out(7, r2t.ttt, 0, 512, false));
    let lost = data_out(7, r2t.ttt, 512, 512, true);
    let Pdu::DataOut(mut d) = lost.clone() else {
        unreachable!()
    };
    d.data_sn = 1;
    let id = r.id(1);
    r.s.handle_frame_error(id, &data_digest_error(&Pdu::DataOut(d)), r.now, &mut r.env);
    let out = r.drain(1);
    assert_eq!(reject_reason_of(&out), Some(RejectReason::DataDigestError));
    let recovery: Vec<&R2t> = out
        .iter()
        .filter_map(|p| match p {
            Pdu::R2t(x) => Some(x),
            _ => None,
        })
        .collect();
    assert_eq!(recovery.len(), 1);
    assert_eq!(
        (
            recovery[0].r2t_sn,
            recovery[0].buffer_offset,
            recovery[0].desired_data_transfer_length
        ),
        (1, 512, 512)
    );
    assert!(r.works().is_empty());
    r.send(1, data_out(7, recovery[0].ttt, 512, 512, true));
    let works = r.works();
    assert_eq!(works.len(), 1);
    assert_eq!(works[0].data_out.len(), 1024);
}

#[test]
fn a_sequence_reception_timeout_sends_a_recovery_r2t() {
    let mut r = rig();
    r.send(1, write(7, 1, 2));
    let Some(Pdu::R2t(r2t)) = r.drain(1).pop() else {
        panic!()
    };
    let due = r.s.poll_timeout().expect("the sequence timer runs");
    assert_eq!(due, r.now + RecoveryConfig::default().sequence_timeout);
    r.now = due;
    r.s.handle_timeout(due, &mut r.env);
    let out = r.drain(1);
    let [Pdu::R2t(again)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!((again.r2t_sn, again.buffer_offset), (1, 0));
    assert_ne!(again.ttt, r2t.ttt);
    assert_eq!(again.desired_data_transfer_length, 1024);
    assert_eq!(r.s.stats().sequence_timeouts, 1);
}

/// Section 7.2.1: a command discarded for a digest error leaves a CmdSN gap; the retried
/// command fills it and runs once; a second copy is ignored.
#[test]
fn a_command_lost_to_a_digest_error_runs_once_when_retried() {
    let mut r = rig();
    let cmd = match write(9, 1, 1) {
        Pdu::ScsiCommand(mut c) => {
            c.data = Bytes::from(vec![0x11; 512]);
            Pdu::ScsiCommand(c)
        }
        _ => unreachable!(),
    };
    let id = r.id(1);
    r.s.handle_frame_error(id, &data_digest_error(&cmd), r.now, &mut r.env);
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::DataDigestError)
    );
    r.send(1, read(10, 2, 1));
    assert!(r.works().is_empty(), "CmdSN 2 waits for the gap at 1");
    r.send(1, cmd.clone());
    let works = r.works();
    assert_eq!(
        works.iter().map(|w| w.ticket.itt).collect::<Vec<_>>(),
        vec![Itt(9), Itt(10)]
    );
    r.send(1, cmd);
    assert!(r.works().is_empty(), "a duplicate retry is ignored");
}

#[test]
fn snack_is_not_supported_at_erl_0() {
    let mut r = Rig::new(&[1]);
    r.send(
        1,
        snack(SnackType::Status, Itt::RESERVED, Ttt::RESERVED, 0, 0),
    );
    assert_eq!(
        reject_reason_of(&r.drain(1)),
        Some(RejectReason::CommandNotSupported)
    );
}

fn with_unsolicited() -> SessionParams {
    SessionParams {
        initial_r2t: false,
        immediate_data: false,
        ..erl1()
    }
}

/// A command retried by an initiator that did not see it acknowledged in time comes again with
/// its unsolicited data: whether the original is waiting in the window or already done, the
/// copy is recognised (found by the simulator: the copy's Data-Out used to end the write with
/// CHECK CONDITION, "unexpected unsolicited data").
#[test]
fn a_retried_commands_unsolicited_data_is_recognised_as_a_copy() {
    let mut r = Rig::with(&[1], 8, with_unsolicited(), RecoveryConfig::default());
    let cmd = |cmd_sn| match write(7, cmd_sn, 1) {
        Pdu::ScsiCommand(mut c) => {
            c.final_bit = false;
            Pdu::ScsiCommand(c)
        }
        _ => unreachable!(),
    };
    // Held behind a gap at CmdSN 1, then sent again with its data.
    for _ in 0..2 {
        r.send(1, cmd(2));
        r.send(1, data_out(7, Ttt::RESERVED, 0, 512, true));
    }
    assert!(r.drain(1).is_empty(), "no Reject for the copy");
    r.send(1, read(8, 1, 1));
    let works = r.works();
    assert_eq!(works.len(), 2);
    assert_eq!(works[1].data_out.len(), 512);
    for w in &works {
        r.complete(w);
    }
    // Done and answered: another copy changes nothing.
    r.send(1, cmd(2));
    r.send(1, data_out(7, Ttt::RESERVED, 0, 512, true));
    let out = r.drain(1);
    assert!(out.iter().all(|p| !matches!(p, Pdu::Reject(_))), "{out:?}");
    assert!(r.works().is_empty());
}

/// ErrorRecoveryLevel 0 has no recovery R2T: data lost to a digest error ends the write with
/// CHECK CONDITION, "Protocol Service CRC error", once its sequences ended (section 7.8 b).
#[test]
fn without_recovery_a_data_out_digest_error_ends_the_write_with_a_crc_error() {
    let params = SessionParams {
        error_recovery_level: 0,
        ..with_unsolicited()
    };
    let mut r = Rig::with(&[1], 8, params, RecoveryConfig::default());
    let cmd = match write(7, 1, 1) {
        Pdu::ScsiCommand(mut c) => {
            c.final_bit = false;
            Pdu::ScsiCommand(c)
        }
        _ => unreachable!(),
    };
    r.send(1, cmd);
    let lost = data_out(7, Ttt::RESERVED, 0, 512, true);
    let id = r.id(1);
    r.s.handle_frame_error(id, &data_digest_error(&lost), r.now, &mut r.env);
    let out = r.drain(1);
    assert_eq!(reject_reason_of(&out), Some(RejectReason::DataDigestError));
    let Some(Pdu::ScsiResponse(rsp)) = out.last() else {
        panic!("{out:?}")
    };
    assert_eq!(rsp.status, ScsiStatus::CheckCondition);
    assert_eq!((rsp.data[2 + 12], rsp.data[2 + 13]), (0x47, 0x05));
    assert!(r.works().is_empty());
    assert_eq!(r.s.task_count(), 0);
}

/// Found by the simulator: a LOGICAL UNIT RESET ended answered reads that were only kept for
/// recovery, so the SNACK for their lost data was refused.
#[test]
fn task_management_does_not_reach_answered_commands() {
    let mut r = rig();
    let sent = data_ins(&run_read(&mut r, 5, 1, 4));
    r.send(
        1,
        tmf_req(9, 2, TmfFunction::LogicalUnitReset, Itt::RESERVED.0, 0),
    );
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::FunctionComplete)
    );
    r.send(1, tmf_req(10, 2, TmfFunction::AbortTask, 5, 1));
    assert_eq!(
        tmf_response_of(&r.drain(1)),
        Some(TmfResponse::TaskDoesNotExist)
    );
    r.send(1, snack(SnackType::DataR2t, Itt(5), Ttt::RESERVED, 2, 1));
    assert_eq!(data_ins(&r.drain(1)), sent[2..3].to_vec());
}

/// The statuses a connection keeps for Status SNACK stay bounded: past the bound the command
/// window stops opening until the initiator acknowledges (queue depth 8: the bound is
/// 2 x 8 + 64 = 80 statuses).
#[test]
fn the_window_stops_opening_while_too_many_statuses_wait_for_acknowledgement() {
    let recovery = RecoveryConfig {
        max_retained_statuses: 0,
        ..RecoveryConfig::default()
    };
    let mut r = Rig::with(&[1], 8, erl1(), recovery);
    let max_of = |pdus: &[Pdu]| match pdus.iter().rev().find(|p| matches!(p, Pdu::DataIn(_))) {
        Some(Pdu::DataIn(d)) => d.max_cmd_sn,
        other => panic!("{other:?}"),
    };
    let mut last_max = SeqNum(0);
    for n in 0..80u32 {
        last_max = max_of(&run_read(&mut r, 100 + n, 1 + n, 1));
    }
    // Every one of the 80 commands gave its place back: 80 statuses now wait,
    // which is the retention bound (2 x depth + 64).
    assert_eq!(last_max, SeqNum(88));
    let out = run_read(&mut r, 500, 81, 1);
    assert_eq!(
        max_of(&out),
        last_max,
        "the 81st command's place is held back"
    );
    assert_eq!(pings(&out), 1, "and the initiator is asked to acknowledge");
    assert_eq!(r.s.task_count(), 81, "nothing was forgotten");
    // The initiator acknowledges everything: the held places come back.
    r.send(1, nop_out(Itt::RESERVED.0, 82, Ttt::RESERVED, SeqNum(181)));
    assert_eq!(r.s.task_count(), 0);
    let (_, max) = r.s.command_window();
    assert_eq!(max, SeqNum(89));
}

/// The bytes of read data kept for resending stay bounded too: at the bound the command window
/// stops opening until the initiator acknowledges, and whatever way a read leaves (its status
/// acknowledged, its connection gone) its bytes stop counting.
#[test]
fn the_window_stops_opening_while_too_much_read_data_waits_for_acknowledgement() {
    let recovery = RecoveryConfig {
        max_retained_bytes: 4 * 1024,
        ..RecoveryConfig::default()
    };
    let mut r = Rig::with(&[1, 2], 8, erl1(), recovery);
    let max_of = |pdus: &[Pdu]| match pdus.iter().rev().find(|p| matches!(p, Pdu::DataIn(_))) {
        Some(Pdu::DataIn(d)) => d.max_cmd_sn,
        other => panic!("{other:?}"),
    };
    // Three 1 KiB reads, unacknowledged: under the bound, each gives its place back.
    let mut last_max = SeqNum(0);
    for n in 0..3u32 {
        last_max = max_of(&run_read(&mut r, 100 + n, 1 + n, 2));
    }
    assert_eq!(last_max, SeqNum(11));
    assert_eq!(r.s.retained_bytes(), 3 * 1024);
    // The fourth reaches the bound: its place is held back, and a NOP-In asks the initiator
    // to acknowledge (once: a fifth held back does not ask again).
    let out = run_read(&mut r, 103, 4, 2);
    assert_eq!((max_of(&out), pings(&out)), (last_max, 1));
    assert_eq!(r.s.retained_bytes(), 4 * 1024);
    let out = run_read(&mut r, 104, 5, 2);
    assert_eq!((max_of(&out), pings(&out)), (last_max, 0));
    // The initiator acknowledges the five statuses (StatSN 100 to 104): nothing is kept and
    // the held places come back.
    r.send(1, nop_out(Itt::RESERVED.0, 6, Ttt::RESERVED, SeqNum(105)));
    assert_eq!((r.s.retained_bytes(), r.s.task_count()), (0, 0));
    assert_eq!(r.s.command_window().1, SeqNum(13));
    // Two more, then their connection fails (ErrorRecoveryLevel 1: the tasks end with it).
    run_read(&mut r, 105, 6, 2);
    run_read(&mut r, 106, 7, 2);
    assert_eq!(r.s.retained_bytes(), 2 * 1024);
    r.closed(1);
    assert_eq!(r.s.retained_bytes(), 0);
}
