//! The Markov model of an n-bit CRC register under random bit errors (the simulation study's
//! section 6.3, after Williams, Daehn, Gruetzner and Starke, "Bounds and analysis of aliasing
//! errors in linear feedback shift registers").
//!
//! Each bit of the error pattern is 1 with probability `p` (the bit error rate), independently.
//! The register starts in state 0; reading a bit takes state `s` to `x·s + b mod g`. The
//! packet aliases when an error occurred and the register still ends in state 0. Three views:
//! - [`TransitionMatrix`]: the `2^n x 2^n` matrix with entries `0`, `p`, `1-p`, states
//!   numbered as the study numbers them (for its 3-bit equation 6.1);
//! - [`exact_counts`]: the number of error patterns of each weight that end in each state,
//!   in integers, so the probability of aliasing is an exact polynomial in `p`;
//! - [`alias_curve`]: the chain iterated in `f64` for `n` up to about 24, `O(L 2^n)` work.
//!   It carries only the probability of paths that have seen an error, so it never subtracts
//!   nearly equal numbers (`P0 - (1-p)^L` loses every digit at `p = 1e-8`).

use super::poly::Generator;

/// One entry of the transition matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// No transition.
    Zero,
    /// Taken on an error bit: probability `p`.
    P,
    /// Taken on a correct bit: probability `1 - p`.
    OneMinusP,
}

/// The transition matrix `M` of `P(t+1) = M P(t)`: `m[to][from]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransitionMatrix {
    /// Rows indexed by the next state's number, columns by the current state's.
    pub m: Vec<Vec<Entry>>,
    /// The register contents of each state number.
    pub register: Vec<u64>,
}

impl TransitionMatrix {
    /// The matrix of a maximal-length generator with the study's numbering: state 0 is the
    /// zero register and state `k >= 1` is `x^(k-1) mod g`, so the error-free input walks
    /// `1 -> 2 -> ... -> 2^n-1 -> 1`. `None` if `g` is not maximal length or too wide to
    /// print (more than 10 bits).
    #[must_use]
    pub fn study_numbering(g: &Generator) -> Option<TransitionMatrix> {
        if g.degree > 10 || !g.is_maximal_length() {
            return None;
        }
        let size = g.states() as usize;
        let mut register = vec![0u64];
        register.extend(g.residues(size - 1));
        let mut number = vec![0usize; size];
        for (k, r) in register.iter().enumerate() {
            number[*r as usize] = k;
        }
        let mut m = vec![vec![Entry::Zero; size]; size];
        for (from, r) in register.iter().enumerate() {
            m[number[g.step(*r, false) as usize]][from] = Entry::OneMinusP;
            m[number[g.step(*r, true) as usize]][from] = Entry::P;
        }
        Some(TransitionMatrix { m, register })
    }

    /// The matrix with `p` substituted.
    #[must_use]
    pub fn numeric(&self, p: f64) -> Vec<Vec<f64>> {
        self.m
            .iter()
            .map(|row| {
                row.iter()
                    .map(|e| match e {
                        Entry::Zero => 0.0,
                        Entry::P => p,
                        Entry::OneMinusP => 1.0 - p,
                    })
                    .collect()
            })
            .collect()
    }
}

/// `counts[w][s]`: how many error patterns of `len` bits and weight `w` leave the register in
/// state `s` (register contents, not study numbering). Exact; `2^n (len+1)` counters.
/// `counts[w][0]` for `w >= 1` is the number `A_w` of weight-`w` codewords of length `len`.
#[must_use]
pub fn exact_counts(g: &Generator, len: usize) -> Vec<Vec<u128>> {
    let size = g.states() as usize;
    let mut counts = vec![vec![0u128; size]; len + 1];
    counts[0][0] = 1;
    for t in 0..len {
        let mut next = vec![vec![0u128; size]; len + 1];
        for w in 0..=t {
            for (s, c) in counts[w].iter().enumerate() {
                if *c == 0 {
                    continue;
                }
                next[w][g.step(s as u64, false) as usize] += c;
                next[w + 1][g.step(s as u64, true) as usize] += c;
            }
        }
        counts = next;
    }
    counts
}

