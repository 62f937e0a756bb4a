//! The Markdown report of `sluice lab wan`: the link's measured accuracy, every figure, the
//! numbers behind them, and what they say about the study's findings: where the stall is,
//! what names it, what the fix buys, and how sluice's defaults compare with the theory.

use std::fmt::Write as _;
use std::path::Path;

use super::figures::{draw_all, grouped, median, Figure};
use super::plan::{Kind, Plan};
use super::row::WanRun;
use crate::link::LinkAccuracy;

/// What the report says besides the rows.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The command that made the results.
    pub command: String,
    /// Lines about the machine, the load, the congestion control default, the link.
    pub environment: Vec<String>,
    /// The link measured at each RTT of the plan.
    pub accuracy: Vec<LinkAccuracy>,
    /// Points that could not run: what, and why.
    pub failures: Vec<(String, String)>,
}

/// Figures drawn and the report.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// PNG file names, in report order.
    pub figures: Vec<String>,
    /// The Markdown report.
    pub report: String,
}

/// The share of sluice's theory the goal asks for: 90 %.
pub const GOAL: f64 = 0.9;

fn pct(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

fn mb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e6)
}

fn accuracy_section(out: &mut String, acc: &[LinkAccuracy]) {
    if acc.is_empty() {
        return;
    }
    out.push_str(
        "## The link's accuracy\n\nMeasured through the link before the runs at each RTT: 50 UDP \
         echoes from inside the target's namespace, a paced stream for the rate, and how late \
         the forwarder's packets left against their schedule meanwhile.\n\n\
         | RTT set (ms) | RTT min / median / p99 (ms) | error | rate set (Mbit/s) | rate measured (Mbit/s) | error | lateness p50 / p99 / max (µs) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for a in acc {
        let rate_set = a
            .spec
            .forward
            .rate_bps
            .map_or("unlimited".into(), |r| format!("{:.0}", r as f64 / 1e6));
        let (rate, rate_err) = match (a.forward_rate_bps, a.rate_error()) {
            (Some(r), Some(e)) => (format!("{:.1}", r / 1e6), format!("{:+.1} %", e * 100.0)),
            _ => ("-".into(), "-".into()),
        };
        let l = a.forward_lateness;
        let _ = writeln!(
            out,
            "| {:.1} | {:.2} / {:.2} / {:.2} | {:+.1} % | {rate_set} | {rate} | {rate_err} | {} / {} / {} |",
            a.spec.rtt().as_secs_f64() * 1e3,
            a.rtt.min_us / 1e3,
            a.rtt.median_us / 1e3,
            a.rtt.p99_us / 1e3,
            a.rtt_error() * 100.0,
            l.p50_us,
            l.p99_us,
            l.max_us
        );
    }
    out.push('\n');
}

fn throughput_table(out: &mut String, plan: &Plan, rows: &[WanRun], id: &str) {
    let Some(e) = plan.experiments.iter().find(|e| e.id == id) else {
        return;
    };
    out.push_str(
        "| configuration | RTT (ms) | MiB/s | theory | of theory | send-buffer-limited | rwnd-limited | retrans | max cwnd (MB) | max send buffer (MB) | min RTT (ms) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (label, by_rtt) in grouped(e, rows) {
        for (rtt_us, runs) in by_rtt {
            let mut v: Vec<f64> = runs.iter().map(|r| r.mib_s()).collect();
            let m = median(&mut v);
            let r = runs[0];
            let share = |x: f64| pct(x / r.seconds.max(1e-9));
            let (snd, rwnd, retrans, cwnd, sndbuf, minrtt) = match r.tcp {
                Some(t) => (
                    share(t.sndbuf_limited_s),
                    share(t.rwnd_limited_s),
                    t.retrans.to_string(),
                    mb(t.max_cwnd_bytes),
                    mb(t.max_sndbuf),
                    format!("{:.2}", t.min_rtt_ms),
                ),
                None => Default::default(),
            };
            let _ = writeln!(
                out,
                "| {label} | {} | {m:.1} | {:.1} | {} | {snd} | {rwnd} | {retrans} | {cwnd} | {sndbuf} | {minrtt} |",
                rtt_us as f64 / 1000.0,
                r.theory_mib_s,
                if r.theory_mib_s > 0.0 { pct(m / r.theory_mib_s) } else { "-".into() },
            );
        }
    }
    out.push('\n');
}

