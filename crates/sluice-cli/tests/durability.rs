//! A file-backed LUN keeps every write acknowledged with FUA or followed by SYNCHRONIZE CACHE
//! across `kill -9` of the target and a restart.
//!
//! (A killed process leaves the page cache behind, so this proves that nothing acknowledged
//! was held back in the target's own memory; the fdatasync behind FUA and SYNCHRONIZE CACHE
//! is what protects against power loss, and the storage tests check it is issued.)

mod support;

use std::process::Command;

use support::{require_tool, TargetProcess};

fn qemu_io(url: &str, cmds: &[&str]) -> String {
    let tool = require_tool("qemu-io", "qemu-utils and qemu-block-extra");
    let mut c = Command::new(tool);
    c.args(["-f", "raw"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    let out = c.arg(url).output().expect("run qemu-io");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "qemu-io {cmds:?}:\n{text}");
    assert!(!text.contains("Pattern verification failed"), "{text}");
    text
}

#[test]
fn acknowledged_durable_writes_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let path = path.to_str().unwrap();
    let target = TargetProcess::start(&["--file", path, "--size", "32M"]);
    qemu_io(
        &target.url,
        &[
            "write -f -P 0x71 0 64k", // FUA
            "write -P 0x72 1M 256k",  // then SYNCHRONIZE CACHE below
            "write -f -P 0x73 8M 4k", // FUA
            "flush",
        ],
    );
    drop(target); // SIGKILL: no logout, no shutdown flush

    let target = TargetProcess::start(&["--file", path]);
    let out = qemu_io(
        &target.url,
        &[
            "read -P 0x71 0 64k",
            "read -P 0x72 1M 256k",
            "read -P 0x73 8M 4k",
        ],
    );
    assert_eq!(out.matches("read ").count(), 3, "{out}");
}
