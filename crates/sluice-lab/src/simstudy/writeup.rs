//! The figures and the Markdown report of `sluice lab simstudy`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::fit::{power_law, PowerFit};
use super::plan::FIGURES;
use super::row::SimRun;
use crate::study::plot::{draw, draw_bars, BarChart, Bars, Chart, Series};

/// What the report says about the run besides its rows.
#[derive(Clone, Debug, Default)]
pub struct SimContext {
    /// The command that made it.
    pub command: String,
    /// The machine and how it was measured.
    pub machine: Vec<String>,
    /// The preset.
    pub preset: String,
    /// Runs that could not finish: point and why.
    pub errors: Vec<String>,
    /// Sections appended after the chapter-5 figures, each Markdown with its own heading:
    /// where other halves of the study (the chapter-6 CRC aliasing figures, the comparison
    /// with iSCSI over a real UDP socket) add their results to this report.
    pub extra_sections: Vec<String>,
}

/// The report and the figures drawn.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// Markdown.
    pub report: String,
    /// PNG files written.
    pub figures: Vec<PathBuf>,
    /// The T(S) = k S^α fits: series and fit.
    pub fits: Vec<(String, PowerFit)>,
}

/// Figures from the study's published tables (its Figs. 5.10 and 5.11 list their points):
/// EDTL in KB, TCP seconds, UDP seconds.
const STUDY_FIG_5_10: &[(f64, f64, f64)] = &[
    (1.0, 0.07, 0.02),
    (10.0, 0.1106, 0.0208),
    (100.0, 0.17411, 0.04314),
    (1000.0, 0.2776, 0.1195),
    (2000.0, 0.3458, 20.0445),
    (3000.0, 0.454, 30.0493),
    (4000.0, 1.622, 40.054),
    (5000.0, 1.86, 50.0588),
    (6000.0, 1.928, 60.0635),
    (7000.0, 2.036, 70.0681),
    (8000.0, 2.104, 80.0726),
    (9000.0, 2.212, 90.077),
    (10000.0, 2.281, 100.081),
    (20000.0, 3.162, 200.119),
    (30000.0, 4.0436, 310.081),
];

/// See [`STUDY_FIG_5_10`].
const STUDY_FIG_5_11: &[(f64, f64, f64)] = &[
    (1000.0, 0.2561, 0.1438),
    (1500.0, 0.3000, 0.1861),
    (2000.0, 0.3438, 0.2484),
    (2500.0, 0.3878, 0.2907),
    (3000.0, 0.4315, 0.3530),
    (4000.0, 0.5193, 0.4576),
    (5000.0, 0.6070, 0.5621),
    (6000.0, 0.6947, 0.6670),
    (7000.0, 0.7824, 0.7712),
    (8000.0, 0.8701, 0.8758),
    (9000.0, 0.9578, 0.9804),
    (10000.0, 1.0455, 1.0849),
    (10500.0, 1.0893, 1.1472),
    (10600.0, 1.0981, 1.1482),
];

struct FigureSpec {
    title: &'static str,
    x_label: &'static str,
    y_label: &'static str,
    log2_x: bool,
    log10_y: bool,
    /// Transforms the row's x for drawing.
    x: fn(f64) -> f64,
    /// The row's y.
    y: fn(&SimRun) -> f64,
    /// What the study shows.
    study: &'static str,
}