fn decomposition_table(out: &mut String, plan: &Plan, rows: &[WanRun], id: &str) {
    let Some(e) = plan.experiments.iter().find(|e| e.id == id) else {
        return;
    };
    out.push_str(
        "| configuration | RTT (ms) | writes | Ta (ms) | Tb (ms) | Tc (ms) | MiB/s | send-buffer-limited |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (label, by_rtt) in grouped(e, rows) {
        for (rtt_us, runs) in by_rtt {
            let r = runs[0];
            let Some(d) = r.decomposition else { continue };
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                rtt_us as f64 / 1000.0,
                d.writes,
                d.ta_ms,
                d.tb_ms,
                d.tc_ms,
                r.mib_s(),
                r.tcp.map_or(
                    "-".into(),
                    |t| pct(t.sndbuf_limited_s / r.seconds.max(1e-9))
                )
            );
        }
    }
    out.push('\n');
}

/// Sentences the numbers support: the stall and its cause, the fix, sluice's defaults.
fn findings(out: &mut String, rows: &[WanRun]) {
    let mut lines = Vec::new();
    let sluice: Vec<&WanRun> = rows.iter().filter(|r| r.initiator == "sluice").collect();
    let max_rtt = sluice.iter().map(|r| r.rtt_ms).fold(0.0, f64::max);
    let at_max: Vec<&WanRun> = sluice
        .iter()
        .copied()
        .filter(|r| r.rtt_ms == max_rtt)
        .collect();
    let share = |r: &WanRun, x: f64| x / r.seconds.max(1e-9);
    let limited = |r: &WanRun| r.tcp.map_or(0.0, |t| share(r, t.sndbuf_limited_s));
    let kernel: Vec<&WanRun> = at_max
        .iter()
        .copied()
        .filter(|r| r.sndbuf_policy == "kernel" && r.tcp.is_some())
        .collect();
    let mut stalled: Vec<&WanRun> = kernel
        .iter()
        .copied()
        .filter(|r| limited(r) >= 0.1)
        .collect();
    if stalled.is_empty() {
        // Say so, with the most limited of them.
        stalled.extend(
            kernel
                .iter()
                .copied()
                .max_by(|a, b| limited(a).total_cmp(&limited(b))),
        );
    }
    for r in stalled {
        let t = r.tcp.unwrap_or_default();
        let bound = t.max_sndbuf as f64 / (max_rtt / 1e3) / f64::from(1 << 20);
        let head = if limited(r) >= 0.1 {
            "**The stall.**"
        } else {
            "**No stall.**"
        };
        lines.push(format!(
            "{head} With the kernel sizing the send buffer, `{}` ({}) wrote {:.1} MiB/s at \
             {max_rtt} ms, {} of the theoretical line. TCP_INFO counted the connection \
             send-buffer-limited for {} of the run and receive-window-limited for {}; the \
             buffer peaked at {} MB, and a buffer that size carries at most {bound:.1} MiB/s \
             over {max_rtt} ms (buffer / RTT, before the kernel's per-segment overhead).",
            r.config,
            r.experiment,
            r.mib_s(),
            pct(r.of_theory()),
            pct(limited(r)),
            pct(share(r, t.rwnd_limited_s)),
            mb(t.max_sndbuf),
        ));
        for fix in at_max.iter().filter(|f| {
            f.experiment == r.experiment
                && f.block_bytes == r.block_bytes
                && f.queue_depth == r.queue_depth
                && f.params == r.params
                && f.sndbuf_policy != "kernel"
        }) {
            let t = fix.tcp.unwrap_or_default();
            lines.push(format!(
                "**The fix.** `{}` wrote {:.1} MiB/s at {max_rtt} ms, {} of the theoretical \
                 line, send-buffer-limited {} of the time, its buffer at most {} MB.",
                fix.config,
                fix.mib_s(),
                pct(fix.of_theory()),
                pct(limited(fix)),
                mb(t.max_sndbuf),
            ));
        }
    }
    if let Some(r) = at_max.iter().find(|r| r.params == "rfc") {
        lines.push(format!(
            "**RFC 7143's defaults.** `{}` wrote {:.1} MiB/s at {max_rtt} ms, {} of the \
             theoretical line: every burst of MaxBurstLength waits for its own R2T, one at a \
             time (MaxOutstandingR2T 1).",
            r.config,
            r.mib_s(),
            pct(r.of_theory()),
        ));
    }
    for r in at_max
        .iter()
        .filter(|r| r.params == "defaults" && r.sndbuf_policy != "kernel")
    {
        let verdict = if r.of_theory() >= GOAL {
            "meets"
        } else {
            "misses"
        };
        lines.push(format!(
            "**sluice's defaults.** `{}` ({} MiB writes, QD {}) wrote {:.1} MiB/s at {max_rtt} ms: \
             {} of the theoretical line ({:.1} MiB/s), which {verdict} the {} goal.",
            r.config,
            f64::from(r.block_bytes) / f64::from(1 << 20),
            r.queue_depth,
            r.mib_s(),
            pct(r.of_theory()),
            r.theory_mib_s,
            pct(GOAL),
        ));
    }
    if lines.is_empty() {
        return;
    }
    out.push_str("## What the numbers say\n\n");
    for l in lines {
        out.push_str(&l);
        out.push_str("\n\n");
    }
}

