//! From a link's bit error rate to the probability that one PDU is damaged.
//!
//! Equation 4.5 of Hussain's iSCSI simulation dissertation: with independent bit errors at rate
//! `BER`, a PDU of `bits` bits arrives with at least one error with probability
//! `1 - (1 - BER)^bits`, where `bits` is 8 times the PDU's bytes on the wire (header, digests,
//! data and padding alike). The injector then puts the error at a uniformly chosen bit, so the
//! header and the data are hit in proportion to their sizes.

use crate::plan::Rate;

/// `1 - (1 - ber)^bits`, computed as `-expm1(bits * ln(1 - ber))` so that small rates keep
/// their precision (`(1 - 1e-12)` would round to 1 in a direct product).
pub fn pdu_error_probability(ber: Rate, bits: u64) -> f64 {
    let ber = ber.get();
    if ber >= 1.0 {
        return if bits == 0 { 0.0 } else { 1.0 };
    }
    // `bits` is at most 8 × 2^25 here (the largest frame), exact in an f64.
    let p = -((bits as f64) * (-ber).ln_1p()).exp_m1();
    p.clamp(0.0, 1.0)
}

/// Bits on the wire of a frame of `bytes` bytes.
pub fn frame_bits(bytes: usize) -> u64 {
    (bytes as u64).saturating_mul(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(p: f64) -> Rate {
        Rate::new(p).unwrap()
    }

    #[test]
    fn the_formula_matches_the_direct_product() {
        for (ber, bytes) in [(1e-3_f64, 48usize), (1e-4, 8_248), (0.5, 1), (1e-2, 100)] {
            let bits = frame_bits(bytes);
            let direct = 1.0 - (1.0 - ber).powi(bits as i32);
            let p = pdu_error_probability(rate(ber), bits);
            assert!((p - direct).abs() < 1e-12, "{ber} {bytes}: {p} vs {direct}");
        }
    }

    #[test]
    fn small_rates_keep_their_precision() {
        // 1e-12 per bit over an 8 KiB PDU: about 6.6e-8, which a naive 1-(1-p)^n loses.
        let bits = frame_bits(8_192 + 48);
        let p = pdu_error_probability(rate(1e-12), bits);
        let expected = bits as f64 * 1e-12;
        assert!((p - expected).abs() / expected < 1e-6, "{p} vs {expected}");
    }

    #[test]
    fn edges() {
        assert_eq!(pdu_error_probability(Rate::ZERO, 1 << 20), 0.0);
        assert_eq!(pdu_error_probability(Rate::ONE, 8), 1.0);
        assert_eq!(pdu_error_probability(Rate::ONE, 0), 0.0);
        // Longer PDUs are hit more often.
        let short = pdu_error_probability(rate(1e-6), frame_bits(48));
        let long = pdu_error_probability(rate(1e-6), frame_bits(65_536));
        assert!(short < long && long < 1.0);
    }
}
