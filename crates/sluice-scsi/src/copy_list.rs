//! The EXTENDED COPY (LID1) parameter list (SPC-4 6.4): a 16-byte header, CSCD descriptors
//! naming the copy source and destination devices, segment descriptors saying what to copy,
//! and inline data.
//!
//! The copy manager supports identification descriptor CSCDs (E4h, naming a logical unit of
//! this target by a designator from its Device Identification VPD page) and block
//! device to block device segments (02h); RECEIVE COPY RESULTS (OPERATING PARAMETERS) and
//! the Third-Party Copy VPD page report the limits below. [`parse`] checks the lengths in the
//! header against what arrived and against those limits before it reads a descriptor, so no
//! length or count from the wire is trusted.

use crate::field::{be16, be32, be64, be_at, u8_at};
use crate::sense::{invalid_field_in_param, param_list_length_error, SenseData, SenseKey};

/// Most CSCD descriptors in one parameter list (MAXIMUM CSCD DESCRIPTOR COUNT). A copy
/// needs two (source and destination); a few more let one list copy among several LUs.
pub const MAX_CSCD_DESCRIPTORS: u16 = 8;
/// Most segment descriptors in one parameter list (MAXIMUM SEGMENT DESCRIPTOR COUNT): at
/// 65535 blocks a segment, 256 segments copy 8 GiB of 512-byte blocks in one command.
pub const MAX_SEGMENT_DESCRIPTORS: u16 = 256;
/// Length of the identification descriptor CSCD (E4h).
pub const CSCD_BYTES: usize = 32;
/// Length of the block to block segment descriptor (02h).
pub const SEGMENT_BYTES: usize = 28;
/// MAXIMUM DESCRIPTOR LIST LENGTH: the CSCD and segment descriptor lists together, at most.
pub const MAX_DESCRIPTOR_LIST_BYTES: u32 = MAX_CSCD_DESCRIPTORS as u32 * CSCD_BYTES as u32
    + MAX_SEGMENT_DESCRIPTORS as u32 * SEGMENT_BYTES as u32;
/// The parameter list header.
pub const HEADER_BYTES: usize = 16;
/// The longest parameter list worth reading: the header and the longest descriptor lists
/// (no inline data is accepted).
pub const MAX_LIST_BYTES: usize = HEADER_BYTES + MAX_DESCRIPTOR_LIST_BYTES as usize;

/// DESCRIPTOR TYPE CODE of the identification descriptor CSCD.
pub const IDENTIFICATION_CSCD: u8 = 0xE4;
/// DESCRIPTOR TYPE CODE of the block device to block device segment.
pub const BLOCK_TO_BLOCK_SEGMENT: u8 = 0x02;

/// What the copy manager keeps of the copy for RECEIVE COPY RESULTS (LIST ID USAGE).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ListIdUsage {
    /// 00b: the status is held until RECEIVE COPY RESULTS (COPY STATUS) returns it.
    Hold,
    /// 10b: the LIST IDENTIFIER is unique, but no status is held.
    NoHold,
    /// 11b: the LIST IDENTIFIER means nothing (it need not be unique).
    None,
}

/// An identification descriptor CSCD: the designator of a logical unit.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Cscd {
    /// CODE SET of the designator.
    pub code_set: u8,
    /// ASSOCIATION (0: the designator names a logical unit).
    pub association: u8,
    /// DESIGNATOR TYPE.
    pub designator_type: u8,
    /// The designator (at most 20 bytes).
    pub designator: Vec<u8>,
    /// PERIPHERAL DEVICE TYPE (0: direct access block device).
    pub peripheral_type: u8,
    /// DISK BLOCK LENGTH the initiator believes the device has.
    pub block_len: u32,
}

/// A block device to block device segment.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Segment {
    /// Index of the source CSCD.
    pub source: u16,
    /// Index of the destination CSCD.
    pub destination: u16,
    /// DC: the block count is in destination blocks (else source blocks).
    pub destination_count: bool,
    /// BLOCK DEVICE NUMBER OF BLOCKS.
    pub blocks: u16,
    /// SOURCE BLOCK DEVICE LOGICAL BLOCK ADDRESS.
    pub source_lba: u64,
    /// DESTINATION BLOCK DEVICE LOGICAL BLOCK ADDRESS.
    pub destination_lba: u64,
}

/// A parsed parameter list.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct CopyList {
    /// LIST IDENTIFIER.
    pub list_id: u8,
    /// LIST ID USAGE.
    pub usage: ListIdUsage,
    /// The CSCD descriptors, in order (segments refer to them by index).
    pub cscds: Vec<Cscd>,
    /// The segments, in the order they are processed.
    pub segments: Vec<Segment>,
}

