//! Sense data: building it (target side) and decoding it (initiator side).
//!
//! [`SenseData`] holds one sense condition. [`SenseData::to_bytes`] encodes it in fixed (70h)
//! or descriptor (72h) format, chosen by [`SenseData::format`]; [`SenseData::parse`] decodes
//! either format (current or deferred). [`asc_description`] names the common ASC/ASCQ pairs.

use std::fmt;

/// A sense key (SPC-4 table 47).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct SenseKey(pub u8);

impl SenseKey {
    /// 0h: no specific sense key information.
    pub const NO_SENSE: Self = Self(0x00);
    /// 1h: the command completed with recovery action.
    pub const RECOVERED_ERROR: Self = Self(0x01);
    /// 2h: the logical unit is not accessible.
    pub const NOT_READY: Self = Self(0x02);
    /// 3h: a flaw in the medium or in the recorded data.
    pub const MEDIUM_ERROR: Self = Self(0x03);
    /// 4h: a non-recoverable hardware failure.
    pub const HARDWARE_ERROR: Self = Self(0x04);
    /// 5h: an illegal parameter in the CDB or parameter list.
    pub const ILLEGAL_REQUEST: Self = Self(0x05);
    /// 6h: a unit attention condition was reported.
    pub const UNIT_ATTENTION: Self = Self(0x06);
    /// 7h: the block is protected against the operation.
    pub const DATA_PROTECT: Self = Self(0x07);
    /// 8h: blank medium or end of data.
    pub const BLANK_CHECK: Self = Self(0x08);
    /// Ah: an EXTENDED COPY was aborted.
    pub const COPY_ABORTED: Self = Self(0x0A);
    /// Bh: the device server aborted the command.
    pub const ABORTED_COMMAND: Self = Self(0x0B);
    /// Dh: a buffered device reached the end of the partition.
    pub const VOLUME_OVERFLOW: Self = Self(0x0D);
    /// Eh: source data did not match the data on the medium.
    pub const MISCOMPARE: Self = Self(0x0E);

    /// The name SPC-4 gives the key, e.g. `"ILLEGAL REQUEST"`.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "NO SENSE",
            0x01 => "RECOVERED ERROR",
            0x02 => "NOT READY",
            0x03 => "MEDIUM ERROR",
            0x04 => "HARDWARE ERROR",
            0x05 => "ILLEGAL REQUEST",
            0x06 => "UNIT ATTENTION",
            0x07 => "DATA PROTECT",
            0x08 => "BLANK CHECK",
            0x09 => "VENDOR SPECIFIC",
            0x0A => "COPY ABORTED",
            0x0B => "ABORTED COMMAND",
            0x0D => "VOLUME OVERFLOW",
            0x0E => "MISCOMPARE",
            0x0F => "COMPLETED",
            _ => "RESERVED",
        }
    }
}

impl fmt::Display for SenseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.0)
    }
}

/// Which sense data format to encode (SPC-4 4.5).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub enum SenseFormat {
    /// Response code 70h (current) / 71h (deferred), 18 bytes.
    #[default]
    Fixed,
    /// Response code 72h (current) / 73h (deferred): 8-byte header plus descriptors.
    Descriptor,
}

/// One sense condition: key, additional sense code and qualifier, and optional fields.
///
/// Build it with [`SenseData::new`] and the `with_*` methods; encode it with
/// [`to_bytes`](Self::to_bytes); decode received sense with [`parse`](Self::parse).
#[derive(Clone, Debug, Eq, PartialEq, Hash)]
pub struct SenseData {
    /// Sense key.
    pub key: SenseKey,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// INFORMATION field (e.g. the miscompare offset), if valid.
    pub information: Option<u64>,
    /// The three sense-key-specific bytes, SKSV bit included (byte 0 bit 7 set), if valid.
    pub sense_key_specific: Option<[u8; 3]>,
    /// Deferred error (71h/73h) rather than current (70h/72h).
    pub deferred: bool,
    /// Format [`to_bytes`](Self::to_bytes) produces.
    pub format: SenseFormat,
}

/// Why received sense data could not be decoded.
#[derive(Clone, Copy, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SenseParseError {
    /// Fewer bytes than the format's fixed part.
    #[error("sense data too short ({0} bytes)")]
    TooShort(usize),
    /// The response code is not 70h–73h.
    #[error("unsupported sense response code {0:#04x}")]
    UnknownResponseCode(u8),
}

