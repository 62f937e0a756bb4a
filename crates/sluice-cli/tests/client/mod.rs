//! Helpers for the initiator subcommand tests: an in-process target and a `sluice` runner.
#![allow(dead_code)]

pub mod peers;
pub mod target;

use std::process::{Command, Output};

/// Runs `sluice ARGS` and returns its output.
pub fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice")
}

/// Runs `sluice ARGS`, asserts success and returns stdout.
pub fn ok(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(
        out.status.success(),
        "sluice {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `sluice ARGS`, asserts failure and returns stderr.
pub fn fails(args: &[&str]) -> String {
    let out = sluice(args);
    assert!(!out.status.success(), "sluice {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `sluice ... --json` parsed.
pub fn json(args: &[&str]) -> serde_json::Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(&a)).expect("valid JSON")
}

/// A byte pattern that differs per block.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 512) as u8).wrapping_mul(7) ^ (i as u8).wrapping_add(seed))
        .collect()
}
