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

/// `sluice bench --verify` (its output `out`, stdout `text`) against `url` succeeded: no
/// error, no mismatch, nothing lost, and something was read back.
fn assert_verified_clean(out: &std::process::Output, text: &str, url: &str) {
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
}

#[test]
fn bench_verifies_reads_and_writes_of_every_size_over_iser() {
    let (mut target, url, metrics_addr, _dir) = start_target();
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
    assert_verified_clean(&out, &text, &url);
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
    // 64 KiB writes fit the first burst sluice's target allows over iSER (FirstBurstLength
    // 64 KiB with InitialR2T=No, both sides' defaults): all of it travels in Sends.
    for key in [
        "sends",
        "rdma_write_buffers",
        "rdma_write_bytes",
        "unsolicited_bytes",
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

/// `sluice target --iser` on free ports: the child, its `iser://` URL and its metrics address.
fn start_target() -> (std::process::Child, String, String, tempfile::TempDir) {
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
    (target, url, metrics_addr, dir)
}

fn bench_json(url: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("bench")
        .arg(url)
        .args(args)
        .arg("--json")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bench --json {url}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// RFC 7145 section 7.3.4 with InitialR2T=No and ImmediateData=Yes: each write's first
/// min(FirstBurstLength, EDTL) bytes travel in Sends (immediate data in the command's, the
/// rest of the first burst as unsolicited Data-Out), and only the remainder is fetched by the
/// target's RDMA Reads, from a write buffer whose base offset is the first solicited byte.
#[test]
fn bench_verifies_writes_with_immediate_and_unsolicited_data_over_iser() {
    let (mut target, url, metrics_addr, _dir) = start_target();
    let unsolicited = format!("{url}?InitialR2T=No&ImmediateData=Yes&FirstBurstLength=65536");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "bench",
            &unsolicited,
            "--rw",
            "randwrite",
            "--bs",
            "4k:0.3,64k:0.3,1m:0.4",
            "--qd",
            "4",
            "--time",
            "3",
            "--verify",
            "--quiet",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Each size alone, writes only, so that the counts are exact: per write, the first
    // burst in Sends and the rest by RDMA Read.
    let mut runs = Vec::new();
    for (bs, len) in [("4k", 4096u64), ("64k", 65536), ("1m", 1 << 20)] {
        let doc = bench_json(
            &unsolicited,
            &["--rw", "randwrite", "--bs", bs, "--qd", "2", "--time", "1"],
        );
        runs.push((len, 65536u64, doc));
    }
    // InitialR2T=Yes: only the immediate data (min(FirstBurstLength, the target's 16 KiB
    // TargetRecvDataSegmentLength)) travels in the command's Send.
    let immediate_only = format!("{url}?InitialR2T=Yes&ImmediateData=Yes&FirstBurstLength=65536");
    let doc = bench_json(
        &immediate_only,
        &[
            "--rw",
            "randwrite",
            "--bs",
            "1m",
            "--qd",
            "2",
            "--time",
            "1",
        ],
    );
    runs.push((1 << 20, 16384, doc));
    let metrics = scrape(&metrics_addr);
    let _ = target.kill();
    let _ = target.wait();

    assert_verified_clean(&out, &text, &unsolicited);
    for (len, in_sends, doc) in &runs {
        assert_eq!(doc["errors"], 0, "{doc}");
        assert_eq!(doc["transport"], "iser", "{doc}");
        assert_eq!(doc["negotiated"]["immediate_data"], true, "{doc}");
        assert_eq!(doc["negotiated"]["first_burst_length"], 65536, "{doc}");
        let writes = doc["ios"].as_u64().unwrap();
        assert!(writes > 0, "{doc}");
        let unsolicited = (*in_sends).min(*len);
        let iser = &doc["iser"];
        assert_eq!(
            iser["unsolicited_bytes"].as_u64(),
            Some(writes * unsolicited),
            "{len}-byte writes: {unsolicited} bytes each in Sends: {doc}"
        );
        assert_eq!(
            iser["rdma_read_bytes"].as_u64(),
            Some(writes * (len - unsolicited)),
            "{len}-byte writes: the rest by RDMA Read: {doc}"
        );
        let buffers = if *len > unsolicited { writes } else { 0 };
        assert_eq!(iser["rdma_read_buffers"].as_u64(), Some(buffers), "{doc}");
        // Unsolicited Data-Out only when InitialR2T=No and the first burst goes beyond the
        // immediate data (16 KiB, the target's receive length).
        let data_outs = iser["unsolicited_data_outs"].as_u64().unwrap();
        if *in_sends > 16384 && *len > 16384 {
            assert_eq!(doc["negotiated"]["initial_r2t"], false, "{doc}");
            assert_eq!(data_outs, writes * (unsolicited - 16384).div_ceil(16384));
        } else {
            assert_eq!(data_outs, 0, "{doc}");
        }
    }
    // The target saw the same: Data-Out in Sends, the rest by RDMA Read, no error.
    assert!(
        series(
            &metrics,
            "sluice_iser_operations",
            "op=\"unsolicited_data_out\""
        ) > 0.0
    );
    assert!(series(&metrics, "sluice_iser_data", "op=\"unsolicited\"") > 1e6);
    assert!(series(&metrics, "sluice_iser_data", "op=\"rdma_read\"") > 1e6);
    assert_eq!(
        series(&metrics, "sluice_iser_connections", "mode=\"error\""),
        0.0
    );
}
