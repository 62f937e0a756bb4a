//! Injector tests on frames encoded by sluice-proto: each fault, what sluice-proto's framer
//! then reports, the skips without digests, the BER model, every-n-th drops, resets, login
//! exemption and replay from a seed.

use std::num::NonZeroU64;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests, FrameError, Framer};
use sluice_proto::pdu::codes::{ScsiResponseCode, ScsiStatus};
use sluice_proto::pdu::{
    Cdb, DataOut, LoginRequest, NopOut, Pdu, ScsiCommand, ScsiResponse, Stage, TaskAttr,
};
use sluice_proto::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};

use super::*;
use crate::plan::{DropEvery, Rate, Rules};

fn write_command(itt: u32, data: usize) -> Pdu {
    Pdu::ScsiCommand(ScsiCommand {
        immediate: false,
        final_bit: true,
        read: false,
        write: true,
        attr: TaskAttr::Simple,
        lun: Lun(0),
        itt: Itt(itt),
        expected_data_transfer_length: data as u32,
        cmd_sn: SeqNum(itt),
        exp_stat_sn: SeqNum(1),
        cdb: Cdb::new(&[0x8a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]),
        bidi_read_length: None,
        data: Bytes::from(vec![0xa5; data]),
    })
}

fn data_out(itt: u32, data_sn: u32) -> Pdu {
    Pdu::DataOut(DataOut {
        final_bit: false,
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt(5),
        exp_stat_sn: SeqNum(1),
        data_sn,
        buffer_offset: data_sn * 512,
        data: Bytes::from(vec![0x3c; 512]),
    })
}

fn response(itt: u32) -> Pdu {
    Pdu::ScsiResponse(ScsiResponse {
        bidi_overflow: false,
        bidi_underflow: false,
        overflow: false,
        underflow: false,
        response: ScsiResponseCode::Completed,
        status: ScsiStatus::Good,
        itt: Itt(itt),
        snack_tag: 0,
        stat_sn: SeqNum(40 + itt),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(32),
        exp_data_sn: 0,
        bidi_residual: 0,
        residual: 0,
        data: Bytes::new(),
    })
}

fn nop_out(itt: u32) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(itt),
        ttt: Ttt::RESERVED,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(1),
        data: Bytes::new(),
    })
}

fn login_request() -> Pdu {
    Pdu::LoginRequest(LoginRequest {
        transit: true,
        cont: false,
        csg: Stage::Operational.code(),
        nsg: Stage::FullFeature.code(),
        version_max: 0,
        version_min: 0,
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(0),
        itt: Itt(1),
        cid: 0,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(0),
        data: Bytes::new(),
    })
}

fn frame(pdu: &Pdu, digests: Digests) -> BytesMut {
    let mut out = BytesMut::new();
    encode(pdu, digests, &mut out);
    out
}

/// What sluice-proto's framer makes of a frame.
fn decode(frame: &[u8], digests: Digests) -> Result<Option<Pdu>, FrameError> {
    let mut framer = Framer::new(1 << 20);
    framer.set_digests(digests);
    framer.decode(&mut BytesMut::from(frame))
}

fn injector(rules: Rules) -> FaultInjector {
    FaultInjector::new(FaultPlan::symmetric(rules), 7, 0)
}

fn rate(p: f64) -> Rate {
    Rate::new(p).unwrap()
}

#[test]
fn corrupt_data_makes_the_framer_report_a_data_digest_error() {
    let mut inj = injector(Rules {
        corrupt_data: Rate::ONE,
        ..Rules::default()
    });
    let pdu = write_command(3, 4096);
    let mut f = frame(&pdu, Digests::BOTH);
    let d = inj.inject(Direction::ToTarget, &mut f, Digests::BOTH);
    assert!(d.corrupted() && d.copies == 1 && !d.reset_after, "{d:?}");
    let FaultAction::Corrupt { part, byte, .. } = d.events[0].action else {
        panic!("{d:?}");
    };
    assert_eq!(part, Part::Data);
    assert!(
        (52..52 + 4096).contains(&byte),
        "inside the data segment: {byte}"
    );
    match decode(&f, Digests::BOTH) {
        Err(FrameError::DataDigest { itt, .. }) => assert_eq!(itt, Itt(3)),
        other => panic!("expected a data digest error, got {other:?}"),
    }
    assert_eq!(inj.counters(Direction::ToTarget).corrupt_data, 1);
    // A PDU without data is not eligible: neither corrupted nor skipped.
    let mut f = frame(&nop_out(4), Digests::BOTH);
    assert!(inj
        .inject(Direction::ToTarget, &mut f, Digests::BOTH)
        .is_pass());
    assert_eq!(decode(&f, Digests::BOTH), Ok(Some(nop_out(4))));
}

