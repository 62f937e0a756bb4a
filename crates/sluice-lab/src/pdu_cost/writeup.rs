//! The figures and the Markdown report of `sluice lab pdu-cost`, beside the paper's numbers:
//! an 8 KiB Data-In cost its initiator about 1,800 cycles of protocol processing cold and 770
//! warm (an asymptote of 430), CRC was 73 % of the PDU with Sarwate and, with Slicing-by-8, copy
//! and CRC were each about 47 % (its Figures 11, 12 and 15).

use std::fmt::Write as _;
use std::path::Path;

use sluice_probe::{Role, Stage};

use super::plan::{FIG11, FIG12, FIG17, SIZES};
use super::row::PduRun;
use crate::study::plot::{draw, draw_bars, BarChart, Bars, Chart, Series};

/// The paper's initiator protocol cost for an 8 KiB Data-In: cold, warm, asymptote (cycles).
pub const PAPER_PROTOCOL: [(&str, f64); 3] =
    [("cold", 1800.0), ("warm", 770.0), ("asymptote", 430.0)];

/// What the report says about the run besides the rows.
#[derive(Clone, Debug, Default)]
pub struct PduContext {
    /// The command that made the results.
    pub command: String,
    /// Lines about the machine.
    pub machine: Vec<String>,
    /// The preset.
    pub preset: String,
    /// Points that could not be measured, with why.
    pub failures: Vec<String>,
}

/// Figures drawn and the report.
#[derive(Clone, Debug)]
pub struct PduAnalysis {
    /// PNG file names, in report order.
    pub figures: Vec<String>,
    /// The Markdown report.
    pub report: String,
}

/// The stages that are work (polling is waiting).
const WORK: [Stage; 6] = [
    Stage::Syscall,
    Stage::Framing,
    Stage::Crc,
    Stage::Copy,
    Stage::Protocol,
    Stage::Scsi,
];

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Target => "target",
        Role::Initiator => "initiator",
        Role::Other => "other",
    }
}

fn pdu_name(direction: &str) -> &'static str {
    if direction == "read" {
        "Data-In"
    } else {
        "Data-Out"
    }
}

fn size_label(size: u32) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1024 && s % 1024 == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn select<'a>(
    rows: &'a [PduRun],
    experiment: &str,
    direction: &str,
    digests: &str,
) -> Vec<&'a PduRun> {
    let mut v: Vec<&PduRun> = rows
        .iter()
        .filter(|r| {
            r.experiment == experiment && r.direction == direction && r.digests() == digests
        })
        .collect();
    v.sort_by_key(|r| r.command_bytes);
    v
}

/// Stacked bars of the per-PDU cost by stage, one bar per row.
fn stacked(rows: &[&PduRun], role: Role, title: String, x_label: &str) -> BarChart {
    BarChart {
        title,
        x_label: x_label.into(),
        y_label: "TSC cycles per data PDU".into(),
        groups: rows.iter().map(|r| size_label(r.command_bytes)).collect(),
        series: WORK
            .iter()
            .map(|s| Bars {
                name: s.name().into(),
                values: rows.iter().map(|r| r.per_pdu(role, *s)).collect(),
            })
            .collect(),
        stacked: true,
    }
}

