//! Operating a `sluice target` child process: `sluice ctl` over the control socket and the
//! HTTP admin API while an initiator verifies its data, configuration save and restart,
//! reload (SIGHUP and `ctl reload`), the metrics endpoint against known I/O, and the systemd
//! notification protocol against a socket the test binds as NOTIFY_SOCKET.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const TARGET: &str = "iqn.2026-11.io.sluice:ops";
const ALLOWED: &str = "iqn.2026-11.io.sluice.test:allowed";
const REMOVED: &str = "iqn.2026-11.io.sluice.test:removed";

fn sluice() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.env_remove("RUST_LOG");
    c
}

/// A `sluice target --config` child, killed on drop; its stderr goes to a file.
struct Daemon {
    child: Child,
    url_base: String,
    log: PathBuf,
}

impl Daemon {
    fn start(config: &Path, dir: &Path, env: &[(&str, &str)]) -> Self {
        let log = dir.join(format!(
            "target-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut child = sluice()
            .args(["target", "--config"])
            .arg(config)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start sluice target");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no URL: {}", std::fs::read_to_string(&log).unwrap()));
        // iscsi://ADDR/IQN/LUN -> iscsi://ADDR/IQN
        let url_base = url[..url.rfind('/').unwrap()].to_string();
        Self {
            child,
            url_base,
            log,
        }
    }

