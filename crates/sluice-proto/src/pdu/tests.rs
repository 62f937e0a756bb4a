//! Byte-for-byte vectors and round-trip properties for parse and emit.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::arbitrary;
use super::codes::RejectReason;
use super::*;
use crate::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};

/// Emits `pdu` and returns the header bytes (BHS + AHS).
fn header_of(pdu: &Pdu) -> Vec<u8> {
    let mut out = BytesMut::new();
    pdu.emit_header(&mut out);
    out.to_vec()
}

/// Parses a header produced by `emit_header` plus its data.
fn reparse(header: &[u8], data: Bytes) -> Result<Pdu, ParseError> {
    let (bhs, ahs) = header.split_at(BHS_LEN);
    let bhs: &[u8; BHS_LEN] = bhs.try_into().expect("48 bytes");
    Pdu::parse(bhs, ahs, data)
}

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).expect("ascii"), 16).expect("hex"))
        .collect()
}

#[test]
fn login_request_vector() {
    let data = Bytes::from_static(b"SessionType=Normal\0");
    let pdu = Pdu::LoginRequest(LoginRequest {
        transit: true,
        cont: false,
        csg: Stage::Operational.code(),
        nsg: Stage::FullFeature.code(),
        version_max: 0,
        version_min: 0,
        isid: Isid([0x80, 0x12, 0x34, 0x56, 0x78, 0x9a]),
        tsih: Tsih(0),
        itt: Itt(1),
        cid: 1,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(0),
        data: data.clone(),
    });
    let wire = hex(
        "43 87 00 00  00 000013  80123456 789a 0000  00000001  0001 0000
                    00000001  00000000  00000000 00000000 00000000 00000000",
    );
    assert_eq!(header_of(&pdu), wire);
    assert_eq!(reparse(&wire, data), Ok(pdu));
}

