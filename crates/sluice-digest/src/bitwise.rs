//! Bit-at-a-time CRC32C: the polynomial long division itself, eight shift-and-subtract steps
//! per byte and no table.
//!
//! This is the division that Joglekar, Kounavis and Berry, "A Scalable and High Performance
//! Software iSCSI Implementation", draw as their starting point before Sarwate's table and
//! their Slicing-by-8 replace it. Far too slow for a data path, it is the oracle the table
//! builders rest on: every table in this crate is derived from this step, so a table bug shows
//! as a disagreement with this module.
//!
//! Its speed means little: LLVM recognises a bit-at-a-time CRC loop and may compile it into a
//! table lookup. With rustc 1.95 it ran exactly as fast as [`sarwate`](crate::sarwate)
//! (406 against 406 MB/s at 512 B), so a measurement of the division itself must hide the
//! polynomial from the optimiser.

use crate::POLY_REFLECTED;

/// Feeds `data` into the CRC register `state` and returns the new register.
///
/// `state` starts at [`INITIAL_STATE`](crate::INITIAL_STATE); the digest is
/// [`finalize`](crate::finalize)`(state)`.
#[must_use]
pub fn update(state: u32, data: &[u8]) -> u32 {
    update_with(state, data, POLY_REFLECTED)
}

/// [`update`] with the (bit-reflected) generator as an argument. Passed through
/// `std::hint::black_box`, it keeps the optimiser from turning the loop into a table lookup,
/// so that a measurement times the long division itself.
#[must_use]
#[inline]
pub fn update_with(state: u32, data: &[u8], poly_reflected: u32) -> u32 {
    data.iter().fold(state, |crc, &byte| {
        let mut crc = crc ^ u32::from(byte);
        for _ in 0..8 {
            // Reflected division: the lowest bit is the highest power of x; when it is set,
            // subtract (XOR) the generator.
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ poly_reflected
            } else {
                crc >> 1
            };
        }
        crc
    })
}

/// CRC32C of `data` in one call.
#[must_use]
pub fn checksum(data: &[u8]) -> u32 {
    crate::finalize(update(crate::INITIAL_STATE, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value() {
        // The CRC-32C check value (the CRC of the nine ASCII digits), and the empty message.
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
        assert_eq!(checksum(b""), 0);
    }

    #[test]
    fn one_byte_from_a_zero_register_is_sarwates_table_entry() {
        for i in 0..=255u8 {
            assert_eq!(
                update(0, &[i]),
                crate::sarwate::TABLE[usize::from(i)],
                "{i}"
            );
        }
    }
}
