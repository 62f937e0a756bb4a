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
//! Data segments travel as the `Bytes` they were produced in (zero copy). A large data segment
//! that is a range of a mapped LUN file goes out with `sendfile(2)` instead (see
//! [`sendfile`](self::sendfile) for when, and what it means for the bytes on the wire).
//!
//! An iSER connection in RDMA mode has no byte stream here: its PDUs go to the datamover
//! task as values over a bounded channel ([`Outbox::use_pdu_link`]), queued as they are and
//! handed over by the same `write_now` / `write_some` / `flush` calls, with nothing encoded.

mod sendfile;

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, encode_parts, pad_len, Digests};
use sluice_proto::pdu::Pdu;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

pub use sendfile::{sendfile_bytes, set_sendfile};
use sendfile::{FileSegment, SENDFILE_MIN};

/// The socket's sending half (a TCP stream, or an in-memory pipe in tests).
pub(crate) type Writer = Box<dyn WriteHalf>;

/// A connection's sending half.
pub(crate) trait WriteHalf: AsyncWrite + Send + Unpin {
    /// The TCP socket underneath, for `sendfile`; `None` for other streams (which get copies).
    fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        None
    }

    /// The TCP socket's half itself, to give the socket to another owner (an iSER
    /// connection's RDMA provider); `None` for other streams.
    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedWriteHalf> {
        None
    }
}

impl WriteHalf for tokio::net::tcp::OwnedWriteHalf {
    fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        Some(self.as_ref())
    }

    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedWriteHalf> {
        Some(*self)
    }
}

impl<S: tokio::io::AsyncRead + AsyncWrite + Send> WriteHalf for tokio::io::WriteHalf<S> {}

impl WriteHalf for tokio::io::DuplexStream {}

/// What an outbox whose socket went elsewhere keeps in its place (see
/// [`Outbox::use_pdu_link`]): nothing is written to it.
impl WriteHalf for tokio::io::Sink {}

impl<W: WriteHalf + ?Sized> WriteHalf for Box<W> {
    fn tcp(&self) -> Option<&tokio::net::TcpStream> {
        (**self).tcp()
    }

    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedWriteHalf> {
        (*self).into_tcp()
    }
}

/// Above this many queued bytes the connection stops reading until the peer catches up.
pub(crate) const MAX_QUEUED_BYTES: usize = 8 << 20;

/// How long a closing connection may take to send what is still queued ([`Outbox::close`]).
const CLOSE_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Most buffers handed to one `writev` (Linux IOV_MAX is 1024). Enough for a full batch
/// of answers (`WRITE_BATCH_BYTES` in ffp.rs, 1 MiB) in the smallest Data-In PDUs an
/// initiator commonly asks for, 8 KiB: 128 headers and 128 data segments. At 64, such a
/// batch left in four writes, and 128 KiB reads at queue depth 32 with 8 KiB PDUs ran 1.5x
/// slower (`sluice bench`, one core each, median of 5 alternating rounds: 21.8K against
/// 32.8K IOPS); 4 KiB reads moved within noise (353K against 376K).
const MAX_IOVECS: usize = 256;

/// Above this many PDUs queued for the datamover (RDMA mode) the connection stops reading
/// too, whatever their bytes: each queued PDU holds memory of its own.
const MAX_QUEUED_PDUS: usize = 4096;

/// What a queued PDU counts for in `queued_bytes` in RDMA mode: its header and data segment.
fn pdu_bytes(pdu: &Pdu) -> usize {
    sluice_proto::pdu::BHS_LEN + pdu.data().len()
}

/// RDMA mode (iSER): the PDUs for the datamover task, in order, and the channel to it.
struct PduLink {
    tx: mpsc::Sender<Pdu>,
    queue: VecDeque<Pdu>,
}

/// One queued piece of the byte stream.
enum Segment {
    /// Bytes in memory, written with `writev`.
    Bytes(Bytes),
    /// A data segment that is a range of a LUN file, written with `sendfile`.
    File(FileSegment),
}

