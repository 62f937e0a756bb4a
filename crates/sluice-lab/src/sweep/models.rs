//! The paper's models fitted to this system: equation (1) for reads, equation (2) for writes,
//! equation (3) for MaxOutstandingR2T, and the effects behind its Table 2.

use super::fit::{least_squares, Fit};
use super::point::{Direction, Point};
use super::record::RunRecord;
use super::summary::Summary;

/// The paper's equation (1) coefficients (ms per MB; x = Data-In PDUs per command).
pub const PAPER_EQ1: [(&str, f64); 2] = [("A", 0.014_169_577), ("B", 15.245_988_02)];

/// The paper's equation (2) coefficients.
pub const PAPER_EQ2: [(&str, f64); 6] = [
    ("A (R2Ts)", 1.82),
    ("B (Data-Outs)", 0.011),
    ("C (immediate MiB)", 115.29),
    ("D (unsolicited MiB)", 120.79),
    ("E (solicited MiB)", 87.72),
    ("F", 0.0),
];

/// A fit with the observations it was made from.
#[derive(Clone, Debug)]
pub struct Model {
    /// The fit.
    pub fit: Fit,
    /// Observed ms per MiB, one per run.
    pub observed: Vec<f64>,
    /// The runs' points, in the same order.
    pub points: Vec<Point>,
    /// The regressors of each run.
    pub x: Vec<Vec<f64>>,
}

fn usable<'a>(
    records: &'a [RunRecord],
    experiment: &'a str,
) -> impl Iterator<Item = &'a RunRecord> + 'a {
    records
        .iter()
        .filter(move |r| r.experiment == experiment && r.usable())
}

/// Equation (1): t = A x + B, t in ms per MiB, x the measured Data-In PDUs per command, over
/// the runs of `mrdsl-read`.
pub fn equation1(records: &[RunRecord], implementation: &str) -> Option<Model> {
    let runs: Vec<&RunRecord> = usable(records, "mrdsl-read")
        .filter(|r| r.implementation == implementation)
        .collect();
    let x: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| vec![r.measured.per_command.data_in, 1.0])
        .collect();
    let y: Vec<f64> = runs.iter().map(|r| r.measured.ms_per_mib()).collect();
    let fit = least_squares(&["A", "B"], &x, &y)?;
    Some(Model {
        fit,
        observed: y,
        points: runs.iter().map(|r| r.point.clone()).collect(),
        x,
    })
}

/// Equation (2): t = A x1 + B x2 + C x3 + D x4 + E x5 + F over the runs of `write-model`
/// (x1 R2Ts, x2 Data-Outs per command, x3-x5 immediate, unsolicited and solicited MiB per
/// command). F is fitted too; the paper's came out 0.
pub fn equation2(records: &[RunRecord], implementation: &str) -> Option<Model> {
    let runs: Vec<&RunRecord> = usable(records, "write-model")
        .filter(|r| r.implementation == implementation)
        .collect();
    let mib = f64::from(1u32 << 20);
    let x: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| {
            let c = &r.measured.per_command;
            vec![
                c.r2t,
                c.data_out,
                c.immediate_bytes / mib,
                c.unsolicited_bytes / mib,
                c.solicited_bytes / mib,
                1.0,
            ]
        })
        .collect();
    let y: Vec<f64> = runs.iter().map(|r| r.measured.ms_per_mib()).collect();
    let names: Vec<&str> = PAPER_EQ2.iter().map(|(n, _)| *n).collect();
    let fit = least_squares(&names, &x, &y)?;
    Some(Model {
        fit,
        observed: y,
        points: runs.iter().map(|r| r.point.clone()).collect(),
        x,
    })
}

/// How close to its row's best a point must be to count as "peak" in equation (3).
pub const PEAK_WITHIN: f64 = 0.05;

/// One row of equation (3): the MaxOutstandingR2T that reaches the row's peak at an MRDSL.
#[derive(Clone, Debug, PartialEq)]
pub struct PeakRow {
    /// MaxRecvDataSegmentLength in KiB (m).
    pub mrdsl_kib: f64,
    /// The fewest outstanding R2Ts within [`PEAK_WITHIN`] of the row's best (n).
    pub n: u32,
    /// n x m.
    pub product: f64,
    /// The row's best mean, MiB/s.
    pub best: f64,
}

