//! The TCP checksum's aliasing (the simulation study's section 6.4) by rare-event simulation.
//!
//! The checksum is the 16-bit ones'-complement sum of the segment's 16-bit words (RFC 793
//! section 3.1, computed as RFC 1071 describes); a receiver accepts a segment whose words,
//! checksum field included, sum to `0xFFFF`. Flipping bit `c` of a word changes the sum by
//! `+2^c` (a 0 became 1) or `-2^c`, modulo `2^16 - 1`, so a corrupted segment passes exactly
//! when the signed changes of its flipped bits sum to 0 modulo 65535. For data whose bits are
//! independent and uniform (the study's "uniformly distributed data") each sign is a fair coin,
//! whatever the words hold.
//!
//! **Variance reduction: conditioning on the number of errors** (stratified sampling). The
//! aliasing probability given an error is `sum_w P(W = w | W >= 1) g_w`, with the binomial
//! weights computed exactly and `g_w`, the share of `w`-bit corruptions that pass, estimated
//! by simulating only corruptions of exactly `w` bits. A plain simulation spends almost every
//! trial on error-free or single-error segments (which never pass); here every trial of
//! stratum `w >= 2` can pass. `g_1 = 0` exactly (one flip changes the sum by a power of two).
//! The 95 % interval combines the strata's binomial variances; the strata left out at the
//! heavy end (probability below a stated cutoff) widen its upper end by their whole weight.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::binomial::conditional_weights;
use super::weights::choose;

