//! A region's memory, in the three forms a registration can take: allocated for the region or
//! handed over by the caller (writable), the caller's immutable buffer, or the caller's
//! immutable buffers gathered in order into one region; a fourth a writable region takes
//! when one placement fills it whole: the received buffer itself; and a fifth while its
//! memory is out for a placement read straight from the stream into part of it. Ranges
//! passed here were already checked against [`Memory::len`] by the protection domain.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

/// A region's bytes.
pub(super) enum Memory {
    /// Allocated for the region or handed over by the caller: the only writable form.
    Owned(Vec<u8>),
    /// The caller's immutable buffer: reads slice it.
    Shared(Bytes),
    /// The caller's immutable buffers, one after the other: a read inside one of them
    /// slices it, a read across them copies (as a gather list's pieces are, once).
    Gathered(Gathered),
    /// A writable region registered as zero-filled over a reused buffer that was not cleared
    /// ([`ProtectionDomain::register_cleared`](super::ProtectionDomain::register_cleared)):
    /// `bytes[..valid]` is what was stored, the rest reads as zeros whatever the vector
    /// holds. Stores in order (each starting at or before `valid`, as a read's bursts
    /// arrive) clear nothing; one beyond it clears the gap first, and handing the memory
    /// back clears the tail. A placement that fills the region whole clears nothing at all.
    Cleared {
        /// The region's memory.
        bytes: Vec<u8>,
        /// How much of it, from the start, holds stored bytes.
        valid: usize,
    },
    /// A writable region that one placement filled whole ([`Memory::place_whole`]): the
    /// received buffer stands for its contents, as if the bytes had been read from the
    /// stream straight into the region (what an RNIC's placement does), and the region's own
    /// memory waits as `spare`, unchanged, until a store needs it (copy on write) or the
    /// owner takes it back.
    Placed {
        /// The region's contents: `spare.len()` bytes.
        data: Bytes,
        /// The region's own memory.
        spare: Vec<u8>,
    },
    /// A writable region whose memory is out for a placement being read from the stream
    /// straight into it ([`Memory::lend`]), `len` bytes: the owner sees zeros meanwhile, as
    /// verbs leave a buffer undefined while data is placed into it, and stores fail.
    Lent {
        /// The region's length.
        len: usize,
    },
}

/// A writable region's memory, out for one placement ([`Memory::lend`]): what comes back
/// with [`Memory::restore`].
pub(super) struct LentMemory {
    /// The region's memory, the placement's range already cleared of anything stale.
    pub(super) bytes: Vec<u8>,
    /// For a region registered cleared, how much of it holds stored bytes once the
    /// placement is in; `None` for an owned one.
    pub(super) valid: Option<usize>,
}

impl Memory {
    pub(super) fn len(&self) -> usize {
        match self {
            Memory::Owned(v) | Memory::Cleared { bytes: v, .. } => v.len(),
            Memory::Shared(b) => b.len(),
            Memory::Gathered(g) => g.len,
            Memory::Placed { data, .. } => data.len(),
            Memory::Lent { len } => *len,
        }
    }

