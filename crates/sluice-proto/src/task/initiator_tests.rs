//! Initiator-side unit tests: Data-Out planning, R2T checks, Data-In reassembly.

use super::*;
use bytes::{BufMut, BytesMut};

use crate::pdu::codes::ScsiStatus;
use crate::pdu::DataIn;
use crate::task::scsi_response;

fn params() -> SessionParams {
    SessionParams {
        immediate_data: true,
        initial_r2t: false,
        first_burst_length: 4096,
        max_burst_length: 8192,
        target_max_recv_data_segment_length: 1024,
        initiator_max_recv_data_segment_length: 1024,
        ..SessionParams::default()
    }
}

fn r2t(r2t_sn: u32, offset: u32, len: u32) -> R2t {
    R2t {
        lun: Lun::from_number(3),
        itt: Itt(1),
        ttt: Ttt(77),
        stat_sn: Default::default(),
        exp_cmd_sn: Default::default(),
        max_cmd_sn: Default::default(),
        r2t_sn,
        buffer_offset: offset,
        desired_data_transfer_length: len,
    }
}

fn data_in(data_sn: u32, offset: u32, len: usize) -> DataIn {
    DataIn {
        final_bit: false,
        ack: false,
        overflow: false,
        underflow: false,
        status_present: false,
        status: ScsiStatus::Good,
        lun: Lun::default(),
        itt: Itt(1),
        ttt: Ttt::RESERVED,
        stat_sn: Default::default(),
        exp_cmd_sn: Default::default(),
        max_cmd_sn: Default::default(),
        data_sn,
        buffer_offset: offset,
        residual: 0,
        data: Bytes::from(vec![data_sn as u8; len]),
    }
}

#[test]
fn itt_allocator_skips_reserved() {
    let mut itts = IttAllocator::starting_at(u32::MAX);
    assert_eq!(itts.allocate(), Itt(0));
    assert_eq!(itts.allocate(), Itt(1));
}

#[test]
fn write_plan_follows_the_negotiated_keys() {
    let data = Bytes::from(vec![1u8; 20_000]);
    let mut w = InitiatorWrite::new(Itt(1), Lun::from_number(3), data.clone(), &params());
    assert_eq!(w.immediate_data().len(), 1024);
    assert!(!w.command_final_bit());
    let unsolicited: Vec<DataOut> = w.unsolicited().collect();
    assert_eq!(unsolicited.len(), 3);
    assert_eq!(unsolicited[0].buffer_offset, 1024);
    assert!(unsolicited.iter().all(|p| p.ttt == Ttt::RESERVED));
    assert!(unsolicited[2].final_bit && !unsolicited[1].final_bit);
    let answer: Vec<DataOut> = w.handle_r2t(&r2t(0, 4096, 8192)).unwrap().collect();
    assert_eq!(answer.len(), 8);
    assert!(answer
        .iter()
        .enumerate()
        .all(|(i, p)| p.data_sn == i as u32 && p.ttt == Ttt(77)));
    assert_eq!(answer[0].lun, Lun::from_number(3));
    assert_eq!(
        w.handle_r2t(&r2t(2, 12288, 10)).unwrap_err(),
        TaskError::Sequence {
            expected: 1,
            got: 2
        }
    );
    assert_eq!(
        w.handle_r2t(&r2t(1, 12288, 9000)).unwrap_err(),
        TaskError::InvalidR2t
    );
    assert_eq!(
        w.handle_r2t(&r2t(1, 19_000, 2000)).unwrap_err(),
        TaskError::InvalidR2t
    );
    assert_eq!(
        w.handle_r2t(&r2t(1, 12288, 0)).unwrap_err(),
        TaskError::InvalidR2t
    );
    let c = w.counters();
    assert_eq!((c.immediate_bytes, c.data_out, c.r2t), (1024, 11, 1));
    // ExpDataSN of a write: 0 (RFC 7143: Data-In PDUs only) or, from an RFC 3720 target, the
    // R2Ts sent (one here); anything else is inconsistent.
    for accepted in [0, 1] {
        let rsp = scsi_response(Itt(1), ScsiStatus::Good, Residual::None, accepted, &[]);
        assert_eq!(w.handle_response(&rsp).unwrap().status, ScsiStatus::Good);
    }
    let rsp = scsi_response(Itt(1), ScsiStatus::Good, Residual::None, 2, &[]);
    assert_eq!(w.handle_response(&rsp), Err(TaskError::Inconsistent));
}

