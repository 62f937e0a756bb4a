//! The study's figures from the rows and the kept time series: throughput against RTT with
//! the theoretical line (Figs. 5-7, 23), where the busy time went (TCP_INFO's limited-by
//! times), the write decomposed against RTT (Fig. 10), and per traced run the bytes sent
//! with WRITE and Data-Out marks (Figs. 11, 12, 24), the congestion window (Fig. 13) and the
//! send queue (Figs. 14-19, 25) against time.

use std::collections::BTreeMap;
use std::path::Path;

use super::decompose::sent_at;
use super::monitor::Sample;
use super::pdulog::{PduEvent, PduKind};
use super::plan::{Experiment, Kind, Plan};
use super::row::WanRun;
use super::series;
use super::theory;
use crate::study::plot::{draw, draw_bars, BarChart, Bars, Chart, Series};

/// A drawn figure and what the report says under it.
#[derive(Clone, Debug)]
pub struct Figure {
    /// PNG file name in the output directory.
    pub file: String,
    /// One line for the report.
    pub caption: String,
}

/// The median of `v` (empty: 0).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Rows of `e`, grouped by configuration label (in the experiment's order) and RTT.
pub fn grouped<'a>(
    e: &Experiment,
    rows: &'a [WanRun],
) -> Vec<(String, BTreeMap<u64, Vec<&'a WanRun>>)> {
    let mut out: Vec<(String, BTreeMap<u64, Vec<&WanRun>>)> = Vec::new();
    for c in &e.configs {
        let label = crate::study::table::clean(&c.label);
        let mut by_rtt: BTreeMap<u64, Vec<&WanRun>> = BTreeMap::new();
        for r in rows
            .iter()
            .filter(|r| r.experiment == e.id && r.config == label)
        {
            by_rtt
                .entry((r.rtt_ms * 1000.0) as u64)
                .or_default()
                .push(r);
        }
        if !by_rtt.is_empty() {
            out.push((label, by_rtt));
        }
    }
    out
}

fn throughput(
    plan: &Plan,
    e: &Experiment,
    rows: &[WanRun],
    dir: &Path,
) -> Result<Option<Figure>, String> {
    let groups = grouped(e, rows);
    if groups.is_empty() {
        return Ok(None);
    }
    let mut series = Vec::new();
    let mut theories: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (label, by_rtt) in &groups {
        let mut s = Series {
            name: label.clone(),
            ..Series::default()
        };
        for (&rtt_us, runs) in by_rtt {
            let x = rtt_us as f64 / 1000.0;
            let mut v: Vec<f64> = runs.iter().map(|r| r.mib_s()).collect();
            let (lo, hi) = (
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            );
            s.points.push((x, median(&mut v)));
            if runs.len() > 1 {
                s.spread.push((x, lo, hi));
            }
            let r = runs[0];
            if r.theory_mib_s > 0.0 {
                let name = if r.initiator == "socket" {
                    "theory: the link".to_string()
                } else {
                    format!(
                        "theory: {} MiB writes, QD {}",
                        r.block_bytes as f64 / f64::from(1 << 20),
                        r.queue_depth
                    )
                };
                theories.entry(name).or_default().push((x, r.theory_mib_s));
            }
        }
        series.push(s);
    }
    for (name, mut pts) in theories {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts.dedup_by(|a, b| a.0 == b.0);
        series.push(Series {
            name,
            points: pts,
            ..Series::default()
        });
    }
    let file = format!("{}.png", e.id);
    draw(
        &Chart {
            title: e.title.into(),
            x_label: "round-trip time added by the link (ms)".into(),
            y_label: "write throughput (MiB/s)".into(),
            series,
            ..Chart::default()
        },
        &dir.join(&file),
    )?;
    Ok(Some(Figure {
        file,
        caption: format!(
            "{} Link {}; median of {} run(s) per point, each {:.0} s after {:.0} s of warm-up.",
            e.title,
            plan.link,
            plan.runs,
            e.seconds.as_secs_f64(),
            e.warmup.as_secs_f64()
        ),
    }))
}

