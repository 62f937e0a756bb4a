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

/// `sluice bench` with four connections per session (MC/S) against istgt (configured with
/// MaxConnections 4), under every policy, verifying every write; and one connection logged
/// out mid-run.
#[test]
fn bench_four_connections_against_istgt() {
    let d = istgt();
    let url = d.url(0);
    for policy in [
        "round-robin",
        "lu-affinity",
        "least-commands",
        "least-bytes",
    ] {
        let v = json(&[
            "bench",
            &url,
            "--connections",
            "4",
            "--policy",
            policy,
            "--rw",
            "randrw",
            "--bs",
            "4k:0.5,64k:0.5",
            "--qd",
            "8",
            "--time",
            "1500ms",
            "--verify",
            "--quiet",
        ]);
        assert_eq!(v["errors"], 0, "{policy}: {v}");
        assert_eq!(v["verify"]["errors"], 0, "{policy}: {v}");
        let cids: Vec<u64> = v["connections"]
            .as_array()
            .expect("connections")
            .iter()
            .filter_map(|c| c["cid"].as_u64())
            .collect();
        if policy == "lu-affinity" {
            // One LUN: all its commands on one connection.
            assert_eq!(cids.len(), 1, "{v}");
        } else {
            assert_eq!(cids, [0, 1, 2, 3], "{policy}: {v}");
        }
    }
    let v = json(&[
        "bench",
        &url,
        "--connections",
        "4",
        "--rw",
        "randrw",
        "--qd",
        "8",
        "--time",
        "2s",
        "--verify",
        "--logout-connection-after",
        "700ms",
        "--quiet",
    ]);
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["verify"]["errors"], 0, "{v}");
    assert_eq!(v["connection_logouts"][0]["ok"], true, "{v}");
}

/// Against tgtd, which answers MaxConnections=1, the session runs on one connection and says
/// so.
#[test]
fn bench_asking_tgtd_for_four_connections_runs_on_one() {
    let d = tgtd();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench",
            &d.url(1),
            "--connections",
            "4",
            "--rw",
            "randrw",
            "--qd",
            "4",
            "--time",
            "1s",
            "--verify",
            "--json",
            "--quiet",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("MaxConnections=1: running on 1 connection(s) of the 4 asked for"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["verify"]["errors"], 0, "{v}");
}
