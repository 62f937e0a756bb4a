//! The figures and the Markdown report of `sluice lab iser`, drawn from the rows alone (so
//! that `--report-only` redraws them from a results.csv).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::plan::{Direction, Transport};
use super::row::IserRun;
use crate::study::plot::{draw, Chart, Series};

/// The study's share of the payload limit reached by user-space iSER writes (its Figure 4:
/// 8,800 of 9,363 Mbit/s), our goal against the provider's raw throughput.
pub const STUDY_SHARE: f64 = 0.94;

/// What the report needs besides the rows.
#[derive(Clone, Debug, Default)]
pub struct IserContext {
    /// The command that produced the rows.
    pub command: String,
    /// Lines about the machine.
    pub machine: Vec<String>,
    /// The preset.
    pub preset: String,
}

/// The report and the figures written.
#[derive(Debug)]
pub struct Analysis {
    /// report.md's text.
    pub report: String,
    /// PNG file names written.
    pub figures: Vec<String>,
}

/// Median, least and greatest of a non-empty list.
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (median, s[0], s[n - 1])
}

/// Per (transport, size): the spread of one measure over the repetitions without errors.
type Summary = BTreeMap<(u8, u32), (f64, f64, f64)>;

fn order(t: Transport) -> u8 {
    match t {
        Transport::Tcp => 0,
        Transport::Iser => 1,
        Transport::Raw => 2,
    }
}

fn summarise(rows: &[IserRun], d: Direction, measure: fn(&IserRun) -> f64) -> Summary {
    let mut by: BTreeMap<(u8, u32), Vec<f64>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.point.direction == d && r.errors == 0 && r.bytes > 0)
    {
        by.entry((order(r.point.transport), r.point.transfer_bytes))
            .or_default()
            .push(measure(r));
    }
    by.into_iter().map(|(k, v)| (k, spread(&v))).collect()
}

fn size_label(b: u32) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

fn series(s: &Summary, t: Transport, name: &str, scale: f64) -> Series {
    let mut out = Series {
        name: name.into(),
        ..Series::default()
    };
    for (&(tr, size), &(m, lo, hi)) in s {
        if tr == order(t) {
            out.points.push((f64::from(size), m * scale));
            out.spread.push((f64::from(size), lo * scale, hi * scale));
        }
    }
    out
}

fn raw_name(d: Direction) -> &'static str {
    match d {
        Direction::Read => "raw RDMA Write (the ceiling)",
        Direction::Write => "raw RDMA Read (the ceiling)",
    }
}

