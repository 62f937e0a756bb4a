//! Copying a payload and computing its CRC: apart, or in one pass.
//!
//! Joglekar, Kounavis and Berry (section 3.3, Figure 16) interleaved the copy of a received
//! payload into its SCSI buffer with the CRC over it, one word at a time, and saved 18 %
//! (Sarwate) and 32 % (Slicing-by-8) of the two operations' cycles: the copy is bound by
//! memory, the CRC by computation, and the CRC then reads bytes the copy just brought into the
//! cache. [`Method`] names the ways the lab compares: the copy alone, the CRC alone, the two in
//! sequence over the whole buffer, the two per block of [`BLOCK`] bytes (so the CRC finds each
//! block in L1, with any algorithm, including the folded carry-less multiply of `crc-fast` that
//! cannot be split into words), and the word-by-word interleaving of the paper (Sarwate,
//! Slicing-by-8 and one chain of SSE4.2 `crc32` only).

use std::fmt;

use sluice_digest::Algorithm;

use super::{sse42, LabCrc};

/// Bytes per block of [`Method::Blocked`]: well inside L1 with its destination.
pub const BLOCK: usize = 4096;

/// A way to copy and digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// The copy alone.
    Copy,
    /// The CRC alone, over the source.
    Crc,
    /// Copy all, then the CRC over the destination.
    Sequential,
    /// Per block: copy it, then the CRC over it.
    Blocked,
    /// One pass: each word loaded once, stored, digested.
    Interleaved,
}

impl Method {
    /// Every method, in report order.
    pub const ALL: [Method; 5] = [
        Method::Copy,
        Method::Crc,
        Method::Sequential,
        Method::Blocked,
        Method::Interleaved,
    ];

    /// The name in tables and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::Copy => "copy",
            Method::Crc => "crc",
            Method::Sequential => "copy-then-crc",
            Method::Blocked => "blocked",
            Method::Interleaved => "interleaved",
        }
    }

    /// The method called `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether `crc` can run this method on this CPU.
    #[must_use]
    pub fn supports(self, crc: LabCrc) -> bool {
        crc.available()
            && match self {
                Method::Interleaved => matches!(
                    crc,
                    LabCrc::Digest(Algorithm::Sarwate | Algorithm::SlicingBy8) | LabCrc::Sse42One
                ),
                _ => true,
            }
    }

    /// Runs the method: copies `src` into `dst` (same length) and/or digests, returning the CRC
    /// register (0 for the copy alone). `None` where [`supports`](Self::supports) says no.
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn run(self, crc: LabCrc, dst: &mut [u8], src: &[u8]) -> Option<u32> {
        assert_eq!(dst.len(), src.len(), "copy and CRC: lengths differ");
        if !self.supports(crc) {
            return None;
        }
        let state = sluice_digest::INITIAL_STATE;
        match self {
            Method::Copy => {
                dst.copy_from_slice(src);
                Some(0)
            }
            Method::Crc => crc.update(state, src),
            Method::Sequential => {
                dst.copy_from_slice(src);
                crc.update(state, dst)
            }
            Method::Blocked => {
                dst.chunks_mut(BLOCK)
                    .zip(src.chunks(BLOCK))
                    .try_fold(state, |reg, (d, s)| {
                        d.copy_from_slice(s);
                        crc.update(reg, d)
                    })
            }
            Method::Interleaved => match crc {
                LabCrc::Digest(Algorithm::Sarwate) => {
                    Some(sluice_digest::sarwate::copy_and_update(state, dst, src))
                }
                LabCrc::Digest(Algorithm::SlicingBy8) => Some(
                    sluice_digest::slicing_by_8::copy_and_update(state, dst, src),
                ),
                LabCrc::Sse42One => sse42::copy_update_one(state, dst, src),
                _ => None,
            },
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::timing::test_bytes;

    #[test]
    fn every_method_copies_and_digests_what_the_crc_alone_gives() {
        let src = test_bytes(3 * BLOCK + 77);
        for crc in LabCrc::ALL {
            let want = crc.update(sluice_digest::INITIAL_STATE, &src);
            for m in Method::ALL {
                let mut dst = vec![0u8; src.len()];
                let got = m.run(crc, &mut dst, &src);
                if !m.supports(crc) {
                    assert_eq!(got, None, "{m} {crc}");
                    continue;
                }
                match m {
                    Method::Copy => assert_eq!(got, Some(0)),
                    _ => assert_eq!(got, want, "{m} {crc}"),
                }
                if m != Method::Crc {
                    assert_eq!(dst, src, "{m} {crc} copies");
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for m in Method::ALL {
            assert_eq!(Method::from_name(m.name()), Some(m));
        }
    }
}