/// The probability of aliasing given an error, exactly, for a rational bit error rate
/// `num/den`: `(num, den)` of `sum_{w>=1} A_w num^w (den-num)^(len-w) / (den^len -
/// (den-num)^len)`. Overflows (returns `None`) past `u128`.
#[must_use]
pub fn exact_alias(g: &Generator, len: usize, num: u128, den: u128) -> Option<(u128, u128)> {
    let counts = exact_counts(g, len);
    let exp = u32::try_from(len).ok()?;
    let mut top = 0u128;
    for (w, row) in counts.iter().enumerate().skip(1) {
        let term = row[0]
            .checked_mul(num.checked_pow(w as u32)?)?
            .checked_mul((den - num).checked_pow(exp - w as u32)?)?;
        top = top.checked_add(term)?;
    }
    let bottom = den.checked_pow(exp)? - (den - num).checked_pow(exp)?;
    Some((top, bottom))
}

/// `1 - (1-p)^len` without cancellation: the probability that a packet has an error.
#[must_use]
pub fn p_error(p: f64, len: f64) -> f64 {
    -(len * (-p).ln_1p()).exp_m1()
}

/// The conditional probability of aliasing, P(register in state 0 | an error occurred), after
/// each of `lengths` bits (ascending), at bit error rate `p`.
#[must_use]
pub fn alias_curve(g: &Generator, p: f64, lengths: &[usize]) -> Vec<f64> {
    let size = g.states() as usize;
    // q[s]: probability of being in s having seen at least one error.
    let mut q = vec![0f64; size];
    let mut next = vec![0f64; size];
    let mut clean = 1f64; // (1-p)^t: no error yet, register 0.
    let mut out = Vec::with_capacity(lengths.len());
    let mut want = lengths.iter().peekable();
    let mut t = 0usize;
    while let Some(&&len) = want.peek() {
        if t == len {
            out.push(q[0] / p_error(p, t as f64));
            want.next();
            continue;
        }
        step_distribution(g, p, &q, &mut next);
        // The first error: from the clean path (register 0) to x·0 + 1 = 1.
        next[1] += clean * p;
        clean *= 1.0 - p;
        std::mem::swap(&mut q, &mut next);
        t += 1;
    }
    out
}

/// The unconditional state distribution after `len` bits, register contents as index.
#[must_use]
pub fn state_distribution(g: &Generator, p: f64, len: usize) -> Vec<f64> {
    let mut d = vec![0f64; g.states() as usize];
    d[0] = 1.0;
    let mut next = vec![0f64; d.len()];
    for _ in 0..len {
        step_distribution(g, p, &d, &mut next);
        std::mem::swap(&mut d, &mut next);
    }
    d
}

/// One bit: `next = M q`. Written as a gather: registers `2m` and `2m+1` are reached only
/// from `m` (top bit clear: `x·m`, then the input bit) and from `u = 2^(n-1) + (m ^ h)` with
/// `h = (g's low terms) >> 1` (top bit set: the shift folds `g` back in, and `g`'s constant
/// term flips the input bit's place).
fn step_distribution(g: &Generator, p: f64, q: &[f64], next: &mut [f64]) {
    let half = q.len() / 2;
    let h = (g.low >> 1) as usize;
    let (lo, hi) = q.split_at(half);
    for (m, pair) in next.chunks_exact_mut(2).enumerate() {
        let a = lo[m];
        let b = hi[m ^ h];
        pair[0] = (1.0 - p) * a + p * b;
        pair[1] = p * a + (1.0 - p) * b;
    }
}

#[cfg(test)]
mod tests {
    use super::super::poly::{CRC16, CRC3, CRC8};
    use super::*;
    use Entry::{OneMinusP as Q, Zero as O, P};

    /// Equation 6.1 of the study, as printed: row = next state, column = current state.
    const EQ_6_1: [[Entry; 8]; 8] = [
        [Q, O, O, O, O, O, O, P],
        [P, O, O, O, O, O, O, Q],
        [O, Q, O, P, O, O, O, O],
        [O, O, Q, O, O, O, P, O],
        [O, P, O, Q, O, O, O, O],
        [O, O, O, O, Q, P, O, O],
        [O, O, O, O, P, Q, O, O],
        [O, O, P, O, O, O, Q, O],
    ];

