//! Sequence numbers and identifiers.
//!
//! CmdSN, StatSN, DataSN and R2TSN are 32-bit counters that wrap modulo 2^32. RFC 7143 section
//! 4.2.2.1 prescribes RFC 1982 serial number arithmetic for CmdSN, ExpCmdSN and MaxCmdSN; sluice
//! compares the others the same way, so `a < b` always means "b is ahead of a by less than
//! 2^31" (the only sound order for a counter that wraps).
//! The identifiers are newtypes so that an ITT can never be passed where a TTT is expected.

use std::cmp::Ordering;
use std::fmt;

/// A 32-bit serial number compared per RFC 1982 (SERIAL_BITS = 32).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// Wraps a raw value.
    pub const fn new(value: u32) -> Self {
        Self(value)
    }

    /// The raw value as carried on the wire.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// `self + n` with wrap-around (RFC 1982 section 3.1 addition; `n` below 2^31).
    #[must_use]
    pub const fn add(self, n: u32) -> Self {
        Self(self.0.wrapping_add(n))
    }

    /// The successor, wrapping at 2^32.
    #[must_use]
    pub const fn next(self) -> Self {
        self.add(1)
    }

    /// RFC 1982 comparison. `None` when the two are exactly 2^31 apart, which the RFC leaves
    /// undefined.
    pub fn serial_cmp(self, other: Self) -> Option<Ordering> {
        let diff = other.0.wrapping_sub(self.0);
        match diff {
            0 => Some(Ordering::Equal),
            d if d < 0x8000_0000 => Some(Ordering::Less),
            0x8000_0000 => None,
            _ => Some(Ordering::Greater),
        }
    }

    /// `self < other` in serial arithmetic.
    pub fn lt(self, other: Self) -> bool {
        self.serial_cmp(other) == Some(Ordering::Less)
    }

    /// `self <= other` in serial arithmetic.
    pub fn le(self, other: Self) -> bool {
        matches!(
            self.serial_cmp(other),
            Some(Ordering::Less | Ordering::Equal)
        )
    }

    /// `self > other` in serial arithmetic.
    pub fn gt(self, other: Self) -> bool {
        other.lt(self)
    }

    /// `self >= other` in serial arithmetic.
    pub fn ge(self, other: Self) -> bool {
        other.le(self)
    }

    /// Whether `self` lies in the inclusive window `[low, high]` (e.g. ExpCmdSN..=MaxCmdSN).
    ///
    /// RFC 7143 section 4.2.2.1: an empty window is signalled by MaxCmdSN = ExpCmdSN - 1, in which
    /// case nothing is inside.
    pub fn in_window(self, low: Self, high: Self) -> bool {
        low.le(self) && self.le(high)
    }

    /// How far `self` is ahead of `base` (wrapping distance), for window sizes.
    pub const fn distance_from(self, base: Self) -> u32 {
        self.0.wrapping_sub(base.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Initiator Task Tag. 0xffffffff is reserved (RFC 7143 section 11.2.1.8).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct Itt(pub u32);

impl Itt {
    /// The reserved value, used by unsolicited NOP-In and SNACK-less PDUs.
    pub const RESERVED: Itt = Itt(0xffff_ffff);
}

/// Target Transfer Tag. 0xffffffff means "no transfer tag" (RFC 7143 section 11.7.4).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct Ttt(pub u32);

impl Ttt {
    /// The reserved value: no target transfer tag.
    pub const RESERVED: Ttt = Ttt(0xffff_ffff);
}

/// Initiator Session ID: 6 bytes (T, A, B, C, D fields of RFC 7143 section 11.12.5).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct Isid(pub [u8; 6]);

impl Isid {
    /// The two-bit T field (format type): 0 OUI, 1 EN, 2 random, 3 reserved.
    pub const fn format_type(self) -> u8 {
        self.0[0] >> 6
    }
}

impl fmt::Display for Isid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Target Session Identifying Handle. 0 in a login request means "new session".
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct Tsih(pub u16);

impl Tsih {
    /// The value an initiator sends to open a new session.
    pub const NEW_SESSION: Tsih = Tsih(0);
}

/// The raw 8-byte LUN field as carried in the BHS (SAM-5 LUN structure).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct Lun(pub u64);

impl Lun {
    /// Encodes a LUN number per SAM: peripheral addressing below 256, flat space addressing
    /// up to 16383.
    pub const fn from_number(n: u16) -> Self {
        if n < 256 {
            Lun((n as u64) << 48)
        } else {
            Lun((((n as u64) & 0x3fff) | 0x4000) << 48)
        }
    }

    /// The LUN number for peripheral (00b) and flat (01b) addressing, `None` for other methods
    /// or when the trailing levels are not zero.
    pub const fn number(self) -> Option<u16> {
        if self.0 & 0x0000_ffff_ffff_ffff != 0 {
            return None;
        }
        let first = (self.0 >> 48) as u16;
        match first >> 14 {
            0 => {
                if first >> 8 == 0 {
                    Some(first & 0xff)
                } else {
                    None
                }
            }
            1 => Some(first & 0x3fff),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_order_wraps() {
        let max = SeqNum(u32::MAX);
        assert!(max.lt(SeqNum(0)));
        assert!(SeqNum(0).gt(max));
        assert!(SeqNum(5).lt(SeqNum(6)));
        assert!(SeqNum(6).ge(SeqNum(6)));
        assert_eq!(SeqNum(0).serial_cmp(SeqNum(0x8000_0000)), None);
    }

    #[test]
    fn empty_window_holds_nothing() {
        let exp = SeqNum(10);
        let max = SeqNum(9);
        assert!(!SeqNum(10).in_window(exp, max));
        assert!(!SeqNum(9).in_window(exp, max));
        assert!(SeqNum(10).in_window(exp, SeqNum(10)));
        assert!(SeqNum(0).in_window(SeqNum(u32::MAX - 1), SeqNum(3)));
    }

    #[test]
    fn lun_encodings_round_trip() {
        for n in [0u16, 1, 255, 256, 1000, 16383] {
            assert_eq!(Lun::from_number(n).number(), Some(n));
        }
        assert_eq!(Lun::from_number(3).0, 0x0003_0000_0000_0000);
        assert_eq!(Lun::from_number(300).0, 0x412c_0000_0000_0000);
        assert_eq!(Lun(0x0003_0000_0000_0001).number(), None);
    }
}
