//! PERSISTENT RESERVE OUT parameter lists (the basic list with SPEC_I_PT TransportIDs, and
//! REGISTER AND MOVE's) through `parse_prout_parameters`. The first byte picks the service
//! action, the rest is the list. Invariants: no panic; at most `MAX_REGISTRATIONS`
//! TransportIDs, each within the list; every TransportID parsed re-encodes to one that parses
//! back to itself.
#![no_main]

use sluice_scsi::parameter_lists::{parse_prout_parameters, ProutParameters, ServiceAction};
use sluice_scsi::{TransportId, MAX_REGISTRATIONS};

fn round_trip(id: &TransportId) {
    let bytes = id.to_bytes();
    let (back, used) = TransportId::parse(&bytes).expect("an encoded TransportID parses");
    assert_eq!(&back, id);
    assert_eq!(used, bytes.len());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some((&sa, list)) = data.split_first() else {
        return;
    };
    let Some(action) = ServiceAction::from_code(sa & 0x07) else {
        return;
    };
    match parse_prout_parameters(action, list) {
        Ok(ProutParameters::Basic {
            spec_i_pt: Some(ids),
            ..
        }) => {
            assert!(ids.len() <= MAX_REGISTRATIONS);
            for (id, offset) in &ids {
                assert!(*offset < list.len());
                round_trip(id);
            }
        }
        Ok(ProutParameters::Move { transport_id, .. }) => round_trip(&transport_id),
        Ok(ProutParameters::Basic { .. }) => assert_eq!(list.len(), 24),
        Err(sense) => assert_eq!(sense.key.0, 5, "ILLEGAL REQUEST"),
    }
});
