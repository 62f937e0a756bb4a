//! `sluice proxy`: refused flags, and a pass-through run between `sluice` client commands and
//! an in-process `sluice target`, stopped by SIGTERM, with its JSON counters.

mod client;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client::target::{config, TestTarget, IQN};
use client::{fails, ok, pattern};

#[test]
fn bad_values_are_refused_with_what_would_do() {
    let base = ["proxy", "--listen", "127.0.0.1:0", "--to", "127.0.0.1:9"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        fails(&args)
    };
    for flag in ["--corrupt-data", "--corrupt-header", "--ber", "--duplicate"] {
        let e = with(&[flag, "1.5"]);
        assert!(e.contains("from 0 to 1"), "{flag}: {e}");
    }
    let e = with(&["--drop", "datain:3"]);
    assert!(e.contains("unknown PDU kind \"datain\""), "{e}");
    for kind in ["data-in", "data-out", "response", "r2t", "snack"] {
        assert!(e.contains(kind), "{kind} not listed: {e}");
    }
    assert!(with(&["--drop", "data-in:0"]).contains("from 1 up"));
    assert!(with(&["--drop", "data-in"]).contains("KIND:N"));
    assert!(with(&["--reset-every", "0"]).contains("--reset-every"));
    let e = with(&["--drop", "login-rsp:1"]);
    assert!(e.contains("login PDUs are exempt"), "{e}");
    assert!(!e.contains("backtrace"), "{e}");
    let e = fails(&["proxy", "--listen", "127.0.0.1:0"]);
    assert!(e.contains("--to"), "{e}");
}

/// A running `sluice proxy`, killed on drop unless stopped.
struct ProxyProcess {
    child: Option<Child>,
    addr: String,
    stderr: mpsc::Receiver<String>,
    /// Forwards standard error line by line until the process closes it.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl ProxyProcess {
    fn start(args: &[&str]) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("proxy")
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice proxy");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .expect("sluice proxy printed no listening address within 20 s");
            if let Some(rest) = line.strip_prefix("sluice proxy listening on ") {
                break rest.split(',').next().unwrap_or_default().to_owned();
            }
        };
        ProxyProcess {
            child: Some(child),
            addr,
            stderr: rx,
            reader: Some(reader),
        }
    }

    /// SIGTERM, then the process's standard output and the rest of its standard error.
    fn stop(mut self) -> (String, Vec<String>) {
        let child = self.child.take().expect("running");
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(killed.success());
        let out = child.wait_with_output().expect("wait for sluice proxy");
        if let Some(r) = self.reader.take() {
            r.join().expect("the stderr reader");
        }
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        assert!(out.status.success(), "exit {:?}: {stderr:#?}", out.status);
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_pass_through_run_moves_data_and_reports_json_counters() {
    let target = TestTarget::start(config());
    let proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--to",
        &target.portal(),
        "--seed",
        "9",
        "--json",
    ]);
    let url = format!("iscsi://{}/{IQN}/0", proxy.addr);
    let inq = ok(&["inq", &url]);
    assert!(inq.contains("direct access block device"), "{inq}");

    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in"), dir.path().join("out"));
    let data = pattern(200 * 1024, 4);
    std::fs::write(&input, &data).unwrap();
    let digests = ["--header-digest", "crc32c", "--data-digest", "crc32c"];
    let mut write = vec!["write", &url, "-i", input.to_str().unwrap()];
    write.extend(digests);
    ok(&write);
    let mut read = vec![
        "read",
        &url,
        "--length",
        "204800",
        "-o",
        output.to_str().unwrap(),
    ];
    read.extend(digests);
    ok(&read);
    assert_eq!(std::fs::read(&output).unwrap(), data);

    let (stdout, stderr) = proxy.stop();
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON counters");
    assert_eq!(v["seed"], 9);
    assert_eq!(v["upstream"], target.portal());
    assert_eq!(v["connections"], 3, "{v}");
    assert_eq!(v["unframeable"], 0, "{v}");
    for dir in ["to_target", "to_initiator"] {
        let d = &v[dir];
        for fault in [
            "dropped",
            "duplicated",
            "corrupt_header",
            "corrupt_data",
            "ber_header",
            "ber_data",
            "resets",
        ] {
            assert_eq!(d[fault], 0, "{dir}.{fault}: {v}");
        }
        assert!(d["pdus"].as_u64().unwrap_or(0) > 3, "{dir}: {v}");
    }
    assert!(
        v["to_target"]["bytes"].as_u64().unwrap_or(0) > 200 * 1024,
        "{v}"
    );
    assert!(
        v["to_initiator"]["bytes"].as_u64().unwrap_or(0) > 200 * 1024,
        "{v}"
    );
    assert!(
        !stderr.iter().any(|l| l.contains("sluice_proxy::fault")),
        "no fault may be logged: {stderr:#?}"
    );
}

