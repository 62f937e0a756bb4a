use std::sync::atomic::Ordering;

use crate::cdb::{self, copy_list, BlockCopy};
use crate::field::{be16, be32};
use crate::testutil::*;

fn seg(source: u16, destination: u16, blocks: u16, from: u64, to: u64) -> BlockCopy {
    BlockCopy {
        source,
        destination,
        blocks,
        source_lba: from,
        destination_lba: to,
    }
}

fn xcopy(t: &Harness, list: &[u8]) -> crate::CommandResult {
    t.run(&cdb::extended_copy(list.len() as u32), list).0
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i / 7) as u8 ^ seed).collect()
}

#[test]
fn copies_between_two_lus_and_within_one() {
    let (t, second) = Harness::two_lus(
        VecDevice::new(512, 10_000),
        VecDevice::new(512, 10_000),
        false,
    );
    let data = pattern(3000 * 512, 0x5A);
    t.ok(&cdb::write16(100, 3000, false), &data);
    let list = copy_list(
        1,
        true,
        &[(1, 3, &LU0, 512), (1, 3, &LU1, 512)],
        &[seg(0, 1, 3000, 100, 7000), seg(0, 0, 1000, 100, 5000)],
    );
    let r = xcopy(&t, &list);
    assert!(r.is_good(), "{r:?}");
    assert_eq!(
        &second.data.lock().unwrap()[7000 * 512..10_000 * 512],
        &data[..]
    );
    assert_eq!(
        t.ok(&cdb::read16(5000, 1000, false), &[]),
        &data[..1000 * 512]
    );
    // The status was held: two segments, every byte.
    let d = t.ok(&cdb::receive_copy_results(0, 1, 1024), &[]);
    assert_eq!(d.len(), 12);
    assert_eq!(be32(&d, 0), 8);
    assert_eq!(d[4], 0x01, "completed without error");
    assert_eq!(be16(&d, 5), 2);
    assert_eq!((d[7], be32(&d, 8)), (0, 4000 * 512));
    // Returned once, then gone; another nexus never had it.
    assert_illegal(
        &t.check(&cdb::receive_copy_results(0, 1, 1024), &[]),
        0x24,
        0,
    );
}

#[test]
fn overlapping_copies_within_a_lu_copy_like_memmove() {
    let t = Harness::new(512, 20_000);
    let data = pattern(5000 * 512, 3);
    t.ok(&cdb::write16(0, 5000, false), &data);
    // Forwards over itself (destination after the source, overlapping by 4000 blocks, more
    // than one piece).
    let list = copy_list(2, false, &[(1, 3, &LU0, 512)], &[seg(0, 0, 5000, 0, 1000)]);
    assert!(xcopy(&t, &list).is_good());
    assert_eq!(t.ok(&cdb::read16(1000, 5000, false), &[]), data);
    // Backwards over itself.
    let list = copy_list(3, false, &[(1, 3, &LU0, 512)], &[seg(0, 0, 5000, 1000, 0)]);
    assert!(xcopy(&t, &list).is_good());
    assert_eq!(t.ok(&cdb::read16(0, 5000, false), &[]), data);
}

#[test]
fn segment_errors_are_copy_aborted_after_the_segments_before() {
    let (t, second) = Harness::two_lus(VecDevice::new(512, 1000), VecDevice::new(512, 1000), false);
    t.ok(&cdb::write16(0, 10, false), &[9; 5120]);
    let luns: &[(u8, u8, &[u8], u32)] = &[(1, 3, &LU0, 512), (1, 3, &LU1, 512)];
    let cases: [(BlockCopy, (u8, u8)); 4] = [
        (seg(0, 2, 1, 0, 0), (0x08, 0x04)),    // no CSCD 2
        (seg(0, 1, 10, 0, 995), (0x0D, 0x02)), // past the destination's end
        (seg(0, 1, 10, 995, 0), (0x0D, 0x03)), // past the source's end
        (seg(0, 1, 1, u64::MAX, 0), (0x0D, 0x03)),
    ];
    for (bad, (asc, ascq)) in cases {
        let list = copy_list(4, true, luns, &[seg(0, 1, 10, 0, 500), bad]);
        let s = xcopy(&t, &list).sense.unwrap();
        assert_eq!((s.key.0, s.asc, s.ascq), (0x0A, asc, ascq), "{bad:?}: {s}");
        // The first segment was done; the status says one segment, with an error.
        let d = t.ok(&cdb::receive_copy_results(0, 4, 1024), &[]);
        assert_eq!((d[4], be16(&d, 5)), (0x02, 1));
    }
    assert!(second.data.lock().unwrap()[500 * 512..510 * 512]
        .iter()
        .all(|&b| b == 9));
    // A designator naming no LU of the target, and a wrong block size.
    let other = [0x60u8; 16];
    let list = copy_list(5, false, &[(1, 3, &other, 512)], &[seg(0, 0, 1, 0, 1)]);
    assert_eq!(xcopy(&t, &list).sense.unwrap().asc, 0x08);
    let list = copy_list(5, false, &[(1, 3, &LU0, 4096)], &[seg(0, 0, 1, 0, 1)]);
    assert_eq!(xcopy(&t, &list).sense.unwrap().key.0, 0x0A);
    // T10 vendor ID designators name LUs too.
    let t10 = crate::designator::t10(t.lu().config());
    let list = copy_list(6, false, &[(2, 1, &t10[..20], 512)], &[seg(0, 0, 1, 0, 1)]);
    assert_eq!(
        xcopy(&t, &list).sense.unwrap().asc,
        0x08,
        "a cut designator names nothing"
    );
}

