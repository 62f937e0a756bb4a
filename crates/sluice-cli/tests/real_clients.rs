//! libiscsi's own tools against `sluice target`, on the memory and the file backend.

mod support;

use std::process::Command;

use support::{require_tool, TargetProcess};

fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().expect("run tool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

/// The portal part of an iscsi:// URL: `iscsi://host:port`.
fn portal(url: &str) -> String {
    let rest = url.trim_start_matches("iscsi://");
    format!("iscsi://{}", rest.split('/').next().unwrap_or(rest))
}

fn check_tools(target: &TargetProcess, bytes: u64) {
    let ls = run(
        &require_tool("iscsi-ls", "libiscsi-bin"),
        &["-s", &portal(&target.url)],
    );
    assert!(ls.contains("Target:iqn.2026-11.io.sluice:default"), "{ls}");
    assert!(ls.contains("Lun:0") && ls.contains("DIRECT_ACCESS"), "{ls}");

    let inq = run(&require_tool("iscsi-inq", "libiscsi-bin"), &[&target.url]);
    assert!(inq.contains("Vendor:SLUICE"), "{inq}");
    assert!(inq.contains("SBC-3"), "{inq}");
    let serial = run(
        &require_tool("iscsi-inq", "libiscsi-bin"),
        &["-e", "1", "-c", "128", &target.url],
    );
    assert!(serial.contains("Unit Serial Number"), "{serial}");

    let cap = run(
        &require_tool("iscsi-readcapacity16", "libiscsi-bin"),
        &[&target.url],
    );
    assert!(cap.contains(&format!("Total size:{bytes}")), "{cap}");
}

#[test]
fn libiscsi_tools_on_a_memory_lun() {
    let target = TargetProcess::start(&["--memory", "64M"]);
    check_tools(&target, 64 << 20);
}

#[test]
fn libiscsi_tools_on_a_file_lun() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let target = TargetProcess::start(&["--file", path.to_str().unwrap(), "--size", "32M"]);
    check_tools(&target, 32 << 20);
}
