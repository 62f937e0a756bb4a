//! SET TARGET PORT GROUPS parameter lists through `parse_set_target_port_groups`.
//! Invariants: no panic; a list is accepted only if it is the 4-byte header plus whole
//! descriptors, within the bound, and then yields exactly one descriptor per 4 bytes, each
//! with one of the four supported states.
#![no_main]

use sluice_scsi::parameter_lists::{parse_set_target_port_groups, MAX_STPG_LIST_BYTES};

libfuzzer_sys::fuzz_target!(|list: &[u8]| {
    match parse_set_target_port_groups(list) {
        Ok(descriptors) => {
            assert!(list.len() >= 4 && list.len() <= MAX_STPG_LIST_BYTES);
            assert_eq!(descriptors.len(), (list.len() - 4) / 4);
            for d in descriptors {
                assert_eq!(list[d.offset] & 0x0F, d.state.code());
                assert_eq!(
                    u16::from_be_bytes([list[d.offset + 2], list[d.offset + 3]]),
                    d.group
                );
            }
        }
        Err(sense) => assert_eq!(sense.key.0, 5, "ILLEGAL REQUEST"),
    }
});