impl SenseData {
    /// A current sense condition in fixed format, with no optional fields.
    pub fn new(key: SenseKey, asc: u8, ascq: u8) -> Self {
        Self {
            key,
            asc,
            ascq,
            information: None,
            sense_key_specific: None,
            deferred: false,
            format: SenseFormat::Fixed,
        }
    }

    /// Sets the INFORMATION field.
    pub fn with_information(mut self, information: u64) -> Self {
        self.information = Some(information);
        self
    }

    /// Sets a FIELD POINTER sense-key-specific value (SPC-4 4.5.2.4.2).
    ///
    /// `in_cdb` is the C/D bit (true: the field is in the CDB; false: in the parameter list),
    /// `byte` the byte offset and `bit`, when given, the most significant bit of the field.
    pub fn with_field_pointer(mut self, in_cdb: bool, byte: u16, bit: Option<u8>) -> Self {
        let mut b0 = 0x80;
        if in_cdb {
            b0 |= 0x40;
        }
        if let Some(bit) = bit {
            b0 |= 0x08 | (bit & 0x07);
        }
        let [hi, lo] = byte.to_be_bytes();
        self.sense_key_specific = Some([b0, hi, lo]);
        self
    }

    /// Selects the encoding format.
    pub fn with_format(mut self, format: SenseFormat) -> Self {
        self.format = format;
        self
    }

    /// The field pointer, as (C/D, byte, bit), when the sense-key-specific bytes hold one.
    ///
    /// Only meaningful for ILLEGAL REQUEST sense.
    pub fn field_pointer(&self) -> Option<(bool, u16, Option<u8>)> {
        let [b0, hi, lo] = self.sense_key_specific?;
        if b0 & 0x80 == 0 {
            return None;
        }
        let bit = (b0 & 0x08 != 0).then_some(b0 & 0x07);
        Some((b0 & 0x40 != 0, u16::from_be_bytes([hi, lo]), bit))
    }

    /// Encodes in [`format`](Self::format).
    ///
    /// Fixed format is 18 bytes; an INFORMATION value above `u32::MAX` cannot be carried there
    /// and is then sent with VALID=0. Descriptor format carries an information descriptor
    /// (type 00h) and a sense-key-specific descriptor (type 02h) when those fields are set.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self.format {
            SenseFormat::Fixed => self.to_fixed(),
            SenseFormat::Descriptor => self.to_descriptor(),
        }
    }

    fn to_fixed(&self) -> Vec<u8> {
        let mut b = vec![0u8; 18];
        b[0] = if self.deferred { 0x71 } else { 0x70 };
        if let Some(info) = self.information.and_then(|i| u32::try_from(i).ok()) {
            b[0] |= 0x80;
            b[3..7].copy_from_slice(&info.to_be_bytes());
        }
        b[2] = self.key.0 & 0x0F;
        b[7] = 10;
        b[12] = self.asc;
        b[13] = self.ascq;
        if let Some(sks) = self.sense_key_specific {
            b[15..18].copy_from_slice(&sks);
        }
        b
    }

    fn to_descriptor(&self) -> Vec<u8> {
        let mut b = vec![0u8; 8];
        b[0] = if self.deferred { 0x73 } else { 0x72 };
        b[1] = self.key.0 & 0x0F;
        b[2] = self.asc;
        b[3] = self.ascq;
        if let Some(info) = self.information {
            b.extend_from_slice(&[0x00, 0x0A, 0x80, 0x00]);
            b.extend_from_slice(&info.to_be_bytes());
        }
        if let Some(sks) = self.sense_key_specific {
            b.extend_from_slice(&[0x02, 0x06, 0x00, 0x00, sks[0], sks[1], sks[2], 0x00]);
        }
        // At most 8 + 12 + 8 bytes, so the additional length fits in a byte.
        b[7] = (b.len() - 8) as u8;
        b
    }

    /// Decodes fixed (70h/71h) or descriptor (72h/73h) sense data.
    ///
    /// Tolerates truncation after the key/ASC/ASCQ bytes (fields that are cut off are
    /// reported as absent) and ignores descriptor types other than 00h and 02h.
    pub fn parse(bytes: &[u8]) -> Result<Self, SenseParseError> {
        let code = *bytes.first().ok_or(SenseParseError::TooShort(0))? & 0x7F;
        match code {
            0x70 | 0x71 => {
                if bytes.len() < 14 {
                    return Err(SenseParseError::TooShort(bytes.len()));
                }
                let mut s = SenseData::new(SenseKey(bytes[2] & 0x0F), bytes[12], bytes[13]);
                s.deferred = code == 0x71;
                if bytes[0] & 0x80 != 0 {
                    let info = u32::from_be_bytes([bytes[3], bytes[4], bytes[5], bytes[6]]);
                    s.information = Some(u64::from(info));
                }
                if let Some(sks) = bytes.get(15..18) {
                    if sks[0] & 0x80 != 0 {
                        s.sense_key_specific = Some([sks[0], sks[1], sks[2]]);
                    }
                }
                Ok(s)
            }
            0x72 | 0x73 => {
                if bytes.len() < 4 {
                    return Err(SenseParseError::TooShort(bytes.len()));
                }
                let mut s = SenseData::new(SenseKey(bytes[1] & 0x0F), bytes[2], bytes[3]);
                s.deferred = code == 0x73;
                s.format = SenseFormat::Descriptor;
                let add_len = usize::from(bytes.get(7).copied().unwrap_or(0));
                let end = bytes.len().min(8 + add_len);
                let mut pos = 8;
                while pos + 2 <= end {
                    let dtype = bytes[pos];
                    let dlen = usize::from(bytes[pos + 1]);
                    let Some(desc) = bytes.get(pos..(pos + 2 + dlen).min(end)) else {
                        break;
                    };
                    match dtype {
                        0x00 if desc.len() >= 12 && desc[2] & 0x80 != 0 => {
                            let mut v = [0u8; 8];
                            v.copy_from_slice(&desc[4..12]);
                            s.information = Some(u64::from_be_bytes(v));
                        }
                        0x02 if desc.len() >= 7 && desc[4] & 0x80 != 0 => {
                            s.sense_key_specific = Some([desc[4], desc[5], desc[6]]);
                        }
                        _ => {}
                    }
                    pos += 2 + dlen;
                }
                Ok(s)
            }
            other => Err(SenseParseError::UnknownResponseCode(other)),
        }
    }

    /// The name of the ASC/ASCQ pair, if it is one of the common ones.
    pub fn description(&self) -> Option<&'static str> {
        asc_description(self.asc, self.ascq)
    }
}

