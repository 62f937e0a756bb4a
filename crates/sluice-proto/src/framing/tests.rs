//! Framer tests: digests, every error, bounded buffering, any split of the stream.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::pdu::arbitrary;
use crate::pdu::types::*;
use crate::seq::{Lun, SeqNum, Ttt};

fn nop_out(data: &'static [u8]) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(7),
        ttt: Ttt::RESERVED,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(2),
        data: Bytes::from_static(data),
    })
}

fn wire(pdus: &[Pdu], digests: Digests) -> BytesMut {
    let mut out = BytesMut::new();
    for pdu in pdus {
        encode(pdu, digests, &mut out);
    }
    out
}

fn framer(digests: Digests) -> Framer {
    let mut framer = Framer::new(LOGIN_MAX_DATA_SEGMENT);
    framer.set_digests(digests);
    framer
}

#[test]
fn digest_goes_on_the_wire_least_significant_byte_first() {
    // RFC 3720 appendix B.4: 32 bytes of zeros give CRC32C 0x8a9136aa.
    assert_eq!(crc32c(&[0u8; 32]), [0xaa, 0x36, 0x91, 0x8a]);
}

#[test]
fn layout_with_both_digests() {
    let mut buf = wire(&[nop_out(b"hello")], Digests::BOTH);
    // 48 BHS + 4 HD + 5 data + 3 pad + 4 DD.
    assert_eq!(buf.len(), 64);
    assert_eq!(&buf[48..52], &crc32c(&buf[..48]));
    assert_eq!(&buf[57..60], &[0, 0, 0]);
    assert_eq!(&buf[60..64], &crc32c(b"hello\0\0\0"));
    let pdu = framer(Digests::BOTH).decode(&mut buf);
    assert_eq!(pdu, Ok(Some(nop_out(b"hello"))));
    assert!(buf.is_empty());
}

#[test]
fn no_data_digest_without_data() {
    assert_eq!(wire(&[nop_out(b"")], Digests::BOTH).len(), 52);
}

#[test]
fn encode_parts_matches_encode() {
    let pdu = nop_out(b"abcdef");
    let mut head = BytesMut::new();
    let (data, trailer) = encode_parts(&pdu, Digests::BOTH, &mut head);
    assert_eq!(data, Bytes::from_static(b"abcdef"));
    assert_eq!(trailer.as_bytes().len(), 2 + 4);
    let mut joined = head.to_vec();
    joined.extend_from_slice(&data);
    joined.extend_from_slice(trailer.as_ref());
    assert_eq!(joined, wire(&[pdu], Digests::BOTH).to_vec());
}

#[test]
fn bytes_needed_counts_down_to_zero() {
    let full = wire(&[nop_out(b"hello")], Digests::BOTH);
    let framer = framer(Digests::BOTH);
    let mut buf = BytesMut::new();
    assert_eq!(framer.bytes_needed(&buf), 48);
    buf.extend_from_slice(&full[..50]);
    assert_eq!(framer.bytes_needed(&buf), 2);
    buf.extend_from_slice(&full[50..52]);
    assert_eq!(framer.bytes_needed(&buf), 12);
    buf.extend_from_slice(&full[52..]);
    assert_eq!(framer.bytes_needed(&buf), 0);
}

/// Three PDUs whose second has a corrupted DataSegmentLength: its own length field points
/// into the third.
fn stream_with_a_damaged_length() -> (BytesMut, usize, usize) {
    let pdus = [
        nop_out(b"first"),
        nop_out(&[0x5a; 700]),
        nop_out(b"third PDU"),
    ];
    let mut buf = wire(&pdus, Digests::BOTH);
    let first = wire(&pdus[..1], Digests::BOTH).len();
    let second = wire(&pdus[1..2], Digests::BOTH).len();
    // DataSegmentLength is bytes 5..8 of the BHS: 700 becomes 700 + 64.
    buf[first + 7] ^= 0x40;
    (buf, first, second)
}

fn resyncing() -> Framer {
    let mut f = framer(Digests::BOTH);
    f.set_header_resync(Some(Role::Target));
    f
}

#[test]
fn resync_skips_to_the_next_header_that_verifies_whatever_the_damaged_length_says() {
    let (mut buf, first, second) = stream_with_a_damaged_length();
    let mut f = resyncing();
    assert_eq!(f.decode(&mut buf), Ok(Some(nop_out(b"first"))));
    assert_eq!(buf.len(), buf.len());
    let err = f.decode(&mut buf).unwrap_err();
    assert_eq!(err, FrameError::HeaderDigestSkipped { skipped: second });
    assert!(err.can_continue());
    assert_eq!(
        err.reject(),
        None,
        "nothing of it can be believed: no Reject"
    );
    assert_eq!(f.decode(&mut buf), Ok(Some(nop_out(b"third PDU"))));
    assert!(buf.is_empty());
    let _ = first;
}

