//! Zero-copy view over the 48-byte Basic Header Segment (RFC 7143 section 11.2.1).
//!
//! [`Bhs`] wraps anything that derefs to bytes. [`Bhs::new_checked`] refuses fewer than
//! [`BHS_LEN`] bytes; after that no accessor can panic, because every offset used is a constant
//! below 48. Fields whose meaning depends on the opcode are read with the accessor named after
//! the RFC field; the doc of each accessor lists the PDUs that carry it at that offset.

use crate::seq::{Isid, Itt, Lun, SeqNum, Tsih, Ttt};

use super::parse::ParseError;

/// Length of the Basic Header Segment, fixed by the protocol (RFC 7143 section 11.2.1).
pub const BHS_LEN: usize = 48;

/// Largest DataSegmentLength the 24-bit wire field can carry.
pub const MAX_DATA_SEGMENT_LEN: u32 = 0x00ff_ffff;

/// Byte offsets of the BHS fields, in the order RFC 7143 section 11 lists them.
pub mod field {
    /// Byte 0: `.|I|opcode`.
    pub const OPCODE: usize = 0;
    /// Byte 1: F bit plus opcode-specific flags.
    pub const FLAGS: usize = 1;
    /// Byte 2: Response / Reason / Version-max (opcode-specific).
    pub const BYTE2: usize = 2;
    /// Byte 3: Status / Version-min / Version-active (opcode-specific).
    pub const BYTE3: usize = 3;
    /// Byte 4: TotalAHSLength, in 4-byte words.
    pub const TOTAL_AHS_LEN: usize = 4;
    /// Bytes 5-7: DataSegmentLength (24 bits).
    pub const DATA_SEGMENT_LEN: usize = 5;
    /// Bytes 8-15: LUN (or ISID + TSIH in Login PDUs).
    pub const LUN: usize = 8;
    /// Bytes 8-13 of Login PDUs: ISID.
    pub const ISID: usize = 8;
    /// Bytes 14-15 of Login PDUs: TSIH.
    pub const TSIH: usize = 14;
    /// Bytes 16-19: Initiator Task Tag.
    pub const ITT: usize = 16;
    /// Bytes 20-23: TTT, Expected Data Transfer Length, Referenced Task Tag or SNACK Tag.
    pub const WORD20: usize = 20;
    /// Bytes 20-21 of Login and Logout Requests: CID.
    pub const CID: usize = 20;
    /// Bytes 24-27: CmdSN (requests) or StatSN (responses).
    pub const WORD24: usize = 24;
    /// Bytes 28-31: ExpStatSN (requests) or ExpCmdSN (responses).
    pub const WORD28: usize = 28;
    /// Bytes 32-35: MaxCmdSN (responses), RefCmdSN (TMF request).
    pub const WORD32: usize = 32;
    /// Bytes 32-47 of a SCSI Command: the first 16 bytes of the CDB.
    pub const CDB: usize = 32;
    /// Bytes 36-39: DataSN, R2TSN, ExpDataSN, or Status-Class/Detail, AsyncEvent fields.
    pub const WORD36: usize = 36;
    /// Bytes 40-43: Buffer Offset, BegRun, Bidi Read Residual, Time2Wait/Time2Retain.
    pub const WORD40: usize = 40;
    /// Bytes 44-47: Residual Count, Desired Data Transfer Length, RunLength.
    pub const WORD44: usize = 44;
}

/// Bit masks of byte 0 and byte 1.
pub mod bits {
    /// Byte 0: I (immediate delivery) bit.
    pub const IMMEDIATE: u8 = 0x40;
    /// Byte 0: the six opcode bits.
    pub const OPCODE_MASK: u8 = 0x3f;
    /// Byte 1: F (final) bit; T (transit) bit in Login PDUs.
    pub const FINAL: u8 = 0x80;
}

