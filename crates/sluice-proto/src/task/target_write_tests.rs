//! Unit tests of the target-side write rules, one scripted peer PDU at a time.

use bytes::Bytes;

use super::*;
use crate::pdu::{Cdb, TaskAttr};
use crate::seq::SeqNum;
use crate::task::{PeerAction, SequentialTtts};

fn params() -> SessionParams {
    SessionParams {
        immediate_data: true,
        initial_r2t: false,
        first_burst_length: 4096,
        max_burst_length: 8192,
        target_max_recv_data_segment_length: 1024,
        ..SessionParams::default()
    }
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i * 7 + 3) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn command(edtl: u32, immediate: Bytes, final_bit: bool) -> ScsiCommand {
    ScsiCommand {
        immediate: false,
        final_bit,
        read: false,
        write: true,
        attr: TaskAttr::Simple,
        lun: Lun::from_number(1),
        itt: Itt(42),
        expected_data_transfer_length: edtl,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(1),
        cdb: Cdb::default(),
        bidi_read_length: None,
        data: immediate,
    }
}

fn data_out(ttt: Ttt, data_sn: u32, offset: u32, data: Bytes, final_bit: bool) -> DataOut {
    DataOut {
        final_bit,
        lun: Lun::from_number(1),
        itt: Itt(42),
        ttt,
        exp_stat_sn: SeqNum(1),
        data_sn,
        buffer_offset: offset,
        data,
    }
}

fn r2ts(p: WriteProgress) -> Vec<R2t> {
    match p {
        WriteProgress::NeedR2ts(r) => r,
        other => panic!("expected R2Ts, got {other:?}"),
    }
}

#[test]
fn edtl_zero_completes_at_once() {
    let mut ttts = SequentialTtts::default();
    let (task, p) =
        TargetWrite::new(&command(0, Bytes::new(), true), &params(), 0, &mut ttts).unwrap();
    assert_eq!(p, WriteProgress::Complete(WriteData::default()));
    assert_eq!(task.response(ScsiStatus::Good, &[]).exp_data_sn, 0);
}

#[test]
fn immediate_data_only() {
    let data = pattern(1000);
    let mut ttts = SequentialTtts::default();
    let (_, p) = TargetWrite::new(
        &command(1000, data.clone(), true),
        &params(),
        1000,
        &mut ttts,
    )
    .unwrap();
    assert_eq!(p, WriteProgress::Complete(WriteData::from(&data[..])));
}

#[test]
fn immediate_data_refused_when_not_negotiated_or_too_long() {
    let mut ttts = SequentialTtts::default();
    let no_imm = SessionParams {
        immediate_data: false,
        ..params()
    };
    let e = TargetWrite::new(
        &command(1000, pattern(1000), true),
        &no_imm,
        1000,
        &mut ttts,
    )
    .unwrap_err();
    assert_eq!(e, TaskError::UnexpectedUnsolicited);
    assert_eq!(
        e.action(),
        PeerAction::CheckCondition {
            asc: 0x0c,
            ascq: 0x0c
        }
    );
    let e = TargetWrite::new(
        &command(4000, pattern(2000), true),
        &params(),
        4000,
        &mut ttts,
    )
    .unwrap_err();
    assert!(matches!(
        e,
        TaskError::SegmentTooLong {
            len: 2000,
            max: 1024
        }
    ));
    let e =
        TargetWrite::new(&command(100, pattern(200), true), &params(), 100, &mut ttts).unwrap_err();
    assert!(matches!(e, TaskError::BeyondEdtl { .. }));
}

#[test]
fn unsolicited_data_out_refused_with_initial_r2t() {
    let mut ttts = SequentialTtts::default();
    let p = SessionParams {
        initial_r2t: true,
        ..params()
    };
    let e = TargetWrite::new(&command(9000, Bytes::new(), false), &p, 9000, &mut ttts).unwrap_err();
    assert_eq!(e, TaskError::UnexpectedUnsolicited);
    // With F=1 the target solicits everything, and a stray unsolicited PDU is refused.
    let (mut task, first) =
        TargetWrite::new(&command(9000, Bytes::new(), true), &p, 9000, &mut ttts).unwrap();
    let r = r2ts(first);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (
            r[0].buffer_offset,
            r[0].desired_data_transfer_length,
            r[0].r2t_sn
        ),
        (0, 8192, 0)
    );
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 0, pattern(512), false),
        &mut ttts,
    );
    assert_eq!(e, Err(TaskError::UnexpectedUnsolicited));
}

