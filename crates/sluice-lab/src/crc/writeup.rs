//! The figures and the Markdown report of `sluice lab crc`, beside the numbers Joglekar,
//! Kounavis and Berry published for a 1.7 GHz Pentium M: Sarwate at 6.55 cycles per byte,
//! Slicing-by-8 at 2.15 (three times faster) for an 8 KiB PDU (their Figure 14), and
//! interleaving the copy with the CRC saving 18 % (Sarwate) and 32 % (Slicing-by-8) of the two
//! operations' cycles (their Figure 16).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use super::fused::Method;
use super::study::{CrcRun, COPY_CRC, SPEED};
use super::LabCrc;
use crate::study::plot::{draw, draw_bars, BarChart, Bars, Chart, Series};

/// The paper's Sarwate cost, cycles per byte (8 KiB PDU, Pentium M).
pub const PAPER_SARWATE: f64 = 6.55;
/// The paper's Slicing-by-8 cost, cycles per byte.
pub const PAPER_SB8: f64 = 2.15;
/// The paper's saving from interleaving copy and CRC: Sarwate, Slicing-by-8.
pub const PAPER_INTERLEAVE_SAVING: [(&str, f64); 2] = [("sarwate", 0.18), ("slicing-by-8", 0.32)];

/// What the report says about the run besides the rows.
#[derive(Clone, Debug, Default)]
pub struct CrcContext {
    /// The command that made the results.
    pub command: String,
    /// Lines about the machine (CPU, TSC rate, caches, kernel).
    pub machine: Vec<String>,
    /// The check lines ([`super::study::check`]).
    pub checks: Vec<String>,
    /// The preset.
    pub preset: String,
}

/// Figures drawn and the report.
#[derive(Clone, Debug)]
pub struct CrcAnalysis {
    /// PNG file names, in report order.
    pub figures: Vec<String>,
    /// The Markdown report.
    pub report: String,
}

/// Cost per byte of a row: TSC ticks where measured, else nanoseconds.
fn per_byte(r: &CrcRun) -> f64 {
    r.tsc_per_byte
        .as_ref()
        .map_or(r.ns.median / r.size as f64, |s| s.median)
}

fn unit(rows: &[CrcRun]) -> &'static str {
    if rows.iter().all(|r| r.tsc_per_byte.is_some()) {
        "TSC cycles"
    } else {
        "ns"
    }
}

fn find<'a>(
    rows: &'a [CrcRun],
    experiment: &str,
    crc: &str,
    method: &str,
    size: u64,
    temperature: &str,
) -> Option<&'a CrcRun> {
    rows.iter().find(|r| {
        r.experiment == experiment
            && r.crc == crc
            && r.method == method
            && r.size == size
            && r.temperature == temperature
    })
}

fn speed<'a>(rows: &'a [CrcRun], crc: &str, size: u64, temperature: &str) -> Option<&'a CrcRun> {
    find(rows, SPEED, crc, Method::Crc.name(), size, temperature)
}

