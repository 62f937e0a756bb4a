//! The sending half of a connection: PDUs are encoded on the connection's task and written by a
//! separate writer task, so that a slow reader on the initiator side never stops us from
//! reading (and answering NOP-Outs).
//!
//! Data segments travel as the `Bytes` they were read into (zero copy); the writer batches
//! everything queued into vectored writes.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode_parts, Digests};
use sluice_proto::pdu::Pdu;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The socket's sending half (a TCP stream, or an in-memory pipe in tests).
pub(crate) type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Frames queued to the writer before the connection task waits (backpressure on a peer
/// that does not read).
const QUEUE_FRAMES: usize = 256;

/// Most buffers handed to one `writev` (Linux IOV_MAX is 1024).
const MAX_IOVECS: usize = 64;

/// Encodes PDUs and hands them to the writer task.
#[derive(Debug)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<Vec<Bytes>>,
    digests: Digests,
    scratch: BytesMut,
    batch: Vec<Bytes>,
}

impl Outbox {
    /// Starts the writer task for `wr`.
    pub(crate) fn spawn(wr: Writer) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE_FRAMES);
        let handle = tokio::spawn(write_loop(wr, rx));
        let outbox = Self {
            tx,
            digests: Digests::NONE,
            scratch: BytesMut::with_capacity(4096),
            batch: Vec::new(),
        };
        (outbox, handle)
    }

    /// Digests apply from the first PDU after login (RFC 7143 section 13.1: "the digest
    /// settings take effect ... after the Login phase").
    pub(crate) fn set_digests(&mut self, digests: Digests) {
        self.digests = digests;
    }

    /// Adds a PDU to the current batch.
    pub(crate) fn push(&mut self, pdu: &Pdu) {
        let (data, trailer) = encode_parts(pdu, self.digests, &mut self.scratch);
        self.batch.push(self.scratch.split().freeze());
        if !data.is_empty() {
            self.batch.push(data);
            let t = trailer.as_bytes();
            if !t.is_empty() {
                self.batch.push(Bytes::copy_from_slice(t));
            }
        }
        if self.scratch.capacity() < 512 {
            self.scratch.reserve(4096);
        }
    }

    /// Hands the batch to the writer. Fails when the writer has gone (connection dead).
    pub(crate) async fn flush(&mut self) -> Result<(), WriterGone> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.tx.send(batch).await.map_err(|_| WriterGone)
    }

    /// Closes the queue; the writer finishes what is queued, then shuts the socket down.
    pub(crate) async fn close(mut self) {
        let _ = self.flush().await;
    }
}

/// The writer task ended (socket error or peer reset).
#[derive(Debug)]
pub(crate) struct WriterGone;

async fn write_loop(mut wr: Writer, mut rx: mpsc::Receiver<Vec<Bytes>>) {
    let mut pending: VecDeque<Bytes> = VecDeque::new();
    while let Some(batch) = rx.recv().await {
        pending.extend(batch);
        // Take whatever else is already queued: one syscall for many PDUs.
        while let Ok(more) = rx.try_recv() {
            pending.extend(more);
            if pending.len() >= MAX_IOVECS * 4 {
                break;
            }
        }
        if let Err(e) = write_all(&mut wr, &mut pending).await {
            tracing::debug!(error = %e, "write failed; closing");
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn write_all(wr: &mut Writer, pending: &mut VecDeque<Bytes>) -> std::io::Result<()> {
    while !pending.is_empty() {
        let slices: Vec<IoSlice<'_>> = pending
            .iter()
            .take(MAX_IOVECS)
            .map(|b| IoSlice::new(b))
            .collect();
        let mut written = wr.write_vectored(&slices).await?;
        drop(slices);
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(front) = pending.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                pending.pop_front();
            } else {
                let _ = front.split_to(written);
                written = 0;
            }
        }
    }
    Ok(())
}
