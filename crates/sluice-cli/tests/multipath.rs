//! `sluice bench --paths` end to end: two `sluice target` processes export the same file as
//! the same target and LU (one target port group each, one active/optimized, the other
//! active/non-optimized); the one serving the optimized path is killed with SIGKILL in the
//! middle of a verified write run and later restarted. The run must move its I/O to the other
//! path, lose no acknowledged write, read back every write correctly, and see the restarted
//! path rejoin with its ALUA state read again.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::TargetProcess;

const IQN: &str = "iqn.2026-11.io.sluice:multipath-test";

/// `sluice target` for the shared file, its portal in group `tpgt` in ALUA `state`.
fn gateway(file: &str, listen: &str, tpgt: u16, state: &str) -> TargetProcess {
    let listen = format!("{listen},{tpgt}");
    let alua = format!("{tpgt}={state}");
    TargetProcess::start_exact(&[
        "--iqn",
        IQN,
        "--file",
        file,
        "--size",
        "32M",
        "--listen",
        &listen,
        "--alua-state",
        &alua,
    ])
}

/// `host:port` of a target URL.
fn portal(url: &str) -> String {
    url.trim_start_matches("iscsi://")
        .split('/')
        .next()
        .expect("portal")
        .to_owned()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn failover_on_kill_loses_no_write_and_the_path_rejoins() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("lu.img");
    let file = file.to_str().expect("utf-8 path");
    let a = gateway(file, "127.0.0.1:0", 1, "active-optimized");
    let b = gateway(file, "127.0.0.1:0", 2, "active-non-optimized");
    let (a_portal, b_portal) = (portal(&a.url), portal(&b.url));

    let bench = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", &a.url, "--paths", &b_portal])
        .args([
            "--verify",
            "--rw",
            "randwrite",
            "--bs",
            "4k:0.5,64k:0.5",
            "--qd",
            "8",
        ])
        .args(["--time", "8s", "--json", "--quiet"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sluice bench");

    std::thread::sleep(Duration::from_secs(2));
    let killed = Instant::now();
    drop(a); // SIGKILL: the process serving the optimized path dies mid-run.
    std::thread::sleep(Duration::from_secs(2));
    // Restarted on the same portal, now active/non-optimized: the path must come back with
    // that state read again.
    let _a2 = gateway(file, &a_portal, 1, "active-non-optimized");
    let restarted = killed.elapsed();

    let out = bench.wait_with_output().expect("sluice bench ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sluice bench failed:\n{text}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    drop(b);

    assert_eq!(u(&r["errors"]), 0, "{r:#}");
    let v = &r["verify"];
    assert!(u(&v["checked"]) > 0, "{r:#}");
    assert_eq!(u(&v["errors"]), 0, "read-backs differed: {r:#}");
    assert!(u(&v["final_checked"]) > 0, "{r:#}");
    assert_eq!(u(&v["final_errors"]), 0, "acknowledged writes lost: {r:#}");

    let paths = r["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), 2, "{r:#}");
    let (pa, pb) = (&paths[0], &paths[1]);
    assert_eq!(pa["portal"], a_portal.as_str());
    assert_eq!(pb["portal"], b_portal.as_str());
    assert_eq!(
        (
            pa["target_port_group"].as_u64(),
            pb["target_port_group"].as_u64()
        ),
        (Some(1), Some(2))
    );
    // The optimized path carried the I/O until it died, then the other one took it.
    assert!(u(&pa["commands"]) > 0 && u(&pb["commands"]) > 0, "{r:#}");
    assert_eq!(u(&pa["failovers"]), 1, "{r:#}");
    assert_eq!(u(&pb["failovers"]), 0, "{r:#}");
    // Commands in flight on the dead path were resent on the other.
    assert!(u(&pb["retries"]) > 0, "{r:#}");
    // The restarted gateway rejoined, in the state it reports now.
    assert_eq!(u(&pa["reconnects"]), 1, "{r:#}");
    assert_eq!(pa["up"], true, "{r:#}");
    assert_eq!(pa["alua_state"], "active-non-optimized", "{r:#}");
    assert_eq!(pb["alua_state"], "active-non-optimized", "{r:#}");

    let pause = r["longest_pause_s"].as_f64().expect("longest pause");
    let failovers = r["failover_times_s"].as_array().expect("failover times");
    assert_eq!(failovers.len(), 1, "{r:#}");
    eprintln!(
        "failover: longest pause between completions {pause:.3} s, I/O resumed {:.3} s after \
         the failure was seen; gateway restarted {:.1} s after the kill",
        failovers[0].as_f64().unwrap_or(f64::NAN),
        restarted.as_secs_f64()
    );
    // The goal is under 10 s with default timeouts; a killed process's connections
    // are reset by its kernel, so it is seen at once.
    assert!(pause < 10.0, "I/O stood still for {pause} s: {r:#}");
}

/// One target with two portal groups (127.0.0.1 in group 1, active/optimized; 127.0.0.2 in
/// group 2, standby): `--discover-paths` finds both through SendTargets, reads their states,
/// and sends everything to the optimized one.
///
/// Both portals listen on one port number picked free on both addresses: a target listening
/// on port 0 twice reports the port of the portal a SendTargets arrived on for both.
#[test]
fn discovered_paths_follow_alua_states() {
    let port = free_port_on_both();
    let (l1, l2) = (format!("127.0.0.1:{port},1"), format!("127.0.0.2:{port},2"));
    let t = TargetProcess::start_exact(&[
        "--listen",
        &l1,
        "--listen",
        &l2,
        "--memory",
        "16M",
        "--alua-state",
        "1=active-optimized",
        "--alua-state",
        "2=standby",
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench",
            &t.url,
            "--discover-paths",
            "--verify",
            "--rw",
            "randwrite",
        ])
        .args(["--qd", "4", "--count", "400", "--json", "--quiet"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run sluice bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sluice bench failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let paths = r["paths"].as_array().expect("paths");
    assert_eq!(paths.len(), 2, "{r:#}");
    let optimized = paths
        .iter()
        .find(|p| p["alua_state"] == "active-optimized")
        .unwrap_or_else(|| panic!("no optimized path: {r:#}"));
    let standby = paths
        .iter()
        .find(|p| p["alua_state"] == "standby")
        .unwrap_or_else(|| panic!("no standby path: {r:#}"));
    assert_eq!(optimized["target_port_group"].as_u64(), Some(1));
    assert_eq!(standby["target_port_group"].as_u64(), Some(2));
    assert_eq!(u(&standby["commands"]), 0, "standby got I/O: {r:#}");
    assert!(u(&optimized["commands"]) >= 800, "{r:#}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r:#}");
}

/// A port free on 127.0.0.1 and 127.0.0.2 at the moment of asking.
fn free_port_on_both() -> u16 {
    for _ in 0..100 {
        let a = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = a.local_addr().expect("local address").port();
        if std::net::TcpListener::bind(("127.0.0.2", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free on both 127.0.0.1 and 127.0.0.2");
}
