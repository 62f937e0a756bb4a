//! In-place Data-In receiving: same PDUs, same checks and same errors as `Framer::decode`.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::framing::{encode, Digests};
use crate::pdu::codes::ScsiStatus;
use crate::pdu::{NopIn, Pdu};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

fn data_in(len: usize) -> DataIn {
    DataIn {
        final_bit: true,
        ack: false,
        overflow: false,
        underflow: true,
        status_present: true,
        status: ScsiStatus::Good,
        lun: Lun(0),
        itt: Itt(9),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum(4),
        exp_cmd_sn: SeqNum(5),
        max_cmd_sn: SeqNum(6),
        data_sn: 3,
        buffer_offset: 8192,
        residual: 17,
        data: (0..len).map(|i| (i * 7) as u8).collect(),
    }
}

fn nop_in() -> Pdu {
    Pdu::NopIn(NopIn {
        lun: Lun(0),
        itt: Itt(1),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum(7),
        exp_cmd_sn: SeqNum(8),
        max_cmd_sn: SeqNum(9),
        data: Bytes::new(),
    })
}

fn framer(digests: Digests) -> Framer {
    let mut f = Framer::new(1 << 20);
    f.set_digests(digests);
    f
}

/// Feeds `stream` to the framer `first` bytes at a time, then receives the Data-In's payload
/// in place in pieces of `piece` bytes; returns the header, the payload and the result of the
/// trailer check, and what is left of the stream.
fn receive(
    f: &Framer,
    stream: &[u8],
    first: usize,
    piece: usize,
) -> (DataIn, Vec<u8>, Result<bool, FrameError>, BytesMut) {
    let mut buf = BytesMut::from(&stream[..first]);
    let mut rest = &stream[first..];
    let partial = f.peek_data_in(&buf).unwrap().expect("a partial Data-In");
    let already = partial.data_in(&buf);
    let (pdu, mut rx) = partial.start(&mut buf);
    let mut placed = Vec::new();
    placed.extend_from_slice(&buf[..already]);
    assert_eq!(rx.handle_data(&buf[..already]), already);
    buf.advance(already);
    while rx.data_left() > 0 {
        let n = piece.min(rx.data_left()).min(rest.len());
        placed.extend_from_slice(&rest[..n]);
        assert_eq!(rx.handle_data(&rest[..n]), n);
        rest = &rest[n..];
    }
    buf.extend_from_slice(rest);
    let result = rx.finish(&mut buf);
    (pdu, placed, result, buf)
}

#[test]
fn a_placed_data_in_equals_the_decoded_one() {
    for digests in [Digests::NONE, Digests::BOTH] {
        for len in [1usize, 3, 4, 4097, 65_536] {
            let whole = data_in(len);
            let mut stream = BytesMut::new();
            encode(&Pdu::DataIn(whole.clone()), digests, &mut stream);
            encode(&nop_in(), digests, &mut stream);
            let f = framer(digests);
            let head = 48 + if digests.header { 4 } else { 0 };
            for first in [head, head + 1, head + len / 2] {
                let (pdu, placed, result, mut rest) = receive(&f, &stream, first, 1000);
                assert_eq!(result, Ok(true), "{digests:?} {len} {first}");
                assert_eq!(
                    DataIn {
                        data: Bytes::from(placed),
                        ..pdu
                    },
                    whole
                );
                let mut f = f.clone();
                assert_eq!(f.decode(&mut rest), Ok(Some(nop_in())));
                assert!(rest.is_empty());
            }
        }
    }
}

