//! CDB builders for the initiator side (and for tests of the target side).
//!
//! Each function returns the CDB as a fixed-size array, with the control byte 0. Allocation
//! lengths are clamped to what the field can hold. [`unmap`] also builds the parameter list;
//! [`copy_list`] builds an EXTENDED COPY parameter list.

/// Operation codes of the commands sluice knows about (SPC-4 / SBC-3).
pub mod opcode {
    /// TEST UNIT READY.
    pub const TEST_UNIT_READY: u8 = 0x00;
    /// REQUEST SENSE.
    pub const REQUEST_SENSE: u8 = 0x03;
    /// READ(6).
    pub const READ_6: u8 = 0x08;
    /// WRITE(6).
    pub const WRITE_6: u8 = 0x0A;
    /// INQUIRY.
    pub const INQUIRY: u8 = 0x12;
    /// MODE SELECT(6).
    pub const MODE_SELECT_6: u8 = 0x15;
    /// RESERVE(6).
    pub const RESERVE_6: u8 = 0x16;
    /// RELEASE(6).
    pub const RELEASE_6: u8 = 0x17;
    /// MODE SENSE(6).
    pub const MODE_SENSE_6: u8 = 0x1A;
    /// START STOP UNIT.
    pub const START_STOP_UNIT: u8 = 0x1B;
    /// PREVENT ALLOW MEDIUM REMOVAL.
    pub const PREVENT_ALLOW: u8 = 0x1E;
    /// READ CAPACITY(10).
    pub const READ_CAPACITY_10: u8 = 0x25;
    /// READ(10).
    pub const READ_10: u8 = 0x28;
    /// WRITE(10).
    pub const WRITE_10: u8 = 0x2A;
    /// WRITE AND VERIFY(10).
    pub const WRITE_VERIFY_10: u8 = 0x2E;
    /// VERIFY(10).
    pub const VERIFY_10: u8 = 0x2F;
    /// PRE-FETCH(10).
    pub const PRE_FETCH_10: u8 = 0x34;
    /// SYNCHRONIZE CACHE(10).
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    /// READ DEFECT DATA(10).
    pub const READ_DEFECT_DATA_10: u8 = 0x37;
    /// WRITE SAME(10).
    pub const WRITE_SAME_10: u8 = 0x41;
    /// UNMAP.
    pub const UNMAP: u8 = 0x42;
    /// SANITIZE.
    pub const SANITIZE: u8 = 0x48;
    /// MODE SELECT(10).
    pub const MODE_SELECT_10: u8 = 0x55;
    /// RESERVE(10).
    pub const RESERVE_10: u8 = 0x56;
    /// RELEASE(10).
    pub const RELEASE_10: u8 = 0x57;
    /// MODE SENSE(10).
    pub const MODE_SENSE_10: u8 = 0x5A;
    /// PERSISTENT RESERVE IN.
    pub const PERSISTENT_RESERVE_IN: u8 = 0x5E;
    /// PERSISTENT RESERVE OUT.
    pub const PERSISTENT_RESERVE_OUT: u8 = 0x5F;
    /// EXTENDED COPY (service action 00h: LID1).
    pub const EXTENDED_COPY: u8 = 0x83;
    /// RECEIVE COPY RESULTS.
    pub const RECEIVE_COPY_RESULTS: u8 = 0x84;
    /// READ(16).
    pub const READ_16: u8 = 0x88;
    /// COMPARE AND WRITE.
    pub const COMPARE_AND_WRITE: u8 = 0x89;
    /// WRITE(16).
    pub const WRITE_16: u8 = 0x8A;
    /// ORWRITE(16).
    pub const ORWRITE_16: u8 = 0x8B;
    /// WRITE AND VERIFY(16).
    pub const WRITE_VERIFY_16: u8 = 0x8E;
    /// VERIFY(16).
    pub const VERIFY_16: u8 = 0x8F;
    /// PRE-FETCH(16).
    pub const PRE_FETCH_16: u8 = 0x90;
    /// SYNCHRONIZE CACHE(16).
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    /// WRITE SAME(16).
    pub const WRITE_SAME_16: u8 = 0x93;
    /// WRITE ATOMIC(16).
    pub const WRITE_ATOMIC_16: u8 = 0x9C;
    /// SERVICE ACTION IN(16) (READ CAPACITY(16), GET LBA STATUS, …).
    pub const SERVICE_ACTION_IN_16: u8 = 0x9E;
    /// REPORT LUNS.
    pub const REPORT_LUNS: u8 = 0xA0;
    /// MAINTENANCE IN (REPORT SUPPORTED OPERATION CODES, …).
    pub const MAINTENANCE_IN: u8 = 0xA3;
    /// MAINTENANCE OUT (SET TARGET PORT GROUPS, …).
    pub const MAINTENANCE_OUT: u8 = 0xA4;
    /// READ(12).
    pub const READ_12: u8 = 0xA8;
    /// WRITE(12).
    pub const WRITE_12: u8 = 0xAA;
    /// WRITE AND VERIFY(12).
    pub const WRITE_VERIFY_12: u8 = 0xAE;
    /// VERIFY(12).
    pub const VERIFY_12: u8 = 0xAF;
    /// READ DEFECT DATA(12).
    pub const READ_DEFECT_DATA_12: u8 = 0xB7;
    /// Service action of SERVICE ACTION IN(16) for READ CAPACITY(16).
    pub const SAI_READ_CAPACITY_16: u8 = 0x10;
    /// Service action of MAINTENANCE IN for REPORT SUPPORTED OPERATION CODES.
    pub const MI_REPORT_SUPPORTED_OPCODES: u8 = 0x0C;
    /// Service action of SERVICE ACTION IN(16) for GET LBA STATUS.
    pub const SAI_GET_LBA_STATUS: u8 = 0x12;
    /// Service action of EXTENDED COPY for the LID1 form (SPC-4 6.4).
    pub const EC_LID1: u8 = 0x00;
    /// Service action of RECEIVE COPY RESULTS: COPY STATUS (LID1).
    pub const RCR_COPY_STATUS: u8 = 0x00;
    /// Service action of RECEIVE COPY RESULTS: OPERATING PARAMETERS.
    pub const RCR_OPERATING_PARAMETERS: u8 = 0x03;
    /// Service action of MAINTENANCE IN for REPORT TARGET PORT GROUPS.
    pub const MI_REPORT_TARGET_PORT_GROUPS: u8 = 0x0A;
    /// Service action of MAINTENANCE OUT for SET TARGET PORT GROUPS.
    pub const MO_SET_TARGET_PORT_GROUPS: u8 = 0x0A;
}

