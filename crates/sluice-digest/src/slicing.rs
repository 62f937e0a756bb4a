//! Slicing-by-N for any N of at least 4: N tables, N bytes per step.
//!
//! The same idea as [`slicing_by_8`](crate::slicing_by_8) (see there), with the slice width as
//! a parameter so that the perf lab can ask how the speed moves with it: Slicing-by-4 uses
//! 4 KiB of tables and four independent loads per four bytes, Slicing-by-16 16 KiB and sixteen
//! per sixteen. Wider slices mean fewer dependent steps per byte but more cache for the tables.
//! Slicing-by-8 takes its tables from here but keeps its own hand-written loop (the variant
//! the paper measured).

use crate::sarwate;

/// Builds `N` tables: table 0 is Sarwate's, table `k` is table `k - 1` pushed through one more
/// zero byte (the contribution of a byte followed by `k` further bytes).
pub(crate) const fn make_tables<const N: usize>() -> [[u32; 256]; N] {
    let mut tables = [[0u32; 256]; N];
    tables[0] = sarwate::make_table();
    let mut k = 1;
    while k < N {
        let mut i = 0;
        while i < 256 {
            let prev = tables[k - 1][i];
            tables[k][i] = (prev >> 8) ^ tables[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

/// Feeds `data` into the CRC register `state` with `N` tables (`N >= 4`), `N` bytes per step,
/// and the last `len % N` bytes through Sarwate's byte step.
#[inline(always)]
pub(crate) fn update<const N: usize>(tables: &[[u32; 256]; N], state: u32, data: &[u8]) -> u32 {
    const {
        assert!(
            N >= 4,
            "the register is XORed into the first four bytes of a slice"
        )
    };
    let chunks = data.chunks_exact(N);
    let tail = chunks.remainder();
    let mut crc = state;
    for c in chunks {
        // The register meets the slice's first four bytes (little-endian: reflected CRC);
        // byte k of the slice then has N - 1 - k bytes still to travel, which table
        // N - 1 - k holds. The lookups are independent, so they overlap in the CPU.
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        let mut next = 0;
        for (k, byte) in lo.to_le_bytes().iter().chain(&c[4..]).enumerate() {
            next ^= tables[N - 1 - k][usize::from(*byte)];
        }
        crc = next;
    }
    tail.iter().fold(crc, |crc, &byte| sarwate::step(crc, byte))
}

#[cfg(test)]
mod tests {
    use crate::{slicing_by_16, slicing_by_4, slicing_by_8};

    #[test]
    fn wider_tables_extend_narrower_ones() {
        for k in 0..4 {
            assert_eq!(
                slicing_by_4::TABLES[k],
                slicing_by_8::TABLES[k],
                "table {k}"
            );
        }
        for k in 0..8 {
            assert_eq!(
                slicing_by_16::TABLES[k],
                slicing_by_8::TABLES[k],
                "table {k}"
            );
        }
    }

    #[test]
    fn check_value() {
        for checksum in [slicing_by_4::checksum, slicing_by_16::checksum] {
            assert_eq!(checksum(b"123456789"), 0xE306_9283);
            assert_eq!(checksum(b""), 0);
        }
    }
}