impl fmt::Display for SenseData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ASC/ASCQ {:02X}h/{:02X}h",
            self.key, self.asc, self.ascq
        )?;
        if let Some(d) = self.description() {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// Names the common ASC/ASCQ pairs (SPC-4 table D.1), e.g. `(0x24, 0x00)` →
/// `"INVALID FIELD IN CDB"`.
pub fn asc_description(asc: u8, ascq: u8) -> Option<&'static str> {
    Some(match (asc, ascq) {
        (0x00, 0x00) => "NO ADDITIONAL SENSE INFORMATION",
        (0x00, 0x16) => "OPERATION IN PROGRESS",
        (0x04, 0x00) => "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE",
        (0x04, 0x01) => "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
        (0x04, 0x02) => "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
        (0x04, 0x0B) => "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE",
        (0x04, 0x0C) => "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE",
        (0x04, 0x1B) => "LOGICAL UNIT NOT READY, SANITIZE IN PROGRESS",
        (0x08, 0x04) => "UNREACHABLE COPY TARGET",
        (0x0C, 0x00) => "WRITE ERROR",
        (0x0D, 0x02) => "COPY TARGET DEVICE DATA OVERRUN",
        (0x0D, 0x03) => "COPY TARGET DEVICE DATA UNDERRUN",
        (0x0E, 0x03) => "INVALID FIELD IN COMMAND INFORMATION UNIT",
        (0x11, 0x00) => "UNRECOVERED READ ERROR",
        (0x1A, 0x00) => "PARAMETER LIST LENGTH ERROR",
        (0x1D, 0x00) => "MISCOMPARE DURING VERIFY OPERATION",
        (0x20, 0x00) => "INVALID COMMAND OPERATION CODE",
        (0x21, 0x00) => "LOGICAL BLOCK ADDRESS OUT OF RANGE",
        (0x24, 0x00) => "INVALID FIELD IN CDB",
        (0x25, 0x00) => "LOGICAL UNIT NOT SUPPORTED",
        (0x26, 0x00) => "INVALID FIELD IN PARAMETER LIST",
        (0x26, 0x01) => "PARAMETER NOT SUPPORTED",
        (0x26, 0x02) => "PARAMETER VALUE INVALID",
        (0x26, 0x04) => "INVALID RELEASE OF PERSISTENT RESERVATION",
        (0x26, 0x06) => "TOO MANY TARGET DESCRIPTORS",
        (0x26, 0x07) => "UNSUPPORTED TARGET DESCRIPTOR TYPE CODE",
        (0x26, 0x08) => "TOO MANY SEGMENT DESCRIPTORS",
        (0x26, 0x09) => "UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE",
        (0x27, 0x00) => "WRITE PROTECTED",
        (0x27, 0x01) => "HARDWARE WRITE PROTECTED",
        (0x27, 0x02) => "LOGICAL UNIT SOFTWARE WRITE PROTECTED",
        (0x27, 0x07) => "SPACE ALLOCATION FAILED WRITE PROTECT",
        (0x28, 0x00) => "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED",
        (0x29, 0x00) => "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED",
        (0x29, 0x01) => "POWER ON OCCURRED",
        (0x29, 0x02) => "SCSI BUS RESET OCCURRED",
        (0x29, 0x03) => "BUS DEVICE RESET FUNCTION OCCURRED",
        (0x29, 0x04) => "DEVICE INTERNAL RESET",
        (0x29, 0x07) => "I_T NEXUS LOSS OCCURRED",
        (0x2A, 0x01) => "MODE PARAMETERS CHANGED",
        (0x2A, 0x03) => "RESERVATIONS PREEMPTED",
        (0x2A, 0x04) => "RESERVATIONS RELEASED",
        (0x2A, 0x05) => "REGISTRATIONS PREEMPTED",
        (0x2A, 0x06) => "ASYMMETRIC ACCESS STATE CHANGED",
        (0x2A, 0x09) => "CAPACITY DATA HAS CHANGED",
        (0x2F, 0x00) => "COMMANDS CLEARED BY ANOTHER INITIATOR",
        (0x31, 0x03) => "SANITIZE COMMAND FAILED",
        (0x38, 0x07) => "THIN PROVISIONING SOFT THRESHOLD REACHED",
        (0x39, 0x00) => "SAVING PARAMETERS NOT SUPPORTED",
        (0x3A, 0x00) => "MEDIUM NOT PRESENT",
        (0x3F, 0x0E) => "REPORTED LUNS DATA HAS CHANGED",
        (0x44, 0x00) => "INTERNAL TARGET FAILURE",
        (0x53, 0x02) => "MEDIUM REMOVAL PREVENTED",
        (0x55, 0x03) => "INSUFFICIENT RESOURCES",
        (0x55, 0x04) => "INSUFFICIENT REGISTRATION RESOURCES",
        _ => return None,
    })
}