fn spec(fig: &str) -> Option<FigureSpec> {
    let id = |x: f64| x;
    Some(match fig {
        "fig5.3" => FigureSpec {
            title: "Fig. 5.3: response time against ExpectedDataTransferLength",
            x_label: "ExpectedDataTransferLength (KiB)",
            y_label: "response time t4 - t1 (s)",
            log2_x: true,
            log10_y: true,
            x: id,
            y: |r| r.response_s,
            study: "Sub-linear or linear growth, then a sharp rise, then linear again: the rises \
                    come where unsolicited data ends (FirstBurstLength) and where the Data-Out \
                    sent at once passes the 750 KB the 500-packet queue holds.",
        },
        "fig5.4" => FigureSpec {
            title: "Fig. 5.4: utilisation against the drop-tail buffer",
            x_label: "queue limit at the initiator's link (packets)",
            y_label: "utilisation U = L / (T BW) (%)",
            log2_x: false,
            log10_y: false,
            x: id,
            y: |r| r.utilisation * 100.0,
            study: "A spike (the worst case) at 100 packets, where Data-Out bursts overflow the \
                    queue and TCP retransmits; none at 1000 packets, which holds every packet.",
        },
        "fig5.5" => FigureSpec {
            title: "Fig. 5.5: utilisation against ExpectedDataTransferLength",
            x_label: "ExpectedDataTransferLength (KiB)",
            y_label: "utilisation U (%)",
            log2_x: true,
            log10_y: false,
            x: id,
            y: |r| r.utilisation * 100.0,
            study: "Utilisation grows with the command size; 10 Mb/s is highest and saturates \
                    first, then 100 Mb/s; 1000 Mb/s does not saturate in the range.",
        },
        "fig5.7" => FigureSpec {
            title: "Fig. 5.7: throughput against the number of commands (same total)",
            x_label: "commands sharing the total (count)",
            y_label: "data throughput X_d (MB/s)",
            log2_x: true,
            log10_y: false,
            x: id,
            y: |r| r.data_throughput / 1e6,
            study: "Flat while the command window exceeds the commands active at once; with a \
                    window of 8, flat up to 8 commands and then falling linearly.",
        },
        "fig5.8" => FigureSpec {
            title: "Fig. 5.8: command throughput against the command window",
            x_label: "command window MaxCmdSN - ExpCmdSN + 1 (commands)",
            y_label: "command throughput X_c (commands/s)",
            log2_x: false,
            log10_y: false,
            x: id,
            y: |r| r.command_throughput,
            study: "Throughput rises with the window with diminishing returns, reaching its \
                    maximum at a window of 30.",
        },
        "fig5.9" => FigureSpec {
            title: "Fig. 5.9: throughput against the bit error rate",
            x_label: "bit error rate (log10)",
            y_label: "data throughput X_d (MB/s)",
            log2_x: false,
            log10_y: false,
            x: f64::log10,
            y: |r| r.data_throughput / 1e6,
            study: "Throughput falls as the BER rises; at 10^-9 the impact is minimal.",
        },
        "fig5.10" => FigureSpec {
            title: "Fig. 5.10: TCP and UDP response times, UDP TransferContext 10 s",
            x_label: "ExpectedDataTransferLength (KB of 1000 bytes)",
            y_label: "response time (s)",
            log2_x: false,
            log10_y: true,
            x: id,
            y: |r| r.response_s,
            study: "UDP is faster up to 1 MB, then jumps from 0.12 s to 20 s at 2 MB: each loss \
                    waits for the 10 s TransferContext timeout.",
        },
        "fig5.11" => FigureSpec {
            title: "Fig. 5.11: TCP and UDP response times, UDP TransferContext 0.1 s",
            x_label: "ExpectedDataTransferLength (KB of 1000 bytes)",
            y_label: "response time (s)",
            log2_x: false,
            log10_y: false,
            x: id,
            y: |r| r.response_s,
            study: "With a 0.1 s timeout UDP stays ahead of TCP up to 8 MB (the crossover moves \
                    from 1 MB to 8 MB).",
        },
        _ => return None,
    })
}

fn series_of<'a>(rows: &[&'a SimRun]) -> BTreeMap<String, Vec<&'a SimRun>> {
    let mut m: BTreeMap<String, Vec<&SimRun>> = BTreeMap::new();
    for r in rows {
        m.entry(r.series.clone()).or_default().push(r);
    }
    for v in m.values_mut() {
        v.sort_by(|a, b| a.x.total_cmp(&b.x));
    }
    m
}

fn published(fig: &str) -> Vec<Series> {
    let table = match fig {
        "fig5.10" => STUDY_FIG_5_10,
        "fig5.11" => STUDY_FIG_5_11,
        _ => return Vec::new(),
    };
    vec![
        Series {
            name: "published: TCP".into(),
            points: table.iter().map(|p| (p.0, p.1)).collect(),
            markers_only: true,
            ..Series::default()
        },
        Series {
            name: "published: UDP".into(),
            points: table.iter().map(|p| (p.0, p.2)).collect(),
            markers_only: true,
            ..Series::default()
        },
    ]
}

fn fmt_s(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x >= 1.0 {
        format!("{x:.3}")
    } else {
        format!("{:.2} ms", x * 1e3)
    }
}

