//! The `sluice` initiator commands against Debian's tgtd and istgt (both must be installed:
//! scripts/install-deps). Each daemon runs on 127.0.0.1 with ports we choose and is killed at
//! the end of its test.

mod client;

use client::peers::{istgt, tgtd, Daemon, DISK_BYTES};
use client::{json, ok, pattern};

/// discover, ls, inq, readcap, write + read verified, dd out identical.
fn exercise(d: &Daemon, lun: u16, digests: &[&str]) {
    let out = ok(&["discover", &d.portal]);
    assert!(out.contains(d.iqn), "{out}");
    let out = ok(&["ls", &d.portal]);
    assert!(out.contains(&format!("Target:{}", d.iqn)), "{out}");
    assert!(out.contains(&format!("Lun:{lun}")), "{out}");
    assert!(out.contains("Size:32M"), "{out}");
    let url = d.url(lun);
    let v = json(&["inq", &url]);
    assert_eq!(v["standard"]["device_type"], 0, "{v}");
    let v = json(&["readcap", &url]);
    assert_eq!(v["bytes"], DISK_BYTES);

    let dir = tempfile::tempdir().unwrap();
    let (input, back) = (dir.path().join("in"), dir.path().join("back"));
    let data = pattern(1 << 20, 42);
    std::fs::write(&input, &data).unwrap();
    let mut args = vec![
        "write",
        &url,
        "--offset",
        "64K",
        "-i",
        input.to_str().unwrap(),
    ];
    args.extend(digests);
    ok(&args);
    let mut args = vec![
        "read",
        &url,
        "--offset",
        "64K",
        "--length",
        "1M",
        "-o",
        back.to_str().unwrap(),
    ];
    args.extend(digests);
    ok(&args);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let mut args = vec![
        "dd",
        "--if",
        &url,
        "--of",
        back.to_str().unwrap(),
        "--length",
        "2M",
    ];
    args.extend(digests);
    args.push("--json");
    let v: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
    let copy = std::fs::read(&back).unwrap();
    assert_eq!(&copy[64 << 10..(64 << 10) + data.len()], &data[..]);
    assert_eq!(v["bytes"], 2 << 20);
}

#[test]
fn tgtd_interop() {
    let d = tgtd();
    exercise(&d, 1, &[]);
    exercise(
        &d,
        1,
        &["--header-digest", "crc32c", "--data-digest", "crc32c"],
    );
}

#[test]
fn istgt_interop() {
    let d = istgt();
    exercise(&d, 0, &[]);
}

/// istgt advances ExpCmdSN for immediate PDUs (see docs/initiator.md): a ping (immediate
/// NOP-Out) followed by commands must still work.
#[test]
fn istgt_immediate_pdus_keep_the_session_in_step() {
    let d = istgt();
    let url = sluice_initiator::IscsiUrl::parse(&d.url(0)).unwrap();
    let s = sluice_initiator::blocking::Session::connect_url(&url).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for _ in 0..3 {
        rt.block_on(s.as_async().ping()).unwrap();
        s.read(0, 0, 8, 512).unwrap();
    }
    s.logout().unwrap();
}
