//! `sluice lab pdu-cost --preset tiny` end to end in a cost-probes build: every point
//! measured, each role's stages counted per data PDU with the probes covering most of its
//! CPU, every output written and parseable.

use std::process::Command;

use sluice_lab::pdu_cost::{preset, PduRun};
use sluice_lab::study::table::parse_csv;
use sluice_probe::{Role, Stage};

#[test]
fn tiny_pdu_cost_study_measures_every_stage_of_both_roles() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pdu");
    let run = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "pdu-cost", "--preset", "tiny", "--out"])
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .expect("run sluice lab pdu-cost");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<PduRun> = parse_csv(&text).unwrap();
    assert_eq!(rows.len(), preset("tiny").unwrap().points.len());
    for r in &rows {
        assert_eq!(
            r.data_pdus,
            r.commands,
            "{}: one data PDU per command",
            r.key()
        );
        for role in [Role::Target, Role::Initiator] {
            for stage in [Stage::Syscall, Stage::Framing, Stage::Protocol] {
                assert!(
                    r.per_pdu(role, stage) > 0.0,
                    "{} {role:?} {stage:?}",
                    r.key()
                );
            }
            let c = r.coverage(role);
            assert!(
                (0.2..1.2).contains(&c),
                "{} {role:?}: probes cover {c:.2} of the CPU",
                r.key()
            );
        }
        assert!(r.per_pdu(Role::Target, Stage::Scsi) > 0.0, "{}", r.key());
        // CRC32C only where digests were negotiated.
        let crc = r.per_pdu(Role::Initiator, Stage::Crc) + r.per_pdu(Role::Target, Stage::Crc);
        assert_eq!(crc > 0.0, r.header_digest || r.data_digest, "{}", r.key());
        // A write copies its data into the memory LUN.
        if r.direction == "write" {
            assert!(r.per_pdu(Role::Target, Stage::Copy) > 0.0, "{}", r.key());
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## The cost split at 8 KiB"), "{report}");
    let png = std::fs::read(out.join("sizes-read-initiator-both.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
}
