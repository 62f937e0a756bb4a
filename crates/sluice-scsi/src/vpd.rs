//! Vital product data pages (INQUIRY with EVPD=1; SPC-4 7.8, SBC-3 6.5).
//!
//! Pages: 00h supported pages, 80h unit serial number, 83h device identification, 8Fh
//! third-party copy, B0h block limits, B1h block device characteristics, B2h logical block
//! provisioning (the last three with the copy manager and thin provisioning in `vpd_sbc`).

use crate::field::{be16, put_ascii, put_truncated, u8_at};
use crate::lu::{Cmd, CmdResult, LuConfig};
use crate::ports::TargetPort;
use crate::sense::invalid_field_in_cdb;

/// Pages listed in VPD 00h, ascending.
pub(crate) const SUPPORTED_PAGES: [u8; 7] = [0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2];

/// INQUIRY with EVPD=1.
pub(crate) fn inquiry_vpd(cmd: &mut Cmd<'_>) -> CmdResult {
    let page = u8_at(cmd.cdb, 2);
    let alloc = usize::from(be16(cmd.cdb, 3));
    let cfg = cmd.lu.config();
    let body = match page {
        0x00 => SUPPORTED_PAGES.to_vec(),
        0x80 => serial(cfg),
        0x83 => identification(
            cfg,
            cmd.fabric.port_of(cmd.nexus),
            &cmd.fabric.ports.device_name,
        ),
        0x8F => crate::copy_results::third_party_copy_page(cmd.lu.block_size()),
        0xB0 => crate::vpd_sbc::block_limits(cmd.lu),
        0xB1 => block_device_characteristics(cmd.lu),
        0xB2 => crate::vpd_sbc::logical_block_provisioning(cmd.lu),
        _ => return Err(invalid_field_in_cdb(2, Some(7))),
    };
    let mut d = Vec::with_capacity(4 + body.len());
    d.extend_from_slice(&[0x00, page]);
    // Every page body is far below 64 KiB.
    d.extend_from_slice(&(body.len() as u16).to_be_bytes());
    d.extend_from_slice(&body);
    put_truncated(cmd.data_in, &d, alloc);
    Ok(())
}

fn serial(cfg: &LuConfig) -> Vec<u8> {
    let n = cfg.serial.len().min(252);
    let mut v = vec![0u8; n];
    put_ascii(&mut v, &cfg.serial);
    v
}

/// Designator header: PROTOCOL IDENTIFIER / CODE SET, PIV / ASSOCIATION / TYPE, length.
fn designator(out: &mut Vec<u8>, proto_codeset: u8, piv_assoc_type: u8, id: &[u8]) {
    out.push(proto_codeset);
    out.push(piv_assoc_type);
    out.push(0);
    // Callers keep identifiers below 256 bytes.
    out.push(id.len().min(255) as u8);
    out.extend_from_slice(&id[..id.len().min(255)]);
}

/// SCSI name string: UTF-8, NUL-terminated, padded to a multiple of 4, at most 256 bytes.
fn scsi_name(name: &str) -> Vec<u8> {
    let mut v: Vec<u8> = name.bytes().filter(|b| *b != 0).take(251).collect();
    v.push(0);
    while v.len() & 3 != 0 {
        v.push(0);
    }
    v
}

const ISCSI: u8 = 0x50; // PROTOCOL IDENTIFIER 5h, in the high nibble
const BINARY: u8 = 0x01;
const ASCII: u8 = 0x02;
const UTF8: u8 = 0x03;
const PIV: u8 = 0x80;
const ASSOC_LU: u8 = 0x00;
const ASSOC_PORT: u8 = 0x10;
const ASSOC_DEVICE: u8 = 0x20;

/// The Device Identification page: the LU's designators (the same through every port, so
/// multipath initiators recognise one LU), then those of the target port the command came
/// through and of the target device.
fn identification(cfg: &LuConfig, port: Option<&TargetPort>, device_name: &str) -> Vec<u8> {
    let mut d = Vec::new();
    // NAA, logical unit.
    designator(
        &mut d,
        BINARY,
        ASSOC_LU | 0x03,
        &crate::designator::naa(cfg),
    );
    // T10 vendor ID, logical unit: vendor (8) + product (16) + serial.
    designator(&mut d, ASCII, ASSOC_LU | 0x01, &crate::designator::t10(cfg));
    // Target port: relative target port, target port group (SPC-4 7.8.6.5, 7.8.6.6), SCSI
    // name string.
    if let Some(port) = port {
        let [hi, lo] = port.relative_id.to_be_bytes();
        designator(
            &mut d,
            ISCSI | BINARY,
            PIV | ASSOC_PORT | 0x04,
            &[0, 0, hi, lo],
        );
        let [hi, lo] = port.group.to_be_bytes();
        designator(
            &mut d,
            ISCSI | BINARY,
            PIV | ASSOC_PORT | 0x05,
            &[0, 0, hi, lo],
        );
        if !port.name.is_empty() {
            let name = scsi_name(&port.name);
            designator(&mut d, ISCSI | UTF8, PIV | ASSOC_PORT | 0x08, &name);
        }
    }
    if !device_name.is_empty() {
        designator(
            &mut d,
            ISCSI | UTF8,
            PIV | ASSOC_DEVICE | 0x08,
            &scsi_name(device_name),
        );
    }
    d
}

