//! iSER (RFC 7145) end to end through the binary: `sluice target --iser` and
//! `sluice bench iser://... --verify` over the software RDMA provider, reads and writes of
//! 4 KiB to 16 MiB; the bench output and the target's metrics show RDMA Writes and Reads
//! where iSCSI over TCP has Data-In and Data-Out PDUs.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Every size from 4 KiB to 16 MiB in one run.
const SIZES: &str = "4k:0.2,64k:0.2,256k:0.2,1m:0.2,16m:0.2";

fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The value of the series of `family` whose labels contain `label`.
fn series(metrics: &str, family: &str, label: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(family) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {family}{{{label}}} in\n{metrics}"))
}

#[test]
fn bench_verifies_reads_and_writes_of_every_size_over_iser() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("target.log");
    let mut target = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "target",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "256M",
            "--iser",
            "--iser-port",
            "0",
            "--metrics",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = BufReader::new(target.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("iser://"))
        .expect("sluice target --iser prints an iser:// URL");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let metrics_addr = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if let Some(a) = text
            .lines()
            .find_map(|l| l.strip_prefix("sluice metrics on http://"))
        {
            break a.trim_end_matches("/metrics").to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no metrics address:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench", &url, "--rw", "randrw", "--bs", SIZES, "--qd", "4", "--time", "3", "--verify",
            "--quiet",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // --json names the transport and carries the datamover's counts.
    let json_out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench", &url, "--rw", "randrw", "--bs", "64k", "--qd", "2", "--time", "1", "--json",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let metrics = scrape(&metrics_addr);
    let _ = target.kill();
    let _ = target.wait();
    assert!(
        out.status.success(),
        "sluice bench {url} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(", 0 errors"), "{text}");
    let verify = text
        .lines()
        .find(|l| l.contains("verify:"))
        .expect("verify line");
    assert!(verify.contains(" 0 mismatches"), "{text}");
    assert!(verify.ends_with(" 0 lost"), "{text}");
    assert!(
        !verify.contains(" 0 read-backs"),
        "nothing verified: {text}"
    );
    // The initiator's datamover advertised buffers; the target placed and fetched the data.
    let iser = text
        .lines()
        .find(|l| l.contains("iser:"))
        .expect("iser line");
    assert!(!iser.contains(" 0.0 MiB placed"), "{iser}");
    assert!(!iser.contains(" 0.0 MiB for RDMA Read"), "{iser}");
    let doc: serde_json::Value = serde_json::from_slice(&json_out.stdout).unwrap_or_else(|e| {
        panic!(
            "bench --json: {e}\n{}",
            String::from_utf8_lossy(&json_out.stderr)
        )
    });
    assert_eq!(doc["transport"], "iser", "{doc}");
    assert_eq!(doc["errors"], 0, "{doc}");
    for key in [
        "sends",
        "rdma_write_buffers",
        "rdma_write_bytes",
        "rdma_read_bytes",
    ] {
        assert!(
            doc["iser"][key].as_u64().is_some_and(|n| n > 0),
            "{key}: {doc}"
        );
    }
    // The target counts RDMA Writes and Reads in place of Data-In and Data-Out PDUs.
    assert!(series(&metrics, "sluice_iser_operations", "op=\"rdma_write\"") > 0.0);
    assert!(series(&metrics, "sluice_iser_operations", "op=\"rdma_read\"") > 0.0);
    assert!(series(&metrics, "sluice_iser_data", "op=\"rdma_read\"") > 1e6);
    assert!(series(&metrics, "sluice_iser_connections", "mode=\"rdma\"") >= 1.0);
    assert_eq!(
        series(&metrics, "sluice_iser_connections", "mode=\"error\""),
        0.0
    );
}
