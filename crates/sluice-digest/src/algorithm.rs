//! Choosing an implementation by name, for the perf lab and the command line.

use std::fmt;
use std::str::FromStr;

use crate::{bitwise, hardware, sarwate, slicing_by_16, slicing_by_4, slicing_by_8};

/// One of the CRC32C implementations. All give identical results; they differ in speed.
///
/// Names accepted by [`FromStr`] (any ASCII case): `hw` or `hardware`, `slicing-by-16` or
/// `sb16`, `slicing-by-8` or `sb8`, `slicing-by-4` or `sb4`, `sarwate`, `bitwise`.
/// [`Display`](fmt::Display) prints the long form.
///
/// ```
/// use sluice_digest::Algorithm;
///
/// let alg: Algorithm = "sb8".parse()?;
/// assert_eq!(alg, Algorithm::SlicingBy8);
/// assert_eq!(alg.to_string(), "slicing-by-8");
/// assert_eq!(alg.checksum(b"123456789"), 0xE306_9283);
/// # Ok::<(), sluice_digest::ParseAlgorithmError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// CPU CRC/carry-less-multiply instructions through `crc-fast` ([`hardware`]); the default.
    #[default]
    Hardware,
    /// Sixteen tables, sixteen bytes per step ([`slicing_by_16`]).
    SlicingBy16,
    /// Eight tables, eight bytes per step ([`slicing_by_8`]).
    SlicingBy8,
    /// Four tables, four bytes per step ([`slicing_by_4`]).
    SlicingBy4,
    /// One table, one byte per step ([`sarwate`]).
    Sarwate,
    /// No table, one bit per step: the long division ([`bitwise`]); the oracle.
    Bitwise,
}

/// Every name [`FromStr`] accepts, and what it means.
const NAMES: [(&str, Algorithm); 11] = [
    ("hw", Algorithm::Hardware),
    ("hardware", Algorithm::Hardware),
    ("slicing-by-16", Algorithm::SlicingBy16),
    ("sb16", Algorithm::SlicingBy16),
    ("slicing-by-8", Algorithm::SlicingBy8),
    ("sb8", Algorithm::SlicingBy8),
    ("slicing-by-4", Algorithm::SlicingBy4),
    ("sb4", Algorithm::SlicingBy4),
    ("sarwate", Algorithm::Sarwate),
    ("bitwise", Algorithm::Bitwise),
    ("bit", Algorithm::Bitwise),
];

impl Algorithm {
    /// Every implementation, fastest first (as measured in docs/performance.md); for
    /// benchmarks and cross-checks.
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Hardware,
        Algorithm::SlicingBy16,
        Algorithm::SlicingBy8,
        Algorithm::SlicingBy4,
        Algorithm::Sarwate,
        Algorithm::Bitwise,
    ];

    /// The canonical name, as printed by `Display` and accepted by `FromStr`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Hardware => "hardware",
            Algorithm::SlicingBy16 => "slicing-by-16",
            Algorithm::SlicingBy8 => "slicing-by-8",
            Algorithm::SlicingBy4 => "slicing-by-4",
            Algorithm::Sarwate => "sarwate",
            Algorithm::Bitwise => "bitwise",
        }
    }

    /// CRC32C of `data` in one call.
    #[must_use]
    pub fn checksum(&self, data: &[u8]) -> u32 {
        crate::finalize(self.update(crate::INITIAL_STATE, data))
    }

    /// Feeds `data` into the CRC register `state` and returns the new register.
    ///
    /// Start from [`INITIAL_STATE`](crate::INITIAL_STATE) and turn the last register into the
    /// digest with [`finalize`](crate::finalize). All implementations use the same register
    /// convention, so a computation may even switch implementation half way. [`Crc32c`](crate::Crc32c)
    /// wraps this in a type.
    #[must_use]
    pub fn update(&self, state: u32, data: &[u8]) -> u32 {
        match self {
            Algorithm::Hardware => hardware::update(state, data),
            Algorithm::SlicingBy16 => slicing_by_16::update(state, data),
            Algorithm::SlicingBy8 => slicing_by_8::update(state, data),
            Algorithm::SlicingBy4 => slicing_by_4::update(state, data),
            Algorithm::Sarwate => sarwate::update(state, data),
            Algorithm::Bitwise => bitwise::update(state, data),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = ParseAlgorithmError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NAMES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
            .map(|&(_, alg)| alg)
            .ok_or_else(|| ParseAlgorithmError {
                input: s.to_owned(),
            })
    }
}

/// A name that is not one of the CRC32C implementations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseAlgorithmError {
    input: String,
}

impl fmt::Display for ParseAlgorithmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown CRC32C algorithm {:?} (expected one of: {})",
            self.input,
            NAMES.map(|(name, _)| name).join(", ")
        )
    }
}

impl std::error::Error for ParseAlgorithmError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_name() {
        for (name, alg) in [
            ("hw", Algorithm::Hardware),
            ("hardware", Algorithm::Hardware),
            ("HW", Algorithm::Hardware),
            ("sarwate", Algorithm::Sarwate),
            ("slicing-by-8", Algorithm::SlicingBy8),
            ("sb8", Algorithm::SlicingBy8),
            ("SB8", Algorithm::SlicingBy8),
            ("slicing-by-4", Algorithm::SlicingBy4),
            ("sb4", Algorithm::SlicingBy4),
            ("slicing-by-16", Algorithm::SlicingBy16),
            ("SB16", Algorithm::SlicingBy16),
            ("bitwise", Algorithm::Bitwise),
            ("bit", Algorithm::Bitwise),
        ] {
            assert_eq!(name.parse::<Algorithm>(), Ok(alg), "{name}");
        }
    }

    #[test]
    fn display_round_trips() {
        for alg in Algorithm::ALL {
            assert_eq!(alg.to_string().parse::<Algorithm>(), Ok(alg));
        }
    }

    #[test]
    fn rejects_unknown_names_and_says_which() {
        let err = "crc32".parse::<Algorithm>().err();
        assert!(err.is_some_and(|e| e.to_string().contains("\"crc32\"")));
        assert!("".parse::<Algorithm>().is_err());
        assert!(" sb8".parse::<Algorithm>().is_err());
    }

    #[test]
    fn default_is_hardware() {
        assert_eq!(Algorithm::default(), Algorithm::Hardware);
    }
}
