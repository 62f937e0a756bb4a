//! CRC32C on the CPU's CRC and carry-less-multiply instructions, through [`crc_fast`].
//!
//! `crc-fast` picks the widest path the CPU offers at run time (SSE4.2 `crc32` fused with
//! PCLMULQDQ/VPCLMULQDQ folding on x86-64, the CRC32 and PMULL instructions on AArch64) and
//! falls back to a table on anything else, so this module is always correct, only sometimes
//! fast. Inputs of up to 64 bytes (headers, padding) go to one chain of the SSE4.2 `crc32`
//! instruction instead where the CPU has it: there `crc-fast`'s set-up costs more than the
//! CRC (see `short`).

use crc_fast::{CrcAlgorithm, Digest};

use crate::short::{self, SHORT_MAX};

/// CRC32C of `data` in one call.
#[must_use]
pub fn checksum(data: &[u8]) -> u32 {
    if data.len() <= SHORT_MAX {
        if let Some(state) = short::update(crate::INITIAL_STATE, data) {
            return crate::finalize(state);
        }
    }
    crc_fast::crc32_iscsi(data)
}

/// Feeds `data` into the CRC register `state` and returns the new register.
///
/// `state` starts at [`INITIAL_STATE`](crate::INITIAL_STATE); the digest is
/// [`finalize`](crate::finalize)`(state)`.
#[must_use]
pub fn update(state: u32, data: &[u8]) -> u32 {
    if data.len() <= SHORT_MAX {
        if let Some(state) = short::update(state, data) {
            return state;
        }
    }
    crc_fast_update(state, data)
}

/// [`update`] through `crc-fast` whatever the length (what the perf lab compares the short
/// path against).
#[must_use]
pub fn crc_fast_update(state: u32, data: &[u8]) -> u32 {
    if data.is_empty() {
        return state;
    }
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
    fn the_short_path_and_crc_fast_agree_around_the_boundary() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 13 + 7) as u8).collect();
        for len in 0..200 {
            let d = &data[..len];
            assert_eq!(
                update(INITIAL_STATE, d),
                crc_fast_update(INITIAL_STATE, d),
                "{len}"
            );
            assert_eq!(
                checksum(d),
                finalize(crc_fast_update(INITIAL_STATE, d)),
                "{len}"
            );
        }
    }

    #[test]
    fn backend_is_named() {
        assert!(!backend().is_empty());
    }
}
