//! iSCSI over UDP against iSCSI over TCP, over real loopback sockets: the response time of
//! one command against its ExpectedDataTransferLength, the measurement behind Figures 5.10
//! and 5.11 of Sajid Hussain's dissertation "Performance Evaluation of iSCSI for IP Storage
//! and Transport Protocols" (University of Manitoba, 2004, section 5.4).
//!
//! The study compared the two transports in ns-2: UDP answered small commands faster, but
//! once large transfers lost datagrams (queue overflow) each loss waited for the
//! TransferContext timeout before iSCSI's error recovery acted, so a 10 s timeout made UDP
//! hopeless beyond 1 MB (Fig. 5.10), and 0.1 s for UDP against 1 s for TCP moved the
//! crossover to 8 MB (Fig. 5.11). Here the same comparison runs sluice's production code: a
//! target served in this process over TCP and over the experimental UDP transport
//! (`sluice_udp`) on the same port, sluice's initiator at queue depth 1 (one command at a
//! time: its response time), both at ErrorRecoveryLevel 1 with the same parameters. The
//! TransferContext timeout maps to the two ERL 1 timers that wait for missing PDUs: the
//! initiator's retry period (`retry_timeout`) and the target's sequence reception timeout
//! (`sequence_timeout`), set together. Loss is injected on UDP by a seeded lossy relay
//! (`sluice_udp::relay`); loopback TCP loses nothing, so TCP runs lossless (say so in any
//! comparison: TCP's own retransmission would cost an RTO, about 200 ms, per loss).
//!
//! [`run_udp_vs_tcp`] writes `udp-vs-tcp.csv`, `udp-vs-tcp.json`, `fig5_10_sockets.png`,
//! `fig5_11_sockets.png` and, last, `udp-vs-tcp.md` into its output directory: names that
//! do not collide with `sluice lab simstudy`'s own, which runs it beside chapter 5.

mod plan;
mod run;
mod writeup;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use plan::{plan, Point, Scale, Transport};
pub use run::Row;

use crate::{LabError, Progress};

/// What [`run_udp_vs_tcp`] measured and wrote.
#[derive(Clone, Debug)]
pub struct UdpVsTcpReport {
    /// One row per point, in the plan's order.
    pub rows: Vec<Row>,
    /// Files written (CSV, JSON, PNGs, Markdown).
    pub files: Vec<PathBuf>,
    /// The Markdown section (also in [`MARKDOWN_FILE`]).
    pub markdown: String,
}

/// The Markdown section's file, written last: its presence marks a finished run.
pub const MARKDOWN_FILE: &str = "udp-vs-tcp.md";

/// Runs the `scale` preset and writes its results, figures and report into `out_dir`
/// (created if missing). `progress` stops the run early when stopped (the rows measured so
/// far are kept). Starts its own runtimes: must not be called from inside a tokio runtime.
pub fn run_udp_vs_tcp(
    scale: Scale,
    out_dir: &Path,
    progress: Arc<Progress>,
) -> Result<UdpVsTcpReport, LabError> {
    std::fs::create_dir_all(out_dir).map_err(|e| io_error(out_dir, e))?;
    let points = plan(scale);
    let rows = run::measure_all(&points, &progress)?;
    let mut files = Vec::new();
    let csv = out_dir.join("udp-vs-tcp.csv");
    std::fs::write(&csv, writeup::csv(&rows)).map_err(|e| io_error(&csv, e))?;
    files.push(csv);
    let json = out_dir.join("udp-vs-tcp.json");
    std::fs::write(&json, writeup::json(&rows)).map_err(|e| io_error(&json, e))?;
    files.push(json);
    for (name, chart) in writeup::figures(&rows) {
        let path = out_dir.join(name);
        crate::study::plot::draw(&chart, &path).map_err(LabError::Workload)?;
        files.push(path);
    }
    let markdown = writeup::markdown(scale, &rows);
    let md = out_dir.join(MARKDOWN_FILE);
    std::fs::write(&md, &markdown).map_err(|e| io_error(&md, e))?;
    files.push(md);
    Ok(UdpVsTcpReport {
        rows,
        files,
        markdown,
    })
}

fn io_error(path: &Path, e: std::io::Error) -> LabError {
    LabError::Workload(format!("{}: {e}", path.display()))
}
