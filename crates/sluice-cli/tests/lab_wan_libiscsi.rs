//! `sluice lab wan --preset tiny --libiscsi`: libiscsi's initiator (`qemu-img bench -w` over
//! `iscsi://`) writes through the emulated link beside sluice's, one line per workload of the
//! throughput figure, within the link's capacity. Interop tier: needs qemu-img with its iscsi
//! block driver (Debian: qemu-utils, qemu-block-extra) and root.

mod support;

use std::process::Command;

use sluice_lab::study::table::parse_csv;
use sluice_lab::wan::WanRun;

#[test]
fn libiscsi_writes_through_the_link() {
    support::require_tool("qemu-img", "qemu-utils and qemu-block-extra");
    sluice_test_support::require_root("sluice lab wan (network namespaces and TUN devices)");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("wan");
    let run = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["lab", "wan", "--preset", "tiny", "--libiscsi", "--out"])
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let rows: Vec<WanRun> = parse_csv(&text).unwrap();
    let libiscsi: Vec<&WanRun> = rows.iter().filter(|r| r.initiator == "libiscsi").collect();
    // tiny's throughput figure: two sluice workloads at two RTTs.
    assert_eq!(libiscsi.len(), 4, "{rows:?}");
    let line = 100e6 / 8.0 * 8948.0 / 9000.0 / f64::from(1 << 20);
    for r in libiscsi {
        assert!(r.bytes > 0 && r.seconds > 0.0, "{r:?}");
        // Within the line but for the edges of a short run on a shared machine (see
        // lab_wan.rs).
        assert!(r.mib_s() <= line * 1.1, "{} MiB/s past the link", r.mib_s());
        assert!(r.of_theory() > 0.2, "{} of theory", r.of_theory());
        assert!(r.tcp.is_none(), "libiscsi's socket is not monitored");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("libiscsi"), "the report names libiscsi");
}
