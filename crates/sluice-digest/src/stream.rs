//! CRC32C over data that arrives in several pieces.

use crate::{finalize, Algorithm, INITIAL_STATE};

/// A CRC32C computation fed piece by piece.
///
/// A PDU's header digest covers the BHS and any AHS, and its data digest covers a segment that
/// may arrive across several reads; this type lets the caller feed each piece as it comes. The
/// result equals [`crc32c`](crate::crc32c) of the concatenation, however the data was split.
///
/// `Clone` forks the computation: useful to digest a common prefix once.
///
/// ```
/// use sluice_digest::{crc32c, Algorithm, Crc32c};
///
/// let mut crc = Crc32c::new();
/// crc.update(b"1234");
/// crc.update(b"56789");
/// assert_eq!(crc.finish(), 0xE306_9283);
///
/// let mut table = Crc32c::with_algorithm(Algorithm::Sarwate);
/// table.update(b"123456789");
/// assert_eq!(table.finish(), crc32c(b"123456789"));
/// ```
// Not `Copy`: an accidental copy would silently drop the updates made to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crc32c {
    state: u32,
    algorithm: Algorithm,
}

impl Crc32c {
    /// A new computation on the hardware-accelerated path.
    #[must_use]
    pub const fn new() -> Self {
        Self::with_algorithm(Algorithm::Hardware)
    }

    /// A new computation on the chosen implementation.
    #[must_use]
    pub const fn with_algorithm(algorithm: Algorithm) -> Self {
        Self {
            state: INITIAL_STATE,
            algorithm,
        }
    }

    /// Feeds the next piece of data.
    pub fn update(&mut self, data: &[u8]) {
        if data.is_empty() {
            // The padding of a PDU whose data is a whole number of words: nothing to do.
            return;
        }
        let _probe = sluice_probe::span(sluice_probe::Stage::Crc);
        self.state = self.algorithm.update(self.state, data);
    }

    /// The CRC32C of everything fed so far. Does not consume or reset: more data may follow.
    #[must_use]
    pub const fn finish(&self) -> u32 {
        finalize(self.state)
    }

    /// The implementation this computation runs on.
    #[must_use]
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_gives_zero() {
        // Complemented all-ones register: the CRC of nothing is 0.
        assert_eq!(Crc32c::new().finish(), 0);
        assert_eq!(Crc32c::default(), Crc32c::new());
    }

    #[test]
    fn finish_does_not_consume() {
        let mut crc = Crc32c::new();
        crc.update(b"12345");
        let _ = crc.finish();
        crc.update(b"6789");
        assert_eq!(crc.finish(), 0xE306_9283);
    }

    #[test]
    fn clone_forks_the_computation() {
        let mut prefix = Crc32c::new();
        prefix.update(b"1234");
        let mut a = prefix.clone();
        let mut b = prefix;
        a.update(b"56789");
        b.update(b"5678X");
        assert_eq!(a.finish(), 0xE306_9283);
        assert_ne!(a.finish(), b.finish());
    }
}