impl Segment {
    fn len(&self) -> usize {
        match self {
            Segment::Bytes(b) => b.len(),
            Segment::File(f) => f.len(),
        }
    }
}

/// Encodes PDUs and writes them to the socket.
pub(crate) struct Outbox {
    wr: Writer,
    digests: Digests,
    scratch: BytesMut,
    queue: VecDeque<Segment>,
    queued_bytes: usize,
    /// Whether data segments of mapped LUN files may go out with `sendfile` (switched on, and
    /// the socket is TCP); still only without a data digest and from [`SENDFILE_MIN`] bytes.
    sendfile: bool,
    /// Bytes this connection sent with `sendfile`, and in how many calls.
    sendfile_sent: u64,
    sendfile_calls: u64,
    /// The test hook's faults (see `TargetConfig::fault_hook`), shared with the reader.
    faults: Option<crate::faults::SharedFaults>,
    /// Set in RDMA mode: PDUs go to the datamover as values, not to `wr`.
    link: Option<PduLink>,
}

impl Outbox {
    pub(crate) fn new(wr: Writer) -> Self {
        let sendfile = sendfile::enabled() && wr.tcp().is_some();
        Self {
            wr,
            digests: Digests::NONE,
            scratch: BytesMut::with_capacity(4096),
            queue: VecDeque::new(),
            queued_bytes: 0,
            sendfile,
            sendfile_sent: 0,
            sendfile_calls: 0,
            faults: None,
            link: None,
        }
    }

