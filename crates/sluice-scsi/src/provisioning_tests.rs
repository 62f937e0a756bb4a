use std::sync::atomic::Ordering;

use crate::cdb::{self, UnmapDescriptor};
use crate::field::{be32, be64};
use crate::testutil::*;

fn unmap(t: &Harness, ranges: &[(u64, u32)]) -> (crate::CommandResult, Vec<u8>) {
    let d: Vec<UnmapDescriptor> = ranges
        .iter()
        .map(|&(lba, blocks)| UnmapDescriptor { lba, blocks })
        .collect();
    let (c, list) = cdb::unmap(&d);
    t.run(&c, &list)
}

/// GET LBA STATUS descriptors as (lba, blocks, status).
fn lba_status(t: &Harness, lba: u64, alloc: u32) -> Vec<(u64, u32, u8)> {
    let d = t.ok(&cdb::get_lba_status(lba, alloc), &[]);
    assert_eq!(
        be32(&d, 0) as usize,
        d.len().max(8) - 4,
        "whole answer fits"
    );
    d[8..]
        .chunks(16)
        .map(|e| (be64(e, 0), be32(e, 8), e[12]))
        .collect()
}

#[test]
fn unmap_deallocates_and_reads_zeros() {
    let t = Harness::thin(512, 1000);
    t.ok(&cdb::write16(0, 100, false), &[0xAB; 51200]);
    assert_eq!(lba_status(&t, 0, 1024), vec![(0, 100, 0), (100, 900, 1)]);
    let (r, _) = unmap(&t, &[(10, 20), (50, 5), (99, 1), (100, 0)]);
    assert!(r.is_good(), "{r:?}");
    let d = t.ok(&cdb::read16(0, 100, false), &[]);
    for (i, block) in d.chunks(512).enumerate() {
        let unmapped = (10..30).contains(&i) || (50..55).contains(&i) || i == 99;
        let want = if unmapped { 0 } else { 0xAB };
        assert!(block.iter().all(|&b| b == want), "block {i}");
    }
    assert_eq!(
        lba_status(&t, 0, 1024),
        vec![
            (0, 10, 0),
            (10, 20, 1),
            (30, 20, 0),
            (50, 5, 1),
            (55, 44, 0),
            (99, 901, 1)
        ]
    );
    // The first descriptor starts at the starting LBA, however the runs fall.
    assert_eq!(lba_status(&t, 12, 24), vec![(12, 18, 1)]);
    assert_eq!(lba_status(&t, 999, 1024), vec![(999, 1, 1)]);
}

#[test]
fn unmap_checks_every_range_before_touching_any() {
    let t = Harness::thin(512, 100);
    t.ok(&cdb::write16(0, 100, false), &vec![7; 51200]);
    for bad in [(100, 1), (99, 2), (u64::MAX, 1), (1 << 63, 0), (101, 0)] {
        let (r, _) = unmap(&t, &[(0, 10), bad]);
        assert_illegal(&r.sense.unwrap(), 0x21, 0);
    }
    assert!(t
        .ok(&cdb::read16(0, 10, false), &[])
        .iter()
        .all(|&b| b == 7));
    // Zero-length descriptors, LBA = N with 0 blocks, and an empty list are fine.
    assert!(unmap(&t, &[(100, 0), (5, 0)]).0.is_good());
    assert!(unmap(&t, &[]).0.is_good());
    t.ok(&[0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    // A list shorter than its header.
    let (c, _) = cdb::unmap(&[]);
    let mut c = c;
    c[8] = 4;
    assert_illegal(&t.check(&c, &[0; 4]), 0x1A, 0);
}

#[test]
fn unmap_anchor_write_protect_and_thick_lus() {
    let t = Harness::thin(512, 100);
    let (mut c, list) = cdb::unmap(&[UnmapDescriptor { lba: 0, blocks: 1 }]);
    c[1] = 0x01;
    assert_ifc(&t.check(&c, &list), true, 1, Some(0));
    let ro = Harness::build_on(
        VecDevice {
            thin: true,
            ..VecDevice::new(512, 100)
        },
        |c| {
            c.options.thin = true;
            c.read_only = true;
        },
    );
    let s = ro.check(&cdb::unmap(&[]).0, &[0; 8]);
    assert_eq!((s.key.0, s.asc), (7, 0x27));
    // A fully provisioned LU has no UNMAP, and reports every block mapped.
    let thick = Harness::new(512, 100);
    assert_illegal(&thick.check(&cdb::unmap(&[]).0, &[0; 8]), 0x20, 0);
    assert_eq!(lba_status(&thick, 7, 100), vec![(7, 93, 0)]);
    // Thin configured on a device that cannot deallocate stays fully provisioned.
    let fake = Harness::build_with(512, 100, |c| c.options.thin = true);
    assert!(!fake.lu().thin());
    assert_illegal(&fake.check(&cdb::unmap(&[]).0, &[0; 8]), 0x20, 0);
}

#[test]
fn get_lba_status_range_and_allocation_length() {
    let t = Harness::thin(512, 100);
    for lba in [100u64, 101, 1 << 63, u64::MAX, (1 << 55) + 99] {
        assert_illegal(&t.check(&cdb::get_lba_status(lba, 24), &[]), 0x21, 0);
    }
    // Short allocation lengths truncate; the length field stays whole.
    let d = t.ok(&cdb::get_lba_status(0, 12), &[]);
    assert_eq!(d.len(), 12);
    assert_eq!(be32(&d, 0), 20);
    assert!(t.ok(&cdb::get_lba_status(0, 0), &[]).is_empty());
    // Many runs: at most what the allocation length holds, and never more than the limit.
    for i in 0..50 {
        t.ok(&cdb::write16(i * 2, 1, false), &[1; 512]);
    }
    assert_eq!(lba_status(&t, 0, 8 + 16 * 7).len(), 7);
    assert_eq!(lba_status(&t, 0, 65535).len(), 100);
}

#[test]
fn a_full_backing_store_is_a_space_allocation_failure() {
    let t = Harness::thin(512, 100);
    t.ok(&cdb::write16(0, 10, false), &[1; 5120]);
    t.dev.full.store(true, Ordering::Relaxed);
    // Mapped blocks can still be written; new space cannot be had.
    t.ok(&cdb::write16(0, 10, false), &[2; 5120]);
    let s = t.check(&cdb::write16(10, 1, false), &[3; 512]);
    assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0x07), "{s}");
    let s = t.check(&cdb::write_same16(20, 5, false, false), &[4; 512]);
    assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0x07), "{s}");
}

