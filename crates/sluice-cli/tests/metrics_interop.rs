//! The metrics endpoint checked by Prometheus' own tools while the target is under load:
//! `promtool check metrics` (Debian package prometheus) on the Prometheus text format, and
//! the OpenMetrics form through the strict OpenMetrics parser of the Python client
//! (python3-prometheus-client).

mod support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use support::require_tool;

fn get(addr: &str, accept: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[test]
fn promtool_and_the_openmetrics_parser_accept_a_scrape_under_load() {
    let promtool = require_tool("promtool", "prometheus");
    // Debian's interpreter, which the Debian package's module is installed for (a python3
    // earlier in PATH, e.g. pyenv's, would not see it).
    let python = "/usr/bin/python3";
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is not installed: run scripts/install-deps (Debian package python3-prometheus-client)"
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("target.log");
    let mut target = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "target",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "64M",
            "--metrics",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut url = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(target.stdout.take().unwrap());
        out.read_line(&mut url).unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let addr = text
        .lines()
        .find_map(|l| l.strip_prefix("sluice metrics on http://"))
        .expect("metrics address")
        .trim_end_matches("/metrics")
        .to_string();
    // Load: reads and writes on two sessions, one of them over two connections.
    let load: Vec<_> = [
        ["--sessions", "1", "--connections", "2"],
        ["--sessions", "1", "--connections", "1"],
    ]
    .iter()
    .map(|extra| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["bench", "--rw", "randrw", "--time", "4s", "--quiet"])
            .args(extra)
            .arg(url.trim())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    })
    .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let classic = get(&addr, "");
    let open = get(
        &addr,
        "Accept: application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    for mut l in load {
        assert!(l.wait().unwrap().success());
    }
    let _ = target.kill();
    let _ = target.wait();
    assert!(
        classic.contains("sluice_connection_pdus_total{") && classic.contains("cid=\"1\""),
        "the scrape saw both sessions' connections:\n{classic}"
    );

    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(classic.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let script = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
        families = list(text_string_to_metric_families(sys.stdin.read()))\n\
        print(len(families), sum(len(f.samples) for f in families))\n";
    let mut parse = Command::new(python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    parse
        .stdin
        .take()
        .unwrap()
        .write_all(open.as_bytes())
        .unwrap();
    let out = parse.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the scrape (is python3-prometheus-client installed? \
         scripts/install-deps): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counts = String::from_utf8_lossy(&out.stdout);
    let families: usize = counts.split_whitespace().next().unwrap().parse().unwrap();
    assert!(families > 30, "{counts}");
}
