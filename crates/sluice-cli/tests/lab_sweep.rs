//! `sluice lab sweep --preset tiny` end to end: a sluice target spawned per point, every
//! output written and parseable, every run negotiated as its grid point asked, PDU counts as
//! RFC 7143 predicts, the models fitted, the figures drawn, and resuming skips finished runs.

use std::path::Path;
use std::process::{Command, Output};

use sluice_lab::sweep::{preset, RunRecord};

fn sweep(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "sweep", "--preset", "tiny", "--out"])
        .arg(out)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice lab sweep")
}

fn records(out: &Path) -> Vec<RunRecord> {
    let text = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    RunRecord::parse_csv(&text).expect("results.csv parses")
}

#[test]
fn tiny_sweep_writes_checked_results_figures_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let run = sweep(&out, &[]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "sweep failed:\n{stderr}");

    let plan = preset("tiny").unwrap();
    let recs = records(&out);
    assert_eq!(recs.len() as u64, plan.total_runs(), "one row per run");
    for r in &recs {
        assert!(
            r.mismatch.is_empty(),
            "{} negotiated {:?}",
            r.point.key(),
            r.mismatch
        );
        assert_eq!(r.measured.errors, 0, "{}", r.point.key());
        assert!(r.measured.seconds > 0.0 && r.measured.bytes >= plan.bytes_per_run);
        assert!(
            r.pdu_differences().is_empty(),
            "{}: {:?}",
            r.point.key(),
            r.pdu_differences()
        );
        assert!(
            r.measured.target_cpu_seconds.is_some(),
            "spawned target CPU time"
        );
    }
    // Every experiment ran, each point with the runs asked for.
    for e in &plan.experiments {
        let n = recs.iter().filter(|r| r.experiment == e.id).count();
        assert_eq!(n, e.points.len() * plan.runs as usize, "{}", e.id);
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let rows = json["runs"].as_array().expect("runs array");
    assert_eq!(rows.len(), recs.len());
    assert_eq!(rows[0]["experiment"], recs[0].experiment.as_str());
    assert!(rows[0]["neg_max_burst"].as_u64().is_some());

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for section in [
        "## Equation (1)",
        "## Equation (2)",
        "## Equation (3)",
        "## Table 2",
    ] {
        assert!(report.contains(section), "report lacks {section}");
    }
    assert!(
        !report.contains("Not fitted"),
        "a model was not fitted:\n{report}"
    );
    assert!(report.contains("R² = "));
    for fig in ["fig3", "fig5", "fig7", "fig9", "fig10", "fig11"] {
        let png = std::fs::read(out.join(format!("{fig}.png"))).expect(fig);
        assert_eq!(&png[1..4], b"PNG", "{fig}");
        assert!(
            report.contains(&format!("({fig}.png)")),
            "{fig} not embedded"
        );
    }

    // A second sweep into the same directory must be asked to resume ...
    let again = sweep(&out, &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
    // ... and resuming a finished sweep runs nothing again.
    let resumed = sweep(&out, &["--resume"]);
    assert!(resumed.status.success());
    assert_eq!(records(&out).len(), recs.len());
}

#[test]
fn resume_finishes_what_an_interrupted_sweep_left() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    assert!(sweep(&out, &[]).status.success());
    // Drop the last third of the rows, as if the sweep had been interrupted.
    let text = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let keep = lines.len() * 2 / 3;
    std::fs::write(out.join("results.csv"), lines[..keep].join("\n") + "\n").unwrap();
    let resumed = sweep(&out, &["--resume"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let recs = records(&out);
    assert_eq!(recs.len() as u64, preset("tiny").unwrap().total_runs());
    let mut keys: Vec<String> = recs
        .iter()
        .map(|r| format!("{}|{}|{}", r.experiment, r.point.key(), r.run))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), recs.len(), "no run twice");
}

#[test]
fn unknown_preset_names_the_presets() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "sweep", "--preset", "fig99", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fig99") && err.contains("quick"), "{err}");
}

#[test]
fn emulated_link_holds_its_rate() {
    sluice_test_support::require_root("the emulated-link test (network namespaces, TUN devices)");
    let dir = tempfile::tempdir().unwrap();
    let grid = dir.path().join("grid.toml");
    std::fs::write(
        &grid,
        "bytes_per_run = \"6M\"\nruns = 2\n[[experiment]]\nid = \"mrdsl-read\"\n\
         direction = \"read\"\nmrdsl = \"64K\"\nbursts = \"128K\"\n",
    )
    .unwrap();
    let out = dir.path().join("sweep");
    let run = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "lab",
            "sweep",
            "--link",
            "rate=100mbit,queue=256K",
            "--grid",
        ])
        .arg(&grid)
        .arg("--out")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let recs = records(&out);
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert!(r.usable(), "{:?}", r.mismatch);
        // 100 Mbit/s carries at most 11.92 MiB/s of IP packets; iSCSI data is less.
        let rate = r.measured.mib_per_s();
        assert!(rate < 11.92, "{rate} MiB/s through a 100 Mbit/s link");
        assert!(rate > 5.0, "{rate} MiB/s: the link runs far below its rate");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("rate=100mbit"), "the report names the link");
    // The sweep's namespace is gone once it ends: none is left whose process has exited.
    let stale: Vec<String> = std::fs::read_dir("/var/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.strip_prefix("sluicelab-")
                        .and_then(|rest| rest.split('-').next())
                        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        stale.is_empty(),
        "network namespaces left behind: {stale:?}"
    );
}