fn size_label(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1024 && s % 1024 == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// Draws the figures into `dir` and writes the report.
pub fn analyse(rows: &[CrcRun], ctx: &CrcContext, dir: &Path) -> Result<CrcAnalysis, String> {
    let mut figures = Vec::new();
    let u = unit(rows);
    let sizes: BTreeSet<u64> = rows
        .iter()
        .filter(|r| r.experiment == SPEED)
        .map(|r| r.size)
        .collect();

    // Figure 14: total cycles of one CRC against the read size, 512 B to 8 KiB.
    let fig14: Vec<u64> = sizes
        .iter()
        .copied()
        .filter(|s| (512..=8192).contains(s))
        .collect();
    if fig14.len() >= 2 {
        let mut series: Vec<Series> = LabCrc::ALL
            .iter()
            .map(|crc| Series {
                name: crc.name().into(),
                points: fig14
                    .iter()
                    .filter_map(|&s| speed(rows, crc.name(), s, "warm"))
                    .map(|r| (r.size as f64, per_byte(r) * r.size as f64))
                    .collect(),
                ..Series::default()
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        for (name, c) in [
            ("paper: Sarwate", PAPER_SARWATE),
            ("paper: Slicing-by-8", PAPER_SB8),
        ] {
            series.push(Series {
                name: format!("{name} ({c} cycles/B, Pentium M)"),
                points: fig14.iter().map(|&s| (s as f64, c * s as f64)).collect(),
                markers_only: true,
                ..Series::default()
            });
        }
        let file = "fig14-cycles.png";
        draw(
            &Chart {
                title: "Figure 14: CRC32C of one read's data (warm)".into(),
                x_label: "read size (bytes)".into(),
                y_label: format!("{u} per CRC"),
                log2_x: false,
                log10_y: false,
                series,
            },
            &dir.join(file),
        )?;
        figures.push(file.to_owned());
    }

    // Cost per byte and throughput over every size, warm and cold.
    for temperature in ["warm", "cold"] {
        let mut per_byte_series = Vec::new();
        let mut gbps_series = Vec::new();
        for crc in LabCrc::ALL {
            let runs: Vec<&CrcRun> = sizes
                .iter()
                .filter_map(|&s| speed(rows, crc.name(), s, temperature))
                .collect();
            if runs.is_empty() {
                continue;
            }
            per_byte_series.push(Series {
                name: crc.name().into(),
                points: runs.iter().map(|r| (r.size as f64, per_byte(r))).collect(),
                spread: runs
                    .iter()
                    .filter_map(|r| {
                        r.tsc_per_byte
                            .as_ref()
                            .map(|s| (r.size as f64, s.min, s.max))
                    })
                    .collect(),
                ..Series::default()
            });
            gbps_series.push(Series {
                name: crc.name().into(),
                points: runs.iter().map(|r| (r.size as f64, r.gb_per_s())).collect(),
                ..Series::default()
            });
        }
        if per_byte_series.is_empty() || sizes.len() < 2 {
            continue;
        }
        let span = sizes.iter().map(|&s| s as f64).collect::<Vec<_>>();
        for (name, c) in [
            ("paper: Sarwate", PAPER_SARWATE),
            ("paper: Slicing-by-8", PAPER_SB8),
        ] {
            per_byte_series.push(Series {
                name: format!("{name} ({c})"),
                points: span.iter().map(|&s| (s, c)).collect(),
                markers_only: true,
                ..Series::default()
            });
        }
        let file = format!("cycles-per-byte-{temperature}.png");
        draw(
            &Chart {
                title: format!("CRC32C cost per byte, {temperature} buffers"),
                x_label: "buffer size (bytes)".into(),
                y_label: format!("{u} per byte"),
                log2_x: true,
                log10_y: true,
                series: per_byte_series,
            },
            &dir.join(&file),
        )?;
        figures.push(file);
        let file = format!("throughput-{temperature}.png");
        draw(
            &Chart {
                title: format!("CRC32C throughput, {temperature} buffers"),
                x_label: "buffer size (bytes)".into(),
                y_label: "GB/s (10^9 bytes per second)".into(),
                log2_x: true,
                log10_y: true,
                series: gbps_series,
            },
            &dir.join(&file),
        )?;
        figures.push(file);
    }

    // Figure 16: copy and CRC apart and fused.
    let copy_points: BTreeSet<(u64, String)> = rows
        .iter()
        .filter(|r| r.experiment == COPY_CRC)
        .map(|r| (r.size, r.temperature.clone()))
        .collect();
    for (size, temperature) in &copy_points {
        let crcs: Vec<&str> = LabCrc::ALL
            .iter()
            .map(|c| c.name())
            .filter(|c| {
                rows.iter()
                    .any(|r| r.experiment == COPY_CRC && r.crc == *c && r.size == *size)
            })
            .collect();
        let copy = rows.iter().find(|r| {
            r.experiment == COPY_CRC
                && r.method == Method::Copy.name()
                && r.size == *size
                && &r.temperature == temperature
        });
        let per_call = |r: &CrcRun| per_byte(r) * r.size as f64;
        let mut series = vec![Bars {
            name: "copy alone".into(),
            values: crcs.iter().map(|_| copy.map_or(0.0, per_call)).collect(),
        }];
        for m in [
            Method::Crc,
            Method::Sequential,
            Method::Blocked,
            Method::Interleaved,
        ] {
            series.push(Bars {
                name: match m {
                    Method::Crc => "CRC alone".into(),
                    Method::Sequential => "copy, then CRC".into(),
                    Method::Blocked => {
                        format!("per {} block", size_label(super::fused::BLOCK as u64))
                    }
                    _ => "interleaved word by word".into(),
                },
                values: crcs
                    .iter()
                    .map(|c| {
                        find(rows, COPY_CRC, c, m.name(), *size, temperature).map_or(0.0, per_call)
                    })
                    .collect(),
            });
        }
        let file = format!(
            "fig16-{}-{temperature}.png",
            size_label(*size).replace(' ', "")
        );
        draw_bars(
            &BarChart {
                title: format!(
                    "Figure 16: copy and CRC of {} ({temperature} source)",
                    size_label(*size)
                ),
                x_label: "CRC32C algorithm".into(),
                y_label: format!("{u} per payload"),
                groups: crcs.iter().map(|c| (*c).to_owned()).collect(),
                series,
                stacked: false,
            },
            &dir.join(&file),
        )?;
        figures.push(file);
    }

    let report = report(rows, ctx, &figures, &copy_points);
    Ok(CrcAnalysis { figures, report })
}

fn report(
    rows: &[CrcRun],
    ctx: &CrcContext,
    figures: &[String],
    copy_points: &BTreeSet<(u64, String)>,
) -> String {
    let u = unit(rows);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# CRC32C on this machine: the fast-path study's CRC measurements\n"
    );
    let _ = writeln!(
        md,
        "Joglekar, Kounavis and Berry, \"A Scalable and High Performance Software iSCSI \
         Implementation\" (Intel), timed the CRC32C of iSCSI's digests with RDTSC on a 1.7 GHz \
         Pentium M: Sarwate's algorithm at {PAPER_SARWATE} cycles per byte, their Slicing-by-8 at \
         {PAPER_SB8} (three times faster) for an 8 KiB PDU, and interleaving the payload copy with \
         the CRC saving 18 % (Sarwate) and 32 % (Slicing-by-8) of the two. This report redoes \
         those measurements with the same algorithms, with the CRC instruction CPUs have had \
         since (SSE4.2 `crc32`, one chain and three interleaved chains), with the folded \
         carry-less multiply of `crc-fast`, and with what sluice's data path runs (`sluice`: the \
         instruction up to 64 bytes, `crc-fast` above).\n"
    );
    let _ = writeln!(
        md,
        "Preset `{}`; made with:\n\n```sh\n{}\n```\n",
        ctx.preset, ctx.command
    );
    let _ = writeln!(md, "## Machine\n");
    for l in &ctx.machine {
        let _ = writeln!(md, "- {l}");
    }
    let _ = writeln!(
        md,
        "\nCycles are TSC ticks: on today's CPUs the time-stamp counter runs at a constant \
         (nominal) rate whatever the core's clock does, so they are the paper's cycles only when \
         the core runs at its nominal clock. GB/s come from the monotonic clock.\n"
    );
    let _ = writeln!(md, "## Checks before timing\n");
    for l in &ctx.checks {
        let _ = writeln!(md, "- {l}");
    }
    let _ = writeln!(md);

    // The paper's data point: 8 KiB.
    let at = if rows.iter().any(|r| r.experiment == SPEED && r.size == 8192) {
        Some(8192)
    } else {
        rows.iter()
            .filter(|r| r.experiment == SPEED)
            .map(|r| r.size)
            .max()
    };
    if let Some(size) = at {
        let _ = writeln!(
            md,
            "## CRC32C at {} (the paper's PDU size)\n",
            size_label(size)
        );
        let _ = writeln!(
            md,
            "| algorithm | warm: {u}/byte | warm: GB/s | cold: {u}/byte | cold: GB/s | the paper (Pentium M) |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
        for crc in LabCrc::ALL {
            let w = speed(rows, crc.name(), size, "warm");
            let c = speed(rows, crc.name(), size, "cold");
            if w.is_none() && c.is_none() {
                continue;
            }
            let f = |r: Option<&CrcRun>, g: fn(&CrcRun) -> f64| {
                r.map_or("-".to_owned(), |r| format!("{:.2}", g(r)))
            };
            let paper = match crc.name() {
                "sarwate" => format!("{PAPER_SARWATE}"),
                "slicing-by-8" => format!("{PAPER_SB8}"),
                _ => String::new(),
            };
            let _ = writeln!(
                md,
                "| {crc} | {} | {} | {} | {} | {paper} |",
                f(w, per_byte),
                f(w, CrcRun::gb_per_s),
                f(c, per_byte),
                f(c, CrcRun::gb_per_s)
            );
        }
        let _ = writeln!(md);
        let sarwate = speed(rows, "sarwate", size, "warm").map(per_byte);
        let sb8 = speed(rows, "slicing-by-8", size, "warm").map(per_byte);
        let fast = speed(rows, "crc-fast", size, "warm").map(per_byte);
        if let (Some(s), Some(b)) = (sarwate, sb8) {
            let _ = write!(
                md,
                "Slicing-by-8 runs {:.1} times as fast as Sarwate here (the paper: {:.1} times). \
                 Sarwate costs {s:.2} {u} per byte against the paper's {PAPER_SARWATE}, \
                 Slicing-by-8 {b:.2} against {PAPER_SB8}.",
                s / b,
                PAPER_SARWATE / PAPER_SB8
            );
            if let Some(f) = fast {
                let _ = write!(
                    md,
                    " The folded carry-less multiply of crc-fast, sluice's path for payloads, \
                     costs {f:.3} {u} per byte: \
                     {:.1} times less than Slicing-by-8, {:.1} times less than Sarwate.",
                    b / f,
                    s / f
                );
            }
            let _ = writeln!(md, "\n");
        }
    }

    // Headers: every header digest covers a 48-byte BHS, sent and checked once per PDU.
    let short: Vec<u64> = [48, 64, 128, 256]
        .into_iter()
        .filter(|s| rows.iter().any(|r| r.experiment == SPEED && r.size == *s))
        .collect();
    if !short.is_empty() {
        let _ = writeln!(md, "## Short inputs: headers\n");
        let _ = writeln!(
            md,
            "A header digest covers one 48-byte Basic Header Segment. Nanoseconds per call, warm:\n"
        );
        let names = ["sse4.2", "sse4.2-x3", "crc-fast", "sluice"];
        let _ = writeln!(md, "| size | {} |", names.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(names.len()));
        for size in short {
            let cells: Vec<String> = names
                .iter()
                .map(|n| {
                    speed(rows, n, size, "warm")
                        .map_or("-".into(), |r| format!("{:.1}", r.ns.median))
                })
                .collect();
            let _ = writeln!(md, "| {} | {} |", size_label(size), cells.join(" | "));
        }
        let _ = writeln!(
            md,
            "\n`sluice` is the data path's choice: one chain of the instruction up to 64 bytes, \
             where crc-fast's set-up costs more than the CRC, and crc-fast above.\n"
        );
    }

    if !copy_points.is_empty() {
        let _ = writeln!(md, "## Copy and CRC, apart and fused (Figure 16)\n");
        let _ = writeln!(
            md,
            "Each row: a payload copied into a (reused) destination buffer and digested, {u} \
             per payload. *Saving* is what the best fused method (per {} block, or word by \
             word) saves against copying all, then digesting all; the paper measured 18 % \
             (Sarwate) and 32 % (Slicing-by-8) at 8 KiB.\n",
            size_label(super::fused::BLOCK as u64)
        );
        let _ = writeln!(
            md,
            "| payload | source | algorithm | copy alone | CRC alone | copy, then CRC | per block | word by word | saving |"
        );
        let _ = writeln!(md, "|---|---|---|---:|---:|---:|---:|---:|---:|");
        for (size, temperature) in copy_points {
            let cost = |crc: &str, m: Method| {
                find(rows, COPY_CRC, crc, m.name(), *size, temperature)
                    .map(|r| per_byte(r) * r.size as f64)
            };
            let copy = rows
                .iter()
                .find(|r| {
                    r.experiment == COPY_CRC
                        && r.method == Method::Copy.name()
                        && r.size == *size
                        && &r.temperature == temperature
                })
                .map(|r| per_byte(r) * r.size as f64);
            for crc in LabCrc::ALL {
                let seq = cost(crc.name(), Method::Sequential);
                let Some(seq) = seq else {
                    continue;
                };
                let blocked = cost(crc.name(), Method::Blocked);
                let inter = cost(crc.name(), Method::Interleaved);
                let best = [blocked, inter]
                    .into_iter()
                    .flatten()
                    .fold(f64::INFINITY, f64::min);
                let cell = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
                let _ = writeln!(
                    md,
                    "| {} | {temperature} | {crc} | {} | {} | {seq:.0} | {} | {} | {:+.0} % |",
                    size_label(*size),
                    cell(copy),
                    cell(cost(crc.name(), Method::Crc)),
                    cell(blocked),
                    cell(inter),
                    100.0 * (seq - best) / seq
                );
            }
        }
        let _ = writeln!(md);
    }

    let _ = writeln!(md, "## Figures\n");
    for f in figures {
        let _ = writeln!(md, "![{f}]({f})\n");
    }
    let n = rows.len();
    let _ = writeln!(
        md,
        "{n} measurements; each is the median of its trials, with the lowest and highest trial \
         in results.csv (and as bars on the cost-per-byte figures)."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::super::study::{preset, run};
    use super::*;

    #[test]
    fn a_tiny_run_gives_every_figure_and_a_report() {
        let mut plan = preset("tiny").unwrap();
        plan.trials = 1;
        plan.trial_time = std::time::Duration::from_micros(200);
        plan.cold_set_bytes = 1 << 20;
        let mut rows = Vec::new();
        run(&plan, &Default::default(), &|| false, &mut |e| {
            if let super::super::study::Event::Done(r) = e {
                rows.push(r);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let a = analyse(&rows, &CrcContext::default(), dir.path()).unwrap();
        for f in &a.figures {
            assert!(dir.path().join(f).exists(), "{f}");
        }
        assert!(a.figures.iter().any(|f| f.starts_with("fig16")));
        assert!(a.report.contains("Slicing-by-8 runs"), "{}", a.report);
        assert!(
            a.report.contains("| 8 KiB | warm | sarwate |"),
            "{}",
            a.report
        );
    }
}
