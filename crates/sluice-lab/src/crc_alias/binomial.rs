//! The number of bit errors in a packet on a channel with independent bit errors: binomial,
//! computed term by term without cancellation (the aliasing models condition on it).

use super::markov::p_error;

/// `P(W = w | W >= 1)` for `w` in `1..=w_max`, and `P(W > w_max | W >= 1)`, for a packet of
/// `len` bits at bit error rate `p`.
#[must_use]
pub fn conditional_weights(len: u64, p: f64, w_max: u64) -> (Vec<f64>, f64) {
    let n = len as f64;
    let any = p_error(p, n);
    // P(W = 0) = (1-p)^len; each next term by the ratio (len-w+1)/w · p/(1-p).
    let mut term = (n * (-p).ln_1p()).exp();
    let ratio = p / (1.0 - p);
    let mut head = Vec::new();
    for w in 1..=w_max.min(len) {
        term *= (len - w + 1) as f64 / w as f64 * ratio;
        head.push(term / any);
    }
    // The tail summed upward, past the mode, until the terms no longer matter.
    let mut tail = 0.0;
    let mut w = w_max;
    while w < len {
        w += 1;
        term *= (len - w + 1) as f64 / w as f64 * ratio;
        tail += term;
        if w as f64 > n * p + 10.0 && term < 1e-18 * tail.max(f64::MIN_POSITIVE) {
            break;
        }
        if term == 0.0 && w as f64 > n * p {
            break;
        }
    }
    (head, tail / any)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_match_a_direct_binomial() {
        let (head, tail) = conditional_weights(100, 0.03, 5);
        let s: f64 = head.iter().sum::<f64>() + tail;
        assert!((s - 1.0).abs() < 1e-12, "{s}");
        let any = 1.0 - 0.97f64.powi(100);
        let direct2 = 4950.0 * 0.03f64.powi(2) * 0.97f64.powi(98) / any;
        assert!((head[1] - direct2).abs() < 1e-12);
    }

    #[test]
    fn tiny_error_rates_are_almost_all_single_errors() {
        let (head, tail) = conditional_weights(12_000, 1e-9, 3);
        assert!((head[0] - 1.0).abs() < 1e-5);
        // P(W=2 | W>=1) ~ (len-1) p / 2.
        assert!((head[1] / (11_999.0 * 1e-9 / 2.0) - 1.0).abs() < 1e-4);
        assert!(tail > 0.0 && tail < 1e-10);
    }
}