#[test]
fn unsolicited_burst_then_r2ts_respecting_max_outstanding() {
    let p = SessionParams {
        max_outstanding_r2t: 2,
        data_sequence_in_order: false,
        ..params()
    };
    let data = pattern(30_000);
    let mut ttts = SequentialTtts::starting_at(100);
    let cmd = command(30_000, data.slice(..1024), false);
    let (mut task, first) = TargetWrite::new(&cmd, &p, 30_000, &mut ttts).unwrap();
    let r = r2ts(first);
    // Solicited part [4096, 30000) = 25904 bytes: 8192, 8192, 8192, 1328; two at a time.
    assert_eq!(
        r.iter()
            .map(|r| (r.buffer_offset, r.ttt.0, r.r2t_sn))
            .collect::<Vec<_>>(),
        vec![(4096, 100, 0), (12288, 101, 1)]
    );
    for (i, off) in (1024..4096).step_by(1024).enumerate() {
        let pdu = data_out(
            Ttt::RESERVED,
            i as u32,
            off,
            data.slice(off as usize..off as usize + 1024),
            off == 3072,
        );
        assert_eq!(
            task.handle_data_out(&pdu, &mut ttts),
            Ok(WriteProgress::Waiting)
        );
    }
    // Answer the second R2T first (DataSequenceInOrder=No allows it).
    let mut third = None;
    for (sn, off) in (12288..20480).step_by(1024).enumerate() {
        let pdu = data_out(
            Ttt(101),
            sn as u32,
            off,
            data.slice(off as usize..off as usize + 1024),
            off == 19456,
        );
        let progress = task.handle_data_out(&pdu, &mut ttts).unwrap();
        if off == 19456 {
            third = Some(r2ts(progress));
        } else {
            assert_eq!(progress, WriteProgress::Waiting);
        }
    }
    let third = third.unwrap();
    assert_eq!(
        (third[0].buffer_offset, third[0].r2t_sn, third[0].ttt),
        (20480, 2, Ttt(102))
    );
    assert_eq!(task.counters().r2t, 3);
    let e = task.handle_data_out(&data_out(Ttt(7), 0, 4096, pattern(10), false), &mut ttts);
    assert_eq!(e, Err(TaskError::UnknownTtt(Ttt(7))));
}

#[test]
fn unsolicited_amount_must_match_first_burst() {
    let mut ttts = SequentialTtts::default();
    let (mut task, _) = TargetWrite::new(
        &command(9000, Bytes::new(), false),
        &params(),
        9000,
        &mut ttts,
    )
    .unwrap();
    // F before FirstBurstLength bytes arrived.
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 0, pattern(1024), true),
        &mut ttts,
    );
    assert_eq!(e, Err(TaskError::IncorrectUnsolicitedAmount));
    let (mut task, _) = TargetWrite::new(
        &command(9000, Bytes::new(), false),
        &params(),
        9000,
        &mut ttts,
    )
    .unwrap();
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 4000, pattern(200), false),
        &mut ttts,
    );
    assert_eq!(e, Err(TaskError::IncorrectUnsolicitedAmount));
}

#[test]
fn data_beyond_edtl_and_sequence_errors() {
    let mut ttts = SequentialTtts::default();
    let (mut task, _) = TargetWrite::new(
        &command(2048, Bytes::new(), false),
        &params(),
        2048,
        &mut ttts,
    )
    .unwrap();
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 2000, pattern(100), true),
        &mut ttts,
    );
    assert!(matches!(e, Err(TaskError::BeyondEdtl { .. })));
    assert_eq!(
        e.unwrap_err().action(),
        PeerAction::Reject(crate::pdu::codes::RejectReason::ProtocolError)
    );
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 1024, pattern(1024), true),
        &mut ttts,
    );
    assert_eq!(
        e,
        Err(TaskError::Sequence {
            expected: 0,
            got: 1024
        })
    );
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 3, 0, pattern(1024), false),
        &mut ttts,
    );
    assert_eq!(
        e,
        Err(TaskError::Sequence {
            expected: 0,
            got: 3
        })
    );
    assert_eq!(
        e.unwrap_err().action(),
        PeerAction::CheckCondition {
            asc: 0x4b,
            ascq: 0x00
        }
    );
    let e = task.handle_data_out(
        &data_out(Ttt::RESERVED, 0, 0, pattern(1025), false),
        &mut ttts,
    );
    assert!(matches!(e, Err(TaskError::SegmentTooLong { .. })));
}

