use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::cdb;
use crate::testutil::*;
use crate::{SanitizeOptions, SenseData};

fn sanitizing(thin: bool, rate: Option<u64>) -> Harness {
    let dev = VecDevice {
        thin,
        ..VecDevice::new(512, 4096)
    };
    Harness::build_on(dev, |c| {
        c.options.thin = thin;
        c.options.sanitize = Some(SanitizeOptions {
            overwrite_bytes_per_s: rate,
        });
    })
}

fn overwrite_list(count: u8, pattern: &[u8]) -> Vec<u8> {
    let mut l = vec![count, 0];
    l.extend_from_slice(&(pattern.len() as u16).to_be_bytes());
    l.extend_from_slice(pattern);
    l
}

fn sanitize(t: &Harness, sa: u8, immed: bool, list: &[u8]) -> crate::CommandResult {
    t.run(&cdb::sanitize(sa, immed, list.len() as u16), list).0
}

fn is_sanitizing(s: &SenseData) -> bool {
    (s.key.0, s.asc, s.ascq) == (2, 0x04, 0x1B)
}

#[test]
fn overwrite_writes_the_pattern_to_every_block() {
    let t = sanitizing(false, None);
    t.ok(&cdb::write16(0, 10, false), &[b'a'; 5120]);
    let r = sanitize(&t, 0x01, false, &overwrite_list(1, &[0xAA; 512]));
    assert!(r.is_good(), "{r:?}");
    assert!(t.dev.data.lock().unwrap().iter().all(|&b| b == 0xAA));
    assert!(t.dev.flushes.load(Ordering::Relaxed) >= 1);
    // A short pattern repeats from the start of each block; INVERT flips every other pass.
    let r = sanitize(&t, 0x01, false, &overwrite_list(0x80 | 2, &[1, 2, 3]));
    assert!(r.is_good());
    let block = t.ok(&cdb::read16(4095, 1, false), &[]);
    let want: Vec<u8> = [!1u8, !2, !3].iter().copied().cycle().take(512).collect();
    assert_eq!(block, want);
}

#[test]
fn overwrite_parameter_list_is_validated() {
    let t = sanitizing(false, None);
    let good = overwrite_list(1, &[0xAA; 512]);
    for len in 0..5u16 {
        let s = t.check(&cdb::sanitize(1, false, len), &good[..len as usize]);
        assert_ifc(&s, true, 7, Some(7));
    }
    assert_ifc(
        &t.check(&cdb::sanitize(1, false, 517), &[0; 517]),
        true,
        7,
        Some(7),
    );
    let mut zero_count = good.clone();
    zero_count[0] = 0;
    assert_ifc(
        &t.check(&cdb::sanitize(1, false, 516), &zero_count),
        false,
        0,
        Some(4),
    );
    let mut zero_pattern = good.clone();
    zero_pattern[2..4].copy_from_slice(&[0, 0]);
    assert_ifc(
        &t.check(&cdb::sanitize(1, false, 516), &zero_pattern),
        false,
        2,
        Some(7),
    );
    let mut too_long = good.clone();
    too_long[2..4].copy_from_slice(&516u16.to_be_bytes());
    assert_ifc(
        &t.check(&cdb::sanitize(1, false, 516), &too_long),
        false,
        2,
        Some(7),
    );
    // BLOCK ERASE and EXIT FAILURE MODE take no list; CRYPTOGRAPHIC ERASE is not offered.
    assert_ifc(
        &t.check(&cdb::sanitize(0x1F, false, 8), &[0; 8]),
        true,
        7,
        Some(7),
    );
    assert_ifc(&t.check(&cdb::sanitize(0x03, false, 0), &[]), true, 1, None);
    for sa in [0u8, 4, 0x1E] {
        assert_ifc(&t.check(&cdb::sanitize(sa, false, 0), &[]), true, 1, None);
    }
    // BLOCK ERASE needs a thin LU: on this one it is not offered either.
    assert_ifc(&t.check(&cdb::sanitize(0x02, false, 0), &[]), true, 1, None);
    t.ok(&cdb::sanitize(0x1F, false, 0), &[]);
}

