use std::sync::atomic::Ordering;

use crate::cdb;
use crate::field::{be16, be32, be64};
use crate::testutil::*;

/// Splits MODE SENSE(6) data into (device-specific parameter, block descriptor, pages).
fn split6(d: &[u8]) -> (u8, Vec<u8>, Vec<u8>) {
    assert_eq!(usize::from(d[0]) + 1, d.len());
    let bdl = usize::from(d[3]);
    (d[2], d[4..4 + bdl].to_vec(), d[4 + bdl..].to_vec())
}

fn page_codes(mut p: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    while p.len() >= 2 {
        v.push(p[0] & 0x3F);
        p = &p[2 + usize::from(p[1])..];
    }
    v
}

#[test]
fn mode_sense6_all_pages() {
    let t = Harness::new(512, 1000);
    let d = t.ok(&cdb::mode_sense6(false, 0, 0x3F, 0, 255), &[]);
    let (dsp, bd, pages) = split6(&d);
    assert_eq!(dsp, 0x10, "DPOFUA set, WP clear");
    assert_eq!(bd.len(), 8);
    assert_eq!(be32(&bd, 0), 1000);
    assert_eq!(be32(&bd, 4) & 0xFF_FFFF, 512);
    assert_eq!(page_codes(&pages), vec![0x08, 0x0A, 0x1C]);
    // Caching page WCE=1 by default.
    assert_eq!(pages[2] & 0x04, 0x04);
    // Subpage FFh means the same.
    assert_eq!(t.ok(&cdb::mode_sense6(false, 0, 0x3F, 0xFF, 255), &[]), d);
}

#[test]
fn mode_sense6_control_page_direct_and_in_all_agree() {
    let t = Harness::new(512, 1000);
    let all = t.ok(&cdb::mode_sense6(true, 0, 0x3F, 0, 255), &[]);
    let one = t.ok(&cdb::mode_sense6(true, 0, 0x0A, 0, 255), &[]);
    let (_, bd, pages) = split6(&one);
    assert!(bd.is_empty());
    assert_eq!(pages.len(), 12);
    assert!(split6(&all).2.windows(12).any(|w| w == &pages[..]));
    assert_eq!(pages[2] >> 5, 0, "TST");
    assert_eq!(pages[3] >> 4, 1, "QAM");
    assert_ne!((pages[3] >> 1) & 3, 2, "QERR");
    assert_ne!((pages[4] >> 4) & 3, 1, "UA_INTLCK_CTRL");
    assert!(pages[5] & 7 <= 2, "AUTOLOAD MODE");
    // D_SENSE and SWP are changeable.
    let ch = t.ok(&cdb::mode_sense6(true, 1, 0x0A, 0, 255), &[]);
    assert_eq!(split6(&ch).2[4], 0x08);
    assert_eq!(split6(&ch).2[2], 0x04);
}

#[test]
fn mode_sense_page_control_and_errors() {
    let t = Harness::new(512, 1000);
    let d = t.ok(&cdb::mode_sense6(false, 1, 0x08, 0, 255), &[]);
    let (_, bd, p) = split6(&d);
    assert!(bd.iter().all(|b| *b == 0));
    assert_eq!(p[2], 0x04);
    let d = t.ok(&cdb::mode_sense6(false, 2, 0x1C, 0, 255), &[]);
    assert_eq!(split6(&d).2[2], 0x08);
    let s = t.check(&cdb::mode_sense6(false, 3, 0x3F, 0, 255), &[]);
    assert_illegal(&s, 0x39, 0);
    assert_ifc(
        &t.check(&cdb::mode_sense6(false, 0, 0x19, 0, 255), &[]),
        true,
        2,
        Some(5),
    );
    assert_ifc(
        &t.check(&cdb::mode_sense6(false, 0, 0x0A, 1, 255), &[]),
        true,
        3,
        Some(7),
    );
}

#[test]
fn mode_sense_truncates_to_allocation_length() {
    let t = Harness::new(512, 1000);
    let full = t.ok(&cdb::mode_sense6(false, 0, 0x3F, 0, 255), &[]);
    for n in [0u8, 1, 4, 13, 40] {
        let d = t.ok(&cdb::mode_sense6(false, 0, 0x3F, 0, n), &[]);
        assert_eq!(&d[..], &full[..usize::from(n).min(full.len())]);
    }
}

#[test]
fn mode_sense10_with_long_lba_descriptor() {
    let t = Harness::new(4096, 77);
    let c = [0x5A, 0x10, 0x3F, 0, 0, 0, 0, 0x10, 0, 0];
    let d = t.ok(&c, &[]);
    assert_eq!(usize::from(be16(&d, 0)) + 2, d.len());
    assert_eq!(d[3], 0x10);
    assert_eq!(d[4] & 1, 1, "LONGLBA");
    assert_eq!(be16(&d, 6), 16);
    assert_eq!(be64(&d, 8), 77);
    assert_eq!(be32(&d, 20), 4096);
    let c = [0x5A, 0x00, 0x08, 0, 0, 0, 0, 0x10, 0, 0];
    let d = t.ok(&c, &[]);
    assert_eq!(d[4], 0);
    assert_eq!(be16(&d, 6), 8);
    assert_eq!(d.len(), 8 + 8 + 20);
    let c = [0x5A, 0x08, 0x0A, 0, 0, 0, 0, 0, 5, 0];
    assert_eq!(t.ok(&c, &[]).len(), 5);
}