/// Where each configuration's busy time went at the experiment's largest RTT.
fn limited(e: &Experiment, rows: &[WanRun], dir: &Path) -> Result<Option<Figure>, String> {
    let groups = grouped(e, rows);
    let mut names = Vec::new();
    let (mut snd, mut rwnd, mut other, mut idle) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut at_ms = 0.0;
    for (label, by_rtt) in &groups {
        let Some((&rtt_us, runs)) = by_rtt.iter().next_back() else {
            continue;
        };
        let Some(t) = runs[0].tcp else { continue };
        let secs = runs[0].seconds.max(1e-9);
        at_ms = rtt_us as f64 / 1000.0;
        names.push(label.clone());
        let pct = |x: f64| (x / secs * 100.0).clamp(0.0, 100.0);
        snd.push(pct(t.sndbuf_limited_s));
        rwnd.push(pct(t.rwnd_limited_s));
        other.push(pct(t.busy_s - t.sndbuf_limited_s - t.rwnd_limited_s));
        idle.push(pct(secs - t.busy_s));
    }
    if names.is_empty() {
        return Ok(None);
    }
    let file = format!("{}-limited.png", e.id);
    draw_bars(
        &BarChart {
            title: format!("What limited the sender at {at_ms} ms (TCP_INFO)"),
            x_label: "configuration".into(),
            y_label: "share of the run (%)".into(),
            groups: names,
            series: vec![
                Bars {
                    name: "send buffer full".into(),
                    values: snd,
                },
                Bars {
                    name: "receiver's window".into(),
                    values: rwnd,
                },
                Bars {
                    name: "congestion window / network".into(),
                    values: other,
                },
                Bars {
                    name: "nothing to send".into(),
                    values: idle,
                },
            ],
            stacked: true,
        },
        &dir.join(&file),
    )?;
    Ok(Some(Figure {
        file,
        caption: format!(
            "{}: how each sender's time split at {at_ms} ms, from TCP_INFO's busy, \
             receive-window-limited and send-buffer-limited times (the study's cause, named by \
             the kernel).",
            e.id
        ),
    }))
}

fn decomposition(
    plan: &Plan,
    e: &Experiment,
    rows: &[WanRun],
    dir: &Path,
) -> Result<Option<Figure>, String> {
    let groups = grouped(e, rows);
    let mut series = Vec::new();
    for (label, by_rtt) in &groups {
        let mut pts: [Vec<(f64, f64)>; 3] = Default::default();
        let mut ideal = Vec::new();
        for (&rtt_us, runs) in by_rtt {
            let x = rtt_us as f64 / 1000.0;
            let ds: Vec<_> = runs.iter().filter_map(|r| r.decomposition).collect();
            if ds.is_empty() {
                continue;
            }
            let mut ta: Vec<f64> = ds.iter().map(|d| d.ta_ms).collect();
            let mut tb: Vec<f64> = ds.iter().map(|d| d.tb_ms).collect();
            let mut tc: Vec<f64> = ds.iter().map(|d| d.tc_ms).collect();
            pts[0].push((x, median(&mut ta)));
            pts[1].push((x, median(&mut tb)));
            pts[2].push((x, median(&mut tc)));
            if let Some(rate) = plan.link.forward.rate_bps {
                let g = theory::goodput(rate as f64, plan.link.mtu);
                ideal.push((x, f64::from(runs[0].block_bytes) / g * 1e3));
            }
        }
        for (name, p) in ["Ta", "Tb", "Tc"].iter().zip(pts) {
            if !p.is_empty() {
                series.push(Series {
                    name: format!("{name}, {label}"),
                    points: p,
                    ..Series::default()
                });
            }
        }
        if !ideal.is_empty() {
            series.push(Series {
                name: format!("Ta at line rate, {label}"),
                points: ideal,
                ..Series::default()
            });
        }
    }
    if series.is_empty() {
        return Ok(None);
    }
    let file = format!("{}.png", e.id);
    draw(
        &Chart {
            title: e.title.into(),
            x_label: "round-trip time added by the link (ms)".into(),
            y_label: "time per write (ms)".into(),
            series,
            ..Chart::default()
        },
        &dir.join(&file),
    )?;
    Ok(Some(Figure {
        file,
        caption: "Ta: the write's first data byte through the link's bottleneck to its last \
                  (timed by their acknowledgements); Tb: the last byte's acknowledgement to \
                  the status; Tc: the status to the next write. Medians over the runs' \
                  writes; one write at a time."
            .into(),
    }))
}