#[test]
fn resync_frames_the_same_whatever_the_reads() {
    let (whole, _, second) = stream_with_a_damaged_length();
    for step in [1, 3, 52, 100, 777] {
        let mut f = resyncing();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in whole.chunks(step) {
            buf.extend_from_slice(chunk);
            loop {
                match f.decode(&mut buf) {
                    Ok(Some(p)) => got.push(Ok(p)),
                    Ok(None) => break,
                    Err(e) => got.push(Err(e)),
                }
            }
        }
        assert_eq!(
            got,
            [
                Ok(nop_out(b"first")),
                Err(FrameError::HeaderDigestSkipped { skipped: second }),
                Ok(nop_out(b"third PDU")),
            ],
            "reads of {step} bytes"
        );
    }
}

#[test]
fn resync_passes_over_the_rejected_header_inside_a_damaged_reject() {
    // A Reject's data is the rejected PDU's BHS and its data digest is that header's own
    // digest: a perfect header of the receiver's role, which must not be taken for the next
    // PDU.
    let rejected = wire(&[nop_out(b"")], Digests::NONE).freeze();
    let reject = Pdu::Reject(Reject {
        reason: crate::pdu::codes::RejectReason::DataDigestError,
        stat_sn: SeqNum(5),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(9),
        data_sn: 0,
        data: rejected,
    });
    let nop_in = Pdu::NopIn(NopIn {
        lun: Lun(0),
        itt: Itt(3),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum(6),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(9),
        data: Bytes::new(),
    });
    let mut buf = wire(&[reject.clone(), nop_in.clone()], Digests::BOTH);
    let reject_len = wire(&[reject], Digests::BOTH).len();
    buf[6] ^= 0x01; // DataSegmentLength 48 -> 304
    let mut f = framer(Digests::BOTH);
    f.set_header_resync(Some(Role::Initiator));
    assert_eq!(
        f.decode(&mut buf),
        Err(FrameError::HeaderDigestSkipped {
            skipped: reject_len
        })
    );
    assert_eq!(f.decode(&mut buf), Ok(Some(nop_in)));
}

#[test]
fn resync_gives_up_when_no_header_verifies_within_the_largest_pdu() {
    let mut f = Framer::new(512);
    f.set_digests(Digests::BOTH);
    f.set_header_resync(Some(Role::Target));
    let mut buf = wire(&[nop_out(b"x")], Digests::BOTH);
    buf[20] ^= 1;
    buf.extend_from_slice(&[0u8; 2048]);
    let before = buf.clone();
    let err = f.decode(&mut buf).unwrap_err();
    assert!(matches!(err, FrameError::HeaderDigest { .. }), "{err:?}");
    assert_eq!(buf, before, "nothing consumed");
    // Too few bytes to tell yet: waiting, not failing.
    let mut f = Framer::new(512);
    f.set_digests(Digests::BOTH);
    f.set_header_resync(Some(Role::Target));
    let mut short = before.clone();
    short.truncate(300);
    assert_eq!(f.decode(&mut short), Ok(None));
    assert!(f.bytes_needed(&short) > 0);
}

#[test]
fn corrupt_header_digest_is_fatal_and_consumes_nothing() {
    let mut buf = wire(&[nop_out(b"hello")], Digests::BOTH);
    buf[20] ^= 1;
    let before = buf.clone();
    let err = framer(Digests::BOTH).decode(&mut buf).expect_err("corrupt");
    assert!(matches!(err, FrameError::HeaderDigest { .. }), "{err:?}");
    assert!(!err.can_continue());
    assert_eq!(err.reject(), None);
    assert_eq!(buf, before);
}

#[test]
fn corrupt_data_digest_is_rejected_and_the_stream_goes_on() {
    let mut buf = wire(&[nop_out(b"hello"), nop_out(b"next")], Digests::BOTH);
    buf[53] ^= 0x40;
    let mut framer = framer(Digests::BOTH);
    let err = framer.decode(&mut buf).expect_err("corrupt data");
    let FrameError::DataDigest {
        opcode,
        itt,
        header,
    } = &err
    else {
        panic!("wrong error {err:?}");
    };
    assert_eq!((*opcode, *itt), (crate::pdu::opcode::NOP_OUT, Itt(7)));
    assert!(err.can_continue());
    assert_eq!(err.reject(), Some((RejectReason::DataDigestError, header)));
    assert_eq!(framer.decode(&mut buf), Ok(Some(nop_out(b"next"))));
}

#[test]
fn oversize_segment_is_refused_from_the_header_alone() {
    let mut header = wire(&[nop_out(b"")], Digests::NONE);
    header[5..8].copy_from_slice(&[0x00, 0x20, 0x01]); // 8193 bytes announced
    let mut framer = Framer::new(LOGIN_MAX_DATA_SEGMENT);
    let err = framer.decode(&mut header).expect_err("too long");
    assert_eq!(
        err,
        FrameError::SegmentTooLong {
            len: 8193,
            max: 8192
        }
    );
    assert!(!err.can_continue());
    assert_eq!(framer.bytes_needed(&header), 0);
    framer.set_max_data_segment(8193);
    assert_eq!(framer.decode(&mut header), Ok(None));
}