#[test]
fn scsi_read10_vector() {
    let cdb = hex("28 00 00000020 00 0008 00 000000000000");
    let pdu = Pdu::ScsiCommand(ScsiCommand {
        immediate: false,
        final_bit: true,
        read: true,
        write: false,
        attr: TaskAttr::Simple,
        lun: Lun::from_number(1),
        itt: Itt(0x10),
        expected_data_transfer_length: 4096,
        cmd_sn: SeqNum(5),
        exp_stat_sn: SeqNum(3),
        cdb: Cdb::from(cdb),
        bidi_read_length: None,
        data: Bytes::new(),
    });
    let wire = hex("01 c1 0000  00 000000  0001000000000000  00000010  00001000
                    00000005  00000003  28000000 00200000 08000000 00000000");
    assert_eq!(header_of(&pdu), wire);
    assert_eq!(reparse(&wire, Bytes::new()), Ok(pdu));
}

#[test]
fn scsi_command_with_32_byte_cdb_uses_extended_cdb_ahs() {
    let cdb: Vec<u8> = (0..32).collect();
    let pdu = Pdu::ScsiCommand(ScsiCommand {
        immediate: false,
        final_bit: true,
        read: false,
        write: true,
        attr: TaskAttr::Ordered,
        lun: Lun(0),
        itt: Itt(2),
        expected_data_transfer_length: 0,
        cmd_sn: SeqNum(9),
        exp_stat_sn: SeqNum(9),
        cdb: Cdb::from(cdb),
        bidi_read_length: Some(0x200),
        data: Bytes::new(),
    });
    let wire = header_of(&pdu);
    // TotalAHSLength: (3 + 17 = 20) + (3 + 5 padded to 8) = 28 bytes = 7 words.
    assert_eq!(wire[4], 7);
    assert_eq!(wire[1], 0xa2);
    assert_eq!(&wire[48..52], &[0x00, 0x11, 0x01, 0x00]);
    assert_eq!(&wire[52..68], &(16..32).collect::<Vec<u8>>()[..]);
    assert_eq!(
        &wire[68..76],
        &[0x00, 0x05, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00]
    );
    assert_eq!(reparse(&wire, Bytes::new()), Ok(pdu));
}

#[test]
fn data_in_with_status_vector() {
    let data = Bytes::from(vec![0xab; 512]);
    let pdu = Pdu::DataIn(DataIn {
        final_bit: true,
        ack: false,
        overflow: false,
        underflow: true,
        status_present: true,
        status: codes::ScsiStatus::Good,
        lun: Lun(0),
        itt: Itt(0x10),
        ttt: Ttt::RESERVED,
        stat_sn: SeqNum(7),
        exp_cmd_sn: SeqNum(6),
        max_cmd_sn: SeqNum(37),
        data_sn: 0,
        buffer_offset: 0,
        residual: 512,
        data: data.clone(),
    });
    let wire = hex(
        "25 83 00 00  00 000200  0000000000000000  00000010  ffffffff
                    00000007  00000006  00000025  00000000  00000000  00000200",
    );
    assert_eq!(header_of(&pdu), wire);
    assert_eq!(reparse(&wire, data), Ok(pdu));
}

#[test]
fn reserved_bits_are_ignored_on_parse() {
    // A NOP-In whose reserved bytes (2-3, 36-47) are set parses like the clean one.
    let mut wire = hex("20 80 0000  00 000000  0000000000000000  ffffffff  00000005
                        00000001  00000002  00000003  00000000 00000000 00000000");
    let clean = reparse(&wire, Bytes::new()).expect("valid NOP-In");
    wire[2] = 0xff;
    wire[40] = 0xff;
    wire[0] |= 0x80;
    assert_eq!(reparse(&wire, Bytes::new()), Ok(clean));
}

#[test]
fn unknown_opcode_is_reported_with_the_reject_reason() {
    let mut wire = [0u8; BHS_LEN];
    wire[0] = 0x07;
    let err = Pdu::parse(&wire, &[], Bytes::new()).expect_err("0x07 is not an opcode");
    assert_eq!(err, ParseError::UnknownOpcode(0x07));
    assert_eq!(err.reject_reason(), RejectReason::CommandNotSupported);
}

#[test]
fn lengths_must_match_the_header() {
    let mut wire = [0u8; BHS_LEN];
    wire[7] = 4; // DataSegmentLength 4
    assert_eq!(
        Pdu::parse(&wire, &[], Bytes::from_static(b"abc")),
        Err(ParseError::DataLength {
            expected: 4,
            actual: 3
        })
    );
    wire[4] = 1;
    assert_eq!(
        Pdu::parse(&wire, &[], Bytes::from_static(b"abcd")),
        Err(ParseError::AhsLength {
            expected: 4,
            actual: 0
        })
    );
}

#[test]
fn malformed_ahs_is_refused() {
    let mut wire = [0u8; BHS_LEN];
    wire[0] = opcode::SCSI_COMMAND;
    wire[4] = 2;
    let cases: [&[u8]; 4] = [
        &[0x00, 0x20, 0x01, 0x00, 0, 0, 0, 0], // runs past TotalAHSLength
        &[0x00, 0x04, 0x02, 0x00, 0, 0, 0, 0], // bidi AHSLength not 5
        &[0x00, 0x01, 0x03, 0x00, 0, 0, 0, 0], // unknown type
        &[0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x01, 0x00], // two Extended CDB AHSs
    ];
    for ahs in cases {
        let result = Pdu::parse(&wire, ahs, Bytes::new());
        assert!(
            matches!(result, Err(ParseError::MalformedAhs(_))),
            "{ahs:?}: {result:?}"
        );
    }
}

#[test]
fn helpers_report_opcode_itt_and_data() {
    let reject = Pdu::Reject(Reject {
        reason: RejectReason::DataDigestError,
        stat_sn: SeqNum(1),
        exp_cmd_sn: SeqNum(2),
        max_cmd_sn: SeqNum(3),
        data_sn: 0,
        data: Bytes::from(vec![0; 48]),
    });
    assert_eq!(reject.opcode(), opcode::REJECT);
    assert_eq!(reject.itt(), Itt::RESERVED);
    assert_eq!(reject.data().len(), 48);
    let wire = header_of(&reject);
    assert_eq!(&wire[16..20], &[0xff; 4]);
}

/// A code without a name parses to `Unknown`, shows its number and is emitted unchanged.
#[test]
fn unknown_codes_survive_parse_and_emit() {
    // (opcode, flags byte, byte holding the code, code); a code in the flags byte is in both.
    // Async Message and Reject carry the reserved ITT.
    let cases: [(u8, u8, usize, u8); 9] = [
        (opcode::TASK_MGMT_REQUEST, 0x80 | 0x7f, 1, 0x7f),
        (opcode::LOGOUT_REQUEST, 0x80 | 0x7f, 1, 0x7f),
        (opcode::SNACK_REQUEST, 0x80 | 0x0f, 1, 0x0f),
        (opcode::SCSI_RESPONSE, 0x80, 2, 0x80),
        (opcode::SCSI_RESPONSE, 0x80, 3, 0x22),
        (opcode::TASK_MGMT_RESPONSE, 0x80, 2, 0x07),
        (opcode::DATA_IN, 0x81, 3, 0x22),
        (opcode::LOGOUT_RESPONSE, 0x80, 2, 0x04),
        (opcode::ASYNC_MESSAGE, 0x80, 36, 0x05),
    ];
    let reject = (opcode::REJECT, 0x80, 2, 0x0d);
    for (op, flags, at, code) in cases.into_iter().chain([reject]) {
        let mut wire = [0u8; BHS_LEN];
        (wire[0], wire[1]) = (op, flags);
        wire[at] |= code;
        if matches!(op, opcode::ASYNC_MESSAGE | opcode::REJECT) {
            wire[16..20].fill(0xff);
        }
        let pdu = Pdu::parse(&wire, &[], Bytes::new()).expect("valid header");
        let shown = format!("{pdu:?}");
        assert!(shown.contains(&format!("Unknown({code:#04x})")), "{shown}");
        assert_eq!(header_of(&pdu), wire, "{shown}");
    }
}

proptest! {
    #[test]
    fn parse_inverts_emit(pdu in arbitrary::pdu()) {
        let wire = header_of(&pdu);
        prop_assert_eq!(wire.len() % 4, 0);
        let bhs = Bhs::new_checked(&wire[..]).expect("at least 48 bytes");
        prop_assert_eq!(bhs.opcode(), pdu.opcode());
        prop_assert_eq!(bhs.itt(), pdu.itt());
        prop_assert_eq!(bhs.data_segment_len() as usize, pdu.data().len());
        prop_assert_eq!(reparse(&wire, pdu.wire_data()), Ok(pdu));
    }

    #[test]
    fn parse_never_panics_and_reparse_is_stable(
        mut header in any::<[u8; BHS_LEN]>(),
        op in proptest::sample::select(&OPCODES[..]),
        ahs_words in 0u8..16,
        tail in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        // Mostly-valid lengths and opcodes, so that parsing often succeeds.
        header[0] = (header[0] & 0xc0) | op;
        header[4] = ahs_words;
        let ahs_len = (usize::from(ahs_words) * 4).min(tail.len());
        let (ahs, data) = tail.split_at(ahs_len);
        let [_, a, b, c] = (data.len() as u32).to_be_bytes();
        header[5..8].copy_from_slice(&[a, b, c]);
        if let Ok(pdu) = Pdu::parse(&header, ahs, Bytes::copy_from_slice(data)) {
            let wire = header_of(&pdu);
            let again = reparse(&wire, pdu.wire_data());
            prop_assert_eq!(again, Ok(pdu));
        }
    }
}

/// Every opcode, plus two that are not.
const OPCODES: [u8; 20] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x10, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x31,
    0x32, 0x3f, 0x07, 0x3e,
];

#[test]
fn known_opcodes_are_exactly_those_parse_accepts() {
    for code in 0..64u8 {
        let mut header = [0u8; BHS_LEN];
        header[0] = code;
        let unknown = matches!(
            Pdu::parse_header_only(&header),
            Err(ParseError::UnknownOpcode(_))
        );
        assert_eq!(Pdu::is_known_opcode(code), !unknown, "opcode {code:#04x}");
    }
}
