//! REPORT LUNS (SPC-4 6.33).
//!
//! SELECT REPORT 00h lists the logical units, 01h the well-known ones (only the REPORT LUNS
//! well-known LU, C101h), 02h both. Other values, and an ALLOCATION LENGTH below 16, are
//! INVALID FIELD IN CDB. The LUN LIST LENGTH always describes the whole list, whatever the
//! allocation length cut off.

use bytes::BytesMut;

use crate::field::{be32, put_truncated, u8_at};
use crate::lu::CmdResult;
use crate::sense::invalid_field_in_cdb;
use crate::target::encode_lun;

/// REPORT LUNS over `luns`.
pub(crate) fn report_luns(cdb: &[u8], luns: &[u16], out: &mut BytesMut) -> CmdResult {
    let select = u8_at(cdb, 2);
    let alloc = be32(cdb, 6) as usize;
    if alloc < 16 {
        return Err(invalid_field_in_cdb(6, Some(7)));
    }
    let mut entries: Vec<u64> = Vec::new();
    match select {
        0x00 => entries.extend(luns.iter().map(|&l| encode_lun(l))),
        0x01 => entries.push(0xC101_0000_0000_0000),
        0x02 => {
            entries.extend(luns.iter().map(|&l| encode_lun(l)));
            entries.push(0xC101_0000_0000_0000);
        }
        _ => return Err(invalid_field_in_cdb(2, Some(7))),
    }
    let mut d = Vec::with_capacity(8 + 8 * entries.len());
    // At most 16385 entries, so the length fits in u32.
    d.extend_from_slice(&((entries.len() * 8) as u32).to_be_bytes());
    d.extend_from_slice(&[0; 4]);
    for e in entries {
        d.extend_from_slice(&e.to_be_bytes());
    }
    put_truncated(out, &d, alloc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::BytesMut;

    use crate::cdb;
    use crate::field::be32;
    use crate::testutil::*;
    use crate::{LogicalUnit, ScsiTarget};

    fn target(luns: &[u16]) -> ScsiTarget {
        let v = luns
            .iter()
            .map(|&l| {
                let dev = Arc::new(VecDevice::new(512, 8));
                (l, Arc::new(LogicalUnit::new(config(dev, false))))
            })
            .collect();
        ScsiTarget::new(v)
    }

    fn run(t: &ScsiTarget, lun: u64, c: &[u8]) -> (crate::CommandResult, Vec<u8>) {
        let mut d = BytesMut::new();
        let r = t.execute(1, lun, c, &[], &mut d);
        (r, d.to_vec())
    }

    #[test]
    fn lists_peripheral_and_flat_luns() {
        let t = target(&[0, 3, 300]);
        let (r, d) = run(&t, 0, &cdb::report_luns(0, 4096));
        assert!(
            r.is_good(),
            "REPORT LUNS is not blocked by the POWER ON unit attention"
        );
        assert_eq!(be32(&d, 0), 24);
        assert_eq!(&d[8..16], &[0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&d[16..18], &[0, 3]);
        assert_eq!(&d[24..26], &[0x41, 0x2C]);
        // Truncated: the length still covers the whole list.
        let (_, d) = run(&t, 0, &cdb::report_luns(0, 16));
        assert_eq!(d.len(), 16);
        assert_eq!(be32(&d, 0), 24);
    }

    #[test]
    fn select_report_and_allocation_length() {
        let t = target(&[0]);
        let (_, d) = run(&t, 0, &cdb::report_luns(1, 100));
        assert_eq!(d, vec![0, 0, 0, 8, 0, 0, 0, 0, 0xC1, 1, 0, 0, 0, 0, 0, 0]);
        let (_, d) = run(&t, 0, &cdb::report_luns(2, 100));
        assert_eq!(be32(&d, 0), 16);
        let (r, _) = run(&t, 0, &cdb::report_luns(0x10, 100));
        assert_ifc(&r.sense.unwrap(), true, 2, Some(7));
        let (r, _) = run(&t, 0, &cdb::report_luns(0, 15));
        assert_ifc(&r.sense.unwrap(), true, 6, Some(7));
    }

    #[test]
    fn works_through_missing_lun_and_well_known_lun() {
        let t = target(&[0, 1]);
        let (r, d) = run(&t, crate::encode_lun(9), &cdb::report_luns(0, 100));
        assert!(r.is_good());
        assert_eq!(be32(&d, 0), 16);
        let wlun = 0xC101_0000_0000_0000;
        let (r, d) = run(&t, wlun, &cdb::report_luns(0, 100));
        assert!(r.is_good());
        assert_eq!(be32(&d, 0), 16);
        let (_, d) = run(&t, wlun, &cdb::inquiry(None, 96));
        assert_eq!(d[0], 0x1E);
        let (r, _) = run(&t, wlun, &cdb::test_unit_ready());
        assert!(r.is_good());
        let (r, _) = run(&t, wlun, &cdb::read10(0, 1, false));
        assert_illegal(&r.sense.unwrap(), 0x20, 0);
        let (r, _) = run(&t, wlun, &cdb::inquiry(Some(0), 96));
        assert_ifc(&r.sense.unwrap(), true, 1, Some(0));
        let (r, d) = run(&t, wlun, &[0x03, 0, 0, 0, 18, 0]);
        assert!(r.is_good());
        assert_eq!(d[2], 0);
    }

    #[test]
    fn reported_luns_changed() {
        let t = target(&[0]);
        let lu0 = t.lu(0).unwrap();
        let (r, _) = run(&t, 0, &cdb::test_unit_ready());
        assert_eq!(r.sense.unwrap().asc, 0x29);
        let dev = Arc::new(VecDevice::new(512, 8));
        t.replace_luns(vec![
            (0, lu0),
            (5, Arc::new(LogicalUnit::new(config(dev, false)))),
        ]);
        let (r, _) = run(&t, 0, &cdb::test_unit_ready());
        let s = r.sense.unwrap();
        assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x3F, 0x0E));
        assert!(run(&t, 0, &cdb::test_unit_ready()).0.is_good());
        // REPORT LUNS clears it without reporting it.
        t.replace_luns(
            t.lun_numbers()
                .into_iter()
                .map(|l| (l, t.lu(l).unwrap()))
                .collect(),
        );
        let (_, d) = run(&t, 0, &cdb::report_luns(0, 100));
        assert_eq!(be32(&d, 0), 16);
        assert!(run(&t, 0, &cdb::test_unit_ready()).0.is_good());
    }
}
