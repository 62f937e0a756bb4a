//! End-to-end checks of the `sluice` binary: help, configuration checking, errors, signals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/target.toml")
}

#[test]
fn help_lists_the_target_subcommand() {
    let out = sluice(&["--help"]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("target"),
        "{}",
        text(&out.stdout)
    );
    let out = sluice(&["target", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for flag in [
        "--listen",
        "--memory",
        "--file",
        "--null",
        "--config",
        "--check-config",
        "--chap-user",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn example_config_checks_out() {
    let path = example();
    let out = sluice(&["target", "--check-config", path.to_str().unwrap()]);
    assert!(out.status.success(), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(": OK"), "{stdout}");
    assert!(
        stdout.contains("iqn.2026-11.io.sluice:vm-disks"),
        "{stdout}"
    );
}

#[test]
fn broken_config_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    let cases = [
        // A typo in a key: line 8.
        ("[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\nacl = \"open\"\n\n[[target.lun]]\nbackend = \"memory\"\nsize = \"1G\"\nreadonly = true\n", 8, "unknown key `readonly`"),
        // A semantic error found after parsing: the size on line 7 is not a multiple of 512.
        ("[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\nacl = \"open\"\n\n[[target.lun]]\nbackend = \"memory\"\nsize = 1000\n", 7, "not a positive multiple"),
        // No acl: the target's iqn line is named.
        ("\n[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\n[[target.lun]]\nbackend = \"null\"\nsize = \"1G\"\n", 3, "no `acl` key"),
    ];
    for (src, line, needle) in cases {
        std::fs::write(&path, src).unwrap();
        let out = sluice(&["target", "--check-config", path.to_str().unwrap()]);
        assert!(!out.status.success());
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("broken.toml:{line}:")),
            "line {line} not in:\n{stderr}"
        );
        assert!(stderr.contains(needle), "{needle} not in:\n{stderr}");
        assert!(!stderr.contains("backtrace"), "{stderr}");
    }
}

#[test]
fn config_and_flags_do_not_mix() {
    let path = example();
    let out = sluice(&[
        "target",
        "--config",
        path.to_str().unwrap(),
        "--memory",
        "1G",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--config cannot be combined with --memory"));
}

#[test]
fn bad_size_is_refused_clearly() {
    let out = sluice(&["target", "--memory", "lots"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("invalid size \"lots\""),
        "{}",
        text(&out.stderr)
    );
}

/// Starts a target on an ephemeral loopback port, waits for the URL, sends SIGTERM and expects a
/// clean exit. Until `sluice_target::run` serves, it checks the one-line error instead.
#[cfg(unix)]
#[test]
fn serves_until_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["target", "--listen", "127.0.0.1:0", "--memory", "16M"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(url) => {
            assert!(url.starts_with("iscsi://127.0.0.1:"), "{url}");
            assert!(url.ends_with("/iqn.2026-11.io.sluice:default/0"), "{url}");
            let killed = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "stderr: {}", text(&out.stderr));
        }
        Err(_) => {
            // No URL: the process must have stopped with a one-line error.
            let out = child.wait_with_output().unwrap();
            assert!(!out.status.success());
            let stderr = text(&out.stderr);
            let errors: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("error: "))
                .collect();
            assert_eq!(errors.len(), 1, "{stderr}");
            assert!(
                errors[0].contains("iSCSI target on 127.0.0.1:0"),
                "{stderr}"
            );
        }
    }
}

/// A fully allocated file on /dev/shm (tmpfs), which `sluice lab loopback` maps.
fn tmpfs_lun(len: usize) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("sluice-cli-lab")
        .tempfile_in("/dev/shm")
        .expect("create a file on /dev/shm");
    f.write_all(&vec![0x5a; len]).expect("fill the file");
    f
}

