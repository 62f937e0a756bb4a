//! Full feature phase over a raw scripted initiator: NOP, command ordering, residuals, R2T
//! writes, data-transfer errors, Reject cases, Text/SendTargets, Logout, task management and
//! keepalive. Each test asserts a behaviour of RFC 7143 that a broken target would get wrong.

mod support;

use std::time::Duration;

use bytes::Bytes;
use sluice_proto::pdu::codes::{
    LogoutReason, LogoutResponseCode, RejectReason, TmfFunction, TmfResponse,
};
use sluice_proto::pdu::{LogoutRequest, NopOut, Pdu, TextRequest};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
use sluice_proto::text::{encode_pairs, parse_pairs, TextLimits};
use sluice_target::config::{Keepalive, OperationalOffer};
use support::*;

#[tokio::test]
async fn nop_out_ping_is_answered_with_same_itt_and_data() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let itt = p.nop_ping(&payload).await;
    match p.expect().await {
        Pdu::NopIn(n) => {
            assert_eq!(n.itt, itt);
            assert_eq!(n.ttt, Ttt::RESERVED);
            assert_eq!(&n.data[..], &payload[..]);
        }
        other => panic!("expected NOP-In, got {other:?}"),
    }
    // A NOP-Out with a reserved ITT wants no answer.
    let nop = NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt: Ttt::RESERVED,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
        data: Bytes::new(),
    };
    p.send(&Pdu::NopOut(nop)).await;
    p.expect_silence().await;
}

#[tokio::test]
async fn out_of_window_cmd_sn_is_ignored_and_the_next_command_works() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    // Far above MaxCmdSN (queue depth 128).
    let mut cmd = p.scsi_command(&read10(0, 1), true, false, BLOCK as u32);
    p.cmd_sn = SeqNum(p.cmd_sn.0.wrapping_sub(1)); // give the CmdSN back
    cmd.cmd_sn = SeqNum(cmd.cmd_sn.0.wrapping_add(10_000));
    p.send(&Pdu::ScsiCommand(cmd)).await;
    p.expect_silence().await;
    // Below ExpCmdSN: a stale duplicate, also ignored.
    let mut stale = p.scsi_command(&read10(0, 1), true, false, BLOCK as u32);
    p.cmd_sn = SeqNum(p.cmd_sn.0.wrapping_sub(1));
    stale.cmd_sn = SeqNum(stale.cmd_sn.0.wrapping_sub(1));
    p.send(&Pdu::ScsiCommand(stale)).await;
    p.expect_silence().await;
    // The in-window command is served.
    assert_eq!(p.read(0, 1).await.len(), BLOCK);
}

#[tokio::test]
async fn read_residuals_follow_edtl() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let data = pattern(8 * BLOCK, 3);
    assert_eq!(p.write_immediate(100, &data).await.status, 0);

    // Exact.
    let c = p.command(&read10(100, 8), 8 * BLOCK as u32).await;
    assert_eq!(
        (c.status, c.overflow, c.underflow, c.residual),
        (0, false, false, 0)
    );
    assert_eq!(c.data, data);

    // EDTL smaller than the CDB: overflow, the first EDTL bytes only.
    let c = p.command(&read10(100, 8), 1000).await;
    assert_eq!(c.status, 0);
    assert!(c.overflow && !c.underflow, "{c:?}");
    assert_eq!(c.residual, 8 * BLOCK as u32 - 1000);
    assert_eq!(c.data, data[..1000]);

    // EDTL larger than the CDB: underflow, all the CDB's data.
    let c = p.command(&read10(100, 8), 16 * BLOCK as u32).await;
    assert_eq!(c.status, 0);
    assert!(c.underflow && !c.overflow, "{c:?}");
    assert_eq!(c.residual, 8 * BLOCK as u32);
    assert_eq!(c.data, data);
}

/// A session with InitialR2T=Yes and ImmediateData=No: every write byte is solicited.
fn r2t_config() -> sluice_target::config::TargetConfig {
    let mut cfg = config();
    cfg.offer = OperationalOffer {
        initial_r2t: true,
        immediate_data: false,
        ..OperationalOffer::default()
    };
    cfg
}