/// Draws the figures into `dir` and writes the report.
pub fn analyse(rows: &[PduRun], ctx: &PduContext, dir: &Path) -> Result<PduAnalysis, String> {
    let mut figures = Vec::new();
    let bars = |chart: BarChart, file: String, figures: &mut Vec<String>| -> Result<(), String> {
        if chart.groups.is_empty() {
            return Ok(());
        }
        draw_bars(&chart, &dir.join(&file))?;
        figures.push(file);
        Ok(())
    };
    // Figure 11 / 15: the cost split of one Data-In, 512 B to 8 KiB, both roles.
    for digests in ["both", "none"] {
        let r = select(rows, FIG11, "read", digests);
        for role in [Role::Initiator, Role::Target] {
            bars(
                stacked(
                    &r,
                    role,
                    format!(
                        "Figure 11: one Data-In at the {}, digests {digests}",
                        role_name(role)
                    ),
                    "read size (one 8 KiB PDU at most)",
                ),
                format!("fig11-{}-{digests}.png", role_name(role)),
                &mut figures,
            )?;
        }
    }
    // Every size, each direction and role, digests on.
    for direction in ["read", "write"] {
        for digests in ["both", "none"] {
            let r = select(rows, SIZES, direction, digests);
            for role in [Role::Initiator, Role::Target] {
                bars(
                    stacked(
                        &r,
                        role,
                        format!(
                            "One {} PDU at the {}, digests {digests}",
                            pdu_name(direction),
                            role_name(role)
                        ),
                        "PDU size (one per command)",
                    ),
                    format!("sizes-{direction}-{}-{digests}.png", role_name(role)),
                    &mut figures,
                )?;
            }
        }
    }
    // Figure 12: protocol cost per PDU as reads grow in 8 KiB PDUs.
    let r12 = select(rows, FIG12, "read", "both");
    if r12.len() >= 2 {
        let mut series: Vec<Series> = [Role::Initiator, Role::Target]
            .iter()
            .map(|&role| Series {
                name: format!("{} protocol", role_name(role)),
                points: r12
                    .iter()
                    .map(|r| {
                        (
                            f64::from(r.command_bytes) / 1024.0,
                            r.per_pdu(role, Stage::Protocol),
                        )
                    })
                    .collect(),
                ..Series::default()
            })
            .collect();
        for (name, c) in PAPER_PROTOCOL {
            series.push(Series {
                name: format!("paper, initiator {name} ({c} cycles)"),
                points: r12
                    .iter()
                    .map(|r| (f64::from(r.command_bytes) / 1024.0, c))
                    .collect(),
                markers_only: true,
                ..Series::default()
            });
        }
        let file = "fig12-protocol.png".to_owned();
        draw(
            &Chart {
                title: "Figure 12: protocol cost per 8 KiB Data-In as reads grow".into(),
                x_label: "read size (KiB, in 8 KiB PDUs)".into(),
                y_label: "TSC cycles per Data-In PDU".into(),
                log2_x: true,
                log10_y: false,
                series,
            },
            &dir.join(&file),
        )?;
        figures.push(file);
    }
    // Figure 17: throughput per core projected from the costs, against what was measured.
    for digests in ["none", "both"] {
        let r17 = select(rows, FIG17, "read", digests);
        if r17.len() < 2 {
            continue;
        }
        let kib = |r: &PduRun| f64::from(r.command_bytes) / 1024.0;
        let mib_s = |r: &PduRun, ticks: f64| {
            if ticks > 0.0 {
                f64::from(r.command_bytes) * r.tsc_hz / ticks / f64::from(1u32 << 20)
            } else {
                0.0
            }
        };
        let series = vec![
            Series {
                name: "projected: a core per role, target's share".into(),
                points: r17
                    .iter()
                    .map(|r| (kib(r), mib_s(r, r.work_per_pdu(Role::Target))))
                    .collect(),
                ..Series::default()
            },
            Series {
                name: "projected: a core per role, initiator's share".into(),
                points: r17
                    .iter()
                    .map(|r| (kib(r), mib_s(r, r.work_per_pdu(Role::Initiator))))
                    .collect(),
                ..Series::default()
            },
            Series {
                name: "projected: both roles on one core".into(),
                points: r17
                    .iter()
                    .map(|r| {
                        let both = r.work_per_pdu(Role::Target) + r.work_per_pdu(Role::Initiator);
                        (kib(r), mib_s(r, both))
                    })
                    .collect(),
                ..Series::default()
            },
            Series {
                name: "measured (both roles on this machine's CPUs)".into(),
                points: r17.iter().map(|r| (kib(r), r.mib_per_s())).collect(),
                markers_only: true,
                ..Series::default()
            },
        ];
        let file = format!("fig17-{digests}.png");
        draw(
            &Chart {
                title: format!(
                    "Figure 17: read throughput, projected and measured, digests {digests}"
                ),
                x_label: "read size (KiB, one PDU each)".into(),
                y_label: "MiB/s".into(),
                log2_x: true,
                log10_y: true,
                series,
            },
            &dir.join(&file),
        )?;
        figures.push(file);
    }
    let report = report(rows, ctx, &figures);
    Ok(PduAnalysis { figures, report })
}

