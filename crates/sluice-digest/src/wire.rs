//! Digest bytes as iSCSI puts them on the wire.

/// The four bytes iSCSI sends for digest `crc`: least significant byte first.
///
/// Every other multi-byte iSCSI field is big-endian; the CRC32C digest is not. The RFC 3720
/// Appendix B.4 examples only match this way round (32 zero bytes give `0x8A9136AA`, which goes
/// out as `aa 36 91 8a`), and Linux, SPDK and libiscsi all agree.
///
/// ```
/// assert_eq!(sluice_digest::to_wire(0x8A91_36AA), [0xaa, 0x36, 0x91, 0x8a]);
/// ```
#[must_use]
pub const fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The digest value carried by four received bytes; the inverse of [`to_wire`].
///
/// ```
/// assert_eq!(sluice_digest::from_wire([0xaa, 0x36, 0x91, 0x8a]), 0x8A91_36AA);
/// ```
#[must_use]
pub const fn from_wire(bytes: [u8; 4]) -> u32 {
    u32::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_significant_byte_goes_first() {
        assert_eq!(to_wire(0x1122_3344), [0x44, 0x33, 0x22, 0x11]);
        assert_eq!(from_wire([0x44, 0x33, 0x22, 0x11]), 0x1122_3344);
    }

    #[test]
    fn round_trips() {
        for crc in [0, 1, 0x8A91_36AA, 0xD996_3A56, u32::MAX] {
            assert_eq!(from_wire(to_wire(crc)), crc);
        }
    }
}