#[tokio::test]
async fn write_with_r2ts_completes_and_reads_back() {
    let h = Harness::new(r2t_config());
    let (mut p, _task) = h.logged_in().await;
    let params = p.outcome.as_ref().unwrap().params;
    assert!(params.initial_r2t);
    let len = 64 * 1024;
    let data = pattern(len, 9);
    let cmd = p.scsi_command(
        &write10(2000, (len / BLOCK) as u16),
        false,
        true,
        len as u32,
    );
    let itt = cmd.itt;
    p.send(&Pdu::ScsiCommand(cmd)).await;
    let mut got = 0usize;
    let mut r2ts = 0;
    while got < len {
        let r2t = p.expect_r2t().await;
        assert_eq!(r2t.itt, itt);
        assert_eq!(r2t.r2t_sn, r2ts);
        r2ts += 1;
        let (off, want) = (
            r2t.buffer_offset as usize,
            r2t.desired_data_transfer_length as usize,
        );
        assert_eq!(off, got, "R2Ts in order");
        // Answer in PDUs of at most 8 KiB.
        let mut sent = 0;
        let mut data_sn = 0;
        while sent < want {
            let n = (want - sent).min(8192);
            let last = sent + n == want;
            let pdu = p.data_out(
                &r2t,
                data_sn,
                (off + sent) as u32,
                &data[off + sent..off + sent + n],
                last,
            );
            p.send(&pdu).await;
            sent += n;
            data_sn += 1;
        }
        got += want;
    }
    let c = p.completion(itt).await;
    assert_eq!(c.status, 0, "{c:?}");
    assert_eq!(p.read(2000, (len / BLOCK) as u16).await, data);
}

#[tokio::test]
async fn data_out_with_wrong_data_sn_gives_check_condition_and_connection_continues() {
    let h = Harness::new(r2t_config());
    let (mut p, _task) = h.logged_in().await;
    let data = pattern(4 * BLOCK, 1);
    let cmd = p.scsi_command(&write10(10, 4), false, true, data.len() as u32);
    let itt = cmd.itt;
    p.send(&Pdu::ScsiCommand(cmd)).await;
    let r2t = p.expect_r2t().await;
    // DataSN 1 where 0 is due.
    let pdu = p.data_out(&r2t, 1, 0, &data, true);
    p.send(&pdu).await;
    let c = p.completion(itt).await;
    assert_eq!(c.status, 2, "CHECK CONDITION: {c:?}");
    assert_eq!(
        c.sense_code().map(|s| s.0),
        Some(0x0b),
        "ABORTED COMMAND: {c:?}"
    );
    // The block was not written, and the connection still works.
    assert_eq!(p.read(10, 4).await, vec![0u8; 4 * BLOCK]);
    p.assert_alive().await;
}

#[tokio::test]
async fn unknown_opcode_is_rejected_with_command_not_supported() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let mut bhs = [0u8; 48];
    bhs[0] = 0x1c; // no such initiator opcode
    bhs[16..20].copy_from_slice(&0x1234u32.to_be_bytes());
    p.send_raw(&bhs).await;
    match p.expect().await {
        Pdu::Reject(r) => {
            assert_eq!(r.reason, RejectReason::CommandNotSupported);
            assert_eq!(&r.data[..], &bhs[..], "the Reject quotes the header");
        }
        other => panic!("expected Reject, got {other:?}"),
    }
    p.assert_alive().await;
    assert_eq!(p.read(0, 1).await.len(), BLOCK);
}