#[test]
fn faults_are_logged_one_line_each_and_counted_in_text() {
    let target = TestTarget::start(config());
    let proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--to",
        &target.portal(),
        "--duplicate",
        "1",
    ]);
    let url = format!("iscsi://{}/{IQN}/0", proxy.addr);
    // Every PDU twice: the target drops a duplicate command (its CmdSN is behind the window)
    // and the initiator a duplicate answer; whatever they make of it, the faults show.
    let mut inq = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["inq", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice inq");
    let deadline = Instant::now() + Duration::from_secs(30);
    while inq.try_wait().expect("wait for sluice inq").is_none() {
        if Instant::now() > deadline {
            let _ = inq.kill();
            panic!("sluice inq through a duplicating proxy did not end within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (stdout, stderr) = proxy.stop();
    let faults: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("sluice_proxy::fault"))
        .collect();
    assert!(!faults.is_empty(), "{stderr:#?}");
    for line in &faults {
        assert!(line.contains(" conn=0 dir="), "{line}");
        assert!(line.ends_with("fault=duplicate"), "{line}");
    }
    let duplicated = stdout
        .lines()
        .find(|l| l.starts_with("duplicated"))
        .expect("a duplicated row");
    let counts: Vec<usize> = duplicated
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(counts.iter().sum::<usize>(), faults.len(), "{stdout}");
}

/// `sluice bench --verify` through a proxy that resets the connection every `reset_every`
/// PDUs and damages `corrupt_data` of the PDUs with data, at ErrorRecoveryLevel `erl`: the
/// JSON report.
fn bench_through_faults(erl: &str, reset_every: &str, corrupt_data: &str) -> serde_json::Value {
    let mut c = config();
    // A replacement connection may log in at once (RFC 7143 section 6.2).
    c.offer.default_time2wait = 0;
    let target = TestTarget::start(c);
    let proxy = ProxyProcess::start(&[
        "--listen",
        "127.0.0.1:0",
        "--to",
        &target.portal(),
        "--reset-every",
        reset_every,
        "--corrupt-data",
        corrupt_data,
        "--seed",
        "21",
    ]);
    let url = format!("iscsi://{}/{IQN}/0", proxy.addr);
    let v = client::json(&[
        "bench",
        &url,
        "--rw",
        "randwrite",
        "--bs",
        "16k",
        "--qd",
        "8",
        "--size",
        "8M",
        "--count",
        "3000",
        "--verify",
        "--quiet",
        "--erl",
        erl,
        "-O",
        "DefaultTime2Wait=0",
        "--header-digest",
        "crc32c",
        "--data-digest",
        "crc32c",
    ]);
    let (_, stderr) = proxy.stop();
    let resets = stderr.iter().filter(|l| l.contains("fault=reset")).count();
    assert!(resets > 0, "the proxy reset no connection: {stderr:#?}");
    v
}

#[test]
fn erl2_through_the_proxy_recovers_connections_and_loses_nothing() {
    let v = bench_through_faults("2", "1500", "0.002");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["verify"]["errors"], 0, "{v}");
    assert!(v["verify"]["checked"].as_u64().unwrap_or(0) > 0, "{v}");
    let r = &v["recovery"];
    assert_eq!(r["reconnects"], 0, "no session was reinstated: {v}");
    assert!(r["connection_recoveries"].as_u64().unwrap_or(0) > 0, "{v}");
    let digest_faults =
        r["data_digest_errors"].as_u64().unwrap_or(0) + r["rejects"].as_u64().unwrap_or(0);
    assert!(digest_faults > 0, "damaged data was recovered too: {v}");
}

#[test]
fn erl0_through_the_proxy_reinstates_sessions_and_loses_nothing() {
    // No corruption: at level 0 a Data-Out with a digest error fails its command (section
    // 7.8 leaves its recovery to level 1 and above).
    let v = bench_through_faults("0", "1500", "0");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["verify"]["errors"], 0, "{v}");
    let r = &v["recovery"];
    assert!(r["reconnects"].as_u64().unwrap_or(0) > 0, "{v}");
    assert_eq!(r["connection_recoveries"], 0, "{v}");
}
