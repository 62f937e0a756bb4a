//! `sluice lab`: runs an experiment from sluice-lab and prints its table or JSON.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_lab::{congestion_control, LoopbackSource, Source, StreamResult};

use crate::cli::{LoopbackArgs, SourceArg};
use crate::client_common::print_json;

/// One source's streams and their median.
#[derive(Serialize)]
struct SourceJson {
    source: &'static str,
    mib_per_s: Vec<f64>,
    median_mib_per_s: f64,
}

/// `sluice lab loopback --json`.
#[derive(Serialize)]
struct LoopbackJson {
    file: String,
    chunk: u64,
    seconds: f64,
    congestion_control: String,
    huge_pages: Option<String>,
    sources: Vec<SourceJson>,
    /// Median cold over median hot, when both ran.
    cold_over_hot: Option<f64>,
    /// Median sendfile over median cold, when both ran.
    sendfile_over_cold: Option<f64>,
}

/// `sluice lab loopback`.
pub fn run_loopback(args: &LoopbackArgs) -> Result<()> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) || args.rounds == 0 {
        bail!("--seconds must be positive and --rounds at least 1");
    }
    let chunk = usize::try_from(args.chunk).context("--chunk is too large")?;
    let wait = Duration::from_secs_f64(args.huge_page_wait.max(0.0));
    let lun = LoopbackSource::open(&args.file, chunk, wait)
        .with_context(|| format!("{}", args.file.display()))?;
    let cc = congestion_control().unwrap_or_else(|e| format!("unknown ({e})"));
    let huge = lun.device().huge_pages().map(|s| {
        format!(
            "{} of {} 2 MiB windows huge{}",
            s.collapsed,
            s.windows,
            if s.unsupported {
                " (refused by the kernel)"
            } else {
                ""
            }
        )
    });
    let sources: Vec<Source> = args.sources.iter().map(|s| source(*s)).collect();
    let duration = Duration::from_secs_f64(args.seconds);
    let mut results: Vec<Vec<StreamResult>> = vec![Vec::new(); sources.len()];
    let mut cold_at = 0u64;
    if !args.json {
        outln!(
            "loopback, one TCP stream, {} B sends, {} s each, congestion control {cc}{}",
            args.chunk,
            args.seconds,
            huge.as_deref()
                .map(|h| format!(", LUN {h}"))
                .unwrap_or_default()
        );
    }
    for round in 1..=args.rounds {
        for (i, s) in sources.iter().enumerate() {
            let r = lun
                .stream(*s, duration, &mut cold_at)
                .with_context(|| format!("{} stream", s.name()))?;
            if !args.json {
                outln!(
                    "round {round}  {:<8} {:>8.0} MiB/s",
                    s.name(),
                    r.mib_per_s()
                );
            }
            results[i].push(r);
        }
    }
    let per_source: Vec<SourceJson> = sources
        .iter()
        .zip(&results)
        .map(|(s, rs)| {
            let mb: Vec<f64> = rs.iter().map(|r| r.mib_per_s().round()).collect();
            SourceJson {
                source: s.name(),
                median_mib_per_s: median(&mb),
                mib_per_s: mb,
            }
        })
        .collect();
    let med = |s: Source| {
        per_source
            .iter()
            .find(|j| j.source == s.name())
            .map(|j| j.median_mib_per_s)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some((a / b * 1000.0).round() / 1000.0),
        _ => None,
    };
    let report = LoopbackJson {
        file: args.file.display().to_string(),
        chunk: args.chunk,
        seconds: args.seconds,
        congestion_control: cc,
        huge_pages: huge,
        cold_over_hot: ratio(med(Source::Cold), med(Source::Hot)),
        sendfile_over_cold: ratio(med(Source::Sendfile), med(Source::Cold)),
        sources: per_source,
    };
    if args.json {
        return print_json(&report);
    }
    outln!("medians:");
    for s in &report.sources {
        outln!("  {:<8} {:>8.0} MiB/s", s.source, s.median_mib_per_s);
    }
    if let Some(r) = report.cold_over_hot {
        outln!("cold / hot = {:.1} %", r * 100.0);
    }
    if let Some(r) = report.sendfile_over_cold {
        outln!("sendfile / cold = {:.1} %", r * 100.0);
    }
    Ok(())
}

fn source(arg: SourceArg) -> Source {
    match arg {
        SourceArg::Hot => Source::Hot,
        SourceArg::Cold => Source::Cold,
        SourceArg::Sendfile => Source::Sendfile,
    }
}

/// Median of a non-empty list (mean of the middle two for an even count).
fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
