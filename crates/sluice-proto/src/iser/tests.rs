use proptest::prelude::*;

use super::*;

fn advert() -> impl Strategy<Value = Option<BufferAdvertisement>> {
    proptest::option::of(
        (any::<u32>(), any::<u64>())
            .prop_map(|(stag, base_offset)| BufferAdvertisement { stag, base_offset }),
    )
}

fn message() -> impl Strategy<Value = IserMessage> {
    prop_oneof![
        (advert(), advert())
            .prop_map(|(write, read)| IserMessage::Control(IserHeader { write, read })),
        (0u8..16, 0u8..16, any::<u16>()).prop_map(|(a, b, ird)| IserMessage::Hello(Hello {
            max_version: a.max(b),
            min_version: a.min(b),
            ird
        })),
        (any::<bool>(), 0u8..16, 0u8..16, any::<u16>()).prop_map(|(reject, a, b, ord)| {
            IserMessage::HelloReply(HelloReply {
                reject,
                max_version: a.max(b),
                current_version: a.min(b),
                ord,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn parse_of_emit_is_identity(m in message(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut wire = m.emit().to_vec();
        wire.extend_from_slice(&tail);
        let (parsed, rest) = IserMessage::parse(&wire).expect("emitted header parses");
        prop_assert_eq!(parsed, m);
        prop_assert_eq!(rest, &tail[..]);
    }

    #[test]
    fn cm_parse_of_emit_is_identity(z in any::<bool>(), s in any::<bool>()) {
        let h = IserCmHeader { zbva_not_supported: z, send_with_invalidate_not_supported: s };
        let mut private_data = h.emit().to_vec();
        private_data.resize(56, 0);
        let (parsed, rest) = IserCmHeader::parse(&private_data).expect("parses");
        prop_assert_eq!(parsed, h);
        prop_assert_eq!(rest.len(), 52);
    }

    /// The reply never promises more reads than the initiator serves, and either names a
    /// version inside both ranges or rejects exactly when the ranges do not overlap.
    #[test]
    fn hello_reply_respects_both_sides(
        (imin, imax) in (0u8..16, 0u8..16).prop_map(|(a, b)| (a.min(b), a.max(b))),
        (tmin, tmax) in (0u8..16, 0u8..16).prop_map(|(a, b)| (a.min(b), a.max(b))),
        ird in any::<u16>(),
        ord in any::<u16>(),
    ) {
        let hello = Hello { max_version: imax, min_version: imin, ird };
        let reply = hello.reply(tmin, tmax, ord);
        prop_assert!(reply.ord <= ird && reply.ord <= ord);
        let overlap = imin.max(tmin) <= imax.min(tmax);
        prop_assert_eq!(reply.reject, !overlap);
        if overlap {
            let v = reply.current_version;
            prop_assert!((imin..=imax).contains(&v) && (tmin..=tmax).contains(&v));
            prop_assert_eq!(v, imax.min(tmax));
        }
        let wire = IserMessage::HelloReply(reply).emit();
        prop_assert_eq!(IserMessage::parse(&wire).map(|(m, _)| m), Ok(IserMessage::HelloReply(reply)));
    }

    /// Whatever parses re-emits to the same bytes, up to reserved fields.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok((m, _)) = IserMessage::parse(&bytes) {
            let again = IserMessage::parse(&m.emit()).expect("re-parses").0;
            prop_assert_eq!(again, m);
        }
    }
}

/// A control-type header as Linux's iser initiator sends it for a READ: RSV set, the read
/// buffer's STag and address, Write fields zero.
#[test]
fn a_read_command_header_has_rsv_and_the_read_buffer() {
    let header = IserMessage::Control(IserHeader {
        write: None,
        read: Some(BufferAdvertisement {
            stag: 0x0001_2345,
            base_offset: 0x0000_7f12_3456_7000,
        }),
    });
    let want: [u8; ISER_HEADER_LEN] = [
        0x14, 0, 0, 0, // opcode 1, RSV
        0, 0, 0, 0, // Write STag
        0, 0, 0, 0, 0, 0, 0, 0, // Write Base Offset
        0x00, 0x01, 0x23, 0x45, // Read STag
        0x00, 0x00, 0x7f, 0x12, 0x34, 0x56, 0x70, 0x00, // Read Base Offset
    ];
    assert_eq!(header.emit(), want);
    assert_eq!(IserMessage::parse(&want), Ok((header, &[][..])));
}

#[test]
fn a_write_command_header_has_wsv_and_fields_without_their_flag_are_ignored() {
    let mut wire = [0u8; ISER_HEADER_LEN];
    wire[0] = 0x18; // opcode 1, WSV
    wire[4..8].copy_from_slice(&7u32.to_be_bytes());
    wire[8..16].copy_from_slice(&0x1000u64.to_be_bytes());
    wire[16..20].copy_from_slice(&9u32.to_be_bytes()); // RSV clear: ignored
    wire[1] = 0xff; // reserved: ignored
    let (m, _) = IserMessage::parse(&wire).expect("parses");
    assert_eq!(
        m,
        IserMessage::Control(IserHeader {
            write: Some(BufferAdvertisement {
                stag: 7,
                base_offset: 0x1000
            }),
            read: None,
        })
    );
}

#[test]
fn hello_and_hello_reply_carry_versions_and_read_depths() {
    let hello = Hello {
        max_version: ISER_VERSION,
        min_version: ISER_VERSION,
        ird: 16,
    };
    let wire = IserMessage::Hello(hello).emit();
    assert_eq!(&wire[..4], &[0x20, 0xaa, 0x00, 0x10]);
    assert!(wire[4..].iter().all(|&b| b == 0));
    let reply = hello.reply(ISER_VERSION, ISER_VERSION, 64);
    assert_eq!(
        reply,
        HelloReply {
            reject: false,
            max_version: ISER_VERSION,
            current_version: ISER_VERSION,
            ord: 16
        }
    );
    assert_eq!(
        &IserMessage::HelloReply(reply).emit()[..4],
        &[0x30, 0xaa, 0x00, 0x10]
    );
}

#[test]
fn a_hello_without_a_common_version_is_rejected() {
    let hello = Hello {
        max_version: 9,
        min_version: 1,
        ird: 4,
    };
    let reply = hello.reply(10, 12, 8);
    assert!(reply.reject);
    assert_eq!(IserMessage::HelloReply(reply).emit()[0], 0x31);
}

#[test]
fn malformed_headers_are_refused() {
    assert_eq!(
        IserMessage::parse(&[0x10; 27]),
        Err(IserError::Truncated { len: 27, need: 28 })
    );
    let mut wire = [0u8; ISER_HEADER_LEN];
    wire[0] = 0x40;
    assert_eq!(IserMessage::parse(&wire), Err(IserError::UnknownOpcode(4)));
    wire[0] = 0x20;
    wire[1] = 0x9a; // max 9, min 10
    assert_eq!(
        IserMessage::parse(&wire),
        Err(IserError::VersionRange { low: 10, max: 9 })
    );
    assert_eq!(
        IserCmHeader::parse(&[0x80, 0, 0]),
        Err(IserError::Truncated { len: 3, need: 4 })
    );
}

#[test]
fn cm_flags_are_the_high_bits_and_a_reply_uses_only_what_both_support() {
    let request = IserCmHeader {
        zbva_not_supported: true,
        send_with_invalidate_not_supported: false,
    };
    assert_eq!(request.emit(), [0x80, 0, 0, 0]);
    let (h, _) = IserCmHeader::parse(&[0x40, 0xff, 0xff, 0xff]).expect("parses");
    assert_eq!(
        h,
        IserCmHeader {
            zbva_not_supported: false,
            send_with_invalidate_not_supported: true
        }
    );
    assert_eq!(
        IserCmHeader::reply_to(&request, &h),
        IserCmHeader {
            zbva_not_supported: true,
            send_with_invalidate_not_supported: true
        }
    );
    assert_eq!(
        IserCmHeader::parse(&[0; 4]).expect("parses").0,
        IserCmHeader::default()
    );
}
