//! The experimental UDP transport end to end: `sluice target --udp` and `iscsi+udp://` URLs,
//! with no loss and with datagrams dropped by a seeded lossy relay, and malformed datagrams
//! that must cost nothing but themselves.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;

use serde_json::Value;
use sluice_udp::relay::LossyRelay;
use support::TargetProcess;

/// Sizes from 4 KiB to 1 MiB in one run.
const SIZES: &str = "4k:0.2,16k:0.2,64k:0.2,256k:0.2,1m:0.2";

fn target() -> TargetProcess {
    // Recovery R2Ts come 100 ms after missing Data-Out, as in the study's UDP runs.
    TargetProcess::start(&["--memory", "64M", "--udp", "--sequence-timeout", "0.1"])
}

/// The UDP URL of a target, and its UDP address.
fn udp_url(t: &TargetProcess) -> (String, SocketAddr) {
    let url = t.url.replacen("iscsi://", "iscsi+udp://", 1);
    let authority = t.url["iscsi://".len()..].split('/').next().unwrap();
    (url, authority.parse().unwrap())
}

fn through(url: &str, relay: &LossyRelay) -> String {
    let authority = url["iscsi+udp://".len()..].split('/').next().unwrap();
    url.replacen(authority, &relay.addr().to_string(), 1)
}

fn sluice(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice")
}

/// `sluice bench URL --verify` over every size, asserting zero errors; returns the report.
fn bench_verify(url: &str, seconds: &str) -> Value {
    let out = sluice(&[
        "bench",
        url,
        "--rw",
        "randrw",
        "--bs",
        SIZES,
        "--qd",
        "4",
        "--time",
        seconds,
        "--verify",
        "--retry-timeout",
        "0.1",
        "--json",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "sluice bench {url} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    assert_eq!(r["errors"].as_u64(), Some(0), "{r}");
    assert_eq!(r["verify"]["errors"].as_u64(), Some(0), "{r}");
    assert!(
        r["verify"]["checked"].as_u64().unwrap_or(0) > 0,
        "nothing verified: {r}"
    );
    r
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn bench_verifies_every_size_over_udp_without_loss() {
    let t = target();
    let (url, _) = udp_url(&t);
    let r = bench_verify(&url, "2");
    // Nothing was lost on loopback at this depth: no recovery was needed.
    assert_eq!(r["recovery"]["snacks"].as_u64(), Some(0), "{r}");
}

#[test]
fn bench_verifies_every_size_over_udp_with_datagram_loss() {
    let t = target();
    let (url, addr) = udp_url(&t);
    let rt = runtime();
    for (loss, seed) in [(0.01, 1), (0.03, 2)] {
        let relay = rt.block_on(LossyRelay::start(addr, loss, seed)).unwrap();
        let r = bench_verify(&through(&url, &relay), "3");
        let (forwarded, dropped) = relay.counts();
        assert!(
            dropped > 0 && forwarded > 100 * dropped / 4,
            "{loss}: {forwarded} {dropped}"
        );
        let repaired = r["recovery"]["snacks"].as_u64().unwrap()
            + r["recovery"]["commands_retried"].as_u64().unwrap();
        assert!(repaired > 0, "losses but no recovery at {loss}: {r}");
    }
}

#[test]
fn login_and_small_commands_survive_heavy_loss() {
    let t = target();
    let (url, addr) = udp_url(&t);
    let rt = runtime();
    // One datagram in five lost either way: login and text PDUs are resent by the
    // initiator's timer and answered again from what the target kept.
    let relay = rt.block_on(LossyRelay::start(addr, 0.2, 7)).unwrap();
    let out = sluice(&["readcap", &through(&url, &relay), "--retry-timeout", "0.1"]);
    assert!(
        out.status.success(),
        "readcap failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("512"));
    assert!(relay.counts().1 > 0);
}

#[test]
fn erl_zero_is_refused_over_udp() {
    let t = target();
    let (url, _) = udp_url(&t);
    let out = sluice(&["readcap", &url, "--erl", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ErrorRecoveryLevel 1"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["target", "--listen", "127.0.0.1:0", "--udp", "--erl", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--udp needs ErrorRecoveryLevel"));
}

/// A segment header (see `sluice_proto::datagram`).
fn header(index: u16, count: u16, id: u32, total: u32) -> Vec<u8> {
    sluice_proto::datagram::SegmentHeader {
        index,
        count,
        pdu_id: id,
        total_len: total,
    }
    .to_bytes()
    .to_vec()
}

#[test]
fn malformed_datagrams_are_dropped_and_the_target_serves_on() {
    let t = target();
    let (url, addr) = udp_url(&t);
    let mut junk: Vec<Vec<u8>> = vec![
        vec![],
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        vec![0xff; 1400],
        vec![1, 0, 0],                               // truncated segment header
        header(0, 0, 1, 100),                        // zero segments
        header(5, 3, 1, 100),                        // index past the count
        header(0, 65_535, 1, 100),                   // more segments than bytes
        header(0, 2, 1, u32::MAX),                   // a PDU beyond any bound
        [header(0, 1, 1, 48), vec![0; 47]].concat(), // a segment shorter than announced
    ];
    // Well-formed segments that open associations whose PDUs never complete, and a whole
    // PDU that is no login: each costs its association, nothing else.
    junk.push([header(0, 3, 9, 3000), vec![0; 1000]].concat());
    junk.push([header(0, 1, 9, 48), vec![0x7f; 48]].concat());
    // Each from a fresh port (a new peer each time), then all from one port (so that one
    // association sees them all).
    for d in &junk {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(d, addr).unwrap();
    }
    let one = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &junk {
        one.send_to(d, addr).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    // The target still serves others, over UDP and TCP.
    bench_verify(&url, "1");
    let out = sluice(&["readcap", &t.url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
