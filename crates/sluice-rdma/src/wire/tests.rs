use super::*;
use proptest::prelude::*;

fn cause() -> impl Strategy<Value = TerminateCause> {
    prop_oneof![
        Just(TerminateCause::RemoteAccess),
        Just(TerminateCause::ReceiverNotReady),
        Just(TerminateCause::Length),
        Just(TerminateCause::InvalidRequest),
        Just(TerminateCause::RemoteOperation),
        Just(TerminateCause::Protocol),
    ]
}

pub(crate) fn message() -> impl Strategy<Value = Message> {
    let payload = proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from);
    prop_oneof![
        (any::<u8>(), any::<u16>(), 0..=MAX_PAYLOAD_BYTES).prop_map(
            |(version, ird, max_payload)| {
                Message::Connect {
                    version,
                    ird,
                    max_payload,
                }
            }
        ),
        (
            any::<u32>(),
            proptest::option::of(any::<u32>()),
            payload.clone()
        )
            .prop_map(|(msn, inv, payload)| Message::Send {
                msn,
                invalidate: inv.map(STag),
                payload
            }),
        (any::<u32>(), any::<u32>(), any::<u64>(), payload.clone()).prop_map(
            |(msn, stag, va, payload)| Message::Write {
                msn,
                stag: STag(stag),
                va,
                payload
            }
        ),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            0..=MAX_PAYLOAD_BYTES
        )
            .prop_map(|(msn, stag, va, len)| Message::ReadRequest {
                msn,
                stag: STag(stag),
                va,
                len
            }),
        (any::<u32>(), payload).prop_map(|(msn, payload)| Message::ReadResponse { msn, payload }),
        any::<u32>().prop_map(|msn| Message::Ack { msn }),
        (proptest::option::of(any::<u32>()), cause())
            .prop_map(|(msn, cause)| Message::Terminate { msn, cause }),
    ]
}

proptest! {
    #[test]
    fn decode_of_encode_is_identity(msgs in proptest::collection::vec(message(), 1..8), cut in any::<prop::sample::Index>()) {
        let mut stream = BytesMut::new();
        for m in &msgs {
            stream.extend_from_slice(&m.encode());
        }
        // Any split of the stream decodes to the same messages.
        let cut = cut.index(stream.len() + 1);
        let rest = stream.split_off(cut);
        let decoder = Decoder::new(MAX_PAYLOAD_BYTES);
        let mut buf = stream;
        let mut got = Vec::new();
        while let Some(m) = decoder.decode(&mut buf).expect("decodes") {
            got.push(m);
        }
        buf.extend_from_slice(&rest);
        while let Some(m) = decoder.decode(&mut buf).expect("decodes") {
            got.push(m);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, msgs);
    }
}

proptest! {
    /// The driver's path for large payloads: at any split of the stream, a frame whose
    /// payload has not all arrived leaves its header to `take_large_head`, the payload is
    /// read apart and `finish` makes the same message `decode` would have.
    #[test]
    fn a_payload_read_apart_decodes_the_same(msgs in proptest::collection::vec(message(), 1..8), cut in any::<prop::sample::Index>(), min in 0u32..48) {
        let mut stream = BytesMut::new();
        for m in &msgs {
            stream.extend_from_slice(&m.encode());
        }
        let cut = cut.index(stream.len() + 1);
        let mut rest = stream.split_off(cut);
        let decoder = Decoder::new(MAX_PAYLOAD_BYTES);
        let mut buf = stream;
        let mut got = Vec::new();
        while let Some(m) = decoder.decode(&mut buf).expect("decodes") {
            got.push(m);
        }
        if let Some(frame) = decoder.take_large_head(&mut buf, min).expect("judged") {
            prop_assert!(frame.payload_len() >= min);
            let len = frame.payload_len() as usize;
            let mut payload = buf.split().to_vec();
            prop_assert!(payload.len() < len, "only a frame still arriving is taken");
            let more = len - payload.len();
            payload.extend_from_slice(&rest.split_to(more));
            got.push(decoder.finish(frame, Bytes::from(payload)).expect("finishes"));
        }
        buf.extend_from_slice(&rest);
        while let Some(m) = decoder.decode(&mut buf).expect("decodes") {
            got.push(m);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(got, msgs);
    }
}

#[test]
fn a_payload_read_apart_must_have_the_length_its_header_gave() {
    let decoder = Decoder::new(MAX_PAYLOAD_BYTES);
    let m = Message::ReadResponse {
        msn: 3,
        payload: Bytes::from(vec![7; 100]),
    };
    let mut whole = m.encode();
    assert!(
        decoder
            .take_large_head(&mut whole.clone(), 1)
            .unwrap()
            .is_none(),
        "a frame all in the buffer is decode's"
    );
    let mut head = whole.split_to(FRAME_HEADER_LEN + 4 + 10);
    let frame = decoder
        .take_large_head(&mut head, 1)
        .unwrap()
        .expect("pending");
    assert!(matches!(
        decoder.finish(frame.clone(), Bytes::from(vec![7; 99])),
        Err(WireError::BadLength { .. })
    ));
    assert_eq!(decoder.finish(frame, Bytes::from(vec![7; 100])), Ok(m));
    // A bad header is refused here as in `decode`.
    let mut bad = BytesMut::from(&[0x09, 0, 0, 0, 0, 0, 0, 0][..]);
    assert_eq!(
        decoder.take_large_head(&mut bad, 1).map(|f| f.is_some()),
        Err(WireError::UnknownOpcode(9))
    );
}

#[test]
fn an_oversized_body_is_refused_from_its_header_alone() {
    let decoder = Decoder::new(1024);
    let mut buf = BytesMut::from(&[opcode::WRITE, 0, 0, 0, 0xff, 0xff, 0xff, 0xff][..]);
    assert_eq!(
        decoder.decode(&mut buf),
        Err(WireError::TooLong {
            len: 0xffff_ffff - 16,
            limit: 1024
        })
    );
    let mut buf = BytesMut::from(&[opcode::SEND, 0, 0, 0, 0, 0, 0x04, 0x05][..]);
    assert!(matches!(
        decoder.decode(&mut buf),
        Err(WireError::TooLong { .. })
    ));
}

#[test]
fn a_read_request_longer_than_the_limit_is_refused() {
    let m = Message::ReadRequest {
        msn: 1,
        stag: STag(5),
        va: 0,
        len: 4097,
    };
    assert!(matches!(
        Decoder::new(4096).decode(&mut m.encode()),
        Err(WireError::TooLong { len: 4097, .. })
    ));
}

#[test]
fn malformed_headers_are_refused() {
    let decoder = Decoder::new(MAX_PAYLOAD_BYTES);
    let cases: [(&[u8], WireError); 4] = [
        (&[0x09, 0, 0, 0, 0, 0, 0, 0], WireError::UnknownOpcode(9)),
        (&[opcode::ACK, 1, 0, 0, 0, 0, 0, 4], WireError::Reserved),
        (
            &[opcode::ACK, 0, 0, 0, 0, 0, 0, 5],
            WireError::BadLength {
                opcode: opcode::ACK,
                len: 5,
            },
        ),
        (
            &[opcode::WRITE, 0, 0, 0, 0, 0, 0, 15],
            WireError::BadLength {
                opcode: opcode::WRITE,
                len: 15,
            },
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(decoder.decode(&mut BytesMut::from(bytes)), Err(want));
    }
    let mut t = Message::Terminate {
        msn: None,
        cause: TerminateCause::Protocol,
    }
    .encode();
    t[13] = 99;
    assert_eq!(decoder.decode(&mut t), Err(WireError::UnknownCause(99)));
}
