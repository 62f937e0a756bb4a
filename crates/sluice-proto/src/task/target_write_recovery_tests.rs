//! Within-command recovery of writes at the target: recovery R2Ts for Data-Out lost to a
//! digest error, a gap or a timeout, and R2T SNACK replicas (RFC 7143 sections 7.8, 7.9,
//! 11.8, 11.16).

use bytes::Bytes;

use super::super::{TargetWrite, WriteProgress};
use crate::params::SessionParams;
use crate::pdu::{Cdb, DataOut, R2t, ScsiCommand, TaskAttr};
use crate::seq::{Itt, Lun, SeqNum, Ttt};
use crate::task::SequentialTtts;

const ITT: Itt = Itt(7);
const LUN: Lun = Lun(0);

/// ErrorRecoveryLevel 1, 1 KiB PDUs, 4 KiB bursts, one R2T at a time.
fn params(initial_r2t: bool) -> SessionParams {
    SessionParams {
        error_recovery_level: 1,
        immediate_data: false,
        initial_r2t,
        first_burst_length: 2048,
        max_burst_length: 4096,
        target_max_recv_data_segment_length: 1024,
        max_outstanding_r2t: 1,
        ..SessionParams::default()
    }
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 13 + 5) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn command(edtl: u32, final_bit: bool) -> ScsiCommand {
    ScsiCommand {
        immediate: false,
        final_bit,
        read: false,
        write: true,
        attr: TaskAttr::Simple,
        lun: LUN,
        itt: ITT,
        expected_data_transfer_length: edtl,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(1),
        cdb: Cdb::default(),
        bidi_read_length: None,
        data: Bytes::new(),
    }
}

fn data_out(ttt: Ttt, data_sn: u32, offset: u32, data: &Bytes, len: u32, f: bool) -> DataOut {
    DataOut {
        final_bit: f,
        lun: LUN,
        itt: ITT,
        ttt,
        exp_stat_sn: SeqNum(1),
        data_sn,
        buffer_offset: offset,
        data: data.slice(offset as usize..(offset + len) as usize),
    }
}

fn r2ts(p: WriteProgress) -> Vec<R2t> {
    match p {
        WriteProgress::NeedR2ts(r) => r,
        other => panic!("expected R2Ts, got {other:?}"),
    }
}

/// Answers `r2t` in 1 KiB PDUs, skipping those whose index is in `lose`.
fn answer(
    w: &mut TargetWrite,
    r2t: &R2t,
    data: &Bytes,
    lose: &[u32],
    ttts: &mut SequentialTtts,
) -> WriteProgress {
    let end = r2t.buffer_offset + r2t.desired_data_transfer_length;
    let mut last = WriteProgress::Waiting;
    for (i, offset) in (r2t.buffer_offset..end).step_by(1024).enumerate() {
        let len = 1024.min(end - offset);
        if lose.contains(&(i as u32)) {
            continue;
        }
        let pdu = data_out(r2t.ttt, i as u32, offset, data, len, offset + len == end);
        last = w.handle_data_out(&pdu, ttts).expect("accepted");
    }
    last
}

