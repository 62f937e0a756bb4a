//! The figures of the report: which experiment, which axes, which lines.

use std::path::Path;

use super::models::{bytes_label, Model};
use super::point::Direction;
use super::summary::Summary;
use crate::study::plot::{draw, Chart, Series};

/// A figure drawn from one experiment's summaries.
struct Def {
    id: &'static str,
    experiment: &'static str,
    title: &'static str,
    x_label: &'static str,
    log2_x: bool,
    x: fn(&Summary) -> f64,
    series: fn(&Summary) -> String,
    keep: fn(&Summary) -> bool,
}

fn kib(n: u32) -> f64 {
    f64::from(n) / 1024.0
}

fn all(_: &Summary) -> bool {
    true
}

fn one(_: &Summary) -> String {
    String::new()
}

fn by_mrdsl(s: &Summary) -> String {
    format!("MRDSL {}", bytes_label(s.point.target_mrdsl))
}

fn digest_mode(s: &Summary) -> String {
    let p = &s.point;
    let mode = match (p.header_digest, p.data_digest) {
        (false, false) => "no digests",
        (true, false) => "header digest",
        (false, true) => "data digest",
        (true, true) => "both digests",
    };
    format!("{} {mode}", p.direction.name())
}

const DEFS: [Def; 10] = [
    Def {
        id: "fig3",
        experiment: "mrdsl-read",
        title: "Fig. 3: read throughput vs MaxRecvDataSegmentLength",
        x_label: "initiator MaxRecvDataSegmentLength (KiB)",
        log2_x: true,
        x: |s| kib(s.point.initiator_mrdsl),
        series: one,
        keep: all,
    },
    Def {
        id: "fig4",
        experiment: "mrdsl-read",
        title: "Fig. 4: read throughput vs Data-In PDUs per command",
        x_label: "Data-In PDUs per command (measured)",
        log2_x: true,
        x: |s| s.per_command.data_in,
        series: one,
        keep: all,
    },
    Def {
        id: "fig6",
        experiment: "sectors",
        title: "Fig. 6: throughput vs sectors per command",
        x_label: "512-byte sectors per command",
        log2_x: true,
        x: |s| f64::from(s.point.sectors()),
        series: |s| s.point.direction.name().to_owned(),
        keep: all,
    },
    Def {
        id: "fig7",
        experiment: "burst-write",
        title: "Fig. 7: write throughput vs burst length (FirstBurst = MaxBurst)",
        x_label: "MaxBurstLength = FirstBurstLength (KiB)",
        log2_x: true,
        x: |s| kib(s.point.max_burst),
        series: by_mrdsl,
        keep: all,
    },
    Def {
        id: "fig8",
        experiment: "burst-write",
        title: "Fig. 8: write throughput vs R2Ts per command",
        x_label: "R2T PDUs per command (measured)",
        log2_x: true,
        x: |s| s.per_command.r2t,
        series: by_mrdsl,
        keep: |s| s.per_command.r2t > 0.0,
    },
    Def {
        id: "fig10",
        experiment: "outstanding-r2t",
        title: "Fig. 10: write throughput vs MaxOutstandingR2T (bursts = MRDSL)",
        x_label: "MaxOutstandingR2T",
        log2_x: true,
        x: |s| f64::from(s.point.max_outstanding_r2t),
        series: by_mrdsl,
        keep: all,
    },
    Def {
        id: "fig11",
        experiment: "outstanding-commands",
        title: "Fig. 11: write throughput vs outstanding commands (bursts = MRDSL)",
        x_label: "SCSI commands outstanding",
        log2_x: true,
        x: |s| f64::from(s.point.outstanding),
        series: by_mrdsl,
        keep: |s| s.point.direction == Direction::Write,
    },
    Def {
        id: "digests",
        experiment: "digests",
        title: "Digests: throughput vs MRDSL, CRC32C on headers and data",
        x_label: "MaxRecvDataSegmentLength (KiB)",
        log2_x: true,
        x: |s| kib(s.point.target_mrdsl),
        series: digest_mode,
        keep: all,
    },
    Def {
        id: "phase-collapse",
        experiment: "phase-collapse",
        title: "Phase collapse: read throughput vs command size",
        x_label: "command size (KiB)",
        log2_x: true,
        x: |s| kib(s.point.command_bytes),
        series: |s| {
            if s.point.phase_collapse {
                "status in last Data-In".into()
            } else {
                "separate SCSI Response".into()
            }
        },
        keep: all,
    },
    Def {
        id: "lus-connections",
        experiment: "lus-connections",
        title: "LUs and connections: throughput, 8 commands outstanding",
        x_label: "logical units",
        log2_x: false,
        x: |s| f64::from(s.point.luns),
        series: |s| {
            format!(
                "{} {} conn {}",
                s.point.direction.name(),
                s.point.connections,
                s.point.policy.name()
            )
        },
        keep: all,
    },
];

