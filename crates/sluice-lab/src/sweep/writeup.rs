//! The Markdown report: method, checks, figures, the fitted models beside the paper's, and
//! Table 2 beside this system's answers.

use std::fmt::Write as _;

use super::figures::Drawn;
use super::fit::Fit;
use super::models::{bytes_label, equation3, Model, PAPER_EQ1, PAPER_EQ2, PEAK_WITHIN};
use super::plan::Plan;
use super::point::Point;
use super::record::RunRecord;
use super::summary::Summary;
use super::table2::{agrees, importance, rows};

/// What the report needs besides the measurements.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The command that made the results.
    pub command: String,
    /// Machine, kernel, link: one line each.
    pub environment: Vec<String>,
    /// Points that could not run: (experiment, point key, error).
    pub failures: Vec<(String, String, String)>,
}

/// The values of `p` that differ from RFC 7143's defaults ([`Point::default`]).
pub fn describe(p: &Point) -> String {
    let d = Point::default();
    let yn = |b: bool| if b { "Yes" } else { "No" };
    let mut parts = vec![p.direction.name().to_owned()];
    if p.initiator_mrdsl == p.target_mrdsl {
        if p.initiator_mrdsl != d.initiator_mrdsl {
            parts.push(format!("MRDSL {}", bytes_label(p.initiator_mrdsl)));
        }
    } else {
        parts.push(format!(
            "MRDSL {}/{}",
            bytes_label(p.initiator_mrdsl),
            bytes_label(p.target_mrdsl)
        ));
    }
    if p.max_burst != d.max_burst {
        parts.push(format!("MBL {}", bytes_label(p.max_burst)));
    }
    if p.first_burst != d.first_burst {
        parts.push(format!("FBL {}", bytes_label(p.first_burst)));
    }
    if p.immediate_data != d.immediate_data {
        parts.push(format!("Imm {}", yn(p.immediate_data)));
    }
    if p.initial_r2t != d.initial_r2t {
        parts.push(format!("IR2T {}", yn(p.initial_r2t)));
    }
    if p.max_outstanding_r2t != d.max_outstanding_r2t {
        parts.push(format!("MOR2T {}", p.max_outstanding_r2t));
    }
    if !p.data_pdu_in_order {
        parts.push("PDUInOrder No".into());
    }
    if !p.data_sequence_in_order {
        parts.push("SeqInOrder No".into());
    }
    if !p.phase_collapse {
        parts.push("no collapse".into());
    }
    if p.header_digest {
        parts.push("HD".into());
    }
    if p.data_digest {
        parts.push("DD".into());
    }
    if p.outstanding != d.outstanding {
        parts.push(format!("QD {}", p.outstanding));
    }
    if p.command_bytes != d.command_bytes {
        parts.push(format!("{} sectors", p.sectors()));
    }
    if p.luns != 1 {
        parts.push(format!("{} LUs", p.luns));
    }
    if p.connections != 1 {
        parts.push(format!("{} conns {}", p.connections, p.policy.name()));
    }
    parts.join(" ")
}