fn split_table(md: &mut String, rows: &[&PduRun]) {
    let _ = writeln!(
        md,
        "| PDU | size | digests | role | cycles per PDU | syscall | framing | CRC | copy | protocol | SCSI | probes' share of CPU |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        for role in [Role::Initiator, Role::Target] {
            let total = r.work_per_pdu(role);
            let pct = |s: Stage| {
                if total > 0.0 {
                    format!("{:.0} %", 100.0 * r.per_pdu(role, s) / total)
                } else {
                    "-".into()
                }
            };
            let share = r.coverage(role);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {total:.0} | {} | {} | {} | {} | {} | {} | {:.0} %{} |",
                pdu_name(&r.direction),
                size_label(r.command_bytes),
                r.digests(),
                role_name(role),
                pct(Stage::Syscall),
                pct(Stage::Framing),
                pct(Stage::Crc),
                pct(Stage::Copy),
                pct(Stage::Protocol),
                pct(Stage::Scsi),
                100.0 * share,
                if share > DISTURBED { " †" } else { "" }
            );
        }
    }
    let _ = writeln!(
        md,
        "\n† The probes counted more cycles than the role's threads ran: a thread was \
         preempted inside a span (the TSC counts wall time), so the row overstates the cost.\n"
    );
}

/// Probed cycles above this share of a role's CPU time mark a disturbed row.
const DISTURBED: f64 = 1.05;

