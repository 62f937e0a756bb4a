//! Runs grouped into points: mean, spread and per-command counts of each.

use super::point::Point;
use super::predict::PerCommand;
use super::record::RunRecord;

/// One point's runs.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Its experiment.
    pub experiment: String,
    /// Which target.
    pub implementation: String,
    /// The point.
    pub point: Point,
    /// Usable runs.
    pub runs: usize,
    /// Mean MiB/s.
    pub mean: f64,
    /// Sample standard deviation of MiB/s (0 for one run).
    pub sd: f64,
    /// Slowest run, MiB/s.
    pub min: f64,
    /// Fastest run, MiB/s.
    pub max: f64,
    /// Mean milliseconds per MiB.
    pub ms_per_mib: f64,
    /// Mean per-command counts.
    pub per_command: PerCommand,
    /// Target CPU seconds per GiB moved, when known.
    pub target_cpu_per_gib: Option<f64>,
    /// Initiator CPU seconds per GiB moved.
    pub initiator_cpu_per_gib: f64,
}

/// Groups the usable runs of `records` by (experiment, implementation, point), in the
/// order they first appear.
pub fn summarize(records: &[RunRecord]) -> Vec<Summary> {
    let mut groups: Vec<(String, Vec<&RunRecord>)> = Vec::new();
    for r in records.iter().filter(|r| r.usable()) {
        let key = format!("{}|{}|{}", r.experiment, r.implementation, r.point.key());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(_, runs)| summarize_point(&runs))
        .collect()
}

fn summarize_point(runs: &[&RunRecord]) -> Summary {
    let n = runs.len() as f64;
    let rates: Vec<f64> = runs.iter().map(|r| r.measured.mib_per_s()).collect();
    let mean = rates.iter().sum::<f64>() / n;
    let sd = if runs.len() > 1 {
        (rates.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    let avg = |f: &dyn Fn(&RunRecord) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n;
    let gib: f64 = runs
        .iter()
        .map(|r| r.measured.bytes as f64 / f64::from(1u32 << 30))
        .sum();
    let target_cpu: Option<f64> = runs
        .iter()
        .map(|r| r.measured.target_cpu_seconds)
        .sum::<Option<f64>>();
    let first = runs[0];
    Summary {
        experiment: first.experiment.clone(),
        implementation: first.implementation.clone(),
        point: first.point.clone(),
        runs: runs.len(),
        mean,
        sd,
        min: rates.iter().copied().fold(f64::INFINITY, f64::min),
        max: rates.iter().copied().fold(0.0, f64::max),
        ms_per_mib: avg(&|r| r.measured.ms_per_mib()),
        per_command: PerCommand {
            data_in: avg(&|r| r.measured.per_command.data_in),
            data_out: avg(&|r| r.measured.per_command.data_out),
            r2t: avg(&|r| r.measured.per_command.r2t),
            responses: avg(&|r| r.measured.per_command.responses),
            immediate_bytes: avg(&|r| r.measured.per_command.immediate_bytes),
            unsolicited_bytes: avg(&|r| r.measured.per_command.unsolicited_bytes),
            solicited_bytes: avg(&|r| r.measured.per_command.solicited_bytes),
        },
        target_cpu_per_gib: target_cpu.filter(|_| gib > 0.0).map(|c| c / gib),
        initiator_cpu_per_gib: if gib > 0.0 {
            runs.iter()
                .map(|r| r.measured.initiator_cpu_seconds)
                .sum::<f64>()
                / gib
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mib_per_s: f64, point: Point) -> RunRecord {
        let mut r = RunRecord::example();
        r.point = point;
        r.measured.bytes = 64 << 20;
        r.measured.commands = 128;
        r.measured.seconds = 64.0 / mib_per_s;
        r
    }

    #[test]
    fn mean_and_spread_per_point_without_flagged_runs() {
        let a = Point::default();
        let b = Point::default().mrdsl(512);
        let mut flagged = run(1000.0, a.clone());
        flagged.mismatch.push("MaxBurstLength=1 (wanted 2)".into());
        let s = summarize(&[
            run(100.0, a.clone()),
            run(300.0, a.clone()),
            run(50.0, b),
            flagged,
        ]);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].runs, 2);
        assert!((s[0].mean - 200.0).abs() < 1e-9);
        assert!((s[0].sd - 141.421_356).abs() < 1e-3);
        assert_eq!((s[0].min, s[0].max), (100.0, 300.0));
        assert!((s[1].mean - 50.0).abs() < 1e-9);
    }
}