    fn url(&self, lun: u16) -> String {
        format!("{}/{lun}", self.url_base)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// The metrics address the target printed.
    fn metrics(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self
                .log()
                .lines()
                .find_map(|l| l.strip_prefix("sluice metrics on http://"))
            {
                return l.trim_end_matches("/metrics").to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no metrics line:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    fn wait_exit(mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "the target did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(dir: &Path, acl: &[&str], extra_lun: bool) -> String {
    let acl: Vec<String> = acl.iter().map(|a| format!("{a:?}")).collect();
    let mut text = format!(
        r#"listen = ["127.0.0.1:0"]

[control]
socket = "{}"

[metrics]
listen = "127.0.0.1:0"

[[target]]
iqn = "{TARGET}"
acl = [{}]

[[target.lun]]
number = 0
backend = "memory"
size = "16M"
"#,
        dir.join("control.sock").display(),
        acl.join(", ")
    );
    if extra_lun {
        text += "\n[[target.lun]]\nnumber = 5\nbackend = \"memory\"\nsize = \"4M\"\n";
    }
    text
}

fn ctl(dir: &Path, args: &[&str]) -> Output {
    sluice()
        .arg("ctl")
        .arg("--socket")
        .arg(dir.join("control.sock"))
        .args(args)
        .output()
        .expect("run sluice ctl")
}

fn ctl_ok(dir: &Path, args: &[&str]) -> String {
    let out = ctl(dir, args);
    assert!(
        out.status.success(),
        "sluice ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ctl_json(dir: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ctl_ok(dir, &a)).unwrap()
}

/// `sluice inq` as `initiator`; its output, or its error.
fn inq(url: &str, initiator: &str) -> Result<String, String> {
    let out = sluice()
        .args(["inq", "--initiator-name", initiator, url])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn readcap_blocks(url: &str) -> u64 {
    let out = sluice()
        .args(["readcap", "--initiator-name", ALLOWED, "--json", url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["blocks"].as_u64().unwrap_or_else(|| panic!("{v}"))
}

#[test]
fn ctl_changes_a_serving_target_and_its_saved_config_serves_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("sluice.toml");
    std::fs::write(&config, config_text(d, &[ALLOWED, REMOVED], false)).unwrap();
    let t = Daemon::start(&config, d, &[]);
    let socket = d.join("control.sock");
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "root only");

    // The allowed initiator verifies its data for the whole test.
    let bench = sluice()
        .args([
            "bench",
            "--initiator-name",
            ALLOWED,
            "--verify",
            "--time",
            "6s",
        ])
        .args(["--qd", "8", "--json", "--quiet", &t.url(0)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        inq(&t.url(0), REMOVED).is_ok(),
        "admitted before the change"
    );
    std::thread::sleep(Duration::from_millis(500));

    let out = ctl_ok(
        d,
        &[
            "lun",
            "add",
            TARGET,
            "--memory",
            "8M",
            "--thin",
            "--soft-threshold",
            "75",
            "--allow-sanitize",
        ],
    );
    assert_eq!(out.trim(), format!("target {TARGET}: LUN 1: added"));
    assert!(inq(&t.url(1), ALLOWED).is_ok(), "the new LU serves");
    ctl_ok(d, &["lun", "resize", TARGET, "0", "32M"]);
    assert_eq!(readcap_blocks(&t.url(0)), 32 << 11);
    let out = ctl(d, &["lun", "resize", TARGET, "0", "16M"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only grows"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ctl_ok(d, &["acl", "remove", TARGET, REMOVED]);
    let refused = inq(&t.url(0), REMOVED).unwrap_err();
    assert!(refused.contains("authorization"), "{refused}");

    let status = ctl_json(d, &["status"]);
    let luns = &status["targets"][0]["luns"];
    assert_eq!(luns[0]["size"], 32 << 20);
    assert_eq!(luns[1]["size"], 8 << 20);
    assert_eq!(luns[0]["provisioning"], "thick");
    assert_eq!(luns[1]["provisioning"], "thin");
    assert_eq!(luns[1]["soft_threshold"], 75);
    assert_eq!(luns[1]["sanitize"], true);
    assert_eq!(
        luns[1]["allocated_bytes"], 0,
        "nothing written to the thin LU"
    );
    assert_eq!(status["targets"][0]["acl"], serde_json::json!([ALLOWED]));
    let sessions = ctl_json(d, &["sessions"]);
    let session = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["initiator"] == ALLOWED)
        .expect("the bench's session is listed");
    assert_eq!(
        session["connections"][0]["peer"]
            .as_str()
            .map(|p| p.starts_with("127.0.0.1:")),
        Some(true)
    );
    assert!(session["negotiated"]["max_burst_length"].as_u64().unwrap() > 0);
    assert!(ctl_ok(d, &["luns"]).contains("32 MiB"));

    let out = bench.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["verify"]["checked"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["verify"]["errors"], 0, "{report}");

    // Who asked is logged with every change.
    let log = t.log();
    assert!(
        log.contains("operator request") && log.contains("(control socket)"),
        "{log}"
    );

    // Close a session, then save and restart from the saved file.
    let mut held = sluice()
        .args([
            "bench",
            "--initiator-name",
            ALLOWED,
            "--time",
            "20s",
            "--qd",
            "1",
        ])
        .args(["--quiet", &t.url(0)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let id = loop {
        let s = ctl_json(d, &["sessions", "--target", TARGET]);
        if let Some(id) = s.as_array().unwrap().first().and_then(|x| x["id"].as_u64()) {
            break id;
        }
        assert!(Instant::now() < deadline, "no session");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        ctl_ok(d, &["session", "close", &id.to_string()]).trim(),
        format!("session {id} closed")
    );
    assert!(!ctl_json(d, &["sessions"])
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == id));
    let _ = held.kill();
    let _ = held.wait();

    let shown = ctl_ok(d, &["config", "show"]);
    let saved = d.join("saved.toml");
    ctl_ok(d, &["config", "save", saved.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), shown);
    assert_eq!(
        std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777,
        0o600
    );
    t.signal("-TERM");
    assert!(t.wait_exit().success());
    assert!(!socket.exists(), "the socket file goes with the target");

    let again = Daemon::start(&saved, d, &[]);
    assert_eq!(
        ctl_ok(d, &["config", "show"]),
        shown,
        "the same configuration"
    );
    let status = ctl_json(d, &["status"]);
    assert_eq!(status["targets"][0]["luns"][0]["size"], 32 << 20);
    assert_eq!(status["targets"][0]["luns"][1]["size"], 8 << 20);
    assert_eq!(status["targets"][0]["luns"][1]["provisioning"], "thin");
    assert_eq!(status["targets"][0]["luns"][1]["soft_threshold"], 75);
    assert!(inq(&again.url(1), ALLOWED).is_ok());
    assert!(inq(&again.url(0), REMOVED).is_err());
}

#[test]
fn reload_applies_a_valid_file_and_refuses_an_invalid_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("sluice.toml");
    std::fs::write(&config, config_text(d, &[ALLOWED, REMOVED], false)).unwrap();
    let t = Daemon::start(&config, d, &[]);
    let session = sluice()
        .args([
            "bench",
            "--initiator-name",
            ALLOWED,
            "--verify",
            "--time",
            "4s",
        ])
        .args(["--qd", "4", "--json", "--quiet", &t.url(0)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    // An invalid file changes nothing and says where it is wrong.
    let before = ctl_ok(d, &["config", "show"]);
    std::fs::write(
        &config,
        config_text(d, &[ALLOWED], false).replace("size = \"16M\"", "size = 1000"),
    )
    .unwrap();
    let out = ctl(d, &["reload"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sluice.toml:") && err.contains("multiple of the block size"),
        "{err}"
    );
    assert_eq!(ctl_ok(d, &["config", "show"]), before);

    // A valid one: a new LU and a shorter ACL; the verifying session goes on.
    std::fs::write(&config, config_text(d, &[ALLOWED], true)).unwrap();
    let out = ctl_ok(d, &["reload"]);
    assert!(
        out.contains("LUN 5: added") && out.contains("ACL changed"),
        "{out}"
    );
    assert!(inq(&t.url(5), ALLOWED).is_ok());
    assert!(inq(&t.url(0), REMOVED).is_err());

    // SIGHUP does the same.
    std::fs::write(&config, config_text(d, &[ALLOWED, REMOVED], true)).unwrap();
    t.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while inq(&t.url(0), REMOVED).is_err() {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload:\n{}",
            t.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&config, "not = [toml").unwrap();
    t.signal("-HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !t.log().contains("reload refused, nothing changed") {
        assert!(Instant::now() < deadline, "{}", t.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(inq(&t.url(5), ALLOWED).is_ok(), "still serving");

    let out = session.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verify"]["errors"], 0, "{report}");
    assert!(report["verify"]["checked"].as_u64().unwrap() > 0);
}

/// `GET http://addr/path` with an optional bearer token: status code and body.
fn http_get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    http_get_with(addr, path, token, "")
}

/// [`http_get`] with extra header lines (each ending in CRLF).
fn http_get_with(addr: &str, path: &str, token: Option<&str>, extra: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n")) + extra;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_string())
}

/// The value of the series `name{labels}` (labels as written, in order).
fn series(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_count_known_io_exactly_and_drop_ended_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("sluice.toml");
    std::fs::write(&config, config_text(d, &[ALLOWED], false)).unwrap();
    let t = Daemon::start(&config, d, &[]);
    let addr = t.metrics();
    let openmetrics = "Accept: application/openmetrics-text; version=1.0.0\r\n";
    let (code, text) = http_get_with(&addr, "/metrics", None, openmetrics);
    assert_eq!(code, 200);
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(text.contains("# TYPE sluice_lu_commands counter"));
    let (code, before) = http_get(&addr, "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        before.contains("# TYPE sluice_lu_commands_total counter") && !before.contains("# EOF"),
        "without Accept: the Prometheus text format"
    );
    let lu = format!("{{target=\"{TARGET}\",lun=\"0\"");
    let reads_before = series(
        &before,
        &format!("sluice_lu_commands_total{lu},op=\"read\"}}"),
    );
    let other_before = series(
        &before,
        &format!("sluice_lu_commands_total{lu},op=\"other\"}}"),
    );

    const READS: u64 = 300;
    let out = sluice()
        .args([
            "bench",
            "--initiator-name",
            ALLOWED,
            "--rw",
            "randread",
            "--bs",
            "4k",
        ])
        .args([
            "--qd",
            "4",
            "--count",
            &READS.to_string(),
            "--json",
            "--quiet",
            &t.url(0),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["read"]["ios"], READS, "{report}");

    let (_, after) = http_get(&addr, "/metrics", None);
    let reads = series(
        &after,
        &format!("sluice_lu_commands_total{lu},op=\"read\"}}"),
    ) - reads_before;
    assert_eq!(reads as u64, READS);
    let bytes = |text: &str| series(text, &format!("sluice_lu_read_bytes_total{lu}}}")) as u64;
    assert_eq!(bytes(&after) - bytes(&before), READS * 4096);
    let histogram_count = series(
        &after,
        &format!("sluice_lu_command_latency_seconds_count{lu},op=\"read\"}}"),
    );
    assert_eq!(histogram_count as u64, READS + reads_before as u64);
    let inf = series(
        &after,
        &format!("sluice_lu_command_latency_seconds_bucket{lu},op=\"read\",le=\"+Inf\"}}"),
    );
    assert_eq!(inf, histogram_count, "+Inf holds every command");
    assert!(
        series(
            &after,
            &format!("sluice_lu_commands_total{lu},op=\"other\"}}")
        ) > other_before
    );
    assert!(
        series(
            &after,
            &format!("sluice_logins_total{{target=\"{TARGET}\",outcome=\"ok\"}}")
        ) >= 1.0
    );
    assert!(series(&after, "process_resident_memory_bytes") > 0.0);
    assert!(
        !after.contains("sluice_session_tasks{"),
        "the ended session left no series"
    );
    assert!(!after.contains("sluice_connection_pdus_total{"));

    // While a session runs its series are there, with bounded labels.
    let mut running = sluice()
        .args([
            "bench",
            "--initiator-name",
            ALLOWED,
            "--time",
            "20s",
            "--qd",
            "1",
            "--quiet",
        ])
        .arg(t.url(0))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = http_get(&addr, "/metrics", None);
        if text.contains(&format!(
            "sluice_session_tasks{{target=\"{TARGET}\",initiator=\"{ALLOWED}\""
        )) {
            assert!(text.contains("sluice_connection_pdus_total{"));
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = running.kill();
    let _ = running.wait();
    let (code, _) = http_get(&addr, "/nothing", None);
    assert_eq!(code, 404);
}

#[test]
fn the_admin_api_wants_its_token_and_metrics_beyond_loopback_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let token = d.join("admin.token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").unwrap();
    let config = d.join("sluice.toml");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let text = config_text(d, &[ALLOWED], false).replace(
        "[control]\n",
        &format!(
            "[control]\nhttp = \"127.0.0.1:{port}\"\ntoken_file = \"{}\"\n",
            token.display()
        ),
    );
    std::fs::write(&config, text).unwrap();
    let _t = Daemon::start(&config, d, &[]);
    let addr = format!("127.0.0.1:{port}");
    assert_eq!(http_get(&addr, "/v1/status", None).0, 401);
    assert_eq!(
        http_get(&addr, "/v1/status", Some("wrong-token-wrong-token")).0,
        401
    );
    let (code, body) = http_get(
        &addr,
        "/v1/status",
        Some("0123456789abcdef0123456789abcdef"),
    );
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"]["targets"][0]["iqn"], TARGET);
    let out = sluice()
        .args(["ctl", "--http", &format!("http://{addr}"), "--token-file"])
        .arg(&token)
        .args(["lun", "add", TARGET, "--number", "2", "--null", "1G"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ctl_json(d, &["luns"]).as_array().unwrap().len() == 2);

    // Metrics on a non-loopback address without a token: refused at start.
    let bad = d.join("bad.toml");
    std::fs::write(
        &bad,
        config_text(d, &[ALLOWED], false)
            .replace("listen = \"127.0.0.1:0\"", "listen = \"0.0.0.0:0\"")
            .replace("control.sock", "other.sock"),
    )
    .unwrap();
    let out = sluice()
        .args(["target", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs a token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn systemd_hears_ready_reloading_watchdog_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let notify = d.join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let config = d.join("sluice.toml");
    std::fs::write(&config, config_text(d, &[ALLOWED], false)).unwrap();
    let t = Daemon::start(
        &config,
        d,
        &[
            ("NOTIFY_SOCKET", notify.to_str().unwrap()),
            ("WATCHDOG_USEC", "300000"),
        ],
    );
    let next = || {
        let mut buf = [0u8; 4096];
        let n = sock.recv(&mut buf).expect("a notification in time");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let mut seen = Vec::new();
    let wait_for = |what: &str, seen: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let msg = next();
            seen.push(msg.clone());
            if msg.lines().any(|l| l == what) {
                return msg;
            }
            assert!(Instant::now() < deadline, "no {what} in {seen:?}");
        }
    };
    let ready = wait_for("READY=1", &mut seen);
    assert!(ready.contains("STATUS=serving"), "{ready}");
    // Ready only once it serves: a login works now.
    assert!(inq(&t.url(0), ALLOWED).is_ok());
    wait_for("WATCHDOG=1", &mut seen);
    wait_for("WATCHDOG=1", &mut seen);
    t.signal("-HUP");
    let reloading = wait_for("RELOADING=1", &mut seen);
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    wait_for("READY=1", &mut seen);
    t.signal("-TERM");
    wait_for("STOPPING=1", &mut seen);
    assert!(t.wait_exit().success());
}

#[test]
fn logs_suit_the_journal_when_stderr_is_its_stream() {
    // JOURNAL_STREAM names stderr's device and inode: lines lose the timestamp and gain
    // a syslog priority.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let file = std::fs::File::create(&log).unwrap();
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().unwrap();
    let stream = format!("{}:{}", meta.dev(), meta.ino());
    let out = sluice()
        .args(["target", "--check-config", "/nonexistent-sluice/x.toml"])
        .env("JOURNAL_STREAM", &stream)
        .env("RUST_LOG", "info")
        .stderr(file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let mut child = sluice()
        .args(["target", "--listen", "127.0.0.1:0", "--memory", "1M"])
        .env("JOURNAL_STREAM", &stream)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::OpenOptions::new().append(true).open(&log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let info: Vec<&str> = text.lines().filter(|l| l.starts_with("<6>")).collect();
    assert!(!info.is_empty(), "{text}");
    assert!(
        info.iter()
            .all(|l| !l.contains("Z ") && !l.contains('\u{1b}')),
        "no timestamps or colours: {text}"
    );
}