    /// The bytes of `range` as the owner sees them: borrowed where they lie in one piece of
    /// memory, copied where they span a gathered region's chunks.
    pub(super) fn view(&self, range: Range<usize>) -> Cow<'_, [u8]> {
        match self {
            Memory::Owned(v) => Cow::Borrowed(&v[range]),
            Memory::Cleared { bytes, valid } if range.end <= *valid => Cow::Borrowed(&bytes[range]),
            Memory::Cleared { bytes, valid } => Cow::Owned(cleared_copy(bytes, *valid, range)),
            Memory::Shared(b) | Memory::Placed { data: b, .. } => Cow::Borrowed(&b[range]),
            Memory::Gathered(g) => match g.within_one(&range) {
                Some((chunk, r)) => Cow::Borrowed(&g.chunks[chunk][r]),
                None => Cow::Owned(g.copy(range)),
            },
            Memory::Lent { .. } => Cow::Owned(vec![0; range.len()]),
        }
    }

    /// The bytes of `range` as `Bytes`: a slice of the caller's buffer where they lie in one
    /// (no copy), a copy otherwise.
    pub(super) fn bytes(&self, range: Range<usize>) -> Bytes {
        match self {
            Memory::Owned(v) => Bytes::copy_from_slice(&v[range]),
            Memory::Cleared { bytes, valid } => Bytes::from(cleared_copy(bytes, *valid, range)),
            Memory::Shared(b) | Memory::Placed { data: b, .. } => b.slice(range),
            Memory::Gathered(g) => match g.within_one(&range) {
                Some((chunk, r)) => g.chunks[chunk].slice(r),
                None => Bytes::from(g.copy(range)),
            },
            Memory::Lent { .. } => Bytes::from(vec![0; range.len()]),
        }
    }

    /// Stores `data` at `range` (as long as it): only into a writable region (a placed one's
    /// contents are copied into its own memory first, a cleared one's gap before `range` is
    /// cleared); `false` for the caller's immutable buffers, which cannot change.
    pub(super) fn store(&mut self, range: Range<usize>, data: &[u8]) -> bool {
        if let Memory::Placed {
            data: placed,
            spare,
        } = self
        {
            spare.copy_from_slice(placed);
            *self = Memory::Owned(std::mem::take(spare));
        }
        match self {
            Memory::Owned(v) => v[range].copy_from_slice(data),
            Memory::Cleared { bytes, valid } => {
                if range.start > *valid {
                    bytes[*valid..range.start].fill(0);
                }
                *valid = (*valid).max(range.end);
                bytes[range].copy_from_slice(data);
                if *valid == bytes.len() {
                    *self = Memory::Owned(std::mem::take(bytes));
                }
            }
            Memory::Shared(_)
            | Memory::Gathered(_)
            | Memory::Placed { .. }
            | Memory::Lent { .. } => return false,
        }
        true
    }

    /// Lends the memory out for a placement of `range` read from the stream straight into
    /// it (no buffer in between, no copy after): an owned or cleared region's (a cleared
    /// one's gap before `range` is cleared first, as [`store`](Self::store) would);
    /// `None` for any other form, whose placements take the other paths.
    pub(super) fn lend(&mut self, range: Range<usize>) -> Option<LentMemory> {
        let lent = match self {
            Memory::Owned(v) => LentMemory {
                bytes: std::mem::take(v),
                valid: None,
            },
            Memory::Cleared { bytes, valid } => {
                if range.start > *valid {
                    bytes[*valid..range.start].fill(0);
                }
                LentMemory {
                    valid: Some((*valid).max(range.end)),
                    bytes: std::mem::take(bytes),
                }
            }
            _ => return None,
        };
        *self = Memory::Lent {
            len: lent.bytes.len(),
        };
        Some(lent)
    }

    /// Takes back memory lent by [`lend`](Self::lend); `false` (the memory dropped) if this
    /// region has not lent any of that length.
    pub(super) fn restore(&mut self, lent: LentMemory) -> bool {
        match self {
            Memory::Lent { len } if *len == lent.bytes.len() => {
                *self = match lent.valid {
                    Some(valid) if valid < lent.bytes.len() => Memory::Cleared {
                        bytes: lent.bytes,
                        valid,
                    },
                    _ => Memory::Owned(lent.bytes),
                };
                true
            }
            _ => false,
        }
    }

    /// Makes `data`, exactly as long as the region, its contents without copying it, if the
    /// region is writable: `false` (nothing changed) for the caller's immutable buffers.
    pub(super) fn place_whole(&mut self, data: Bytes) -> bool {
        debug_assert_eq!(data.len(), self.len());
        match self {
            Memory::Owned(v) | Memory::Cleared { bytes: v, .. } => {
                let spare = std::mem::take(v);
                *self = Memory::Placed { data, spare };
                true
            }
            Memory::Placed { data: old, .. } => {
                *old = data;
                true
            }
            Memory::Shared(_) | Memory::Gathered(_) | Memory::Lent { .. } => false,
        }
    }

    /// The memory as one vector: an owned region's as it is, a placed region's contents
    /// copied into its own memory, a caller's buffer copied unless it was the only reference
    /// to a vector.
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            Memory::Owned(v) => v,
            Memory::Cleared { mut bytes, valid } => {
                bytes[valid..].fill(0);
                bytes
            }
            Memory::Placed { data, mut spare } => {
                spare.copy_from_slice(&data);
                spare
            }
            Memory::Shared(b) => Vec::from(b),
            Memory::Gathered(g) => g.copy(0..g.len),
            Memory::Lent { len } => vec![0; len],
        }
    }

    /// The memory as one vector if the region owned it (a placed region's contents copied
    /// into it); the caller's buffers are only dropped (the references the region held).
    pub(super) fn into_owned(self) -> Option<Vec<u8>> {
        match self {
            Memory::Owned(_) | Memory::Cleared { .. } | Memory::Placed { .. } => {
                Some(self.into_vec())
            }
            // The memory is out; it is dropped when it comes back to no region.
            Memory::Shared(_) | Memory::Gathered(_) | Memory::Lent { .. } => None,
        }
    }

    /// The memory handed back without a copy: an owned region's vector, or a placed
    /// region's contents with its own memory; `None` for the caller's buffers.
    pub(super) fn into_contents(self) -> Option<Contents> {
        match self {
            Memory::Owned(_) | Memory::Cleared { .. } => Some(Contents::Owned(self.into_vec())),
            Memory::Placed { data, spare } => Some(Contents::Placed { data, spare }),
            Memory::Lent { len } => Some(Contents::Owned(vec![0; len])),
            Memory::Shared(_) | Memory::Gathered(_) => None,
        }
    }
}

/// `range` of a cleared region's memory whose first `valid` bytes were stored: those as they
/// are, zeros after.
fn cleared_copy(bytes: &[u8], valid: usize, range: Range<usize>) -> Vec<u8> {
    let mut out = vec![0; range.len()];
    let stored = range.start..range.end.min(valid);
    if !stored.is_empty() {
        out[..stored.len()].copy_from_slice(&bytes[stored]);
    }
    out
}

