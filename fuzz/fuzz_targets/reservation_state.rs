//! The saved persistent reservation state (APTPL) through its decoder, and the state gateways
//! share in RADOS (with its event log) through its own: a damaged file or object must be an
//! error, never a panic. Invariants: what decodes re-encodes to text that decodes to the same
//! state, and a decoded event log stays within its bound.
#![no_main]

use sluice_scsi::parameter_lists::{
    decode_reservation_state, decode_shared_reservation_state, encode_reservation_state,
    encode_shared_reservation_state, MAX_EVENT_LINES,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(state) = decode_reservation_state(&text) {
        let again = decode_reservation_state(&encode_reservation_state(&state))
            .expect("encoded state decodes");
        assert_eq!(again, state);
    }
    if let Ok(shared) = decode_shared_reservation_state(&text) {
        assert!(shared.events.events().len() <= MAX_EVENT_LINES);
        let text =
            encode_shared_reservation_state(&shared.pr, shared.spc2.as_ref(), &shared.events);
        let again = decode_shared_reservation_state(&text).expect("encoded state decodes");
        assert_eq!(again, shared);
    }
});