/// Draws every figure with rows and writes the report.
pub fn analyse(rows: &[SimRun], ctx: &SimContext, dir: &Path) -> Result<Analysis, String> {
    let mut report = String::new();
    let mut figures = Vec::new();
    let mut fits = Vec::new();
    let _ = writeln!(
        report,
        "# The iSCSI simulation study, chapter 5, on sluice's protocol code\n\n\
         Sajid Hussain, *Performance Evaluation of iSCSI for IP Storage and Transport \
         Protocols* (PhD dissertation, University of Manitoba, 2004), evaluated iSCSI in ns-2 \
         with a re-implementation of the protocol. Here every run drives sluice's own \
         initiator and target session cores, framer and SCSI layer (a memory LU) in virtual \
         time over a modelled link: bandwidth, propagation delay, a drop-tail queue, bit \
         errors, and a NewReno TCP model (or one PDU per UDP datagram). Each point is one \
         deterministic run.\n\n\
         Command: `{}`\n",
        ctx.command
    );
    for l in &ctx.machine {
        let _ = writeln!(report, "- {l}");
    }
    let _ = writeln!(
        report,
        "\nSetups: *study* is the study's link (1 Gb/s, 10 ms one way, 500-packet drop-tail \
         queue, 1500-byte packets) and parameters (MaxRecvDataSegmentLength 1500, \
         FirstBurstLength = MaxBurstLength = 64 KiB, ImmediateData=Yes, InitialR2T=No, every \
         R2T at once), over ns-2-like TCP (initial window 2, RTO at least 200 ms); *today* is \
         a sluice initiator and target with their default offers (256 KiB segments, 16 MiB \
         bursts, MaxOutstandingR2T 8) over Linux-like TCP (initial window 10); *RFC defaults* \
         are RFC 7143's (InitialR2T=Yes, 8 KiB segments, 64 KiB first burst, 256 KiB bursts, \
         one R2T at a time). Response time is t4 - t1 of the study's Fig. 5.1; t1: the \
         application hands the command to the initiator, t2: its PDU leaves the session, t3: \
         the target's session has it, t4: the initiator completes it, t5: the target sees \
         its status acknowledged.\n"
    );
    for fig in FIGURES {
        let mine: Vec<&SimRun> = rows.iter().filter(|r| r.figure == *fig).collect();
        if mine.is_empty() {
            continue;
        }
        let Some(s) = spec(fig) else { continue };
        let by_series = series_of(&mine);
        let mut chart = Chart {
            title: s.title.into(),
            x_label: s.x_label.into(),
            y_label: s.y_label.into(),
            log2_x: s.log2_x,
            log10_y: s.log10_y,
            series: Vec::new(),
        };
        for (name, rs) in &by_series {
            let points: Vec<(f64, f64)> = rs
                .iter()
                .filter(|r| r.failed < r.commands)
                .map(|r| ((s.x)(r.x), (s.y)(r)))
                .filter(|p| p.1.is_finite() && (!s.log10_y || p.1 > 0.0))
                .collect();
            chart.series.push(Series {
                name: name.clone(),
                points,
                ..Series::default()
            });
        }
        chart.series.extend(published(fig));
        let file = format!("{}.png", fig.replace('.', "_"));
        let path = dir.join(&file);
        draw(&chart, &path)?;
        figures.push(path);
        let _ = writeln!(report, "## {}\n\n![{}]({file})\n", s.title, s.title);
        let _ = writeln!(report, "The study: {}\n", s.study);
        let _ = writeln!(
            report,
            "| series | x | y | response | t2-t1 | t3-t2 | t4-t3 | t5-t4 | failed | drops | corrupted | TCP retx | RTOs | PDUs lost | cmd retries |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (name, rs) in &by_series {
            for r in rs {
                let _ = writeln!(
                    report,
                    "| {name} | {} | {:.4} | {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
                    r.x,
                    (s.y)(r),
                    fmt_s(r.response_s),
                    fmt_s(r.t21_s),
                    fmt_s(r.t32_s),
                    fmt_s(r.t43_s),
                    r.t54_s.map_or("-".into(), fmt_s),
                    r.failed,
                    r.commands,
                    r.dropped,
                    r.corrupted,
                    r.retransmits,
                    r.rto,
                    r.pdus_lost,
                    r.command_retries
                );
            }
        }
        if let Some(f) = mine.iter().find(|r| !r.failure.is_empty()) {
            let _ = writeln!(
                report,
                "\nFirst failure in this figure ({} at x = {}): {}",
                f.series, f.x, f.failure
            );
        }
        report.push('\n');
        if *fig == "fig5.3" {
            decomposition(&by_series, dir, &mut report, &mut figures)?;
            fit_section(&by_series, &mut report, &mut fits);
        }
    }
    speed_section(rows, &mut report);
    if !ctx.errors.is_empty() {
        let _ = writeln!(report, "## Runs that did not finish\n");
        for e in &ctx.errors {
            let _ = writeln!(report, "- {e}");
        }
        report.push('\n');
    }
    for section in &ctx.extra_sections {
        let _ = writeln!(report, "{section}\n");
    }
    Ok(Analysis {
        report,
        figures,
        fits,
    })
}