#[test]
fn duplicates_are_ignored_and_overlays_refused() {
    let p = SessionParams {
        data_pdu_in_order: false,
        ..params()
    };
    let mut ttts = SequentialTtts::default();
    let data = pattern(3072);
    let (mut task, _) =
        TargetWrite::new(&command(3072, Bytes::new(), false), &p, 3072, &mut ttts).unwrap();
    let pdu = |sn: u32, off: u32, len: u32, f: bool| {
        data_out(
            Ttt::RESERVED,
            sn,
            off,
            data.slice(off as usize..(off + len) as usize),
            f,
        )
    };
    assert_eq!(
        task.handle_data_out(&pdu(2, 2048, 1024, true), &mut ttts),
        Ok(WriteProgress::Waiting)
    );
    assert_eq!(
        task.handle_data_out(&pdu(2, 2048, 1024, true), &mut ttts),
        Ok(WriteProgress::Waiting)
    );
    assert_eq!(task.counters().duplicates, 1);
    assert_eq!(
        task.handle_data_out(&pdu(0, 0, 1024, false), &mut ttts),
        Ok(WriteProgress::Waiting)
    );
    assert_eq!(
        task.handle_data_out(&pdu(1, 512, 1024, false), &mut ttts),
        Err(TaskError::Overlap(512))
    );
}

#[test]
fn fewer_wanted_bytes_than_edtl_solicits_less_and_reports_underflow() {
    let p = SessionParams {
        immediate_data: false,
        initial_r2t: true,
        ..params()
    };
    let data = pattern(20_000);
    let mut ttts = SequentialTtts::default();
    let (mut task, first) =
        TargetWrite::new(&command(20_000, Bytes::new(), true), &p, 5000, &mut ttts).unwrap();
    let r = r2ts(first);
    assert_eq!(
        (r[0].buffer_offset, r[0].desired_data_transfer_length),
        (0, 5000)
    );
    let mut last = WriteProgress::Waiting;
    for (sn, off) in (0..5000u32).step_by(1024).enumerate() {
        let end = (off + 1024).min(5000);
        let pdu = data_out(
            r[0].ttt,
            sn as u32,
            off,
            data.slice(off as usize..end as usize),
            end == 5000,
        );
        last = task.handle_data_out(&pdu, &mut ttts).unwrap();
    }
    assert_eq!(
        last,
        WriteProgress::Complete(WriteData::from(&data[..5000]))
    );
    let rsp = task.response(ScsiStatus::Good, &[]);
    // One R2T was sent, but ExpDataSN counts Data-In PDUs only (section 11.4.8).
    assert!(rsp.underflow && rsp.residual == 15_000 && rsp.exp_data_sn == 0);
    assert_eq!(
        task.handle_data_out(&data_out(r[0].ttt, 5, 0, pattern(1), true), &mut ttts),
        Err(TaskError::AfterCompletion)
    );
}

#[test]
fn solicited_data_must_echo_lun_and_stay_in_its_burst() {
    let p = SessionParams {
        immediate_data: false,
        initial_r2t: true,
        ..params()
    };
    let mut ttts = SequentialTtts::default();
    let (mut task, first) =
        TargetWrite::new(&command(2048, Bytes::new(), true), &p, 2048, &mut ttts).unwrap();
    let ttt = r2ts(first)[0].ttt;
    let mut wrong_lun = data_out(ttt, 0, 0, pattern(1024), false);
    wrong_lun.lun = Lun::from_number(2);
    assert_eq!(
        task.handle_data_out(&wrong_lun, &mut ttts),
        Err(TaskError::WrongTask(Itt(42)))
    );
    let e = task.handle_data_out(&data_out(ttt, 0, 0, pattern(1024), true), &mut ttts);
    assert_eq!(e, Err(TaskError::BurstMismatch));
}

