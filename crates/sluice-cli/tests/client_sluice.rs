//! `sluice discover | ls | inq | readcap | read | write | dd | xcopy` against an in-process
//! `sluice target`.

mod client;

use client::target::{chap, config, TestTarget, IQN};
use client::{fails, json, ok, pattern};

#[test]
fn discover_ls_inq_readcap() {
    let t = TestTarget::start(config());
    let portal = t.portal();
    let out = ok(&["discover", &portal]);
    assert!(out.contains(IQN), "{out}");
    let v = json(&["discover", &portal]);
    assert_eq!(v[0]["name"], IQN);

    let out = ok(&["ls", &portal]);
    assert!(out.contains(&format!("Target:{IQN}")), "{out}");
    assert!(out.contains("Lun:0") && out.contains("Lun:1"), "{out}");
    assert!(out.contains("Size:16M"), "{out}");
    let v = json(&["ls", &t.url(1)]);
    assert_eq!(v[0]["luns"][1]["capacity"]["block_size"], 4096);

    let out = ok(&["inq", &t.url(0)]);
    assert!(out.contains("direct access block device"), "{out}");
    assert!(out.contains("unit serial number"), "{out}");
    assert!(out.contains("designator"), "{out}");
    let v = json(&["inq", &t.url(0), "--page", "0xb0"]);
    assert_eq!(v["vpd"][0]["page"], 0xb0);

    let v = json(&["readcap", &t.url(0)]);
    assert_eq!(v["bytes"], 16 << 20);
    assert_eq!(v["block_size"], 512);
}

#[test]
fn read_write_verify_with_and_without_digests() {
    let t = TestTarget::start(config());
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    let output = dir.path().join("out");
    let data = pattern(300 * 1024, 3);
    std::fs::write(&input, &data).unwrap();
    for digest in ["none", "crc32c"] {
        let url = t.url(0);
        let d = ["--header-digest", digest, "--data-digest", digest];
        let mut args = vec![
            "write",
            &url,
            "--offset",
            "4096",
            "-i",
            input.to_str().unwrap(),
        ];
        args.extend(d);
        ok(&args);
        let out = output.to_str().unwrap();
        let mut args = vec![
            "read", &url, "--offset", "4096", "--length", "307200", "-o", out,
        ];
        args.extend(d);
        ok(&args);
        assert_eq!(std::fs::read(&output).unwrap(), data);
    }
    // Unaligned read, pattern write.
    ok(&[
        "write",
        &t.url(1),
        "--offset",
        "8192",
        "--pattern",
        "0xa5",
        "--length",
        "8192",
    ]);
    let v = json(&["read", &t.url(1), "--offset", "8193", "--length", "100"]);
    assert_eq!(v["length"], 100);
    let raw = client::sluice(&["read", &t.url(1), "--offset", "8193", "--length", "100"]);
    assert_eq!(raw.stdout, vec![0xa5; 100]);
    // Errors say what failed.
    let e = fails(&[
        "write",
        &t.url(0),
        "--offset",
        "100",
        "--pattern",
        "1",
        "--length",
        "512",
    ]);
    assert!(e.contains("multiples of the block size"), "{e}");
    let e = fails(&["read", &t.url(0), "--offset", "16M", "--length", "1"]);
    assert!(e.contains("beyond the end"), "{e}");
}

