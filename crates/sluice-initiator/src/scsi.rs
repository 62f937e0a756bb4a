//! Decoders for the data-in of the common commands (SPC-4 / SBC-3), initiator side. All of
//! them check lengths: target data never panics.

use bytes::Bytes;

use crate::error::Error;

/// Standard INQUIRY data (SPC-4 6.6.2).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct StandardInquiry {
    /// Peripheral qualifier (0 = connected).
    pub qualifier: u8,
    /// Peripheral device type (0 = direct access block device).
    pub device_type: u8,
    /// RMB: removable medium.
    pub removable: bool,
    /// VERSION (6 = SPC-4).
    pub version: u8,
    /// T10 vendor identification.
    pub vendor: String,
    /// Product identification.
    pub product: String,
    /// Product revision level.
    pub revision: String,
}

impl StandardInquiry {
    /// The device type in words.
    pub fn device_type_name(&self) -> &'static str {
        match self.device_type {
            0x00 => "direct access block device",
            0x01 => "sequential access device",
            0x05 => "CD/DVD device",
            0x0c => "storage array controller",
            0x0d => "enclosure services device",
            0x1f => "unknown or no device",
            _ => "other device type",
        }
    }
}

/// READ CAPACITY data.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Capacity {
    /// Address of the last logical block.
    pub last_lba: u64,
    /// Logical block length in bytes.
    pub block_size: u32,
    /// LBPME: logical block provisioning management enabled (READ CAPACITY(16) only).
    pub thin_provisioned: bool,
}

impl Capacity {
    /// Number of blocks.
    pub fn blocks(&self) -> u64 {
        self.last_lba.saturating_add(1)
    }

    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.blocks().saturating_mul(u64::from(self.block_size))
    }
}

fn short(what: &str) -> Error {
    Error::Protocol(format!("{what} data too short"))
}

fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b).trim().to_owned()
}

/// Decodes standard INQUIRY data.
pub fn parse_standard_inquiry(d: &[u8]) -> Result<StandardInquiry, Error> {
    if d.len() < 36 {
        return Err(short("INQUIRY"));
    }
    Ok(StandardInquiry {
        qualifier: d[0] >> 5,
        device_type: d[0] & 0x1f,
        removable: d[1] & 0x80 != 0,
        version: d[2],
        vendor: ascii(&d[8..16]),
        product: ascii(&d[16..32]),
        revision: ascii(&d[32..36]),
    })
}

/// Checks a VPD page header (SPC-4 7.8.1) and returns the page body.
pub fn vpd_body(d: &Bytes, page: u8) -> Result<Bytes, Error> {
    if d.len() < 4 {
        return Err(short("VPD"));
    }
    if d[1] != page {
        return Err(Error::Protocol(format!(
            "asked for VPD page {page:#04x}, got {:#04x}",
            d[1]
        )));
    }
    let len = usize::from(u16::from_be_bytes([d[2], d[3]]));
    Ok(d.slice(4..(4 + len).min(d.len())))
}

/// Decodes READ CAPACITY(10) data (SBC-3 5.16).
pub fn parse_read_capacity10(d: &[u8]) -> Result<Capacity, Error> {
    let (Some(lba), Some(bs)) = (d.get(0..4), d.get(4..8)) else {
        return Err(short("READ CAPACITY(10)"));
    };
    Ok(Capacity {
        last_lba: u64::from(u32::from_be_bytes([lba[0], lba[1], lba[2], lba[3]])),
        block_size: u32::from_be_bytes([bs[0], bs[1], bs[2], bs[3]]),
        thin_provisioned: false,
    })
}

/// Decodes READ CAPACITY(16) data (SBC-3 5.17).
pub fn parse_read_capacity16(d: &[u8]) -> Result<Capacity, Error> {
    if d.len() < 15 {
        return Err(short("READ CAPACITY(16)"));
    }
    let mut lba = [0u8; 8];
    lba.copy_from_slice(&d[0..8]);
    Ok(Capacity {
        last_lba: u64::from_be_bytes(lba),
        block_size: u32::from_be_bytes([d[8], d[9], d[10], d[11]]),
        thin_provisioned: d[14] & 0x80 != 0,
    })
}

/// Decodes REPORT LUNS data (SPC-4 6.33) into LUN numbers (single-level peripheral and flat
/// addressing; other forms are skipped).
pub fn parse_report_luns(d: &[u8]) -> Result<Vec<u16>, Error> {
    let Some(h) = d.get(0..4) else {
        return Err(short("REPORT LUNS"));
    };
    let list_len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let list = d.get(8..).unwrap_or_default();
    let list = &list[..list_len.min(list.len())];
    Ok(list
        .chunks_exact(8)
        .filter_map(|e| {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(e);
            sluice_proto::seq::Lun(u64::from_be_bytes(raw)).number()
        })
        .collect())
}