/// Sends `data` at `offset` for one R2T in PDUs of `pdu_len`, in the order of `order`.
fn answer_r2t(
    task: &mut TargetWrite,
    r2t: &R2t,
    data: &Bytes,
    pdu_len: u32,
    order: &[usize],
    ttts: &mut SequentialTtts,
) -> WriteProgress {
    let start = r2t.buffer_offset;
    let end = start + r2t.desired_data_transfer_length;
    let pdus: Vec<(u32, u32)> = (start..end)
        .step_by(pdu_len as usize)
        .map(|o| (o, (o + pdu_len).min(end)))
        .collect();
    let mut last = WriteProgress::Waiting;
    for &i in order {
        let (o, e) = pdus[i];
        let pdu = data_out(
            r2t.ttt,
            i as u32,
            o,
            data.slice(o as usize..e as usize),
            e == end,
        );
        last = task.handle_data_out(&pdu, ttts).unwrap();
    }
    last
}

#[test]
fn in_order_data_is_kept_as_the_pdus_segments_without_a_copy() {
    let seg = ZERO_COPY_MIN as u32;
    let p = SessionParams {
        immediate_data: true,
        initial_r2t: true,
        first_burst_length: seg,
        max_burst_length: 4 * seg,
        target_max_recv_data_segment_length: seg,
        ..params()
    };
    let len = 3 * seg as usize;
    let data = pattern(len);
    let mut ttts = SequentialTtts::default();
    let (mut task, first) = TargetWrite::new(
        &command(len as u32, data.slice(..seg as usize), true),
        &p,
        len as u32,
        &mut ttts,
    )
    .unwrap();
    let r = r2ts(first);
    let done = answer_r2t(&mut task, &r[0], &data, seg, &[0, 1], &mut ttts);
    let WriteProgress::Complete(got) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(got.segments().len(), 3);
    for (i, s) in got.segments().iter().enumerate() {
        // The same memory as the PDUs carried: nothing was copied.
        assert_eq!(s.as_ptr(), data[i * seg as usize..].as_ptr());
    }
    assert_eq!(got.to_bytes(), data);
}

#[test]
fn small_segments_are_copied_and_many_are_gathered() {
    let p = SessionParams {
        immediate_data: false,
        initial_r2t: true,
        max_burst_length: 1 << 20,
        target_max_recv_data_segment_length: 512,
        ..params()
    };
    // 512-byte PDUs: each kept segment is a copy (it must not pin the PDU's buffer).
    let data = pattern(8192);
    let mut ttts = SequentialTtts::default();
    let (mut task, first) =
        TargetWrite::new(&command(8192, Bytes::new(), true), &p, 8192, &mut ttts).unwrap();
    let r = r2ts(first);
    let order: Vec<usize> = (0..16).collect();
    let WriteProgress::Complete(got) = answer_r2t(&mut task, &r[0], &data, 512, &order, &mut ttts)
    else {
        panic!("expected completion");
    };
    assert_eq!(got.segments().len(), 16);
    for (i, s) in got.segments().iter().enumerate() {
        assert_ne!(
            s.as_ptr(),
            data[i * 512..].as_ptr(),
            "segment {i} was not copied"
        );
    }
    assert_eq!(got.to_bytes(), data);

    // More PDUs than MAX_SEGMENTS: gathered into one buffer.
    let len = (MAX_SEGMENTS + 8) * 512;
    let data = pattern(len);
    let (mut task, first) = TargetWrite::new(
        &command(len as u32, Bytes::new(), true),
        &p,
        len as u32,
        &mut ttts,
    )
    .unwrap();
    let r = r2ts(first);
    let order: Vec<usize> = (0..MAX_SEGMENTS + 8).collect();
    let WriteProgress::Complete(got) = answer_r2t(&mut task, &r[0], &data, 512, &order, &mut ttts)
    else {
        panic!("expected completion");
    };
    assert_eq!(got.segments().len(), 1);
    assert_eq!(got.to_bytes(), data);
}

