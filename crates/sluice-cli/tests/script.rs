//! `sluice script` end to end against an in-process `sluice target` (memory LUs): the
//! example scripts of docs/script-examples pass, a failing expectation exits 1 naming its
//! line, errors exit 2 naming theirs, and a refused login can be expected.

mod client;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use client::target::{chap, config, TestTarget, IQN};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/script-examples")
}

/// `sluice script FILE --set ...`.
fn script(file: &Path, vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.arg("script").arg(file).env_remove("RUST_LOG");
    for (k, v) in vars {
        cmd.arg("--set").arg(format!("{k}={v}"));
    }
    cmd.output().expect("run sluice script")
}

/// Writes `text` to a script file in `dir` and runs it.
fn script_text(dir: &Path, text: &str, vars: &[(&str, &str)]) -> Output {
    let file = dir.join("test.sluice");
    std::fs::write(&file, text).unwrap();
    script(&file, vars)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn example_scripts_pass() {
    let t = TestTarget::start(config());
    let url = t.url(0);
    let portal = t.portal();
    for name in ["basic", "negotiation", "tmf"] {
        let out = script(&examples().join(format!("{name}.sluice")), &[("url", &url)]);
        assert_exit(&out, 0);
        let stdout = text(&out.stdout);
        assert!(stdout.contains("logout: done"), "{name}: {stdout}");
        assert!(!stdout.contains("failed"), "{name}: {stdout}");
    }
    let out = script(&examples().join("basic.sluice"), &[("url", &t.url(1))]);
    assert_exit(&out, 0);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("block size 4096"), "{stdout}");
    assert!(stdout.contains("00000000  a5 a5"), "the hex dump: {stdout}");
    assert!(
        stdout.contains("CHECK CONDITION") && stdout.contains("expect: ok"),
        "{stdout}"
    );
    let out = script(
        &examples().join("login-failure.sluice"),
        &[("portal", &portal)],
    );
    assert_exit(&out, 0);
    assert!(
        text(&out.stdout).contains("not found"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_failing_expectation_exits_1_naming_its_line() {
    let t = TestTarget::start(config());
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // A negotiated value that is not what the script says.
        (
            "connect $url MaxBurstLength=65536\nlogin\nexpect key MaxBurstLength 131072\n",
            3,
            "negotiated 65536, expected 131072",
        ),
        // Data that is not what was written.
        (
            "connect $url\nlogin\nwrite 10 4 pattern=1\n# comment\nverify 10 4 pattern=2\n",
            5,
            "verify 10+4: byte 0",
        ),
        // A status that is not the one expected.
        (
            "connect $url\nlogin\nread 0 1\nexpect status CHECK_CONDITION\n",
            4,
            "READ(16) ended GOOD, expected CHECK CONDITION",
        ),
        (
            "connect $url\nlogin\nread 0xffffffffff 1\nexpect status CHECK_CONDITION sense=MEDIUM_ERROR\n",
            4,
            "ILLEGAL REQUEST",
        ),
        // A login that succeeds where the script expects a refusal.
        ("connect $url\nlogin\nexpect login failed\n", 3, "the login succeeded"),
    ];
    for (body, line, needle) in cases {
        let out = script_text(dir.path(), body, &[("url", &t.url(0))]);
        assert_exit(&out, 1);
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("test.sluice:{line}: expectation failed")),
            "{body}\n{stderr}"
        );
        assert!(stderr.contains(needle), "{body}\n{stderr}");
    }
}

#[test]
fn errors_exit_2_naming_their_line() {
    let t = TestTarget::start(config());
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // A CHECK CONDITION nobody expected.
        (
            "connect $url\nlogin\n\nread 0xffffffffff 1\nlogout\n",
            4,
            "LOGICAL BLOCK ADDRESS OUT OF RANGE",
        ),
        // A syntax error is found before anything connects: the login on line 1 would fail.
        (
            "connect iscsi://127.0.0.1:1/iqn.x:y/0\nlogin\nread 0\n",
            3,
            "usage: read",
        ),
        ("login\n", 1, "login before connect"),
        ("connect $url\nread 0 1\n", 2, "not logged in"),
        (
            "connect $url\nlogin\nexpect data nothing zero\n",
            3,
            "no buffer named nothing",
        ),
        (
            "connect $url\nlogin\nwrite 0 1 file=/nonexistent/x\n",
            3,
            "/nonexistent/x",
        ),
    ];
    for (body, line, needle) in cases {
        let out = script_text(dir.path(), body, &[("url", &t.url(0))]);
        assert_exit(&out, 2);
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("test.sluice:{line}: ")),
            "{body}\n{stderr}"
        );
        assert!(stderr.contains(needle), "{body}\n{stderr}");
    }
}