/// Draws the figures into `dir` and writes the report's text.
pub fn analyse(rows: &[IserRun], ctx: &IserContext, dir: &Path) -> Result<Analysis, String> {
    let mut figures = Vec::new();
    let mut md = String::new();
    let _ = writeln!(md, "# iSCSI over RDMA (iSER) against iSCSI over TCP\n");
    let _ = writeln!(
        md,
        "A reproduction of Burns and Russell, \"Implementation and Evaluation of iSCSI over \
         RDMA\", with sluice's target and initiator: plain iSCSI over TCP, iSER (RFC 7145) on \
         sluice's software RDMA provider, and the provider's raw RDMA throughput as the \
         ceiling, over the same loopback link in one process. Every run negotiated the \
         study's values (MaxRecvDataSegmentLength and MaxBurstLength 512 KiB, InitialR2T=Yes, \
         ImmediateData=No); one command per transfer, {} commands in flight.\n",
        rows.iter()
            .find(|r| r.point.transport != Transport::Raw)
            .map_or(0, |r| r.queue_depth)
    );
    let _ = writeln!(md, "Command: `{}`\n", ctx.command);
    for l in &ctx.machine {
        let _ = writeln!(md, "- {l}");
    }
    let failed = rows.iter().filter(|r| r.errors > 0).count();
    let not_rdma = rows
        .iter()
        .filter(|r| r.point.transport == Transport::Iser && !r.rdma_mode)
        .count();
    let _ = writeln!(
        md,
        "- {} runs, {failed} with failed commands (left out of the figures), {not_rdma} iSER \
         runs that did not reach RDMA mode.\n",
        rows.len()
    );
    for (d, fig) in [(Direction::Read, "fig2"), (Direction::Write, "fig3")] {
        let tput = summarise(rows, d, IserRun::mbit_per_s);
        if tput.is_empty() {
            continue;
        }
        let cpu = summarise(rows, d, IserRun::cpu_ns_per_byte);
        let name = format!("{fig}-{}-throughput.png", d.name());
        draw(
            &Chart {
                title: format!(
                    "SCSI {} throughput against transfer size (loopback)",
                    d.name().to_uppercase()
                ),
                x_label: "transfer size per command (bytes)".into(),
                y_label: "payload throughput (Mbit/s)".into(),
                log2_x: true,
                log10_y: false,
                series: vec![
                    series(&tput, Transport::Tcp, "iSCSI over TCP", 1.0),
                    series(&tput, Transport::Iser, "iSER, software RDMA provider", 1.0),
                    series(&tput, Transport::Raw, raw_name(d), 1.0),
                ],
            },
            &dir.join(&name),
        )?;
        figures.push(name.clone());
        let cpu_name = format!("cpu-{}.png", d.name());
        draw(
            &Chart {
                title: format!(
                    "CPU per byte, both ends, SCSI {} (loopback)",
                    d.name().to_uppercase()
                ),
                x_label: "transfer size per command (bytes)".into(),
                y_label: "CPU time per payload byte (ns/B)".into(),
                log2_x: true,
                log10_y: true,
                series: vec![
                    series(&cpu, Transport::Tcp, "iSCSI over TCP", 1.0),
                    series(&cpu, Transport::Iser, "iSER, software RDMA provider", 1.0),
                    series(&cpu, Transport::Raw, raw_name(d), 1.0),
                ],
            },
            &dir.join(&cpu_name),
        )?;
        figures.push(cpu_name.clone());
        let _ = writeln!(md, "## SCSI {}s\n", d.name().to_uppercase());
        let _ = writeln!(
            md,
            "![{}]({name})\n\n![CPU per byte]({cpu_name})\n",
            d.name()
        );
        let _ = writeln!(
            md,
            "Medians over the repetitions (Mbit/s of payload; CPU ns per payload byte, the \
             target's, the initiator's and the provider's together; iSER / raw is the median \
             of each iSER run over the raw run of its repetition).\n"
        );
        let _ = writeln!(
            md,
            "| size | TCP Mbit/s | iSER Mbit/s | raw Mbit/s | iSER / TCP | iSER / raw | TCP ns/B \
             | iSER ns/B | CPU per byte, iSER against TCP |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        let paired: BTreeMap<u32, f64> = paired_shares(rows, d)
            .into_iter()
            .map(|(size, (m, _, _))| (size, m / 100.0))
            .collect();
        let sizes: Vec<u32> = {
            let mut v: Vec<u32> = tput.keys().map(|k| k.1).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        for &size in &sizes {
            let get = |s: &Summary, t: Transport| s.get(&(order(t), size)).map(|v| v.0);
            let cell = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".into(), f);
            let (t, i, r) = (
                get(&tput, Transport::Tcp),
                get(&tput, Transport::Iser),
                get(&tput, Transport::Raw),
            );
            let (ct, ci) = (get(&cpu, Transport::Tcp), get(&cpu, Transport::Iser));
            let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b.max(1e-9));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                size_label(size),
                cell(t, &|v| format!("{v:.0}")),
                cell(i, &|v| format!("{v:.0}")),
                cell(r, &|v| format!("{v:.0}")),
                cell(ratio(i, t), &|v| format!("{v:.2}")),
                cell(paired.get(&size).copied(), &|v| format!(
                    "{:.0} %",
                    v * 100.0
                )),
                cell(ct, &|v| format!("{v:.2}")),
                cell(ci, &|v| format!("{v:.2}")),
                cell(ratio(ci, ct), &|v| if v <= 1.0 {
                    format!("{:.0} % saved", (1.0 - v) * 100.0)
                } else {
                    format!("{v:.1} x")
                }),
            );
        }
        let _ = writeln!(md);
    }
    let share = share_chart(rows);
    if !share.series.is_empty() {
        let name = "fig4-iser-share-of-raw.png".to_owned();
        draw(&share, &dir.join(&name))?;
        figures.push(name.clone());
        let _ = writeln!(md, "## iSER's share of the provider's raw throughput\n");
        let _ = writeln!(md, "![share]({name})\n");
        for d in [Direction::Write, Direction::Read] {
            if let Some((share, n)) = large_share(rows, d) {
                let _ =
                    writeln!(
                    md,
                    "- Large {}s (1 MiB and up, median over {n} sizes, each run against the raw \
                     run of its repetition): iSER reached {:.0} % of the provider's raw RDMA {} \
                     throughput; the study's user-space iSER writes \
                     reached {:.0} % of their link's payload limit{}.",
                    d.name(),
                    share * 100.0,
                    if d == Direction::Read { "Write" } else { "Read" },
                    STUDY_SHARE * 100.0,
                    if d == Direction::Write {
                        if share >= STUDY_SHARE {
                            ": the goal is met"
                        } else {
                            ": the goal is not met"
                        }
                    } else {
                        ""
                    }
                );
            }
        }
        let _ = writeln!(md);
    }
    Ok(Analysis {
        report: md,
        figures,
    })
}

