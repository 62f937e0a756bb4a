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

/// An explicit ALUA change (SET TARGET PORT GROUPS making the optimized group standby and the
/// other optimized) moves the library's I/O: the next command on the now-standby path is
/// refused (NOT READY, TARGET PORT IN STANDBY STATE), the states are read again, and the
/// command is sent again on the newly optimized path, so the caller sees only GOOD.
#[test]
fn an_alua_change_moves_the_io() {
    use sluice_initiator::multipath::policy::AluaState;
    use sluice_initiator::multipath::{Multipath, MultipathOptions};
    use sluice_initiator::Command as ScsiCommand;

    let t = TargetProcess::start_multipath(&[
        "--memory",
        "16M",
        "--alua-state",
        "1=active-optimized",
        "--alua-state",
        "2=active-non-optimized",
    ]);
    let portals = vec![portal(&t.urls[0]), portal(&t.urls[1])];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mp = Multipath::connect(
            &portals,
            "iqn.2026-11.io.sluice:default",
            0,
            MultipathOptions::default(),
        )
        .await
        .expect("multipath login");
        let block = mp.read_capacity().await.expect("capacity").block_size;
        let data = bytes::Bytes::from(vec![0x5a; block as usize * 8]);
        mp.write(0, data.clone(), block).await.expect("write");
        let s = mp.path_stats();
        assert_eq!(s[0].state, Some(AluaState::ActiveOptimized), "{s:?}");
        assert_eq!(s[1].state, Some(AluaState::ActiveNonOptimized), "{s:?}");
        assert_eq!(
            s[1].commands, 0,
            "I/O went to the non-optimized path: {s:?}"
        );

        // SET TARGET PORT GROUPS (SPC-4 6.44): group 1 standby, group 2 active/optimized.
        let list = [0u8, 0, 0, 0, 0x02, 0, 0, 1, 0x00, 0, 0, 2];
        let mut cdb = [0u8; 12];
        cdb[0] = 0xa4;
        cdb[1] = 0x0a;
        cdb[6..10].copy_from_slice(&(list.len() as u32).to_be_bytes());
        mp.execute_good(ScsiCommand::write(0, &cdb, list.to_vec()))
            .await
            .expect("SET TARGET PORT GROUPS");

        let before = mp.path_stats();
        for lba in 0..16 {
            mp.write(lba * 8, data.clone(), block)
                .await
                .expect("write after the change");
        }
        let read = mp.read(8, 8, block).await.expect("read after the change");
        assert_eq!(read, data);
        let s = mp.path_stats();
        assert_eq!(s[0].state, Some(AluaState::Standby), "{s:?}");
        assert_eq!(s[1].state, Some(AluaState::ActiveOptimized), "{s:?}");
        assert!(s[1].commands >= 17, "{s:?}");
        assert!(s[1].retries >= 1, "the refused command was resent: {s:?}");
        assert!(
            s[0].commands <= before[0].commands + 1,
            "at most the refused command reached the standby path: {s:?}"
        );
        assert!(s.iter().all(|p| p.failovers == 0 && p.errors == 0), "{s:?}");
        mp.close().await;
    });
}

/// COMPARE AND WRITE is not idempotent: the ones in flight on the killed path fail with
/// `Error::NotResent` instead of being sent again (a resend of one that ran would fail with
/// MISCOMPARE, or apply twice); the caller reads the block to learn its fate. Those issued
/// after the failure run on the other path.
#[test]
fn compare_and_write_in_flight_is_not_resent() {
    use sluice_initiator::multipath::{Multipath, MultipathOptions};
    use sluice_initiator::{Command as ScsiCommand, Error};
    use sluice_scsi::cdb;

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("lu.img");
    let file = file.to_str().expect("utf-8 path");
    let a = gateway(file, "127.0.0.1:0", 1, "active-optimized");
    let b = gateway(file, "127.0.0.1:0", 2, "active-non-optimized");
    let portals = vec![portal(&a.url), portal(&b.url)];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut a = Some(a);
    rt.block_on(async {
        let mp = Multipath::connect(&portals, IQN, 0, MultipathOptions::default())
            .await
            .expect("multipath login");
        let block = mp.read_capacity().await.expect("capacity").block_size as usize;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        for lba in 0..8u64 {
            let (mp, stop) = (mp.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let zero = bytes::Bytes::from(vec![0u8; block]);
                mp.write(lba, zero.clone(), block as u32)
                    .await
                    .expect("first write");
                let (mut cur, mut n, mut not_resent, mut good) = (zero, 0u8, 0u32, 0u32);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n = n.wrapping_add(1);
                    let next = bytes::Bytes::from(vec![n; block]);
                    let mut data = cur.to_vec();
                    data.extend_from_slice(&next);
                    let cmd = ScsiCommand::write(0, &cdb::compare_and_write(lba, 1, false), data);
                    match mp.execute(cmd).await {
                        Ok(out) => {
                            out.check().expect("COMPARE AND WRITE is GOOD");
                            cur = next;
                            good += 1;
                        }
                        Err(Error::NotResent { opcode, .. }) => {
                            assert_eq!(opcode, 0x89);
                            not_resent += 1;
                            // Its fate is unknown: the medium tells.
                            let now = mp.read(lba, 1, block as u32).await.expect("read");
                            assert!(now == cur || now == next, "block {lba} holds neither");
                            cur = now;
                        }
                        Err(e) => panic!("COMPARE AND WRITE failed: {e}"),
                    }
                }
                (not_resent, good)
            }));
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(a.take()); // SIGKILL with the COMPARE AND WRITEs in flight.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let good_before_stop: u64 = mp.path_stats()[1].commands;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut not_resent = 0;
        for t in tasks {
            let (n, good) = t.await.expect("task");
            not_resent += n;
            assert!(good > 0);
        }
        let s = mp.path_stats();
        assert!(
            not_resent >= 1,
            "no COMPARE AND WRITE was in flight at the kill? {s:?}"
        );
        assert_eq!(s[1].retries, 0, "nothing was resent: {s:?}");
        assert!(
            good_before_stop > 8,
            "the other path took the new commands: {s:?}"
        );
        mp.close().await;
    });
    drop(b);
}

