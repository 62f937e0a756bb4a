//! The logical unit's own designators (SPC-4 7.8.6): reported in the Device Identification
//! VPD page, and matched against the identification descriptors of EXTENDED COPY, which
//! name the LUs a copy reads and writes.

use crate::field::put_ascii;
use crate::lu::LuConfig;

/// CODE SET: binary.
pub(crate) const BINARY: u8 = 0x01;
/// CODE SET: ASCII.
pub(crate) const ASCII: u8 = 0x02;
/// DESIGNATOR TYPE: T10 vendor ID based.
pub(crate) const T10_VENDOR_ID: u8 = 0x01;
/// DESIGNATOR TYPE: NAA.
pub(crate) const NAA: u8 = 0x03;

/// The NAA designator: the first 8 bytes of a 16-byte NAA IEEE Registered Extended
/// designator when the configured id's top nibble is 6, else an 8-byte NAA IEEE Registered
/// designator with the top nibble forced to 5.
pub(crate) fn naa(cfg: &LuConfig) -> Vec<u8> {
    if cfg.naa_id >> 60 == 6 {
        let mut id = vec![0u8; 16];
        id[..8].copy_from_slice(&cfg.naa_id.to_be_bytes());
        id
    } else {
        let naa = (cfg.naa_id & 0x0FFF_FFFF_FFFF_FFFF) | (5 << 60);
        naa.to_be_bytes().to_vec()
    }
}

/// The T10 vendor ID designator: vendor (8), product (16), serial (at most 200 characters).
pub(crate) fn t10(cfg: &LuConfig) -> Vec<u8> {
    let mut t10 = vec![0u8; 24 + cfg.serial.len().min(200)];
    put_ascii(&mut t10[..8], &cfg.vendor);
    put_ascii(&mut t10[8..24], &cfg.product);
    put_ascii(&mut t10[24..], &cfg.serial);
    t10
}

/// Whether a designator with this CODE SET, DESIGNATOR TYPE and value names the LU (an
/// association with the logical unit is the caller's to check).
pub(crate) fn names(cfg: &LuConfig, code_set: u8, designator_type: u8, id: &[u8]) -> bool {
    match (code_set, designator_type) {
        (BINARY, NAA) => naa(cfg) == id,
        (ASCII, T10_VENDOR_ID) => t10(cfg) == id,
        _ => false,
    }
}
