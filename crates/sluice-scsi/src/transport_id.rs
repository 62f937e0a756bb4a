//! SCSI TransportIDs of iSCSI initiators (SPC-4 7.6.4.6): how persistent reservations name an
//! initiator port in parameter lists (SPEC_I_PT, REGISTER AND MOVE) and in READ FULL STATUS.
//!
//! SPC defines the TransportID format of every SCSI transport; this crate knows the iSCSI one
//! only because persistent reservations carry it, not because it speaks iSCSI. Two formats:
//!
//! * format 00b names an initiator *device* (its iSCSI name): every port of that device;
//! * format 01b names one initiator *port*: the iSCSI name, `,i,0x` and the 12 hex digits of
//!   the ISID (RFC 7143 section 4.2.7.4, the iSCSI initiator port name).
//!
//! iSCSI names compare case-insensitively (RFC 3722 stringprep folds case), so names are kept
//! lower-cased and so is the ISID's hex.

use std::fmt;

/// PROTOCOL IDENTIFIER of iSCSI (SPC-4 table 362).
pub const ISCSI_PROTOCOL_ID: u8 = 0x5;

/// Longest iSCSI name: RFC 7143 section 4.2.7.1 ("iSCSI names ... up to 223 bytes").
pub const MAX_ISCSI_NAME_BYTES: usize = 223;

/// Largest TransportID accepted from the wire: the 4-byte header, a 223-byte name,
/// `,i,0x`, 12 hex digits and the terminating NUL, padded to a multiple of 4. Anything longer
/// cannot be a valid iSCSI TransportID, so the parser refuses it before reading on.
pub const MAX_TRANSPORT_ID_BYTES: usize =
    4 + (MAX_ISCSI_NAME_BYTES + 5 + 12 + 1).next_multiple_of(4);

/// The initiator side of an I_T nexus as SCSI names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransportId {
    /// One iSCSI initiator port: its iSCSI name (lower-cased) and ISID.
    IscsiPort {
        /// The initiator's iSCSI name, lower-cased.
        name: String,
        /// The session's ISID (6 bytes, RFC 7143 section 11.12.5).
        isid: [u8; 6],
    },
    /// Every port of one iSCSI initiator device (format 00b).
    IscsiDevice {
        /// The initiator's iSCSI name, lower-cased.
        name: String,
    },
}

/// Why a TransportID from a parameter list was refused. `at` is the byte offset inside the
/// TransportID that is wrong (for the sense data's field pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportIdError {
    /// Fewer bytes than the header or its ADDITIONAL LENGTH announce.
    #[error("TransportID truncated")]
    Truncated,
    /// A PROTOCOL IDENTIFIER other than iSCSI: no port of this target uses it.
    #[error("TransportID of protocol {0:#x}, not iSCSI")]
    Protocol(u8),
    /// A FORMAT CODE other than 00b or 01b.
    #[error("TransportID format code {0}")]
    Format(u8),
    /// ADDITIONAL LENGTH not a multiple of 4, or beyond [`MAX_TRANSPORT_ID_BYTES`].
    #[error("TransportID additional length {0}")]
    Length(u16),
    /// The name is empty, not NUL-terminated, not printable, too long, or (format 01b) lacks
    /// a well-formed `,i,0x<ISID>` part.
    #[error("TransportID name malformed")]
    Name,
}

impl TransportIdError {
    /// Offset of the offending field inside the TransportID.
    pub fn offset(self) -> u16 {
        match self {
            TransportIdError::Truncated | TransportIdError::Length(_) => 2,
            TransportIdError::Protocol(_) | TransportIdError::Format(_) => 0,
            TransportIdError::Name => 4,
        }
    }
}

impl TransportId {
    /// An iSCSI initiator port from its name and ISID.
    pub fn iscsi_port(name: &str, isid: [u8; 6]) -> Self {
        TransportId::IscsiPort {
            name: name.to_ascii_lowercase(),
            isid,
        }
    }

    /// Every port of an iSCSI initiator device.
    pub fn iscsi_device(name: &str) -> Self {
        TransportId::IscsiDevice {
            name: name.to_ascii_lowercase(),
        }
    }

    /// The iSCSI name.
    pub fn name(&self) -> &str {
        match self {
            TransportId::IscsiPort { name, .. } | TransportId::IscsiDevice { name } => name,
        }
    }