/// The other gateway is standby: when the optimized one dies, no path serves I/O until the
/// initiator asks the standby group to become active/optimized (SET TARGET PORT GROUPS), as
/// Linux's ALUA device handler does; the run then goes on there with nothing lost.
#[test]
fn failover_to_a_standby_path_activates_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("lu.img");
    let file = file.to_str().expect("utf-8 path");
    let a = gateway(file, "127.0.0.1:0", 1, "active-optimized");
    let b = gateway(file, "127.0.0.1:0", 2, "standby");
    let b_portal = portal(&b.url);
    let bench = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", &a.url, "--paths", &b_portal])
        .args(["--verify", "--rw", "randwrite", "--qd", "8"])
        .args(["--time", "5s", "--json", "--quiet"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sluice bench");
    std::thread::sleep(Duration::from_secs(2));
    drop(a);
    let out = bench.wait_with_output().expect("sluice bench ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sluice bench failed:\n{text}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    drop(b);
    assert_eq!(u(&r["errors"]), 0, "{r:#}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r:#}");
    assert_eq!(u(&r["verify"]["final_errors"]), 0, "{r:#}");
    let pb = &r["paths"][1];
    assert_eq!(pb["alua_state"], "active-optimized", "{r:#}");
    assert!(u(&pb["commands"]) > 0 && u(&pb["retries"]) > 0, "{r:#}");
    let pause = r["longest_pause_s"].as_f64().expect("longest pause");
    eprintln!("failover to a standby path: longest pause {pause:.3} s");
    assert!(pause < 10.0, "{r:#}");
}

/// A gateway that stops answering without closing its connections (SIGSTOP: a frozen host)
/// is found by the paths' keepalive pings and its I/O moves to the other path within 10 s;
/// when it resumes (SIGCONT), the commands it had received before it froze must not land
/// over newer writes: no acknowledged write lost, and it rejoins.
#[test]
fn a_frozen_gateway_is_failed_over_within_ten_seconds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("lu.img");
    let file = file.to_str().expect("utf-8 path");
    let a = gateway(file, "127.0.0.1:0", 1, "active-optimized");
    let b = gateway(file, "127.0.0.1:0", 2, "active-non-optimized");
    let b_portal = portal(&b.url);
    // A small LU, so that the writes after the failover land again on blocks the frozen
    // gateway's stale commands address.
    let bench = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", &a.url, "--paths", &b_portal, "--size", "2M"])
        .args(["--verify", "--rw", "randwrite", "--qd", "8"])
        .args(["--time", "16s", "--json", "--quiet"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sluice bench");
    std::thread::sleep(Duration::from_secs(2));
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &a.pid().to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} failed");
    };
    signal("-STOP");
    std::thread::sleep(Duration::from_secs(11));
    signal("-CONT");
    let out = bench.wait_with_output().expect("sluice bench ran");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sluice bench failed:\n{text}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    drop((a, b));
    assert_eq!(u(&r["errors"]), 0, "{r:#}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r:#}");
    assert!(u(&r["verify"]["final_checked"]) > 0, "{r:#}");
    assert_eq!(u(&r["verify"]["final_errors"]), 0, "{r:#}");
    let (pa, pb) = (&r["paths"][0], &r["paths"][1]);
    assert_eq!(u(&pa["failovers"]), 1, "{r:#}");
    assert_eq!(u(&pa["reconnects"]), 1, "{r:#}");
    assert!(u(&pb["retries"]) > 0, "{r:#}");
    let pause = r["longest_pause_s"].as_f64().expect("longest pause");
    eprintln!("frozen gateway: longest pause {pause:.3} s");
    assert!(pause < 10.0, "I/O stood still for {pause} s: {r:#}");
}

/// `--paths` makes one multipath device: flags that spread a run over several sessions or
/// LUNs cannot go with it, and say so.
#[test]
fn paths_refuse_session_and_lun_spreading_flags() {
    for extra in [["--sessions", "2"], ["--luns", "0,1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["bench", "iscsi://127.0.0.1:1/iqn.2026-11.io.sluice:x/0"])
            .args(["--paths", "127.0.0.1:2"])
            .args(extra)
            .output()
            .expect("run sluice bench");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
}
