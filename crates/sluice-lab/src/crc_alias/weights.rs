//! The reduced model for wide CRCs: condition on the number of bit errors.
//!
//! For a packet of `N` bits with independent errors at rate `p`, the probability of aliasing
//! given an error is `sum_w P(W = w | W >= 1) f_w(N)`, where `f_w(N) = A_w(N) / C(N, w)` is
//! the share of weight-`w` error patterns that the generator divides (`A_w` is the code's
//! weight distribution). The binomial weights are exact ([`super::binomial`]); `A_1 .. A_4`
//! are counted exactly here from the residues `x^i mod g` (`A_1 = 0`; weight 2 from the
//! order of `x`; weight 3 by a table lookup per span, `O(N)`; weight 4 by a lookup per pair,
//! `O(N^2)`). Heavier patterns are given the asymptotic share `2^-n`, and the answer comes
//! with the bounds that `0 <= f_w <= 1` gives them. Where the chain can be run (n <= 20) it
//! checks this model; for 32-bit CRCs, where `2^32` states rule the chain out, this is the
//! method.

use super::binomial::conditional_weights;
use super::heavy::HeavyWeights;
use super::poly::Generator;

/// The heaviest weight counted exactly.
pub const EXACT_WEIGHTS: usize = 4;

/// Where each residue first occurs, and the period after which the residues repeat: an
/// open-addressing table (the residues of a good code are spread uniformly, so their low bits
/// index it directly).
struct FirstOccurrence {
    keys: Vec<u64>,
    first: Vec<u32>,
    period: usize,
}

impl FirstOccurrence {
    const EMPTY: u64 = u64::MAX;

    fn new(r: &[u64], period: usize) -> FirstOccurrence {
        let distinct = period.min(r.len());
        let size = (2 * distinct + 2).next_power_of_two();
        let mut t = FirstOccurrence {
            keys: vec![Self::EMPTY; size],
            first: vec![0; size],
            period,
        };
        for (i, v) in r.iter().take(distinct).enumerate() {
            let slot = t.slot(*v);
            t.keys[slot] = *v;
            t.first[slot] = i as u32;
        }
        t
    }

    fn slot(&self, v: u64) -> usize {
        let mask = self.keys.len() - 1;
        let mut i = (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize & mask;
        while self.keys[i] != Self::EMPTY && self.keys[i] != v {
            i = (i + 1) & mask;
        }
        i
    }

    /// How many positions `i` with `lo < i < hi` hold residue `v`.
    fn between(&self, v: u64, lo: usize, hi: usize) -> u64 {
        let slot = self.slot(v);
        if self.keys[slot] != v || hi <= lo + 1 {
            return 0;
        }
        let i0 = self.first[slot] as usize;
        // Positions i0, i0 + period, ...: count those in [lo + 1, hi - 1].
        let upto = |x: usize| {
            if x < i0 {
                0
            } else {
                (x - i0) / self.period + 1
            }
        };
        (upto(hi - 1) - upto(lo)) as u64
    }
}

/// `A_w(N)` for `w` in `1..=4`, for every `N` up to a limit: counted per span (lowest error at
/// position 0, highest at `s`), then shifted along the packet.
#[derive(Clone, Debug)]
pub struct LowWeights {
    /// `by_span[w][s]`: weight-`w` codewords with lowest bit 0 and highest bit `s`.
    by_span: Vec<Vec<u64>>,
    /// Weight 4 is counted for spans below this (the `O(N^2)` part).
    four_limit: usize,
}

impl LowWeights {
    /// Counts spans below `limit` for weights 2 and 3 and below `four_limit` for weight 4.
    #[must_use]
    pub fn count(g: &Generator, limit: usize, four_limit: usize) -> LowWeights {
        let four_limit = four_limit.min(limit);
        let r = g.residues(limit);
        let period = g
            .order_of_x_up_to(limit as u64)
            .map_or(limit.max(1), |e| e as usize);
        let at = FirstOccurrence::new(&r, period);
        let between = |v: u64, lo: usize, hi: usize| at.between(v, lo, hi);
        let mut by_span = vec![vec![0u64; limit]; EXACT_WEIGHTS + 1];
        for s in 1..limit {
            by_span[2][s] = u64::from(r[s] == 1);
            by_span[3][s] = between(r[s] ^ 1, 0, s);
            if s < four_limit {
                by_span[4][s] = (1..s).map(|b| between(r[s] ^ 1 ^ r[b], 0, b)).sum();
            }
        }
        LowWeights {
            by_span,
            four_limit,
        }
    }

    /// `A_w(len)`, or `None` beyond what was counted.
    #[must_use]
    pub fn codewords(&self, w: usize, len: usize) -> Option<u64> {
        if w == 0 || w > EXACT_WEIGHTS {
            return None;
        }
        let limit = if w == 4 {
            self.four_limit
        } else {
            self.by_span[w].len()
        };
        if len > limit {
            return None;
        }
        let spans = &self.by_span[w][..len];
        Some(
            spans
                .iter()
                .enumerate()
                .map(|(s, c)| c * (len - s) as u64)
                .sum(),
        )
    }