#[test]
fn lab_loopback_reports_every_source_as_json() {
    let lun = tmpfs_lun(2 << 20);
    let path = lun.path().to_str().unwrap();
    let out = sluice(&[
        "lab",
        "loopback",
        "--file",
        path,
        "--rounds",
        "2",
        "--seconds",
        "0.1",
        "--chunk",
        "256K",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let sources = doc["sources"].as_array().expect("sources");
    let names: Vec<&str> = sources
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hot", "cold", "sendfile"]);
    for s in sources {
        let runs = s["mib_per_s"].as_array().unwrap();
        assert_eq!(runs.len(), 2, "one stream per round: {s}");
        assert!(s["median_mib_per_s"].as_f64().unwrap() > 0.0, "{s}");
    }
    assert_eq!(doc["chunk"], 256 << 10);
    assert!(doc["cold_over_hot"].as_f64().unwrap() > 0.0);
    assert!(!doc["congestion_control"].as_str().unwrap().is_empty());
}

#[test]
fn lab_loopback_refuses_a_file_it_cannot_map() {
    let sparse = tempfile::Builder::new()
        .tempfile_in("/dev/shm")
        .expect("create a file on /dev/shm");
    sparse.as_file().set_len(4 << 20).unwrap();
    let out = sluice(&[
        "lab",
        "loopback",
        "--file",
        sparse.path().to_str().unwrap(),
        "--seconds",
        "0.1",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("not mapped") && err.contains("fallocate"),
        "{err}"
    );
}

/// `sluice lab sim` runs seeds of the simulator and reports them; every seed passes.
#[test]
fn lab_sim_runs_seeds_and_summarises_them_as_json() {
    let out = sluice(&["lab", "sim", "--seeds", "12", "--first", "500", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["first"], 500);
    assert_eq!(json["passed"]["seeds"], 12);
    assert_eq!(json["violations"].as_array().map(Vec::len), Some(0));
    let by: u64 = json["passed"]["by_connections"]
        .as_array()
        .expect("array")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert_eq!(by, 12);
    assert!(json["passed"]["commands"].as_u64().unwrap_or(0) > 0);
}

/// `--transport iser` runs the seeds over iSER: data moves by RDMA Writes and Reads, never in
/// PDUs carried by Sends, and a traced seed shows the RDMA operations.
#[test]
fn lab_sim_runs_iser_seeds() {
    let out = sluice(&[
        "lab",
        "sim",
        "--seeds",
        "8",
        "--transport",
        "iser",
        "--no-faults",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["transport"], "iser");
    assert_eq!(json["passed"]["seeds"], 8);
    let iser = &json["passed"]["iser"];
    assert!(iser["rdma_writes"].as_u64() > Some(0), "{iser}");
    assert!(iser["rdma_reads"].as_u64() > Some(0), "{iser}");
    assert_eq!(iser["data_pdus_in_sends"], 0);
    assert_eq!(json["passed"]["header_digest"], 0);
    let traced = sluice(&[
        "lab",
        "sim",
        "--seed",
        "5",
        "--transport",
        "iser",
        "--trace",
    ]);
    assert!(traced.status.success(), "{}", text(&traced.stderr));
    assert!(text(&traced.stderr).contains("RDMA Write"));
    assert!(text(&traced.stdout).contains("iSER: Sends"));
}

/// One seed replays the same run every time, and can be traced.
#[test]
fn lab_sim_replays_one_seed() {
    let a = sluice(&["lab", "sim", "--seed", "42", "--connections", "3"]);
    let b = sluice(&["lab", "sim", "--seed", "42", "--connections", "3"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(text(&a.stdout), text(&b.stdout));
    // The target of this seed accepts MaxConnections=2 of the 3 asked for.
    assert!(
        text(&a.stdout).contains("2 connection(s)"),
        "{}",
        text(&a.stdout)
    );
    let traced = sluice(&["lab", "sim", "--seed", "42", "--trace"]);
    assert!(traced.status.success());
    assert!(text(&traced.stderr).contains("SCSI Command"));
    let bad = sluice(&["lab", "sim", "--connections", "9"]);
    assert!(!bad.status.success());
}

#[test]
fn an_unknown_tcp_congestion_is_a_startup_error() {
    let out = sluice(&[
        "target",
        "--listen",
        "127.0.0.1:0",
        "--memory",
        "16M",
        "--tcp-congestion",
        "no-such-cc",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "TCP congestion control \"no-such-cc\" is not available on this host (available: "
        ),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing served: {}",
        text(&out.stdout)
    );
}

/// The congestion control of the established TCP sockets whose local port is `port`, as the
/// kernel reports it (the first word of each socket's `ss -ti` information line).
fn congestion_of_local_port(port: u16) -> Vec<String> {
    let out = Command::new("ss")
        .args(["-H", "-t", "-i", "-n", "state", "established"])
        .arg(format!("sport = :{port}"))
        .output()
        .expect("ss (iproute2) runs");
    assert!(out.status.success(), "ss: {out:?}");
    text(&out.stdout)
        .lines()
        .filter(|l| l.starts_with([' ', '\t']))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// `--tcp-congestion` puts the algorithm on the target's side of accepted connections; the
/// initiator's side is not the target's to change.
#[cfg(unix)]
#[test]
fn tcp_congestion_is_set_on_accepted_connections() {
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    let available =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
    // One other than the host's default, so that the check shows the flag took effect.
    let chosen = available
        .split_whitespace()
        .find(|a| *a != default.trim())
        .expect("the kernel offers more than one congestion control")
        .to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["target", "--listen", "127.0.0.1:0", "--memory", "16M"])
        .args(["--tcp-congestion", &chosen])
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = lines.next().expect("a URL").unwrap();
    let port: u16 = url
        .trim_start_matches("iscsi://127.0.0.1:")
        .split('/')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"));
    let _conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // The target sets it right after accepting; give it a moment.
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = congestion_of_local_port(port);
        if seen == std::slice::from_ref(&chosen) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen, [chosen], "the target's side of the connection");
}
