//! Reading fields out of CDBs and parameter lists without panicking.
//!
//! Every reader returns 0 for bytes beyond the slice. The dispatcher checks the CDB length
//! against the command table before any handler runs, so inside handlers the default is never
//! used; it only keeps the readers total.

use bytes::BytesMut;

/// Byte `i`, or 0.
pub(crate) fn u8_at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

/// Big-endian `N`-byte unsigned value at `i` (N ≤ 8), missing bytes read as 0.
pub(crate) fn be_at(b: &[u8], i: usize, n: usize) -> u64 {
    (0..n.min(8)).fold(0u64, |acc, k| (acc << 8) | u64::from(u8_at(b, i + k)))
}

/// Big-endian u16 at `i`.
pub(crate) fn be16(b: &[u8], i: usize) -> u16 {
    be_at(b, i, 2) as u16
}

/// Big-endian u32 at `i`.
pub(crate) fn be32(b: &[u8], i: usize) -> u32 {
    be_at(b, i, 4) as u32
}

/// Big-endian u64 at `i`.
pub(crate) fn be64(b: &[u8], i: usize) -> u64 {
    be_at(b, i, 8)
}

/// Appends `data`, truncated to `alloc_len` bytes (the allocation-length rule of SPC-4 4.2.5.6).
pub(crate) fn put_truncated(out: &mut BytesMut, data: &[u8], alloc_len: usize) {
    let n = data.len().min(alloc_len);
    out.extend_from_slice(&data[..n]);
}

/// Copies `s` into `dst` as left-aligned ASCII padded with spaces; non-printable characters
/// become `_`.
pub(crate) fn put_ascii(dst: &mut [u8], s: &str) {
    let mut it = s.bytes();
    for d in dst.iter_mut() {
        *d = match it.next() {
            Some(c) if (0x20..0x7F).contains(&c) => c,
            Some(_) => b'_',
            None => b' ',
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_total() {
        let b = [1, 2, 3];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be16(&b, 2), 0x0300);
        assert_eq!(be32(&b, 10), 0);
        assert_eq!(be64(&[0xFF; 8], 0), u64::MAX);
        assert_eq!(u8_at(&b, usize::MAX), 0);
    }

    #[test]
    fn truncation_and_ascii() {
        let mut out = BytesMut::new();
        put_truncated(&mut out, &[1, 2, 3], 2);
        assert_eq!(&out[..], &[1, 2]);
        let mut d = [0u8; 6];
        put_ascii(&mut d, "ab\u{e9}");
        assert_eq!(&d, b"ab__  ");
    }
}
