//! CRC32C (Castagnoli) for iSCSI header and data digests.
//!
//! iSCSI protects the header and the data segment of a PDU with separate CRC32C digests
//! (RFC 7143 §13.1, generator `0x11EDC6F41`; worked examples in RFC 3720 Appendix B.4).
//! This crate is the one place the protocol core calls for them:
//!
//! * [`crc32c`] computes a digest in one call, and [`Crc32c`] computes it over data spread
//!   across several buffers (header + AHS, or a data segment that arrives in pieces).
//! * [`combine`] and [`Appender`] give the CRC of a concatenation from its pieces' CRCs (a
//!   cache of per-block CRCs digests a large read without reading its bytes).
//! * [`to_wire`] / [`from_wire`] turn a digest into the four bytes iSCSI sends, and back.
//!   The byte order is the classic interoperability bug, so it lives in exactly one place.
//!
//! The data path uses the hardware-accelerated [`crc_fast`] crate ([`hardware`]). Portable
//! implementations sit beside it: [`bitwise`] (the long division, no table), [`sarwate`] (one
//! table, a byte at a time), and [`slicing_by_4`], [`slicing_by_8`] and [`slicing_by_16`] (N
//! tables, N bytes at a time; Slicing-by-8 after Joglekar, Kounavis and Berry, "A Scalable and
//! High Performance Software iSCSI Implementation"). They exist so the perf lab can compare
//! them by name through [`Algorithm`], and so the tests have six implementations that must
//! agree.
//!
//! ```
//! use sluice_digest::{crc32c, to_wire, Crc32c};
//!
//! // RFC 3720 B.4: 32 bytes of zeros.
//! assert_eq!(to_wire(crc32c(&[0u8; 32])), [0xaa, 0x36, 0x91, 0x8a]);
//!
//! let mut stream = Crc32c::new();
//! stream.update(&[0u8; 20]);
//! stream.update(&[0u8; 12]);
//! assert_eq!(stream.finish(), crc32c(&[0u8; 32]));
//! ```
// `unsafe` only in `short` (the SSE4.2 `crc32` instruction, after checking the CPU has it).
#![deny(unsafe_code)]

mod algorithm;
pub mod bitwise;
mod combine;
pub mod hardware;
pub mod sarwate;
mod short;
mod slicing;
pub mod slicing_by_16;
pub mod slicing_by_4;
pub mod slicing_by_8;
mod stream;
pub mod vectors;
mod wire;

#[cfg(test)]
mod tests;

pub use algorithm::{Algorithm, ParseAlgorithmError};
pub use combine::{combine, Appender};
pub use stream::Crc32c;
pub use wire::{from_wire, to_wire};

/// The Castagnoli polynomial `0x1EDC6F41` bit-reflected, because iSCSI feeds each byte least
/// significant bit first (RFC 3720 §12.1: "Big Endian on bytes / Little Endian on bits").
pub const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// CRC register value before any byte is processed.
///
/// RFC 3720 §12.1: "the CRC register must be initialized to all 1s". Pass it as the first
/// `state` to [`Algorithm::update`].
pub const INITIAL_STATE: u32 = !0;

/// Turns a CRC register (as returned by [`Algorithm::update`]) into the digest value.
///
/// RFC 3720 §12.1: "the CRC bits must be complemented before transmission".
#[must_use]
pub const fn finalize(state: u32) -> u32 {
    state ^ !0
}

/// CRC32C of `data` in one call, on the fastest path this CPU offers.
///
/// Send it with [`to_wire`]; a received digest is read with [`from_wire`].
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    // The perf lab's cost probe (nothing unless built with `cost-probes`).
    let _probe = sluice_probe::span(sluice_probe::Stage::Crc);
    hardware::checksum(data)
}