/// The whole report.
#[allow(clippy::too_many_arguments)]
pub fn report(
    plan: &Plan,
    records: &[RunRecord],
    summaries: &[Summary],
    implementation: &str,
    eq1: Option<&Model>,
    eq2: Option<&Model>,
    figures: &[Drawn],
    ctx: &Context,
) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# iSCSI parameter study: {implementation}\n");
    let _ = writeln!(
        w,
        "A reproduction of Shastry, Klotz and Russell, \"Evaluating the effect of iSCSI \
         protocol parameters on performance\", on this machine. Made by:\n\n```sh\n{}\n```\n",
        ctx.command
    );
    let _ = writeln!(w, "## Method\n");
    let _ = writeln!(
        w,
        "- Preset `{}`: {} points, {} runs each, {} MiB per run after an unrecorded warm-up of \
         up to {} MiB on the same session; a point is the mean of its runs (spread shown as \
         bars and in the tables).",
        plan.name,
        plan.points().count(),
        plan.runs,
        plan.bytes_per_run >> 20,
        super::run::WARM_UP >> 20,
    );
    let _ = writeln!(
        w,
        "- Throughput is application bytes over the time from the first command to the last \
         status, in MiB/s (2^20 bytes, the paper's MB). Time per MiB (equations 1 and 2) is \
         its inverse in milliseconds."
    );
    let _ = writeln!(
        w,
        "- Settings not varied keep RFC 7143's defaults (MRDSL 8 KiB, MaxBurstLength 256 KiB, \
         FirstBurstLength 64 KiB, ImmediateData=Yes, InitialR2T=Yes, MaxOutstandingR2T 1), \
         1024 sectors (512 KiB) per command, one command outstanding, one LU, one connection."
    );
    for line in &ctx.environment {
        let _ = writeln!(w, "- {line}");
    }
    let total = records.len();
    let flagged: Vec<&RunRecord> = records.iter().filter(|r| !r.mismatch.is_empty()).collect();
    let failed: usize = records.iter().filter(|r| r.measured.errors > 0).count();
    let pdu_off: Vec<&RunRecord> = records
        .iter()
        .filter(|r| r.usable() && !r.pdu_differences().is_empty())
        .collect();
    let _ = writeln!(w, "\n## Checks\n");
    let _ = writeln!(
        w,
        "- {total} runs; {} negotiated something other than the grid asked (flagged, left out \
         of plots and fits); {failed} had failed commands.",
        flagged.len()
    );
    let _ = writeln!(
        w,
        "- PDU counts per command (initiator counters) against RFC 7143's prediction: {} of {} \
         usable runs differ.",
        pdu_off.len(),
        records.iter().filter(|r| r.usable()).count()
    );
    for r in flagged.iter().take(20) {
        let _ = writeln!(
            w,
            "  - flagged: {} `{}`: {}",
            r.experiment,
            describe(&r.point),
            r.mismatch.join("; ")
        );
    }
    for r in pdu_off.iter().take(20) {
        let _ = writeln!(
            w,
            "  - PDU count: {} `{}`: {}",
            r.experiment,
            describe(&r.point),
            r.pdu_differences().join("; ")
        );
    }
    for (e, key, err) in &ctx.failures {
        let _ = writeln!(w, "  - failed point: {e} `{key}`: {err}");
    }
    let _ = writeln!(w, "\n## Figures\n");
    let mut shown: Vec<&str> = Vec::new();
    for f in figures {
        let _ = writeln!(w, "### {}\n\n![{}]({})\n", f.title, f.id, f.file);
        if !shown.contains(&f.experiment.as_str()) {
            shown.push(&f.experiment);
            table(w, summaries, &f.experiment);
        }
    }
    for e in plan.experiments.iter().map(|e| e.id) {
        if !shown.contains(&e) && summaries.iter().any(|s| s.experiment == e) {
            let _ = writeln!(w, "### {e}\n");
            table(w, summaries, e);
        }
    }
    let _ = writeln!(w, "## Equation (1): reads\n");
    let _ = writeln!(
        w,
        "t = A x + B: t ms per MiB, x Data-In PDUs per command (measured), least squares over \
         every run of `mrdsl-read`.\n"
    );
    model_table(w, eq1.map(|m| &m.fit), &PAPER_EQ1);
    let _ = writeln!(w, "## Equation (2): writes\n");
    let _ = writeln!(
        w,
        "t = A x1 + B x2 + C x3 + D x4 + E x5 + F: x1 R2Ts, x2 Data-Outs per command, x3-x5 \
         immediate, unsolicited and solicited MiB per command, over every run of \
         `write-model`. The regressors are not independent (x3 + x4 + x5 is the command \
         size); a column that is a combination of earlier ones is reported as aliased.\n"
    );
    model_table(w, eq2.map(|m| &m.fit), &PAPER_EQ2);
    let (peaks, constant) = equation3(summaries, implementation);
    let _ = writeln!(w, "## Equation (3): n x m = constant\n");
    if peaks.is_empty() {
        let _ = writeln!(w, "Not measured (no `outstanding-r2t` points).\n");
    } else {
        let _ = writeln!(
            w,
            "n is the fewest outstanding R2Ts whose mean is within {:.0} % of its row's best; m \
             is MRDSL in KiB. The paper found n x m = 64.\n\n| MRDSL (KiB) | n | n x m | row \
             best (MiB/s) |\n|---|---|---|---|",
            PEAK_WITHIN * 100.0
        );
        for p in &peaks {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {:.1} |",
                p.mrdsl_kib, p.n, p.product, p.best
            );
        }
        if let Some(c) = constant {
            let _ = writeln!(w, "\nMedian n x m: **{c}**.\n");
        }
        table1(w, summaries);
    }
    let _ = writeln!(
        w,
        "## Table 2: the paper's suggestions beside this system\n"
    );
    let _ = writeln!(
        w,
        "Importance: the largest change of mean throughput across the parameter's values \
         ((max - min) / max, among points that agree on everything else); Important from 10 % \
         when that difference is also more than twice the largest standard deviation of the \
         runs (else \"within noise\"). Best: the smallest value within 5 % of the best, in the fastest group.\n"
    );
    let _ = writeln!(
        w,
        "| Parameter | Paper best | Default | Paper reads | Measured reads | Paper writes | \
         Measured writes | Measured best | Verdict |\n|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows(summaries, implementation) {
        let verdict = |paper: &str, e: Option<&super::models::Effect>| match agrees(paper, e) {
            Some(true) => "agrees".to_owned(),
            Some(false) => format!(
                "differs ({:.0}-{:.0} MiB/s)",
                e.map_or(0.0, |e| e.range.0),
                e.map_or(0.0, |e| e.range.1)
            ),
            None if e.is_some() => "paper open".to_owned(),
            None => "-".to_owned(),
        };
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} | {} | reads {}; writes {} |",
            r.parameter,
            r.paper_best,
            r.default,
            r.paper_reads,
            importance(r.reads.as_ref()),
            r.paper_writes,
            importance(r.writes.as_ref()),
            r.best,
            verdict(r.paper_reads, r.reads.as_ref()),
            verdict(r.paper_writes, r.writes.as_ref()),
        );
    }
    md
}