/// Over iSER (RFC 7145 section 7.3) an R2T's data is fetched by RDMA Read, never framed:
/// it is one Data-Out, one slice of the caller's buffer, while immediate and unsolicited data,
/// which do travel in Sends, stay cut to the target's MaxRecvDataSegmentLength.
#[test]
fn solicited_data_by_rdma_answers_an_r2t_with_one_slice() {
    let p = SessionParams {
        solicited_data_by_rdma: true,
        ..params()
    };
    let data = Bytes::from(vec![2u8; 20_000]);
    let mut w = InitiatorWrite::new(Itt(1), Lun::from_number(3), data.clone(), &p);
    assert_eq!(w.immediate_data().len(), 1024);
    let unsolicited: Vec<DataOut> = w.unsolicited().collect();
    assert_eq!(unsolicited.len(), 3);
    assert!(unsolicited.iter().all(|d| d.data.len() == 1024));
    let answer: Vec<DataOut> = w.handle_r2t(&r2t(0, 4096, 8192)).unwrap().collect();
    assert_eq!(answer.len(), 1);
    assert!(answer[0].final_bit);
    assert_eq!(
        (answer[0].buffer_offset, answer[0].data.len()),
        (4096, 8192)
    );
    assert_eq!(
        answer[0].data.as_ptr(),
        data[4096..].as_ptr(),
        "a slice, not a copy"
    );
}

#[test]
fn initial_r2t_without_immediate_data_sends_nothing_unsolicited() {
    let p = SessionParams {
        immediate_data: false,
        initial_r2t: true,
        ..params()
    };
    let mut w = InitiatorWrite::new(Itt(1), Lun::default(), Bytes::from(vec![0u8; 5000]), &p);
    assert!(w.immediate_data().is_empty());
    assert!(w.command_final_bit());
    assert_eq!(w.unsolicited().count(), 0);
}

#[test]
fn in_order_read_checks_offsets_and_data_sn() {
    let mut r = InitiatorRead::new(Itt(1), 3000, &params());
    assert_eq!(
        r.handle_data_in(&data_in(0, 0, 1000)),
        Ok(ReadProgress::Waiting)
    );
    assert_eq!(
        r.handle_data_in(&data_in(2, 1000, 1000)),
        Err(TaskError::Sequence {
            expected: 1,
            got: 2
        })
    );
    assert_eq!(
        r.handle_data_in(&data_in(1, 1500, 1000)),
        Err(TaskError::Sequence {
            expected: 1000,
            got: 1500
        })
    );
    assert!(matches!(
        r.handle_data_in(&data_in(1, 2500, 1000)),
        Err(TaskError::BeyondEdtl { .. })
    ));
}

