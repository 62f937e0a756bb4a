//! The saved persistent reservation state (APTPL) through its decoder: a damaged file must be
//! an error, never a panic. Invariants: what decodes re-encodes to text that decodes to the
//! same state.
#![no_main]

use sluice_scsi::parameter_lists::{decode_reservation_state, encode_reservation_state};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(state) = decode_reservation_state(&text) {
        let again = decode_reservation_state(&encode_reservation_state(&state))
            .expect("encoded state decodes");
        assert_eq!(again, state);
    }
});