/// The stretch of a run a time-series figure shows: `[from, to)` microseconds.
fn window(samples: &[Sample], span_us: u64) -> Option<(u64, u64)> {
    let from = samples.first()?.t_us;
    let last = samples.last()?.t_us;
    Some((from, (from + span_us).min(last)))
}

/// One write cycle at the window's start: from the second command on the wire to the third
/// (the first may have started before the measurement).
fn one_cycle(samples: &[Sample], pdus: &[PduEvent], from: u64) -> Option<(u64, u64)> {
    let starts: Vec<u64> = pdus
        .iter()
        .filter(|p| p.sent && p.kind == PduKind::Command)
        .filter_map(|p| sent_at(samples, p.offset + 1))
        .map(|t| t as u64)
        .filter(|&t| t >= from)
        .collect();
    let (a, b) = (*starts.first()?, *starts.get(1)?);
    let margin = (b - a) / 10;
    Some((a.saturating_sub(margin), b + margin))
}

fn ms(t_us: u64, from: u64) -> f64 {
    (t_us.saturating_sub(from)) as f64 / 1000.0
}

fn in_window(samples: &[Sample], w: (u64, u64)) -> impl Iterator<Item = &Sample> {
    samples
        .iter()
        .filter(move |s| s.t_us >= w.0 && s.t_us < w.1)
}

/// Bytes sent against time, WRITE and Data-Out marks where their first byte went out.
fn bytes_chart(title: &str, samples: &[Sample], pdus: &[PduEvent], w: (u64, u64)) -> Chart {
    let base = in_window(samples, w).next().map_or(0, |s| s.sent());
    let mb = |b: u64| b.saturating_sub(base) as f64 / 1e6;
    let mut series = vec![
        Series {
            name: "bytes sent".into(),
            points: in_window(samples, w)
                .map(|s| (ms(s.t_us, w.0), mb(s.sent())))
                .collect(),
            ..Series::default()
        },
        Series {
            name: "bytes acknowledged".into(),
            points: in_window(samples, w)
                .map(|s| (ms(s.t_us, w.0), mb(s.acked)))
                .collect(),
            ..Series::default()
        },
    ];
    for (kind, name) in [(PduKind::Command, "WRITE"), (PduKind::DataOut, "Data-Out")] {
        let points: Vec<(f64, f64)> = pdus
            .iter()
            .filter(|p| p.sent && p.kind == kind && p.offset >= base)
            .filter_map(|p| Some((sent_at(samples, p.offset + 1)?, p.offset)))
            .filter(|(t, _)| *t >= w.0 as f64 && *t < w.1 as f64)
            .map(|(t, off)| ((t - w.0 as f64) / 1000.0, mb(off)))
            .collect();
        if !points.is_empty() {
            series.push(Series {
                name: name.into(),
                points,
                markers_only: true,
                ..Series::default()
            });
        }
    }
    Chart {
        title: title.into(),
        x_label: "time (ms)".into(),
        y_label: "stream bytes (MB)".into(),
        series,
        ..Chart::default()
    }
}

fn cwnd_chart(title: &str, samples: &[Sample], w: (u64, u64)) -> Chart {
    let kb = |b: u64| b as f64 / 1e3;
    let pick = |f: &dyn Fn(&Sample) -> f64| {
        in_window(samples, w)
            .map(|s| (ms(s.t_us, w.0), f(s)))
            .collect()
    };
    Chart {
        title: title.into(),
        x_label: "time (ms)".into(),
        y_label: "kB".into(),
        series: vec![
            Series {
                name: "congestion window".into(),
                points: pick(&|s| kb(u64::from(s.cwnd) * u64::from(s.mss))),
                ..Series::default()
            },
            Series {
                name: "bytes in flight".into(),
                points: pick(&|s| kb(u64::from(s.in_flight()))),
                ..Series::default()
            },
            Series {
                name: "peer's window".into(),
                points: pick(&|s| kb(u64::from(s.snd_wnd))),
                ..Series::default()
            },
        ],
        ..Chart::default()
    }
}