/// A view over a Basic Header Segment. Once [`Bhs::new_checked`] succeeds no accessor panics.
#[derive(Clone, Copy, Debug)]
pub struct Bhs<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Bhs<T> {
    /// Wraps `buf`, refusing buffers shorter than [`BHS_LEN`]. Extra bytes are ignored.
    pub fn new_checked(buf: T) -> Result<Self, ParseError> {
        let len = buf.as_ref().len();
        if len < BHS_LEN {
            return Err(ParseError::Truncated { len });
        }
        Ok(Self { buf })
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Opcode without the I bit (RFC 7143 section 11.2.1.2).
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPCODE] & bits::OPCODE_MASK
    }

    /// I bit: immediate delivery (requests only).
    pub fn is_immediate(&self) -> bool {
        self.b()[field::OPCODE] & bits::IMMEDIATE != 0
    }

    /// F bit (T bit in Login PDUs).
    pub fn is_final(&self) -> bool {
        self.b()[field::FLAGS] & bits::FINAL != 0
    }

    /// The whole of byte 1: F bit and opcode-specific flags.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }

    /// Byte 2: Response (SCSI Response, TMF/Logout Response), Reason (Reject),
    /// Version-max (Login).
    pub fn byte2(&self) -> u8 {
        self.b()[field::BYTE2]
    }

    /// Byte 3: Status (SCSI Response, Data-In), Version-min / Version-active (Login).
    pub fn byte3(&self) -> u8 {
        self.b()[field::BYTE3]
    }

    /// TotalAHSLength in bytes (the wire field counts 4-byte words).
    pub fn total_ahs_len(&self) -> usize {
        usize::from(self.b()[field::TOTAL_AHS_LEN]) * 4
    }

    /// DataSegmentLength in bytes, padding excluded.
    pub fn data_segment_len(&self) -> u32 {
        let b = self.b();
        let at = field::DATA_SEGMENT_LEN;
        u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
    }

    /// LUN (bytes 8-15) of PDUs that carry one.
    pub fn lun(&self) -> Lun {
        Lun(self.u64_at(field::LUN))
    }

    /// ISID of Login Request/Response.
    pub fn isid(&self) -> Isid {
        let b = self.b();
        let at = field::ISID;
        Isid([b[at], b[at + 1], b[at + 2], b[at + 3], b[at + 4], b[at + 5]])
    }

    /// TSIH of Login Request/Response.
    pub fn tsih(&self) -> Tsih {
        Tsih(self.u16_at(field::TSIH))
    }

    /// Initiator Task Tag.
    pub fn itt(&self) -> Itt {
        Itt(self.u32_at(field::ITT))
    }

    /// Bytes 20-23 read as a Target Transfer Tag (NOP, Text, Data, R2T, SNACK).
    pub fn ttt(&self) -> Ttt {
        Ttt(self.u32_at(field::WORD20))
    }

    /// Expected Data Transfer Length of a SCSI Command (bytes 20-23).
    pub fn expected_data_transfer_length(&self) -> u32 {
        self.u32_at(field::WORD20)
    }

    /// CID of Login and Logout Requests (bytes 20-21).
    pub fn cid(&self) -> u16 {
        self.u16_at(field::CID)
    }

    /// CmdSN of requests (bytes 24-27).
    pub fn cmd_sn(&self) -> SeqNum {
        SeqNum(self.u32_at(field::WORD24))
    }

    /// StatSN of responses (bytes 24-27).
    pub fn stat_sn(&self) -> SeqNum {
        SeqNum(self.u32_at(field::WORD24))
    }

    /// ExpStatSN of requests (bytes 28-31).
    pub fn exp_stat_sn(&self) -> SeqNum {
        SeqNum(self.u32_at(field::WORD28))
    }

    /// ExpCmdSN of responses (bytes 28-31).
    pub fn exp_cmd_sn(&self) -> SeqNum {
        SeqNum(self.u32_at(field::WORD28))
    }

    /// MaxCmdSN of responses (bytes 32-35).
    pub fn max_cmd_sn(&self) -> SeqNum {
        SeqNum(self.u32_at(field::WORD32))
    }

    /// The 16-byte CDB field of a SCSI Command (bytes 32-47).
    pub fn cdb(&self) -> &[u8] {
        &self.b()[field::CDB..BHS_LEN]
    }

    /// DataSN (Data-In/Out), R2TSN (R2T) or ExpDataSN (SCSI Response, TMF Request).
    pub fn data_sn(&self) -> u32 {
        self.u32_at(field::WORD36)
    }

    /// Buffer Offset of Data-In, Data-Out and R2T (bytes 40-43).
    pub fn buffer_offset(&self) -> u32 {
        self.u32_at(field::WORD40)
    }

    /// Residual Count (SCSI Response, Data-In), Desired Data Transfer Length (R2T), RunLength
    /// (SNACK): bytes 44-47.
    pub fn word44(&self) -> u32 {
        self.u32_at(field::WORD44)
    }

    /// Big-endian u16 at a constant offset below 47.
    pub(crate) fn u16_at(&self, at: usize) -> u16 {
        let b = self.b();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// Big-endian u32 at a constant offset below 45.
    pub(crate) fn u32_at(&self, at: usize) -> u32 {
        let b = self.b();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    fn u64_at(&self, at: usize) -> u64 {
        (u64::from(self.u32_at(at)) << 32) | u64::from(self.u32_at(at + 4))
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
}

impl<'a> Bhs<&'a [u8; BHS_LEN]> {
    /// Wraps a header that is 48 bytes by its type, so no check is needed.
    pub fn from_array(buf: &'a [u8; BHS_LEN]) -> Self {
        Self { buf }
    }
}

impl Bhs<[u8; BHS_LEN]> {
    /// An all-zero header to fill in with the setters (reserved fields stay zero).
    pub fn zeroed() -> Self {
        Self { buf: [0; BHS_LEN] }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bhs<T> {
    /// Sets byte 0: opcode (masked to six bits) and the I bit.
    pub fn set_opcode(&mut self, opcode: u8, immediate: bool) {
        let i = if immediate { bits::IMMEDIATE } else { 0 };
        self.set_u8(field::OPCODE, (opcode & bits::OPCODE_MASK) | i);
    }

    /// Sets DataSegmentLength; values above [`MAX_DATA_SEGMENT_LEN`] are truncated to 24 bits.
    pub fn set_data_segment_len(&mut self, len: u32) {
        let [_, a, b, c] = (len & MAX_DATA_SEGMENT_LEN).to_be_bytes();
        let at = field::DATA_SEGMENT_LEN;
        self.set_u8(at, a);
        self.set_u8(at + 1, b);
        self.set_u8(at + 2, c);
    }

    /// Sets TotalAHSLength from a byte count (rounded up to words, saturating at 255 words).
    pub fn set_total_ahs_len(&mut self, len_bytes: usize) {
        let words = u8::try_from(len_bytes.div_ceil(4)).unwrap_or(u8::MAX);
        self.set_u8(field::TOTAL_AHS_LEN, words);
    }

    /// Writes one byte; offsets past the header are ignored.
    pub(crate) fn set_u8(&mut self, at: usize, v: u8) {
        if let Some(slot) = self.buf.as_mut().get_mut(at) {
            *slot = v;
        }
    }

    /// Writes big-endian bytes starting at `at`; bytes past the header are ignored.
    pub(crate) fn set_bytes(&mut self, at: usize, v: &[u8]) {
        for (i, byte) in v.iter().enumerate() {
            self.set_u8(at + i, *byte);
        }
    }

    pub(crate) fn set_u16(&mut self, at: usize, v: u16) {
        self.set_bytes(at, &v.to_be_bytes());
    }

    pub(crate) fn set_u32(&mut self, at: usize, v: u32) {
        self.set_bytes(at, &v.to_be_bytes());
    }

    pub(crate) fn set_u64(&mut self, at: usize, v: u64) {
        self.set_bytes(at, &v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_refused() {
        assert_eq!(
            Bhs::new_checked(&[0u8; 47][..]).err(),
            Some(ParseError::Truncated { len: 47 })
        );
        assert!(Bhs::new_checked(&[0u8; 48][..]).is_ok());
    }

    #[test]
    fn accessors_read_big_endian_fields() {
        let mut raw = [0u8; 48];
        raw[0] = 0x41; // I bit + SCSI Command
        raw[1] = 0xc1;
        raw[4] = 2;
        raw[5..8].copy_from_slice(&[0x01, 0x02, 0x03]);
        raw[8] = 0x00;
        raw[9] = 0x05;
        raw[16..20].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        raw[20..24].copy_from_slice(&0x1000u32.to_be_bytes());
        let bhs = Bhs::new_checked(&raw[..]).expect("48 bytes");
        assert_eq!(bhs.opcode(), 0x01);
        assert!(bhs.is_immediate());
        assert!(bhs.is_final());
        assert_eq!(bhs.total_ahs_len(), 8);
        assert_eq!(bhs.data_segment_len(), 0x010203);
        assert_eq!(bhs.lun(), Lun(0x0005_0000_0000_0000));
        assert_eq!(bhs.itt(), Itt(0xdead_beef));
        assert_eq!(bhs.expected_data_transfer_length(), 0x1000);
    }

    #[test]
    fn setters_are_the_inverse_of_accessors() {
        let mut raw = [0u8; 48];
        let mut bhs = Bhs::new_checked(&mut raw[..]).expect("48 bytes");
        bhs.set_opcode(0xff, false);
        bhs.set_data_segment_len(0x0123_4567);
        bhs.set_total_ahs_len(5);
        bhs.set_u32(field::ITT, 7);
        bhs.set_u32(100, 7); // out of range: ignored, no panic
        assert_eq!(bhs.opcode(), 0x3f);
        assert!(!bhs.is_immediate());
        assert_eq!(bhs.data_segment_len(), 0x23_4567);
        assert_eq!(bhs.total_ahs_len(), 8);
        assert_eq!(bhs.itt(), Itt(7));
    }
}
