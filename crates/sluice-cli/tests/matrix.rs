//! The operational keys the target offers, forced one combination at a time, with QEMU's
//! libiscsi driver as the initiator (libiscsi takes the target's answers as they come):
//! ImmediateData × InitialR2T × MaxRecvDataSegmentLength {512, 8192, 262144} ×
//! MaxOutstandingR2T {1, 4} × five MaxBurstLength/FirstBurstLength pairs from 512 B to
//! 16 MiB × header digests off/on (libiscsi 1.19 never offers data digests; the target's own
//! tests and the sluice initiator cover those). Every combination writes patterns that cross burst
//! and segment boundaries, reads them back verified, and checks what was negotiated.

mod support;

use std::fmt::Write as _;
use std::process::Command;

use support::{require_tool, TargetProcess};

/// (MaxBurstLength, FirstBurstLength) pairs the target offers.
const BURSTS: [(u32, u32); 5] = [
    (512, 512),
    (65_536, 512),
    (65_536, 65_536),
    (16_777_215, 65_536),
    (16_777_215, 16_777_215),
];

/// What libiscsi 1.19 offers for FirstBurstLength, MaxBurstLength and MaxRecvDataSegmentLength
/// (`lib/login.c`: 262144 each, with InitialR2T=No, ImmediateData=Yes): the negotiated values are
/// the target's offer combined with these by each key's rule.
const LIBISCSI_BURST: u32 = 262_144;

#[derive(Debug)]
struct Case {
    immediate_data: bool,
    initial_r2t: bool,
    mrdsl: u32,
    max_outstanding_r2t: u16,
    max_burst: u32,
    first_burst: u32,
    header_digest: bool,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for immediate_data in [false, true] {
        for initial_r2t in [false, true] {
            for mrdsl in [512, 8192, 262_144] {
                for max_outstanding_r2t in [1, 4] {
                    for (max_burst, first_burst) in BURSTS {
                        for header_digest in [false, true] {
                            out.push(Case {
                                immediate_data,
                                initial_r2t,
                                mrdsl,
                                max_outstanding_r2t,
                                max_burst,
                                first_burst,
                                header_digest,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

fn config(case: &Case) -> String {
    let mut s =
        String::from("listen = [\"127.0.0.1:0\"]\n[keepalive]\nenabled = false\n[session]\n");
    let _ = writeln!(s, "immediate_data = {}", case.immediate_data);
    let _ = writeln!(s, "initial_r2t = {}", case.initial_r2t);
    let _ = writeln!(s, "max_recv_data_segment_length = {}", case.mrdsl);
    let _ = writeln!(s, "max_outstanding_r2t = {}", case.max_outstanding_r2t);
    let _ = writeln!(s, "max_burst_length = {}", case.max_burst);
    let _ = writeln!(s, "first_burst_length = {}", case.first_burst);
    s += "[[target]]\niqn = \"iqn.2026-11.io.sluice:matrix\"\nacl = \"open\"\n";
    s += "[[target.lun]]\nbackend = \"memory\"\nsize = \"8M\"\n";
    s
}

/// The negotiated values the target logged, as `key: value` pairs from its Debug output.
fn negotiated(log: &str) -> String {
    log.lines()
        .find(|l| l.contains("negotiated"))
        .unwrap_or_else(|| panic!("no negotiation logged:\n{log}"))
        .to_string()
}

fn expect(line: &str, field: &str, value: impl std::fmt::Display) {
    let needle = format!("{field}: {value}");
    assert!(line.contains(&needle), "expected {needle} in {line}");
}

#[test]
fn every_forced_combination_moves_data_correctly() {
    let qemu_io = require_tool("qemu-io", "qemu-utils and qemu-block-extra");
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    assert_eq!(cases.len(), 240, "the full factorial");
    for (i, case) in cases.iter().enumerate() {
        let cfg = dir.path().join(format!("case{i}.toml"));
        std::fs::write(&cfg, config(case)).unwrap();
        let log_path = dir.path().join(format!("case{i}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let target = TargetProcess::with_config(&cfg, "sluice_target=debug", log);
        let portal = target
            .url
            .trim_start_matches("iscsi://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let digest = if case.header_digest { "crc32c" } else { "none" };
        let opts = format!(
            "driver=iscsi,transport=tcp,portal={portal},target=iqn.2026-11.io.sluice:matrix,lun=0,header-digest={digest}"
        );
        // Sizes chosen to straddle every boundary in the matrix: below and above 512 B
        // segments, 64 KiB bursts and libiscsi's 256 KiB offers.
        let out = Command::new(&qemu_io)
            .args(["--image-opts", &opts])
            .args(["-c", "write -P 0x11 0 512"])
            .args(["-c", "write -P 0x22 4096 69632"])
            .args(["-c", "write -P 0x33 1M 1M"])
            .args(["-c", "aio_write -P 0x44 3M 300k"])
            .args(["-c", "aio_write -P 0x55 4M 8k"])
            .args(["-c", "aio_flush"])
            .args(["-c", "read -P 0x11 0 512"])
            .args(["-c", "read -P 0x22 4096 69632"])
            .args(["-c", "read -P 0x33 1M 1M"])
            .args(["-c", "read -P 0x44 3M 300k"])
            .args(["-c", "read -P 0x55 4M 8k"])
            .output()
            .expect("run qemu-io");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{case:?}: qemu-io failed:\n{text}");
        assert!(
            !text.contains("Pattern verification failed") && !text.contains("failed:"),
            "{case:?}:\n{text}"
        );
        assert_eq!(text.matches("read ").count(), 5, "{case:?}:\n{text}");
        drop(target);

        let line = negotiated(&std::fs::read_to_string(&log_path).unwrap());
        // RFC 7143 section 13: InitialR2T is OR, ImmediateData is AND, bursts are MIN, and
        // FirstBurstLength never exceeds MaxBurstLength; libiscsi offers InitialR2T=No,
        // ImmediateData=Yes and 256 KiB bursts.
        let max_burst = case.max_burst.min(LIBISCSI_BURST);
        expect(&line, "initial_r2t", case.initial_r2t);
        expect(&line, "immediate_data", case.immediate_data);
        expect(&line, "target_max_recv_data_segment_length", case.mrdsl);
        expect(&line, "max_burst_length", max_burst);
        // Section 13.14: FirstBurstLength is Irrelevant when no unsolicited data can flow
        // (ImmediateData=No and InitialR2T=Yes).
        if case.immediate_data || !case.initial_r2t {
            let first = case.first_burst.min(LIBISCSI_BURST).min(max_burst);
            expect(&line, "first_burst_length", first);
        }
        expect(&line, "header_digest", case.header_digest);
        // libiscsi offers MaxOutstandingR2T=1: the minimum is 1 whatever the target allows.
        expect(&line, "max_outstanding_r2t", 1);
    }
}
