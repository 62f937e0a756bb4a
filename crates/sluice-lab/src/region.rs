//! The byte range a workload touches and how addresses are drawn from it: every command
//! starts on a block boundary and ends inside the range.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;

use crate::error::LabError;

/// A block-aligned byte range of a LUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte (a multiple of `block`).
    pub offset: u64,
    /// Length in bytes (a multiple of `block`, not 0).
    pub size: u64,
    /// Logical block size.
    pub block: u32,
}

impl Region {
    /// A range of `size` bytes at `offset` on a LUN of `capacity` bytes.
    pub fn new(offset: u64, size: u64, block: u32, capacity: u64) -> Result<Self, LabError> {
        let b = u64::from(block);
        if block == 0 || !aligned(offset, b) || !aligned(size, b) {
            return Err(LabError::Workload(format!(
                "offset {offset} and size {size} must be multiples of the block size {block}"
            )));
        }
        if size == 0 || offset.checked_add(size).is_none_or(|end| end > capacity) {
            return Err(LabError::Workload(format!(
                "range {offset}+{size} is empty or beyond the LUN's {capacity} bytes"
            )));
        }
        Ok(Self {
            offset,
            size,
            block,
        })
    }

    /// `n` disjoint, equal, block-aligned stripes (the tail that does not divide is unused).
    pub fn split(&self, n: usize) -> Vec<Region> {
        let b = u64::from(self.block);
        let n = n.max(1) as u64;
        let stripe = self.size / n / b * b;
        (0..n)
            .map(|i| Region {
                offset: self.offset + i * stripe,
                size: stripe,
                block: self.block,
            })
            .collect()
    }

    /// A uniformly random aligned start for a `len`-byte command (`len <= size`).
    pub fn random<R: Rng + ?Sized>(&self, len: u32, rng: &mut R) -> u64 {
        let b = u64::from(self.block);
        let slots = (self.size - u64::from(len)) / b + 1;
        self.offset + rng.gen_range(0..slots) * b
    }

    /// The next sequential start from a shared `cursor` (bytes issued so far), wrapping at
    /// the end of the range.
    pub fn sequential(&self, len: u32, cursor: &AtomicU64) -> u64 {
        let pos = cursor.fetch_add(u64::from(len), Ordering::Relaxed);
        self.place(pos % self.size, len)
    }

    /// Where a command of `len` bytes at `byte` (any value, e.g. from a trace) lands: aligned
    /// down to a block, wrapped into the range, moved back so that it ends inside.
    pub fn place(&self, byte: u64, len: u32) -> u64 {
        let b = u64::from(self.block);
        let rel = (byte % self.size) / b * b;
        let len = u64::from(len).min(self.size);
        self.offset + rel.min(self.size - len)
    }

    /// `len` rounded up to whole blocks and capped at the range size.
    pub fn round_len(&self, len: u32) -> u32 {
        let b = u64::from(self.block);
        let up = u64::from(len.max(1)).div_ceil(b) * b;
        u32::try_from(up.min(self.size)).unwrap_or(u32::MAX / self.block * self.block)
    }

    /// Whether `[start, start + len)` is inside the range and block-aligned.
    pub fn holds(&self, start: u64, len: u32) -> bool {
        let b = u64::from(self.block);
        start >= self.offset
            && start + u64::from(len) <= self.offset + self.size
            && aligned(start, b)
            && aligned(u64::from(len), b)
    }
}

/// Whether `x` is a multiple of `b` (`is_multiple_of` needs Rust 1.87; MSRV is 1.85).
#[allow(clippy::manual_is_multiple_of)]
fn aligned(x: u64, b: u64) -> bool {
    x % b == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn validation() {
        assert!(Region::new(0, 1 << 20, 512, 1 << 20).is_ok());
        assert!(Region::new(512, 1 << 20, 512, 1 << 20).is_err());
        assert!(Region::new(100, 4096, 512, 1 << 20).is_err());
        assert!(Region::new(0, 0, 512, 1 << 20).is_err());
        assert!(Region::new(0, 4096, 0, 1 << 20).is_err());
    }

    #[test]
    fn random_addresses_stay_inside_and_aligned() {
        let mut rng = SmallRng::seed_from_u64(7);
        for (off, size, block) in [
            (4096, 1 << 20, 512),
            (1 << 20, 3 << 20, 4096),
            (0, 65536, 512),
        ] {
            let r = Region::new(off, size, block, 64 << 20).unwrap();
            let mut seen_last = false;
            for i in 0..50_000u32 {
                let len = block * (1 + i % 16);
                let s = r.random(len, &mut rng);
                assert!(r.holds(s, len), "{s} {len} {r:?}");
                seen_last |= s + u64::from(len) == off + size;
            }
            assert!(seen_last, "the last slot is reachable");
        }
    }

    #[test]
    fn sequential_wraps_inside() {
        let r = Region::new(8192, 40960, 4096, 1 << 20).unwrap();
        let c = AtomicU64::new(0);
        let starts: Vec<u64> = (0..12).map(|_| r.sequential(8192, &c)).collect();
        assert_eq!(&starts[..5], &[8192, 16384, 24576, 32768, 40960]);
        // 40960 / 8192 = 5 commands per pass, then wrap.
        assert_eq!(starts[5], 8192);
        for (i, s) in starts.iter().enumerate() {
            assert!(r.holds(*s, 8192), "{i}: {s}");
        }
        // A size that does not divide the range is pulled back inside.
        let c = AtomicU64::new(0);
        for _ in 0..100 {
            let s = r.sequential(12288, &c);
            assert!(r.holds(s, 12288));
        }
    }

    #[test]
    fn trace_placement_and_stripes() {
        let r = Region::new(0, 1 << 20, 4096, 1 << 30).unwrap();
        assert_eq!(r.place(5000, 4096), 4096);
        assert_eq!(r.place((1 << 20) + 8192, 4096), 8192);
        assert_eq!(r.place((1 << 20) - 512, 8192), (1 << 20) - 8192);
        assert_eq!(r.round_len(15872), 16384);
        assert_eq!(r.round_len(512), 4096);
        let parts = r.split(3);
        assert_eq!(parts.len(), 3);
        for w in parts.windows(2) {
            assert_eq!(w[0].offset + w[0].size, w[1].offset);
            assert_eq!(w[0].size % 4096, 0);
        }
    }
}
