//! `sluice target --rbd POOL/IMAGE` against a real single-node Ceph cluster
//! (scripts/ceph-cluster): the LU serves the image's blocks both ways (data put in the image
//! with `rbd import` is read through iSCSI; data written through iSCSI is in `rbd export`),
//! a thin RBD LU unmaps, writes the same block and compares and writes through librbd's own
//! operations (what the image holds afterwards checked with `rbd export`, the miscompare
//! offset in the sense data), an `rbd resize` reaches READ CAPACITY and a live session's unit
//! attention,
//! `sluice bench --verify` finds no mismatch, libiscsi's whole conformance suite through two
//! portal groups ends every test as it does on a memory LU (but for the capabilities an RBD LU
//! does not offer yet, named in `support::cunit::RBD_LACKS`), and a target whose cluster is
//! unreachable or whose image is missing stops with an error saying so.
//!
//! One cluster serves the whole file (about 10 s to start, 5 s to stop).

mod support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_test_support::CephCluster;
use support::cunit::{self, Outcome};
use support::{require_tool, TargetProcess};

const MIB: usize = 1 << 20;

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

fn succeed(args: &[&str]) -> Output {
    let out = sluice(args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `--rbd` flags reaching `c` as client.sluice (the RBD profile on the pool only).
fn cluster_flags(c: &CephCluster) -> Vec<String> {
    vec![
        "--ceph-conf".into(),
        c.conf_file().display().to_string(),
        "--ceph-id".into(),
        "sluice".into(),
        "--ceph-keyring".into(),
        c.keyring("sluice").display().to_string(),
    ]
}

/// Starts a target serving `luns` (`--rbd` specs) through two portal groups, 127.0.0.1 (TPGT 1)
/// and 127.0.0.2 (TPGT 2).
fn start_target(c: &CephCluster, luns: &[&str]) -> TargetProcess {
    let mut args: Vec<String> = vec!["--listen".into(), "127.0.0.2:0,2".into()];
    for l in luns {
        args.extend(["--rbd".into(), (*l).into()]);
    }
    args.extend(cluster_flags(c));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = TargetProcess::start(&args);
    assert_eq!(t.urls.len(), 2 * luns.len(), "{:?}", t.urls);
    t
}

/// The URLs of LUN `lun` through each portal.
fn lun_urls(t: &TargetProcess, lun: u16) -> Vec<&str> {
    let suffix = format!("/{lun}");
    let urls: Vec<&str> = t
        .urls
        .iter()
        .map(String::as_str)
        .filter(|u| u.ends_with(&suffix))
        .collect();
    assert_eq!(urls.len(), 2, "{:?}", t.urls);
    urls
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn rbd_lun_end_to_end() {
    require_tool("iscsi-test-cu", "libiscsi-bin");
    let c = CephCluster::start();
    let dir = tempfile::tempdir().unwrap();
    blocks_cross_between_rbd_and_iscsi(&c, dir.path());
    thin_lu_unmap_write_same_compare_and_write_and_resize(&c, dir.path());
    bench_verify_and_conformance(&c);
    unreachable_cluster_and_missing_image_are_reported(&c, dir.path());
}

/// Data imported into the image reads back through iSCSI; data written through iSCSI is in
/// the image.
fn blocks_cross_between_rbd_and_iscsi(c: &CephCluster, dir: &Path) {
    let seeded = pattern(1, 16 * MIB);
    let file = dir.join("seed.img");
    std::fs::write(&file, &seeded).unwrap();
    c.rbd(&["import", file.to_str().unwrap(), "rbd/seeded"]);
    let t = start_target(c, &["rbd/seeded"]);
    let url = lun_urls(&t, 0)[0];

    // Through iSCSI, 1 MiB straddling the first 4 MiB object boundary.
    let read = dir.join("read.bin");
    let offset = 3 * MIB + 512;
    succeed(&[
        "read",
        url,
        "--offset",
        &offset.to_string(),
        "--length",
        &MIB.to_string(),
        "--output",
        read.to_str().unwrap(),
    ]);
    assert!(
        std::fs::read(&read).unwrap() == seeded[offset..offset + MIB],
        "the image's blocks read through iSCSI differ from what was imported"
    );

    // Written through iSCSI, then exported by librbd's own tool.
    let written = pattern(2, 2 * MIB);
    let input = dir.join("write.bin");
    std::fs::write(&input, &written).unwrap();
    let offset = 7 * MIB;
    succeed(&[
        "write",
        url,
        "--offset",
        &offset.to_string(),
        "--input",
        input.to_str().unwrap(),
    ]);
    let exported = dir.join("export.img");
    c.rbd(&["export", "rbd/seeded", exported.to_str().unwrap()]);
    let image = std::fs::read(&exported).unwrap();
    assert_eq!(image.len(), seeded.len());
    assert!(
        image[offset..offset + 2 * MIB] == written[..],
        "what iSCSI wrote is not in the image"
    );
    assert!(
        image[..offset] == seeded[..offset],
        "blocks before the write changed"
    );
    assert!(
        image[offset + 2 * MIB..] == seeded[offset + 2 * MIB..],
        "blocks after the write changed"
    );

    // READ CAPACITY reports the image's size.
    let out = succeed(&["readcap", url, "--json"]);
    let cap: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cap["block_size"], 512, "{cap}");
    assert_eq!(cap["blocks"], (16 * MIB / 512) as u64, "{cap}");
}

/// What `rbd export` says the image holds from `offset`, `len` bytes.
fn exported(c: &CephCluster, dir: &Path, image: &str, offset: usize, len: usize) -> Vec<u8> {
    let file = dir.join(format!("{}.export", image.replace('/', "-")));
    let _ = std::fs::remove_file(&file);
    c.rbd(&["export", image, file.to_str().unwrap()]);
    std::fs::read(&file).unwrap()[offset..offset + len].to_vec()
}

/// A one-descriptor UNMAP parameter list (SBC-4 5.31.2).
fn unmap_list(lba: u64, blocks: u32) -> Vec<u8> {
    let mut p = vec![0u8; 8];
    p[0..2].copy_from_slice(&22u16.to_be_bytes());
    p[2..4].copy_from_slice(&16u16.to_be_bytes());
    p.extend_from_slice(&lba.to_be_bytes());
    p.extend_from_slice(&blocks.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    p
}

fn cdb16(op: u8, flags: u8, lba: u64, blocks: u32) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = op;
    c[1] = flags;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// A thin RBD LU (`--thin`): the Logical Block Provisioning page offers UNMAP and WRITE SAME
/// with UNMAP, both leave zeros where they went (whole objects and parts of objects alike),
/// WRITE SAME repeats its block, COMPARE AND WRITE writes on a match and reports the first
/// differing byte on a miscompare without writing, each seen in the image by `rbd export`;
/// then `rbd resize` reaches a live session as CAPACITY DATA HAS CHANGED and READ CAPACITY.
fn thin_lu_unmap_write_same_compare_and_write_and_resize(c: &CephCluster, dir: &Path) {
    use sluice_initiator::blocking::Session;
    use sluice_initiator::{Command, IscsiUrl, ScsiStatus};

    c.create_image("thin", 16);
    let mut args: Vec<String> = vec!["--thin".into(), "--rbd".into(), "rbd/thin".into()];
    args.extend(cluster_flags(c));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t = TargetProcess::start(&args);
    let s = Session::connect_url(&IscsiUrl::parse(&t.urls[0]).unwrap()).unwrap();
    let lbp = s.vpd(0, 0xb2).unwrap();
    assert_eq!(lbp[1] & 0xc0, 0xc0, "LBPU and LBPWS: {lbp:?}");
    assert_eq!(lbp[1] & 0x1c, 0x04, "LBPRZ=1: {lbp:?}");
    // The first READ CAPACITY(16) meets the new nexus's power-on unit attention (INQUIRY
    // does not report it) and falls back to READ CAPACITY(10), which takes it.
    let _ = s.read_capacity(0).unwrap();
    let cap = s.read_capacity(0).unwrap();
    assert!(cap.thin_provisioned, "{cap:?}");

    let bs = 512usize;
    let data = pattern(3, 10 * MIB);
    for (i, chunk) in data.chunks(MIB).enumerate() {
        s.write(0, (i * MIB / bs) as u64, chunk.to_vec().into(), bs as u32)
            .unwrap();
    }

    // UNMAP of 1 MiB..7 MiB: the ends of the first two 4 MiB objects, never a whole one.
    let mut unmap = vec![0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0];
    unmap[7..9].copy_from_slice(&24u16.to_be_bytes());
    let list = unmap_list((MIB / bs) as u64, (6 * MIB / bs) as u32);
    s.execute(Command::write(0, &unmap, list))
        .unwrap()
        .check()
        .unwrap();
    // WRITE SAME(16) of one block over 8 MiB..9 MiB, then WRITE SAME(16) with UNMAP over
    // 9 MiB..10 MiB.
    let block = pattern(4, bs);
    let same = cdb16(0x93, 0, (8 * MIB / bs) as u64, (MIB / bs) as u32);
    s.execute(Command::write(0, &same, block.clone()))
        .unwrap()
        .check()
        .unwrap();
    let same_unmap = cdb16(0x93, 0x08, (9 * MIB / bs) as u64, (MIB / bs) as u32);
    s.execute(Command::write(0, &same_unmap, vec![0u8; bs]))
        .unwrap()
        .check()
        .unwrap();

    let mut expected = data.clone();
    expected[MIB..7 * MIB].fill(0);
    for b in expected[8 * MIB..9 * MIB].chunks_mut(bs) {
        b.copy_from_slice(&block);
    }
    expected[9 * MIB..10 * MIB].fill(0);
    let through_iscsi = s.read(0, 0, (10 * MIB / bs) as u32, bs as u32).unwrap();
    assert!(
        through_iscsi[..] == expected[..],
        "the LU reads other blocks than expected"
    );
    assert!(
        exported(c, dir, "rbd/thin", 0, 10 * MIB) == expected,
        "the image holds other blocks than expected"
    );

    // COMPARE AND WRITE of block 9 (inside an object): a match writes.
    let lba = 9u64;
    let at = lba as usize * bs;
    let new = pattern(5, bs);
    let mut caw = vec![0u8; 16];
    caw[0] = 0x89;
    caw[2..10].copy_from_slice(&lba.to_be_bytes());
    caw[13] = 1;
    let mut halves = expected[at..at + bs].to_vec();
    halves.extend_from_slice(&new);
    let out = s.execute(Command::write(0, &caw, halves)).unwrap();
    assert_eq!(out.status, ScsiStatus::Good, "{out:?}");
    expected[at..at + bs].copy_from_slice(&new);
    // A miscompare at byte 37 of the block: MISCOMPARE, 1Dh/00h, INFORMATION 37; nothing
    // written.
    let mut wrong = new.clone();
    wrong[37] ^= 0xff;
    let mut halves = wrong;
    halves.extend_from_slice(&pattern(6, bs));
    let out = s.execute(Command::write(0, &caw, halves)).unwrap();
    assert_eq!(out.status, ScsiStatus::CheckCondition, "{out:?}");
    let sense = out.sense.expect("sense data");
    assert_eq!(sense.key.0, 0x0e, "{sense:?}");
    assert_eq!((sense.asc, sense.ascq), (0x1d, 0x00), "{sense:?}");
    assert_eq!(sense.information, Some(37), "{sense:?}");
    assert!(
        exported(c, dir, "rbd/thin", 0, 10 * MIB) == expected,
        "COMPARE AND WRITE left other blocks than expected"
    );

    // `rbd resize` by another client: the live session hears of it, READ CAPACITY follows.
    c.rbd(&["resize", "--size", "32M", "rbd/thin"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let ua = loop {
        let out = s.execute(Command::none(0, &[0u8; 6])).unwrap();
        if out.status == ScsiStatus::CheckCondition {
            break out.sense.expect("sense data");
        }
        assert!(
            Instant::now() < deadline,
            "no unit attention after the resize"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(ua.key.0, 0x06, "{ua:?}");
    assert_eq!(
        (ua.asc, ua.ascq),
        (0x2a, 0x09),
        "CAPACITY DATA HAS CHANGED: {ua:?}"
    );
    assert_eq!(s.read_capacity(0).unwrap().blocks(), (32 * MIB / bs) as u64);
    s.logout().unwrap();
}

/// `sluice bench --verify` and libiscsi's whole suite, through both portal groups.
fn bench_verify_and_conformance(c: &CephCluster) {
    c.create_image("lun", 1024);
    let t = start_target(c, &["rbd/lun"]);
    let paths = lun_urls(&t, 0);

    let out = succeed(&[
        "bench", paths[0], "--rw", "randrw", "--bs", "8k", "--qd", "16", "--time", "3", "--size",
        "256M", "--verify", "--json", "--quiet",
    ]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["errors"], 0, "{r}");
    assert!(r["verify"]["checked"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["verify"]["errors"], 0, "{r}");

    let results = cunit::run_suite(&paths, "ALL", &[]);
    assert!(results.len() >= 230, "{} tests ran", results.len());
    // The same score as a memory LU seen the same way: each test ends the same way on both,
    // except where the RBD LU lacks a capability the memory LU has (below).
    let memory = TargetProcess::start_multipath(&["--memory", "1G"]);
    let on_memory = cunit::run_suite(&[&memory.urls[0], &memory.urls[1]], "ALL", &[]);
    let problems = cunit::differences(&results, &on_memory, cunit::RBD_LACKS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The suites that need the second path ran and passed.
    for (suite, count) in [
        ("PrinReadKeys", 2),
        ("ProutReserve", 13),
        ("MultipathIO", 2),
    ] {
        let passed = results
            .iter()
            .filter(|r| r.name.split('.').next() == Some(suite) && r.outcome == Outcome::Pass)
            .count();
        assert!(
            passed >= count,
            "{suite}: {passed} passed, expected {count}"
        );
    }
}

fn unreachable_cluster_and_missing_image_are_reported(c: &CephCluster, dir: &Path) {
    // The image is missing: the target says which, and exits.
    let mut args = vec!["target", "--listen", "127.0.0.1:0", "--rbd", "rbd/absent"];
    let flags = cluster_flags(c);
    args.extend(flags.iter().map(String::as_str));
    let out = sluice(&args);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rbd/absent does not exist"), "{err}");

    // No monitor at the configured address: a clear error within seconds, not a hang.
    let conf = dir.join("nowhere.conf");
    std::fs::write(&conf, "[global]\nmon host = [v2:127.0.0.1:9]\n").unwrap();
    let started = Instant::now();
    let out = sluice(&[
        "target",
        "--listen",
        "127.0.0.1:0",
        "--rbd",
        "rbd/lun",
        "--ceph-conf",
        conf.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no monitor answered"), "{err}");
    assert!(err.contains("nowhere.conf"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
