//! Verify data: every 8-byte word is a function of its byte address on the LUN and a tag
//! unique to the write, so a read-back that returns stale, misplaced or corrupted data is
//! caught without keeping a copy.

fn mix(mut z: u64) -> u64 {
    // splitmix64's finalizer.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn word(addr: u64, tag: u64) -> [u8; 8] {
    mix(addr ^ tag.rotate_left(32)).to_le_bytes()
}

/// Fills `buf` (a multiple of 8 bytes) with the pattern for LUN byte `offset` and `tag`.
pub fn fill_pattern(buf: &mut [u8], offset: u64, tag: u64) {
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(offset + 8 * i as u64, tag));
    }
}

/// The index of the first byte of `data` that differs from the pattern, if any.
pub fn first_mismatch(data: &[u8], offset: u64, tag: u64) -> Option<usize> {
    data.chunks_exact(8)
        .enumerate()
        .find(|(i, chunk)| *chunk != word(offset + 8 * *i as u64, tag))
        .map(|(i, _)| 8 * i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detection() {
        let mut b = vec![0u8; 4096];
        fill_pattern(&mut b, 8192, 7);
        assert_eq!(first_mismatch(&b, 8192, 7), None);
        assert_eq!(first_mismatch(&b, 8192, 8), Some(0), "another write's data");
        assert_eq!(first_mismatch(&b, 4096, 7), Some(0), "misplaced data");
        b[1000] ^= 1;
        assert_eq!(first_mismatch(&b, 8192, 7), Some(1000 / 8 * 8));
    }
}
