//! `sluice lab crc --preset tiny` end to end: every algorithm checked, every point measured
//! once, every output written and parseable, and resuming measures nothing again.

use std::path::Path;
use std::process::{Command, Output};

use sluice_lab::crc::study::{preset, CrcRun};
use sluice_lab::study::table::parse_csv;

fn lab_crc(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "crc", "--preset", "tiny", "--out"])
        .arg(out)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice lab crc")
}

fn rows(out: &Path) -> Vec<CrcRun> {
    let text = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    parse_csv(&text).expect("results.csv parses")
}

#[test]
fn tiny_crc_study_writes_checked_results_figures_and_report_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("crc");
    let run = lab_crc(&out, &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let plan = preset("tiny").unwrap();
    let got = rows(&out);
    let runnable = plan
        .points
        .iter()
        .filter(|p| p.method.supports(p.crc))
        .count();
    assert_eq!(got.len(), runnable, "one row per point this CPU can run");
    for r in &got {
        assert!(r.ns.min > 0.0 && r.ns.min <= r.ns.median && r.ns.median <= r.ns.max);
        assert!(r.gb_per_s() > 0.0, "{}", r.key());
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(got.len()));
    assert_eq!(json["preset"], "tiny");
    let checks = json["checks"].as_array().expect("checks");
    assert!(checks.iter().all(|c| c
        .as_str()
        .is_some_and(|c| c.ends_with(": ok") || c.ends_with("not available on this CPU"))));

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in ["## CRC32C at 8 KiB", "Slicing-by-8 runs", "## Copy and CRC"] {
        assert!(report.contains(needle), "report lacks {needle}");
    }
    for png in [
        "fig14-cycles.png",
        "cycles-per-byte-warm.png",
        "fig16-8KiB-warm.png",
    ] {
        let bytes = std::fs::read(out.join(png)).unwrap_or_default();
        assert_eq!(bytes.get(1..4), Some(&b"PNG"[..]), "{png}");
    }

    // A second run without --resume refuses to mix with the first.
    assert!(!lab_crc(&out, &[]).status.success());
    // With it, nothing is measured again.
    let again = lab_crc(&out, &["--resume"]);
    assert!(again.status.success());
    assert_eq!(rows(&out).len(), got.len());
}