#[test]
fn block_erase_deallocates_everything() {
    let t = sanitizing(true, None);
    t.ok(&cdb::write16(0, 4096, false), &vec![b'a'; 4096 * 512]);
    t.ok(&cdb::sanitize(0x02, false, 0), &[]);
    assert!(t.dev.data.lock().unwrap().iter().all(|&b| b == 0));
    assert!(t.dev.mapped.lock().unwrap().iter().all(|&m| !m));
    let d = t.ok(&cdb::get_lba_status(0, 256), &[]);
    assert_eq!((crate::field::be32(&d, 16), d[20]), (4096, 1));
    // WABEREQ=01b: reads after BLOCK ERASE succeed.
    assert_eq!(t.ok(&cdb::inquiry(Some(0xB1), 64), &[])[7] >> 6, 1);
    assert_illegal(&t.check(&cdb::sanitize(0x02, false, 8), &[0; 8]), 0x24, 0);
}

#[test]
fn a_running_sanitize_blocks_the_medium_and_reports_progress() {
    // 2 MiB at 4 MiB/s: about half a second.
    let t = sanitizing(false, Some(4 << 20));
    let other = t.nexus(2);
    let _ = other.run(&[0; 6], &[]);
    let started = Instant::now();
    t.ok(
        &cdb::sanitize(0x01, true, 516),
        &overwrite_list(1, &[0x11; 512]),
    );
    std::thread::sleep(Duration::from_millis(100));
    for c in [
        cdb::test_unit_ready().to_vec(),
        cdb::read16(0, 1, false).to_vec(),
        vec![0x1B, 1, 0, 0, 0x01, 0],
        cdb::read_capacity10().to_vec(),
        cdb::mode_sense6(false, 0, 0x3F, 0, 255).to_vec(),
    ] {
        assert!(is_sanitizing(&other.check(&c, &[])), "{c:02x?}");
    }
    other.ok(&cdb::inquiry(None, 36), &[]);
    other.ok(&cdb::report_luns(0, 64), &[]);
    // REQUEST SENSE: NOT READY, SANITIZE IN PROGRESS with a progress indication.
    let d = other.ok(&[0x03, 0, 0, 0, 18, 0], &[]);
    let s = SenseData::parse(&d).unwrap();
    assert!(is_sanitizing(&s));
    let [sksv, ..] = s.sense_key_specific.unwrap();
    assert_eq!(sksv & 0x80, 0x80);
    // A second SANITIZE, a reset and a lost nexus leave it running.
    assert!(is_sanitizing(
        &sanitize(&t, 0x01, false, &overwrite_list(1, &[0; 4]))
            .sense
            .unwrap()
    ));
    t.target.reset(crate::ResetKind::TargetCold, 1);
    t.target.nexus_gone(t.nexus);
    let _ = t.run(&[0; 6], &[]);
    assert!(is_sanitizing(&t.check(&[0; 6], &[])));
    while !t.run(&[0; 6], &[]).0.is_good() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the sanitize never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the rate was not kept"
    );
    assert!(t.dev.data.lock().unwrap().iter().all(|&b| b == 0x11));
}

