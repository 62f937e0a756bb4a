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
/// MaxConnections 4), under every policy, verifying every write.
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
}

/// One connection of a four-connection session logged out (RFC 7143 section 11.14, reason 1)
/// while nothing is in flight: istgt accepts it and the session goes on, verified, over the
/// other three. Not under load: when a connection of an MC/S session ends, istgt clears every
/// queued task of the whole session from the logical unit and never answers them (see
/// docs/initiator.md). `sluice bench --logout-connection-after` under load is tested against
/// the sluice target (tests/bench.rs).
#[test]
fn istgt_connection_logout_leaves_the_session_on_the_others() {
    let d = istgt();
    let url = sluice_initiator::IscsiUrl::parse(&d.url(0)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let opts = sluice_initiator::ConnectOptions {
            connections: 4,
            ..Default::default()
        };
        let s = sluice_initiator::Session::connect_url_with(&url, opts)
            .await
            .unwrap();
        let cids = |s: &sluice_initiator::Session| -> Vec<u16> {
            s.connections().iter().map(|c| c.cid).collect()
        };
        assert_eq!(cids(&s), [0, 1, 2, 3]);
        let block = 512u32;
        let chunk = 64 << 10;
        let before = pattern(8 * chunk, 3);
        for (i, part) in before.chunks(chunk).enumerate() {
            let lba = (i * chunk) as u64 / u64::from(block);
            s.write(0, lba, part.to_vec().into(), block).await.unwrap();
        }
        s.logout_connection(3).await.unwrap();
        assert_eq!(cids(&s), [0, 1, 2]);
        let before_counts: Vec<u64> = s.connections().iter().map(|c| c.commands).collect();
        let after = pattern(8 * chunk, 9);
        for (i, part) in after.chunks(chunk).enumerate() {
            let lba = (8 * chunk + i * chunk) as u64 / u64::from(block);
            s.write(0, lba, part.to_vec().into(), block).await.unwrap();
        }
        let blocks = (16 * chunk) as u32 / block;
        let back = s.read(0, 0, blocks, block).await.unwrap();
        assert_eq!(&back[..8 * chunk], &before[..]);
        assert_eq!(&back[8 * chunk..], &after[..]);
        // The nine commands after the logout went over the three connections left, each
        // carrying some.
        let stats = s.connections();
        let added: Vec<u64> = stats
            .iter()
            .zip(&before_counts)
            .map(|(c, before)| c.commands - before)
            .collect();
        assert!(added.iter().all(|n| *n > 0), "{stats:?}");
        assert_eq!(added.iter().sum::<u64>(), 9, "{stats:?}");
        s.logout().await.unwrap();
    });
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