#[test]
fn out_of_order_data_is_gathered_into_one_buffer() {
    let p = SessionParams {
        immediate_data: false,
        initial_r2t: true,
        data_pdu_in_order: false,
        ..params()
    };
    let data = pattern(4096);
    let mut ttts = SequentialTtts::default();
    let (mut task, first) =
        TargetWrite::new(&command(4096, Bytes::new(), true), &p, 4096, &mut ttts).unwrap();
    let r = r2ts(first);
    let done = answer_r2t(&mut task, &r[0], &data, 1024, &[0, 2, 1, 3], &mut ttts);
    let WriteProgress::Complete(got) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(got.segments().len(), 1);
    assert_eq!(got.to_bytes(), data);
}

#[test]
fn small_immediate_data_is_kept_only_when_it_completes_the_write() {
    let mut ttts = SequentialTtts::default();
    // 512 bytes of immediate data, the whole write: it runs at once, no copy needed.
    let data = pattern(512);
    let (_, done) =
        TargetWrite::new(&command(512, data.clone(), true), &params(), 512, &mut ttts).unwrap();
    let WriteProgress::Complete(got) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(got.segments().len(), 1);
    assert_eq!(
        got.segments()[0].as_ptr(),
        data.as_ptr(),
        "complete write was copied"
    );

    // The same 512 bytes starting a 4 KiB write: the task waits for more, so the piece is
    // copied rather than pinning the buffer it arrived in.
    let all = pattern(4096);
    let (mut task, first) = TargetWrite::new(
        &command(4096, all.slice(..512), true),
        &params(),
        4096,
        &mut ttts,
    )
    .unwrap();
    let r = r2ts(first);
    assert_eq!(r[0].buffer_offset, 512);
    let order: Vec<usize> = (0..r[0].desired_data_transfer_length as usize / 512).collect();
    let done = answer_r2t(&mut task, &r[0], &all, 512, &order, &mut ttts);
    let WriteProgress::Complete(got) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_ne!(
        got.segments()[0].as_ptr(),
        all.as_ptr(),
        "waiting write kept a slice"
    );
    assert_eq!(got.to_bytes(), all);
}

#[test]
fn discarded_data_is_dropped_as_it_arrives_and_completes_as_its_length() {
    // Pieces of ZERO_COPY_MIN and more, in order: kept as they arrived unless discarded.
    let piece = ZERO_COPY_MIN as u32;
    let p = SessionParams {
        immediate_data: true,
        initial_r2t: true,
        first_burst_length: piece,
        max_burst_length: 2 * piece,
        target_max_recv_data_segment_length: piece,
        ..params()
    };
    let edtl = 5 * piece;
    let mut ttts = SequentialTtts::default();
    let immediate = pattern(piece as usize);
    let (mut task, first) =
        TargetWrite::new(&command(edtl, immediate.clone(), true), &p, edtl, &mut ttts).unwrap();
    task.discard_data();
    assert!(immediate.is_unique(), "the immediate data is still held");
    let mut pending = r2ts(first);
    let mut done = WriteProgress::Waiting;
    while let Some(r2t) = pending.pop() {
        let end = r2t.buffer_offset + r2t.desired_data_transfer_length;
        for (sn, offset) in (r2t.buffer_offset..end).step_by(piece as usize).enumerate() {
            let data = pattern(piece.min(end - offset) as usize);
            let pdu = data_out(
                r2t.ttt,
                sn as u32,
                offset,
                data.clone(),
                offset + piece >= end,
            );
            done = task.handle_data_out(&pdu, &mut ttts).unwrap();
            drop(pdu);
            assert!(data.is_unique(), "Data-Out at {offset} is still held");
            if let WriteProgress::NeedR2ts(more) = &done {
                pending.extend(more.iter().cloned());
            }
        }
    }
    let WriteProgress::Complete(got) = done else {
        panic!("expected completion, got {done:?}");
    };
    assert_eq!(got.unkept(), Some(edtl as usize));
    assert_eq!(got.len(), edtl as usize);
    assert!(got.segments().is_empty());
    assert_eq!(got.to_bytes(), Bytes::from(vec![0u8; edtl as usize]));
    // Control: without `discard_data` the same write holds its immediate data.
    let (kept, first) =
        TargetWrite::new(&command(edtl, immediate.clone(), true), &p, edtl, &mut ttts).unwrap();
    assert!(
        !immediate.is_unique(),
        "kept data should be held (the test proves nothing)"
    );
    drop((kept, first));
}