/// Per direction and size, iSER's throughput over the raw provider's in the same repetition.
fn share_chart(rows: &[IserRun]) -> Chart {
    let mut chart = Chart {
        title: "iSER's share of the software provider's raw RDMA throughput".into(),
        x_label: "transfer size per command (bytes)".into(),
        y_label: "iSER throughput / raw RDMA throughput (%)".into(),
        log2_x: true,
        log10_y: false,
        series: Vec::new(),
    };
    let mut sizes = Vec::new();
    for d in [Direction::Read, Direction::Write] {
        let s = paired_shares(rows, d);
        if s.is_empty() {
            continue;
        }
        sizes.extend(s.iter().map(|p| f64::from(p.0)));
        chart.series.push(Series {
            name: format!("{}s", d.name()),
            points: s.iter().map(|&(x, (m, _, _))| (f64::from(x), m)).collect(),
            spread: s
                .iter()
                .map(|&(x, (_, lo, hi))| (f64::from(x), lo, hi))
                .collect(),
            ..Series::default()
        });
    }
    if let (Some(lo), Some(hi)) = (
        sizes.iter().copied().reduce(f64::min),
        sizes.iter().copied().reduce(f64::max),
    ) {
        chart.series.push(Series {
            name: "the study's 94 % (user-space iSER writes)".into(),
            points: vec![(lo, STUDY_SHARE * 100.0), (hi, STUDY_SHARE * 100.0)],
            ..Series::default()
        });
    }
    chart
}