/// A writable region's memory as [`ProtectionDomain::take_contents`](super::ProtectionDomain::take_contents)
/// hands it back, without a copy.
#[derive(Debug)]
pub enum Contents {
    /// The region's own memory, holding its contents.
    Owned(Vec<u8>),
    /// The region's contents, placed whole from a received buffer, and the region's own
    /// memory, unused (its bytes are whatever they were before the placement).
    Placed {
        /// The contents.
        data: Bytes,
        /// The region's own memory, for reuse.
        spare: Vec<u8>,
    },
}

/// Buffers in order as one run of bytes.
pub(super) struct Gathered {
    /// The non-empty chunks, in order.
    chunks: Vec<Bytes>,
    /// Where each chunk ends in the region (ascending, the last is `len`).
    ends: Vec<usize>,
    len: usize,
}

impl Gathered {
    /// `chunks` in order; empty ones are left out, as they hold no byte to address.
    pub(super) fn new(chunks: Vec<Bytes>) -> Self {
        let chunks: Vec<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let mut len = 0usize;
        let ends = chunks
            .iter()
            .map(|c| {
                len += c.len();
                len
            })
            .collect();
        Gathered { chunks, ends, len }
    }

    /// The chunk holding the byte at `offset` (`offset < len`).
    fn chunk_at(&self, offset: usize) -> usize {
        self.ends.partition_point(|&end| end <= offset)
    }

    fn start_of(&self, chunk: usize) -> usize {
        if chunk == 0 {
            0
        } else {
            self.ends[chunk - 1]
        }
    }

    /// The chunk `range` lies inside, and the range within that chunk; `None` when it spans
    /// chunks. An empty range lies inside any chunk, and is given as an empty range of the
    /// first (or of none, when there is no chunk: then it spans "nothing" and is copied).
    fn within_one(&self, range: &Range<usize>) -> Option<(usize, Range<usize>)> {
        if range.is_empty() {
            return (!self.chunks.is_empty()).then_some((0, 0..0));
        }
        let chunk = self.chunk_at(range.start);
        let start = self.start_of(chunk);
        (range.end <= self.ends[chunk]).then(|| (chunk, range.start - start..range.end - start))
    }

    /// Copies `range` out, chunk piece by chunk piece.
    fn copy(&self, range: Range<usize>) -> Vec<u8> {
        let mut out = Vec::with_capacity(range.len());
        let mut at = range.start;
        while at < range.end {
            let chunk = self.chunk_at(at);
            let start = self.start_of(chunk);
            let end = self.ends[chunk].min(range.end);
            out.extend_from_slice(&self.chunks[chunk][at - start..end - start]);
            at = end;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gathered() -> Memory {
        Memory::Gathered(Gathered::new(vec![
            Bytes::from_static(b"0123"),
            Bytes::new(),
            Bytes::from_static(b"45"),
            Bytes::from_static(b"6789"),
        ]))
    }

    #[test]
    fn a_read_inside_one_chunk_slices_the_callers_buffer() {
        let chunk = Bytes::from(b"abcdefgh".to_vec());
        let memory = Memory::Gathered(Gathered::new(vec![
            Bytes::from_static(b"xy"),
            chunk.clone(),
        ]));
        let read = memory.bytes(3..7);
        assert_eq!(&read[..], b"bcde");
        // The same memory, not a copy of it.
        assert_eq!(read.as_ptr(), chunk[1..].as_ptr());
        assert!(matches!(memory.view(2..10), Cow::Borrowed(b"abcdefgh")));
    }

    #[test]
    fn a_read_across_chunks_is_their_bytes_in_order() {
        let memory = gathered();
        assert_eq!(memory.len(), 10);
        assert_eq!(&memory.bytes(2..8)[..], b"234567");
        assert_eq!(&memory.bytes(0..10)[..], b"0123456789");
        assert_eq!(&*memory.view(3..5), b"34");
        assert!(matches!(memory.view(3..5), Cow::Owned(_)));
        assert_eq!(&memory.bytes(4..6)[..], b"45");
        assert_eq!(&memory.bytes(6..6)[..], b"");
        assert_eq!(gathered().into_vec(), b"0123456789".to_vec());
    }

    #[test]
    fn every_split_reads_back_what_was_gathered() {
        let data: Vec<u8> = (0..=255).collect();
        for cut in [1usize, 7, 64, 255] {
            let chunks = data.chunks(cut).map(Bytes::copy_from_slice).collect();
            let memory = Memory::Gathered(Gathered::new(chunks));
            for start in (0..256).step_by(13) {
                for end in (start..=256).step_by(17) {
                    assert_eq!(&memory.bytes(start..end)[..], &data[start..end]);
                    assert_eq!(&*memory.view(start..end), &data[start..end]);
                }
            }
        }
    }

    #[test]
    fn gathered_memory_is_not_writable_nor_handed_back_as_owned() {
        let mut memory = gathered();
        assert!(!memory.store(0..1, b"x"));
        assert!(gathered().into_owned().is_none());
        let empty = Memory::Gathered(Gathered::new(Vec::new()));
        assert_eq!(empty.len(), 0);
        assert_eq!(&empty.bytes(0..0)[..], b"");
    }
}
