//! A connection's bytes to send, kept as the chunks one vectored write (`writev`) sends.
//!
//! Every PDU's header (BHS, AHS, header digest), padding and data digest are encoded into one
//! small buffer, the tail. A data segment of at least [`OWN_CHUNK_MIN`] bytes — a write's
//! data, whether immediate, unsolicited or solicited Data-Out — is not copied: it stays the
//! reference-counted `Bytes` the PDU carries (a slice of the caller's buffer) and is written to
//! the socket from there, so the kernel's copy into the socket is its only copy. The data
//! digest is computed over those same bytes ([`encode_parts`]). Shorter data segments (login,
//! text, NOP-Out pings, tiny writes) are copied into the tail: a copy of under 1 KiB costs
//! less than the extra buffer handle, reference count and `iovec` it would otherwise take (at
//! 4 KiB the two already cost a client about the same; docs/performance.md), and several such
//! PDUs still leave in one contiguous piece.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use sluice_proto::framing::{encode_parts, Digests};
use sluice_proto::pdu::Pdu;
use tokio::io::AsyncWrite;

/// Data segments at least this long are sent from their own `Bytes`; shorter ones are copied.
pub(crate) const OWN_CHUNK_MIN: usize = 1024;

/// Most buffers handed to one vectored write (Linux's IOV_MAX is 1024): 32 PDUs with their
/// own data segment (header chunk and data chunk each), a full queue depth of 4 KiB writes.
const MAX_IOVECS: usize = 64;

/// Tail capacity set aside at once, so that headers are not encoded into a fresh allocation
/// each.
const TAIL_RESERVE: usize = 4096;

/// The bytes a connection has yet to write, in order: `chunks`, then `tail`.
pub(crate) struct SendQueue {
    /// Whole pieces of the byte stream: gathered headers (split off the tail) and long data
    /// segments (shared with the PDU that carried them). None is empty.
    chunks: VecDeque<Bytes>,
    /// What follows the last chunk: headers, trailers and short data segments.
    tail: BytesMut,
    /// Bytes in `chunks` and `tail` together.
    len: usize,
    /// Data segments at least this long become a chunk of their own.
    own_chunk_min: usize,
}

impl Default for SendQueue {
    fn default() -> Self {
        Self::with_own_chunk_min(OWN_CHUNK_MIN)
    }
}

impl SendQueue {
    /// A queue that sends data segments of at least `own_chunk_min` bytes (1 at least) from
    /// their own buffer.
    pub(crate) fn with_own_chunk_min(own_chunk_min: usize) -> Self {
        Self {
            chunks: VecDeque::new(),
            tail: BytesMut::new(),
            len: 0,
            own_chunk_min: own_chunk_min.max(1),
        }
    }

    /// Bytes waiting to be written.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops everything queued (the connection is over).
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.tail.clear();
        self.len = 0;
    }

    /// Queues `pdu` framed with `digests`; returns its length on the wire, which is what
    /// `encode` would have appended.
    pub(crate) fn push(&mut self, pdu: &Pdu, digests: Digests) -> usize {
        if self.tail.capacity() - self.tail.len() < 256 {
            self.tail.reserve(TAIL_RESERVE);
        }
        let start = self.tail.len();
        let (data, trailer) = encode_parts(pdu, digests, &mut self.tail);
        let trailer = trailer.as_bytes();
        let wire_len = self.tail.len() - start + data.len() + trailer.len();
        if data.len() >= self.own_chunk_min {
            // What precedes the data segment (this header, and anything still in the tail)
            // becomes a chunk, so that the data can follow it without being copied.
            self.chunks.push_back(self.tail.split().freeze());
            self.chunks.push_back(data);
        } else {
            self.tail.extend_from_slice(&data);
        }
        self.tail.extend_from_slice(trailer);
        self.len += wire_len;
        wire_len
    }

    /// Queues bytes already framed (the fault hook's frames).
    pub(crate) fn push_frame(&mut self, frame: &[u8]) {
        self.tail.extend_from_slice(frame);
        self.len += frame.len();
    }

    /// One vectored write of what is queued (up to [`MAX_IOVECS`] buffers); returns how many
    /// bytes `wr` took and drops them from the queue. Nothing changes unless it is ready, so
    /// a future polling this may be cancelled (`select!`) without losing or repeating bytes.
    pub(crate) fn poll_write<W: AsyncWrite + ?Sized>(
        &mut self,
        wr: Pin<&mut W>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if self.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let tail = (!self.tail.is_empty()).then_some(&self.tail[..]);
        let pieces = self.chunks.iter().map(|c| &c[..]).chain(tail);
        let mut count = 0;
        for (slot, piece) in slices.iter_mut().zip(pieces) {
            *slot = IoSlice::new(piece);
            count += 1;
        }
        let written = ready!(wr.poll_write_vectored(cx, &slices[..count]))?;
        if written == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        self.consume(written);
        Poll::Ready(Ok(written))
    }

    /// Writes some of the queue, waiting until `wr` takes something.
    pub(crate) async fn write_some<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        wr: &mut W,
    ) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_write(Pin::new(&mut *wr), cx)).await
    }

    /// Writes the whole queue.
    pub(crate) async fn write_all<W: AsyncWrite + Unpin + ?Sized>(
        &mut self,
        wr: &mut W,
    ) -> io::Result<()> {
        while !self.is_empty() {
            self.write_some(wr).await?;
        }
        Ok(())
    }

    /// Drops the first `written` bytes: whole chunks, then part of one or of the tail.
    fn consume(&mut self, mut written: usize) {
        self.len -= written.min(self.len);
        while written > 0 {
            match self.chunks.front_mut() {
                Some(front) if written >= front.len() => {
                    written -= front.len();
                    self.chunks.pop_front();
                }
                Some(front) => {
                    front.advance(written);
                    written = 0;
                }
                None => {
                    self.tail.advance(written.min(self.tail.len()));
                    written = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
