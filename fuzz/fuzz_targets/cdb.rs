//! Runs arbitrary CDBs and Data-Out through `ScsiTarget::execute` on a small RAM disk.
//!
//! The input is a sequence of commands, so state (mode pages, unit attentions, PREVENT) carries
//! from one to the next. Each command is: a selector byte (bits 0-1 nexus, bit 2 LUN 0 or a
//! missing LUN, bit 3 the REPORT LUNS well-known LUN, bits 4-7 a reset or nexus loss before
//! the command), a CDB length byte (mod 33), the CDB, a Data-Out length byte (× 64), the
//! Data-Out. Invariants: no panic; GOOD, CHECK CONDITION with decodable sense, or RESERVATION
//! CONFLICT without sense (another nexus holds a RESERVE or persistent reservation); no Data-In
//! unless GOOD.
#![no_main]

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use sluice_scsi::status::{CHECK_CONDITION, GOOD, RESERVATION_CONFLICT};
use sluice_scsi::{LogicalUnit, LuConfig, ResetKind, ScsiTarget, SenseData};
use sluice_storage::{check_range, BlockDevice, StorageError};

#[derive(Debug)]
struct VecDevice(Mutex<Vec<u8>>);

impl BlockDevice for VecDevice {
    fn block_size(&self) -> u32 {
        512
    }
    fn num_blocks(&self) -> u64 {
        64
    }
    fn blocks(&self) -> bool {
        false
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        let d = self.0.lock().unwrap();
        check_range(offset, buf.len() as u64, d.len() as u64)?;
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), StorageError> {
        let mut d = self.0.lock().unwrap();
        check_range(offset, data.len() as u64, d.len() as u64)?;
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

fn target() -> ScsiTarget {
    let cfg = LuConfig {
        device: Arc::new(VecDevice(Mutex::new(vec![0; 64 * 512]))),
        read_only: false,
        vendor: "SLUICE".into(),
        product: "FUZZ".into(),
        revision: "0001".into(),
        serial: "FUZZ0001".into(),
        naa_id: 0x6001_4050_0000_0001,
        write_cache: true,
        removable: false,
        options: sluice_scsi::LuOptions::default(),
    };
    ScsiTarget::new(vec![(0, Arc::new(LogicalUnit::new(cfg)))])
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let t = target();
    let mut din = BytesMut::new();
    let mut rest = data;
    while let [sel, cdb_len, tail @ ..] = rest {
        let cdb_len = usize::from(*cdb_len % 33).min(tail.len());
        let (cdb, tail) = tail.split_at(cdb_len);
        let (out_len, tail) = match tail {
            [n, tail @ ..] => (usize::from(*n) * 64, tail),
            [] => (0, tail),
        };
        let (out, tail) = tail.split_at(out_len.min(tail.len()));
        rest = tail;

        let nexus = u64::from(sel & 0x03);
        let lun = match (sel & 0x04 != 0, sel & 0x08 != 0) {
            (_, true) => 0xC101_0000_0000_0000,
            (true, false) => 0x0007_0000_0000_0000,
            (false, false) => 0,
        };
        match sel >> 4 {
            1 => {
                let _ = t.reset(ResetKind::LogicalUnit(lun), nexus);
            }
            2 => {
                let _ = t.reset(ResetKind::TargetWarm, nexus);
            }
            3 => {
                let _ = t.reset(ResetKind::TargetCold, nexus);
            }
            4 => t.nexus_gone(nexus),
            _ => {}
        }
        let _ = t.transfer(lun, cdb);
        let r = t.execute(nexus, lun, cdb, out, &mut din);
        match r.status {
            GOOD => assert!(r.sense.is_none()),
            CHECK_CONDITION => {
                assert!(din.is_empty());
                let bytes = r.sense_bytes().expect("CHECK CONDITION carries sense");
                SenseData::parse(&bytes).expect("sense decodes");
            }
            RESERVATION_CONFLICT => {
                assert!(din.is_empty());
                assert!(r.sense.is_none());
            }
            s => panic!("unexpected status {s:#04x}"),
        }
    }
});