    /// Switches to RDMA mode (iSER, RFC 7145): from now on PDUs go to the datamover task over
    /// `tx`, as values, without digests (section 5.1: digests do not apply in RDMA mode).
    /// Returns the socket's sending half for the datamover. Whatever was queued is flushed
    /// first by the caller (the final Login Response); nothing queued is dropped here.
    pub(crate) fn use_pdu_link(&mut self, tx: mpsc::Sender<Pdu>) -> Writer {
        debug_assert!(self.queue.is_empty(), "the byte queue is flushed first");
        self.digests = Digests::NONE;
        self.sendfile = false;
        self.faults = None;
        self.link = Some(PduLink {
            tx,
            queue: VecDeque::new(),
        });
        std::mem::replace(&mut self.wr, Box::new(tokio::io::sink()))
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
    pub(crate) fn push(&mut self, pdu: Pdu) {
        if let Some(link) = &mut self.link {
            // The test hook on the PDUs handed to the datamover (see `crate::faults`).
            let copies = match &self.faults {
                Some(faults) => crate::faults::on_send_pdu(faults, &pdu),
                None => 1,
            };
            for _ in 1..copies {
                self.queued_bytes += pdu_bytes(&pdu);
                link.queue.push_back(pdu.clone());
            }
            if copies > 0 {
                self.queued_bytes += pdu_bytes(&pdu);
                link.queue.push_back(pdu);
            }
            return;
        }
        let pdu = &pdu;
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
            self.enqueue_data(data);
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
        self.queue.push_back(Segment::Bytes(b));
    }

    /// Queues a data segment (no data digest follows it): by `sendfile` when it is large and a
    /// range of a mapped LUN file, as bytes otherwise.
    fn enqueue_data(&mut self, data: Bytes) {
        if self.sendfile && data.len() >= SENDFILE_MIN {
            if let Some(range) = sluice_storage::file_range(&data) {
                self.queued_bytes += data.len();
                self.queue
                    .push_back(Segment::File(FileSegment::new(data, range)));
                return;
            }
        }
        self.enqueue(data);
    }

    /// Whether anything waits to be written.
    pub(crate) fn has_pending(&self) -> bool {
        !self.queue.is_empty() || self.link.as_ref().is_some_and(|l| !l.queue.is_empty())
    }

    /// Bytes waiting to be written.
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Whether so much waits that reading should pause.
    pub(crate) fn congested(&self) -> bool {
        self.queued_bytes > MAX_QUEUED_BYTES
            || self
                .link
                .as_ref()
                .is_some_and(|l| l.queue.len() > MAX_QUEUED_PDUS)
    }

    /// Writes whatever the socket accepts right now, without waiting.
    pub(crate) fn write_now(&mut self) -> io::Result<()> {
        if self.link.is_some() {
            return self.hand_over_now();
        }
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
        if let Some(link) = &mut self.link {
            // Cancel safe (a branch of the connection's `select!`): nothing leaves the queue
            // until the channel has room for it.
            let permit = link.tx.reserve().await.map_err(|_| link_closed())?;
            if let Some(pdu) = link.queue.pop_front() {
                self.queued_bytes -= pdu_bytes(&pdu).min(self.queued_bytes);
                permit.send(pdu);
            } else {
                drop(permit);
            }
            return self.hand_over_now();
        }
        std::future::poll_fn(|cx| self.poll_write_once(cx)).await
    }

    /// RDMA mode: moves queued PDUs to the datamover's channel while it has room.
    fn hand_over_now(&mut self) -> io::Result<()> {
        let Some(link) = &mut self.link else {
            return Ok(());
        };
        while !link.queue.is_empty() {
            let permit = match link.tx.try_reserve() {
                Ok(permit) => permit,
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => return Err(link_closed()),
            };
            if let Some(pdu) = link.queue.pop_front() {
                self.queued_bytes -= pdu_bytes(&pdu).min(self.queued_bytes);
                permit.send(pdu);
            }
        }
        Ok(())
    }

    /// Writes everything queued, waiting as needed.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        while self.has_pending() {
            self.write_some().await?;
        }
        self.wr.flush().await
    }

    /// Writes what is queued, then shuts the sending side down (in RDMA mode: closes the
    /// channel, which tells the datamover the connection task is done). A peer that reads
    /// nothing gets [`CLOSE_FLUSH_LIMIT`] to take it, not for ever: the connection's task and
    /// what it holds would otherwise outlive it with no end.
    pub(crate) async fn close(&mut self) {
        match tokio::time::timeout(CLOSE_FLUSH_LIMIT, self.flush()).await {
            Ok(Ok(())) => {
                let _ = self.wr.shutdown().await;
            }
            Ok(Err(_)) => {}
            Err(_) => tracing::debug!(
                queued = self.queued_bytes,
                "closing without sending the rest: the peer took nothing in"
            ),
        }
        self.link = None;
    }

    fn poll_write_once(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(Segment::File(_)) = self.queue.front() {
            return self.poll_sendfile(cx);
        }
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let mut count = 0;
        let mut file_follows = false;
        for (slot, segment) in slices.iter_mut().zip(self.queue.iter()) {
            match segment {
                Segment::Bytes(b) => *slot = IoSlice::new(b),
                Segment::File(_) => {
                    file_follows = true;
                    break;
                }
            }
            count += 1;
        }
        let slices = &slices[..count];
        if file_follows {
            // The header before a sendfile data segment: MSG_MORE, so that it leaves in one
            // TCP segment with the data instead of alone (the socket is TCP_NODELAY).
            if let Some(tcp) = self.wr.tcp() {
                let written = ready!(sendfile::poll_send_more(tcp, cx, slices))?;
                self.consume(written);
                return Poll::Ready(Ok(()));
            }
        }
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

    /// Sends (some of) the file segment at the front of the queue.
    fn poll_sendfile(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(Segment::File(segment)) = self.queue.front_mut() else {
            return Poll::Ready(Ok(()));
        };
        let Some(tcp) = self.wr.tcp() else {
            // Not reached (file segments are only queued for TCP); copy it then.
            let bytes = segment.to_bytes();
            self.queue[0] = Segment::Bytes(bytes);
            return Poll::Ready(Ok(()));
        };
        match ready!(sendfile::poll_sendfile(tcp, cx, segment)) {
            Ok(written) => {
                self.sendfile_sent += written as u64;
                self.sendfile_calls += 1;
                self.consume(written);
                Poll::Ready(Ok(()))
            }
            Err(e) if sendfile::unsupported(&e) => {
                // The kernel cannot splice this file into this socket: send the mapped bytes,
                // and never try again on this connection.
                tracing::debug!(error = %e, "sendfile unsupported; copying data segments");
                self.sendfile = false;
                for segment in self.queue.iter_mut() {
                    if let Segment::File(f) = segment {
                        *segment = Segment::Bytes(f.to_bytes());
                    }
                }
                Poll::Ready(Ok(()))
            }
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn consume(&mut self, mut written: usize) {
        self.queued_bytes -= written.min(self.queued_bytes);
        while written > 0 {
            let Some(front) = self.queue.front_mut() else {
                break;
            };
            let len = front.len();
            if written >= len {
                written -= len;
                self.queue.pop_front();
            } else {
                match front {
                    Segment::Bytes(b) => {
                        let _ = b.split_to(written);
                    }
                    Segment::File(f) => f.advance(written),
                }
                written = 0;
            }
        }
    }
}

/// The datamover task is gone (its connection failed, or it ended it).
fn link_closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the iSER datamover closed the connection",
    )
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
                outbox.push(pdu.clone());
                encode(pdu, digests, &mut want);
            }
            outbox.close().await;
            drop(outbox);
            assert_eq!(reader.await.unwrap(), &want[..], "digests {digests:?}");
        }
    }

    /// A peer that reads nothing does not keep a closing connection for ever: what the pipe
    /// cannot take is given up after the limit.
    #[tokio::test(start_paused = true)]
    async fn closing_gives_a_peer_that_reads_nothing_a_time_limit() {
        let (client, _server_never_read) = tokio::io::duplex(4096);
        let mut outbox = Outbox::new(Box::new(client));
        outbox.push(data_in(1 << 20));
        let started = tokio::time::Instant::now();
        outbox.close().await;
        assert_eq!(started.elapsed(), CLOSE_FLUSH_LIMIT);
        assert!(outbox.has_pending(), "the rest was given up, not sent");
    }

    /// A loopback TCP connection: the outbox's writer, and the peer's socket.
    async fn tcp_pair(send_buffer: Option<usize>) -> (Writer, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connect = tokio::spawn(async move { tokio::net::TcpStream::connect(addr).await });
        let (ours, _) = listener.accept().await.unwrap();
        let theirs = connect.await.unwrap().unwrap();
        ours.set_nodelay(true).unwrap();
        if let Some(bytes) = send_buffer {
            // The sender's buffer only: a tiny receive window would crawl on delayed ACKs.
            socket2::SockRef::from(&ours)
                .set_send_buffer_size(bytes)
                .unwrap();
        }
        let (_, wr) = ours.into_split();
        (Box::new(wr), theirs)
    }

    /// Data-In PDUs of a mapped LUN: large and small, aligned and not (padding), at offsets
    /// that are not page aligned; and one in memory.
    fn mixed_pdus(lun: &Bytes) -> Vec<Pdu> {
        let mut pdus = vec![data_in(300_001)];
        for (at, len) in [
            (0, 1 << 20),
            (512, 300_001),
            (4096 + 7, 65_536 + 2),
            (100, 4096),
            (1 << 20, 65_536),
            (3, 262_143),
        ] {
            pdus.push(data_in_of(lun.slice(at..at + len)));
        }
        pdus
    }

    /// Pushes `pdus` (a few at a time, writing between, as the connection does), closes, and
    /// returns what the peer read, what `encode` says it should be, and the bytes sent with
    /// sendfile and in how many calls. The peer reads in small pieces with pauses when `slow`, so the socket fills
    /// and sends are partial.
    async fn send_over_tcp(
        pdus: &[Pdu],
        digests: Digests,
        sendfile: bool,
        send_buffer: Option<usize>,
        slow: bool,
    ) -> (Vec<u8>, BytesMut, (u64, u64)) {
        let (wr, mut theirs) = tcp_pair(send_buffer).await;
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut piece = vec![0u8; if slow { 7_000 } else { 1 << 20 }];
            loop {
                let n = theirs.read(&mut piece).await.unwrap();
                if n == 0 {
                    break got;
                }
                got.extend_from_slice(&piece[..n]);
                if slow && got.len() % 5 == 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
        });
        let mut outbox = Outbox::new(wr);
        outbox.sendfile = sendfile;
        outbox.set_digests(digests);
        let mut want = BytesMut::new();
        for batch in pdus.chunks(2) {
            for pdu in batch {
                outbox.push(pdu.clone());
                encode(pdu, digests, &mut want);
            }
            outbox.write_now().unwrap();
            if outbox.congested() {
                outbox.flush().await.unwrap();
            }
        }
        outbox.close().await;
        let sent = (outbox.sendfile_sent, outbox.sendfile_calls);
        drop(outbox);
        (reader.await.unwrap(), want, sent)
    }

    /// Over TCP without a data digest, large data segments of a mapped LUN go out with
    /// sendfile, byte for byte what `encode` produces (header, data, padding), whether the
    /// socket takes everything at once or a few KiB at a time (partial sends, EAGAIN, waits
    /// for writability).
    #[tokio::test]
    async fn sendfile_sends_exactly_the_encoded_bytes_over_tcp() {
        let lun = mapped_lun();
        let pdus = mixed_pdus(&lun.1);
        let large = [1 << 20, 300_001, 65_538, 65_536, 262_143];
        for (send_buffer, slow) in [(None, false), (Some(4096), true)] {
            let (got, want, (sent, calls)) =
                send_over_tcp(&pdus, Digests::NONE, true, send_buffer, slow).await;
            assert!(
                got == want[..],
                "wire bytes differ (buffer {send_buffer:?})"
            );
            assert_eq!(
                sent,
                large.iter().sum::<u64>(),
                "every large mapped segment, only those, by sendfile"
            );
            if send_buffer.is_some() {
                assert!(
                    calls > 4 * large.len() as u64,
                    "partial sends: {calls} calls"
                );
            }
        }
    }

    /// With a data digest, or with the switch off, nothing goes by sendfile, and the bytes are
    /// still right.
    #[tokio::test]
    async fn digests_or_the_switch_keep_the_copy_path() {
        let lun = mapped_lun();
        let pdus = mixed_pdus(&lun.1);
        let both = Digests {
            header: true,
            data: true,
        };
        let header_only = Digests {
            header: true,
            data: false,
        };
        for (digests, on, expect_sendfile) in [
            (both, true, false),
            (Digests::NONE, false, false),
            (header_only, true, true),
        ] {
            let (got, want, (sent, _)) = send_over_tcp(&pdus, digests, on, Some(8192), true).await;
            assert!(got == want[..], "wire bytes differ ({digests:?}, on {on})");
            assert_eq!(sent > 0, expect_sendfile, "{digests:?}, on {on}");
        }
    }

    /// The data segment of a Data-In pushed in RDMA mode.
    fn data_of(pdu: &Pdu) -> &Bytes {
        match pdu {
            Pdu::DataIn(d) => &d.data,
            other => panic!("not a Data-In: {other:?}"),
        }
    }

    /// In RDMA mode PDUs reach the datamover's channel as the values pushed: in order, their
    /// data segments the very buffers pushed (no encoding, no copy). What the channel has
    /// no room for waits in the queue, and closing hands it all over before the channel
    /// closes.
    #[tokio::test]
    async fn rdma_mode_hands_pdus_over_as_values_in_order() {
        let (client, _server) = tokio::io::duplex(1024);
        let mut outbox = Outbox::new(Box::new(client));
        let (tx, mut rx) = mpsc::channel(4);
        let _socket = outbox.use_pdu_link(tx);
        let data: Vec<Bytes> = (0..10usize)
            .map(|i| Bytes::from(vec![i as u8; 1000 + i]))
            .collect();
        for d in &data {
            outbox.push(data_in_of(d.clone()));
        }
        outbox.write_now().unwrap();
        assert!(outbox.has_pending(), "six PDUs wait for room");
        let mut got = Vec::new();
        while let Ok(pdu) = rx.try_recv() {
            got.push(pdu);
        }
        assert_eq!(got.len(), 4, "the channel took what it holds");
        let rest = tokio::spawn(async move {
            let mut v = Vec::new();
            while let Some(pdu) = rx.recv().await {
                v.push(pdu);
            }
            v
        });
        outbox.close().await;
        got.extend(rest.await.unwrap());
        assert_eq!(got.len(), data.len());
        for (pdu, d) in got.iter().zip(&data) {
            let sent = data_of(pdu);
            assert_eq!(sent, d);
            assert_eq!(sent.as_ptr(), d.as_ptr(), "the pushed buffer itself");
        }
    }

    /// In RDMA mode the connection stops reading once too many PDUs wait for the datamover,
    /// and a datamover that is gone is a write error, not a hang.
    #[tokio::test]
    async fn rdma_mode_is_bounded_and_notices_the_datamover_gone() {
        let (client, _server) = tokio::io::duplex(1024);
        let mut outbox = Outbox::new(Box::new(client));
        let (tx, rx) = mpsc::channel(1);
        let _socket = outbox.use_pdu_link(tx);
        for _ in 0..=MAX_QUEUED_PDUS {
            assert!(!outbox.congested());
            outbox.push(data_in(0));
        }
        outbox.write_now().unwrap();
        assert!(!outbox.congested(), "one in the channel, the limit queued");
        outbox.push(data_in(0));
        assert!(outbox.congested(), "more than the limit queued");
        drop(rx);
        assert_eq!(
            outbox.write_now().unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        assert_eq!(
            outbox.write_some().await.unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }

    /// In-memory pipes never take the sendfile path, whatever the switch says.
    /// In RDMA mode the test hook faults the PDUs handed to the datamover: every second
    /// Data-In dropped, the others passed once.
    #[tokio::test]
    async fn rdma_mode_applies_the_fault_hook_to_pdus_for_the_datamover() {
        let plan = sluice_fault::FaultPlan {
            to_initiator: sluice_fault::Rules {
                drop: vec![sluice_fault::DropEvery {
                    kind: sluice_fault::PduKind::DataIn,
                    every: std::num::NonZeroU64::new(2).unwrap(),
                }],
                ..sluice_fault::Rules::default()
            },
            ..sluice_fault::FaultPlan::default()
        };
        let hook = sluice_fault::FaultHook::new(plan, 7);
        let faults = std::sync::Arc::new(std::sync::Mutex::new(hook.connection(
            sluice_fault::Sender::Target,
            Digests::NONE,
            8192,
        )));
        let (client, _server) = tokio::io::duplex(1024);
        let mut outbox = Outbox::new(Box::new(client));
        let (tx, mut rx) = mpsc::channel(8);
        let _socket = outbox.use_pdu_link(tx);
        outbox.set_faults(faults);
        for len in 1..=4 {
            outbox.push(data_in(len));
        }
        outbox.write_now().unwrap();
        let mut lens = Vec::new();
        while let Ok(pdu) = rx.try_recv() {
            lens.push(data_of(&pdu).len());
        }
        assert_eq!(lens, [1, 3]);
        assert!(!outbox.reset_due());
    }

    #[test]
    fn only_tcp_sockets_get_sendfile() {
        let (client, _server) = tokio::io::duplex(1024);
        let outbox = Outbox::new(Box::new(client));
        assert!(!outbox.sendfile);
    }
}