fn report(rows: &[PduRun], ctx: &PduContext, figures: &[String]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Where the CPU goes per PDU: sluice's data path, stage by stage\n"
    );
    let _ = writeln!(
        md,
        "Joglekar, Kounavis and Berry, \"A Scalable and High Performance Software iSCSI \
         Implementation\" (Intel), timed an iSCSI initiator's fast path in a sandbox with RDTSC: \
         an 8 KiB Data-In cost about 1,800 cycles of protocol processing cold and 770 warm \
         (asymptote 430), CRC was 73 % of the PDU's cost with Sarwate's algorithm, and with \
         their Slicing-by-8 copy and CRC were each about 47 %. This report times sluice's own \
         target and initiator, in one process over loopback TCP, with cost probes around each \
         stage (a `cost-probes` build): socket calls (with the kernel's copy and TCP work in \
         them), framing, CRC32C (crc-fast), user-space copies, the session state machines and \
         the SCSI layer, each exclusive of the stages inside it, in TSC cycles per data PDU.\n"
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
        "\nEach point ran its commands after a warm-up, one session, a memory LUN. *Probes' \
         share of CPU* is the probed work over the role's threads' CPU time: the rest went to \
         busy polling (asking an empty socket, counted apart and left out of the costs), the \
         async runtime, locks and wake-ups outside any span.\n"
    );
    if !ctx.failures.is_empty() {
        let _ = writeln!(md, "Points that could not be measured:\n");
        for f in &ctx.failures {
            let _ = writeln!(md, "- {f}");
        }
        let _ = writeln!(md);
    }

    let picks: Vec<&PduRun> = {
        let mut v: Vec<&PduRun> = rows
            .iter()
            .filter(|r| r.experiment == SIZES && [8192, 65536, 1 << 20].contains(&r.command_bytes))
            .collect();
        v.sort_by_key(|r| (r.direction.clone(), r.command_bytes, r.digests()));
        v
    };
    if !picks.is_empty() {
        let _ = writeln!(md, "## The cost split at 8 KiB, 64 KiB and 1 MiB\n");
        split_table(&mut md, &picks);
    }
    let fig11: Vec<&PduRun> = {
        let mut v: Vec<&PduRun> = rows.iter().filter(|r| r.experiment == FIG11).collect();
        v.sort_by_key(|r| (r.digests(), r.command_bytes));
        v
    };
    if !fig11.is_empty() {
        let _ = writeln!(
            md,
            "## Figure 11: reads of 512 B to 8 KiB in one 8 KiB PDU\n"
        );
        split_table(&mut md, &fig11);
        if let Some(r) = fig11
            .iter()
            .find(|r| r.command_bytes == 8192 && r.digests() == "both")
        {
            let crc = r.per_pdu(Role::Initiator, Stage::Crc);
            let total = r.work_per_pdu(Role::Initiator);
            let _ = writeln!(
                md,
                "At 8 KiB with both digests the initiator spends {:.0} cycles on the PDU, {:.0} of \
                 them ({:.1} %) computing CRC32C, against the paper's 54,000 of 73,761 (73 %) with \
                 Sarwate and about 17,600 of 37,579 (47 %) with Slicing-by-8. Its protocol \
                 processing is {:.0} cycles (the paper: 1,800 for the first PDU of a command).\n",
                total,
                crc,
                if total > 0.0 { 100.0 * crc / total } else { 0.0 },
                r.per_pdu(Role::Initiator, Stage::Protocol)
            );
        }
    }
    let fig12 = select(rows, FIG12, "read", "both");
    if !fig12.is_empty() {
        let _ = writeln!(
            md,
            "## Figure 12: protocol cost per 8 KiB PDU as reads grow\n"
        );
        let _ = writeln!(md, "| read size | Data-In PDUs per read | initiator protocol cycles per PDU | target protocol cycles per PDU |");
        let _ = writeln!(md, "|---|---:|---:|---:|");
        for r in &fig12 {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.0} | {:.0} |",
                size_label(r.command_bytes),
                r.data_pdus as f64 / r.commands.max(1) as f64,
                r.per_pdu(Role::Initiator, Stage::Protocol),
                r.per_pdu(Role::Target, Stage::Protocol)
            );
        }
        let _ = writeln!(md, "\nThe paper: about 1,800 cycles for one PDU per read, falling to 770 at eight (warm contexts), asymptote 430.\n");
    }
    for digests in ["none", "both"] {
        let r17 = select(rows, FIG17, "read", digests);
        if r17.is_empty() {
            continue;
        }
        let _ = writeln!(
            md,
            "## Figure 17: throughput projected from the costs, digests {digests}\n"
        );
        let _ = writeln!(
            md,
            "| read size | queue depth | target cycles/PDU | initiator cycles/PDU | projected, both roles on one core (MiB/s) | measured (MiB/s) |"
        );
        let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
        for r in &r17 {
            let t = r.work_per_pdu(Role::Target);
            let i = r.work_per_pdu(Role::Initiator);
            let proj = if t + i > 0.0 {
                f64::from(r.command_bytes) * r.tsc_hz / (t + i) / f64::from(1u32 << 20)
            } else {
                0.0
            };
            let _ = writeln!(
                md,
                "| {} | {} | {t:.0} | {i:.0} | {proj:.0} | {:.0} |",
                size_label(r.command_bytes),
                r.outstanding,
                r.mib_per_s()
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "## Figures\n");
    for f in figures {
        let _ = writeln!(md, "![{f}]({f})\n");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(experiment: &str, direction: &str, bytes: u32, digests: bool) -> PduRun {
        PduRun {
            experiment: experiment.into(),
            direction: direction.into(),
            command_bytes: bytes,
            pdu_bytes: bytes.max(512),
            header_digest: digests,
            data_digest: digests,
            outstanding: if experiment == FIG17 { 8 } else { 1 },
            commands: 100,
            data_pdus: 100,
            bytes: 100 * u64::from(bytes),
            seconds: 0.1,
            tsc_hz: 2e9,
            target_cpu_seconds: 0.05,
            initiator_cpu_seconds: 0.05,
            target_ticks: [1000, 200, 300, 400, 500, 600, 50],
            initiator_ticks: [900, 100, 300, 0, 400, 0, 10],
        }
    }

    #[test]
    fn every_figure_is_drawn_and_the_report_has_its_tables() {
        let mut rows = Vec::new();
        for bytes in [8192, 65536, 1 << 20] {
            for d in [false, true] {
                rows.push(row(SIZES, "read", bytes, d));
                rows.push(row(SIZES, "write", bytes, d));
                rows.push(row(FIG17, "read", bytes, d));
            }
        }
        for bytes in [512, 8192] {
            rows.push(row(FIG11, "read", bytes, true));
        }
        for bytes in [8192, 65536] {
            rows.push(row(FIG12, "read", bytes, true));
        }
        let dir = tempfile::tempdir().unwrap();
        let a = analyse(&rows, &PduContext::default(), dir.path()).unwrap();
        for f in &a.figures {
            assert!(dir.path().join(f).exists(), "{f}");
        }
        for f in [
            "fig11-initiator-both.png",
            "fig12-protocol.png",
            "fig17-both.png",
            "sizes-write-target-both.png",
        ] {
            assert!(a.figures.iter().any(|x| x == f), "{f}: {:?}", a.figures);
        }
        for section in [
            "## The cost split",
            "## Figure 11",
            "## Figure 12",
            "## Figure 17",
        ] {
            assert!(a.report.contains(section), "{section}");
        }
    }
}