#[test]
fn dd_in_and_out_is_byte_identical() {
    let t = TestTarget::start(config());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let back = dir.path().join("back");
    let data = pattern(4 << 20, 9);
    std::fs::write(&src, &data).unwrap();
    let (s, b) = (src.to_str().unwrap(), back.to_str().unwrap());
    let into = json(&["dd", "--if", s, "--of", &t.url(0), "--bs", "256K"]);
    let out = json(&[
        "dd",
        "--if",
        &t.url(0),
        "--of",
        b,
        "--length",
        "4M",
        "--header-digest",
        "crc32c",
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    assert_eq!(into["sha256"], out["sha256"]);
    // LUN to LUN (LUN 0 has 512-byte blocks, LUN 1 4096-byte blocks).
    let l2l = json(&[
        "dd",
        "--if",
        &t.url(0),
        "--of",
        &t.url(1),
        "--length",
        "4M",
        "--bs",
        "64K",
    ]);
    assert_eq!(l2l["sha256"], into["sha256"]);
    let text = ok(&["dd", "--if", &t.url(1), "--of", b, "--quiet"]);
    assert!(
        text.contains(&format!("sha256 {}", into["sha256"].as_str().unwrap())),
        "{text}"
    );
}

#[test]
fn xcopy_copies_inside_the_target() {
    let mut c = config();
    // Two LUNs of 512-byte blocks (EXTENDED COPY here copies between equal block sizes).
    c.targets[0].luns[1].block_size = 512;
    let t = TestTarget::start(c);
    let dir = tempfile::tempdir().unwrap();
    let (src, back) = (dir.path().join("src"), dir.path().join("back"));
    let data = pattern(3 << 20, 5);
    std::fs::write(&src, &data).unwrap();
    let (s, b) = (src.to_str().unwrap(), back.to_str().unwrap());
    ok(&["dd", "--if", s, "--of", &t.url(0), "--quiet"]);
    let v = json(&[
        "xcopy",
        "--from",
        &t.url(0),
        "--to",
        &t.url(1),
        "--length",
        "3M",
    ]);
    assert_eq!(v["bytes"], 3 << 20);
    assert_eq!(v["commands"], 1);
    // 3 MiB moved; the session carried the parameter list and PDU headers only.
    assert!(v["session_bytes_sent"].as_u64().unwrap() < 4096, "{v}");
    assert!(v["session_bytes_received"].as_u64().unwrap() < 4096, "{v}");
    ok(&[
        "dd",
        "--if",
        &t.url(1),
        "--of",
        b,
        "--length",
        "3M",
        "--quiet",
    ]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let out = ok(&[
        "xcopy",
        "--from",
        &t.url(0),
        "--to",
        &t.url(1),
        "--length",
        "1M",
    ]);
    assert!(out.contains("no data crossed the network"), "{out}");
    // LUNs of different block sizes, or of different targets, are refused up front.
    let e = fails(&[
        "xcopy",
        "--from",
        &t.url(0),
        "--to",
        "iscsi://127.0.0.1:1/iqn.2026-11.x:y/0",
    ]);
    assert!(e.contains("same target"), "{e}");
}

#[test]
fn chap_one_way_mutual_and_refused() {
    let mut cfg = config();
    cfg.targets[0].chap = Some(chap("bob", "bobsecret1234", Some(("tgt", "tgtsecret5678"))));
    let t = TestTarget::start(cfg);
    let url = format!("iscsi://bob%bobsecret1234@{}/{IQN}/0", t.portal());
    ok(&["readcap", &url]);
    let mutual = format!("{url}?target_user=tgt&target_password=tgtsecret5678");
    ok(&["inq", &mutual, "-O", "chap_algorithms=sha3-256,sha256"]);
    let plain = t.url(0);
    ok(&[
        "readcap",
        &plain,
        "--chap-user",
        "bob",
        "--chap-secret",
        "bobsecret1234",
        "--target-user",
        "tgt",
        "--target-secret",
        "tgtsecret5678",
    ]);
    let bad = format!("iscsi://bob%wrongsecret99@{}/{IQN}/0", t.portal());
    let e = fails(&["readcap", &bad]);
    assert!(e.contains("authentication failure"), "{e}");
    assert!(!e.contains("wrongsecret99"), "secret leaked: {e}");
    let e = fails(&[
        "readcap",
        &format!("{url}?target_user=tgt&target_password=notit1234567"),
    ]);
    assert!(e.contains("target authentication failed"), "{e}");
}

#[test]
fn text_output_into_a_closed_pipe_ends_quietly() {
    // `sluice ls ... | head -0`: the reader is gone before the first line is written.
    let t = TestTarget::start(config());
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["ls", &t.portal()])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("run sluice");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
