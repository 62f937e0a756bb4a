//! The UNMAP parameter list: `unmap_list::parse` on arbitrary bytes and parameter list
//! lengths, then the same list as an UNMAP to a thin memory LU.
//!
//! Input: two bytes of PARAMETER LIST LENGTH, then the Data-Out. Invariants: no panic; a
//! parsed list never holds more descriptors than the bytes could carry or than
//! `MAX_DESCRIPTORS`; the UNMAP ends GOOD or CHECK CONDITION with decodable sense, and when
//! GOOD every range was inside the LU and reads zeros.
#![no_main]

use std::sync::Arc;

use bytes::BytesMut;
use sluice_scsi::{cdb, unmap_list, LogicalUnit, LuConfig, LuOptions, ScsiTarget, SenseData};
use sluice_storage::{BlockDevice, MemoryDevice};

const BLOCKS: u64 = 256;

fn target() -> (ScsiTarget, Arc<MemoryDevice>) {
    let dev = Arc::new(MemoryDevice::new(512, BLOCKS));
    dev.write_at(0, &vec![0xA5; (BLOCKS * 512) as usize], false)
        .unwrap();
    let cfg = LuConfig {
        device: dev.clone(),
        read_only: false,
        vendor: "SLUICE".into(),
        product: "FUZZ".into(),
        revision: "0001".into(),
        serial: "FUZZ0001".into(),
        naa_id: 0x6001_4050_0000_0001,
        write_cache: true,
        removable: false,
        options: LuOptions {
            thin: true,
            ..LuOptions::default()
        },
    };
    (
        ScsiTarget::new(vec![(0, Arc::new(LogicalUnit::new(cfg)))]),
        dev,
    )
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [hi, lo, list @ ..] = data else {
        return;
    };
    let param_len = u16::from_be_bytes([*hi, *lo]);
    let parsed = unmap_list::parse(list, usize::from(param_len));
    if let Ok(ranges) = &parsed {
        assert!(ranges.len() <= unmap_list::MAX_DESCRIPTORS as usize);
        assert!(ranges.is_empty() || 8 + 16 * ranges.len() <= list.len());
    }

    let (t, dev) = target();
    let mut din = BytesMut::new();
    // Consume the power-on unit attention first.
    let _ = t.execute(1, 0, &cdb::test_unit_ready(), &[], &mut din);
    let mut c = cdb::unmap(&[]).0;
    c[7..9].copy_from_slice(&param_len.to_be_bytes());
    let r = t.execute(1, 0, &c, list, &mut din);
    match r.status {
        0 => {
            let ranges = parsed.expect("a GOOD UNMAP had a list that parses");
            for range in ranges {
                let end = range.lba + u64::from(range.blocks);
                assert!(end <= BLOCKS);
                let mut buf = vec![1u8; (u64::from(range.blocks) * 512) as usize];
                dev.read_at(range.lba * 512, &mut buf).unwrap();
                assert!(buf.iter().all(|&b| b == 0), "unmapped blocks read zeros");
            }
        }
        2 => {
            SenseData::parse(&r.sense_bytes().expect("sense")).expect("sense decodes");
        }
        s => panic!("unexpected status {s:#04x}"),
    }
});
