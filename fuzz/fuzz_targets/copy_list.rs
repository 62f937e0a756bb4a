//! The EXTENDED COPY (LID1) parameter list: `copy_list::parse` on arbitrary bytes and
//! parameter list lengths, then the same list as an EXTENDED COPY between two small thin
//! memory LUs of one target, and RECEIVE COPY RESULTS for its list identifier.
//!
//! Input: four bytes of PARAMETER LIST LENGTH, then the Data-Out (the seed corpus holds valid
//! lists naming the two LUs by their NAA designators). Invariants: no panic; a parsed list
//! stays within the limits the copy manager reports; the copy ends GOOD, ILLEGAL REQUEST or
//! COPY ABORTED with decodable sense, never touching bytes outside the LUs (the devices check
//! every range).
#![no_main]

use std::sync::Arc;

use bytes::BytesMut;
use sluice_scsi::{cdb, copy_list, LogicalUnit, LuConfig, LuOptions, ScsiTarget, SenseData};
use sluice_storage::MemoryDevice;

/// 64 KiB LUs: the longest copy a list can ask for stays a few MiB.
const BLOCKS: u64 = 128;

fn lu(naa_id: u64, serial: &str) -> Arc<LogicalUnit> {
    let cfg = LuConfig {
        device: Arc::new(MemoryDevice::new(512, BLOCKS)),
        read_only: false,
        vendor: "SLUICE".into(),
        product: "FUZZ".into(),
        revision: "0001".into(),
        serial: serial.into(),
        naa_id,
        write_cache: true,
        removable: false,
        options: LuOptions {
            thin: true,
            ..LuOptions::default()
        },
    };
    Arc::new(LogicalUnit::new(cfg))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [a, b, c, d, list @ ..] = data else {
        return;
    };
    let param_len = u32::from_be_bytes([*a, *b, *c, *d]);
    let parsed = copy_list::parse(list, param_len as usize);
    if let Ok(Some(l)) = &parsed {
        assert!(l.cscds.len() <= usize::from(copy_list::MAX_CSCD_DESCRIPTORS));
        assert!(l.segments.len() <= usize::from(copy_list::MAX_SEGMENT_DESCRIPTORS));
        assert!(l.cscds.iter().all(|c| c.designator.len() <= 20));
    }

    let t = ScsiTarget::new(vec![
        (0, lu(0x6001_4050_0000_0001, "FUZZ0001")),
        (1, lu(0x6001_4050_0000_0002, "FUZZ0002")),
    ]);
    let mut din = BytesMut::new();
    let _ = t.execute(1, 0, &cdb::test_unit_ready(), &[], &mut din);
    let r = t.execute(1, 0, &cdb::extended_copy(param_len), list, &mut din);
    match r.status {
        0 => assert!(parsed.is_ok(), "a GOOD copy had a list that parses"),
        2 => {
            let s = SenseData::parse(&r.sense_bytes().expect("sense")).expect("sense decodes");
            assert!(matches!(s.key.0, 0x05 | 0x0A), "{s}");
        }
        s => panic!("unexpected status {s:#04x}"),
    }
    if let Ok(Some(l)) = parsed {
        let rcr = cdb::receive_copy_results(0, l.list_id, 1024);
        let r = t.execute(1, 0, &rcr, &[], &mut din);
        assert!(r.status == 0 || r.status == 2);
    }
});
