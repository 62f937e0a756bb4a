//! One association: a datagram socket's traffic with one peer, joined to a byte stream that
//! carries whole PDUs; see the [crate docs](crate).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use sluice_fault::{DigestTracker, FrameCutter};
use sluice_proto::datagram::{Reassembler, Segmenter};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

use crate::arq::{Exchange, InitiatorArq, TargetArq, Verdict};
use crate::UdpConfig;

/// Which end of the association this is.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Role {
    /// The initiator's end: resends unanswered login and text requests.
    Initiator,
    /// The target's end: answers repeated requests from the answer it kept.
    Target,
}

/// Where the association's datagrams come from.
#[derive(Debug)]
pub enum Source {
    /// A dispatcher that owns an unconnected socket hands them over (the target's side),
    /// counting the bytes queued in the shared counter, which this side counts down.
    Channel(mpsc::Receiver<Bytes>, Arc<AtomicUsize>),
    /// A socket connected to the peer (the initiator's side).
    Socket(Arc<UdpSocket>),
}

/// What both directions share: the login watched for its digests, and the stop-and-wait.
struct Shared {
    tracker: DigestTracker,
    initiator: InitiatorArq,
    target: TargetArq,
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Bytes asked of the stream per read.
const READ_CHUNK: usize = 64 * 1024;

/// Runs the association until the stream ends or the source does. Whole PDUs read from
/// `stream` go to `peer` as datagrams through `socket`; datagrams from `source` go to
/// `stream` as whole PDUs.
pub async fn run<S>(
    stream: S,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
    source: Source,
    role: Role,
    cfg: UdpConfig,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    let shared = Arc::new(Mutex::new(Shared {
        tracker: DigestTracker::new(),
        initiator: InitiatorArq::new(cfg.login_retransmit, cfg.login_retries),
        target: TargetArq::new(),
    }));
    let mut inbound = tokio::spawn(inbound(
        wr,
        Arc::clone(&socket),
        peer,
        source,
        role,
        cfg,
        Arc::clone(&shared),
    ));
    tokio::select! {
        _ = &mut inbound => {}
        () = outbound(rd, &socket, peer, role, cfg, &shared) => {}
    }
    inbound.abort();
    tracing::debug!(%peer, ?role, "UDP association ended");
}

/// Stream to datagrams, and the initiator's resends.
async fn outbound<R: AsyncRead + Unpin>(
    mut rd: R,
    socket: &UdpSocket,
    peer: SocketAddr,
    role: Role,
    cfg: UdpConfig,
    shared: &Mutex<Shared>,
) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    // A random first PDU id, so that late datagrams of an earlier association from the same
    // port cannot complete a PDU of this one.
    let mut seg = Segmenter::new(cfg.max_datagram, rand::random());
    let cutter = FrameCutter::default();
    loop {
        let due = lock(shared).initiator.poll_timeout();
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        buf.reserve(READ_CHUNK);
        tokio::select! {
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            () = tokio::time::sleep_until(due.map_or(far, Into::into)), if due.is_some() => {
                let resend = lock(shared).initiator.poll_resend(Instant::now());
                if let Some(datagrams) = resend {
                    tracing::debug!(%peer, "resending an unanswered login or text request");
                    for d in &datagrams {
                        send(socket, d, peer).await;
                    }
                }
                continue;
            }
        }
        loop {
            let digests = lock(shared).tracker.digests();
            let frame = match cutter.cut(&mut buf, digests) {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "UDP association: cannot frame what we send");
                    return;
                }
            };
            let exchange = Exchange::of(&frame);
            if let Err(e) = lock(shared).tracker.observe(&frame) {
                tracing::warn!(%peer, error = %e, "UDP association: unreadable login PDU sent");
                return;
            }
            let Some(segments) = seg.segment(&frame) else {
                continue;
            };
            let keep = matches!(
                (role, exchange),
                (Role::Initiator, Exchange::Request(_)) | (Role::Target, Exchange::Answer(_))
            );
            let mut kept = Vec::new();
            for s in segments {
                let mut d = BytesMut::with_capacity(s.len());
                s.write_to(&mut d);
                send(socket, &d, peer).await;
                if keep {
                    kept.push(d.freeze());
                }
            }
            match (role, exchange) {
                (Role::Initiator, Exchange::Request(itt)) => {
                    lock(shared)
                        .initiator
                        .handle_request_sent(itt, kept, Instant::now());
                }
                (Role::Target, Exchange::Answer(itt)) => {
                    lock(shared).target.handle_answer_sent(itt, kept);
                }
                _ => {}
            }
        }
    }
}

/// Datagrams to whole PDUs on the stream.
async fn inbound<W: AsyncWrite + Unpin>(
    mut wr: W,
    socket: Arc<UdpSocket>,
    peer: SocketAddr,
    mut source: Source,
    role: Role,
    cfg: UdpConfig,
    shared: Arc<Mutex<Shared>>,
) {
    let mut reassembler = Reassembler::new(cfg.reassembly);
    let mut rbuf = vec![0u8; 65_536];
    loop {
        let received = match &mut source {
            Source::Channel(rx, queued) => match rx.recv().await {
                Some(d) => {
                    queued.fetch_sub(d.len(), Ordering::Relaxed);
                    reassembler.push(&d, Instant::now())
                }
                None => break,
            },
            Source::Socket(s) => match s.recv(&mut rbuf).await {
                Ok(n) => reassembler.push(&rbuf[..n], Instant::now()),
                // An ICMP port unreachable for an earlier datagram: the target is not (yet)
                // there; the timers send again.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                Err(_) => break,
            },
        };
        let pdu = match received {
            Ok(Some(pdu)) => pdu,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "datagram dropped");
                continue;
            }
        };
        let mut resend = None;
        let forward = {
            let mut sh = lock(&shared);
            let forward = match (role, Exchange::of(&pdu)) {
                (Role::Target, Exchange::Request(itt)) => {
                    match sh.target.handle_request(itt, &pdu) {
                        Verdict::Forward => true,
                        Verdict::Resend(answer) => {
                            resend = Some(answer);
                            false
                        }
                        Verdict::Drop => false,
                    }
                }
                (Role::Initiator, Exchange::Answer(itt)) => sh.initiator.handle_answer(itt),
                _ => true,
            };
            if forward {
                if let Err(e) = sh.tracker.observe(&pdu) {
                    tracing::debug!(%peer, error = %e, "unreadable login PDU: association closed");
                    break;
                }
            }
            forward
        };
        for d in resend.iter().flatten() {
            send(&socket, d, peer).await;
        }
        if forward && wr.write_all(&pdu).await.is_err() {
            break;
        }
    }
    let s = reassembler.stats();
    tracing::debug!(
        %peer,
        delivered = s.delivered,
        malformed = s.malformed,
        duplicates = s.duplicates,
        expired = s.expired,
        evicted = s.evicted,
        "UDP association's reception ended"
    );
}

/// Sends one datagram; a failure is a lost datagram, which the timers repair.
async fn send(socket: &UdpSocket, datagram: &[u8], peer: SocketAddr) {
    if let Err(e) = socket.send_to(datagram, peer).await {
        tracing::trace!(%peer, error = %e, "datagram not sent");
    }
}