/// TEST UNIT READY.
pub fn test_unit_ready() -> [u8; 6] {
    [opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0]
}

/// INQUIRY; `page` = `Some(code)` asks for a VPD page (EVPD=1).
pub fn inquiry(page: Option<u8>, alloc_len: u16) -> [u8; 6] {
    let [hi, lo] = alloc_len.to_be_bytes();
    match page {
        Some(p) => [opcode::INQUIRY, 0x01, p, hi, lo, 0],
        None => [opcode::INQUIRY, 0x00, 0, hi, lo, 0],
    }
}

/// READ(10) of `blocks` blocks at `lba`, with optional FUA.
pub fn read10(lba: u32, blocks: u16, fua: bool) -> [u8; 10] {
    rw10(opcode::READ_10, lba, blocks, fua)
}

/// WRITE(10) of `blocks` blocks at `lba`, with optional FUA.
pub fn write10(lba: u32, blocks: u16, fua: bool) -> [u8; 10] {
    rw10(opcode::WRITE_10, lba, blocks, fua)
}

fn rw10(op: u8, lba: u32, blocks: u16, fua: bool) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = op;
    if fua {
        c[1] = 0x08;
    }
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// READ(16) of `blocks` blocks at `lba`, with optional FUA.
pub fn read16(lba: u64, blocks: u32, fua: bool) -> [u8; 16] {
    rw16(opcode::READ_16, lba, blocks, fua)
}

/// WRITE(16) of `blocks` blocks at `lba`, with optional FUA.
pub fn write16(lba: u64, blocks: u32, fua: bool) -> [u8; 16] {
    rw16(opcode::WRITE_16, lba, blocks, fua)
}

/// ORWRITE(16) of `blocks` blocks at `lba`, with optional FUA.
pub fn orwrite16(lba: u64, blocks: u32, fua: bool) -> [u8; 16] {
    rw16(opcode::ORWRITE_16, lba, blocks, fua)
}

