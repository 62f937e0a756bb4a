#![no_main]
//! Parses an arbitrary 48-byte header with the AHS and data that follow it. Whatever parses must
//! survive emit and re-parse unchanged; nothing may panic.

use bytes::{Bytes, BytesMut};
use sluice_proto::pdu::{Bhs, Pdu, BHS_LEN};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let Some((head, rest)) = input.split_first_chunk::<BHS_LEN>() else {
        return;
    };

    // As given: mostly length-mismatch errors, which must not panic either.
    let h = Bhs::from_array(head);
    let ahs_len = h.total_ahs_len().min(rest.len());
    let (ahs, data) = rest.split_at(ahs_len);
    check(head, ahs, data);

    // With the length fields patched to what follows, so that most inputs reach the opcode
    // parsers.
    let mut header = *head;
    header[4] = u8::try_from(rest.len() / 4)
        .unwrap_or(u8::MAX)
        .min(header[4]);
    let (ahs, data) = rest.split_at(usize::from(header[4]) * 4);
    let data = &data[..data.len().min(0x00ff_ffff)];
    let [_, a, b, c] = u32::try_from(data.len()).unwrap_or(0).to_be_bytes();
    header[5..8].copy_from_slice(&[a, b, c]);
    check(&header, ahs, data);
});

fn check(header: &[u8; BHS_LEN], ahs: &[u8], data: &[u8]) {
    let Ok(pdu) = Pdu::parse(header, ahs, Bytes::copy_from_slice(data)) else {
        return;
    };
    let mut wire = BytesMut::new();
    pdu.emit_header(&mut wire);
    assert_eq!(wire.len() % 4, 0);
    let (bhs, ahs) = wire.split_at(BHS_LEN);
    let bhs: &[u8; BHS_LEN] = bhs.try_into().expect("emit writes a whole BHS");
    let again = Pdu::parse(bhs, ahs, pdu.wire_data()).expect("emitted PDU re-parses");
    assert_eq!(again, pdu);
}