/// Parses the parameter list of an EXTENDED COPY (LID1) whose PARAMETER LIST LENGTH is
/// `param_len`, from the Data-Out `data` that arrived. `Ok(None)`: a PARAMETER LIST LENGTH
/// of 0, which asks for nothing (SPC-4 6.4.1).
///
/// Errors, in the order they are checked:
/// * a list shorter than its header, or than the lengths in the header say: PARAMETER LIST
///   LENGTH ERROR; so are descriptor lists longer than [`MAX_DESCRIPTOR_LIST_BYTES`];
/// * LIST ID USAGE 01b (reserved), inline data (none is accepted): INVALID FIELD IN
///   PARAMETER LIST;
/// * a CSCD of another type than E4h: UNSUPPORTED TARGET DESCRIPTOR TYPE CODE; more than
///   [`MAX_CSCD_DESCRIPTORS`]: TOO MANY TARGET DESCRIPTORS;
/// * a segment of another type than 02h: UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE; more than
///   [`MAX_SEGMENT_DESCRIPTORS`]: TOO MANY SEGMENT DESCRIPTORS;
/// * a malformed descriptor (wrong length, a designator longer than 20 bytes, a device that
///   is not a block device): INVALID FIELD IN PARAMETER LIST, pointing at it.
///
/// The LU ID TYPE and NUL fields of a CSCD are ignored, as SPC-4 makes them obsolete.
pub fn parse(data: &[u8], param_len: usize) -> Result<Option<CopyList>, SenseData> {
    if param_len == 0 {
        return Ok(None);
    }
    let list = &data[..data.len().min(param_len)];
    if param_len < HEADER_BYTES || list.len() < HEADER_BYTES {
        return Err(param_list_length_error());
    }
    let usage = match (u8_at(list, 1) >> 3) & 0x03 {
        0b00 => ListIdUsage::Hold,
        0b10 => ListIdUsage::NoHold,
        0b11 => ListIdUsage::None,
        _ => return Err(invalid_field_in_param(1, Some(4))),
    };
    let cscd_len = u64::from(be16(list, 2));
    let segment_len = u64::from(be32(list, 8));
    let inline_len = u64::from(be32(list, 12));
    // SPC-4 6.4.3: descriptor lists beyond MAXIMUM DESCRIPTOR LIST LENGTH are a parameter list
    // length error, judged before the descriptors are counted.
    if cscd_len + segment_len > u64::from(MAX_DESCRIPTOR_LIST_BYTES) {
        return Err(param_list_length_error());
    }
    if inline_len != 0 {
        return Err(invalid_field_in_param(12, Some(7)));
    }
    // Both below MAX_DESCRIPTOR_LIST_BYTES now, so they fit in usize.
    let (cscd_len, segment_len) = (cscd_len as usize, segment_len as usize);
    let end = HEADER_BYTES + cscd_len + segment_len;
    if end > list.len() {
        return Err(param_list_length_error());
    }
    let cscds = parse_cscds(&list[HEADER_BYTES..HEADER_BYTES + cscd_len])?;
    let segments = parse_segments(&list[HEADER_BYTES + cscd_len..end], HEADER_BYTES + cscd_len)?;
    Ok(Some(CopyList {
        list_id: u8_at(list, 0),
        usage,
        cscds,
        segments,
    }))
}

fn parse_cscds(mut d: &[u8]) -> Result<Vec<Cscd>, SenseData> {
    let mut out = Vec::new();
    let mut at = HEADER_BYTES;
    while !d.is_empty() {
        if d[0] != IDENTIFICATION_CSCD {
            return Err(illegal(0x26, 0x07));
        }
        if out.len() == usize::from(MAX_CSCD_DESCRIPTORS) {
            return Err(illegal(0x26, 0x06));
        }
        let Some(desc) = d.get(..CSCD_BYTES) else {
            return Err(param_list_length_error());
        };
        let peripheral_type = desc[1] & 0x1F;
        if peripheral_type != 0 {
            return Err(field(at + 1, 4));
        }
        let designator_len = usize::from(desc[7]);
        if designator_len > 20 {
            return Err(field(at + 7, 7));
        }
        out.push(Cscd {
            code_set: desc[4] & 0x0F,
            association: (desc[5] >> 4) & 0x03,
            designator_type: desc[5] & 0x0F,
            designator: desc[8..8 + designator_len].to_vec(),
            peripheral_type,
            // DISK BLOCK LENGTH, bytes 29-31.
            block_len: be_at(desc, 29, 3) as u32,
        });
        d = &d[CSCD_BYTES..];
        at += CSCD_BYTES;
    }
    Ok(out)
}

fn parse_segments(mut d: &[u8], mut at: usize) -> Result<Vec<Segment>, SenseData> {
    let mut out = Vec::new();
    while !d.is_empty() {
        if d[0] != BLOCK_TO_BLOCK_SEGMENT {
            return Err(illegal(0x26, 0x09));
        }
        if out.len() == usize::from(MAX_SEGMENT_DESCRIPTORS) {
            return Err(illegal(0x26, 0x08));
        }
        let Some(desc) = d.get(..SEGMENT_BYTES) else {
            return Err(param_list_length_error());
        };
        // DESCRIPTOR LENGTH counts the bytes after byte 3.
        if usize::from(be16(desc, 2)) != SEGMENT_BYTES - 4 {
            return Err(field(at + 2, 7));
        }
        out.push(Segment {
            source: be16(desc, 4),
            destination: be16(desc, 6),
            destination_count: desc[1] & 0x02 != 0,
            blocks: be16(desc, 10),
            source_lba: be64(desc, 12),
            destination_lba: be64(desc, 20),
        });
        d = &d[SEGMENT_BYTES..];
        at += SEGMENT_BYTES;
    }
    Ok(out)
}

fn illegal(asc: u8, ascq: u8) -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, asc, ascq)
}

fn field(byte: usize, bit: u8) -> SenseData {
    // Offsets are below MAX_LIST_BYTES, so they fit in u16.
    invalid_field_in_param(byte as u16, Some(bit))
}

#[cfg(test)]
#[path = "copy_list_tests.rs"]
mod tests;