    #[test]
    fn the_3_bit_matrix_is_the_studys_equation_6_1() {
        let m = TransitionMatrix::study_numbering(&CRC3).unwrap();
        let want: Vec<Vec<Entry>> = EQ_6_1.iter().map(|r| r.to_vec()).collect();
        assert_eq!(m.m, want);
        // Another maximal-length 3-bit generator, x^3 + x^2 + 1, gives a different matrix.
        let other = Generator {
            name: "x^3+x^2+1",
            degree: 3,
            low: 0b101,
        };
        assert_ne!(TransitionMatrix::study_numbering(&other).unwrap().m, want);
    }

    #[test]
    fn the_3_bit_matrix_is_doubly_stochastic_and_converges_to_one_eighth() {
        let m = TransitionMatrix::study_numbering(&CRC3)
            .unwrap()
            .numeric(0.3);
        for i in 0..8 {
            let row: f64 = m[i].iter().sum();
            let col: f64 = m.iter().map(|r| r[i]).sum();
            assert!((row - 1.0).abs() < 1e-15 && (col - 1.0).abs() < 1e-15);
        }
        let d = state_distribution(&CRC3, 0.3, 200);
        for v in d {
            assert!((v - 0.125).abs() < 1e-12, "{v}");
        }
    }

    #[test]
    fn exact_counts_match_brute_force_enumeration() {
        for len in [1usize, 4, 7, 8, 12] {
            let counts = exact_counts(&CRC3, len);
            let mut brute = vec![0u128; len + 1];
            for e in 0u64..(1 << len) {
                let bits = (0..len).rev().map(|i| (e >> i) & 1 == 1);
                if CRC3.remainder(bits) == 0 {
                    brute[e.count_ones() as usize] += 1;
                }
            }
            let got: Vec<u128> = counts.iter().map(|r| r[0]).collect();
            assert_eq!(got, brute, "len {len}");
        }
        // The 3-bit code is the Hamming (7,4) code: 7 codewords of weight 3, 7 of weight 4,
        // 1 of weight 7 at length 7.
        let c = exact_counts(&CRC3, 7);
        let a: Vec<u128> = c.iter().map(|r| r[0]).collect();
        assert_eq!(a, vec![1, 0, 0, 7, 7, 0, 0, 1]);
    }

    #[test]
    fn the_float_chain_matches_the_exact_rational_result() {
        // Exact fractions against the f64 chain (100^19 still fits in a u128).
        for (num, den) in [(1u128, 10u128), (1, 2), (1, 100), (3, 7)] {
            let p = num as f64 / den as f64;
            let lengths: Vec<usize> = (1..=19).collect();
            let curve = alias_curve(&CRC3, p, &lengths);
            for (len, got) in lengths.iter().zip(curve) {
                let (top, bottom) = exact_alias(&CRC3, *len, num, den).unwrap();
                let want = top as f64 / bottom as f64;
                assert!(
                    (got - want).abs() <= 1e-12 * want.max(1e-300),
                    "len {len} p {p}: {got} vs {want}"
                );
            }
        }
        // The shortest codeword is g itself, 4 bits long: none at length 3, and at length 4
        // exactly one (3 errors and 1 correct bit: 1^3 * 9^1 over 10^4 - 9^4).
        assert_eq!(exact_alias(&CRC3, 3, 1, 10).unwrap().0, 0);
        assert_eq!(exact_alias(&CRC3, 4, 1, 10).unwrap().0, 9);
    }

    #[test]
    fn aliasing_tends_to_two_to_the_minus_n_at_half_error_rate() {
        for g in [CRC3, CRC8] {
            let n = g.degree;
            let a = alias_curve(&g, 0.5, &[64, 256])[1];
            let asym = 1.0 / f64::from(1u32 << n);
            assert!((a - asym).abs() < 1e-9 * asym + 1e-15, "{} {a}", g.name);
        }
    }

    #[test]
    fn at_low_error_rates_short_packets_alias_less_than_the_asymptote() {
        // A 16-bit primitive code detects every 1- and 2-bit error below 65535 bits, so at
        // p = 1e-6 aliasing of a 512-bit packet needs 3 errors and is far below 2^-16.
        let a = alias_curve(&CRC16, 1e-6, &[512])[0];
        assert!(a > 0.0 && a < 1e-6 / 65536.0, "{a}");
        let long = alias_curve(&CRC8, 1e-2, &[4096])[0];
        assert!((long * 256.0 - 1.0).abs() < 1e-3, "{long}");
    }
}