#[test]
fn finish_waits_for_the_whole_trailer() {
    let whole = data_in(4097);
    let mut stream = BytesMut::new();
    encode(&Pdu::DataIn(whole), Digests::BOTH, &mut stream);
    let f = framer(Digests::BOTH);
    let mut buf = BytesMut::from(&stream[..100]);
    let partial = f.peek_data_in(&buf).unwrap().unwrap();
    let (_, mut rx) = partial.start(&mut buf);
    assert_eq!(rx.finish(&mut buf), Ok(false));
    rx.handle_data(&stream[52..52 + 4097]);
    // Padding (3) and digest (4) still missing.
    let mut trailer = BytesMut::from(&stream[52 + 4097..52 + 4097 + 6]);
    assert_eq!(rx.finish(&mut trailer), Ok(false));
    assert_eq!(trailer.len(), 6);
    trailer.extend_from_slice(&stream[52 + 4097 + 6..]);
    assert_eq!(rx.finish(&mut trailer), Ok(true));
    assert!(trailer.is_empty());
}

#[test]
fn a_corrupt_placed_payload_fails_the_data_digest_and_is_consumed() {
    let mut stream = BytesMut::new();
    encode(&Pdu::DataIn(data_in(5000)), Digests::BOTH, &mut stream);
    encode(&nop_in(), Digests::BOTH, &mut stream);
    stream[52 + 4000] ^= 1;
    let f = framer(Digests::BOTH);
    let (_, _, result, mut rest) = receive(&f, &stream, 60, 512);
    let err = result.unwrap_err();
    assert!(matches!(err, FrameError::DataDigest { itt: Itt(9), .. }));
    assert!(err.can_continue());
    let mut f = f.clone();
    assert_eq!(f.decode(&mut rest), Ok(Some(nop_in())));
}

#[test]
fn peek_leaves_whole_pdus_and_other_opcodes_to_decode() {
    let mut stream = BytesMut::new();
    encode(&Pdu::DataIn(data_in(100)), Digests::NONE, &mut stream);
    let f = framer(Digests::NONE);
    assert!(f.peek_data_in(&stream).unwrap().is_none(), "whole PDU");
    assert!(
        f.peek_data_in(&stream[..47]).unwrap().is_none(),
        "short header"
    );
    assert!(f.peek_data_in(&stream[..48]).unwrap().is_some());
    let mut nop = BytesMut::new();
    encode(&nop_in(), Digests::NONE, &mut nop);
    assert!(f.peek_data_in(&nop[..20]).unwrap().is_none());
    assert!(f.peek_data_in(&[]).unwrap().is_none());
}

#[test]
fn peek_keeps_the_framers_bounds() {
    let mut stream = BytesMut::new();
    encode(&Pdu::DataIn(data_in(9000)), Digests::BOTH, &mut stream);
    let mut f = framer(Digests::BOTH);
    f.set_max_data_segment(8192);
    assert_eq!(
        f.peek_data_in(&stream[..60]).unwrap_err(),
        FrameError::SegmentTooLong {
            len: 9000,
            max: 8192
        }
    );
    f.set_max_data_segment(1 << 20);
    stream[10] ^= 1;
    assert!(matches!(
        f.peek_data_in(&stream[..60]),
        Err(FrameError::HeaderDigest { .. })
    ));
    // Before the header digest is in, nothing is believed.
    assert!(f.peek_data_in(&stream[..50]).unwrap().is_none());
}

proptest! {
    #[test]
    fn any_split_places_the_same_payload(
        len in 1usize..3000,
        first in 0usize..3100,
        piece in 1usize..700,
        digest in any::<bool>(),
    ) {
        let digests = Digests { header: digest, data: digest };
        let whole = data_in(len);
        let mut stream = BytesMut::new();
        encode(&Pdu::DataIn(whole.clone()), digests, &mut stream);
        let head = 48 + if digest { 4 } else { 0 };
        let total_data_end = head + len;
        let first = head + first.min(len - 1);
        prop_assume!(first < total_data_end);
        let (pdu, placed, result, rest) = receive(&framer(digests), &stream, first, piece);
        prop_assert_eq!(result, Ok(true));
        prop_assert!(rest.is_empty());
        prop_assert_eq!(DataIn { data: Bytes::from(placed), ..pdu }, whole);
    }
}
