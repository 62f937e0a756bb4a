#![no_main]
//! Feeds arbitrary datagrams to the UDP transport's reassembler (each datagram a one-byte
//! length then that many bytes, the clock advanced by the byte after it). Nothing may panic,
//! the partial PDUs held stay within the limits, and every PDU delivered respects the length
//! bound. The input is also segmented and reassembled whole, which must give it back.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_proto::datagram::{Reassembler, ReassemblyLimits, Segmenter, MIN_DATAGRAM_LEN};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let limits = ReassemblyLimits {
        max_pdu_len: 4096,
        max_partial: 8,
        max_buffered_bytes: 16 * 1024,
        partial_timeout: Duration::from_millis(50),
    };
    let mut r = Reassembler::new(limits);
    let mut now = Instant::now();
    let mut rest = input;
    while let Some((&len, tail)) = rest.split_first() {
        let take = usize::from(len).min(tail.len());
        let (datagram, tail) = tail.split_at(take);
        if let Ok(Some(pdu)) = r.push(datagram, now) {
            assert!(!pdu.is_empty() && pdu.len() <= limits.max_pdu_len);
        }
        assert!(r.buffered_bytes() <= limits.max_buffered_bytes);
        assert!(r.partial_count() <= limits.max_partial);
        let Some((&tick, tail)) = tail.split_first() else {
            break;
        };
        now += Duration::from_millis(u64::from(tick));
        rest = tail;
    }

    if input.is_empty() {
        return;
    }
    let mut seg = Segmenter::new(MIN_DATAGRAM_LEN, u32::from(input[0]));
    let mut whole = Reassembler::new(ReassemblyLimits::default());
    let mut got = None;
    for s in seg.segment(input).expect("a non-empty input segments") {
        let mut d = BytesMut::new();
        s.write_to(&mut d);
        assert!(got.is_none());
        got = whole.push(&d, now).expect("own datagrams are well formed");
    }
    assert_eq!(got.as_deref(), Some(input));
});