/// Equation (3), n x m = constant, from the `outstanding-r2t` summaries: one row per MRDSL,
/// and the median product.
pub fn equation3(summaries: &[Summary], implementation: &str) -> (Vec<PeakRow>, Option<f64>) {
    let mut mrdsls: Vec<u32> = summaries
        .iter()
        .filter(|s| s.experiment == "outstanding-r2t" && s.implementation == implementation)
        .map(|s| s.point.target_mrdsl)
        .collect();
    mrdsls.sort_unstable();
    mrdsls.dedup();
    let mut rows = Vec::new();
    for m in mrdsls {
        let mut row: Vec<&Summary> = summaries
            .iter()
            .filter(|s| {
                s.experiment == "outstanding-r2t"
                    && s.implementation == implementation
                    && s.point.target_mrdsl == m
            })
            .collect();
        row.sort_by_key(|s| s.point.max_outstanding_r2t);
        let best = row.iter().map(|s| s.mean).fold(0.0, f64::max);
        if let Some(peak) = row.iter().find(|s| s.mean >= (1.0 - PEAK_WITHIN) * best) {
            let n = u32::from(peak.point.max_outstanding_r2t);
            let kib = f64::from(m) / 1024.0;
            rows.push(PeakRow {
                mrdsl_kib: kib,
                n,
                product: f64::from(n) * kib,
                best,
            });
        }
    }
    let mut products: Vec<f64> = rows.iter().map(|r| r.product).collect();
    products.sort_by(f64::total_cmp);
    let median = (!products.is_empty()).then(|| {
        let k = products.len();
        if k % 2 == 1 {
            products[k / 2]
        } else {
            (products[k / 2 - 1] + products[k / 2]) / 2.0
        }
    });
    (rows, median)
}

/// How much one parameter moved throughput within an experiment.
#[derive(Clone, Debug, PartialEq)]
pub struct Effect {
    /// Largest (max - min) / max of the mean over the parameter's values, among groups of
    /// points that agree on everything else.
    pub spread: f64,
    /// Slowest and fastest mean of that group, MiB/s.
    pub range: (f64, f64),
    /// Whether that difference stands out of the noise: more than twice the largest
    /// standard deviation of the runs at the group's points.
    pub significant: bool,
    /// The parameter value of the best point in the fastest group, as text; with
    /// `at_least`, the smallest value within 5 % of that group's best.
    pub best: String,
}

/// A spread at or above this, out of the noise, makes a parameter "Important".
pub const IMPORTANT: f64 = 0.10;

/// The effect of the parameter `value` (a number to order by and its text) in `experiment`
/// for `direction`, grouping points by everything `value` does not name (`group`). A
/// `categorical` parameter's best is the fastest value, or `any` when all are within 5 %.
/// `None` when no group has two values.
pub fn effect(
    summaries: &[Summary],
    implementation: &str,
    experiment: &str,
    direction: Direction,
    value: &dyn Fn(&Point) -> (f64, String),
    group: &dyn Fn(&Point) -> String,
    categorical: bool,
) -> Option<Effect> {
    let pts: Vec<&Summary> = summaries
        .iter()
        .filter(|s| {
            s.experiment == experiment
                && s.implementation == implementation
                && s.point.direction == direction
        })
        .collect();
    let mut groups: Vec<(String, Vec<&Summary>)> = Vec::new();
    for s in pts {
        let g = group(&s.point);
        match groups.iter_mut().find(|(k, _)| *k == g) {
            Some((_, v)) => v.push(s),
            None => groups.push((g, vec![s])),
        }
    }
    let mut spread: Option<(f64, (f64, f64), bool)> = None;
    let mut fastest: Option<(f64, String)> = None;
    for (_, mut g) in groups.into_iter().filter(|(_, g)| g.len() >= 2) {
        g.sort_by(|a, b| value(&a.point).0.total_cmp(&value(&b.point).0));
        let max = g.iter().map(|s| s.mean).fold(0.0, f64::max);
        let min = g.iter().map(|s| s.mean).fold(f64::INFINITY, f64::min);
        let sp = if max > 0.0 { (max - min) / max } else { 0.0 };
        let noise = g.iter().map(|s| s.sd).fold(0.0, f64::max);
        if spread.is_none_or(|(s, _, _)| sp > s) {
            spread = Some((sp, (min, max), max - min > 2.0 * noise));
        }
        if fastest.as_ref().is_none_or(|(m, _)| max > *m) {
            let near: Vec<&&Summary> = g.iter().filter(|s| s.mean >= 0.95 * max).collect();
            let best = if !categorical {
                // An ordered value: the smallest that comes within 5 % ("at least this").
                near.first().map(|s| value(&s.point).1).unwrap_or_default()
            } else if near.len() == g.len() {
                "any".to_owned()
            } else {
                let top = g.iter().max_by(|a, b| a.mean.total_cmp(&b.mean));
                top.map(|s| value(&s.point).1).unwrap_or_default()
            };
            fastest = Some((max, best));
        }
    }
    let (spread, range, significant) = spread?;
    Some(Effect {
        spread,
        range,
        significant,
        best: fastest.map(|(_, b)| b).unwrap_or_default(),
    })
}

