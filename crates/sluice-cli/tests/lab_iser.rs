//! `sluice lab iser --preset tiny` end to end: every run of the preset measured with zero
//! failed commands, iSER runs in RDMA mode with RDMA operations in place of Data-In and
//! Data-Out PDUs, every output written and parseable, and resuming measures nothing again.

use std::path::Path;
use std::process::{Command, Output};

use sluice_lab::iser::{preset, Direction, IserRun, Lun, Transport};
use sluice_lab::study::table::parse_csv;

fn lab_iser(out: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "iser", "--preset", "tiny", "--out"])
        .arg(out)
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice lab iser")
}

fn rows(out: &Path) -> Vec<IserRun> {
    let text = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    parse_csv(&text).expect("results.csv parses")
}

#[test]
fn tiny_iser_study_writes_checked_results_figures_and_report_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("iser");
    let run = lab_iser(&out, &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let plan = preset("tiny").unwrap();
    let got = rows(&out);
    assert_eq!(got.len(), plan.points.len(), "one row per run");
    for lun in Lun::ALL {
        for t in [Transport::Tcp, Transport::Iser] {
            assert!(
                got.iter()
                    .any(|r| r.point.transport == t && r.point.lun == Some(lun)),
                "no {t:?} run on the {lun:?} LUN"
            );
        }
    }
    for r in &got {
        let what = r.key();
        // iSCSI runs name their LUN, raw runs have none.
        assert_eq!(
            r.point.lun.is_none(),
            r.point.transport == Transport::Raw,
            "{what}"
        );
        assert_eq!(r.errors, 0, "{what}");
        assert!(
            r.bytes > 0 && r.seconds > 0.0 && r.mbit_per_s() > 0.0,
            "{what}"
        );
        match r.point.transport {
            Transport::Tcp => {
                assert!(!r.rdma_mode, "{what}");
                assert_eq!((r.rdma_writes, r.rdma_reads), (0, 0), "{what}");
                // The study's values were negotiated.
                assert_eq!((r.mrdsl, r.max_burst), (512 << 10, 512 << 10), "{what}");
                assert!(r.initial_r2t && !r.immediate_data, "{what}");
                match r.point.direction {
                    Direction::Read => assert!(r.data_in_pdus >= r.commands, "{what}"),
                    Direction::Write => assert!(r.data_out_pdus >= r.commands, "{what}"),
                }
            }
            Transport::Iser => {
                assert!(r.rdma_mode, "{what}");
                assert!(r.sends >= 2 * r.session_commands, "{what}");
                // Every command's data moved by RDMA, none by data PDUs on the wire.
                match r.point.direction {
                    Direction::Read => {
                        assert!(r.rdma_writes >= r.session_commands, "{what}");
                        assert_eq!(r.rdma_reads, 0, "{what}");
                    }
                    Direction::Write => {
                        assert!(r.rdma_reads >= r.session_commands, "{what}");
                        assert_eq!(r.rdma_writes, 0, "{what}");
                        // The initiator's core hands the datamover a whole burst per
                        // Data-Out (they never reach the wire), not one per Send-sized
                        // segment of the negotiated TargetRecvDataSegmentLength.
                        assert!(r.mrdsl < r.max_burst, "{what}");
                        let per_command = u64::from(r.point.transfer_bytes.div_ceil(r.max_burst));
                        assert!(
                            r.data_out_pdus <= (r.commands + 4) * per_command,
                            "{what}: {} Data-Out PDUs for {} commands",
                            r.data_out_pdus,
                            r.commands
                        );
                    }
                }
            }
            Transport::Raw => assert!(r.commands > 0, "{what}"),
        }
    }

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(got.len()));
    assert_eq!(json["preset"], "tiny");

    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "## SCSI READs",
        "## SCSI WRITEs",
        "iSER's share of the provider's raw throughput",
        "On the memory LUN",
        "On the null LUN",
        "Large writes on the memory LUN",
        "Large writes on the null LUN",
    ] {
        assert!(report.contains(needle), "report lacks {needle}");
    }
    for png in [
        "fig2-read-throughput.png",
        "fig3-write-throughput.png",
        "cpu-read.png",
        "cpu-write.png",
        "fig4-iser-share-of-raw.png",
    ] {
        let bytes = std::fs::read(out.join(png)).unwrap_or_default();
        assert_eq!(bytes.get(1..4), Some(&b"PNG"[..]), "{png}");
    }

    // A second run without --resume refuses to mix with the first.
    assert!(!lab_iser(&out, &[]).status.success());
    // With it, nothing is measured again.
    let again = lab_iser(&out, &["--resume"]);
    assert!(again.status.success());
    assert_eq!(rows(&out).len(), got.len());
}