// Constructors the device server uses; kept here so every command builds the same sense.

/// CHECK CONDITION / ILLEGAL REQUEST / 20h/00h INVALID COMMAND OPERATION CODE.
pub(crate) fn invalid_opcode() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x20, 0x00).with_field_pointer(true, 0, Some(7))
}

/// ILLEGAL REQUEST / 24h/00h with a CDB field pointer.
pub(crate) fn invalid_field_in_cdb(byte: u16, bit: Option<u8>) -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x24, 0x00).with_field_pointer(true, byte, bit)
}

/// ILLEGAL REQUEST / 26h/00h with a parameter-list field pointer.
pub(crate) fn invalid_field_in_param(byte: u16, bit: Option<u8>) -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x26, 0x00).with_field_pointer(false, byte, bit)
}

/// ILLEGAL REQUEST / 1Ah/00h PARAMETER LIST LENGTH ERROR.
pub(crate) fn param_list_length_error() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x1A, 0x00)
}

/// ILLEGAL REQUEST / 21h/00h LOGICAL BLOCK ADDRESS OUT OF RANGE.
pub(crate) fn lba_out_of_range() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x21, 0x00)
}

/// ILLEGAL REQUEST / 25h/00h LOGICAL UNIT NOT SUPPORTED.
pub(crate) fn lun_not_supported() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x25, 0x00)
}

/// DATA PROTECT / 27h/00h WRITE PROTECTED.
pub(crate) fn write_protected() -> SenseData {
    SenseData::new(SenseKey::DATA_PROTECT, 0x27, 0x00)
}

/// DATA PROTECT / 27h/07h SPACE ALLOCATION FAILED WRITE PROTECT: a write to a thin LU needs
/// space the backing store no longer has (SBC-4 4.7.3.6).
pub(crate) fn space_allocation_failed() -> SenseData {
    SenseData::new(SenseKey::DATA_PROTECT, 0x27, 0x07)
}

