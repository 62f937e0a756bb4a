//! Generator polynomials over GF(2), and the remainder a CRC register holds.
//!
//! The register of the simulation study's Markov model holds the remainder of the bits read so
//! far, as a polynomial, divided by the generator `g(x)`: reading bit `b` takes the remainder
//! `s(x)` to `x·s(x) + b mod g(x)`. With the all-zero packet as the error-free one (the code
//! is linear, so only the error pattern matters), an error pattern `E(x)` aliases exactly when
//! `g(x)` divides `E(x)`, that is when the register ends in state 0.

/// A CRC generator polynomial of degree `n` (1 to 32) with a nonzero constant term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    /// Short name for tables and legends.
    pub name: &'static str,
    /// Degree `n`: the CRC has `n` bits and `2^n` remainder states.
    pub degree: u32,
    /// Coefficients of `x^0 .. x^(n-1)` (bit `i` is the coefficient of `x^i`); `x^n` is
    /// implied. This is the usual "normal" hexadecimal form of a CRC polynomial.
    pub low: u64,
}

/// `x^3 + x + 1`: the 3-bit maximal-length CRC of the study's example (its equation 6.1 is
/// the transition matrix of this generator, states numbered along the cycle of `x^k`).
pub const CRC3: Generator = Generator {
    name: "CRC-3 x^3+x+1",
    degree: 3,
    low: 0b011,
};

/// `x^8 + x^4 + x^3 + x^2 + 1`: a primitive (maximal-length) degree-8 polynomial.
pub const CRC8: Generator = Generator {
    name: "CRC-8 0x1D (primitive)",
    degree: 8,
    low: 0x1D,
};

/// `x^16 + x^5 + x^3 + x^2 + 1`: a primitive degree-16 polynomial (the study analysed
/// "16-bit maximal-length CRCs" without naming one).
pub const CRC16: Generator = Generator {
    name: "CRC-16 0x002D (primitive)",
    degree: 16,
    low: 0x002D,
};

/// `x^20 + x^6 + x^5 + x^4 + x^3 + x + 1`: a primitive degree-20 polynomial. (Not the
/// trinomial `x^20 + x^3 + 1`, itself a 3-bit error pattern that such a CRC would miss.)
pub const CRC20: Generator = Generator {
    name: "CRC-20 0x0007B (primitive)",
    degree: 20,
    low: 0x0_007B,
};

/// The IEEE 802.3 (Ethernet) CRC-32, `0x04C11DB7`: the 32-bit polynomial the study simulated.
pub const CRC32_IEEE: Generator = Generator {
    name: "CRC-32 IEEE 802.3 0x04C11DB7",
    degree: 32,
    low: 0x04C1_1DB7,
};

/// Castagnoli's CRC-32C, `0x1EDC6F41`: iSCSI's header and data digest (RFC 7143 section
/// 13.1). It has the factor `x + 1`, so it detects every odd number of bit errors.
pub const CRC32C: Generator = Generator {
    name: "CRC-32C iSCSI 0x1EDC6F41",
    degree: 32,
    low: 0x1EDC_6F41,
};

impl Generator {
    /// Number of remainder states, `2^n`.
    #[must_use]
    pub fn states(&self) -> u64 {
        1u64 << self.degree
    }

    /// The mask of an `n`-bit state.
    #[must_use]
    pub fn mask(&self) -> u64 {
        self.states() - 1
    }

    /// `x·s mod g`: the register after reading a 0 bit.
    #[must_use]
    pub fn times_x(&self, s: u64) -> u64 {
        let top = (s >> (self.degree - 1)) & 1;
        ((s << 1) & self.mask()) ^ (self.low * top)
    }

    /// The register after reading bit `b` in state `s`.
    #[must_use]
    pub fn step(&self, s: u64, b: bool) -> u64 {
        self.times_x(s) ^ u64::from(b)
    }

    /// `x^i mod g` for `i` in `0..len`: the remainder a single error `i` places before the end
    /// leaves. An error pattern aliases when the residues of its positions XOR to zero.
    #[must_use]
    pub fn residues(&self, len: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(len);
        let mut r = 1u64;
        for _ in 0..len {
            out.push(r);
            r = self.times_x(r);
        }
        out
    }

    /// The remainder of a whole bit string (first bit = highest power).
    #[must_use]
    pub fn remainder(&self, bits: impl IntoIterator<Item = bool>) -> u64 {
        bits.into_iter().fold(0, |s, b| self.step(s, b))
    }

    /// The order of `x` modulo `g` if it is at most `limit`: the smallest `e >= 1` with
    /// `x^e = 1`. Two errors `e` bits apart alias exactly when `e` is a multiple of it.
    #[must_use]
    pub fn order_of_x_up_to(&self, limit: u64) -> Option<u64> {
        let mut r = self.times_x(1);
        for e in 1..=limit {
            if r == 1 {
                return Some(e);
            }
            r = self.times_x(r);
        }
        None
    }

    /// Whether `g` is primitive, i.e. the register's nonzero states form one cycle of length
    /// `2^n - 1` (the study's "maximal length"). Walks the cycle: for small degrees only.
    #[must_use]
    pub fn is_maximal_length(&self) -> bool {
        self.order_of_x_up_to(self.mask()) == Some(self.mask())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_generators_are_maximal_length() {
        for g in [CRC3, CRC8, CRC16, CRC20] {
            assert!(g.is_maximal_length(), "{}", g.name);
        }
        // x^3 + x^2 + x + 1 = (x + 1)^3 is not.
        let not = Generator {
            name: "x^3+x^2+x+1",
            degree: 3,
            low: 0b111,
        };
        assert!(!not.is_maximal_length());
    }

    #[test]
    fn crc32c_has_the_factor_x_plus_1_and_ieee_does_not() {
        // g(1) = parity of the number of terms (x^n included).
        let at_one = |g: Generator| (g.low.count_ones() + 1) % 2;
        assert_eq!(at_one(CRC32C), 0);
        assert_eq!(at_one(CRC32_IEEE), 1);
    }

    #[test]
    fn remainder_matches_the_residues_of_the_one_bits() {
        let g = CRC16;
        let bits: Vec<bool> = (0..100).map(|i| (i * 37) % 11 < 4).collect();
        let res = g.residues(bits.len());
        let by_residues = bits
            .iter()
            .enumerate()
            .filter(|(_, b)| **b)
            .fold(0, |acc, (i, _)| acc ^ res[bits.len() - 1 - i]);
        assert_eq!(g.remainder(bits.iter().copied()), by_residues);
    }

    #[test]
    fn crc32c_remainder_agrees_with_the_digest_crate() {
        // CRC-32C of the message (init 0, no reflection, no final XOR) is the remainder of
        // M(x)·x^32; sluice-digest computes the reflected, inverted form, so compare through
        // linearity: the difference of two messages' digests is the remainder of their XOR.
        let g = CRC32C;
        let a = b"123456789abcdefg";
        let b = b"123456789abcdefh";
        let bits = |m: &[u8]| -> Vec<bool> {
            let mut v: Vec<bool> = m
                .iter()
                .flat_map(|byte| (0..8).map(move |k| (byte >> k) & 1 == 1))
                .collect();
            v.extend(std::iter::repeat_n(false, 32));
            v
        };
        let diff: Vec<bool> = bits(a).iter().zip(bits(b)).map(|(x, y)| x ^ y).collect();
        let rem = g.remainder(diff);
        let dig = sluice_digest::crc32c(a) ^ sluice_digest::crc32c(b);
        // The reflected digest holds the coefficients in reverse bit order.
        assert_eq!(u64::from(dig.reverse_bits()), rem);
    }
}