#[test]
fn oversize_segment_with_header_digest_is_refused_after_52_bytes() {
    let mut pdu = nop_out(b"");
    if let Pdu::NopOut(p) = &mut pdu {
        p.data = Bytes::from(vec![0; 9000]);
    }
    let full = wire(&[pdu], Digests::BOTH);
    let mut buf = BytesMut::from(&full[..52]);
    let err = framer(Digests::BOTH)
        .decode(&mut buf)
        .expect_err("too long");
    assert_eq!(
        err,
        FrameError::SegmentTooLong {
            len: 9000,
            max: 8192
        }
    );
    assert_eq!(max_frame_len(8192, Digests::BOTH), 48 + 1020 + 4 + 8192 + 4);
}

#[test]
fn unknown_opcode_is_consumed_and_rejected() {
    let mut buf = wire(&[nop_out(b"abc"), nop_out(b"ok")], Digests::BOTH);
    buf[0] = 0x1c; // not an opcode
    let digest = crc32c(&buf[..48]);
    buf[48..52].copy_from_slice(&digest);
    let mut framer = framer(Digests::BOTH);
    let err = framer.decode(&mut buf).expect_err("unknown opcode");
    assert!(
        matches!(err, FrameError::UnknownOpcode { opcode: 0x1c, .. }),
        "{err:?}"
    );
    assert!(err.can_continue());
    assert_eq!(
        err.reject().map(|(r, _)| r),
        Some(RejectReason::CommandNotSupported)
    );
    assert_eq!(framer.decode(&mut buf), Ok(Some(nop_out(b"ok"))));
}

#[test]
fn malformed_ahs_is_consumed_and_rejected_as_protocol_error() {
    let mut buf = BytesMut::new();
    let mut header = [0u8; BHS_LEN];
    header[0] = crate::pdu::opcode::SCSI_COMMAND;
    header[4] = 1;
    buf.extend_from_slice(&header);
    buf.extend_from_slice(&[0x00, 0x01, 0x3b, 0x00]); // AHS type 0x3b: unsupported
    buf.extend_from_slice(&wire(&[nop_out(b"")], Digests::NONE));
    let mut framer = Framer::new(LOGIN_MAX_DATA_SEGMENT);
    let err = framer.decode(&mut buf).expect_err("malformed");
    assert!(matches!(err, FrameError::Malformed { .. }), "{err:?}");
    assert_eq!(
        err.reject().map(|(r, _)| r),
        Some(RejectReason::ProtocolError)
    );
    assert_eq!(framer.decode(&mut buf), Ok(Some(nop_out(b""))));
}

/// Feeds `stream` to a framer in pieces cut at `cuts` and collects what comes out.
fn decode_split(stream: &[u8], cuts: &[usize], digests: Digests) -> Vec<Pdu> {
    let mut framer = framer(digests);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    points.push(stream.len());
    points.sort_unstable();
    let mut from = 0;
    for to in points {
        buf.extend_from_slice(&stream[from..to]);
        from = to;
        while let Some(pdu) = framer.decode(&mut buf).expect("valid stream") {
            out.push(pdu);
        }
        assert!(buf.len() < max_frame_len(framer.max_data_segment(), digests));
    }
    assert!(buf.is_empty());
    out
}

proptest! {
    #[test]
    fn any_split_yields_the_same_pdus(
        pdus in proptest::collection::vec(arbitrary::pdu(), 1..6),
        header in any::<bool>(),
        data in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let digests = Digests { header, data };
        let stream = wire(&pdus, digests);
        prop_assert_eq!(decode_split(&stream, &cuts, digests), pdus);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        header in any::<bool>(),
        data in any::<bool>(),
    ) {
        let mut framer = Framer::new(256);
        framer.set_digests(Digests { header, data });
        let mut buf = BytesMut::from(&bytes[..]);
        loop {
            let _ = framer.bytes_needed(&buf);
            match framer.decode(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) if e.can_continue() => {}
                Err(_) => break,
            }
        }
        prop_assert!(buf.len() <= bytes.len());
    }
}

/// The chunks written back to back are the PDUs' encodings, and every data segment of at
/// least the threshold is a chunk of its own, the very `Bytes` the PDU holds.
#[test]
fn encode_chunks_matches_encode_and_keeps_long_segments_whole() {
    static LONG: [u8; 64] = [0x5a; 64];
    let pdus = vec![
        nop_out(b"abc"),
        nop_out(&LONG),
        nop_out(b""),
        nop_out(&LONG[..61]),
    ];
    for digests in [
        Digests::NONE,
        Digests {
            header: true,
            data: true,
        },
    ] {
        let mut out = BytesMut::new();
        let chunks = encode_chunks(pdus.clone(), digests, 61, &mut out);
        assert_eq!(chunks.concat(), wire(&pdus, digests).to_vec());
        let whole: Vec<_> = chunks
            .iter()
            .filter(|c| c.as_ptr() == LONG.as_ptr())
            .map(Bytes::len)
            .collect();
        assert_eq!(whole, [64, 61], "long segments go as their own Bytes");
        assert!(chunks.iter().all(|c| !c.is_empty()));
    }
}
