//! The figures and the Markdown report of `sluice lab iser`, drawn from the rows alone (so
//! that `--report-only` redraws them from a results.csv).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::plan::{Direction, IserPoint, Lun, Transport};
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

/// Per (series, size): the spread of one measure over the repetitions without errors.
type Summary = BTreeMap<(Kind, u32), (f64, f64, f64)>;

/// What a row is a run of, for the figures and tables: its transport and, for iSCSI runs,
/// its LUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Tcp(Lun),
    Iser(Lun),
    Raw,
}

fn kind(p: &IserPoint) -> Kind {
    let lun = p.lun.unwrap_or(Lun::Memory);
    match p.transport {
        Transport::Tcp => Kind::Tcp(lun),
        Transport::Iser => Kind::Iser(lun),
        Transport::Raw => Kind::Raw,
    }
}

/// The name of a series in the figures.
fn kind_name(k: Kind, d: Direction) -> String {
    let on = |lun: Lun| match lun {
        Lun::Memory => "memory LUN",
        Lun::Null => "null LUN",
    };
    match k {
        Kind::Tcp(lun) => format!("iSCSI over TCP, {}", on(lun)),
        Kind::Iser(lun) => format!("iSER, software RDMA provider, {}", on(lun)),
        Kind::Raw => raw_name(d).into(),
    }
}

/// The series of the throughput and CPU figures, in legend order.
const KINDS: [Kind; 5] = [
    Kind::Tcp(Lun::Memory),
    Kind::Iser(Lun::Memory),
    Kind::Raw,
    Kind::Iser(Lun::Null),
    Kind::Tcp(Lun::Null),
];

fn summarise(rows: &[IserRun], d: Direction, measure: fn(&IserRun) -> f64) -> Summary {
    let mut by: BTreeMap<(Kind, u32), Vec<f64>> = BTreeMap::new();
    for r in rows
        .iter()
        .filter(|r| r.point.direction == d && r.errors == 0 && r.bytes > 0)
    {
        by.entry((kind(&r.point), r.point.transfer_bytes))
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

fn series(s: &Summary, k: Kind, d: Direction) -> Series {
    let mut out = Series {
        name: kind_name(k, d),
        ..Series::default()
    };
    let scale = 1.0;
    for (&(of, size), &(m, lo, hi)) in s {
        if of == k {
            out.points.push((f64::from(size), m * scale));
            out.spread.push((f64::from(size), lo * scale, hi * scale));
        }
    }
    out
}

/// The kinds of run `s` has, in legend order.
fn present(s: &Summary) -> Vec<Kind> {
    KINDS
        .into_iter()
        .filter(|k| s.keys().any(|(of, _)| of == k))
        .collect()
}

fn lun_heading(lun: Lun) -> &'static str {
    match lun {
        Lun::Memory => {
            "On the memory LUN (the target stores every write and reads back what it stored):"
        }
        Lun::Null => {
            "On the null LUN (writes discarded, reads of zeros: the study's MEMORYIO mode):"
        }
    }
}

/// After the share of raw reached on `lun`: whether that is the study's goal.
fn goal_note(d: Direction, lun: Lun, share: f64) -> &'static str {
    match (d, lun, share >= STUDY_SHARE) {
        (Direction::Write, Lun::Null, true) => {
            ": the study's 94 %, in the study's mode, is reached"
        }
        (Direction::Write, Lun::Null, false) => {
            ": the study's 94 %, in the study's mode, is not reached"
        }
        _ => "",
    }
}