fn block_device_characteristics(lu: &crate::lu::LogicalUnit) -> Vec<u8> {
    let mut b = vec![0u8; 0x3C];
    // MEDIUM ROTATION RATE 0001h: non-rotating medium.
    b[0..2].copy_from_slice(&1u16.to_be_bytes());
    b[3] = crate::sanitize::erase_read_behaviour(lu);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn vpd(t: &Harness, page: u8, alloc: u16) -> Vec<u8> {
        let [hi, lo] = alloc.to_be_bytes();
        t.ok(&[0x12, 1, page, hi, lo, 0], &[])
    }

    #[test]
    fn supported_pages_are_all_answered() {
        let t = Harness::new(512, 100);
        let d = vpd(&t, 0, 255);
        assert_eq!(&d[4..], &SUPPORTED_PAGES);
        for p in SUPPORTED_PAGES {
            let d = vpd(&t, p, 255);
            assert_eq!(d[1], p);
            assert_eq!(usize::from(be16(&d, 2)) + 4, d.len(), "page {p:02x}");
            assert_eq!(d[0], 0);
        }
        let s = t.check(&[0x12, 1, 0x84, 0, 255, 0], &[]);
        assert_ifc(&s, true, 2, Some(7));
    }

    #[test]
    fn serial_and_truncation() {
        let t = Harness::new(512, 100);
        assert_eq!(&vpd(&t, 0x80, 255)[4..], b"SN0123456789");
        assert_eq!(vpd(&t, 0x80, 6), vec![0, 0x80, 0, 12, b'S', b'N']);
        assert!(vpd(&t, 0x80, 0).is_empty());
    }

    #[test]
    fn identification_designators() {
        let t = Harness::new(512, 100);
        let d = vpd(&t, 0x83, 1024);
        let mut pos = 4;
        let mut seen = Vec::new();
        while pos + 4 <= d.len() {
            let len = usize::from(d[pos + 3]);
            seen.push((
                d[pos] & 0x0F,
                d[pos + 1] & 0x3F,
                d[pos + 1] & 0x80 != 0,
                len,
            ));
            if d[pos + 1] & 0x0F == 3 {
                assert_eq!(d[pos + 4] >> 4, 6);
                assert_eq!(len, 16);
            }
            if d[pos + 1] & 0x0F == 8 {
                assert_eq!(len % 4, 0);
                assert!(d[pos + 4..pos + 4 + len].contains(&0));
            }
            pos += 4 + len;
        }
        assert_eq!(pos, d.len());
        let types: Vec<(u8, u8)> = seen.iter().map(|s| (s.1 >> 4, s.1 & 0x0F)).collect();
        assert_eq!(types, vec![(0, 3), (0, 1), (1, 4), (1, 5), (1, 8), (2, 8)]);
        assert!(seen[2..].iter().all(|s| s.2), "port designators carry PIV");
        let name = String::from_utf8_lossy(&d[4..]).to_string();
        assert!(name.contains("iqn.2024-01.org.example:t1,t,0x0001"));
    }

    #[test]
    fn block_limits_and_characteristics() {
        let t = Harness::new(4096, 100);
        let d = vpd(&t, 0xB0, 255);
        assert_eq!(d.len(), 64);
        assert_eq!(be16(&d, 2), 0x3C);
        assert_eq!(crate::field::be32(&d, 8), 8192);
        assert_eq!(d[5], 255, "MAXIMUM COMPARE AND WRITE LENGTH");
        // A fully provisioned LU on a device without atomic writes: no unmap or atomic
        // limits; MAXIMUM WRITE SAME LENGTH 1 GiB.
        assert!(d[20..36].iter().all(|b| *b == 0));
        assert_eq!(crate::field::be64(&d, 36), 1 << 18);
        assert!(d[44..64].iter().all(|b| *b == 0));
        let d = vpd(&t, 0xB1, 255);
        assert_eq!(be16(&d, 4), 1);
        assert_eq!(d[7], 0, "WABEREQ: no BLOCK ERASE");
        let d = vpd(&t, 0xB2, 255);
        assert_eq!(d, vec![0, 0xB2, 0, 4, 0, 0, 0, 0]);
    }
}