fn queue_chart(title: &str, samples: &[Sample], w: (u64, u64)) -> Chart {
    let kb = |b: u32| f64::from(b) / 1e3;
    let pick = |f: &dyn Fn(&Sample) -> f64| {
        in_window(samples, w)
            .map(|s| (ms(s.t_us, w.0), f(s)))
            .collect()
    };
    Chart {
        title: title.into(),
        x_label: "time (ms)".into(),
        y_label: "kB".into(),
        series: vec![
            Series {
                name: "send queue (SIOCOUTQ)".into(),
                points: pick(&|s| kb(s.queued)),
                ..Series::default()
            },
            Series {
                name: "of it not yet sent (SIOCOUTQNSD)".into(),
                points: pick(&|s| kb(s.unsent)),
                ..Series::default()
            },
            Series {
                name: "send buffer (SO_SNDBUF)".into(),
                points: pick(&|s| kb(s.sndbuf)),
                ..Series::default()
            },
        ],
        ..Chart::default()
    }
}

/// The time-series figures of every traced run of `e`.
fn traces(e: &Experiment, rows: &[WanRun], dir: &Path) -> Result<Vec<Figure>, String> {
    let mut out = Vec::new();
    for (label, by_rtt) in grouped(e, rows) {
        for (&rtt_us, runs) in &by_rtt {
            let rtt_ms = rtt_us as f64 / 1000.0;
            let r = runs[0];
            let (sp, pp) = series::paths(dir, e.id, &label, rtt_ms, r.run);
            let Ok((samples, pdus)) = series::read(&sp, &pp) else {
                continue;
            };
            // A dozen round trips, at least 400 ms: several writes of the study's size.
            let span = ((rtt_ms * 12.0).max(400.0) * 1000.0) as u64;
            let Some(w) = window(&samples, span) else {
                continue;
            };
            let stem = sp
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_suffix("-samples.csv"))
                .unwrap_or("trace")
                .to_owned();
            let what = format!("{label}, {rtt_ms} ms");
            let mut charts = vec![
                (
                    "bytes",
                    bytes_chart(&format!("Bytes sent: {what}"), &samples, &pdus, w),
                ),
                (
                    "cwnd",
                    cwnd_chart(&format!("Congestion window: {what}"), &samples, w),
                ),
                (
                    "queue",
                    queue_chart(&format!("Send queue: {what}"), &samples, w),
                ),
            ];
            if let Some(c) = one_cycle(&samples, &pdus, w.0) {
                charts.push((
                    "bytes-zoom",
                    bytes_chart(&format!("One write: {what}"), &samples, &pdus, c),
                ));
                charts.push((
                    "queue-zoom",
                    queue_chart(&format!("Send queue, one write: {what}"), &samples, c),
                ));
            }
            for (kind, chart) in charts {
                if chart.series.iter().all(|s| s.points.is_empty()) {
                    continue;
                }
                let file = format!("{stem}-{kind}.png");
                draw(&chart, &dir.join(&file))?;
                out.push(Figure {
                    file,
                    caption: chart.title.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// Every figure of `plan` that `rows` (and the kept series in `dir`) can draw.
pub fn draw_all(
    plan: &Plan,
    rows: &[WanRun],
    dir: &Path,
) -> Result<Vec<(String, Vec<Figure>)>, String> {
    let mut out = Vec::new();
    for e in &plan.experiments {
        let mut figs = Vec::new();
        match e.kind {
            Kind::Throughput => {
                figs.extend(throughput(plan, e, rows, dir)?);
                figs.extend(limited(e, rows, dir)?);
            }
            Kind::Decomposition => {
                figs.extend(decomposition(plan, e, rows, dir)?);
                figs.extend(limited(e, rows, dir)?);
            }
            Kind::Trace => figs.extend(traces(e, rows, dir)?),
        }
        out.push((e.id.to_string(), figs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn a_cycle_runs_from_one_write_to_the_next() {
        let samples: Vec<Sample> = (0..100)
            .map(|i| Sample {
                t_us: i * 1000,
                acked: i * 100,
                ..Sample::default()
            })
            .collect();
        let cmd = |offset| PduEvent {
            t_us: 0,
            sent: true,
            kind: PduKind::Command,
            itt: 0,
            offset,
            wire_len: 48,
        };
        let pdus = [cmd(0), cmd(2000), cmd(5000)];
        // Commands reach the wire at 0, 20 and 50 ms; the cycle from 0 is 0..20 ms.
        let (a, b) = one_cycle(&samples, &pdus, 0).unwrap();
        assert!(a <= 10 && (21_000..23_000).contains(&b), "{a} {b}");
        assert!(one_cycle(&samples, &pdus[..1], 0).is_none());
    }
}
