#![no_main]
//! Feeds an arbitrary byte stream to the software RDMA provider: first to its frame decoder
//! (whatever decodes must re-encode to the same message), then to a whole endpoint with a
//! registered region and a posted receive, as a hostile peer would. Nothing may panic, no
//! access may leave a region, and memory stays bounded by the payload limit.

use bytes::{Bytes, BytesMut};
use sluice_rdma::wire::Decoder;
use sluice_rdma::{Access, Endpoint, QpConfig, RecvWr, Sge, VaMode};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let Some((&limit, stream)) = input.split_first() else {
        return;
    };
    let max_payload = u32::from(limit) * 64;

    let decoder = Decoder::new(max_payload);
    let mut buf = BytesMut::from(stream);
    while let Ok(Some(message)) = decoder.decode(&mut buf) {
        let again = decoder
            .decode(&mut message.encode())
            .expect("an encoded message decodes")
            .expect("whole");
        assert_eq!(again, message);
    }

    // In two pieces, so that the decoder's partial-frame path runs too.
    let mut endpoint = endpoint_with_region(max_payload);
    let cut = stream.len() / 2;
    let mut buf = BytesMut::new();
    for piece in [&stream[..cut], &stream[cut..]] {
        buf.extend_from_slice(piece);
        endpoint.handle_bytes(&mut buf);
        drain(&mut endpoint);
    }

    // As the driver reads it: in small pieces, a large payload that has not all arrived
    // read apart from the buffer, straight from the stream.
    let mut endpoint = endpoint_with_region(max_payload);
    let mut buf = BytesMut::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let (piece, after) = rest.split_at(rest.len().min(97));
        rest = after;
        buf.extend_from_slice(piece);
        if let Some(frame) = endpoint.handle_bytes_until_large(&mut buf, 32) {
            let len = frame.payload_len() as usize;
            let have = buf.len().min(len);
            let mut payload = buf.split_to(have).to_vec();
            let (more, after) = rest.split_at((len - have).min(rest.len()));
            rest = after;
            payload.extend_from_slice(more);
            if payload.len() < len {
                break;
            }
            endpoint.handle_payload(frame, Bytes::from(payload));
        }
        drain(&mut endpoint);
    }
});

/// An endpoint with a registered region and a posted receive.
fn endpoint_with_region(max_payload: u32) -> Endpoint {
    let mut endpoint = Endpoint::new(QpConfig {
        ird: 2,
        max_payload,
        ..QpConfig::default()
    });
    let region = endpoint
        .register(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
            VaMode::Based(0x1000),
        )
        .expect("register");
    let _ = endpoint.post_recv(RecvWr {
        wr_id: 1,
        sge: Sge {
            stag: region.stag,
            va: 0x1000,
            len: 256,
        },
    });
    endpoint
}

fn drain(endpoint: &mut Endpoint) {
    while endpoint.poll_transmit().is_some() {}
    while endpoint.poll_completion().is_some() {}
}
