//! The CDB of a SCSI Command PDU, held without a heap allocation when it fits the BHS.

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// Length of the BHS's CDB field (RFC 7143 section 11.3.5); longer CDBs continue in an
/// Extended CDB AHS.
pub const BHS_CDB_LEN: usize = 16;

/// A SCSI Command's whole CDB: the 16 bytes of the BHS field, followed by the rest from an
/// Extended CDB AHS when the CDB is longer. Always at least 16 bytes: shorter input is padded
/// with zeros, as the BHS field carries it.
///
/// Up to 16 bytes are held inline, so parsing a command allocates nothing for its CDB and a
/// clone is a 16-byte copy; only extended CDBs (rare: variable-length CDBs) use the heap.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Cdb(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Inline([u8; BHS_CDB_LEN]),
    /// More than 16 bytes (never 16 or fewer, so equal CDBs have equal representations).
    Extended(Bytes),
}

impl Cdb {
    /// The CDB made of these bytes, zero-padded to 16.
    pub fn new(bytes: &[u8]) -> Self {
        Self::from_parts(bytes, &[])
    }

    /// The CDB made of the BHS field's bytes followed by the Extended CDB AHS's bytes.
    pub fn from_parts(head: &[u8], extension: &[u8]) -> Self {
        if head.len() + extension.len() <= BHS_CDB_LEN {
            let mut inline = [0u8; BHS_CDB_LEN];
            inline[..head.len()].copy_from_slice(head);
            inline[head.len()..head.len() + extension.len()].copy_from_slice(extension);
            return Self(Repr::Inline(inline));
        }
        let mut all = Vec::with_capacity(head.len() + extension.len());
        all.extend_from_slice(head);
        all.extend_from_slice(extension);
        Self(Repr::Extended(Bytes::from(all)))
    }

    /// The CDB's bytes (at least 16).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(b) => b,
            Repr::Extended(b) => b,
        }
    }
}

impl Default for Cdb {
    /// Sixteen zero bytes.
    fn default() -> Self {
        Self(Repr::Inline([0; BHS_CDB_LEN]))
    }
}

impl Deref for Cdb {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Cdb {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl From<&[u8]> for Cdb {
    fn from(bytes: &[u8]) -> Self {
        Self::new(bytes)
    }
}

impl<const N: usize> From<[u8; N]> for Cdb {
    fn from(bytes: [u8; N]) -> Self {
        Self::new(&bytes)
    }
}

impl From<Vec<u8>> for Cdb {
    fn from(bytes: Vec<u8>) -> Self {
        Self::new(&bytes)
    }
}

impl fmt::Debug for Cdb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cdb(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_cdbs_are_padded_to_the_bhs_field() {
        let c = Cdb::new(&[0x28, 1, 2]);
        assert_eq!(c.len(), 16);
        assert_eq!(&c[..3], &[0x28, 1, 2]);
        assert!(c[3..].iter().all(|&b| b == 0));
        assert_eq!(c, Cdb::from_parts(&[0x28, 1, 2], &[]));
    }

    #[test]
    fn long_cdbs_keep_every_byte_and_compare_by_content() {
        let bytes: Vec<u8> = (0..32).collect();
        let whole = Cdb::new(&bytes);
        let parts = Cdb::from_parts(&bytes[..16], &bytes[16..]);
        assert_eq!(whole.as_bytes(), &bytes[..]);
        assert_eq!(whole, parts);
        assert_ne!(whole, Cdb::new(&bytes[..16]));
    }

    #[test]
    fn debug_shows_the_bytes_in_hex() {
        assert_eq!(
            format!("{:?}", Cdb::new(&[0xab])),
            format!("Cdb(ab{})", "00".repeat(15))
        );
    }
}