#[test]
fn an_aborted_wait_leaves_the_sanitize_running() {
    let t = sanitizing(false, Some(8 << 20));
    let abort = crate::AbortSignal::new();
    let list = overwrite_list(1, &[0x22; 512]);
    let waiter = {
        let t = t.clone();
        let abort = abort.clone();
        std::thread::spawn(move || {
            t.run_with(&cdb::sanitize(1, false, 516), &list, None, Some(&abort))
                .0
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    abort.abort();
    let r = waiter.join().unwrap();
    assert_eq!(r.sense.unwrap().key.0, 0x0B);
    assert!(is_sanitizing(&t.check(&[0; 6], &[])));
    while !t.run(&[0; 6], &[]).0.is_good() {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(t.dev.data.lock().unwrap().iter().all(|&b| b == 0x22));
}

#[test]
fn a_failed_sanitize_is_failure_mode_until_exited() {
    let t = sanitizing(false, None);
    t.dev.fail.store(true, Ordering::Relaxed);
    let s = sanitize(&t, 0x01, false, &overwrite_list(1, &[0; 4]))
        .sense
        .unwrap();
    assert_eq!((s.key.0, s.asc, s.ascq), (3, 0x31, 0x03));
    t.dev.fail.store(false, Ordering::Relaxed);
    assert_eq!(t.check(&cdb::read16(0, 1, false), &[]).asc, 0x31);
    t.ok(&cdb::inquiry(None, 36), &[]);
    // Restricted mode (AUSE=0): EXIT FAILURE MODE is refused; a good sanitize ends it.
    assert_ifc(
        &t.check(&cdb::sanitize(0x1F, false, 0), &[]),
        true,
        1,
        Some(4),
    );
    let r = sanitize(&t, 0x01, false, &overwrite_list(1, &[5; 4]));
    assert!(r.is_good());
    t.ok(&cdb::read16(0, 1, false), &[]);
    // Unrestricted (AUSE=1): EXIT FAILURE MODE ends it.
    t.dev.fail.store(true, Ordering::Relaxed);
    let mut c = cdb::sanitize(0x01, false, 8);
    c[1] |= 0x20;
    assert_eq!(t.check(&c, &overwrite_list(1, &[0; 4])).asc, 0x31);
    t.dev.fail.store(false, Ordering::Relaxed);
    t.ok(&cdb::sanitize(0x1F, false, 0), &[]);
    t.ok(&cdb::read16(0, 1, false), &[]);
}

#[test]
fn sanitize_is_offered_only_where_configured_and_honours_write_protect() {
    let plain = Harness::new(512, 100);
    assert_illegal(
        &plain.check(&cdb::sanitize(1, false, 8), &overwrite_list(1, &[0; 4])),
        0x20,
        0,
    );
    let rsoc = |t: &Harness| {
        let d = t.ok(&[0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0], &[]);
        d[4..]
            .chunks(8)
            .filter(|e| e[0] == 0x48)
            .map(|e| e[3])
            .collect::<Vec<u8>>()
    };
    assert!(rsoc(&plain).is_empty());
    assert_eq!(rsoc(&sanitizing(false, None)), vec![0x01, 0x1F]);
    assert_eq!(rsoc(&sanitizing(true, None)), vec![0x01, 0x02, 0x1F]);
    // Software write protect (the Control page's SWP, set by another nexus) refuses it.
    let t = sanitizing(true, None);
    let other = t.nexus(2);
    let _ = other.run(&[0; 6], &[]);
    let control = [
        0, 0, 0, 0, 0x0A, 0x0A, 0x02, 0x10, 0x08, 0, 0, 0, 0, 0, 0, 0,
    ];
    other.ok(&[0x15, 0x10, 0, 0, 16, 0], &control);
    let _ = t.run(&[0; 6], &[]); // MODE PARAMETERS CHANGED
    for (sa, list) in [
        (1u8, overwrite_list(1, &[0; 4])),
        (2, vec![]),
        (0x1F, vec![]),
    ] {
        let s = sanitize(&t, sa, false, &list).sense.unwrap();
        assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0x02), "{sa:02x}");
    }
    let s = t.check(&cdb::write16(0, 1, false), &[0; 512]);
    assert_eq!((s.key.0, s.asc, s.ascq), (7, 0x27, 0x02));
    assert_eq!(
        t.ok(&cdb::mode_sense6(true, 0, 0x0A, 0, 255), &[])[2] & 0x80,
        0x80,
        "WP"
    );
    t.target.reset(crate::ResetKind::LogicalUnit(0), 1);
    let _ = t.run(&[0; 6], &[]);
    t.ok(&cdb::write16(0, 1, false), &[0; 512]);
}