/// A byte count as the paper writes it (512, 8KB, 128KB).
pub fn bytes_label(n: u32) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}KB", n / 1024)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::RunRecord;

    fn summary(experiment: &str, point: Point, mean: f64) -> Summary {
        Summary {
            experiment: experiment.into(),
            implementation: "sluice".into(),
            point,
            runs: 1,
            mean,
            sd: 0.0,
            min: mean,
            max: mean,
            ms_per_mib: 1000.0 / mean,
            per_command: Default::default(),
            target_cpu_per_gib: None,
            initiator_cpu_per_gib: 0.0,
        }
    }

    #[test]
    fn equation1_recovers_a_synthetic_line() {
        let mut records = Vec::new();
        for (i, pdus) in [4.0, 16.0, 64.0, 256.0].iter().enumerate() {
            let mut r = RunRecord::example();
            r.experiment = "mrdsl-read".into();
            r.point = Point::default().mrdsl(512 << i);
            r.measured.per_command.data_in = *pdus;
            r.measured.bytes = 1 << 20;
            // t = 0.02 x + 3 ms per MiB.
            r.measured.seconds = (0.02 * pdus + 3.0) / 1000.0;
            records.push(r);
        }
        let m = equation1(&records, "sluice").unwrap();
        assert!((m.fit.coefficients[0].value - 0.02).abs() < 1e-9);
        assert!((m.fit.coefficients[1].value - 3.0).abs() < 1e-9);
    }

    #[test]
    fn equation3_takes_the_first_point_near_the_rows_best() {
        let p = |m: u32, r: u16| Point {
            max_outstanding_r2t: r,
            ..Point::default().mrdsl(m).bursts(m)
        };
        let s = vec![
            summary("outstanding-r2t", p(1024, 1), 10.0),
            summary("outstanding-r2t", p(1024, 8), 50.0),
            summary("outstanding-r2t", p(1024, 64), 52.0),
            summary("outstanding-r2t", p(8192, 1), 40.0),
            summary("outstanding-r2t", p(8192, 8), 60.0),
        ];
        let (rows, median) = equation3(&s, "sluice");
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].n, rows[0].product), (8, 8.0));
        assert_eq!((rows[1].n, rows[1].product), (8, 64.0));
        assert_eq!(median, Some(36.0));
    }

    #[test]
    fn effect_groups_by_the_other_parameters() {
        let s = vec![
            summary("e", Point::default().mrdsl(512), 50.0),
            summary("e", Point::default().mrdsl(8192), 100.0),
            summary("e", Point::default().mrdsl(65536), 98.0),
        ];
        let e = effect(
            &s,
            "sluice",
            "e",
            Direction::Read,
            &|p| (f64::from(p.initiator_mrdsl), bytes_label(p.initiator_mrdsl)),
            &|_| String::new(),
            false,
        )
        .unwrap();
        assert!((e.spread - 0.5).abs() < 1e-9);
        assert_eq!(e.best, "8KB");
    }
}