#[test]
fn any_order_read_with_duplicate_and_phase_collapse() {
    let p = SessionParams {
        data_pdu_in_order: false,
        ..params()
    };
    let mut r = InitiatorRead::new(Itt(1), 3000, &p);
    let mut last = data_in(2, 2000, 800);
    last.final_bit = true;
    last.status_present = true;
    last.underflow = true;
    last.residual = 200;
    assert_eq!(
        r.handle_data_in(&data_in(1, 1000, 1000)),
        Ok(ReadProgress::Waiting)
    );
    assert_eq!(
        r.handle_data_in(&data_in(1, 1000, 1000)),
        Ok(ReadProgress::Waiting)
    );
    assert_eq!(r.counters().duplicates, 1);
    assert_eq!(
        r.handle_data_in(&data_in(0, 500, 1000)),
        Err(TaskError::Overlap(500))
    );
    assert_eq!(
        r.handle_data_in(&data_in(0, 0, 1000)),
        Ok(ReadProgress::Waiting)
    );
    match r.handle_data_in(&last).unwrap() {
        ReadProgress::Complete(data, status) => {
            assert_eq!(data.len(), 2800);
            assert_eq!(status.residual, Residual::Underflow(200));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.handle_data_in(&data_in(3, 0, 1)),
        Err(TaskError::AfterCompletion)
    );
}

#[test]
fn response_with_missing_data_in_is_a_sequence_problem() {
    let mut r = InitiatorRead::new(Itt(1), 2000, &params());
    r.handle_data_in(&data_in(0, 0, 1000)).unwrap();
    let rsp = scsi_response(Itt(1), ScsiStatus::Good, Residual::None, 2, &[]);
    assert_eq!(r.handle_response(&rsp), Err(TaskError::Inconsistent));
}

#[test]
fn check_condition_response_carries_sense() {
    let mut r = InitiatorRead::new(Itt(1), 2000, &params());
    let rsp = scsi_response(
        Itt(1),
        ScsiStatus::CheckCondition,
        Residual::Underflow(2000),
        0,
        &[0x70, 0, 3],
    );
    match r.handle_response(&rsp).unwrap() {
        ReadProgress::Complete(data, status) => {
            assert!(data.is_empty());
            assert_eq!(&status.sense[..], &[0x70, 0, 3]);
        }
        other => panic!("{other:?}"),
    }
}

/// Receives `pdu`'s payload through a placement, in pieces of `piece` bytes.
fn place(r: &mut InitiatorRead, pdu: &DataIn, piece: usize) -> Result<ReadProgress, TaskError> {
    let mut p = r
        .start_placement(pdu, pdu.data.len() as u32)
        .expect("placeable");
    let mut rest = &pdu.data[..];
    // The first piece as if it were already in the receive buffer, the rest through `spare`.
    let n = p.append(&rest[..piece.min(rest.len())]);
    rest = &rest[n..];
    while !rest.is_empty() {
        let mut spare = p.spare();
        let n = piece.min(rest.len()).min(spare.remaining_mut());
        spare.put_slice(&rest[..n]);
        rest = &rest[n..];
    }
    assert_eq!(p.remaining(), 0);
    assert_eq!(p.landed(), &pdu.data[..]);
    r.handle_placed(pdu, p)
}

fn pattern_in(data_sn: u32, offset: u32, len: usize) -> DataIn {
    let mut pdu = data_in(data_sn, offset, len);
    pdu.data = (0..len).map(|i| (offset as usize + i) as u8).collect();
    pdu
}

#[test]
fn placed_read_reassembles_like_handle_data_in() {
    let mut last = pattern_in(2, 2000, 800);
    last.final_bit = true;
    last.status_present = true;
    last.underflow = true;
    last.residual = 200;
    let expected: Vec<u8> = (0..2800usize).map(|i| i as u8).collect();
    // Every mix of placed and whole PDUs, with the first kept zero-copy or not.
    for mask in 0..8u8 {
        let mut r = InitiatorRead::new(Itt(1), 3000, &params());
        let pdus = [
            pattern_in(0, 0, 1000),
            pattern_in(1, 1000, 1000),
            last.clone(),
        ];
        let mut outcome = None;
        for (i, pdu) in pdus.iter().enumerate() {
            let progress = if mask & (1 << i) != 0 {
                place(&mut r, pdu, 300).unwrap()
            } else {
                r.handle_data_in(pdu).unwrap()
            };
            outcome = Some(progress);
        }
        match outcome.unwrap() {
            ReadProgress::Complete(data, status) => {
                assert_eq!(&data[..], &expected[..], "mask {mask}");
                assert_eq!(status.residual, Residual::Underflow(200));
            }
            other => panic!("mask {mask}: {other:?}"),
        }
        assert_eq!(r.counters().data_in, 3);
    }
}

#[test]
fn placed_read_ending_with_a_response() {
    let mut r = InitiatorRead::new(Itt(1), 2000, &params());
    place(&mut r, &pattern_in(0, 0, 1000), 1000).unwrap();
    place(&mut r, &pattern_in(1, 1000, 1000), 7).unwrap();
    let rsp = scsi_response(Itt(1), ScsiStatus::Good, Residual::None, 2, &[]);
    match r.handle_response(&rsp).unwrap() {
        ReadProgress::Complete(data, _) => {
            assert!(data.iter().enumerate().all(|(i, b)| *b == i as u8));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn placement_refuses_what_handle_data_in_refuses() {
    let any_order = SessionParams {
        data_pdu_in_order: false,
        ..params()
    };
    let mut r = InitiatorRead::new(Itt(1), 3000, &any_order);
    assert!(r.start_placement(&data_in(0, 0, 1000), 1000).is_none());

    let mut r = InitiatorRead::new(Itt(1), 3000, &params());
    let mut other = data_in(0, 0, 1000);
    other.itt = Itt(2);
    assert!(r.start_placement(&other, 1000).is_none());
    assert!(r.start_placement(&data_in(0, 0, 0), 0).is_none());
    assert!(r.start_placement(&data_in(0, 500, 1000), 1000).is_none());
    assert!(r.start_placement(&data_in(1, 0, 1000), 1000).is_none());
    assert!(r.start_placement(&data_in(0, 0, 3001), 3001).is_none());
    assert!(r.start_placement(&data_in(0, u32::MAX, 2), 2).is_none());
    // Refused placements leave the read untouched.
    assert_eq!(
        r.handle_data_in(&data_in(0, 0, 1000)),
        Ok(ReadProgress::Waiting)
    );
    assert!(r.start_placement(&data_in(2, 1000, 1000), 1000).is_none());
    assert!(r.start_placement(&data_in(1, 2000, 1000), 1000).is_none());
    let mut p = r.start_placement(&data_in(1, 1000, 1000), 1000).unwrap();
    // One placement at a time, and nothing else while the buffer is lent out.
    assert!(r.start_placement(&data_in(1, 1000, 1000), 1000).is_none());
    assert_eq!(
        r.handle_data_in(&data_in(1, 1000, 1000)),
        Err(TaskError::Inconsistent)
    );
    let rsp = scsi_response(Itt(1), ScsiStatus::Good, Residual::None, 2, &[]);
    assert_eq!(r.handle_response(&rsp), Err(TaskError::Inconsistent));
    // Part of the payload only: refused.
    p.append(&[1; 999]);
    assert_eq!(p.remaining(), 1);
    assert_eq!(p.append(&[1; 10]), 1);
    assert_eq!(p.remaining(), 0);
    assert_eq!(p.spare().remaining_mut(), 0);
    let mut wrong = data_in(1, 1000, 1000);
    wrong.buffer_offset = 0;
    assert_eq!(r.handle_placed(&wrong, p), Err(TaskError::Inconsistent));
}

#[test]
fn placed_pdu_short_of_its_length_fails() {
    let mut r = InitiatorRead::new(Itt(1), 2000, &params());
    let pdu = data_in(0, 0, 1000);
    let mut p = r.start_placement(&pdu, 1000).unwrap();
    p.append(&[0; 600]);
    assert_eq!(r.handle_placed(&pdu, p), Err(TaskError::Inconsistent));
}

#[test]
fn placed_status_follows_section_11_7_3() {
    // S without F is inconsistent, on a placed PDU as on a whole one.
    let mut r = InitiatorRead::new(Itt(1), 1000, &params());
    let mut pdu = pattern_in(0, 0, 1000);
    pdu.status_present = true;
    assert_eq!(place(&mut r, &pdu, 100), Err(TaskError::Inconsistent));
    // A CHECK CONDITION collapsed into the last placed Data-In completes the read.
    let mut r = InitiatorRead::new(Itt(1), 1000, &params());
    pdu.final_bit = true;
    pdu.status = ScsiStatus::CheckCondition;
    match place(&mut r, &pdu, 100).unwrap() {
        ReadProgress::Complete(data, status) => {
            assert_eq!(data.len(), 1000);
            assert_eq!(status.status, ScsiStatus::CheckCondition);
        }
        other => panic!("{other:?}"),
    }
    assert!(r.start_placement(&pattern_in(1, 0, 10), 10).is_none());
}

#[test]
fn overrun_past_the_payload_is_moved_out() {
    let mut r = InitiatorRead::new(Itt(1), 2000, &params());
    let mut last = pattern_in(1, 1000, 1000);
    last.final_bit = true;
    last.status_present = true;
    for pdu in [pattern_in(0, 0, 1000), last] {
        let mut p = r.start_placement(&pdu, 1000).unwrap();
        p.append(&pdu.data[..100]);
        // One read: the rest of the payload and what follows it on the wire.
        let mut wire = pdu.data[100..].to_vec();
        wire.extend_from_slice(&[0xee; PLACEMENT_OVERRUN]);
        let mut spare = p.spare_with_overrun();
        assert_eq!(spare.remaining_mut(), 900 + PLACEMENT_OVERRUN);
        spare.put_slice(&wire);
        assert_eq!(p.landed(), &pdu.data[..]);
        let mut rbuf = BytesMut::from(&b"ab"[..]);
        assert_eq!(p.split_overrun(&mut rbuf), PLACEMENT_OVERRUN);
        assert_eq!(rbuf.len(), 2 + PLACEMENT_OVERRUN);
        assert_eq!(p.split_overrun(&mut rbuf), 0);
        assert_eq!(p.remaining(), 0);
        if let ReadProgress::Complete(data, _) = r.handle_placed(&pdu, p).unwrap() {
            assert!(data.iter().enumerate().all(|(i, b)| *b == i as u8));
            return;
        }
    }
    panic!("the read did not complete");
}
