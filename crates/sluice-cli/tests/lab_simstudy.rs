//! `sluice lab simstudy --preset tiny` end to end: every point run on the production session
//! cores in virtual time, every output written and parseable, the study's shapes where the
//! tiny points can show them, and resuming runs nothing again.

use std::path::Path;
use std::process::{Command, Output};

use sluice_lab::simstudy::{preset, SimRun};
use sluice_lab::study::table::parse_csv;

fn simstudy(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "simstudy", "--preset", "tiny", "--out"])
        .arg(out)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice lab simstudy")
}

fn rows(out: &Path) -> Vec<SimRun> {
    let text = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    parse_csv(&text).expect("results.csv parses")
}

fn row<'a>(rows: &'a [SimRun], figure: &str, series: &str, x: f64) -> &'a SimRun {
    rows.iter()
        .find(|r| r.figure == figure && r.series == series && r.x == x)
        .unwrap_or_else(|| panic!("no row {figure} {series} {x}"))
}

#[test]
fn tiny_simulation_study_writes_results_figures_and_report_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("simstudy");
    let run = simstudy(&out, &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let plan = preset("tiny").unwrap();
    let got = rows(&out);
    assert_eq!(got.len(), plan.points.len(), "one row per point: {stderr}");
    for r in &got {
        assert_eq!(
            r.failed, 0,
            "{} {} {}: {}",
            r.figure, r.series, r.x, r.failure
        );
        assert!(r.response_s > 0.0 && r.interval_s > 0.0, "{}", r.key());
        assert!(r.utilisation > 0.0 && r.utilisation <= 1.0, "{}", r.key());
    }

    // A lone 4 KiB read on the study's path: at least one round trip (20 ms), and the
    // command's own trip t3 - t2 is the 10 ms one-way delay.
    let r = row(&got, "fig5.3", "study read", 32.0);
    assert!(r.response_s >= 0.020);
    assert!((r.t32_s - 0.010).abs() < 0.001, "{}", r.t32_s);
    // A 100-packet queue drops Data-Out that a 1000-packet queue holds (Fig. 5.4).
    let small = row(&got, "fig5.4", "study", 100.0);
    let large = row(&got, "fig5.4", "study", 1000.0);
    assert!(small.dropped > 0 && large.dropped == 0);
    assert!(small.utilisation < large.utilisation);
    // The command window of 1 serialises the Poisson arrivals (Fig. 5.8).
    let w1 = row(&got, "fig5.8", "study", 1.0);
    let w32 = row(&got, "fig5.8", "study", 32.0);
    assert!(w32.command_throughput > 3.0 * w1.command_throughput);
    assert!(w1.t21_s > w32.t21_s);
    // Bit errors cost TCP retransmissions (Fig. 5.9).
    let clean = row(&got, "fig5.9", "TCP ERL 0", 1e-9);
    let noisy = row(&got, "fig5.9", "TCP ERL 0", 1e-6);
    assert!(noisy.corrupted > 0 && noisy.retransmits > 0);
    assert!(noisy.data_throughput < clean.data_throughput);

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(got.len()));
    assert_eq!(json["preset"], "tiny");
    let fits: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("fits.json")).unwrap()).unwrap();
    assert!(fits.as_array().is_some_and(|f| !f.is_empty()));

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "## Fig. 5.3",
        "T(S) = k S^α",
        "## Fig. 5.10",
        "## Simulation speed",
        "## CRC and TCP checksum aliasing",
        "## iSCSI over UDP against TCP",
    ] {
        assert!(report.contains(needle), "report lacks {needle}");
    }
    for png in [
        "fig5_3.png",
        "fig5_1_decomposition.png",
        "fig5_4.png",
        "fig5_5.png",
        "fig5_7.png",
        "fig5_8.png",
        "fig5_9.png",
        "fig5_10.png",
        "fig5_11.png",
        "fig6_6_crc3_markov.png",
        "fig6_9_tcp_checksum.png",
        "fig5_10_sockets.png",
    ] {
        let bytes = std::fs::read(out.join(png)).unwrap_or_default();
        assert_eq!(bytes.get(1..4), Some(&b"PNG"[..]), "{png}");
    }

    // A second run without --resume refuses to mix with the first.
    assert!(!simstudy(&out, &[]).status.success());
    // The chapter-6 rows are written beside chapter 5's.
    let crc_rows = std::fs::read_to_string(out.join("crc-alias.csv")).unwrap();
    assert!(crc_rows.lines().count() > 1);
    // With it, nothing is run again, and the report keeps the chapter-6 section.
    let again = simstudy(&out, &["--resume"]);
    assert!(again.status.success());
    assert_eq!(rows(&out).len(), got.len());
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## CRC and TCP checksum aliasing"));
}
