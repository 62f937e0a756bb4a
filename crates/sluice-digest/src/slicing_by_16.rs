//! Slicing-by-16 CRC32C: 16 tables, 16 bytes per step (see [`slicing_by_8`](crate::slicing_by_8) for
//! the method, shared with Slicing-by-8).

use crate::slicing;

/// The 16 lookup tables (16 KiB), built at compile time.
pub static TABLES: [[u32; 256]; 16] = slicing::make_tables::<16>();

/// Feeds `data` into the CRC register `state` and returns the new register.
///
/// `state` starts at [`INITIAL_STATE`](crate::INITIAL_STATE); the digest is
/// [`finalize`](crate::finalize)`(state)`.
#[must_use]
pub fn update(state: u32, data: &[u8]) -> u32 {
    slicing::update(&TABLES, state, data)
}

/// CRC32C of `data` in one call.
#[must_use]
pub fn checksum(data: &[u8]) -> u32 {
    crate::finalize(update(crate::INITIAL_STATE, data))
}