#[tokio::test]
async fn oversized_data_segment_closes_the_connection_without_waiting_for_the_data() {
    let h = Harness::new(config());
    let (mut p, task) = h.logged_in().await;
    let max = p
        .outcome
        .as_ref()
        .unwrap()
        .params
        .target_max_recv_data_segment_length;
    // A NOP-Out header announcing max + 4 bytes; the data is never sent, so a target that
    // tried to buffer it would hang here instead of closing.
    let mut bhs = [0u8; 48];
    bhs[0] = 0x40; // NOP-Out, immediate
    bhs[1] = 0x80;
    let len = (max + 4).to_be_bytes();
    bhs[5..8].copy_from_slice(&len[1..]);
    bhs[16..20].copy_from_slice(&7u32.to_be_bytes());
    bhs[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
    p.send_raw(&bhs).await;
    let got = p.expect_closed().await;
    assert!(got.is_empty(), "no answer to an oversized PDU: {got:?}");
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
    assert_eq!(h.target.session_count(), 0);
}

#[tokio::test]
async fn header_digest_error_closes_the_connection() {
    let h = Harness::new(config());
    let (mut p, task) = h.connect();
    let outcome = p.login(&LoginOpts::normal().with_digests()).await.unwrap();
    assert!(outcome.params.header_digest && outcome.params.data_digest);
    p.clear_unit_attention().await;
    p.assert_alive().await;

    let itt = p.itt();
    let nop = NopOut {
        immediate: true,
        lun: Lun(0),
        itt,
        ttt: Ttt::RESERVED,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
        data: Bytes::new(),
    };
    let mut bytes = p.encode(&Pdu::NopOut(nop));
    bytes[48] ^= 0x01; // first byte of the header digest
    p.send_raw(&bytes).await;
    let got = p.expect_closed().await;
    assert!(got.is_empty(), "{got:?}");
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
}

#[tokio::test]
async fn data_digest_error_is_rejected_and_connection_continues() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    p.login(&LoginOpts::normal().with_digests()).await.unwrap();
    p.clear_unit_attention().await;

    let itt = p.itt();
    let nop = NopOut {
        immediate: true,
        lun: Lun(0),
        itt,
        ttt: Ttt::RESERVED,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
        data: Bytes::from_static(b"ping data"),
    };
    let mut bytes = p.encode(&Pdu::NopOut(nop));
    let n = bytes.len();
    bytes[n - 1] ^= 0x80; // last byte of the data digest
    p.send_raw(&bytes).await;
    match p.expect().await {
        Pdu::Reject(r) => {
            assert_eq!(r.reason, RejectReason::DataDigestError);
            assert_eq!(
                u32::from_be_bytes(r.data[16..20].try_into().unwrap()),
                itt.0
            );
        }
        other => panic!("expected Reject, got {other:?}"),
    }
    p.assert_alive().await;
    let data = pattern(2 * BLOCK, 5);
    assert_eq!(p.write_immediate(7, &data).await.status, 0);
    assert_eq!(p.read(7, 2).await, data);
}

#[tokio::test]
async fn scsi_command_on_a_discovery_session_is_rejected() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    p.login(&LoginOpts::discovery()).await.unwrap();
    let cmd = p.scsi_command(&read10(0, 1), true, false, BLOCK as u32);
    p.send(&Pdu::ScsiCommand(cmd)).await;
    match p.expect().await {
        Pdu::Reject(r) => assert_eq!(r.reason, RejectReason::ProtocolError),
        other => panic!("expected Reject, got {other:?}"),
    }
    p.assert_alive().await;
}

#[tokio::test]
async fn send_targets_all_lists_targets_with_addresses() {
    let mut cfg = config();
    cfg.targets.push(target_def("iqn.2026-11.io.sluice:disk1"));
    let h = Harness::new(cfg);
    let (mut p, _task) = h.connect();
    p.login(&LoginOpts::discovery()).await.unwrap();
    let itt = p.itt();
    let req = TextRequest {
        immediate: false,
        final_bit: true,
        cont: false,
        lun: Lun(0),
        itt,
        ttt: Ttt::RESERVED,
        cmd_sn: p.next_cmd_sn(),
        exp_stat_sn: p.exp_stat_sn,
        data: encode_pairs(&[("SendTargets", "All")]),
    };
    p.send(&Pdu::TextRequest(req)).await;
    let rsp = match p.expect().await {
        Pdu::TextResponse(r) => r,
        other => panic!("expected Text Response, got {other:?}"),
    };
    assert_eq!(rsp.itt, itt);
    assert!(rsp.final_bit && !rsp.cont);
    assert_eq!(rsp.ttt, Ttt::RESERVED);
    let pairs = parse_pairs(&rsp.data, &TextLimits::DISCOVERY).unwrap();
    let names: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "TargetName")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(names, [TARGET, "iqn.2026-11.io.sluice:disk1"]);
    // Every TargetName is followed by its address.
    for (i, (k, _)) in pairs.iter().enumerate() {
        if k == "TargetName" {
            assert_eq!(
                pairs[i + 1],
                ("TargetAddress".into(), "127.0.0.1:3260,1".into())
            );
        }
    }
}

