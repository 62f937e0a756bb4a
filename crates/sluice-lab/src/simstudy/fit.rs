//! The study's equation 5.1, T(S) = k S^α, fitted as its equation 5.2, log T = log k +
//! α log S, by least squares on the logarithms, with 95 % confidence intervals.

use crate::sweep::fit::least_squares;

/// A fitted power law.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerFit {
    /// k, in seconds at S = 1 (S in the unit of the data).
    pub k: f64,
    /// The 95 % interval of k (from that of log k).
    pub k_low: f64,
    /// See [`PowerFit::k_low`].
    pub k_high: f64,
    /// α.
    pub alpha: f64,
    /// Half-width of α's 95 % interval.
    pub alpha_ci: f64,
    /// R² of the log-log fit.
    pub r_squared: f64,
    /// Points fitted.
    pub n: usize,
}

/// Fits T = k S^α to `(S, T)` pairs (both positive); `None` with fewer than three usable
/// points.
#[must_use]
pub fn power_law(points: &[(f64, f64)]) -> Option<PowerFit> {
    let usable: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(s, t)| s > 0.0 && t > 0.0 && s.is_finite() && t.is_finite())
        .collect();
    if usable.len() < 3 {
        return None;
    }
    let x: Vec<Vec<f64>> = usable.iter().map(|&(s, _)| vec![1.0, s.ln()]).collect();
    let y: Vec<f64> = usable.iter().map(|&(_, t)| t.ln()).collect();
    let fit = least_squares(&["log k", "alpha"], &x, &y)?;
    let (lk, a) = (&fit.coefficients[0], &fit.coefficients[1]);
    if lk.aliased || a.aliased {
        return None;
    }
    Some(PowerFit {
        k: lk.value.exp(),
        k_low: (lk.value - lk.ci95).exp(),
        k_high: (lk.value + lk.ci95).exp(),
        alpha: a.value,
        alpha_ci: a.ci95,
        r_squared: fit.r_squared,
        n: fit.n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_k_and_alpha_from_a_power_law() {
        let pts: Vec<(f64, f64)> = (1..=20)
            .map(|i| {
                let s = f64::from(i) * 100.0;
                // A small deterministic wobble, so that the intervals are not zero.
                let wobble = 1.0 + 0.01 * if i % 2 == 0 { 1.0 } else { -1.0 };
                (s, 0.003 * s.powf(0.7) * wobble)
            })
            .collect();
        let f = power_law(&pts).unwrap();
        assert!((f.alpha - 0.7).abs() < 0.01, "{f:?}");
        assert!((f.k / 0.003 - 1.0).abs() < 0.05, "{f:?}");
        assert!(f.alpha_ci > 0.0 && f.alpha_ci < 0.02);
        assert!(f.k_low < f.k && f.k < f.k_high);
        assert!((f.alpha - 0.7).abs() < f.alpha_ci);
        assert!(f.r_squared > 0.99);
    }

    #[test]
    fn needs_three_positive_points() {
        assert!(power_law(&[(1.0, 1.0), (2.0, 2.0), (0.0, 3.0)]).is_none());
    }
}
