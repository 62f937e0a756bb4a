//! Latency histograms (nanoseconds, 3 significant digits) and their summary.

use hdrhistogram::Histogram;

/// Longest latency recorded exactly (longer ones are clamped): 10 minutes in ns.
const MAX_NS: u64 = 600_000_000_000;

/// An empty latency histogram in nanoseconds.
pub fn new_histogram() -> Histogram<u64> {
    // Fails only for low < 1, high < 2 * low or sigfig > 5: not so here.
    Histogram::new_with_bounds(1, MAX_NS, 3).expect("constant, valid histogram bounds")
}

/// Records `ns` into `h`, clamped to the histogram's range.
pub(crate) fn record(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, MAX_NS));
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Smallest.
    pub min_us: f64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarizes a nanosecond histogram (all zeros when it is empty).
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Self {
            count: h.len(),
            min_us: us(h.min()),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut h = new_histogram();
        for i in 1..=1000u64 {
            record(&mut h, i * 1000);
        }
        let s = LatencySummary::from_histogram(&h);
        assert_eq!(s.count, 1000);
        assert!((s.p50_us - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max_us - 1000.0).abs() < 1.0, "{s:?}");
        assert_eq!(LatencySummary::from_histogram(&new_histogram()).count, 0);
    }
}