fn table(w: &mut String, summaries: &[Summary], experiment: &str) {
    let _ = writeln!(
        w,
        "| Point | Runs | MiB/s | sd | min | max | ms/MiB | Data-In/cmd | Data-Out/cmd | \
         R2T/cmd | target CPU s/GiB | initiator CPU s/GiB |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for s in summaries.iter().filter(|s| s.experiment == experiment) {
        let _ = writeln!(
            w,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {} | {:.2} |",
            describe(&s.point),
            s.runs,
            s.mean,
            s.sd,
            s.min,
            s.max,
            s.ms_per_mib,
            s.per_command.data_in,
            s.per_command.data_out,
            s.per_command.r2t,
            s.target_cpu_per_gib
                .map_or("-".into(), |c| format!("{c:.2}")),
            s.initiator_cpu_per_gib,
        );
    }
    let _ = writeln!(w);
}

fn model_table(w: &mut String, fit: Option<&Fit>, paper: &[(&str, f64)]) {
    let Some(fit) = fit else {
        let _ = writeln!(w, "Not fitted (no usable runs).\n");
        return;
    };
    let _ = writeln!(
        w,
        "| Coefficient | This system (95 % CI) | Paper |\n|---|---|---|"
    );
    for (c, (_, p)) in fit.coefficients.iter().zip(paper) {
        let ours = if c.aliased {
            "aliased".to_owned()
        } else if c.ci95.is_finite() {
            format!("{:.5} ± {:.5}", c.value, c.ci95)
        } else {
            format!("{:.5}", c.value)
        };
        let _ = writeln!(w, "| {} | {ours} | {p} |", c.name);
    }
    let _ = writeln!(w, "\nR² = {:.4} over {} runs.\n", fit.r_squared, fit.n);
}

/// The paper's Table 1: mean MiB/s per MRDSL (rows) and MaxOutstandingR2T (columns).
fn table1(w: &mut String, summaries: &[Summary]) {
    let pts: Vec<&Summary> = summaries
        .iter()
        .filter(|s| s.experiment == "outstanding-r2t")
        .collect();
    let mut cols: Vec<u16> = pts.iter().map(|s| s.point.max_outstanding_r2t).collect();
    cols.sort_unstable();
    cols.dedup();
    let mut rows: Vec<u32> = pts.iter().map(|s| s.point.target_mrdsl).collect();
    rows.sort_unstable();
    rows.dedup();
    let _ = write!(w, "Table 1 (MiB/s):\n\n| MRDSL (KiB) |");
    for c in &cols {
        let _ = write!(w, " {c} |");
    }
    let _ = write!(w, "\n|---|");
    for _ in &cols {
        let _ = write!(w, "---|");
    }
    let _ = writeln!(w);
    for r in rows {
        let _ = write!(w, "| {} |", f64::from(r) / 1024.0);
        for c in &cols {
            match pts
                .iter()
                .find(|s| s.point.target_mrdsl == r && s.point.max_outstanding_r2t == *c)
            {
                Some(s) => {
                    let _ = write!(w, " {:.1} |", s.mean);
                }
                None => {
                    let _ = write!(w, " |");
                }
            }
        }
        let _ = writeln!(w);
    }
    let _ = writeln!(w);
}
