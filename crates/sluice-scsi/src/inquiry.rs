//! Standard INQUIRY data (SPC-4 6.6.2).

use bytes::BytesMut;

use crate::field::{be16, put_ascii, put_truncated, u8_at};
use crate::lu::{CmdResult, LuConfig};
use crate::sense::invalid_field_in_cdb;

/// Peripheral byte of a direct-access block device (qualifier 000b, type 00h).
pub(crate) const DIRECT_ACCESS: u8 = 0x00;
/// Peripheral byte of a well-known logical unit (qualifier 000b, type 1Eh).
pub(crate) const WELL_KNOWN_LU: u8 = 0x1E;
/// Peripheral byte for a LUN with no logical unit (qualifier 011b, type 1Fh).
pub(crate) const NO_LU: u8 = 0x7F;

/// VERSION: the device claims SPC-4.
pub(crate) const VERSION_SPC4: u8 = 0x06;

/// Version descriptors (SPC-4 table 150): SAM-5, SPC-4, SBC-3, iSCSI (no version claimed).
/// libiscsi treats the LU as SBC-3 capable only if 04C0h is present.
pub(crate) const VERSION_DESCRIPTORS: [u16; 4] = [0x00A0, 0x0460, 0x04C0, 0x0960];

/// Length of the standard data: 58 bytes plus eight version descriptor slots.
const STANDARD_LEN: usize = 74;

/// Builds the standard INQUIRY data for `peripheral` (identity strings from `cfg`, or
/// "SLUICE" defaults).
pub(crate) fn standard_data(cfg: Option<&LuConfig>, peripheral: u8) -> [u8; STANDARD_LEN] {
    let mut d = [0u8; STANDARD_LEN];
    d[0] = peripheral;
    // RMB: only a removable direct-access LU reports it (never the well-known or absent LU).
    d[1] = match cfg {
        Some(c) if c.removable && peripheral == DIRECT_ACCESS => 0x80,
        _ => 0x00,
    };
    d[2] = VERSION_SPC4;
    d[3] = 0x10 | 0x02; // HISUP=1, RESPONSE DATA FORMAT=2 (NORMACA=0)
    d[4] = (STANDARD_LEN - 5) as u8;
    // SCCS, ACC, 3PC and PROTECT 0. TPGS=11b: target port groups with implicit and explicit
    // (SET TARGET PORT GROUPS) asymmetric access (SPC-4 6.6.2, 5.15); not for the well-known
    // or an absent LU.
    d[5] = if cfg.is_some() && peripheral == DIRECT_ACCESS {
        0x30
    } else {
        0x00
    };
    d[6] = 0x00;
    d[7] = 0x02; // CMDQUE=1
    let (vendor, product, revision) = match cfg {
        Some(c) => (c.vendor.as_str(), c.product.as_str(), c.revision.as_str()),
        None => ("SLUICE", "", ""),
    };
    put_ascii(&mut d[8..16], vendor);
    put_ascii(&mut d[16..32], product);
    put_ascii(&mut d[32..36], revision);
    for (i, v) in VERSION_DESCRIPTORS.iter().enumerate() {
        let at = 58 + 2 * i;
        d[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    if cfg.is_some() && peripheral == DIRECT_ACCESS {
        // 3PC: the LU is a copy manager (EXTENDED COPY, SPC-4 6.4).
        d[5] |= THIRD_PARTY_COPY;
    }
    d
}

/// The 3PC bit of standard INQUIRY byte 5.
const THIRD_PARTY_COPY: u8 = 0x08;

/// INQUIRY with EVPD=0.
pub(crate) fn standard(
    cdb: &[u8],
    out: &mut BytesMut,
    cfg: Option<&LuConfig>,
    peripheral: u8,
) -> CmdResult {
    // SPC-4 6.6.1: with EVPD=0 the PAGE CODE must be zero.
    if u8_at(cdb, 2) != 0 {
        return Err(invalid_field_in_cdb(2, Some(7)));
    }
    let alloc = usize::from(be16(cdb, 3));
    put_truncated(out, &standard_data(cfg, peripheral), alloc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testutil::*;

    #[test]
    fn standard_layout() {
        let t = Harness::new(512, 100);
        let d = t.ok(&[0x12, 0, 0, 1, 4, 0], &[]);
        assert_eq!(d.len(), 74);
        assert_eq!(d[0], 0);
        assert_eq!(d[2], 6);
        assert_eq!(d[3] & 0x0F, 2);
        assert_eq!(usize::from(d[4]) + 5, d.len());
        assert_eq!(&d[8..16], b"SLUICE  ");
        assert_eq!(&d[16..32], b"TESTDISK        ");
        assert!(d[58..74].windows(2).any(|w| w == [0x04, 0xC0]));
        for &b in &d[8..36] {
            assert!(b == 0 || (0x20..0x7F).contains(&b));
        }
    }

    #[test]
    fn allocation_length_truncates_exactly() {
        let t = Harness::new(512, 100);
        let full = t.ok(&[0x12, 0, 0, 1, 0, 0], &[]);
        for n in [0usize, 1, 5, 36, 73, 74, 255, 511, 512] {
            let d = t.ok(&[0x12, 0, 0, (n >> 8) as u8, n as u8, 0], &[]);
            assert_eq!(d.len(), n.min(74));
            assert_eq!(&d[..], &full[..d.len()]);
        }
    }

    #[test]
    fn page_code_without_evpd_is_invalid() {
        let t = Harness::new(512, 100);
        let s = t.check(&[0x12, 0, 1, 0, 255, 0], &[]);
        assert_ifc(&s, true, 2, Some(7));
        let s = t.check(&[0x12, 0x02, 0, 0, 255, 0], &[]);
        assert_ifc(&s, true, 1, Some(1));
        let s = t.check(&[0x12, 0, 0, 0, 255, 0x04], &[]);
        assert_ifc(&s, true, 5, Some(2));
    }

    #[test]
    fn inquiry_is_not_blocked_by_unit_attention() {
        let t = Harness::new(512, 100);
        let h = Harness {
            nexus: 77,
            ..t.clone()
        };
        h.ok(&[0x12, 0, 0, 0, 36, 0], &[]);
        let s = h.check(&[0, 0, 0, 0, 0, 0], &[]);
        assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x29, 0));
        h.ok(&[0, 0, 0, 0, 0, 0], &[]);
    }
}