#[tokio::test]
async fn logout_is_answered_and_the_connection_closed() {
    let h = Harness::new(config());
    let (mut p, task) = h.logged_in().await;
    assert_eq!(h.target.session_count(), 1);
    let itt = p.itt();
    let req = LogoutRequest {
        immediate: true,
        reason: LogoutReason::CloseSession,
        itt,
        cid: 0,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
    };
    p.send(&Pdu::LogoutRequest(req)).await;
    match p.expect().await {
        Pdu::LogoutResponse(r) => {
            assert_eq!(r.itt, itt);
            assert_eq!(r.response, LogoutResponseCode::Closed);
        }
        other => panic!("expected Logout Response, got {other:?}"),
    }
    assert!(p.expect_closed().await.is_empty());
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
    assert_eq!(h.target.session_count(), 0);
}

#[tokio::test]
async fn abort_task_for_a_completed_command_says_task_does_not_exist() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let cmd = p.scsi_command(&read10(0, 1), true, false, BLOCK as u32);
    let (itt, sn) = (cmd.itt, cmd.cmd_sn);
    p.send(&Pdu::ScsiCommand(cmd)).await;
    assert_eq!(p.completion(itt).await.status, 0);
    let req = p.tmf(TmfFunction::AbortTask, itt, sn);
    let tmf_itt = req.itt;
    p.send(&Pdu::TaskMgmtRequest(req)).await;
    let r = p.expect_tmf_response().await;
    assert_eq!(r.itt, tmf_itt);
    assert_eq!(r.response, TmfResponse::TaskDoesNotExist);
}

#[tokio::test]
async fn abort_task_for_a_write_waiting_on_r2t_completes_and_the_write_never_answers() {
    let h = Harness::new(r2t_config());
    let (mut p, _task) = h.logged_in().await;
    let cmd = p.scsi_command(&write10(30, 4), false, true, 4 * BLOCK as u32);
    let (itt, sn) = (cmd.itt, cmd.cmd_sn);
    p.send(&Pdu::ScsiCommand(cmd)).await;
    let r2t = p.expect_r2t().await;
    assert_eq!(r2t.itt, itt);

    let req = p.tmf(TmfFunction::AbortTask, itt, sn);
    p.send(&Pdu::TaskMgmtRequest(req)).await;
    let r = p.expect_tmf_response().await;
    assert_eq!(r.response, TmfResponse::FunctionComplete);

    // Late data for the aborted task (FastAbort initiators send some): dropped silently, and
    // no SCSI Response for the aborted task ever comes.
    let late = p.data_out(&r2t, 0, 0, &pattern(4 * BLOCK, 2), true);
    p.send(&late).await;
    p.expect_silence().await;
    // The next command is answered (the aborted one's window slot was given back), with its
    // own ITT only.
    let data = p.read(30, 4).await;
    assert_eq!(
        data,
        vec![0u8; 4 * BLOCK],
        "the aborted write wrote nothing"
    );
    p.assert_alive().await;
}

#[tokio::test]
async fn lu_reset_completes_and_the_next_command_gets_unit_attention() {
    let h = Harness::new(config());
    let (mut p, _task) = h.logged_in().await;
    let req = p.tmf(TmfFunction::LogicalUnitReset, Itt::RESERVED, p.cmd_sn);
    p.send(&Pdu::TaskMgmtRequest(req)).await;
    assert_eq!(
        p.expect_tmf_response().await.response,
        TmfResponse::FunctionComplete
    );
    let c = p.command(&tur(), 0).await;
    assert_eq!(c.status, 2, "{c:?}");
    assert_eq!(c.sense_code(), Some((0x06, 0x29, 0x03)), "{c:?}");
    // Reported once.
    assert_eq!(p.command(&tur(), 0).await.status, 0);

    // A LUN that does not exist.
    let mut req = p.tmf(TmfFunction::LogicalUnitReset, Itt::RESERVED, p.cmd_sn);
    req.lun = Lun::from_number(5);
    p.send(&Pdu::TaskMgmtRequest(req)).await;
    assert_eq!(
        p.expect_tmf_response().await.response,
        TmfResponse::LunDoesNotExist
    );
}