#[test]
fn corrupt_header_makes_the_framer_report_a_header_digest_error() {
    let mut inj = injector(Rules {
        corrupt_header: Rate::ONE,
        ..Rules::default()
    });
    for pdu in [response(2), write_command(3, 100)] {
        let mut f = frame(&pdu, Digests::BOTH);
        let d = inj.inject(Direction::ToInitiator, &mut f, Digests::BOTH);
        let FaultAction::Corrupt {
            part: Part::Header,
            byte,
            ..
        } = d.events[0].action
        else {
            panic!("{d:?}");
        };
        assert!(byte < 48, "{byte}");
        assert!(matches!(
            decode(&f, Digests::BOTH),
            Err(FrameError::HeaderDigest { .. })
        ));
    }
    assert_eq!(inj.counters(Direction::ToInitiator).corrupt_header, 2);
}

#[test]
fn without_a_digest_corruption_is_skipped_and_counted() {
    let mut inj = injector(Rules {
        corrupt_header: Rate::ONE,
        corrupt_data: Rate::ONE,
        ..Rules::default()
    });
    let pdu = write_command(3, 1000);
    let original = frame(&pdu, Digests::NONE);
    let mut f = original.clone();
    let d = inj.inject(Direction::ToTarget, &mut f, Digests::NONE);
    assert_eq!(f, original, "left alone");
    assert!(d.is_pass() && !d.events.is_empty());
    let c = inj.counters(Direction::ToTarget);
    assert_eq!(
        (c.skipped_no_header_digest, c.skipped_no_data_digest),
        (1, 1)
    );
    assert_eq!(c.faults(), 0);
    assert_eq!(
        d.events[1].to_string(),
        "conn=0 dir=i->t pdu=command n=0 itt=0x00000003 cmdsn=3 fault=skipped-corrupt-data reason=no-data-digest"
    );
    // With only the header digest, the header is hit and the data skipped.
    let header_only = Digests {
        header: true,
        data: false,
    };
    let mut f = frame(&pdu, header_only);
    let d = inj.inject(Direction::ToTarget, &mut f, header_only);
    assert!(d.corrupted());
    assert_eq!(inj.counters(Direction::ToTarget).skipped_no_data_digest, 2);
}

#[test]
fn drops_every_nth_pdu_of_a_kind_per_direction() {
    let every = |kind, n| DropEvery {
        kind,
        every: NonZeroU64::new(n).unwrap(),
    };
    let mut inj = injector(Rules {
        drop: vec![every(PduKind::DataOut, 3), every(PduKind::Response, 1)],
        ..Rules::default()
    });
    let mut dropped = Vec::new();
    for sn in 1..=10 {
        // NOP-Outs in between count for nothing.
        let mut f = frame(&nop_out(sn), Digests::NONE);
        assert!(inj
            .inject(Direction::ToTarget, &mut f, Digests::NONE)
            .is_pass());
        let mut f = frame(&data_out(9, sn), Digests::NONE);
        let d = inj.inject(Direction::ToTarget, &mut f, Digests::NONE);
        if d.copies == 0 {
            assert_eq!(d.events[0].seq, Some((SeqField::DataSn, sn)));
            dropped.push(sn);
        }
    }
    assert_eq!(dropped, vec![3, 6, 9], "the dissertation's every-n-th rule");
    let mut f = frame(&response(1), Digests::NONE);
    let d = inj.inject(Direction::ToInitiator, &mut f, Digests::NONE);
    assert_eq!(d.copies, 0);
    assert_eq!(
        d.events[0].to_string(),
        "conn=0 dir=t->i pdu=response n=0 itt=0x00000001 statsn=41 fault=drop every=1"
    );
    assert_eq!(inj.counters(Direction::ToTarget).dropped, 3);
    assert_eq!(inj.counters(Direction::ToInitiator).dropped, 1);
}

#[test]
fn duplicates_and_resets() {
    let mut plan = FaultPlan::symmetric(Rules {
        duplicate: Rate::ONE,
        ..Rules::default()
    });
    plan.reset_every = NonZeroU64::new(3);
    let mut inj = FaultInjector::new(plan, 1, 4);
    let mut resets = Vec::new();
    for i in 0..6u32 {
        let (dir, pdu) = if i % 2 == 0 {
            (Direction::ToTarget, nop_out(i))
        } else {
            (Direction::ToInitiator, response(i))
        };
        let mut f = frame(&pdu, Digests::NONE);
        let d = inj.inject(dir, &mut f, Digests::NONE);
        assert_eq!(d.copies, 2);
        if d.reset_after {
            resets.push(i);
            assert_eq!(d.events.last().map(|e| e.connection), Some(4));
        }
    }
    // Both directions count towards the same reset period.
    assert_eq!(resets, vec![2, 5]);
    let total =
        inj.counters(Direction::ToTarget).resets + inj.counters(Direction::ToInitiator).resets;
    assert_eq!(total, 2);
}