/// Decodes a VPD page body into named fields, for display. Unknown pages give a hex dump.
pub fn decode_vpd(page: u8, body: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match page {
        0x00 => {
            let pages: Vec<String> = body
                .iter()
                .map(|p| format!("{p:02x}h ({})", vpd_name(*p)))
                .collect();
            out.push(("supported pages".into(), pages.join(", ")));
        }
        0x80 => out.push(("unit serial number".into(), ascii(body))),
        0x83 => {
            let mut rest = body;
            while rest.len() >= 4 {
                let code_set = rest[0] & 0x0f;
                let association = (rest[1] >> 4) & 3;
                let kind = rest[1] & 0x0f;
                let len = usize::from(rest[3]);
                let Some(id) = rest.get(4..4 + len) else {
                    break;
                };
                let value = if code_set == 1 {
                    id.iter().map(|b| format!("{b:02x}")).collect()
                } else {
                    ascii(id)
                };
                let name = format!(
                    "designator ({}, {})",
                    designator_type(kind),
                    ["LU", "port", "target", "reserved"][usize::from(association)]
                );
                out.push((name, value));
                rest = &rest[4 + len..];
            }
        }
        0xb0 if body.len() >= 12 => {
            let be32 = |i: usize| {
                body.get(i..i + 4)
                    .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            };
            out.push((
                "optimal transfer length granularity".into(),
                u16::from_be_bytes([body[2], body[3]]).to_string(),
            ));
            out.push(("maximum transfer length".into(), be32(4).to_string()));
            out.push(("optimal transfer length".into(), be32(8).to_string()));
            if body.len() >= 32 {
                out.push(("maximum unmap LBA count".into(), be32(16).to_string()));
                out.push(("maximum unmap descriptors".into(), be32(20).to_string()));
            }
        }
        0xb1 if body.len() >= 2 => {
            let rate = u16::from_be_bytes([body[0], body[1]]);
            let text = match rate {
                0 => "not reported".to_owned(),
                1 => "non-rotating medium".to_owned(),
                r => format!("{r} rpm"),
            };
            out.push(("medium rotation rate".into(), text));
        }
        0xb2 if body.len() >= 2 => {
            out.push(("LBPU (UNMAP)".into(), (body[1] & 0x80 != 0).to_string()));
            out.push((
                "LBPWS (WRITE SAME(16) unmap)".into(),
                (body[1] & 0x40 != 0).to_string(),
            ));
        }
        _ => {
            let hex: Vec<String> = body.iter().map(|b| format!("{b:02x}")).collect();
            out.push(("data".into(), hex.join(" ")));
        }
    }
    out
}

/// The name of a VPD page.
pub fn vpd_name(page: u8) -> &'static str {
    match page {
        0x00 => "supported VPD pages",
        0x80 => "unit serial number",
        0x83 => "device identification",
        0x86 => "extended INQUIRY data",
        0xb0 => "block limits",
        0xb1 => "block device characteristics",
        0xb2 => "logical block provisioning",
        _ => "other",
    }
}

fn designator_type(kind: u8) -> &'static str {
    match kind {
        0 => "vendor specific",
        1 => "T10 vendor ID",
        2 => "EUI-64",
        3 => "NAA",
        4 => "relative target port",
        5 => "target port group",
        6 => "logical unit group",
        7 => "MD5 LU id",
        8 => "SCSI name string",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoders_check_lengths() {
        assert!(parse_standard_inquiry(&[0; 35]).is_err());
        assert!(parse_read_capacity10(&[0; 7]).is_err());
        assert!(parse_read_capacity16(&[0; 14]).is_err());
        assert!(parse_report_luns(&[0; 3]).is_err());
        let c = parse_read_capacity10(&[0, 0, 0x0f, 0xff, 0, 0, 2, 0]).unwrap();
        assert_eq!((c.blocks(), c.bytes()), (4096, 2 << 20));
        // List length says 16 but only one entry present: no panic.
        let luns = parse_report_luns(&[0, 0, 0, 16, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
        assert_eq!(luns, vec![1]);
        let d = decode_vpd(0x83, &[1, 3, 0, 2, 0xab]);
        assert!(d.is_empty(), "truncated designator is dropped");
        let d = decode_vpd(0x83, &[1, 3, 0, 2, 0xab, 0xcd]);
        assert_eq!(d[0].1, "abcd");
    }
}