    /// The longest packet this count covers at every exact weight.
    #[must_use]
    pub fn covers(&self) -> usize {
        self.four_limit
    }
}

/// `C(n, k)` as a float.
#[must_use]
pub fn choose(n: u64, k: u64) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// The reduced model's answer for one packet length and bit error rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReducedAlias {
    /// The estimate: exact low weights plus `2^-n` for the rest.
    pub estimate: f64,
    /// The exact low-weight part alone (a lower bound).
    pub low: f64,
    /// The low-weight part plus the whole probability of heavier patterns (an upper bound).
    pub high: f64,
}

/// P(aliasing | error) for `len` bits at bit error rate `p` by the reduced model, or `None`
/// when `len` is beyond the counted weights. With `heavy` counted at this length, weights 5
/// and 6 are exact too.
#[must_use]
pub fn reduced_alias(
    g: &Generator,
    lw: &LowWeights,
    len: usize,
    p: f64,
    heavy: Option<&HeavyWeights>,
) -> Option<ReducedAlias> {
    let heavy = heavy.filter(|h| h.len == len);
    let exact = if heavy.is_some() { 6 } else { EXACT_WEIGHTS };
    let (head, tail) = conditional_weights(len as u64, p, exact as u64);
    let mut low = 0.0;
    for (i, pi) in head.iter().enumerate() {
        let w = i + 1;
        let a = match (w, heavy) {
            (5, Some(h)) => h.a5,
            (6, Some(h)) => h.a6,
            _ => lw.codewords(w, len)?,
        } as f64;
        if a > 0.0 {
            low += pi * a / choose(len as u64, w as u64);
        }
    }
    let asym = (-f64::from(g.degree)).exp2();
    Some(ReducedAlias {
        estimate: low + tail * asym,
        low,
        high: low + tail,
    })
}

#[cfg(test)]
mod tests {
    use super::super::markov::{alias_curve, exact_counts};
    use super::super::poly::{CRC16, CRC3, CRC32C, CRC32_IEEE, CRC8};
    use super::*;

    #[test]
    fn low_weight_counts_match_the_exact_chain() {
        for g in [CRC3, CRC8] {
            let lw = LowWeights::count(&g, 40, 40);
            for len in [3usize, 7, 9, 20, 33] {
                let counts = exact_counts(&g, len);
                for w in 1..=4 {
                    let want = counts.get(w).map_or(0, |r| r[0] as u64);
                    assert_eq!(
                        lw.codewords(w, len),
                        Some(want),
                        "{} w {w} len {len}",
                        g.name
                    );
                }
            }
        }
    }

    #[test]
    fn primitive_16_bit_weight_two_starts_at_its_period() {
        let lw = LowWeights::count(&CRC16, 65_537, 0);
        assert_eq!(lw.codewords(2, 65_535), Some(0));
        assert_eq!(lw.codewords(2, 65_536), Some(1));
        assert_eq!(lw.codewords(2, 65_537), Some(2));
    }

    #[test]
    fn crc32c_detects_odd_weights_and_has_distance_six_on_short_spans() {
        // Published: CRC-32C has Hamming distance 6 up to 5243 data bits, i.e. 5275-bit
        // codewords (Koopman, "32-bit cyclic redundancy codes for Internet applications").
        let lw = LowWeights::count(&CRC32C, 6_000, 6_000);
        assert_eq!(lw.codewords(3, 6_000), Some(0));
        assert_eq!(lw.codewords(4, 5_275), Some(0));
        assert!(lw.codewords(4, 5_276).unwrap() > 0);
        // IEEE 802.3 CRC-32: distance 5 up to 2974 data bits, 4 beyond (same paper).
        let ieee = LowWeights::count(&CRC32_IEEE, 3_100, 3_100);
        assert_eq!(ieee.codewords(3, 3_100), Some(0));
        assert_eq!(ieee.codewords(4, 3_006), Some(0));
        assert!(ieee.codewords(4, 3_007).unwrap() > 0);
    }

    #[test]
    fn the_reduced_model_agrees_with_the_chain_for_8_and_16_bits() {
        // (The run cross-checks 16 bits up to its longest packet; a debug build keeps it short.)
        for (g, p, lengths) in [
            (CRC8, 1e-3, &[64usize, 256, 1024, 2048][..]),
            (CRC8, 1e-5, &[64, 256, 1024, 2048][..]),
            (CRC16, 1e-4, &[64, 256][..]),
        ] {
            let chain = alias_curve(&g, p, lengths);
            let lw = LowWeights::count(&g, 2048, 2048);
            for (len, want) in lengths.iter().zip(chain) {
                let r = reduced_alias(&g, &lw, *len, p, None).unwrap();
                assert!(r.low <= want * (1.0 + 1e-9) && want <= r.high * (1.0 + 1e-9));
                // Where heavy patterns matter the 2^-n share is an approximation; the test
                // holds the agreement the report quotes (within 10 %).
                assert!(
                    (r.estimate / want - 1.0).abs() < 0.10,
                    "{} p {p} len {len}: reduced {} chain {want}",
                    g.name,
                    r.estimate
                );
            }
        }
    }
}