/// A figure that was drawn: its id, title and file name.
#[derive(Clone, Debug)]
pub struct Drawn {
    /// Figure id (`fig3`).
    pub id: String,
    /// Its title.
    pub title: String,
    /// PNG file name in the output directory.
    pub file: String,
    /// The experiment it shows.
    pub experiment: String,
}

/// Draws every figure whose experiment has points, into `dir`.
pub fn draw_all(
    summaries: &[Summary],
    eq1: Option<&Model>,
    eq2: Option<&Model>,
    dir: &Path,
) -> Result<Vec<Drawn>, String> {
    let mut out = Vec::new();
    let several = {
        let mut imps: Vec<&str> = summaries
            .iter()
            .map(|s| s.implementation.as_str())
            .collect();
        imps.sort_unstable();
        imps.dedup();
        imps.len() > 1
    };
    for d in &DEFS {
        let pts: Vec<&Summary> = summaries
            .iter()
            .filter(|s| s.experiment == d.experiment && (d.keep)(s))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let mut series: Vec<Series> = Vec::new();
        for s in pts {
            let mut name = (d.series)(s);
            if several {
                name = format!("{} {name}", s.implementation).trim().to_owned();
            }
            let x = (d.x)(s);
            let i = match series.iter().position(|l| l.name == name) {
                Some(i) => i,
                None => {
                    series.push(Series {
                        name,
                        ..Series::default()
                    });
                    series.len() - 1
                }
            };
            series[i].points.push((x, s.mean));
            series[i].spread.push((x, s.min, s.max));
        }
        for s in &mut series {
            s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let chart = Chart {
            title: d.title.into(),
            x_label: d.x_label.into(),
            y_label: "throughput (MiB/s)".into(),
            log2_x: d.log2_x,
            log10_y: false,
            series,
        };
        let file = format!("{}.png", d.id);
        draw(&chart, &dir.join(&file))?;
        out.push(Drawn {
            id: d.id.into(),
            title: d.title.into(),
            file,
            experiment: d.experiment.into(),
        });
    }
    if let Some(m) = eq1 {
        out.extend(model_figures(
            m,
            "fig5",
            "Fig. 5: observed and calculated (equation 1) time per MiB",
            "Data-In PDUs per command",
            0,
            |_| true,
            "mrdsl-read",
            dir,
        )?);
    }
    if let Some(m) = eq2 {
        out.extend(model_figures(
            m,
            "fig9",
            "Fig. 9: observed and calculated (equation 2) time per MiB, MRDSL 1 KiB, \
             ImmediateData=Yes, InitialR2T=No",
            "R2T PDUs per command",
            0,
            |p| p.target_mrdsl == 1024 && p.immediate_data && !p.initial_r2t,
            "write-model",
            dir,
        )?);
    }
    Ok(out)
}

/// Observed vs calculated against one regressor, and the residuals of the whole fit.
#[allow(clippy::too_many_arguments)]
fn model_figures(
    m: &Model,
    id: &str,
    title: &str,
    x_label: &str,
    column: usize,
    keep: fn(&super::point::Point) -> bool,
    experiment: &str,
    dir: &Path,
) -> Result<Vec<Drawn>, String> {
    let mut obs = Series {
        name: "observed".into(),
        markers_only: true,
        ..Series::default()
    };
    let mut calc = Series {
        name: "calculated".into(),
        ..Series::default()
    };
    for (i, p) in m.points.iter().enumerate() {
        if keep(p) {
            obs.points.push((m.x[i][column], m.observed[i]));
            calc.points.push((m.x[i][column], m.fit.fitted[i]));
        }
    }
    calc.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    calc.points.dedup_by(|a, b| a.0 == b.0);
    let mut out = Vec::new();
    if !obs.points.is_empty() {
        let file = format!("{id}.png");
        draw(
            &Chart {
                title: title.into(),
                x_label: x_label.into(),
                y_label: "time per MiB (ms)".into(),
                // Linear, as the paper drew it: a straight line is what the model claims.
                log2_x: false,
                log10_y: false,
                series: vec![obs, calc],
            },
            &dir.join(&file),
        )?;
        out.push(Drawn {
            id: id.into(),
            title: title.into(),
            file,
            experiment: experiment.into(),
        });
    }
    let resid = Series {
        name: "residual".into(),
        markers_only: true,
        points: m
            .fit
            .fitted
            .iter()
            .zip(m.fit.residuals(&m.observed))
            .map(|(&f, r)| (f, r))
            .collect(),
        ..Series::default()
    };
    let file = format!("{id}-residuals.png");
    let rtitle = format!("{id}: residuals of the fit (observed - calculated)");
    draw(
        &Chart {
            title: rtitle.clone(),
            x_label: "calculated time per MiB (ms)".into(),
            y_label: "residual (ms per MiB)".into(),
            log2_x: false,
            log10_y: false,
            series: vec![resid],
        },
        &dir.join(&file),
    )?;
    out.push(Drawn {
        id: format!("{id}-residuals"),
        title: rtitle,
        file,
        experiment: experiment.into(),
    });
    Ok(out)
}
