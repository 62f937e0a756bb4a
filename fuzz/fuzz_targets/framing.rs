#![no_main]
//! Feeds arbitrary bytes, cut into arbitrary chunks, through a Framer. The first byte chooses the
//! digests, the data segment limit and header resynchronisation (off, or as either role), the
//! second seeds the chunk sizes. Nothing may panic, the buffer never grows past one maximal
//! frame (plus, while resynchronising, the header looked for past it), and every PDU decoded
//! re-encodes and re-decodes to itself.

use bytes::BytesMut;
use sluice_proto::framing::{encode, max_frame_len, Digests, Framer};
use sluice_proto::pdu::BHS_LEN;
use sluice_proto::text::Role;

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let [config, seed, stream @ ..] = input else {
        return;
    };
    let digests = Digests {
        header: config & 1 != 0,
        data: config & 2 != 0,
    };
    let max_data_segment = if config & 4 != 0 { 8192 } else { 512 };
    let mut framer = Framer::new(max_data_segment);
    framer.set_digests(digests);
    let resync = match (config >> 3) & 3 {
        1 => Some(Role::Initiator),
        2 => Some(Role::Target),
        _ => None,
    };
    framer.set_header_resync(resync);
    // A candidate header found by resynchronisation starts within one maximal frame, and its
    // BHS, AHS (at most 1020 bytes) and digest must be in before it can be checked.
    let bound = max_frame_len(max_data_segment, digests)
        + if resync.is_some() {
            BHS_LEN + 1020 + 4
        } else {
            0
        };

    let mut buf = BytesMut::new();
    let mut rng = u32::from(*seed) | 1;
    let mut rest = stream;
    while !rest.is_empty() {
        // xorshift: chunk sizes 1..=64.
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        let take = (rng % 64 + 1) as usize;
        let (chunk, tail) = rest.split_at(take.min(rest.len()));
        rest = tail;
        buf.extend_from_slice(chunk);
        loop {
            let needed = framer.bytes_needed(&buf);
            match framer.decode(&mut buf) {
                Ok(Some(pdu)) => {
                    let mut again = BytesMut::new();
                    encode(&pdu, digests, &mut again);
                    let mut check = framer.clone();
                    assert_eq!(check.decode(&mut again), Ok(Some(pdu)));
                    assert!(again.is_empty());
                }
                Ok(None) => {
                    assert!(needed > 0);
                    break;
                }
                Err(e) if e.can_continue() => {}
                Err(_) => {
                    // Fatal: a real connection closes here; start a fresh one.
                    buf.clear();
                    break;
                }
            }
        }
        assert!(
            buf.len() < bound,
            "{} bytes buffered, bound {bound}",
            buf.len()
        );
    }
});
