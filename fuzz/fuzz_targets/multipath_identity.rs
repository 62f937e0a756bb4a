//! What a target reports to a multipath initiator about each path: the Device Identification
//! VPD page body through `parse_device_identification` and REPORT TARGET PORT GROUPS data
//! through `parse_report_target_port_groups`, then `state_of` joining them.
//! Invariants: no panic; an accepted page has at least one LU designator, each no longer than
//! the input; the groups found never hold more ports than the input has bytes for.
#![no_main]

use sluice_initiator::multipath::{
    parse_device_identification, parse_report_target_port_groups, state_of,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let (page, rtpg) = data.split_at(data.len() / 2);
    let id = parse_device_identification(page);
    if let Ok(id) = &id {
        assert!(!id.lu.is_empty());
        assert!(id.lu.iter().all(|(_, _, v)| v.len() <= page.len()));
    }
    if let Ok(groups) = parse_report_target_port_groups(rtpg) {
        let ports: usize = groups.iter().map(|g| g.ports.len()).sum();
        assert!(8 * groups.len() + 4 * ports <= rtpg.len());
        if let Ok(id) = &id {
            let _ = state_of(&groups, id);
        }
    }
});