    /// Whether this names `port` (a device names each of its ports and itself).
    pub fn covers(&self, port: &TransportId) -> bool {
        match self {
            TransportId::IscsiPort { .. } => self == port,
            TransportId::IscsiDevice { name } => port.name() == name,
        }
    }

    /// Whether the two name at least one port in common.
    pub fn overlaps(&self, other: &TransportId) -> bool {
        self.covers(other) || other.covers(self)
    }

    /// The TransportID as SPC-4 7.6.4.6 lays it out: NUL-terminated, padded with NULs to a
    /// multiple of 4 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (format, text) = match self {
            TransportId::IscsiPort { name, isid } => (0x40, format!("{name},i,0x{}", hex(isid))),
            TransportId::IscsiDevice { name } => (0x00, name.clone()),
        };
        let mut body = text.into_bytes();
        body.push(0);
        // SPC-4: "The ADDITIONAL LENGTH field shall be at least 20 and a multiple of four."
        let padded = body.len().max(20).next_multiple_of(4);
        body.resize(padded, 0);
        let mut out = Vec::with_capacity(4 + body.len());
        out.push(format | ISCSI_PROTOCOL_ID);
        out.push(0);
        // At most 4 + 223 + 18 bytes: fits in u16.
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Parses one TransportID at the start of `buf`; returns it and the bytes it took.
    ///
    /// Bounded: at most [`MAX_TRANSPORT_ID_BYTES`] are looked at, whatever the ADDITIONAL
    /// LENGTH says.
    pub fn parse(buf: &[u8]) -> Result<(Self, usize), TransportIdError> {
        let [b0, _, l0, l1, ..] = *buf else {
            return Err(TransportIdError::Truncated);
        };
        let protocol = b0 & 0x0F;
        if protocol != ISCSI_PROTOCOL_ID {
            return Err(TransportIdError::Protocol(protocol));
        }
        let format = b0 >> 6;
        if format > 1 {
            return Err(TransportIdError::Format(format));
        }
        let additional = u16::from_be_bytes([l0, l1]);
        let total = 4 + usize::from(additional);
        if !additional.is_multiple_of(4) || total > MAX_TRANSPORT_ID_BYTES {
            return Err(TransportIdError::Length(additional));
        }
        let body = buf.get(4..total).ok_or(TransportIdError::Truncated)?;
        let text_len = body
            .iter()
            .position(|&b| b == 0)
            .ok_or(TransportIdError::Name)?;
        let text = std::str::from_utf8(&body[..text_len]).map_err(|_| TransportIdError::Name)?;
        let id = if format == 0 {
            TransportId::iscsi_device(checked_name(text)?)
        } else {
            let (name, isid) = split_port_name(text).ok_or(TransportIdError::Name)?;
            TransportId::iscsi_port(checked_name(name)?, isid)
        };
        Ok((id, total))
    }
}

impl fmt::Display for TransportId {
    /// The initiator port name (`iqn...,i,0x<ISID>`) or the device name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportId::IscsiPort { name, isid } => write!(f, "{name},i,0x{}", hex(isid)),
            TransportId::IscsiDevice { name } => f.write_str(name),
        }
    }
}

/// A name as TransportIDs may carry it: 1 to 223 bytes of printable ASCII without spaces
/// (RFC 3722 allows more in principle; every iqn., eui. and naa. name is this).
fn checked_name(name: &str) -> Result<&str, TransportIdError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_ISCSI_NAME_BYTES
        && name.bytes().all(|b| b.is_ascii_graphic() && b != b',');
    if ok {
        Ok(name)
    } else {
        Err(TransportIdError::Name)
    }
}

