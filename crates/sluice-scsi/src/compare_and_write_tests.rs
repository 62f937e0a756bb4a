use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};

use crate::cdb;
use crate::testutil::*;

fn caw_data(expect: &[u8], new: &[u8]) -> Vec<u8> {
    [expect, new].concat()
}

#[test]
fn writes_when_the_medium_matches() {
    for bs in [512usize, 4096] {
        let t = Harness::new(bs as u32, 1000);
        for n in [1usize, 2, 255] {
            t.ok(&cdb::write16(3, n as u32, false), &vec![b'A'; n * bs]);
            let d = caw_data(&vec![b'A'; n * bs], &vec![b'B'; n * bs]);
            t.ok(&cdb::compare_and_write(3, n as u8, false), &d);
            assert_eq!(
                t.ok(&cdb::read16(3, n as u32, false), &[]),
                vec![b'B'; n * bs]
            );
        }
    }
}

#[test]
fn a_mismatch_writes_nothing_and_points_at_the_first_difference() {
    let t = Harness::new(512, 1000);
    for (n, at) in [
        (1usize, 0usize),
        (1, 511),
        (4, 4 * 512 - 27),
        (200, 100_000),
    ] {
        t.ok(&cdb::write16(10, n as u32, false), &vec![b'A'; n * 512]);
        let mut expect = vec![b'A'; n * 512];
        expect[at] = b'C';
        expect[n * 512 - 1] = b'C';
        let s = t.check(
            &cdb::compare_and_write(10, n as u8, false),
            &caw_data(&expect, &vec![b'B'; n * 512]),
        );
        assert_eq!((s.key.0, s.asc, s.ascq), (0x0E, 0x1D, 0), "{s}");
        assert_eq!(s.information, Some(at as u64));
        assert_eq!(
            t.ok(&cdb::read16(10, n as u32, false), &[]),
            vec![b'A'; n * 512]
        );
    }
    // Descriptor sense carries the same offset.
    let t = Harness::new(512, 10);
    t.ok(
        &[0x15, 0x10, 0, 0, 16, 0],
        &[0, 0, 0, 0, 0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    let s = t.check(
        &cdb::compare_and_write(0, 1, false),
        &caw_data(&[1; 512], &[2; 512]),
    );
    assert_eq!(s.format, crate::SenseFormat::Descriptor);
    assert_eq!(s.information, Some(0));
}

#[test]
fn data_out_must_be_both_halves_exactly() {
    let t = Harness::new(512, 100);
    let d = caw_data(&[0; 512], &[1; 512]);
    assert_ifc(
        &t.check(&cdb::compare_and_write(0, 1, false), &d[..1000]),
        true,
        13,
        Some(7),
    );
    // Four blocks announced for a one-block COMPARE AND WRITE: the transport took two.
    let (r, _) = t.run_with(&cdb::compare_and_write(0, 1, false), &d, Some(2048), None);
    assert_ifc(&r.sense.unwrap(), true, 13, Some(7));
    assert!(t.ok(&cdb::read16(0, 1, false), &[]).iter().all(|&b| b == 0));
    // NUMBER OF LOGICAL BLOCKS 0 with data (a 256-block request wrapped to 0): refused;
    // without data: nothing to do.
    let (r, _) = t.run_with(
        &cdb::compare_and_write(0, 0, false),
        &[],
        Some(512 * 512),
        None,
    );
    assert_ifc(&r.sense.unwrap(), true, 13, Some(7));
    t.ok(&cdb::compare_and_write(0, 0, false), &[]);
    let (r, _) = t.run_with(&cdb::compare_and_write(0, 1, false), &d, Some(1024), None);
    assert!(r.is_good());
}

#[test]
fn range_protect_write_protect_and_fua() {
    let t = Harness::new(512, 100);
    let d = caw_data(&[0; 512], &[1; 512]);
    for lba in [100u64, 1 << 63, u64::MAX] {
        assert_illegal(
            &t.check(&cdb::compare_and_write(lba, 1, false), &d),
            0x21,
            0,
        );
    }
    let mut c = cdb::compare_and_write(0, 1, false);
    c[1] = 0x20;
    assert_ifc(&t.check(&c, &d), true, 1, Some(7));
    t.ok(&cdb::compare_and_write(0, 1, true), &d);
    assert_eq!(t.dev.fua_writes.load(Ordering::Relaxed), 1);
    let ro = Harness::read_only(512, 100);
    assert_eq!(ro.check(&cdb::compare_and_write(0, 1, false), &d).key.0, 7);
    let bl = t.ok(&cdb::inquiry(Some(0xB0), 64), &[]);
    assert_eq!(bl[5], 255, "MAXIMUM COMPARE AND WRITE LENGTH");
}

/// Compare-and-write racing plain writes of the same blocks from other threads (nexuses):
/// every successful COMPARE AND WRITE found the exact value it compared, and the blocks are
/// never a mixture. A COMPARE AND WRITE that did not hold the LU exclusively would let a
/// write land between its comparison and its write.
#[test]
fn atomic_against_concurrent_writes() {
    const BLOCKS: usize = 255;
    const ROUNDS: usize = 500;
    let t = Harness::new(512, 1000);
    let pattern = |v: u8| vec![v; BLOCKS * 512];
    t.ok(&cdb::write16(0, BLOCKS as u32, false), &pattern(0));
    let barrier = Arc::new(Barrier::new(2));
    let writer = {
        let t = t.nexus(2);
        let barrier = Arc::clone(&barrier);
        std::thread::spawn(move || {
            let _ = t.run(&[0; 6], &[]);
            for round in 0..ROUNDS {
                barrier.wait();
                // The writer's values are odd, the compare-and-writer's even.
                let v = (2 * round + 1) as u8;
                t.ok(&cdb::write16(0, BLOCKS as u32, false), &pattern(v));
                barrier.wait();
            }
        })
    };
    for round in 0..ROUNDS {
        barrier.wait();
        // Compare against what the previous round left; the writer may or may not have
        // written yet.
        let seen = t.ok(&cdb::read16(0, 1, false), &[])[0];
        let (r, _) = t.run(
            &cdb::compare_and_write(0, BLOCKS as u8, false),
            &caw_data(&pattern(seen), &pattern((2 * round + 2) as u8)),
        );
        barrier.wait();
        let now = t.ok(&cdb::read16(0, BLOCKS as u32, false), &[]);
        let first = now[0];
        assert!(now.iter().all(|&b| b == first), "round {round}: torn data");
        let written = (2 * round + 1) as u8;
        let expected = if !r.is_good() {
            // The write came first: the comparison failed and wrote nothing.
            assert_eq!(r.sense.unwrap().key.0, 0x0E);
            written
        } else if seen == written {
            // The write came before the read: the comparison saw it and replaced it.
            (2 * round + 2) as u8
        } else {
            // The comparison saw the old value, so the write came after the whole COMPARE AND
            // WRITE. (Had it landed between comparison and write, it would be lost.)
            written
        };
        assert_eq!(first, expected, "round {round}: a write was lost");
    }
    writer.join().unwrap();
}
