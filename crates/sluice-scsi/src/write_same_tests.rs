use std::sync::atomic::Ordering;

use crate::cdb;
use crate::field::{be32, be64};
use crate::testutil::*;

fn block(bs: usize, seed: u8) -> Vec<u8> {
    (0..bs).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

#[test]
fn writes_the_block_everywhere_in_the_range() {
    for bs in [512u32, 4096] {
        let t = Harness::new(bs, 3000);
        let b = block(bs as usize, 5);
        t.ok(&cdb::write_same10(7, 2500, false), &b);
        let d = t.ok(&cdb::read16(6, 2502, false), &[]);
        assert!(d[..bs as usize].iter().all(|&x| x == 0));
        for blk in d[bs as usize..].chunks(bs as usize).take(2500) {
            assert_eq!(blk, &b[..]);
        }
        assert!(d[2501 * bs as usize..].iter().all(|&x| x == 0));
        // WRITE SAME(16), and zeros over part of it.
        t.ok(
            &cdb::write_same16(100, 10, false, false),
            &vec![0; bs as usize],
        );
        assert!(t
            .ok(&cdb::read16(100, 10, false), &[])
            .iter()
            .all(|&x| x == 0));
        assert_eq!(t.ok(&cdb::read16(110, 1, false), &[]), b);
    }
}

#[test]
fn zero_blocks_means_to_the_end_within_the_maximum() {
    let t = Harness::new(512, 1000);
    let b = block(512, 9);
    t.ok(&cdb::write_same10(990, 0, false), &b);
    assert_eq!(t.ok(&cdb::read16(999, 1, false), &[]), b);
    assert_eq!(t.ok(&cdb::read16(990, 1, false), &[]), b);
    t.ok(&cdb::write_same16(1000, 0, false, false), &b);
    for lba in [1001u64, 1 << 63, u64::MAX] {
        assert_illegal(
            &t.check(&cdb::write_same16(lba, 0, false, false), &b),
            0x21,
            0,
        );
    }
    assert_illegal(
        &t.check(&cdb::write_same16(999, 2, false, false), &b),
        0x21,
        0,
    );
    // Past MAXIMUM WRITE SAME LENGTH (1 GiB): refused, whether asked for or implied by 0.
    let max = crate::write_same::max_blocks(4096);
    let big = Harness::memory(4096, max + 10, |_| {});
    let bl = big.ok(&cdb::inquiry(Some(0xB0), 64), &[]);
    assert_eq!(be64(&bl, 36), max);
    let z = vec![0; 4096];
    assert_ifc(
        &big.check(&cdb::write_same16(0, max as u32 + 1, false, false), &z),
        true,
        10,
        Some(7),
    );
    assert_ifc(
        &big.check(&cdb::write_same16(9, 0, false, false), &z),
        true,
        10,
        Some(7),
    );
    big.ok(&cdb::write_same16(10, 0, false, false), &z);
}

#[test]
fn data_out_must_be_exactly_one_block() {
    let t = Harness::new(512, 100);
    let b = block(512, 1);
    assert_illegal(
        &t.check(&cdb::write_same10(0, 1, false), &b[..256]),
        0x1A,
        0,
    );
    assert_illegal(&t.check(&cdb::write_same10(0, 1, false), &[]), 0x1A, 0);
    // More announced than the one block asked for (the transport took only the block).
    let (r, _) = t.run_with(&cdb::write_same10(0, 1, false), &b, Some(1024), None);
    assert_illegal(&r.sense.unwrap(), 0x1A, 0);
    let (r, _) = t.run_with(&cdb::write_same10(0, 1, false), &b, Some(512), None);
    assert!(r.is_good());
    // NDOB: no Data-Out, zeros written.
    t.ok(&cdb::write16(0, 1, false), &b);
    t.ok(&cdb::write_same16(0, 1, false, true), &[]);
    assert!(t.ok(&cdb::read16(0, 1, false), &[]).iter().all(|&x| x == 0));
    let (r, _) = t.run_with(&cdb::write_same16(0, 1, false, true), &[], Some(512), None);
    assert_illegal(&r.sense.unwrap(), 0x1A, 0);
}

#[test]
fn unmap_bit_deallocates_zeros_on_thin_lus_only() {
    let t = Harness::thin(512, 1000);
    t.ok(&cdb::write16(0, 100, false), &vec![0xFF; 51200]);
    t.ok(&cdb::write_same10(10, 20, true), &[0; 512]);
    let d = t.ok(&cdb::read16(0, 100, false), &[]);
    assert!(d[10 * 512..30 * 512].iter().all(|&x| x == 0));
    assert!(d[..10 * 512].iter().all(|&x| x == 0xFF));
    let m = t.dev.mapped.lock().unwrap().clone();
    assert!(m[..10].iter().all(|&x| x) && m[10..30].iter().all(|&x| !x) && m[30]);
    // NDOB with UNMAP deallocates too, and so does UNMAP with any data.
    t.ok(&cdb::write_same16(40, 5, true, true), &[]);
    assert!(t.dev.mapped.lock().unwrap()[40..45].iter().all(|&x| !x));
    t.ok(&cdb::write16(40, 5, false), &vec![0xFF; 2560]);
    t.ok(&cdb::write_same16(40, 5, true, false), &block(512, 3));
    assert!(t.dev.mapped.lock().unwrap()[40..45].iter().all(|&x| !x));
    assert!(t
        .ok(&cdb::read16(40, 5, false), &[])
        .iter()
        .all(|&x| x == 0));
    // WRITE SAME of zeros without UNMAP maps the blocks (they stay mapped on a thin LU).
    t.ok(&cdb::write_same16(200, 5, false, false), &[0; 512]);
    assert!(t.dev.mapped.lock().unwrap()[200..205].iter().all(|&x| x));
    // To the end of the LU.
    t.ok(&cdb::write16(990, 10, false), &vec![1; 5120]);
    t.ok(&cdb::write_same10(990, 0, true), &[0; 512]);
    assert!(t.dev.mapped.lock().unwrap()[990..].iter().all(|&x| !x));
    // A fully provisioned LU refuses UNMAP=1 (LBPWS=0), as VPD B2h says.
    let thick = Harness::new(512, 100);
    assert_ifc(
        &thick.check(&cdb::write_same10(0, 1, true), &[0; 512]),
        true,
        1,
        Some(3),
    );
    assert_ifc(
        &thick.check(&cdb::write_same16(0, 1, true, false), &[0; 512]),
        true,
        1,
        Some(3),
    );
}

#[test]
fn anchor_protect_and_write_protect() {
    let t = Harness::thin(512, 100);
    for c in [
        [0x41u8, 0x10, 0, 0, 0, 0, 0, 0, 1, 0],
        [0x41, 0x18, 0, 0, 0, 0, 0, 0, 1, 0],
    ] {
        assert_ifc(&t.check(&c, &[0; 512]), true, 1, Some(4));
    }
    for p in 1..8u8 {
        let mut c = cdb::write_same16(0, 1, false, false);
        c[1] = p << 5;
        assert_ifc(&t.check(&c, &[0; 512]), true, 1, Some(7));
    }
    let ro = Harness::read_only(512, 100);
    let s = ro.check(&cdb::write_same10(0, 1, false), &[0; 512]);
    assert_eq!((s.key.0, s.asc), (7, 0x27));
    let _ = Ordering::Relaxed;
    let bl = t.ok(&cdb::inquiry(Some(0xB0), 64), &[]);
    assert_eq!(bl[4] & 1, 0, "WSNZ=0");
    assert_eq!(be32(&bl, 36), 0, "MAXIMUM WRITE SAME LENGTH high half");
}

#[test]
fn an_aborted_write_same_stops_between_pieces() {
    let t = Harness::new(512, 1 << 16);
    let abort = crate::AbortSignal::new();
    abort.abort();
    let b = block(512, 7);
    let (r, _) = t.run_with(
        &cdb::write_same16(0, 0, false, false),
        &b,
        Some(512),
        Some(&abort),
    );
    assert_eq!(r.sense.unwrap().key.0, 0x0B);
    assert_eq!(t.dev.writes.load(Ordering::Relaxed), 0);
}