#[test]
fn login_pdus_are_exempt_unless_the_plan_includes_them() {
    let rules = Rules {
        duplicate: Rate::ONE,
        drop: vec![DropEvery {
            kind: PduKind::LoginRequest,
            every: NonZeroU64::MIN,
        }],
        ..Rules::default()
    };
    let mut inj = injector(rules.clone());
    let mut f = frame(&login_request(), Digests::NONE);
    assert!(inj
        .inject(Direction::ToTarget, &mut f, Digests::NONE)
        .is_pass());
    assert_eq!(inj.counters(Direction::ToTarget).pdus, 1);

    let mut plan = FaultPlan::symmetric(rules);
    plan.login = LoginFaults::Included;
    let mut inj = FaultInjector::new(plan, 7, 0);
    assert_eq!(
        inj.inject(Direction::ToTarget, &mut f, Digests::NONE)
            .copies,
        0
    );
}

#[test]
fn a_frame_that_does_not_match_its_header_is_passed_untouched() {
    let mut inj = injector(Rules {
        corrupt_header: Rate::ONE,
        duplicate: Rate::ONE,
        ..Rules::default()
    });
    let mut f = frame(&response(1), Digests::BOTH);
    f.truncate(50);
    let before = f.clone();
    assert!(inj
        .inject(Direction::ToInitiator, &mut f, Digests::BOTH)
        .is_pass());
    assert_eq!(f, before);
    assert!(inj
        .inject(Direction::ToInitiator, &mut [0u8; 10], Digests::BOTH)
        .is_pass());
}

/// The frames and decisions of a run of 200 PDUs under a busy plan.
fn run(seed: u64, connection: u64) -> Vec<(BytesMut, Decision)> {
    let plan = FaultPlan::symmetric(Rules {
        corrupt_data: rate(0.2),
        corrupt_header: rate(0.1),
        ber: rate(1e-5),
        duplicate: rate(0.1),
        ..Rules::default()
    });
    let mut inj = FaultInjector::new(plan, seed, connection);
    (0..200)
        .map(|i| {
            let mut f = frame(&data_out(1, i), Digests::BOTH);
            let d = inj.inject(Direction::ToTarget, &mut f, Digests::BOTH);
            (f, d)
        })
        .collect()
}

#[test]
fn the_same_seed_replays_the_same_decisions() {
    let a = run(42, 0);
    assert_eq!(a, run(42, 0));
    assert_ne!(a, run(43, 0), "another seed");
    assert_ne!(a, run(42, 1), "another connection");
    let faulted = a.iter().filter(|(_, d)| !d.is_pass()).count();
    assert!((40..140).contains(&faulted), "{faulted}");
}

#[test]
fn one_rules_fate_does_not_move_when_another_rate_changes() {
    let corrupted = |duplicate: f64| -> Vec<bool> {
        let mut inj = injector(Rules {
            corrupt_data: rate(0.3),
            duplicate: rate(duplicate),
            ..Rules::default()
        });
        (0..100)
            .map(|i| {
                let mut f = frame(&data_out(1, i), Digests::BOTH);
                inj.inject(Direction::ToTarget, &mut f, Digests::BOTH)
                    .corrupted()
            })
            .collect()
    };
    assert_eq!(corrupted(0.0), corrupted(0.9));
}

#[test]
fn the_bit_error_rate_hits_pdus_as_the_formula_says_and_parts_by_size() {
    // 512-byte Data-Outs with both digests: 48 + 4 header bytes, 512 + 4 data bytes.
    let ber = 1e-4;
    let mut inj = injector(Rules {
        ber: rate(ber),
        ..Rules::default()
    });
    let n = 20_000u32;
    let (mut header, mut data) = (0u32, 0u32);
    let mut bytes = 0;
    for i in 0..n {
        let mut f = frame(&data_out(1, i), Digests::BOTH);
        bytes = f.len();
        let d = inj.inject(Direction::ToTarget, &mut f, Digests::BOTH);
        for e in &d.events {
            match e.action {
                FaultAction::Corrupt {
                    part: Part::Header,
                    cause: Cause::Ber,
                    byte,
                    ..
                } => {
                    assert!(byte < 52);
                    assert!(matches!(
                        decode(&f, Digests::BOTH),
                        Err(FrameError::HeaderDigest { .. })
                    ));
                    header += 1;
                }
                FaultAction::Corrupt {
                    part: Part::Data,
                    cause: Cause::Ber,
                    ..
                } => {
                    assert!(matches!(
                        decode(&f, Digests::BOTH),
                        Err(FrameError::DataDigest { .. })
                    ));
                    data += 1;
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(bytes, 568);
    let p = crate::ber::pdu_error_probability(rate(ber), 568 * 8);
    let expected = p * f64::from(n);
    let hits = f64::from(header + data);
    // Binomial: n = 20,000, p = 0.366; the standard deviation is about 68.
    assert!(
        (hits - expected).abs() < 4.0 * (expected * (1.0 - p)).sqrt(),
        "{hits} vs {expected}"
    );
    let header_share = f64::from(header) / hits;
    let expected_share = 52.0 / 568.0;
    assert!(
        (header_share - expected_share).abs() < 0.02,
        "{header_share} vs {expected_share}"
    );
    let c = inj.counters(Direction::ToTarget);
    assert_eq!(
        (c.ber_header, c.ber_data),
        (u64::from(header), u64::from(data))
    );
}