fn keepalive_config() -> sluice_target::config::TargetConfig {
    let mut cfg = config();
    // A ping every 200 ms; an answer may take 2 s, so that a loaded machine that runs the
    // answering test late is not taken for a dead initiator (wake-ups 200 ms late were seen
    // at load 13 on 2 cores), while one that never answers is still closed well within
    // ANSWER.
    cfg.keepalive = Some(Keepalive {
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(2),
    });
    cfg
}

#[tokio::test]
async fn keepalive_disconnects_an_initiator_that_never_answers() {
    let h = Harness::new(keepalive_config());
    let (mut p, task) = h.logged_in().await;
    // Pings arrive (ITT reserved, TTT set), we never answer; the target hangs up.
    let got = p.expect_closed().await;
    assert!(
        got.iter().any(
            |p| matches!(p, Pdu::NopIn(n) if n.itt == Itt::RESERVED && n.ttt != Ttt::RESERVED)
        ),
        "a NOP-In ping comes before the disconnect: {got:?}"
    );
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
    assert_eq!(h.target.session_count(), 0);
}

#[tokio::test]
async fn keepalive_keeps_an_initiator_that_answers() {
    let h = Harness::new(keepalive_config());
    let (mut p, _task) = h.logged_in().await;
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut answered = 0;
    while tokio::time::Instant::now() < until {
        match p.recv(Duration::from_millis(100)).await {
            Ok(Pdu::NopIn(n)) if n.itt == Itt::RESERVED => {
                let nop = NopOut {
                    immediate: true,
                    lun: n.lun,
                    itt: Itt::RESERVED,
                    ttt: n.ttt,
                    cmd_sn: p.cmd_sn,
                    exp_stat_sn: p.exp_stat_sn,
                    data: Bytes::new(),
                };
                p.send(&Pdu::NopOut(nop)).await;
                answered += 1;
            }
            Err(RecvError::Timeout) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(answered >= 2, "pings kept coming: {answered}");
    p.assert_alive().await;
    assert_eq!(h.target.session_count(), 1);
}

/// An immediate command takes no slot of the CmdSN window (RFC 7143 section 4.2.2.1: it is
/// not ordered and does not advance ExpCmdSN), so its completion must not give one back: while
/// a write holds a slot, MaxCmdSN stays ExpCmdSN + queue depth - 2, whatever immediate commands
/// come and go; otherwise the initiator may have one command more in flight than the depth.
#[tokio::test]
async fn an_immediate_command_does_not_widen_the_command_window() {
    let mut cfg = r2t_config();
    cfg.offer.queue_depth = 4;
    let h = Harness::new(cfg);
    let (mut p, _task) = h.logged_in().await;
    p.clear_unit_attention().await;
    // A write that waits for its data holds one slot.
    let write = p.scsi_command(&write10(0, 1), false, true, BLOCK as u32);
    let write_itt = write.itt;
    p.send(&Pdu::ScsiCommand(write)).await;
    let r2t = p.expect_r2t().await;
    // An immediate TEST UNIT READY carries the next CmdSN without taking it.
    let mut tur_cmd = p.scsi_command(&tur(), false, false, 0);
    p.cmd_sn = SeqNum(p.cmd_sn.0.wrapping_sub(1));
    tur_cmd.immediate = true;
    let tur_itt = tur_cmd.itt;
    p.send(&Pdu::ScsiCommand(tur_cmd)).await;
    assert_eq!(p.completion(tur_itt).await.status, 0);
    let window = |p: &mut Peer, nop: Pdu| match nop {
        Pdu::NopIn(n) => {
            assert_eq!(n.exp_cmd_sn, p.cmd_sn);
            n.max_cmd_sn.0.wrapping_sub(n.exp_cmd_sn.0) + 1
        }
        other => panic!("expected a NOP-In, got {other:?}"),
    };
    p.nop_ping(b"").await;
    let nop = p.expect().await;
    assert_eq!(
        window(&mut p, nop),
        3,
        "the immediate command's completion gave back a slot it never took"
    );
    let data = pattern(BLOCK, 5);
    p.send(&p.data_out(&r2t, 0, 0, &data, true)).await;
    assert_eq!(p.completion(write_itt).await.status, 0);
    p.nop_ping(b"").await;
    let nop = p.expect().await;
    assert_eq!(
        window(&mut p, nop),
        4,
        "the whole window once nothing is outstanding"
    );
}
