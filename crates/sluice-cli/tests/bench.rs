//! `sluice bench` end to end against a `sluice target` child process: verify, PDU accounting,
//! a read/write mix, a size distribution, a trace replay and flag errors.

mod support;

use std::process::Command;

use serde_json::Value;
use support::TargetProcess;

fn target() -> TargetProcess {
    TargetProcess::start(&["--memory", "64M"])
}

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("bench")
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice bench")
}

/// Runs `sluice bench ARGS --json --quiet`, asserts success, returns the report.
fn bench_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["--json", "--quiet"]);
    let out = bench(&a);
    assert!(
        out.status.success(),
        "sluice bench {a:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Counters every report must satisfy.
fn consistent(r: &Value) {
    assert_eq!(u(&r["errors"]), 0, "{r}");
    let ios = u(&r["ios"]);
    assert_eq!(ios, u(&r["read"]["ios"]) + u(&r["write"]["ios"]));
    // Every I/O is one command, and one more each time it was sent again after BUSY or TASK
    // SET FULL.
    let sent = ios + u(&r["busy_retries"]);
    assert_eq!(u(&r["pdus"]["commands"]), sent, "every I/O is one command");
    assert_eq!(
        u(&r["pdus"]["scsi_command"]),
        sent,
        "one SCSI Command PDU each"
    );
    assert_eq!(u(&r["latency_us"]["count"]), ios);
    let l = &r["latency_us"];
    assert!(f(&l["min"]) <= f(&l["p50"]) && f(&l["p50"]) <= f(&l["p99"]));
    assert!(f(&l["p99"]) <= f(&l["p99_9"]) && f(&l["p99_9"]) <= f(&l["max"]));
    assert!(f(&r["cpu"]["user_s"]) + f(&r["cpu"]["system_s"]) > 0.0);
}

#[test]
fn verify_for_one_second() {
    let t = target();
    let r = bench_json(&[&t.url, "--time", "1", "--verify", "--qd", "8"]);
    consistent(&r);
    assert!(f(&r["iops"]) > 0.0);
    let v = &r["verify"];
    assert!(u(&v["checked"]) > 0, "{r}");
    assert_eq!(u(&v["errors"]), 0);
    // Each check is one write and one read of the same size.
    assert_eq!(u(&r["read"]["ios"]), u(&v["checked"]));
    assert_eq!(u(&r["write"]["ios"]), u(&v["checked"]));
    assert!(f(&r["elapsed_s"]) >= 1.0);
}

#[test]
fn random_4k_reads_take_one_data_in_each() {
    let t = target();
    let r = bench_json(&[
        &t.url, "--rw", "randread", "--bs", "4k", "--count", "3000", "--qd", "16",
    ]);
    consistent(&r);
    assert_eq!(u(&r["ios"]), 3000);
    assert_eq!(u(&r["bytes"]), 3000 * 4096);
    assert_eq!(u(&r["pdus"]["data_in"]), 3000, "{}", r["pdus"]);
    assert_eq!(f(&r["pdus"]["per_command"]["data_in"]), 1.0);
    assert_eq!(u(&r["pdus"]["data_out"]), 0);
    assert_eq!(u(&r["write"]["ios"]), 0);
}

/// The size distribution of equation 4.1 in Hussain's dissertation (see sluice-lab's
/// `size_dist`), mixed 70/30.
#[test]
fn randrw_mix_with_hussains_size_distribution() {
    let t = target();
    let r = bench_json(&[
        &t.url,
        "--rw",
        "randrw",
        "--mix",
        "70",
        "--bs",
        "8k:0.1,16k:0.2,32k:0.3,64k:0.4",
        "--count",
        "2000",
        "--sessions",
        "2",
        "--qd",
        "4",
        "--seed",
        "42",
    ]);
    consistent(&r);
    let (reads, writes) = (u(&r["read"]["ios"]), u(&r["write"]["ios"]));
    assert_eq!(reads + writes, 2000);
    let share = reads as f64 / 2000.0;
    assert!((0.64..0.76).contains(&share), "read share {share}");
    // Mean size 39.2 KiB; 2000 samples put the mean well within 3 KiB of it.
    let mean = u(&r["bytes"]) as f64 / 2000.0 / 1024.0;
    assert!((mean - 39.2).abs() < 3.0, "mean size {mean} KiB");
    assert_eq!(r["sessions"], 2);
    assert_eq!(r["workload"]["sizes"].as_array().unwrap().len(), 4);
}

#[test]
fn sequential_reads_stay_in_the_range() {
    let t = target();
    let r = bench_json(&[
        &t.url, "--rw", "read", "--bs", "64k", "--offset", "1M", "--size", "1M", "--count", "40",
    ]);
    consistent(&r);
    assert_eq!(u(&r["bytes"]), 40 * 65536);
    // A range past the end of the 64 MiB LUN is refused.
    let out = bench(&[&t.url, "--offset", "64M", "--size", "1M", "--count", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("beyond"));
}

#[test]
fn trace_replay_of_a_generated_trace() {
    let t = target();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.spc");
    let mut text = String::from("# ASU,LBA,SIZE,OPCODE,TIMESTAMP\n");
    let mut writes = 0;
    for i in 0..30u64 {
        let op = if i % 3 == 0 { "W" } else { "r" };
        writes += u64::from(op == "W");
        // Unaligned sizes are rounded up to blocks; huge LBAs wrap into the LUN.
        let size = 512 * (1 + i % 5) + if i == 7 { 100 } else { 0 };
        text.push_str(&format!(
            "{},{},{size},{op},{:.3}\n",
            i % 2,
            i * 1_000_003,
            i as f64 * 0.01
        ));
    }
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap();
    let r = bench_json(&[&t.url, "--trace", p, "--speed", "0"]);
    consistent(&r);
    assert_eq!(u(&r["trace_records"]), 30);
    assert_eq!(u(&r["ios"]), 30);
    assert_eq!(u(&r["write"]["ios"]), writes);
    // At the recorded pace the replay takes at least the trace's 0.29 s.
    let r = bench_json(&[&t.url, "--trace", p, "--qd", "2"]);
    consistent(&r);
    assert!(f(&r["elapsed_s"]) >= 0.29, "{}", r["elapsed_s"]);
}

#[test]
fn poisson_rate_and_flag_errors() {
    let t = target();
    let r = bench_json(&[
        &t.url,
        "--rate",
        "400",
        "--poisson",
        "--time",
        "1",
        "--qd",
        "8",
    ]);
    consistent(&r);
    // 400/s for one second: Poisson count has sd 20; allow a wide margin for a busy box.
    let ios = u(&r["ios"]);
    assert!((250..=550).contains(&ios), "{ios}");
    assert!(
        f(&r["elapsed_s"]) < 1.5,
        "stop does not wait for far-off arrivals"
    );
    for (args, msg) in [
        (&["--bs", "8k:0.5,16k:0.4"][..], "sum to"),
        (&["--bs", "1000"][..], "multiple of the block size"),
        (&["--mix", "101"][..], "101"),
    ] {
        let mut a = vec![t.url.as_str(), "--count", "1"];
        a.extend(args);
        let out = bench(&a);
        assert!(!out.status.success(), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(msg), "{a:?}: {err}");
    }
}

/// The connections of a report as (cid, commands, LUNs it carried).
fn connections(r: &Value) -> Vec<(u64, u64, Vec<u64>)> {
    r["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .map(|c| {
            let luns = c["luns"]
                .as_array()
                .expect("luns")
                .iter()
                .map(|l| u(&l["lun"]))
                .collect();
            (u(&c["cid"]), u(&c["commands"]), luns)
        })
        .collect()
}

/// Four connections in one session (MC/S) under every policy: no data error, and the
/// per-connection counters show the policy at work (LU affinity: every LUN's commands on one
/// connection; the others: every connection busy).
#[test]
fn four_connections_under_every_policy_verify() {
    let t = TargetProcess::start(&[
        "--memory", "16M", "--memory", "16M", "--memory", "16M", "--memory", "16M",
    ]);
    for policy in [
        "round-robin",
        "lu-affinity",
        "least-commands",
        "least-bytes",
    ] {
        let r = bench_json(&[
            &t.url,
            "--connections",
            "4",
            "--policy",
            policy,
            "--luns",
            "0,1,2,3",
            "--rw",
            "randrw",
            "--bs",
            "4k:0.5,64k:0.5",
            "--qd",
            "8",
            "--time",
            "1500ms",
            "--verify",
        ]);
        assert_eq!(u(&r["errors"]), 0, "{policy}: {r}");
        assert_eq!(u(&r["verify"]["errors"]), 0, "{policy}: {r}");
        let conns = connections(&r);
        let cids: Vec<u64> = conns.iter().map(|c| c.0).collect();
        assert_eq!(cids, [0, 1, 2, 3], "{policy}: {r}");
        if policy == "lu-affinity" {
            for lun in 0..4 {
                let carriers = conns.iter().filter(|c| c.2.contains(&lun)).count();
                assert_eq!(carriers, 1, "LUN {lun} on {carriers} connections: {r}");
            }
        } else {
            assert!(conns.iter().all(|c| c.1 > 0), "{policy}: {r}");
        }
    }
}

/// One connection logged out mid-run: it finishes its commands, the others finish the run.
#[test]
fn a_connection_logged_out_mid_run_while_the_others_finish() {
    let t = TargetProcess::start(&["--memory", "16M", "--memory", "16M"]);
    let r = bench_json(&[
        &t.url,
        "--connections",
        "3",
        "--luns",
        "0,1",
        "--rw",
        "randrw",
        "--qd",
        "8",
        "--time",
        "2s",
        "--verify",
        "--logout-connection-after",
        "700ms",
    ]);
    assert_eq!(u(&r["errors"]), 0, "{r}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r}");
    let logouts = r["connection_logouts"].as_array().expect("logouts");
    assert_eq!(logouts.len(), 1, "{r}");
    assert_eq!(logouts[0]["cid"], 2);
    assert_eq!(logouts[0]["ok"], true, "{r}");
    assert!(f(&logouts[0]["at_s"]) >= 0.7);
    // The survivors carried commands after the logout: more than the logged-out one.
    let conns = connections(&r);
    let last = conns.iter().find(|c| c.0 == 2).map_or(0, |c| c.1);
    assert!(conns.iter().filter(|c| c.0 != 2).all(|c| c.1 > last), "{r}");
}

/// Large reads and writes at once: both ends hold more than 8 MiB waiting to be written (the
/// target's Data-In of a 16 MiB read, the initiator's data of 16 MiB writes). The target stops
/// reading while that much of its own output waits; the initiator must go on reading, or each
/// waits for the other (it did: five runs in six hung). A hang fails at the command deadline.
#[test]
fn large_reads_and_writes_at_once_do_not_stall_the_connection() {
    let t = TargetProcess::start(&["--memory", "64M"]);
    let r = bench_json(&[
        &t.url,
        "--rw",
        "randrw",
        "--bs",
        "16M",
        "--qd",
        "4",
        "--count",
        "24",
        "--verify",
        "--command-timeout",
        "30",
    ]);
    consistent(&r);
    assert!(u(&r["ios"]) >= 24, "{r}");
    assert!(u(&r["read"]["ios"]) > 0 && u(&r["write"]["ios"]) > 0, "{r}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r}");
}

/// A target that buffers at most 1 MiB of write data per connection answers TASK SET FULL to
/// the writes beyond it (with InitialR2T=Yes each write waits for its R2Ts, so eight 512 KiB
/// writes at once are 4 MiB to buffer); the bench sends them again after a pause, as operating system
/// initiators do, and every write lands (verified), the retries counted.
#[test]
fn writes_answered_task_set_full_are_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("target.toml");
    std::fs::write(
        &cfg,
        "listen = [\"127.0.0.1:0\"]\n[limits]\nmax_outstanding_bytes_per_connection = \"1M\"\n\
         [session]\ninitial_r2t = true\nimmediate_data = false\n\
         [[target]]\niqn = \"iqn.2026-11.io.sluice:busy\"\nacl = \"open\"\n\
         [[target.lun]]\nbackend = \"memory\"\nsize = \"16M\"\n",
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("target.log")).unwrap();
    let t = TargetProcess::with_config(&cfg, "warn", log);
    let r = bench_json(&[
        &t.url,
        "--rw",
        "randwrite",
        "--bs",
        "512k",
        "--qd",
        "8",
        "--count",
        "64",
        "--verify",
    ]);
    consistent(&r);
    assert!(u(&r["busy_retries"]) > 0, "{r}");
    assert_eq!(u(&r["verify"]["errors"]), 0, "{r}");
}
