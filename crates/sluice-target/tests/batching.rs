//! Answers to a batch of commands that arrived together leave in few writes, not one write
//! per command (the 4 KiB QD 32 read path: one writev and one TCP push per eight commands),
//! and up to 1 MiB of large answers share a write, while answers of 1 MiB or more are written as
//! they are produced.

mod support;

use std::io::IoSlice;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use support::*;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// The target's end of an in-memory connection, counting the writes that carried bytes and
/// keeping the most bytes offered to one. A vectored write is one write (as `writev` is one
/// syscall).
struct CountingStream {
    inner: DuplexStream,
    writes: Arc<AtomicUsize>,
    largest: Arc<AtomicUsize>,
}

impl AsyncRead for CountingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.largest.fetch_max(buf.len(), Ordering::Relaxed);
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.poll_write(cx, &joined)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A logged-in connection whose target side counts its writes, and the most bytes it offered
/// to one write.
async fn counted_connection(h: &Harness) -> (Peer, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    counted_connection_with(h, &LoginOpts::normal()).await
}

/// [`counted_connection`], logged in with `opts`.
async fn counted_connection_with(
    h: &Harness,
    opts: &LoginOpts,
) -> (Peer, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (client, server) = tokio::io::duplex(4 << 20);
    let writes = Arc::new(AtomicUsize::new(0));
    let largest = Arc::new(AtomicUsize::new(0));
    let stream = CountingStream {
        inner: server,
        writes: Arc::clone(&writes),
        largest: Arc::clone(&largest),
    };
    let t = Arc::clone(&h.target);
    let peer_addr = "127.0.0.1:50000".parse().unwrap();
    let local = "127.0.0.1:3260".parse().unwrap();
    tokio::spawn(async move { t.serve_stream(stream, peer_addr, local).await });
    let mut p = Peer::new(client);
    p.login(opts).await.expect("login");
    p.clear_unit_attention().await;
    (p, writes, largest)
}

#[tokio::test]
async fn answers_to_commands_that_arrived_together_share_one_write() {
    let h = Harness::new(config());
    let (mut p, writes, _) = counted_connection(&h).await;
    let before = writes.load(Ordering::Relaxed);
    // 16 reads of 4 KiB: 16 Data-In PDUs with status, about 65 KiB in all.
    p.read_batch(0, 16, 8).await;
    let used = writes.load(Ordering::Relaxed) - before;
    assert!(
        used <= 3,
        "16 answers to one batch took {used} writes (one per command would be 16)"
    );
}

#[tokio::test]
async fn large_answers_share_writes_up_to_a_mebibyte() {
    let h = Harness::new(config());
    let (mut p, writes, _) = counted_connection(&h).await;
    let before = writes.load(Ordering::Relaxed);
    // 8 reads of 128 KiB, sent at once: 1 MiB of answers, the byte threshold, so they leave
    // together (one writev, or a few where the duplex or the iovec limit cuts it short)
    // rather than in eight writes of one answer each.
    p.read_batch(0, 8, 256).await;
    let used = writes.load(Ordering::Relaxed) - before;
    assert!(used <= 4, "8 answers of 128 KiB took {used} writes");
}

#[tokio::test]
async fn answers_of_a_mebibyte_are_not_held_back_for_the_rest_of_the_batch() {
    let h = Harness::new(config());
    // Data-In PDUs of 256 KiB, so that four buffers carry a 1 MiB answer and the iovec limit
    // per write does not split the batch on its own.
    let mut opts = LoginOpts::normal();
    opts.offer.max_recv_data_segment_length = 256 << 10;
    let (mut p, _, largest) = counted_connection_with(&h, &opts).await;
    // 4 reads of 1 MiB (the whole LUN), sent at once: each answer reaches the batching
    // threshold, so each is offered to the socket as soon as it is queued, not all four at
    // the end. A write may still carry what the last one left plus one new answer.
    p.read_batch(0, 4, 2048).await;
    let most = largest.load(Ordering::Relaxed);
    assert!(most < 2 << 20, "one write was offered {most} bytes");
}

#[tokio::test]
async fn writes_that_arrived_together_are_read_in_large_pieces_and_answered_together() {
    let h = Harness::new(config());
    let (mut p, writes, _) = counted_connection(&h).await;
    let before = writes.load(Ordering::Relaxed);
    // 32 writes of 4 KiB as immediate data, sent at once: 32 PDUs of 4,144 bytes, about
    // 130 KiB. Once a read fills its room the next asks for 64 KiB, then 128 KiB, so the
    // batch is read in a few pieces and each piece's answers leave in one write per eight
    // commands (four to six writes, by where the pieces end). Reads sized only for the next
    // PDU took one PDU each here: 32 answers, 32 writes.
    p.write_batch(0, 32, 8).await;
    let used = writes.load(Ordering::Relaxed) - before;
    assert!(
        used <= 8,
        "32 writes that arrived together were answered in {used} writes"
    );
}

#[tokio::test]
async fn a_long_batch_is_answered_in_pieces_so_the_initiator_overlaps_with_us() {
    let h = Harness::new(config());
    let (mut p, writes, _) = counted_connection(&h).await;
    let before = writes.load(Ordering::Relaxed);
    // 32 reads of 512 bytes, sent at once: about 18 KiB of answers, far under the byte
    // threshold, so only the eight-command limit splits them. One write for all 32 would keep
    // a pipelining initiator waiting for the last answer before it sends anything more.
    p.read_batch(0, 32, 1).await;
    let used = writes.load(Ordering::Relaxed) - before;
    assert!(
        (4..=8).contains(&used),
        "32 small answers took {used} writes (eight commands a write would be 4)"
    );
}