/// One direction's table for one LUN: throughput, share of raw and CPU per byte by size.
fn table(md: &mut String, rows: &[IserRun], d: Direction, lun: Lun, tput: &Summary, cpu: &Summary) {
    let _ = writeln!(
        md,
        "| size | TCP Mbit/s | iSER Mbit/s | raw Mbit/s | iSER / TCP | iSER / raw | TCP ns/B \
         | iSER ns/B | CPU per byte, iSER against TCP |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    let paired: BTreeMap<u32, f64> = paired_shares(rows, d, lun)
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
        let get = |s: &Summary, k: Kind| s.get(&(k, size)).map(|v| v.0);
        let cell = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".into(), f);
        let (t, i, r) = (
            get(tput, Kind::Tcp(lun)),
            get(tput, Kind::Iser(lun)),
            get(tput, Kind::Raw),
        );
        let (ct, ci) = (get(cpu, Kind::Tcp(lun)), get(cpu, Kind::Iser(lun)));
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
                series: present(&tput)
                    .into_iter()
                    .map(|k| series(&tput, k, d))
                    .collect(),
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
                series: present(&cpu)
                    .into_iter()
                    .map(|k| series(&cpu, k, d))
                    .collect(),
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
        for lun in Lun::ALL {
            if !tput
                .keys()
                .any(|&(k, _)| k == Kind::Iser(lun) || k == Kind::Tcp(lun))
            {
                continue;
            }
            let _ = writeln!(md, "{}\n", lun_heading(lun));
            table(&mut md, rows, d, lun, &tput, &cpu);
        }
    }

    let share = share_chart(rows);
    if !share.series.is_empty() {
        let name = "fig4-iser-share-of-raw.png".to_owned();
        draw(&share, &dir.join(&name))?;
        figures.push(name.clone());
        let _ = writeln!(md, "## iSER's share of the provider's raw throughput\n");
        let _ = writeln!(md, "![share]({name})\n");
        for d in [Direction::Write, Direction::Read] {
            for lun in Lun::ALL {
                if let Some((share, n)) = large_share(rows, d, lun) {
                    let _ = writeln!(
                        md,
                        "- Large {}s on the {} LUN (1 MiB and up, median over {n} sizes, each \
                         run against the raw run of its repetition): iSER reached {:.0} % of \
                         the provider's raw RDMA {} throughput{}.",
                        d.name(),
                        lun.name(),
                        share * 100.0,
                        if d == Direction::Read {
                            "Write"
                        } else {
                            "Read"
                        },
                        goal_note(d, lun, share),
                    );
                }
            }
        }
        let _ = writeln!(
            md,
            "\nThe study's user-space iSER writes reached {:.0} % of their link's payload \
             limit with its target in MEMORYIO mode, which keeps no data: the null LUN is that \
             mode here. On the memory LUN the target also stores every byte it fetched, a \
             copy the raw RDMA Read does not make.",
            STUDY_SHARE * 100.0
        );
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
        for lun in Lun::ALL {
            let s = paired_shares(rows, d, lun);
            if s.is_empty() {
                continue;
            }
            sizes.extend(s.iter().map(|p| f64::from(p.0)));
            chart.series.push(Series {
                name: format!("{}s, {} LUN", d.name(), lun.name()),
                points: s.iter().map(|&(x, (m, _, _))| (f64::from(x), m)).collect(),
                spread: s
                    .iter()
                    .map(|&(x, (_, lo, hi))| (f64::from(x), lo, hi))
                    .collect(),
                ..Series::default()
            });
        }
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
fn paired_shares(rows: &[IserRun], d: Direction, lun: Lun) -> Vec<(u32, (f64, f64, f64))> {
    let ok = |r: &&IserRun| r.point.direction == d && r.errors == 0 && r.bytes > 0;
    let mut raw: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    for r in rows.iter().filter(ok) {
        if r.point.transport == Transport::Raw {
            raw.insert((r.point.transfer_bytes, r.point.rep), r.mbit_per_s());
        }
    }
    let mut by_size: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in rows.iter().filter(ok) {
        if r.point.transport != Transport::Iser || r.point.lun != Some(lun) {
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
fn shares(rows: &[IserRun], d: Direction, lun: Lun) -> Vec<(f64, f64)> {
    paired_shares(rows, d, lun)
        .into_iter()
        .map(|(size, (m, _, _))| (f64::from(size), m))
        .collect()
}

/// The median over sizes of 1 MiB and up of iSER's share of raw on `lun`, and how many sizes.
#[must_use]
pub fn large_share(rows: &[IserRun], d: Direction, lun: Lun) -> Option<(f64, usize)> {
    let v: Vec<f64> = shares(rows, d, lun)
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
            lun: (t != Transport::Raw).then_some(Lun::Memory),
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
        let (share, n) = large_share(&rows, w, Lun::Memory).unwrap();
        assert_eq!(n, 1);
        assert!((share - 0.95).abs() < 1e-3, "{share}");
        assert!(large_share(&rows, Direction::Read, Lun::Memory).is_none());
        assert!(large_share(&rows, w, Lun::Null).is_none());
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
        let (share, n) = large_share(&rows, w, Lun::Memory).unwrap();
        assert_eq!(n, 1);
        assert!((share - 0.5).abs() < 1e-9, "{share}");
        let (_, (m, lo, hi)) = paired_shares(&rows, w, Lun::Memory)[0];
        assert!((m - 50.0).abs() < 1e-9 && (lo - 50.0).abs() < 1e-9 && (hi - 50.0).abs() < 1e-9);
    }

    #[test]
    fn both_luns_are_compared_with_the_same_raw_run_but_apart() {
        let w = Direction::Write;
        let on = |t, lun, mbit| {
            let mut r = row(t, w, 4 << 20, mbit);
            r.point.lun = lun;
            r
        };
        let rows = vec![
            on(Transport::Iser, Some(Lun::Memory), 800.0),
            on(Transport::Raw, None, 1000.0),
            on(Transport::Iser, Some(Lun::Null), 960.0),
            on(Transport::Tcp, Some(Lun::Null), 500.0),
        ];
        let (memory, _) = large_share(&rows, w, Lun::Memory).unwrap();
        let (null, _) = large_share(&rows, w, Lun::Null).unwrap();
        assert!((memory - 0.8).abs() < 1e-9 && (null - 0.96).abs() < 1e-9);
        let dir = std::env::temp_dir().join(format!("sluice-iser-writeup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = analyse(&rows, &IserContext::default(), &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(a.report.contains("On the null LUN"), "{}", a.report);
        assert!(a.report.contains("96 %"), "{}", a.report);
        assert!(
            a.report.contains("in the study's mode, is reached"),
            "{}",
            a.report
        );
    }
}