fn rw16(op: u8, lba: u64, blocks: u32, fua: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = op;
    if fua {
        c[1] = 0x08;
    }
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// READ CAPACITY(10).
pub fn read_capacity10() -> [u8; 10] {
    [opcode::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0]
}

/// READ CAPACITY(16) (SERVICE ACTION IN(16) / 10h).
pub fn read_capacity16(alloc_len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::SERVICE_ACTION_IN_16;
    c[1] = opcode::SAI_READ_CAPACITY_16;
    c[10..14].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// REPORT LUNS with the given SELECT REPORT code (0 = all addressable LUs).
pub fn report_luns(select_report: u8, alloc_len: u32) -> [u8; 12] {
    let mut c = [0u8; 12];
    c[0] = opcode::REPORT_LUNS;
    c[2] = select_report;
    c[6..10].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// SYNCHRONIZE CACHE(10) of `blocks` blocks from `lba` (0 blocks = to the end).
pub fn sync_cache10(lba: u32, blocks: u16, immed: bool) -> [u8; 10] {
    let mut c = rw10(opcode::SYNCHRONIZE_CACHE_10, lba, blocks, false);
    if immed {
        c[1] = 0x02;
    }
    c
}

/// MODE SENSE(6): `pc` is the page control (0 current, 1 changeable, 2 default, 3 saved).
pub fn mode_sense6(dbd: bool, pc: u8, page: u8, subpage: u8, alloc_len: u8) -> [u8; 6] {
    [
        opcode::MODE_SENSE_6,
        if dbd { 0x08 } else { 0 },
        ((pc & 0x03) << 6) | (page & 0x3F),
        subpage,
        alloc_len,
        0,
    ]
}

/// One UNMAP block descriptor: `blocks` blocks from `lba`.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct UnmapDescriptor {
    /// First logical block to unmap.
    pub lba: u64,
    /// Number of logical blocks.
    pub blocks: u32,
}

/// UNMAP: the CDB and its parameter list (8-byte header plus 16 bytes per descriptor).
///
/// The descriptor count is clamped so the list length fits the 16-bit fields (4095
/// descriptors).
pub fn unmap(descriptors: &[UnmapDescriptor]) -> ([u8; 10], Vec<u8>) {
    let descriptors = &descriptors[..descriptors.len().min(4095)];
    // At most 4095 * 16 + 8 bytes: fits in u16.
    let desc_len = (descriptors.len() * 16) as u16;
    let mut list = Vec::with_capacity(8 + usize::from(desc_len));
    list.extend_from_slice(&(desc_len + 6).to_be_bytes());
    list.extend_from_slice(&desc_len.to_be_bytes());
    list.extend_from_slice(&[0; 4]);
    for d in descriptors {
        list.extend_from_slice(&d.lba.to_be_bytes());
        list.extend_from_slice(&d.blocks.to_be_bytes());
        list.extend_from_slice(&[0; 4]);
    }
    let mut c = [0u8; 10];
    c[0] = opcode::UNMAP;
    c[7..9].copy_from_slice(&(desc_len + 8).to_be_bytes());
    (c, list)
}

/// GET LBA STATUS (SERVICE ACTION IN(16) / 12h) from `lba`.
pub fn get_lba_status(lba: u64, alloc_len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::SERVICE_ACTION_IN_16;
    c[1] = opcode::SAI_GET_LBA_STATUS;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// WRITE SAME(10) of `blocks` blocks at `lba` (0 blocks: to the end of the LU), with UNMAP.
pub fn write_same10(lba: u32, blocks: u16, unmap: bool) -> [u8; 10] {
    let mut c = rw10(opcode::WRITE_SAME_10, lba, blocks, false);
    if unmap {
        c[1] = 0x08;
    }
    c
}

/// WRITE SAME(16) of `blocks` blocks at `lba` (0 blocks: to the end of the LU), with UNMAP
/// and NDOB (no Data-Out: a block of zeros).
pub fn write_same16(lba: u64, blocks: u32, unmap: bool, ndob: bool) -> [u8; 16] {
    let mut c = rw16(opcode::WRITE_SAME_16, lba, blocks, false);
    c[1] = if unmap { 0x08 } else { 0 } | u8::from(ndob);
    c
}

/// COMPARE AND WRITE of `blocks` blocks at `lba`; its Data-Out is the blocks to compare
/// followed by the blocks to write.
pub fn compare_and_write(lba: u64, blocks: u8, fua: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::COMPARE_AND_WRITE;
    if fua {
        c[1] = 0x08;
    }
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[13] = blocks;
    c
}

/// WRITE ATOMIC(16) of `blocks` blocks at `lba`.
pub fn write_atomic16(lba: u64, blocks: u16, fua: bool) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::WRITE_ATOMIC_16;
    if fua {
        c[1] = 0x08;
    }
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[12..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// SANITIZE with `service_action` (01h OVERWRITE, 02h BLOCK ERASE, 03h CRYPTOGRAPHIC
/// ERASE, 1Fh EXIT FAILURE MODE) and a parameter list of `param_len` bytes.
pub fn sanitize(service_action: u8, immed: bool, param_len: u16) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = opcode::SANITIZE;
    c[1] = (service_action & 0x1F) | if immed { 0x80 } else { 0 };
    c[7..9].copy_from_slice(&param_len.to_be_bytes());
    c
}

/// EXTENDED COPY (LID1) with a parameter list of `param_len` bytes ([`copy_list`]).
pub fn extended_copy(param_len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::EXTENDED_COPY;
    c[1] = opcode::EC_LID1;
    c[10..14].copy_from_slice(&param_len.to_be_bytes());
    c
}

/// RECEIVE COPY RESULTS with `service_action` (00h COPY STATUS, 03h OPERATING PARAMETERS).
pub fn receive_copy_results(service_action: u8, list_id: u8, alloc_len: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode::RECEIVE_COPY_RESULTS;
    c[1] = service_action & 0x1F;
    c[2] = list_id;
    c[10..14].copy_from_slice(&alloc_len.to_be_bytes());
    c
}

/// One block-to-block copy of an EXTENDED COPY parameter list ([`copy_list`]).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct BlockCopy {
    /// Index of the source LU in the list's LUs.
    pub source: u16,
    /// Index of the destination LU.
    pub destination: u16,
    /// Blocks to copy (in source blocks).
    pub blocks: u16,
    /// First source block.
    pub source_lba: u64,
    /// First destination block.
    pub destination_lba: u64,
}

/// An EXTENDED COPY (LID1) parameter list: `luns` name the LUs by a designator from their
/// Device Identification VPD page (CODE SET, DESIGNATOR TYPE, designator of at most 20
/// bytes, association "logical unit") and their block size; `copies` are block-to-block
/// segments between them. LIST ID USAGE is 00b (status held for RECEIVE COPY RESULTS) with
/// `hold`, else 11b (no list identifier).
pub fn copy_list(
    list_id: u8,
    hold: bool,
    luns: &[(u8, u8, &[u8], u32)],
    copies: &[BlockCopy],
) -> Vec<u8> {
    let mut l = vec![0u8; 16];
    l[0] = list_id;
    l[1] = if hold { 0x00 } else { 0x18 };
    for &(code_set, designator_type, id, block_len) in luns {
        let mut d = [0u8; 32];
        d[0] = 0xE4;
        d[4] = code_set & 0x0F;
        d[5] = designator_type & 0x0F;
        let n = id.len().min(20);
        d[7] = n as u8;
        d[8..8 + n].copy_from_slice(&id[..n]);
        d[29..32].copy_from_slice(&block_len.to_be_bytes()[1..]);
        l.extend_from_slice(&d);
    }
    let cscd_len = l.len() - 16;
    for c in copies {
        let mut d = [0u8; 28];
        d[0] = 0x02;
        d[2..4].copy_from_slice(&24u16.to_be_bytes());
        d[4..6].copy_from_slice(&c.source.to_be_bytes());
        d[6..8].copy_from_slice(&c.destination.to_be_bytes());
        d[10..12].copy_from_slice(&c.blocks.to_be_bytes());
        d[12..20].copy_from_slice(&c.source_lba.to_be_bytes());
        d[20..28].copy_from_slice(&c.destination_lba.to_be_bytes());
        l.extend_from_slice(&d);
    }
    let segment_len = l.len() - 16 - cscd_len;
    l[2..4].copy_from_slice(&(cscd_len.min(0xFFFF) as u16).to_be_bytes());
    l[8..12].copy_from_slice(&(segment_len as u32).to_be_bytes());
    l
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_put_fields_where_the_standard_says() {
        assert_eq!(inquiry(Some(0x83), 255), [0x12, 1, 0x83, 0, 255, 0]);
        assert_eq!(inquiry(None, 0x1234), [0x12, 0, 0, 0x12, 0x34, 0]);
        let c = read10(0x0102_0304, 0x0506, true);
        assert_eq!(c, [0x28, 0x08, 1, 2, 3, 4, 0, 5, 6, 0]);
        let c = write16(u64::MAX, 7, false);
        assert_eq!(c[0], 0x8A);
        assert_eq!(&c[2..10], &[0xFF; 8]);
        assert_eq!(&c[10..14], &[0, 0, 0, 7]);
        assert_eq!(read_capacity16(32)[1], 0x10);
        assert_eq!(report_luns(2, 16)[2], 2);
        assert_eq!(sync_cache10(0, 0, true)[1], 2);
        assert_eq!(
            mode_sense6(true, 1, 0x3F, 0, 255),
            [0x1A, 8, 0x7F, 0, 255, 0]
        );
        assert_eq!(test_unit_ready(), [0; 6]);
        assert_eq!(read_capacity10()[0], 0x25);
        assert_eq!(read16(1, 1, false)[9], 1);
        assert_eq!(write10(0, 1, false)[0], 0x2A);
    }

    #[test]
    fn unmap_list_layout() {
        let (c, l) = unmap(&[UnmapDescriptor { lba: 5, blocks: 9 }]);
        assert_eq!(c[0], 0x42);
        assert_eq!(u16::from_be_bytes([c[7], c[8]]), 24);
        assert_eq!(l.len(), 24);
        assert_eq!(&l[0..4], &[0, 22, 0, 16]);
        assert_eq!(l[15], 5);
        assert_eq!(l[19], 9);
    }
}
