//! How much each scale computes.

use super::study::FIG_6_7_BERS;

/// How long a run takes: `Tiny` in seconds (the test suite, a debug build), `Quick` in a few
/// minutes, `Full` for the committed figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcAliasScale {
    /// Seconds: short packets, few trials, no 20-bit chain.
    Tiny,
    /// A few minutes at most on two cores.
    Quick,
    /// The committed figures.
    Full,
}

/// The sizes of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Longest packet for the 8- and 16-bit chains, bits.
    pub chain_bits: usize,
    /// Bit error rates of the 16-bit chain (the study's figure 6.7: 1e-4 to 1e-8).
    pub bers: Vec<f64>,
    /// Longest packet for the 20-bit chain (0: not run), bits.
    pub chain20_bits: usize,
    /// Longest packet for the reduced model (weights up to 4 counted exactly), bits.
    pub reduced_bits: usize,
    /// Length at which the 32-bit CRCs' 5- and 6-bit codewords are counted (0: not counted).
    pub heavy_bits: usize,
    /// Packets per point of the CRC-8 Monte Carlo check.
    pub mc_packets: u64,
    /// Patterns per point of the CRC-16 weight-4 Monte Carlo check.
    pub mc_patterns: u64,
    /// Corruptions per stratum of the TCP checksum estimate.
    pub tcp_trials: u64,
    /// Corruptions per stratum (2, 3, 4 flips) of the framer measurement.
    pub framer_trials: [u64; 3],
}

impl Plan {
    /// The plan of a scale.
    #[must_use]
    pub fn of(scale: CrcAliasScale) -> Plan {
        match scale {
            CrcAliasScale::Tiny => Plan {
                chain_bits: 512,
                bers: vec![1e-4, 1e-7],
                chain20_bits: 0,
                reduced_bits: 512,
                heavy_bits: 0,
                mc_packets: 20_000,
                mc_patterns: 0,
                tcp_trials: 2_000,
                framer_trials: [2_000, 500, 500],
            },
            CrcAliasScale::Quick => Plan {
                chain_bits: 16_384,
                bers: FIG_6_7_BERS.to_vec(),
                chain20_bits: 12_288,
                reduced_bits: 12_288,
                heavy_bits: 512,
                mc_packets: 1_000_000,
                mc_patterns: 4_000_000,
                tcp_trials: 200_000,
                framer_trials: [200_000, 50_000, 50_000],
            },
            CrcAliasScale::Full => Plan {
                chain_bits: 65_536,
                bers: FIG_6_7_BERS.to_vec(),
                chain20_bits: 16_384,
                reduced_bits: 16_384,
                heavy_bits: 512,
                mc_packets: 10_000_000,
                mc_patterns: 40_000_000,
                tcp_trials: 2_000_000,
                framer_trials: [1_000_000, 200_000, 200_000],
            },
        }
    }

    /// Packet lengths in bits, about four per octave (whole bytes), up to `max`.
    #[must_use]
    pub fn lengths(max: usize) -> Vec<usize> {
        const BYTES: [usize; 24] = [
            2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1500,
            2048, 3072, 4096, 8192,
        ];
        BYTES.iter().map(|b| b * 8).filter(|&b| b <= max).collect()
    }
}
