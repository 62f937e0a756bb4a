//! Codewords of weight 5 and 6 at one short length, for the 32-bit CRCs' short packets.
//!
//! Below the length where a 32-bit CRC has codewords of weight 3 or 4 (3,007 bits for IEEE
//! CRC-32, 5,276 for CRC-32C), aliasing at a low bit error rate is made of 5- and 6-bit
//! patterns, which the reduced model of [`super::weights`] only gives the share `2^-n`. They
//! are counted here by meeting in the middle: with no codeword of weight 3 or 4 and all
//! residues `x^i mod g` distinct, two different triples of positions with the same XOR of
//! residues are disjoint (sharing one position would leave a 4-bit codeword, sharing two a
//! repeated residue), so `A_6` is the number of equal pairs among all triples' XORs over the
//! `C(6,3)/2 = 10` ways to split a 6-set into two triples; likewise `A_5` is the number of
//! (pair, triple) with equal XOR over the `C(5,2) = 10` splits of a 5-set. `C(N,3)` XORs are
//! sorted: about 180 MB at 512 bits.

use super::poly::Generator;
use super::weights::LowWeights;

/// The longest packet counted (memory grows as `N^3`).
pub const MAX_HEAVY_BITS: usize = 600;

/// `A_5` and `A_6` at one length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeavyWeights {
    /// Packet length, bits.
    pub len: usize,
    /// Weight-5 codewords.
    pub a5: u64,
    /// Weight-6 codewords.
    pub a6: u64,
}

/// Counts `A_5(len)` and `A_6(len)`, or `None` when the method does not apply: longer than
/// [`MAX_HEAVY_BITS`], a generator wider than 32 bits, a repeated residue, or a codeword of
/// weight 3 or 4 at this length (`lw` must cover `len`).
#[must_use]
pub fn count_heavy(g: &Generator, lw: &LowWeights, len: usize) -> Option<HeavyWeights> {
    if len > MAX_HEAVY_BITS || g.degree > 32 || len < 6 {
        return None;
    }
    if lw.codewords(3, len)? != 0 || lw.codewords(4, len)? != 0 || lw.codewords(2, len)? != 0 {
        return None;
    }
    let r: Vec<u32> = g.residues(len).into_iter().map(|v| v as u32).collect();
    let mut triples = Vec::with_capacity(len * (len - 1) * (len - 2) / 6);
    for a in 0..len {
        for b in a + 1..len {
            let ab = r[a] ^ r[b];
            triples.extend(r[b + 1..].iter().map(|c| ab ^ c));
        }
    }
    triples.sort_unstable();
    let mut six = 0u64;
    let mut i = 0;
    while i < triples.len() {
        let j = i + triples[i..].partition_point(|&v| v == triples[i]);
        let m = (j - i) as u64;
        six += m * (m - 1) / 2;
        i = j;
    }
    let mut five = 0u64;
    for a in 0..len {
        for b in a + 1..len {
            let v = r[a] ^ r[b];
            let lo = triples.partition_point(|&t| t < v);
            let hi = triples.partition_point(|&t| t <= v);
            five += (hi - lo) as u64;
        }
    }
    Some(HeavyWeights {
        len,
        a5: five / 10,
        a6: six / 10,
    })
}

#[cfg(test)]
mod tests {
    use super::super::markov::exact_counts;
    use super::*;

    #[test]
    fn heavy_counts_match_the_exact_chain_where_they_apply() {
        // A 10-bit generator small enough for the exact chain; check every length where
        // the method applies, and that there are some.
        let g = Generator {
            name: "x^10+x^3+x^2+x+1 with x^9, x^6",
            degree: 10,
            low: 0x24F,
        };
        let lw = LowWeights::count(&g, 40, 40);
        let mut checked = 0;
        for len in 6..32 {
            let Some(h) = count_heavy(&g, &lw, len) else {
                continue;
            };
            let c = exact_counts(&g, len);
            assert_eq!((h.a5, h.a6), (c[5][0] as u64, c[6][0] as u64), "len {len}");
            checked += usize::from(h.a5 + h.a6 > 0);
        }
        assert!(checked >= 3, "{checked}");
    }

    #[test]
    fn crc32c_distance_eight_ends_where_published() {
        // CRC-32C has Hamming distance 8 up to 177 data bits (Koopman, "32-bit cyclic
        // redundancy codes for Internet applications"): no 6-bit codeword up to 209 bits, one
        // at 210; and no odd weights at all.
        let g = super::super::poly::CRC32C;
        let lw = LowWeights::count(&g, 210, 210);
        let at = |len| count_heavy(&g, &lw, len).unwrap();
        assert_eq!(
            at(209),
            HeavyWeights {
                len: 209,
                a5: 0,
                a6: 0
            }
        );
        let h = at(210);
        assert_eq!(h.a5, 0);
        assert!(h.a6 > 0, "{h:?}");
    }
}
