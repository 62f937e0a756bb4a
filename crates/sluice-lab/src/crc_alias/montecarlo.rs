//! Plain Monte Carlo of CRC aliasing, the check on both models for short packets: packets of
//! independent bit errors (a binary symmetric channel), or error patterns of exactly `w`
//! bits; the register's final state is the XOR of the residues `x^i mod g` of the error
//! positions.

use rand::rngs::SmallRng;
use rand::Rng;

use super::poly::Generator;
use super::tcp::distinct_positions;

/// Packets of `len` bits at bit error rate `p`: (packets with an error, of which aliased).
pub fn bsc(g: &Generator, p: f64, len: usize, packets: u64, rng: &mut SmallRng) -> (u64, u64) {
    let r = g.residues(len);
    let log_q = (-p).ln_1p();
    let (mut errored, mut aliased) = (0, 0);
    for _ in 0..packets {
        // Gaps between errors are geometric: skip ahead instead of drawing every bit.
        let mut state = 0u64;
        let mut any = false;
        let mut i = 0usize;
        loop {
            let u: f64 = rng.gen();
            let gap = ((1.0 - u).ln() / log_q).floor();
            if gap.is_nan() || gap >= (len - i) as f64 {
                break;
            }
            i += gap as usize;
            state ^= r[i];
            any = true;
            i += 1;
            if i >= len {
                break;
            }
        }
        if any {
            errored += 1;
            aliased += u64::from(state == 0);
        }
    }
    (errored, aliased)
}

/// Error patterns of exactly `w` bits in `len`: how many of `trials` the generator divides.
pub fn weight(g: &Generator, len: usize, w: usize, trials: u64, rng: &mut SmallRng) -> u64 {
    let r = g.residues(len);
    let mut pos = Vec::new();
    let mut hits = 0;
    for _ in 0..trials {
        distinct_positions(rng, len, w, &mut pos);
        hits += u64::from(pos.iter().fold(0, |s, &i| s ^ r[i]) == 0);
    }
    hits
}

/// The Wilson score interval at 95 % for `k` successes in `n` trials.
#[must_use]
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.96f64;
    let (k, n) = (k as f64, n as f64);
    let phat = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (phat + z * z / (2.0 * n)) / denom;
    let half = z * (phat * (1.0 - phat) / n + z * z / (4.0 * n * n)).sqrt() / denom;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::super::markov::alias_curve;
    use super::super::poly::CRC8;
    use super::*;

    #[test]
    fn bsc_simulation_agrees_with_the_chain_for_crc8() {
        let mut rng = SmallRng::seed_from_u64(3);
        for (p, len) in [(0.01, 64usize), (0.01, 512), (0.002, 256)] {
            let (e, a) = bsc(&CRC8, p, len, 200_000, &mut rng);
            let want = alias_curve(&CRC8, p, &[len])[0];
            let (lo, hi) = wilson(a, e);
            // A 99.9 % band: widen the 95 % interval.
            let slack = (hi - lo) * 0.7;
            assert!(
                lo - slack <= want && want <= hi + slack,
                "p {p} len {len}: {a}/{e} vs {want}"
            );
        }
    }

    #[test]
    fn wilson_covers_the_obvious() {
        let (lo, hi) = wilson(50, 100);
        assert!(lo < 0.5 && hi > 0.5 && lo > 0.39 && hi < 0.61);
        assert_eq!(wilson(0, 10).0, 0.0);
    }
}