/// MISCOMPARE / 1Dh/00h MISCOMPARE DURING VERIFY OPERATION, INFORMATION = `offset`: the
/// offset in the Data-Out buffer of the first byte that differs.
pub(crate) fn miscompare(offset: u64) -> SenseData {
    SenseData::new(SenseKey::MISCOMPARE, 0x1D, 0x00).with_information(offset)
}

/// COPY ABORTED with this ASC/ASCQ: an EXTENDED COPY failed while processing segments.
pub(crate) fn copy_aborted(asc: u8, ascq: u8) -> SenseData {
    SenseData::new(SenseKey::COPY_ABORTED, asc, ascq)
}

/// NOT READY / 3Ah/00h MEDIUM NOT PRESENT.
pub(crate) fn medium_not_present() -> SenseData {
    SenseData::new(SenseKey::NOT_READY, 0x3A, 0x00)
}

/// ILLEGAL REQUEST / 53h/02h MEDIUM REMOVAL PREVENTED.
pub(crate) fn medium_removal_prevented() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x53, 0x02)
}

/// UNIT ATTENTION with the given code.
pub(crate) fn unit_attention(asc: u8, ascq: u8) -> SenseData {
    SenseData::new(SenseKey::UNIT_ATTENTION, asc, ascq)
}

/// The index of the highest set bit of `byte` (the bit a field pointer names).
pub(crate) fn top_bit(byte: u8) -> Option<u8> {
    (byte != 0).then(|| 7 - byte.leading_zeros() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_round_trip_with_field_pointer() {
        let s = invalid_field_in_cdb(2, Some(5));
        let b = s.to_bytes();
        assert_eq!(b.len(), 18);
        assert_eq!(b[0], 0x70);
        assert_eq!(b[2], 0x05);
        assert_eq!((b[12], b[13]), (0x24, 0x00));
        assert_eq!(&b[15..18], &[0xCD, 0x00, 0x02]);
        let p = SenseData::parse(&b).unwrap();
        assert_eq!(p, s);
        assert_eq!(p.field_pointer(), Some((true, 2, Some(5))));
    }

    #[test]
    fn fixed_information_sets_valid() {
        let s = SenseData::new(SenseKey::MISCOMPARE, 0x1D, 0).with_information(513);
        let b = s.to_bytes();
        assert_eq!(b[0], 0xF0);
        assert_eq!(&b[3..7], &513u32.to_be_bytes());
        assert_eq!(SenseData::parse(&b).unwrap().information, Some(513));
        // Too big for fixed format: VALID stays clear.
        let b = s.with_information(1 << 40).to_bytes();
        assert_eq!(b[0], 0x70);
    }

    #[test]
    fn descriptor_round_trip() {
        let s = SenseData::new(SenseKey::MISCOMPARE, 0x1D, 0)
            .with_information(1 << 40)
            .with_field_pointer(false, 7, None)
            .with_format(SenseFormat::Descriptor);
        let b = s.to_bytes();
        assert_eq!(b[0], 0x72);
        assert_eq!(b[1], 0x0E);
        assert_eq!(b[7] as usize, b.len() - 8);
        assert_eq!(SenseData::parse(&b).unwrap(), s);
    }

    #[test]
    fn parse_errors_and_truncation() {
        assert_eq!(SenseData::parse(&[]), Err(SenseParseError::TooShort(0)));
        assert_eq!(
            SenseData::parse(&[0x70; 5]),
            Err(SenseParseError::TooShort(5))
        );
        assert_eq!(
            SenseData::parse(&[0x7F, 0, 0, 0]),
            Err(SenseParseError::UnknownResponseCode(0x7F))
        );
        // Descriptor with a lying additional length.
        let p = SenseData::parse(&[0x72, 0x05, 0x24, 0x00, 0, 0, 0, 200, 0x02, 0x06]).unwrap();
        assert_eq!(p.asc, 0x24);
        assert_eq!(p.sense_key_specific, None);
    }

    #[test]
    fn names() {
        assert_eq!(asc_description(0x24, 0), Some("INVALID FIELD IN CDB"));
        assert_eq!(asc_description(0xFF, 0xFF), None);
        assert_eq!(SenseKey::ILLEGAL_REQUEST.name(), "ILLEGAL REQUEST");
        let s = lba_out_of_range().to_string();
        assert!(s.contains("LOGICAL BLOCK ADDRESS OUT OF RANGE"), "{s}");
        assert_eq!(top_bit(0x24), Some(5));
        assert_eq!(top_bit(0), None);
    }
}
