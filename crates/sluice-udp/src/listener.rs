//! The target's side: one UDP socket per portal, one association per initiator address and
//! port, each handed to the target as a byte stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sluice_proto::datagram::SegmentHeader;
use tokio::io::DuplexStream;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

use crate::association::{self, Role, Source};
use crate::UdpConfig;

/// Bytes buffered in each direction of the in-memory stream between an association and the
/// target's connection.
const STREAM_BUFFER: usize = 1 << 20;

/// The way into one association: its channel and the bytes waiting in it.
struct Queue {
    tx: mpsc::Sender<Bytes>,
    queued: Arc<AtomicUsize>,
}

/// What a listener dropped, for its log line at the end.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct ListenerStats {
    /// Associations opened.
    pub associations: u64,
    /// Datagrams from a new peer that were no well-formed segment (no association opened).
    pub malformed: u64,
    /// Datagrams dropped because their association's queue was full.
    pub overflowed: u64,
    /// Datagrams from new peers refused at the association limit.
    pub refused: u64,
}

/// Serves `socket` until `stop` turns true. Memory per association is bounded by its queue
/// ([`UdpConfig::inbound_queue`] datagrams, [`UdpConfig::inbound_queue_bytes`] bytes), its
/// reassembly budget and the stream's buffers; the number of associations by
/// `max_associations`. A datagram from an address and port not seen
/// before opens an association if it is a well-formed segment (anything else is dropped
/// without one) and fewer than `max_associations` are open; `accept` gets the stream to
/// serve as one iSCSI connection, the peer and the local address.
pub async fn serve<F>(
    socket: UdpSocket,
    cfg: UdpConfig,
    max_associations: usize,
    mut stop: watch::Receiver<bool>,
    mut accept: F,
) -> ListenerStats
where
    F: FnMut(DuplexStream, SocketAddr, SocketAddr),
{
    crate::size_buffers(&socket, cfg.socket_buffer_bytes);
    let socket = Arc::new(socket);
    let local = socket
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let mut associations: HashMap<SocketAddr, Queue> = HashMap::new();
    let mut stats = ListenerStats::default();
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, peer) = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = socket.recv_from(&mut buf) => match r {
                Ok(got) => got,
                Err(e) => {
                    tracing::debug!(error = %e, "UDP receive failed");
                    continue;
                }
            },
        };
        let datagram = &buf[..n];
        if let Some(q) = associations.get(&peer) {
            if q.queued.load(Ordering::Relaxed) + n > cfg.inbound_queue_bytes {
                stats.overflowed += 1;
                continue;
            }
            match q.tx.try_send(Bytes::copy_from_slice(datagram)) {
                Ok(()) => {
                    q.queued.fetch_add(n, Ordering::Relaxed);
                    continue;
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    stats.overflowed += 1;
                    continue;
                }
                // Its connection ended: a new association may start from this datagram.
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    associations.remove(&peer);
                }
            }
        }
        if SegmentHeader::parse(datagram, cfg.reassembly.max_pdu_len).is_err() {
            stats.malformed += 1;
            continue;
        }
        associations.retain(|_, q| !q.tx.is_closed());
        if associations.len() >= max_associations {
            stats.refused += 1;
            tracing::warn!(%peer, "UDP association refused: {max_associations} are open");
            continue;
        }
        let (tx, rx) = mpsc::channel(cfg.inbound_queue.max(1));
        let queued = Arc::new(AtomicUsize::new(0));
        if tx.try_send(Bytes::copy_from_slice(datagram)).is_ok() {
            queued.fetch_add(n, Ordering::Relaxed);
        }
        let (ours, theirs) = tokio::io::duplex(STREAM_BUFFER);
        tokio::spawn(association::run(
            ours,
            Arc::clone(&socket),
            peer,
            Source::Channel(rx, Arc::clone(&queued)),
            Role::Target,
            cfg,
        ));
        stats.associations += 1;
        tracing::debug!(%peer, "UDP association opened");
        accept(theirs, peer, local);
        associations.insert(peer, Queue { tx, queued });
    }
    stats
}