/// Draws every figure into `dir` and returns the report.
pub fn analyse(
    plan: &Plan,
    rows: &[WanRun],
    ctx: &Context,
    dir: &Path,
) -> Result<Analysis, String> {
    let drawn = draw_all(plan, rows, dir)?;
    let mut out = String::new();
    out.push_str(
        "# iSCSI writes over a long link\n\nA reproduction of Oguchi, Higa, Matsubara, Okamawari and \
         Yamaguchi, \"Performance Improvement of iSCSI Remote Storage Access through Optimization \
         of Multiple Layers\": sequential writes through an emulated link of growing round-trip \
         time, watched with TCP_INFO and the send queue instead of a patched kernel.\n\n",
    );
    let _ = writeln!(out, "Command: `{}`\n", ctx.command);
    for l in &ctx.environment {
        let _ = writeln!(out, "- {l}");
    }
    let _ = writeln!(out, "- Link: `{}` (delay set per point).\n", plan.link);
    accuracy_section(&mut out, &ctx.accuracy);
    findings(&mut out, rows);
    let mut files = Vec::new();
    for (id, figs) in &drawn {
        let Some(e) = plan.experiments.iter().find(|e| e.id == *id) else {
            continue;
        };
        let _ = writeln!(out, "## {}: {}\n", e.id, e.title);
        for Figure { file, caption } in figs {
            let _ = writeln!(out, "![{caption}]({file})\n\n{caption}\n");
            files.push(file.clone());
        }
        match e.kind {
            Kind::Throughput => throughput_table(&mut out, plan, rows, id),
            Kind::Decomposition => decomposition_table(&mut out, plan, rows, id),
            Kind::Trace => throughput_table(&mut out, plan, rows, id),
        }
    }
    if !ctx.failures.is_empty() {
        out.push_str("## Points that did not run\n\n");
        for (what, why) in &ctx.failures {
            let _ = writeln!(out, "- {what}: {why}");
        }
        out.push('\n');
    }
    Ok(Analysis {
        figures: files,
        report: out,
    })
}
