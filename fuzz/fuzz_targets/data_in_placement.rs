#![no_main]
//! In-place Data-In receiving against the framer: arbitrary bytes, cut into arbitrary chunks.
//! Whenever a partial Data-In's header is in, its payload is received "in place" (into a Vec)
//! through `peek_data_in` and `SegmentReceiver`, and the outcome must equal what
//! `Framer::decode` gives once the same PDU is whole: the same Data-In, or the same data digest
//! error. The first byte chooses the digests and the segment limit, the second seeds the chunk
//! sizes. Nothing may panic.

use bytes::{Buf, Bytes, BytesMut};
use sluice_proto::framing::{Digests, Framer};
use sluice_proto::pdu::{DataIn, Pdu};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let [config, seed, stream @ ..] = input else {
        return;
    };
    let digests = Digests {
        header: config & 1 != 0,
        data: config & 2 != 0,
    };
    let mut framer = Framer::new(if config & 4 != 0 { 8192 } else { 512 });
    framer.set_digests(digests);

    let mut buf = BytesMut::new();
    let mut rng = u32::from(*seed) | 1;
    let mut rest = stream;
    let mut chunk = move || {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        (rng % 64 + 1) as usize
    };
    while !rest.is_empty() {
        let (head, tail) = rest.split_at(chunk().min(rest.len()));
        rest = tail;
        buf.extend_from_slice(head);
        loop {
            match framer.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Err(e) if e.can_continue() => continue,
                Err(_) => return,
                Ok(None) => {}
            }
            let partial = match framer.peek_data_in(&buf) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(_) => panic!("decode accepted a header that peek_data_in refuses"),
            };
            // The oracle: the same bytes, decoded whole once enough have arrived.
            let mut whole = buf.clone();
            whole.extend_from_slice(rest);
            let mut oracle = framer.clone();
            let expected = oracle.decode(&mut whole);

            let already = partial.data_in(&buf);
            let (header, mut rx) = partial.start(&mut buf);
            let mut placed = buf[..already].to_vec();
            assert_eq!(rx.handle_data(&buf[..already]), already);
            buf.advance(already);
            while rx.data_left() > 0 && !rest.is_empty() {
                let n = chunk().min(rx.data_left()).min(rest.len());
                placed.extend_from_slice(&rest[..n]);
                assert_eq!(rx.handle_data(&rest[..n]), n);
                rest = &rest[n..];
            }
            if rx.data_left() > 0 {
                // The stream ended inside the payload: decode must still be waiting too.
                assert_eq!(expected, Ok(None));
                return;
            }
            let got = loop {
                match rx.finish(&mut buf) {
                    Ok(false) if rest.is_empty() => {
                        assert_eq!(expected, Ok(None));
                        return;
                    }
                    Ok(false) => {
                        let (head, tail) = rest.split_at(chunk().min(rest.len()));
                        rest = tail;
                        buf.extend_from_slice(head);
                    }
                    Ok(true) => {
                        break Ok(Some(Pdu::DataIn(DataIn {
                            data: Bytes::from(placed),
                            ..header
                        })))
                    }
                    Err(e) => break Err(e),
                }
            };
            // Decode's Malformed errors come from parsing the data segment, which placement
            // skips; for Data-In there are none.
            assert_eq!(got, expected);
            assert_eq!(buf.len() + rest.len(), whole.len());
        }
    }
});
