//! The Data-Out of one command as the transport collected it: one buffer, or the data
//! segments of the PDUs that carried it, in order, so a large write reaches the device without
//! being glued together first.

use std::borrow::Cow;

use bytes::Bytes;
use smallvec::SmallVec;

/// The slices of one command's Data-Out: a few inline (most writes arrive in one to four
/// segments), so handing them to the device allocates nothing.
pub type Slices<'a> = SmallVec<[&'a [u8]; 4]>;

/// A command's Data-Out: contiguous, or segments that follow one another.
#[derive(Clone, Copy, Debug)]
pub enum DataOut<'a> {
    /// One buffer.
    Contiguous(&'a [u8]),
    /// Back-to-back pieces (e.g. the data segments of several Data-Out PDUs, in offset order).
    Segments(&'a [Bytes]),
    /// This many bytes arrived and were dropped as they came, because the command's LU keeps
    /// nothing written ([`ScsiTarget::keeps_data_out`](crate::ScsiTarget::keeps_data_out)
    /// said so). They read as zeros; [`ScsiTarget::execute_with`](crate::ScsiTarget::execute_with)
    /// refuses them for any command that reads its Data-Out.
    Unkept(usize),
}

/// What [`DataOut::Unkept`] reads as: zeros, handed out in pieces of this buffer.
static UNKEPT: [u8; 1 << 20] = [0; 1 << 20];

impl Default for DataOut<'_> {
    fn default() -> Self {
        DataOut::Contiguous(&[])
    }
}

impl<'a> From<&'a [u8]> for DataOut<'a> {
    fn from(data: &'a [u8]) -> Self {
        DataOut::Contiguous(data)
    }
}

impl<'a> From<&'a [Bytes]> for DataOut<'a> {
    fn from(segments: &'a [Bytes]) -> Self {
        DataOut::Segments(segments)
    }
}

impl<'a> DataOut<'a> {
    /// Total bytes.
    pub fn len(&self) -> usize {
        match self {
            DataOut::Contiguous(d) => d.len(),
            DataOut::Segments(s) => s.iter().map(Bytes::len).sum(),
            DataOut::Unkept(n) => *n,
        }
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `len` bytes (all, if fewer) as one slice: borrowed when they lie in one
    /// piece, copied otherwise. For parameter lists and comparisons, which are small or rare.
    pub fn contiguous(&self, len: usize) -> Cow<'a, [u8]> {
        match *self {
            DataOut::Contiguous(d) => Cow::Borrowed(&d[..d.len().min(len)]),
            DataOut::Unkept(n) if n.min(len) <= UNKEPT.len() => {
                Cow::Borrowed(&UNKEPT[..n.min(len)])
            }
            DataOut::Unkept(n) => Cow::Owned(vec![0; n.min(len)]),
            DataOut::Segments([]) => Cow::Borrowed(&[]),
            DataOut::Segments([first, ..]) if first.len() >= len => Cow::Borrowed(&first[..len]),
            DataOut::Segments(segments) => {
                let mut out = Vec::with_capacity(len.min(self.len()));
                for s in segments {
                    let take = (len - out.len()).min(s.len());
                    out.extend_from_slice(&s[..take]);
                    if out.len() == len {
                        break;
                    }
                }
                Cow::Owned(out)
            }
        }
    }

    /// The first `len` bytes (all, if fewer) as slices in order, none of them empty: no copy.
    pub fn slices(&self, len: usize) -> Slices<'a> {
        let mut out = Slices::new();
        let mut left = len;
        let mut push = |piece: &'a [u8]| {
            let take = left.min(piece.len());
            if take > 0 {
                out.push(&piece[..take]);
                left -= take;
            }
        };
        match *self {
            DataOut::Contiguous(d) => push(d),
            DataOut::Segments(segments) => segments.iter().for_each(|s| push(s)),
            DataOut::Unkept(n) => {
                let mut zeros = n.min(len);
                while zeros > 0 {
                    let piece = zeros.min(UNKEPT.len());
                    push(&UNKEPT[..piece]);
                    zeros -= piece;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs() -> Vec<Bytes> {
        vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"defg"),
            Bytes::from_static(b"h"),
        ]
    }

    #[test]
    fn contiguous_borrows_within_one_piece_and_copies_across() {
        let s = segs();
        let d = DataOut::from(&s[..]);
        assert_eq!(d.len(), 8);
        assert!(matches!(d.contiguous(2), Cow::Borrowed(b"ab")));
        assert_eq!(&*d.contiguous(5), b"abcde");
        assert_eq!(&*d.contiguous(100), b"abcdefgh");
        assert_eq!(&*DataOut::from(&b"xyz"[..]).contiguous(2), b"xy");
        assert!(DataOut::default().is_empty());
    }

    #[test]
    fn unkept_data_reads_as_zeros_of_its_length() {
        let d = DataOut::Unkept(3 << 20);
        assert_eq!(d.len(), 3 << 20);
        let slices = d.slices(2 << 20 | 5);
        assert_eq!(slices.iter().map(|s| s.len()).sum::<usize>(), 2 << 20 | 5);
        assert!(slices.iter().all(|s| s.iter().all(|&b| b == 0)));
        assert!(matches!(d.contiguous(10), Cow::Borrowed(z) if z == [0; 10]));
        assert_eq!(d.contiguous(usize::MAX).len(), 3 << 20);
    }

    #[test]
    fn slices_cut_at_the_length_and_skip_empty_pieces() {
        let s = segs();
        let d = DataOut::from(&s[..]);
        assert_eq!(d.slices(5).to_vec(), vec![&b"abc"[..], &b"de"[..]]);
        assert_eq!(d.slices(8).concat(), b"abcdefgh");
        assert!(d.slices(0).is_empty());
        assert_eq!(
            DataOut::from(&b"xyz"[..]).slices(9).to_vec(),
            vec![&b"xyz"[..]]
        );
    }
}