#[test]
fn refused_logins_can_be_expected_by_class() {
    let mut cfg = config();
    cfg.targets[0].chap = Some(chap("scriptuser", "scriptsecret12", None));
    let t = TestTarget::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let portal = t.portal();
    let good = format!("iscsi://scriptuser%scriptsecret12@{portal}/{IQN}/0");
    let bad = format!("iscsi://scriptuser%wrongsecret12@{portal}/{IQN}/0");
    let body = "connect $bad\nlogin\nexpect login failed authentication\n\
                login\nexpect login failed initiator-error\n\
                connect $good\nlogin\nwrite 0 1 zero\nlogout\n";
    let out = script_text(dir.path(), body, &[("bad", &bad), ("good", &good)]);
    assert_exit(&out, 0);
    assert!(
        text(&out.stdout).contains("authentication failure"),
        "{}",
        text(&out.stdout)
    );

    // The wrong class is a failed expectation; no expectation at all is an error.
    let out = script_text(
        dir.path(),
        "connect $bad\nlogin\nexpect login failed not-found\n",
        &[("bad", &bad)],
    );
    assert_exit(&out, 1);
    assert!(text(&out.stderr).contains("test.sluice:3: expectation failed"));
    let out = script_text(dir.path(), "connect $bad\nlogin\n", &[("bad", &bad)]);
    assert_exit(&out, 2);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("test.sluice:2: login: ") && stderr.contains("authentication"),
        "{stderr}"
    );
}

#[test]
fn reads_a_script_from_stdin_and_checks_without_running() {
    let t = TestTarget::start(config());
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["script", "-", "--set"])
        .arg(format!("url={}", t.url(1)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"connect $url\nlogin\nwrite 3 2 byte=7\nread 3 2 into=b\nexpect data b byte=7\necho all \"good here\"\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert!(
        text(&out.stdout).contains("\nall good here\n"),
        "{}",
        text(&out.stdout)
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.sluice");
    std::fs::write(&file, "connect iscsi://127.0.0.1:1/iqn.x:y/0\nlogin\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["script", "--check"])
        .arg(&file)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(text(&out.stdout).contains("2 commands, no errors"));
}

#[test]
fn files_in_and_out_over_two_connections() {
    let t = TestTarget::start(config());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    let data: Vec<u8> = (0..8 * 4096u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    std::fs::write(&input, &data).unwrap();
    let body = "connect $url connections=2 digests=crc32c\nlogin\nexpect key MaxConnections 2\n\
                write 5 8 file=$in\nread 5 8 file=$out into=back\nexpect data back file=$in\n\
                verify 5 8 buffer=back\nwrite 0 1 file=$in\n";
    let out = script_text(
        dir.path(),
        body,
        &[
            ("url", &t.url(1)),
            ("in", input.to_str().unwrap()),
            ("out", output.to_str().unwrap()),
        ],
    );
    // The last line writes one 4 KiB block from a 32 KiB file: refused, naming both sizes.
    assert_exit(&out, 2);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("test.sluice:8: ")
            && stderr.contains("holds 32768 bytes; the command moves 4096"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&output).unwrap(), data);
}

/// The same scripts over iSER: the URL's scheme makes the initiator library pick the
/// transport (`sluice target --iser`, the software RDMA provider).
#[test]
fn example_scripts_pass_over_iser() {
    use std::io::BufRead as _;
    let mut target = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "target",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "64M",
            "--iser",
            "--iser-port",
            "0",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = std::io::BufReader::new(target.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("iser://"))
        .expect("sluice target --iser prints an iser:// URL");
    let results: Vec<_> = ["basic", "tmf"]
        .iter()
        .map(|name| script(&examples().join(format!("{name}.sluice")), &[("url", &url)]))
        .collect();
    let _ = target.kill();
    let _ = target.wait();
    for out in &results {
        assert_exit(out, 0);
        let stdout = text(&out.stdout);
        assert!(
            stdout.contains("iser://") && stdout.contains("logout: done"),
            "{stdout}"
        );
    }
}
