//! The driver hook: received bytes in any split come back as the same frames, faults land on
//! the direction the role implies, and a reset is reported once due.

use std::num::NonZeroU64;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests, FrameError, Framer};
use sluice_proto::pdu::{DataOut, NopOut, Pdu};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};

use super::*;
use crate::kind::PduKind;
use crate::plan::{DropEvery, Rate, Rules};

const BOTH: Digests = Digests {
    header: true,
    data: true,
};

fn data_out(data_sn: u32) -> Pdu {
    Pdu::DataOut(DataOut {
        final_bit: false,
        lun: Lun(0),
        itt: Itt(7),
        ttt: Ttt(5),
        exp_stat_sn: SeqNum(1),
        data_sn,
        buffer_offset: data_sn * 512,
        data: Bytes::from(vec![0x3c; 510]),
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

fn wire(pdus: &[Pdu]) -> BytesMut {
    let mut out = BytesMut::new();
    for p in pdus {
        encode(p, BOTH, &mut out);
    }
    out
}

/// Feeds `bytes` to the hook in reads of `step` bytes, after bytes already framed earlier.
fn receive_in_steps(hook: &mut DriverFaults, bytes: &[u8], step: usize) -> BytesMut {
    let mut buf = BytesMut::from(&b"left over"[..]);
    for chunk in bytes.chunks(step) {
        let from = buf.len();
        buf.extend_from_slice(chunk);
        hook.on_receive(&mut buf, from);
    }
    assert_eq!(
        &buf[..9],
        b"left over",
        "bytes before the read are not touched"
    );
    buf.split_off(9)
}

#[test]
fn received_bytes_come_back_whole_frames_only_in_any_split() {
    let pdus: Vec<Pdu> = (0..4).map(data_out).chain([nop_out(9)]).collect();
    let bytes = wire(&pdus);
    for step in [1, 7, 48, 100, 1000, bytes.len()] {
        let mut hook = DriverFaults::new(FaultPlan::default(), 1, 0, Sender::Target, BOTH, 8192);
        let mut got = BytesMut::new();
        for chunk in bytes.chunks(step) {
            let from = got.len();
            got.extend_from_slice(chunk);
            hook.on_receive(&mut got, from);
            // Only whole frames are handed over: the framer never waits inside the hook's
            // output for bytes the hook still holds.
            let mut framer = Framer::new(8192);
            framer.set_digests(BOTH);
            let mut copy = got.clone();
            while framer.decode(&mut copy).unwrap().is_some() {}
            assert!(
                copy.is_empty(),
                "step {step}: a partial frame was handed over"
            );
        }
        assert_eq!(got, bytes, "step {step}");
        assert_eq!(hook.counters(Direction::ToTarget).pdus, 5);
    }
}

#[test]
fn the_target_drops_what_it_receives_by_the_initiator_rules() {
    let plan = FaultPlan {
        to_target: Rules {
            drop: vec![DropEvery {
                kind: PduKind::DataOut,
                every: NonZeroU64::new(2).unwrap(),
            }],
            ..Rules::default()
        },
        ..FaultPlan::default()
    };
    let mut hook = DriverFaults::new(plan, 1, 0, Sender::Target, BOTH, 8192);
    let pdus: Vec<Pdu> = (0..4).map(data_out).collect();
    let got = receive_in_steps(&mut hook, &wire(&pdus), 13);
    let mut framer = Framer::new(8192);
    framer.set_digests(BOTH);
    let mut got = got;
    let mut data_sns = Vec::new();
    while let Some(Pdu::DataOut(d)) = framer.decode(&mut got).unwrap() {
        data_sns.push(d.data_sn);
    }
    assert_eq!(data_sns, [0, 2], "the 2nd and 4th Data-Out were dropped");
    // The same plan on the initiator's own sends.
    let mut hook = DriverFaults::new(
        FaultPlan {
            to_target: Rules {
                drop: vec![DropEvery {
                    kind: PduKind::DataOut,
                    every: NonZeroU64::new(2).unwrap(),
                }],
                ..Rules::default()
            },
            ..FaultPlan::default()
        },
        1,
        0,
        Sender::Initiator,
        BOTH,
        8192,
    );
    let copies: Vec<u8> = pdus
        .iter()
        .map(|p| hook.on_send(&mut wire(std::slice::from_ref(p))))
        .collect();
    assert_eq!(copies, [1, 0, 1, 0]);
}

#[test]
fn corruption_on_send_is_caught_by_the_peer_digest() {
    let plan = FaultPlan::symmetric(Rules {
        corrupt_data: Rate::ONE,
        ..Rules::default()
    });
    let mut hook = DriverFaults::new(plan, 3, 0, Sender::Initiator, BOTH, 8192);
    let mut frame = wire(&[data_out(0)]);
    assert_eq!(hook.on_send(&mut frame), 1);
    let mut framer = Framer::new(8192);
    framer.set_digests(BOTH);
    assert!(matches!(
        framer.decode(&mut frame),
        Err(FrameError::DataDigest { .. })
    ));
    assert_eq!(hook.counters(Direction::ToTarget).corrupt_data, 1);
    assert_eq!(hook.counters(Direction::ToInitiator).pdus, 0);
}

#[test]
fn a_reset_is_due_after_the_planned_count() {
    let plan = FaultPlan {
        reset_every: NonZeroU64::new(3),
        ..FaultPlan::default()
    };
    let mut hook = DriverFaults::new(plan, 1, 0, Sender::Target, BOTH, 8192);
    let mut buf = wire(&[nop_out(1), nop_out(2)]);
    hook.on_receive(&mut buf, 0);
    assert!(!hook.reset_due());
    assert_eq!(hook.on_send(&mut wire(&[nop_out(3)])), 1);
    assert!(hook.reset_due(), "the third PDU, either way, is the last");
}

#[test]
fn an_unframeable_stream_is_passed_on_for_the_framer_to_refuse() {
    let mut hook = DriverFaults::new(FaultPlan::default(), 1, 0, Sender::Target, BOTH, 256);
    let big = wire(&[data_out(0)]);
    let mut buf = big.clone();
    hook.on_receive(&mut buf, 0);
    assert_eq!(buf, big);
    let mut more = buf.clone();
    let from = more.len();
    more.extend_from_slice(b"xyz");
    hook.on_receive(&mut more, from);
    assert_eq!(&more[from..], b"xyz");
}

#[test]
fn whole_received_frames_take_the_receiving_directions_rules() {
    // Drop every 2nd Data-Out the target receives, duplicate everything it receives; its
    // own sends' rules are left alone.
    let plan = FaultPlan {
        to_target: Rules {
            drop: vec![DropEvery {
                kind: PduKind::DataOut,
                every: NonZeroU64::new(2).unwrap(),
            }],
            duplicate: Rate::ONE,
            ..Rules::default()
        },
        ..FaultPlan::default()
    };
    // iSER's RDMA mode has no digests (RFC 7145 section 5.1).
    let frame = |pdu: &Pdu| {
        let mut out = BytesMut::new();
        encode(pdu, Digests::NONE, &mut out);
        out
    };
    let mut hook = DriverFaults::new(plan, 1, 0, Sender::Target, Digests::NONE, 8192);
    let copies: Vec<u8> = (0..4)
        .map(|sn| hook.on_receive_frame(&mut frame(&data_out(sn))))
        .collect();
    assert_eq!(copies, [2, 0, 2, 0], "a dropped PDU is not duplicated too");
    assert_eq!(hook.counters(Direction::ToTarget).pdus, 4);
    assert_eq!(hook.on_send(&mut frame(&nop_out(1))), 1);
}
