//! Cutter tests: layouts with and without digests, the length bound, and any split of a
//! stream of arbitrary PDUs cutting to the same frames the encoder produced.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use sluice_proto::framing::{encode, Digests};
use sluice_proto::pdu::{arbitrary, NopOut, Pdu};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};

use super::*;

fn nop_out(data: &[u8]) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun(0),
        itt: Itt(7),
        ttt: Ttt::RESERVED,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(2),
        data: Bytes::copy_from_slice(data),
    })
}

fn frame(pdu: &Pdu, digests: Digests) -> BytesMut {
    let mut out = BytesMut::new();
    encode(pdu, digests, &mut out);
    out
}

#[test]
fn layouts_follow_the_digests() {
    for (digests, total) in [
        (Digests::NONE, 48 + 5 + 3),
        (Digests::BOTH, 48 + 4 + 5 + 3 + 4),
        (
            Digests {
                header: true,
                data: false,
            },
            48 + 4 + 5 + 3,
        ),
    ] {
        let f = frame(&nop_out(b"hello"), digests);
        let layout = FrameCutter::default().layout(&f, digests).unwrap().unwrap();
        assert_eq!(layout.total, total);
        assert_eq!(f.len(), total);
        assert_eq!(&f[layout.data_range()], b"hello");
        assert_eq!(layout.header_range(), 0..48);
    }
    // No data digest on an empty data segment (RFC 7143 section 11.1).
    let f = frame(&nop_out(b""), Digests::BOTH);
    assert_eq!(f.len(), 52);
    let layout = FrameCutter::default()
        .layout(&f, Digests::BOTH)
        .unwrap()
        .unwrap();
    assert_eq!(layout.total, 52);
}

#[test]
fn cut_waits_for_a_whole_frame_and_counts_down() {
    let whole = frame(&nop_out(b"hello"), Digests::BOTH);
    let cutter = FrameCutter::default();
    let mut buf = BytesMut::new();
    assert_eq!(cutter.bytes_needed(&buf, Digests::BOTH), 48);
    buf.extend_from_slice(&whole[..50]);
    assert_eq!(cutter.bytes_needed(&buf, Digests::BOTH), whole.len() - 50);
    assert_eq!(cutter.cut(&mut buf, Digests::BOTH), Ok(None));
    buf.extend_from_slice(&whole[50..]);
    assert_eq!(cutter.bytes_needed(&buf, Digests::BOTH), 0);
    assert_eq!(cutter.cut(&mut buf, Digests::BOTH), Ok(Some(whole)));
    assert!(buf.is_empty());
}

#[test]
fn an_oversized_segment_is_refused_before_its_data_is_waited_for() {
    let cutter = FrameCutter::new(8192);
    let mut buf = frame(&nop_out(&[1; 8193]), Digests::NONE);
    buf.truncate(48);
    let before = buf.clone();
    assert_eq!(
        cutter.cut(&mut buf, Digests::NONE),
        Err(CutError::SegmentTooLong {
            len: 8193,
            max: 8192
        })
    );
    assert_eq!(buf, before, "nothing consumed");
    assert_eq!(cutter.bytes_needed(&buf, Digests::NONE), 0);
    // The limit can never exceed what the 24-bit field holds.
    assert_eq!(FrameCutter::new(u32::MAX), FrameCutter::default());
    assert!(cutter.max_frame_len(Digests::BOTH) < 8192 + 1100);
}

#[test]
fn nothing_beyond_the_lengths_is_checked() {
    // A damaged digest, an unknown opcode: cut all the same.
    let mut f = frame(&nop_out(b"data"), Digests::BOTH);
    f[0] = 0x1a;
    let last = f.len() - 1;
    f[last] ^= 0xff;
    let mut buf = f.clone();
    assert_eq!(
        FrameCutter::default().cut(&mut buf, Digests::BOTH),
        Ok(Some(f))
    );
}

fn digests() -> impl Strategy<Value = Digests> {
    (any::<bool>(), any::<bool>()).prop_map(|(header, data)| Digests { header, data })
}

proptest! {
    #[test]
    fn any_split_cuts_the_same_frames(
        pdus in proptest::collection::vec(arbitrary::pdu(), 1..8),
        digests in digests(),
        cuts in proptest::collection::vec(1usize..200, 0..40),
    ) {
        let frames: Vec<BytesMut> = pdus.iter().map(|p| frame(p, digests)).collect();
        let stream: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        let cutter = FrameCutter::default();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut at = 0;
        let mut sizes = cuts.into_iter().chain(std::iter::repeat(64));
        while at < stream.len() {
            let n = sizes.next().unwrap_or(64).min(stream.len() - at);
            buf.extend_from_slice(&stream[at..at + n]);
            at += n;
            while let Some(f) = cutter.cut(&mut buf, digests).unwrap() {
                got.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, frames);
    }
}
