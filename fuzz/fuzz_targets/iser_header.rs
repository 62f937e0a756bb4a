#![no_main]
//! Parses arbitrary bytes as an iSER header (control, Hello, HelloReply) and as iSER CM
//! private data. Whatever parses must survive emit and re-parse unchanged; nothing may panic.

use sluice_proto::iser::{IserCmHeader, IserMessage, ISER_HEADER_LEN};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    if let Ok((message, rest)) = IserMessage::parse(input) {
        assert_eq!(rest.len(), input.len() - ISER_HEADER_LEN);
        let wire = message.emit();
        let (again, tail) = IserMessage::parse(&wire).expect("emitted header parses");
        assert_eq!(again, message);
        assert!(tail.is_empty());
    }
    if let Ok((header, _)) = IserCmHeader::parse(input) {
        let (again, _) = IserCmHeader::parse(&header.emit()).expect("emitted CM header parses");
        assert_eq!(again, header);
    }
});
