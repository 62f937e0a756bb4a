//! `sluice lab sweep`: the iSCSI parameter study (Shastry, Klotz and Russell, "Evaluating
//! the effect of iSCSI protocol parameters on performance") reproduced end to end.
//!
//! A [`Plan`] (a preset of [`plan`]) lists experiments; each [`Point`] fixes every
//! negotiated key and the initiator's own choices. [`sweep`] runs the points through a
//! [`Launcher`] (the CLI spawns a sluice target configured for each point, or names an
//! existing target), one [`RunRecord`] per run with what the login actually negotiated, the
//! initiator's PDU counts and what RFC 7143 predicts for them ([`predict`]). [`analyse`]
//! groups the runs ([`summary`]), fits the paper's equations (1)-(3) ([`models`], [`fit`]),
//! draws the figures ([`figures`], with `crate::study::plot`) and writes the Markdown report ([`writeup`])
//! with Table 2 beside this system's answers ([`table2`]).
//!
//! Module map: `point`, `plan` (experiments and presets), `predict`, `record` (rows, CSV),
//! `run` (the loop), `summary`, `fit` (least squares), `models`, `table2`, `figures`,
//! `writeup`.

pub mod figures;
pub mod fit;
pub mod models;
pub mod plan;
pub mod point;
pub mod predict;
pub mod record;
pub mod run;
pub mod summary;
pub mod table2;
pub mod writeup;

use std::path::Path;

pub use plan::{preset, Plan, PRESETS};
pub use point::{Direction, Point};
pub use record::RunRecord;
pub use run::{run_key, sweep, Endpoint, Event, Launcher};
pub use writeup::Context;

/// What [`analyse`] wrote.
#[derive(Clone, Debug)]
pub struct Analysis {
    /// PNG files, in report order.
    pub figures: Vec<String>,
    /// The Markdown report.
    pub report: String,
}

/// Summarises `records`, fits the models, draws every figure into `dir` and returns the
/// report (the caller writes it). `implementation` picks the target the models are fitted
/// for (the first in the records when `None`).
pub fn analyse(
    plan: &Plan,
    records: &[RunRecord],
    ctx: &Context,
    dir: &Path,
) -> Result<Analysis, String> {
    let summaries = summary::summarize(records);
    let implementation = records
        .first()
        .map(|r| r.implementation.clone())
        .unwrap_or_else(|| "sluice".into());
    let eq1 = models::equation1(records, &implementation);
    let eq2 = models::equation2(records, &implementation);
    let drawn = figures::draw_all(&summaries, eq1.as_ref(), eq2.as_ref(), dir)?;
    let report = writeup::report(
        plan,
        records,
        &summaries,
        &implementation,
        eq1.as_ref(),
        eq2.as_ref(),
        &drawn,
        ctx,
    );
    Ok(Analysis {
        figures: drawn.into_iter().map(|d| d.file).collect(),
        report,
    })
}
