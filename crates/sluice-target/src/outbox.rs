//! The sending half of a connection: PDUs are encoded into a queue of buffers that the
//! connection's own task writes with vectored writes.
//!
//! Writing happens on the connection's task, not a separate writer task: right after a batch
//! of input has been handled the queue is written without waiting ([`Outbox::write_now`]),
//! which for most responses is the whole of it, so a command's answer leaves in the same
//! wake-up that read it (no cross-task hop at queue depth 1). What the socket does not take
//! is written when it becomes writable ([`Outbox::write_some`], a branch of the
//! connection's `select!`), and reading pauses while more than [`MAX_QUEUED_BYTES`] wait,
//! so a peer that does not read cannot make us buffer without bound.
//!
//! Data segments travel as the `Bytes` they were produced in (zero copy).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, encode_parts, pad_len, Digests};
use sluice_proto::pdu::Pdu;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The socket's sending half (a TCP stream, or an in-memory pipe in tests).
pub(crate) type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// Above this many queued bytes the connection stops reading until the peer catches up.
pub(crate) const MAX_QUEUED_BYTES: usize = 8 << 20;

/// Most buffers handed to one `writev` (Linux IOV_MAX is 1024).
const MAX_IOVECS: usize = 64;

/// Encodes PDUs and writes them to the socket.
pub(crate) struct Outbox {
    wr: Writer,
    digests: Digests,
    scratch: BytesMut,
    queue: VecDeque<Bytes>,
    queued_bytes: usize,
    /// The test hook's faults (see `TargetConfig::fault_hook`), shared with the reader.
    faults: Option<crate::faults::SharedFaults>,
}

impl Outbox {
    pub(crate) fn new(wr: Writer) -> Self {
        Self {
            wr,
            digests: Digests::NONE,
            scratch: BytesMut::with_capacity(4096),
            queue: VecDeque::new(),
            queued_bytes: 0,
            faults: None,
        }
    }

    /// Digests apply from the first PDU after login (RFC 7143 section 13.1: "the digest
    /// settings take effect ... after the Login phase").
    pub(crate) fn set_digests(&mut self, digests: Digests) {
        self.digests = digests;
    }

    /// Faults every PDU pushed from now on (the test hook).
    pub(crate) fn set_faults(&mut self, faults: crate::faults::SharedFaults) {
        self.faults = Some(faults);
    }

    /// Whether the test hook asked for the connection to be reset.
    pub(crate) fn reset_due(&self) -> bool {
        self.faults.as_ref().is_some_and(crate::faults::reset_due)
    }

    /// Queues a PDU.
    pub(crate) fn push(&mut self, pdu: &Pdu) {
        let _probe = sluice_probe::span(sluice_probe::Stage::Framing);
        if let Some(faults) = &self.faults {
            // The hook needs the whole frame in one piece; this path is for tests only.
            let mut frame = BytesMut::new();
            encode(pdu, self.digests, &mut frame);
            let copies = crate::faults::on_send(faults, &mut frame);
            let frame = frame.freeze();
            for _ in 0..copies {
                self.enqueue(frame.clone());
            }
            return;
        }
        if self.scratch.capacity() < 256 {
            self.scratch.reserve(4096);
        }
        if self.digests.data {
            // A large Data-In served from a mapped LUN file: its digest comes from the file's
            // per-chunk CRCs, without reading the data (sluice_storage::cached_crc32c).
            if let Some(crc) = sluice_storage::cached_crc32c(&pdu.wire_data()) {
                self.push_with_data_crc(pdu, crc);
                return;
            }
        }
        let (data, trailer) = encode_parts(pdu, self.digests, &mut self.scratch);
        let header = self.scratch.split().freeze();
        self.enqueue(header);
        if !data.is_empty() {
            self.enqueue(data);
            let t = trailer.as_bytes();
            if !t.is_empty() {
                // Padding and data digest go through the scratch buffer too: no allocation.
                self.scratch.extend_from_slice(t);
                let t = self.scratch.split().freeze();
                self.enqueue(t);
            }
        }
    }

    /// [`push`](Self::push) with the data segment's CRC32C already known: only the padding is
    /// folded in (RFC 7143 section 11.2.3: the data digest covers data and padding).
    fn push_with_data_crc(&mut self, pdu: &Pdu, data_crc: u32) {
        let header_only = Digests {
            data: false,
            ..self.digests
        };
        let (data, _) = encode_parts(pdu, header_only, &mut self.scratch);
        let header = self.scratch.split().freeze();
        self.enqueue(header);
        let pad = &[0u8; 3][..pad_len(data.len())];
        let crc = if pad.is_empty() {
            data_crc
        } else {
            sluice_digest::combine(data_crc, sluice_digest::crc32c(pad), pad.len() as u64)
        };
        self.enqueue(data);
        self.scratch.extend_from_slice(pad);
        self.scratch.extend_from_slice(&sluice_digest::to_wire(crc));
        let trailer = self.scratch.split().freeze();
        self.enqueue(trailer);
    }

    fn enqueue(&mut self, b: Bytes) {
        self.queued_bytes += b.len();
        self.queue.push_back(b);
    }

