//! The UDP-against-TCP measurement's tiny preset end to end: a target in this process over
//! both transports, datagrams lost through the relay, every file written.

use std::sync::Arc;

use sluice_lab::udp_vs_tcp::{plan, run_udp_vs_tcp, Scale, Transport};
use sluice_lab::Progress;

#[test]
fn the_tiny_preset_measures_both_figures_and_writes_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let report = run_udp_vs_tcp(Scale::Tiny, dir.path(), Arc::new(Progress::new())).unwrap();
    let points = plan(Scale::Tiny);
    assert_eq!(report.rows.len(), points.len());
    for r in &report.rows {
        assert_eq!(r.errors, 0, "{r:?}");
        assert_eq!(r.ios, r.point.commands, "every command completed: {r:?}");
        assert!(r.mean_ms > 0.0 && r.p50_ms <= r.p99_ms, "{r:?}");
        if r.point.transport == Transport::Tcp || r.point.loss == 0.0 {
            assert_eq!(r.dropped, 0, "{r:?}");
        }
    }
    let dropped: u64 = report.rows.iter().map(|r| r.dropped).sum();
    assert!(dropped > 0, "the lossy points lost nothing");
    for name in [
        "udp-vs-tcp.csv",
        "udp-vs-tcp.json",
        "fig5_10_sockets.png",
        "fig5_11_sockets.png",
        "udp-vs-tcp.md",
    ] {
        let len = std::fs::metadata(dir.path().join(name)).unwrap().len();
        assert!(len > 100, "{name}: {len} bytes");
    }
    let csv = std::fs::read_to_string(dir.path().join("udp-vs-tcp.csv")).unwrap();
    assert_eq!(csv.lines().count(), points.len() + 1);
    assert!(report.markdown.contains("### Fig. 5.10") && report.markdown.contains("### Fig. 5.11"));
}