fn complete(p: WriteProgress) -> Bytes {
    match p {
        WriteProgress::Complete(d) => d.to_bytes(),
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn a_dataout_lost_mid_sequence_is_asked_for_by_a_recovery_r2t_with_the_next_r2tsn() {
    let data = pattern(8192);
    let mut ttts = SequentialTtts::starting_at(100);
    let (mut w, first) = TargetWrite::new(&command(8192, true), &params(true), 8192, &mut ttts)
        .expect("a valid write");
    let r = r2ts(first);
    assert_eq!((r[0].r2t_sn, r[0].buffer_offset), (0, 0));
    // DataSN 1 (bytes 1024..2048) lost: the F bit ends the sequence with a hole.
    let recovery = r2ts(answer(&mut w, &r[0], &data, &[1], &mut ttts));
    assert_eq!(recovery.len(), 1);
    let rr = &recovery[0];
    assert_eq!(
        (rr.r2t_sn, rr.buffer_offset, rr.desired_data_transfer_length),
        (1, 1024, 1024),
        "the recovery R2T carries the next R2TSN and asks for the hole only"
    );
    assert_ne!(rr.ttt, r[0].ttt);
    // The recovery sequence, then the second burst.
    let next = r2ts(answer(&mut w, rr, &data, &[], &mut ttts));
    assert_eq!((next[0].r2t_sn, next[0].buffer_offset), (2, 4096));
    let got = complete(answer(&mut w, &next[0], &data, &[], &mut ttts));
    assert_eq!(got, data);
    let c = w.counters();
    assert_eq!((c.r2t, c.recovery_r2t), (3, 1));
}

#[test]
fn a_data_digest_error_on_the_final_pdu_recovers_at_once() {
    let data = pattern(4096);
    let mut ttts = SequentialTtts::starting_at(1);
    let (mut w, first) =
        TargetWrite::new(&command(4096, true), &params(true), 4096, &mut ttts).unwrap();
    let r = r2ts(first);
    assert!(matches!(
        answer(&mut w, &r[0], &data, &[3], &mut ttts),
        WriteProgress::Waiting
    ));
    // The last PDU's data failed its digest: its header still says F.
    let header = DataOut {
        data: Bytes::new(),
        ..data_out(r[0].ttt, 3, 3072, &data, 1024, true)
    };
    let rr = r2ts(w.handle_lost_data_out(&header, 1024, &mut ttts).unwrap());
    assert_eq!(
        (rr[0].buffer_offset, rr[0].desired_data_transfer_length),
        (3072, 1024)
    );
    assert_eq!(w.counters().lost, 1);
    let got = complete(answer(&mut w, &rr[0], &data, &[], &mut ttts));
    assert_eq!(got, data);
}

#[test]
fn a_sequence_reception_timeout_asks_again_and_late_data_still_counts() {
    let data = pattern(4096);
    let mut ttts = SequentialTtts::starting_at(1);
    let (mut w, first) =
        TargetWrite::new(&command(4096, true), &params(true), 4096, &mut ttts).unwrap();
    let r = r2ts(first);
    // Two PDUs arrive, then nothing for the sequence reception timeout.
    answer(&mut w, &r[0], &data, &[2, 3], &mut ttts);
    assert!(w.awaits_data());
    let rr = r2ts(w.handle_sequence_timeout(&mut ttts));
    assert_eq!(
        (
            rr[0].r2t_sn,
            rr[0].buffer_offset,
            rr[0].desired_data_transfer_length
        ),
        (1, 2048, 2048)
    );
    // The initiator was only slow: the rest of its answer to the first R2T arrives now and
    // completes the write; the recovery sequence is no longer needed.
    let late = data_out(r[0].ttt, 2, 2048, &data, 1024, false);
    assert!(matches!(
        w.handle_data_out(&late, &mut ttts),
        Ok(WriteProgress::Waiting)
    ));
    let last = data_out(r[0].ttt, 3, 3072, &data, 1024, true);
    let got = complete(w.handle_data_out(&last, &mut ttts).expect("accepted"));
    assert_eq!(got, data);
    assert!(!w.awaits_data());
}

#[test]
fn lost_unsolicited_data_is_recovered_after_the_outstanding_r2t() {
    let data = pattern(8192);
    let mut ttts = SequentialTtts::starting_at(1);
    // InitialR2T=No: 2 KiB unsolicited, and the first R2T for 2048..6144 at once.
    let (mut w, first) =
        TargetWrite::new(&command(8192, false), &params(false), 8192, &mut ttts).unwrap();
    let r = r2ts(first);
    assert_eq!(
        (r[0].buffer_offset, r[0].desired_data_transfer_length),
        (2048, 4096)
    );
    // Unsolicited DataSN 1 (with the F bit) is lost; only DataSN 0 arrives.
    let pdu = data_out(Ttt::RESERVED, 0, 0, &data, 1024, false);
    assert!(matches!(
        w.handle_data_out(&pdu, &mut ttts),
        Ok(WriteProgress::Waiting)
    ));
    // Data for the R2T ends the unsolicited sequence; its hole waits for the R2T to finish
    // (MaxOutstandingR2T=1).
    let after = r2ts(answer(&mut w, &r[0], &data, &[], &mut ttts));
    assert_eq!(
        (
            after[0].r2t_sn,
            after[0].buffer_offset,
            after[0].desired_data_transfer_length
        ),
        (1, 1024, 1024),
        "the unsolicited hole comes first"
    );
    let next = r2ts(answer(&mut w, &after[0], &data, &[], &mut ttts));
    assert_eq!((next[0].r2t_sn, next[0].buffer_offset), (2, 6144));
    let got = complete(answer(&mut w, &next[0], &data, &[], &mut ttts));
    assert_eq!(got, data);
}

#[test]
fn r2t_snack_replicas_only_for_outstanding_r2ts() {
    let data = pattern(8192);
    let mut ttts = SequentialTtts::starting_at(1);
    let p = SessionParams {
        data_sequence_in_order: false,
        max_outstanding_r2t: 2,
        ..params(true)
    };
    let (mut w, first) = TargetWrite::new(&command(8192, true), &p, 8192, &mut ttts).unwrap();
    let r = r2ts(first);
    assert_eq!(r.len(), 2);
    assert_eq!(w.r2t_replicas(1, 1), Some(vec![r[1].clone()]));
    assert_eq!(
        w.r2t_replicas(0, 0),
        Some(r.clone()),
        "0/0: every outstanding R2T"
    );
    assert_eq!(w.r2t_replicas(2, 1), None, "never sent");
    answer(&mut w, &r[0], &data, &[], &mut ttts);
    assert_eq!(w.r2t_replicas(0, 1), None, "its data arrived");
    assert_eq!(w.r2t_replicas(1, 0), Some(vec![r[1].clone()]));
}

#[test]
fn without_recovery_a_gap_is_still_a_sequence_error() {
    let data = pattern(4096);
    let mut ttts = SequentialTtts::starting_at(1);
    let p = SessionParams {
        error_recovery_level: 0,
        ..params(true)
    };
    let (mut w, first) = TargetWrite::new(&command(4096, true), &p, 4096, &mut ttts).unwrap();
    let r = r2ts(first);
    let pdu = data_out(r[0].ttt, 1, 1024, &data, 1024, false);
    assert!(w.handle_data_out(&pdu, &mut ttts).is_err());
    assert!(matches!(
        w.handle_sequence_timeout(&mut ttts),
        WriteProgress::Waiting
    ));
}

/// Seeds 549705, 598875, 679196 and 976491: with small bursts a write retires many more
/// sequences than the 32 it used to remember, and late data for an early one (the initiator
/// answers every R2T it received, section 11.8) was refused as an unknown TTT, ending the
/// write with CHECK CONDITION.
#[test]
fn late_data_for_any_retired_sequence_is_recognised_however_many_there_were() {
    const BURSTS: u32 = 40;
    let p = SessionParams {
        max_burst_length: 512,
        target_max_recv_data_segment_length: 512,
        max_outstanding_r2t: BURSTS as u16,
        ..params(true)
    };
    let edtl = BURSTS * 512;
    let data = pattern(edtl as usize);
    let mut ttts = SequentialTtts::starting_at(1);
    let (mut w, first) = TargetWrite::new(&command(edtl, true), &p, edtl, &mut ttts).unwrap();
    let r = r2ts(first);
    assert_eq!(r.len(), BURSTS as usize);
    // Nothing arrives for the sequence reception timeout: every sequence is retired and asked
    // for again.
    let rr = r2ts(w.handle_sequence_timeout(&mut ttts));
    assert!(!rr.is_empty());
    // The initiator was only slow: its answers to the original R2Ts arrive, oldest first.
    let mut last = WriteProgress::Waiting;
    for r2t in &r {
        let pdu = data_out(r2t.ttt, 0, r2t.buffer_offset, &data, 512, true);
        last = w
            .handle_data_out(&pdu, &mut ttts)
            .unwrap_or_else(|e| panic!("late data for TTT {:?} refused: {e:?}", r2t.ttt));
    }
    assert_eq!(complete(last), data);
}