#[test]
fn capacity16_and_vpd_report_thin_provisioning() {
    let t = Harness::thin(512, 100);
    let d = t.ok(&cdb::read_capacity16(32), &[]);
    assert_eq!(d[13] & 0x0F, 3, "8 logical blocks per physical block");
    assert_eq!(d[14] & 0xC0, 0xC0, "LBPME and LBPRZ");
    let lbp = t.ok(&cdb::inquiry(Some(0xB2), 64), &[]);
    assert_eq!(lbp, vec![0, 0xB2, 0, 4, 0, 0xE4, 0x02, 0]);
    let bl = t.ok(&cdb::inquiry(Some(0xB0), 64), &[]);
    assert_eq!(be32(&bl, 20), u32::MAX, "MAXIMUM UNMAP LBA COUNT");
    assert_eq!(be32(&bl, 24), crate::unmap_list::MAX_DESCRIPTORS);
    assert_eq!(be32(&bl, 28), 1, "OPTIMAL UNMAP GRANULARITY");
    assert_eq!(be32(&bl, 32), 0x8000_0000, "UGAVALID");
    let thick = Harness::new(512, 100);
    let d = thick.ok(&cdb::read_capacity16(32), &[]);
    assert_eq!(d[14] & 0xC0, 0);
    let bl = thick.ok(&cdb::inquiry(Some(0xB0), 64), &[]);
    assert_eq!(be32(&bl, 20), 0);
    assert_eq!(be32(&bl, 24), 0);
    assert_eq!(
        thick.ok(&cdb::inquiry(Some(0xB2), 64), &[])[4..],
        [0, 0, 0, 0]
    );
}

#[test]
fn the_soft_threshold_raises_one_unit_attention_per_crossing() {
    let dev = VecDevice {
        thin: true,
        ..VecDevice::new(512, 4096)
    };
    let t = Harness::build_on(dev, |c| {
        c.options.thin = true;
        c.options.soft_threshold_percent = Some(50);
    });
    let other = t.nexus(2);
    let _ = other.run(&[0; 6], &[]);
    // THRESHOLD EXPONENT in VPD B2h; the threshold in the Logical Block Provisioning page.
    assert_eq!(t.ok(&cdb::inquiry(Some(0xB2), 64), &[])[4], 1);
    let page = t.ok(&[0x1A, 0x08, 0x1C, 0x02, 255, 0], &[]);
    assert_eq!(&page[4..8], &[0x5C, 0x02, 0, 20]);
    assert_eq!((page[20], page[21]), (0x80, 0x01));
    assert_eq!(be32(&page, 24), 1024, "2048 blocks in units of 2");
    let all = t.ok(&[0x1A, 0x08, 0x3F, 0xFF, 255, 0], &[]);
    assert!(all.windows(2).any(|w| w == [0x5C, 0x02]));
    let plain = t.ok(&[0x1A, 0x08, 0x3F, 0x00, 255, 0], &[]);
    assert!(!plain.windows(2).any(|w| w == [0x5C, 0x02]));
    // Up to just below half: nothing. Past it: one unit attention for every nexus.
    t.ok(&cdb::write16(0, 2047, false), &vec![1; 2047 * 512]);
    t.ok(&cdb::write16(3000, 1000, false), &vec![1; 1000 * 512]);
    let s = t.check(&[0; 6], &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x38, 0x07), "{s}");
    assert_eq!(other.check(&[0; 6], &[]).asc, 0x38);
    t.ok(&[0; 6], &[]);
    t.ok(&cdb::write16(2047, 1000, false), &vec![1; 1000 * 512]);
    t.ok(&cdb::write16(2047, 1000, false), &vec![1; 1000 * 512]);
    t.ok(&[0; 6], &[]);
    // UNMAP below it arms it again; the next crossing raises it again.
    assert!(unmap(&t, &[(0, 3000)]).0.is_good());
    t.ok(&cdb::write16(0, 2100, false), &vec![1; 2100 * 512]);
    assert_eq!(t.check(&[0; 6], &[]).asc, 0x38);
    // A LU without a threshold (or fully provisioned) has none of it.
    let plain = Harness::thin(512, 100);
    assert_eq!(plain.ok(&cdb::inquiry(Some(0xB2), 64), &[])[4], 0);
    assert_ifc(
        &plain.check(&[0x1A, 0x08, 0x1C, 0x02, 255, 0], &[]),
        true,
        3,
        Some(7),
    );
}
