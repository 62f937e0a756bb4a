//! The CRC32C algorithms of the fast-path study, and how fast each one runs.
//!
//! Joglekar, Kounavis and Berry, "A Scalable and High Performance Software iSCSI
//! Implementation", timed Sarwate's table-driven CRC against their Slicing-by-8 in cycles per
//! byte. [`LabCrc`] is the set the lab compares today: every table-driven algorithm of
//! `sluice-digest` (bitwise, Sarwate, Slicing-by-4/8/16), the SSE4.2 `crc32` instruction in one
//! and three interleaved streams ([`sse42`]), the folded carry-less multiply of `crc-fast`, and
//! what the product runs (`sluice`: the instruction up to 64 bytes, `crc-fast` above).
//! [`timing`] measures one of them on one buffer size, warm or cold.

pub mod fused;
pub mod sse42;
pub mod study;
pub mod timing;
pub mod writeup;

use std::fmt;

use sluice_digest::{Algorithm, INITIAL_STATE};

/// One CRC32C implementation the lab can time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LabCrc {
    /// An implementation of `sluice-digest` (its `Hardware` is what the data path runs).
    Digest(Algorithm),
    /// `crc-fast` alone, whatever the length.
    CrcFast,
    /// SSE4.2 `crc32`, one dependent chain.
    Sse42One,
    /// SSE4.2 `crc32`, three interleaved chains joined by carry-less arithmetic.
    Sse42Three,
}

impl LabCrc {
    /// Every implementation, in the order the lab reports them.
    pub const ALL: [LabCrc; 9] = [
        LabCrc::Digest(Algorithm::Bitwise),
        LabCrc::Digest(Algorithm::Sarwate),
        LabCrc::Digest(Algorithm::SlicingBy4),
        LabCrc::Digest(Algorithm::SlicingBy8),
        LabCrc::Digest(Algorithm::SlicingBy16),
        LabCrc::Sse42One,
        LabCrc::Sse42Three,
        LabCrc::CrcFast,
        LabCrc::Digest(Algorithm::Hardware),
    ];

    /// The name in tables, plots and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            LabCrc::Digest(Algorithm::Hardware) => "sluice",
            LabCrc::Digest(a) => a.name(),
            LabCrc::CrcFast => "crc-fast",
            LabCrc::Sse42One => "sse4.2",
            LabCrc::Sse42Three => "sse4.2-x3",
        }
    }

    /// Whether this CPU can run it.
    #[must_use]
    pub fn available(self) -> bool {
        match self {
            LabCrc::Digest(_) | LabCrc::CrcFast => true,
            LabCrc::Sse42One | LabCrc::Sse42Three => sse42::available(),
        }
    }

    /// Feeds `data` into the register `state`; `None` if this CPU cannot run it.
    #[must_use]
    pub fn update(self, state: u32, data: &[u8]) -> Option<u32> {
        match self {
            // The generator passed opaque: otherwise LLVM turns the division into a table
            // lookup and "bitwise" times Sarwate's algorithm (see `sluice_digest::bitwise`).
            LabCrc::Digest(Algorithm::Bitwise) => Some(sluice_digest::bitwise::update_with(
                state,
                data,
                std::hint::black_box(sluice_digest::POLY_REFLECTED),
            )),
            LabCrc::Digest(a) => Some(a.update(state, data)),
            LabCrc::CrcFast => Some(sluice_digest::hardware::crc_fast_update(state, data)),
            LabCrc::Sse42One => sse42::update_one(state, data),
            LabCrc::Sse42Three => sse42::update_three(state, data),
        }
    }

    /// The CRC32C digest of `data`; `None` if this CPU cannot run it.
    #[must_use]
    pub fn checksum(self, data: &[u8]) -> Option<u32> {
        self.update(INITIAL_STATE, data)
            .map(sluice_digest::finalize)
    }
}

impl fmt::Display for LabCrc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_available_algorithm_gives_the_check_value_and_agrees_on_random_buffers() {
        let mut buf = vec![0u8; 70_000];
        let mut x = 0x9e37_79b9_u32;
        for b in &mut buf {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        for alg in LabCrc::ALL.into_iter().filter(|a| a.available()) {
            assert_eq!(alg.checksum(b"123456789"), Some(0xE306_9283), "{alg}");
            for len in [0, 1, 7, 8, 9, 511, 4096, 8191, 65_536, 70_000] {
                assert_eq!(
                    alg.checksum(&buf[..len]),
                    Some(sluice_digest::crc32c(&buf[..len])),
                    "{alg} at {len} bytes"
                );
            }
        }
    }

    #[test]
    fn names_are_distinct() {
        let mut names: Vec<_> = LabCrc::ALL.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), LabCrc::ALL.len());
    }
}