/// Splits `name,i,0x<12 hex digits>` (the `i` and `0x` in any case).
pub(crate) fn split_port_name(text: &str) -> Option<(&str, [u8; 6])> {
    let cut = text.len().checked_sub(17)?;
    let (name, tail) = (text.get(..cut)?, text.get(cut..)?);
    let separator = tail.get(..5)?;
    if !separator.eq_ignore_ascii_case(",i,0x") {
        return None;
    }
    let digits = tail.get(5..)?.as_bytes();
    let mut isid = [0u8; 6];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(*pair.get(1)?).to_digit(16)?;
        // Both digits are below 16.
        *isid.get_mut(i)? = (hi * 16 + lo) as u8;
    }
    Some((name, isid))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISID: [u8; 6] = [0x80, 0x12, 0x34, 0x56, 0x78, 0x9A];

    #[test]
    fn port_round_trip_and_layout() {
        let id = TransportId::iscsi_port("IQN.2026-11.org.Example:Host", ISID);
        assert_eq!(
            id.to_string(),
            "iqn.2026-11.org.example:host,i,0x80123456789a"
        );
        let b = id.to_bytes();
        assert_eq!(b[0], 0x45, "format 01b, protocol iSCSI");
        assert_eq!(usize::from(u16::from_be_bytes([b[2], b[3]])) + 4, b.len());
        assert_eq!(b.len() % 4, 0);
        assert!(b.ends_with(&[0]));
        let (back, used) = TransportId::parse(&b).unwrap();
        assert_eq!(back, id);
        assert_eq!(used, b.len());
    }

    #[test]
    fn device_round_trip_is_padded_to_twenty() {
        let id = TransportId::iscsi_device("iqn.a:b");
        let b = id.to_bytes();
        assert_eq!(b[0], 0x05);
        assert_eq!(b.len(), 24);
        assert_eq!(TransportId::parse(&b).unwrap(), (id, 24));
    }

    #[test]
    fn upper_case_separator_and_hex_are_accepted() {
        let mut b = vec![0x45, 0, 0, 0];
        b.extend_from_slice(b"iqn.x:y,I,0X80123456789A\0\0\0\0");
        let len = (b.len() - 4) as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        let (id, _) = TransportId::parse(&b).unwrap();
        assert_eq!(id, TransportId::iscsi_port("iqn.x:y", ISID));
    }

    #[test]
    fn device_covers_its_ports() {
        let dev = TransportId::iscsi_device("iqn.a:b");
        let p1 = TransportId::iscsi_port("iqn.a:b", ISID);
        let p2 = TransportId::iscsi_port("iqn.a:b", [0; 6]);
        let other = TransportId::iscsi_port("iqn.a:c", ISID);
        assert!(dev.covers(&p1) && dev.covers(&p2) && !dev.covers(&other));
        assert!(p1.covers(&p1) && !p1.covers(&p2) && !p1.covers(&dev));
        assert!(p1.overlaps(&dev) && !p1.overlaps(&p2));
    }

    #[test]
    fn malformed_ones_are_refused() {
        let good = TransportId::iscsi_port("iqn.a:b", ISID).to_bytes();
        assert_eq!(
            TransportId::parse(&good[..3]),
            Err(TransportIdError::Truncated)
        );
        assert_eq!(
            TransportId::parse(&good[..good.len() - 1]),
            Err(TransportIdError::Truncated)
        );
        let mut b = good.clone();
        b[0] = 0x41; // Fibre Channel
        assert_eq!(TransportId::parse(&b), Err(TransportIdError::Protocol(1)));
        b[0] = 0x85;
        assert_eq!(TransportId::parse(&b), Err(TransportIdError::Format(2)));
        let mut b = good.clone();
        b[3] += 1;
        assert!(matches!(
            TransportId::parse(&b),
            Err(TransportIdError::Length(_))
        ));
        let mut b = good.clone();
        b[2..4].copy_from_slice(&4092u16.to_be_bytes());
        assert!(matches!(
            TransportId::parse(&b),
            Err(TransportIdError::Length(4092))
        ));
        // No terminating NUL.
        let mut b = good.clone();
        let n = b.len();
        b[4..n].fill(b'a');
        assert_eq!(TransportId::parse(&b), Err(TransportIdError::Name));
        // Format 01b without the ISID part.
        let mut b = TransportId::iscsi_device("iqn.a:bcdefghijklmnopqrst").to_bytes();
        b[0] = 0x45;
        assert_eq!(TransportId::parse(&b), Err(TransportIdError::Name));
        // Bad hex.
        let mut b = vec![0x45, 0, 0, 0];
        b.extend_from_slice(b"iqn.x:y,i,0x80123456789g\0\0\0\0");
        let len = (b.len() - 4) as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(TransportId::parse(&b), Err(TransportIdError::Name));
    }

    #[test]
    fn the_longest_name_fits_the_bound() {
        let name = format!("iqn.2026-11.a:{}", "x".repeat(MAX_ISCSI_NAME_BYTES - 14));
        let b = TransportId::iscsi_port(&name, ISID).to_bytes();
        assert!(b.len() <= MAX_TRANSPORT_ID_BYTES);
        assert!(TransportId::parse(&b).is_ok());
        let too_long = format!("{name}x");
        let b = TransportId::iscsi_device(&too_long).to_bytes();
        assert!(TransportId::parse(&b).is_err());
    }
}
