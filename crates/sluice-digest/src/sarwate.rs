//! Sarwate's table-driven CRC32C: one 256-entry table, one byte per step.
//!
//! This is the "industry standard" algorithm that Joglekar, Kounavis and Berry, "A Scalable and
//! High Performance Software iSCSI Implementation", measured Slicing-by-8 against (Sarwate,
//! CACM 1988). It is portable and simple, but every byte costs a dependent load, so
//! it runs at several cycles per byte. The table is built at compile time.

use crate::POLY_REFLECTED;

/// Builds the Sarwate table: entry `i` is the register after feeding byte `i` into a zero
/// register, i.e. the remainder of `i·x³²` modulo the (reflected) Castagnoli polynomial.
///
/// `const fn` so the table is computed by the compiler, not at start-up.
pub(crate) const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            // Reflected long division: the lowest bit is the highest power of x.
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

/// The 256-entry lookup table (1 KiB), built at compile time.
///
/// A `static` rather than a `const` so that there is one copy in memory, not one per use.
pub static TABLE: [u32; 256] = make_table();

/// Feeds `data` into the CRC register `state` and returns the new register.
///
/// `state` starts at [`INITIAL_STATE`](crate::INITIAL_STATE); the digest is
/// [`finalize`](crate::finalize)`(state)`.
#[must_use]
pub fn update(state: u32, data: &[u8]) -> u32 {
    data.iter().fold(state, |crc, &byte| step(crc, byte))
}

/// One Sarwate step. The index is a `u8` widened to `usize`, so the lookup cannot go out of
/// bounds and the compiler emits no bounds check.
#[inline(always)]
pub(crate) fn step(crc: u32, byte: u8) -> u32 {
    TABLE[usize::from(crc as u8 ^ byte)] ^ (crc >> 8)
}

/// CRC32C of `data` in one call.
#[must_use]
pub fn checksum(data: &[u8]) -> u32 {
    crate::finalize(update(crate::INITIAL_STATE, data))
}

/// Copies `src` into `dst` (of the same length) and feeds the bytes into `state` in the same
/// pass, a byte at a time (the interleaved copy-CRC of Joglekar, Kounavis and Berry, section
/// 3.3, with Sarwate's step). Returns the register.
///
/// # Panics
/// If the lengths differ.
#[must_use]
pub fn copy_and_update(state: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    assert_eq!(dst.len(), src.len(), "copy_and_update: lengths differ");
    dst.iter_mut().zip(src).fold(state, |crc, (d, &b)| {
        *d = b;
        step(crc, b)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_and_update_copies_and_digests_like_update() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 13 + 5) as u8).collect();
        let mut dst = vec![0u8; 300];
        assert_eq!(copy_and_update(!0, &mut dst, &src), update(!0, &src));
        assert_eq!(dst, src);
    }

    #[test]
    fn table_matches_published_entries() {
        // Entries of the well-known reflected CRC32C table (the same values appear in every
        // table-driven CRC32C, e.g. Linux's and SPDK's).
        assert_eq!(TABLE[0], 0x0000_0000);
        assert_eq!(TABLE[1], 0xF26B_8303);
        assert_eq!(TABLE[2], 0xE13B_70F7);
        assert_eq!(TABLE[255], 0xAD7D_5351);
        // Byte 0x80 is x⁷ reflected: one division step leaves exactly the polynomial.
        assert_eq!(TABLE[0x80], POLY_REFLECTED);
    }

    #[test]
    fn check_value() {
        assert_eq!(checksum(b"123456789"), 0xE306_9283);
        assert_eq!(checksum(b""), 0);
    }
}