#[test]
fn parameter_list_errors_are_illegal_requests() {
    let t = Harness::new(512, 100);
    let list = copy_list(1, true, &[(1, 3, &LU0, 512)], &[seg(0, 0, 1, 0, 1)]);
    // Zero length is not an error; a short one is.
    t.ok(&cdb::extended_copy(0), &[]);
    assert_illegal(&t.check(&cdb::extended_copy(16 + 31), &list), 0x1A, 0);
    let mut fc = list.clone();
    fc[16] = 0xE0;
    assert_illegal(
        &t.check(&cdb::extended_copy(fc.len() as u32), &fc),
        0x26,
        0x07,
    );
    // A held list identifier in use; the same identifier once the copy is over is fine.
    assert!(xcopy(&t, &list).is_good());
    assert!(xcopy(&t, &list).is_good());
    // Read-only destination: copy aborted, write protected.
    let ro = Harness::read_only(512, 100);
    let s = xcopy(&ro, &list).sense.unwrap();
    assert_eq!((s.key.0, s.asc), (0x0A, 0x27));
}

#[test]
fn zeros_copied_to_a_thin_lu_are_deallocated() {
    let (t, second) = Harness::two_lus(
        VecDevice {
            thin: true,
            ..VecDevice::new(512, 10_000)
        },
        VecDevice {
            thin: true,
            ..VecDevice::new(512, 10_000)
        },
        true,
    );
    t.ok(&cdb::write16(2048, 8, false), &[1; 4096]);
    second.data.lock().unwrap().fill(0xEE);
    second.mapped.lock().unwrap().fill(true);
    let list = copy_list(
        1,
        false,
        &[(1, 3, &LU0, 512), (1, 3, &LU1, 512)],
        &[seg(0, 1, 6144, 0, 0)],
    );
    assert!(xcopy(&t, &list).is_good());
    let mapped = second.mapped.lock().unwrap().clone();
    assert!(
        mapped[..2048].iter().all(|&m| !m),
        "a zero piece is deallocated"
    );
    assert!(
        mapped[2048..4096].iter().all(|&m| m),
        "the piece with data is written"
    );
    assert!(mapped[4096..6144].iter().all(|&m| !m));
    assert!(mapped[6144..].iter().all(|&m| m), "outside the copy");
    let data = second.data.lock().unwrap();
    assert!(data[..2048 * 512].iter().all(|&b| b == 0));
    assert!(data[2048 * 512..2056 * 512].iter().all(|&b| b == 1));
}

#[test]
fn an_aborted_copy_stops_and_says_so() {
    let t = Harness::new(512, 100_000);
    let list = copy_list(
        9,
        true,
        &[(1, 3, &LU0, 512)],
        &[seg(0, 0, 50_000, 0, 50_000)],
    );
    let abort = crate::AbortSignal::new();
    abort.abort();
    let (r, _) = t.run_with(
        &cdb::extended_copy(list.len() as u32),
        &list,
        None,
        Some(&abort),
    );
    assert_eq!(r.sense.unwrap().key.0, 0x0B);
    assert_eq!(t.dev.writes.load(Ordering::Relaxed), 0);
    let d = t.ok(&cdb::receive_copy_results(0, 9, 1024), &[]);
    assert_eq!((d[4], be16(&d, 5), be32(&d, 8)), (0x02, 0, 0));
    // Nexus loss forgets held statuses.
    assert!(xcopy(&t, &copy_list(10, true, &[(1, 3, &LU0, 512)], &[])).is_good());
    t.target.nexus_gone(t.nexus);
    let _ = t.run(&[0; 6], &[]);
    assert_illegal(
        &t.check(&cdb::receive_copy_results(0, 10, 1024), &[]),
        0x24,
        0,
    );
}

#[test]
fn operating_parameters_inquiry_and_vpd_agree() {
    let t = Harness::new(4096, 100);
    let d = t.ok(&cdb::receive_copy_results(3, 0, 1024), &[]);
    assert_eq!(be16(&d, 8), crate::copy_list::MAX_CSCD_DESCRIPTORS);
    assert_eq!(be16(&d, 10), crate::copy_list::MAX_SEGMENT_DESCRIPTORS);
    assert_eq!(be32(&d, 16), 65535 * 4096);
    assert_eq!(t.ok(&cdb::receive_copy_results(3, 0, 10), &[]).len(), 10);
    // Unsupported service actions (RECEIVE DATA, FAILED SEGMENT DETAILS) are invalid fields.
    assert_ifc(
        &t.check(&cdb::receive_copy_results(1, 0, 1024), &[]),
        true,
        1,
        None,
    );
    assert_eq!(t.ok(&cdb::inquiry(None, 36), &[])[5] & 0x08, 0x08, "3PC");
    let page = t.ok(&cdb::inquiry(Some(0x8F), 1024), &[]);
    assert_eq!(usize::from(be16(&page, 2)) + 4, page.len());
    let pages = t.ok(&cdb::inquiry(Some(0), 255), &[]);
    assert!(pages[4..].contains(&0x8F));
}