#[test]
fn read_only_sets_wp() {
    let t = Harness::read_only(512, 10);
    let d = t.ok(&cdb::mode_sense6(true, 0, 0x3F, 0, 255), &[]);
    assert_eq!(d[2], 0x90);
}

fn select6(page: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut list = vec![0u8; 4];
    list.extend_from_slice(page);
    (vec![0x15, 0x10, 0, 0, list.len() as u8, 0], list)
}

fn caching(wce: bool) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x08;
    p[1] = 0x12;
    p[2] = if wce { 0x04 } else { 0 };
    p
}

#[test]
fn mode_select_changes_wce_and_raises_ua_for_others() {
    let t = Harness::new(512, 10);
    let other = t.nexus(2);
    other.ok(&[0x12, 0, 0, 0, 36, 0], &[]);
    let _ = other.run(&[0; 6], &[]); // consume POWER ON
    let (c, l) = select6(&caching(false));
    t.ok(&c, &l);
    let d = t.ok(&cdb::mode_sense6(true, 0, 0x08, 0, 255), &[]);
    assert_eq!(d[4 + 2] & 0x04, 0);
    // Writes are now durable.
    t.ok(&cdb::write10(0, 1, false), &[0; 512]);
    assert_eq!(t.dev.fua_writes.load(Ordering::Relaxed), 1);
    // The nexus that changed it sees no UA; the other one does, once.
    t.ok(&[0; 6], &[]);
    let s = other.check(&[0; 6], &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x2A, 0x01));
    other.ok(&[0; 6], &[]);
    // Selecting the same values again changes nothing and raises nothing.
    t.ok(&c, &l);
    other.ok(&[0; 6], &[]);
}

#[test]
fn mode_select_rejects_unchangeable_bits() {
    let t = Harness::new(512, 10);
    let mut p = caching(true);
    p[2] |= 0x01; // RCD is not changeable
    let (c, l) = select6(&p);
    assert_ifc(&t.check(&c, &l), false, 6, Some(0));
    let mut p = caching(true);
    p[1] = 0x10;
    p.truncate(18);
    let (c, l) = select6(&p);
    assert_ifc(&t.check(&c, &l), false, 5, Some(7));
    let (c, l) = select6(&[0x19, 0x02, 0, 0]);
    assert_ifc(&t.check(&c, &l), false, 4, Some(5));
    let (c, l) = select6(&[0x48, 0x02, 0, 0]);
    assert_ifc(&t.check(&c, &l), false, 4, Some(6));
    // The first (valid) page of a list with a bad second page is not applied either.
    let mut both = caching(false);
    both.extend_from_slice(&[0x19, 0x02, 0, 0]);
    let (c, l) = select6(&both);
    t.check(&c, &l);
    assert_eq!(
        t.ok(&cdb::mode_sense6(true, 0, 0x08, 0, 255), &[])[6] & 0x04,
        0x04
    );
}

#[test]
fn mode_select_length_and_cdb_errors() {
    let t = Harness::new(512, 10);
    let (mut c, l) = select6(&caching(true));
    // Page runs past the parameter list.
    c[4] = 10;
    assert_illegal(&t.check(&c, &l), 0x1A, 0);
    // Shorter than the header.
    c[4] = 3;
    assert_illegal(&t.check(&c, &l), 0x1A, 0);
    // Less Data-Out than the CDB announces.
    c[4] = 24;
    assert_illegal(&t.check(&c, &l[..20]), 0x1A, 0);
    // SP=1 and PF=0.
    c[1] = 0x11;
    assert_ifc(&t.check(&c, &l), true, 1, Some(0));
    c[1] = 0x00;
    assert_ifc(&t.check(&c, &l), true, 1, Some(4));
    // Length 0 is a no-op.
    t.ok(&[0x15, 0x10, 0, 0, 0, 0], &[]);
}

#[test]
fn mode_select_block_descriptor_and_select10() {
    let t = Harness::new(512, 10);
    let mut l = vec![0, 0, 0, 8, 0, 0, 0, 10, 0, 0, 2, 0];
    l.extend_from_slice(&caching(true));
    t.ok(&[0x15, 0x10, 0, 0, l.len() as u8, 0], &l);
    l[10] = 0x10; // 4096-byte blocks: not ours
    assert_ifc(
        &t.check(&[0x15, 0x10, 0, 0, l.len() as u8, 0], &l),
        false,
        9,
        Some(7),
    );
    // MODE SELECT(10) turning on D_SENSE.
    let mut l = vec![0u8; 8];
    l.extend_from_slice(&[0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0]);
    t.ok(&[0x55, 0x10, 0, 0, 0, 0, 0, 0, l.len() as u8, 0], &l);
    let (r, _) = t.run(&cdb::read16(u64::MAX, 1, false), &[]);
    assert_eq!(r.sense_bytes().unwrap()[0], 0x72);
    // A LU reset restores the default (fixed format).
    assert!(t.target.reset(crate::ResetKind::LogicalUnit(0), 1));
    let _ = t.run(&[0; 6], &[]);
    let (r, _) = t.run(&cdb::read16(u64::MAX, 1, false), &[]);
    assert_eq!(r.sense_bytes().unwrap()[0], 0x70);
}