/// The ones'-complement sum of big-endian 16-bit words, folded (RFC 1071 section 4.1); an odd
/// last byte is padded with zero.
#[must_use]
pub fn ones_complement_sum(bytes: &[u8]) -> u16 {
    let mut sum: u64 = bytes
        .chunks(2)
        .map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// The checksum word that makes `bytes` followed by it sum to `0xFFFF`.
#[must_use]
pub fn checksum(bytes: &[u8]) -> [u8; 2] {
    (!ones_complement_sum(bytes)).to_be_bytes()
}

/// Whether a segment (words and checksum) passes the receiver's check.
#[must_use]
pub fn passes(segment: &[u8]) -> bool {
    ones_complement_sum(segment) == 0xFFFF
}

/// Whether flips of the given bit columns (0..16) with the given directions (`true`: a 0
/// became 1) leave the ones'-complement sum unchanged.
#[must_use]
pub fn flips_cancel(flips: &[(u32, bool)]) -> bool {
    let total: i64 = flips
        .iter()
        .map(|&(c, up)| if up { 1i64 << c } else { -(1i64 << c) })
        .sum();
    total.rem_euclid(0xFFFF) == 0
}

/// `g_w` exactly for a segment of `words` uniform 16-bit words: every set of `w` bit
/// positions, every direction of each flip. Returns (passing cases, all cases).
#[must_use]
pub fn exhaustive_pass_share(words: usize, w: usize) -> (u64, u64) {
    let bits = 16 * words;
    let mut pass = 0u64;
    let mut all = 0u64;
    let mut idx: Vec<usize> = (0..w).collect();
    let mut flips = Vec::with_capacity(w);
    loop {
        for signs in 0u32..(1 << w) {
            flips.clear();
            flips.extend(
                idx.iter()
                    .enumerate()
                    .map(|(k, &i)| ((i % 16) as u32, (signs >> k) & 1 == 1)),
            );
            pass += u64::from(flips_cancel(&flips));
            all += 1;
        }
        // Next combination in lexicographic order.
        let mut k = w;
        while k > 0 && idx[k - 1] == bits - w + k - 1 {
            k -= 1;
        }
        if k == 0 {
            return (pass, all);
        }
        idx[k - 1] += 1;
        for j in k..w {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

/// `g_2` in closed form for `words` uniform words: the two flips must share a column, lie in
/// different words, and go in opposite directions.
#[must_use]
pub fn two_flip_pass_share(words: u64) -> f64 {
    16.0 * choose(words, 2) / choose(16 * words, 2) / 2.0
}

/// Draws `w` distinct bit positions of `bits` (Floyd's algorithm).
pub fn distinct_positions(rng: &mut SmallRng, bits: usize, w: usize, out: &mut Vec<usize>) {
    out.clear();
    for j in (bits - w)..bits {
        let t = rng.gen_range(0..=j);
        if out.contains(&t) {
            out.push(j);
        } else {
            out.push(t);
        }
    }
}

/// Simulates `trials` corruptions of exactly `w` of `bits` bits of uniform data: how many
/// pass the checksum.
pub fn simulate_stratum(
    rng: &mut SmallRng,
    bits: usize,
    w: usize,
    trials: u64,
    pos: &mut Vec<usize>,
) -> u64 {
    let mut passed = 0u64;
    let mut flips = Vec::with_capacity(w);
    for _ in 0..trials {
        distinct_positions(rng, bits, w, pos);
        flips.clear();
        flips.extend(pos.iter().map(|&i| ((i % 16) as u32, rng.gen::<bool>())));
        passed += u64::from(flips_cancel(&flips));
    }
    passed
}

/// One stratum: corruptions of exactly `w` bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stratum {
    /// Bits flipped.
    pub w: u64,
    /// `P(W = w | W >= 1)`.
    pub weight: f64,
    /// Corruptions simulated.
    pub trials: u64,
    /// Of which passed the checksum.
    pub passed: u64,
}

/// The estimate of P(checksum aliasing | error) for one segment size.
#[derive(Clone, Debug, PartialEq)]
pub struct TcpAlias {
    /// Segment size in bytes (checksum word included).
    pub bytes: u64,
    /// Bit error rate.
    pub ber: f64,
    /// The estimate.
    pub estimate: f64,
    /// 95 % interval, low end.
    pub low: f64,
    /// 95 % interval, high end (includes the strata left out).
    pub high: f64,
    /// The strata simulated.
    pub strata: Vec<Stratum>,
    /// `P(W > last stratum | W >= 1)`: not simulated, counted at `2^-16` in the estimate and
    /// in full in the upper end.
    pub left_out: f64,
    /// How many plain-simulation segments would give the same variance.
    pub plain_equivalent: f64,
}

/// Estimates the TCP checksum's aliasing for a segment of `bytes` (even) at bit error rate
/// `ber`, with `trials` corruptions per stratum, strata from 2 bits up to where the remaining
/// probability falls below `cutoff` times that of the 2-bit stratum.
#[must_use]
pub fn estimate(bytes: u64, ber: f64, trials: u64, cutoff: f64, seed: u64) -> TcpAlias {
    let words = (bytes / 2) as usize;
    let bits = 16 * words;
    let (head, _) = conditional_weights(bits as u64, ber, 64);
    let mut rng = SmallRng::seed_from_u64(seed ^ bytes.rotate_left(17));
    let mut strata = Vec::new();
    let mut var = 0.0;
    let mut est = 0.0;
    let mut pos = Vec::new();
    let mut w = 2usize;
    let (_, mut left_out) = conditional_weights(bits as u64, ber, 1);
    while w <= head.len().min(bits) && left_out > cutoff * head[1] {
        let weight = head[w - 1];
        let passed = simulate_stratum(&mut rng, bits, w, trials, &mut pos);
        let g = passed as f64 / trials as f64;
        est += weight * g;
        var += weight * weight * g * (1.0 - g) / trials as f64;
        strata.push(Stratum {
            w: w as u64,
            weight,
            trials,
            passed,
        });
        left_out -= weight;
        w += 1;
    }
    let left_out = left_out.max(0.0);
    let asym = 1.0 / 65535.0;
    let estimate = est + left_out * asym;
    let half = 1.96 * var.sqrt();
    // A plain simulation of n segments: variance P_alias (1 - P_alias) / (n P(error)).
    let p_err = super::markov::p_error(ber, bits as f64);
    let plain_equivalent = if var > 0.0 {
        estimate * (1.0 - estimate) / (var * p_err)
    } else {
        f64::INFINITY
    };
    TcpAlias {
        bytes,
        ber,
        estimate,
        low: (est - half).max(0.0),
        high: est + half + left_out,
        strata,
        left_out,
        plain_equivalent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_makes_the_segment_pass_and_single_flips_fail() {
        let data: Vec<u8> = (0..101u32).map(|i| (i * 73 % 256) as u8).collect();
        let mut seg = data.clone();
        if seg.len() % 2 == 1 {
            seg.push(0);
        }
        seg.extend(checksum(&seg));
        assert!(passes(&seg));
        for bit in 0..seg.len() * 8 {
            let mut c = seg.clone();
            c[bit / 8] ^= 0x80 >> (bit % 8);
            assert!(!passes(&c), "bit {bit}");
        }
    }

    #[test]
    fn the_flip_rule_agrees_with_recomputing_the_checksum() {
        // Every 2- and 3-bit corruption of a 6-byte segment with a real checksum.
        let mut seg = vec![0x12, 0xF0, 0x00, 0xFF];
        seg.extend(checksum(&seg));
        let bits = seg.len() * 8;
        let flip = |s: &mut [u8], b: usize| s[b / 8] ^= 0x80 >> (b % 8);
        let col = |b: usize| 15 - (b % 16) as u32;
        let up = |s: &[u8], b: usize| (s[b / 8] >> (7 - b % 8)) & 1 == 0;
        for a in 0..bits {
            for b in a + 1..bits {
                for c in b + 1..=bits {
                    let mut s = seg.clone();
                    let mut flips = vec![(col(a), up(&seg, a)), (col(b), up(&seg, b))];
                    flip(&mut s, a);
                    flip(&mut s, b);
                    if c < bits {
                        flips.push((col(c), up(&seg, c)));
                        flip(&mut s, c);
                    }
                    assert_eq!(passes(&s), flips_cancel(&flips), "{a} {b} {c}");
                }
            }
        }
    }

    #[test]
    fn two_flip_closed_form_is_the_exhaustive_count() {
        for words in 1..=4 {
            let (pass, all) = exhaustive_pass_share(words, 2);
            let got = pass as f64 / all as f64;
            assert!(
                (got - two_flip_pass_share(words as u64)).abs() < 1e-15,
                "{words}"
            );
        }
    }

    #[test]
    fn stratified_estimates_match_exhaustive_enumeration_on_tiny_segments() {
        // A 3-word segment: g_2, g_3, g_4 exactly, against the simulated strata.
        let exact: Vec<f64> = (2..=4)
            .map(|w| {
                let (p, a) = exhaustive_pass_share(3, w);
                p as f64 / a as f64
            })
            .collect();
        let r = estimate(6, 0.05, 40_000, 1e-4, 7);
        for s in r.strata.iter().take(3) {
            let g = s.passed as f64 / s.trials as f64;
            let want = exact[(s.w - 2) as usize];
            let sd = (want * (1.0 - want) / s.trials as f64).sqrt();
            assert!(
                (g - want).abs() < 5.0 * sd + 1e-12,
                "w {}: {g} vs {want}",
                s.w
            );
        }
        // And the whole estimate against the exact sum over weights 2 to 4, the heavier ones
        // bounded by their probability (48 bits at p = 0.01).
        let r = estimate(6, 0.01, 40_000, 1e-6, 9);
        let (head, tail) = conditional_weights(48, 0.01, 4);
        let want: f64 = (2..=4).map(|w| head[w - 1] * exact[w - 2]).sum();
        assert!(
            r.low <= want + tail && want <= r.high,
            "{want} [{}, {}]",
            r.low,
            r.high
        );
        assert!(tail < 0.2 * want);
    }

    #[test]
    fn the_studys_1500_byte_point_is_reproduced() {
        // The study: about 0.0027 at 1500 bytes and a bit error rate of about 1.5e-5.
        let r = estimate(1500, 1.5e-5, 100_000, 1e-4, 1);
        assert!(r.estimate > 0.0022 && r.estimate < 0.0032, "{}", r.estimate);
        assert!(r.plain_equivalent > 10.0 * 100_000.0);
    }
}