    /// Whether anything waits to be written.
    pub(crate) fn has_pending(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Bytes waiting to be written.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Whether so much waits that reading should pause.
    pub(crate) fn congested(&self) -> bool {
        self.queued_bytes > MAX_QUEUED_BYTES
    }

    /// Writes whatever the socket accepts right now, without waiting.
    pub(crate) fn write_now(&mut self) -> io::Result<()> {
        let mut cx = Context::from_waker(Waker::noop());
        while self.has_pending() {
            match self.poll_write_once(&mut cx) {
                Poll::Ready(r) => r?,
                Poll::Pending => break,
            }
        }
        Ok(())
    }

    /// Waits until the socket takes some of the queue, and writes it.
    pub(crate) async fn write_some(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_write_once(cx)).await
    }

    /// Writes everything queued, waiting as needed.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        while self.has_pending() {
            self.write_some().await?;
        }
        self.wr.flush().await
    }

    /// Writes what is queued, then shuts the sending side down.
    pub(crate) async fn close(&mut self) {
        if self.flush().await.is_ok() {
            let _ = self.wr.shutdown().await;
        }
    }

    fn poll_write_once(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let mut count = 0;
        for (slot, b) in slices.iter_mut().zip(self.queue.iter()) {
            *slot = IoSlice::new(b);
            count += 1;
        }
        let slices = &slices[..count];
        let mut probe = sluice_probe::span(sluice_probe::Stage::Syscall);
        let polled = Pin::new(&mut self.wr).poll_write_vectored(cx, slices);
        if polled.is_pending() {
            probe.relabel(sluice_probe::Stage::Poll);
        }
        probe.close();
        let written = match polled {
            Poll::Ready(Ok(0)) if !slices.is_empty() => {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()))
            }
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        self.consume(written);
        Poll::Ready(Ok(()))
    }

    fn consume(&mut self, mut written: usize) {
        self.queued_bytes -= written.min(self.queued_bytes);
        while written > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            if written >= front.len() {
                written -= front.len();
                self.queue.pop_front();
            } else {
                let _ = front.split_to(written);
                written = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::framing::encode;
    use sluice_proto::pdu::codes::ScsiStatus;
    use sluice_proto::pdu::DataIn;
    use sluice_proto::seq::{Itt, Lun, Ttt};
    use tokio::io::AsyncReadExt;

    fn data_in(len: usize) -> Pdu {
        let data: Bytes = (0..len)
            .map(|i| (i * 13 + 7) as u8)
            .collect::<Vec<_>>()
            .into();
        data_in_of(data)
    }

    fn data_in_of(data: Bytes) -> Pdu {
        Pdu::DataIn(DataIn {
            final_bit: true,
            ack: false,
            overflow: false,
            underflow: false,
            status_present: false,
            status: ScsiStatus::Good,
            lun: Lun::default(),
            itt: Itt(9),
            ttt: Ttt::RESERVED,
            stat_sn: Default::default(),
            exp_cmd_sn: Default::default(),
            max_cmd_sn: Default::default(),
            data_sn: 0,
            buffer_offset: 0,
            residual: 0,
            data,
        })
    }

    /// A fully allocated tmpfs file of patterned bytes, mapped by sluice-storage, and all of it.
    fn mapped_lun() -> (tempfile::TempDir, Bytes, sluice_storage::FileDevice) {
        use sluice_storage::{BlockDevice, FileDevice, FileOptions};
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("lun.img");
        let len = 2 << 20;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 / 3) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        let options = FileOptions {
            size: Some(len as u64),
            huge_pages: false,
            ..FileOptions::default()
        };
        let dev = FileDevice::open(&path, options).unwrap();
        let all = dev.read_shared(0, len).expect("mapped").unwrap();
        (dir, all, dev)
    }

    /// The vectored, zero-copy send puts exactly the bytes `encode` produces on the wire, with
    /// and without digests, whatever the socket takes per write.
    #[tokio::test]
    async fn wire_bytes_equal_encode_for_every_size_and_digest_setting() {
        for digests in [
            Digests::NONE,
            Digests {
                header: true,
                data: true,
            },
        ] {
            let mut pdus: Vec<Pdu> = [0, 1, 4093, 65_536, 300_001]
                .into_iter()
                .map(data_in)
                .collect();
            // Data-In served from a mapped LUN file: its digest comes from the CRC table.
            let lun = mapped_lun();
            for (at, len) in [(0, 1 << 20), (512, 300_001), (4096 + 7, 65_536 + 2)] {
                pdus.push(data_in_of(lun.1.slice(at..at + len)));
            }
            let (client, mut server) = tokio::io::duplex(64 * 1024);
            let reader = tokio::spawn(async move {
                let mut got = Vec::new();
                server.read_to_end(&mut got).await.unwrap();
                got
            });
            let mut outbox = Outbox::new(Box::new(client));
            outbox.set_digests(digests);
            let mut want = BytesMut::new();
            for pdu in &pdus {
                outbox.push(pdu);
                encode(pdu, digests, &mut want);
            }
            outbox.close().await;
            drop(outbox);
            assert_eq!(reader.await.unwrap(), &want[..], "digests {digests:?}");
        }
    }
}