/// Per size: iSER's throughput over the raw provider's in the same repetition (the two run
/// next to each other, so a machine that slows down for a while slows both), in %, as the
/// median over the repetitions with both, and its least and greatest. A ratio of medians
/// taken separately pairs runs made minutes apart, and on a shared machine the raw runs
/// alone swung by a factor of two between repetitions.
fn paired_shares(rows: &[IserRun], d: Direction) -> Vec<(u32, (f64, f64, f64))> {
    let ok = |r: &&IserRun| r.point.direction == d && r.errors == 0 && r.bytes > 0;
    let mut raw: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    for r in rows.iter().filter(ok) {
        if r.point.transport == Transport::Raw {
            raw.insert((r.point.transfer_bytes, r.point.rep), r.mbit_per_s());
        }
    }
    let mut by_size: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(ok) {
        if r.point.transport != Transport::Iser {
            continue;
        }
        if let Some(&raw) = raw.get(&(r.point.transfer_bytes, r.point.rep)) {
            if raw > 0.0 {
                by_size
                    .entry(r.point.transfer_bytes)
                    .or_default()
                    .push(r.mbit_per_s() / raw * 100.0);
            }
        }
    }
    by_size
        .into_iter()
        .map(|(size, v)| (size, spread(&v)))
        .collect()
}

/// (size, median paired share in %) for each size with both.
fn shares(rows: &[IserRun], d: Direction) -> Vec<(f64, f64)> {
    paired_shares(rows, d)
        .into_iter()
        .map(|(size, (m, _, _))| (f64::from(size), m))
        .collect()
}

/// The median over sizes of 1 MiB and up of iSER's share of raw, and how many sizes.
#[must_use]
pub fn large_share(rows: &[IserRun], d: Direction) -> Option<(f64, usize)> {
    let v: Vec<f64> = shares(rows, d)
        .into_iter()
        .filter(|p| p.0 >= f64::from(1u32 << 20))
        .map(|p| p.1 / 100.0)
        .collect();
    (!v.is_empty()).then(|| (spread(&v).0, v.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iser::plan::IserPoint;

    fn row(t: Transport, d: Direction, size: u32, mbit: f64) -> IserRun {
        let mut r = IserRun::example();
        r.point = IserPoint {
            transport: t,
            direction: d,
            transfer_bytes: size,
            rep: 0,
        };
        r.seconds = 1.0;
        r.bytes = (mbit * 1e6 / 8.0) as u64;
        r.cpu_seconds = 0.5;
        r
    }

    #[test]
    fn the_share_is_iser_over_raw_at_large_sizes_only() {
        let w = Direction::Write;
        let rows = vec![
            row(Transport::Raw, w, 4096, 1000.0),
            row(Transport::Iser, w, 4096, 100.0),
            row(Transport::Raw, w, 1 << 20, 1000.0),
            row(Transport::Iser, w, 1 << 20, 950.0),
        ];
        let (share, n) = large_share(&rows, w).unwrap();
        assert_eq!(n, 1);
        assert!((share - 0.95).abs() < 1e-3, "{share}");
        assert!(large_share(&rows, Direction::Read).is_none());
    }

    #[test]
    fn each_iser_run_is_compared_with_the_raw_run_of_its_repetition() {
        let w = Direction::Write;
        let at = |t, mbit, rep| {
            let mut r = row(t, w, 1 << 20, mbit);
            r.point.rep = rep;
            r
        };
        // The machine ran at full speed in repetition 0 and at half in 1 and 2: paired, iSER
        // is at 50 % every time, where medians taken apart would pair iSER's slow median
        // (250) with raw's (500) by luck of the ordering.
        let rows = vec![
            at(Transport::Raw, 1000.0, 0),
            at(Transport::Iser, 500.0, 0),
            at(Transport::Raw, 500.0, 1),
            at(Transport::Iser, 250.0, 1),
            at(Transport::Raw, 500.0, 2),
            at(Transport::Iser, 250.0, 2),
            // An iSER run whose raw partner failed is left out.
            at(Transport::Iser, 900.0, 3),
        ];
        let (share, n) = large_share(&rows, w).unwrap();
        assert_eq!(n, 1);
        assert!((share - 0.5).abs() < 1e-9, "{share}");
        let (_, (m, lo, hi)) = paired_shares(&rows, w)[0];
        assert!((m - 50.0).abs() < 1e-9 && (lo - 50.0).abs() < 1e-9 && (hi - 50.0).abs() < 1e-9);
    }
}