/// The response time split at the study's Fig. 5.1 points, for the study's writes.
fn decomposition(
    by_series: &BTreeMap<String, Vec<&SimRun>>,
    dir: &Path,
    report: &mut String,
    figures: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let Some(rs) = by_series.get("study write") else {
        return Ok(());
    };
    let rs: Vec<&&SimRun> = rs.iter().filter(|r| r.failed == 0).collect();
    if rs.is_empty() {
        return Ok(());
    }
    let chart = BarChart {
        title: "Fig. 5.1 decomposition: study writes".into(),
        x_label: "ExpectedDataTransferLength (KiB)".into(),
        y_label: "time (ms)".into(),
        groups: rs.iter().map(|r| format!("{}", r.x)).collect(),
        series: vec![
            Bars {
                name: "t2 - t1 (window)".into(),
                values: rs.iter().map(|r| r.t21_s * 1e3).collect(),
            },
            Bars {
                name: "t3 - t2 (command)".into(),
                values: rs.iter().map(|r| r.t32_s * 1e3).collect(),
            },
            Bars {
                name: "t4 - t3 (data and status)".into(),
                values: rs.iter().map(|r| r.t43_s * 1e3).collect(),
            },
        ],
        stacked: true,
    };
    let file = "fig5_1_decomposition.png";
    let path = dir.join(file);
    draw_bars(&chart, &path)?;
    figures.push(path);
    let _ = writeln!(
        report,
        "### Response-time decomposition (Fig. 5.1)\n\n![decomposition]({file})\n\n\
         t3 - t2 holds the command PDU and, when it carries immediate data, that data's \
         transfer (the target's session sees the PDU when its last byte arrives); t4 - t3 is \
         the R2T round trips, the solicited data and the status. t5 - t4 is in the table \
         where a later PDU acknowledged the status; a lone command has none.\n"
    );
    Ok(())
}

fn fit_section(
    by_series: &BTreeMap<String, Vec<&SimRun>>,
    report: &mut String,
    fits: &mut Vec<(String, PowerFit)>,
) {
    let _ = writeln!(
        report,
        "### T(S) = k S^α (equations 5.1, 5.2)\n\n\
         Least squares on log T = log k + α log S, S in KiB, T in seconds, 95 % intervals. \
         Each series is fitted over all its sizes and over the sizes past its \
         FirstBurstLength (where every write needs R2Ts).\n\n\
         | series | sizes | n | k (s) | k 95 % | α | α 95 % | R² |\n|---|---|---|---|---|---|---|---|"
    );
    for (name, rs) in by_series {
        let all: Vec<(f64, f64)> = rs
            .iter()
            .filter(|r| r.failed == 0)
            .map(|r| (r.x, r.response_s))
            .collect();
        let fbl_kib = rs
            .first()
            .map_or(0.0, |r| f64::from(r.first_burst) / 1024.0);
        let past: Vec<(f64, f64)> = all.iter().copied().filter(|p| p.0 > fbl_kib).collect();
        for (which, pts) in [("all", &all), ("past FirstBurstLength", &past)] {
            if let Some(f) = power_law(pts) {
                let _ = writeln!(
                    report,
                    "| {name} | {which} | {} | {:.4} | {:.4} - {:.4} | {:.3} | ± {:.3} | {:.3} |",
                    f.n, f.k, f.k_low, f.k_high, f.alpha, f.alpha_ci, f.r_squared
                );
                fits.push((format!("{name} ({which})"), f));
            }
        }
    }
    report.push('\n');
}

fn speed_section(rows: &[SimRun], report: &mut String) {
    let speed: Vec<&SimRun> = rows.iter().filter(|r| r.figure == "speed").collect();
    if speed.is_empty() {
        return;
    }
    let _ = writeln!(
        report,
        "## Simulation speed\n\n\
         One connection, queue depth 16, a 10 Gb/s link with 10 µs of delay (a loopback \
         stand-in), 64 KiB packets, today's parameters; wall-clock time of the whole run \
         (session cores, framing, SCSI layer over memory, TCP model) on one thread.\n\n\
         | direction | size (KiB) | commands | wall (s) | simulated I/Os per wall second | virtual I/Os per virtual second |\n|---|---|---|---|---|---|"
    );
    for r in speed {
        let _ = writeln!(
            report,
            "| {} | {} | {} | {:.3} | {:.0} | {:.0} |",
            r.series,
            r.x,
            r.commands,
            r.wall_s,
            r.ios_per_wall_second(),
            r.command_throughput
        );
    }
    report.push('\n');
}
