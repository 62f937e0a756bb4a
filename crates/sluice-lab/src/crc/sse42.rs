//! CRC32C with the SSE4.2 `crc32` instruction, one stream and three interleaved streams.
//!
//! The instruction computes exactly iSCSI's CRC (Castagnoli, bit-reflected, no final
//! complement), eight bytes at a time, with a latency of about three cycles and a throughput of
//! one per cycle. One stream is a chain of dependent instructions and so runs at a third of
//! what the unit can do; three streams over three parts of the buffer keep it busy, and the
//! three registers are joined afterwards by multiplying by `x^(8n)` modulo the polynomial
//! (`sluice_digest::Appender`, a few table lookups). The perf lab times both against the
//! table-driven algorithms and the folded carry-less multiply of `crc-fast`.
#![allow(unsafe_code)] // the SSE4.2 intrinsics; see the SAFETY comments

use std::sync::OnceLock;

use sluice_digest::Appender;

/// Bytes per stream in one interleaved block: large enough that joining three registers (two
/// `Appender::append` calls) is noise beside the block, small enough that short buffers still
/// use three streams.
pub const STREAM_BYTES: usize = 1024;

/// Whether this CPU has SSE4.2 (always false off x86-64).
#[must_use]
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("sse4.2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Feeds `data` into the register `state` with one chain of `crc32` instructions. `None`
/// when the CPU lacks SSE4.2.
#[must_use]
pub fn update_one(state: u32, data: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: the CPU has SSE4.2 (checked just above), the only precondition of a
        // `target_feature(enable = "sse4.2")` function.
        return Some(unsafe { x86::one_stream(state, data) });
    }
    let _ = (state, data);
    None
}

/// Feeds `data` into the register `state` with three interleaved chains of `crc32`
/// instructions over blocks of `3 * STREAM_BYTES`, the rest with one chain. `None` when the
/// CPU lacks SSE4.2.
#[must_use]
pub fn update_three(state: u32, data: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if available() {
        static JOIN: OnceLock<Appender> = OnceLock::new();
        let join = JOIN.get_or_init(|| Appender::new(STREAM_BYTES as u64));
        // SAFETY: as in `update_one`: SSE4.2 is present.
        return Some(unsafe { x86::three_streams(state, data, join) });
    }
    let _ = (state, data);
    None
}

/// Copies `src` into `dst` (same length) and feeds the bytes into `state` with one chain of
/// `crc32` instructions in the same pass: each word is loaded once, stored and digested (the
/// interleaved copy-CRC). `None` when the CPU lacks SSE4.2.
///
/// # Panics
/// If the lengths differ.
#[must_use]
pub fn copy_update_one(state: u32, dst: &mut [u8], src: &[u8]) -> Option<u32> {
    assert_eq!(dst.len(), src.len(), "copy_update_one: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: as in `update_one`: SSE4.2 is present.
        return Some(unsafe { x86::copy_one_stream(state, dst, src) });
    }
    let _ = (state, dst, src);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};

    use sluice_digest::Appender;

    use super::STREAM_BYTES;

    fn word(bytes: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(w)
    }

    /// One dependent chain, eight bytes per instruction, the tail a byte at a time.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn one_stream(state: u32, data: &[u8]) -> u32 {
        let chunks = data.chunks_exact(8);
        let tail = chunks.remainder();
        let mut crc = u64::from(state);
        for c in chunks {
            crc = _mm_crc32_u64(crc, word(c));
        }
        // The instruction leaves the upper half zero: the register is the low 32 bits.
        tail.iter().fold(crc as u32, |crc, &b| _mm_crc32_u8(crc, b))
    }

    /// [`one_stream`] that also stores each word into `dst`.
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn copy_one_stream(state: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        let mut out = dst.chunks_exact_mut(8);
        let mut inp = src.chunks_exact(8);
        let mut crc = u64::from(state);
        for (d, c) in (&mut out).zip(&mut inp) {
            let w = word(c);
            d.copy_from_slice(&w.to_le_bytes());
            crc = _mm_crc32_u64(crc, w);
        }
        let mut crc = crc as u32;
        for (d, &b) in out.into_remainder().iter_mut().zip(inp.remainder()) {
            *d = b;
            crc = _mm_crc32_u8(crc, b);
        }
        crc
    }

    /// Three chains per block: the first continues `state`, the other two start from a zero
    /// register, and linearity joins them: reg(s, A‖B) = reg(s, A)·x^(8|B|) ⊕ reg(0, B).
    #[target_feature(enable = "sse4.2")]
    pub(super) unsafe fn three_streams(state: u32, data: &[u8], join: &Appender) -> u32 {
        let blocks = data.chunks_exact(3 * STREAM_BYTES);
        let rest = blocks.remainder();
        let mut crc = state;
        for block in blocks {
            let (a, bc) = block.split_at(STREAM_BYTES);
            let (b, c) = bc.split_at(STREAM_BYTES);
            let (mut ra, mut rb, mut rc) = (u64::from(crc), 0u64, 0u64);
            for i in (0..STREAM_BYTES).step_by(8) {
                ra = _mm_crc32_u64(ra, word(&a[i..]));
                rb = _mm_crc32_u64(rb, word(&b[i..]));
                rc = _mm_crc32_u64(rc, word(&c[i..]));
            }
            crc = join.append(join.append(ra as u32, rb as u32), rc as u32);
        }
        // SAFETY: this function runs only where SSE4.2 is present (its own precondition).
        unsafe { one_stream(crc, rest) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_digest::{finalize, Algorithm, INITIAL_STATE};

    fn data(len: usize) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect()
    }

    #[test]
    fn both_agree_with_the_table_driven_crc_at_every_length_around_the_blocks() {
        if !available() {
            eprintln!("no SSE4.2 on this CPU: nothing to compare");
            return;
        }
        let buf = data(4 * 3 * STREAM_BYTES + 17);
        let lengths = (0..64)
            .chain((3 * STREAM_BYTES - 9)..(3 * STREAM_BYTES + 9))
            .chain([2 * 3 * STREAM_BYTES, buf.len()]);
        for len in lengths {
            let want = Algorithm::SlicingBy8.update(INITIAL_STATE, &buf[..len]);
            assert_eq!(
                update_one(INITIAL_STATE, &buf[..len]),
                Some(want),
                "one, {len}"
            );
            assert_eq!(
                update_three(INITIAL_STATE, &buf[..len]),
                Some(want),
                "three, {len}"
            );
        }
        // RFC 3720 appendix B.4: 32 bytes of zeros.
        let zeros = update_three(INITIAL_STATE, &[0u8; 32]).map(finalize);
        assert_eq!(
            zeros.map(sluice_digest::to_wire),
            Some([0xaa, 0x36, 0x91, 0x8a])
        );
    }

    #[test]
    fn the_copying_chain_copies_and_agrees() {
        if !available() {
            return;
        }
        let buf = data(1000);
        for len in [0, 7, 8, 9, 1000] {
            let mut dst = vec![0u8; len];
            let crc = copy_update_one(INITIAL_STATE, &mut dst, &buf[..len]);
            assert_eq!(crc, update_one(INITIAL_STATE, &buf[..len]), "{len}");
            assert_eq!(dst, &buf[..len]);
        }
    }

    #[test]
    fn a_register_carries_over_between_calls() {
        if !available() {
            return;
        }
        let buf = data(10_000);
        let (a, b) = buf.split_at(4321);
        let split = update_three(INITIAL_STATE, a).and_then(|s| update_three(s, b));
        assert_eq!(split, update_one(INITIAL_STATE, &buf));
    }
}
