//! CRC32C on the CPU's CRC and carry-less-multiply instructions, through [`crc_fast`].
//!
//! `crc-fast` picks the widest path the CPU offers at run time (SSE4.2 `crc32` fused with
//! PCLMULQDQ/VPCLMULQDQ folding on x86-64, the CRC32 and PMULL instructions on AArch64) and
//! falls back to a table on anything else, so this module is always correct, only sometimes
//! fast. Its `unsafe` stays inside that crate; this one needs none.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC32C of `data` in one call.
#[must_use]
pub fn checksum(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// Feeds `data` into the CRC register `state` and returns the new register.
///
/// `state` starts at [`INITIAL_STATE`](crate::INITIAL_STATE); the digest is
/// [`finalize`](crate::finalize)`(state)`.
#[must_use]
pub fn update(state: u32, data: &[u8]) -> u32 {
    // `crc-fast` keeps the register un-complemented and bit-reflected, the same convention as
    // the table modules, so a register can move freely between the implementations.
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(state));
    digest.update(data);
    // The register of a 32-bit CRC lives in the low half of crc-fast's u64; the high half is 0.
    (digest.get_state() & u64::from(u32::MAX)) as u32
}

/// Which code path `crc-fast` chose on this machine, e.g. `"x86_64-avx512-vpclmulqdq"`.
///
/// Reported by the benchmarks and the perf lab, so that a number can be traced to the
/// instructions that produced it.
#[must_use]
pub fn backend() -> String {
    crc_fast::get_calculator_target(CrcAlgorithm::Crc32Iscsi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{finalize, INITIAL_STATE};

    #[test]
    fn check_value() {
        // The CRC catalogue's check value for CRC-32/ISCSI.
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn register_round_trip_matches_one_shot() {
        let state = update(INITIAL_STATE, b"12345");
        assert_eq!(finalize(update(state, b"6789")), checksum(b"123456789"));
    }

    #[test]
    fn backend_is_named() {
        assert!(!backend().is_empty());
    }
}
