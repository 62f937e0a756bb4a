#![no_main]
//! Arbitrary bytes into the text codec, the C-bit assembler, the splitter, the negotiator (both
//! roles) and the CHAP value decoder. Nothing may panic, and what parses must survive
//! encode -> split -> reassemble -> parse unchanged.

use bytes::Bytes;
use sluice_proto::chap::{decode_binary, parse_identifier};
use sluice_proto::params::SessionType;
use sluice_proto::text::{
    encode_pairs, parse_pairs, split_text, Negotiator, OperationalOffer, Role, TextAssembler,
    TextLimits,
};

libfuzzer_sys::fuzz_target!(|input: &[u8]| {
    let Some((&control, data)) = input.split_first() else {
        return;
    };

    // Reassembly: cut the input into PDUs at a control-driven stride, C=1 on all but the last.
    let stride = usize::from(control % 64) + 1;
    let mut asm = TextAssembler::new(usize::from(control) * 64);
    let chunks: Vec<&[u8]> = data.chunks(stride).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let _ = asm.push(chunk, i + 1 < chunks.len());
    }

    for limits in [TextLimits::LOGIN, TextLimits::DISCOVERY] {
        let Ok(pairs) = parse_pairs(data, &limits) else {
            continue;
        };
        let text = encode_pairs(&pairs);
        let mut asm = TextAssembler::new(limits.max_total_len.max(text.len()));
        let mut whole = None;
        for (chunk, cont) in split_text(&text, stride) {
            whole = asm.push(&chunk, cont).expect("within cap");
        }
        let whole = whole.unwrap_or_else(Bytes::new);
        assert_eq!(parse_pairs(&whole, &limits).ok(), Some(pairs.clone()));

        for role in [Role::Target, Role::Initiator] {
            let mut n = Negotiator::new(role, OperationalOffer::default());
            if control & 1 == 1 {
                n.set_session_type(SessionType::Discovery);
            }
            n.set_leading(control & 2 == 0);
            n.set_full_feature(control & 4 != 0);
            if control & 8 != 0 {
                let _ = n.offers();
            }
            let _ = n.handle(&pairs);
            let p = n.result();
            assert!(p.first_burst_length <= p.max_burst_length);
        }
        for (_, v) in &pairs {
            let _ = decode_binary(v);
            let _ = parse_identifier(v);
        }
    }
});
