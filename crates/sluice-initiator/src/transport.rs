//! One connection: over TCP, the sans-IO framer on the receive side and a [`SendQueue`] on the
//! send side (data segments written from the caller's buffers, not copied); over iSER in RDMA
//! mode, an [`IserLink`] that carries PDUs as values; counters and the PDU trace on both. Login
//! and discovery use [`Transport::send`] and [`Transport::recv`]; the full-feature driver uses
//! the buffers (or the link) directly so that it can read and write at the same time.

use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use sluice_proto::framing::{encode, Digests, FrameError, Framer, LOGIN_MAX_DATA_SEGMENT};
use sluice_proto::iser::login::{JoinedSession, LoginEnd};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_proto::text::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc::error::TrySendError;

use crate::counters::Counters;
use crate::error::Error;
use crate::iser::{IserLink, IserLogin, IserLoginEnd};
use crate::options::{ConnectOptions, Direction, PduTrace};
use crate::placement::Placing;
use crate::send_queue::SendQueue;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 * 1024;
/// How often a connection whose socket is full looks at its send buffer: often enough to
/// follow slow start over a long path (a few round trips), rarely enough to cost nothing.
const TUNE_EVERY: Duration = Duration::from_millis(10);

/// What a connection's PDUs travel over.
pub(crate) enum Link {
    /// A byte stream: iSCSI over TCP, and every connection while it logs in.
    Tcp(TcpStream),
    /// iSER in RDMA mode: PDUs as values to and from the datamover task.
    Iser(IserLink),
    /// Neither any more: the stream went to the RDMA provider and RDMA mode did not start.
    Closed,
}

/// A connection with its framing state.
pub(crate) struct Transport {
    /// `host:port` as connected, for messages.
    pub(crate) portal: String,
    pub(crate) link: Link,
    pub(crate) framer: Framer,
    pub(crate) rbuf: BytesMut,
    /// What is yet to be written.
    pub(crate) out: SendQueue,
    pub(crate) digests: Digests,
    pub(crate) counters: Counters,
    /// A Data-In payload being received into its read's buffer (see `placement`).
    pub(crate) placing: Option<Placing>,
    /// Read one PDU header at a time (large Data-In PDUs are arriving; see `placement`).
    pub(crate) header_reads: bool,
    trace: Option<PduTrace>,
    /// The fault test hook of this connection (see `ConnectOptions::fault_hook`).
    pub(crate) faults: Option<Box<sluice_fault::DriverFaults>>,
    /// Grows the send buffer past autotuning's ceiling when it limits (`BufferPolicy::Grow`).
    tuner: Option<sluice_tcp::SendBufferTuner>,
    /// When [`Self::socket_full`] may next look.
    next_tune: Instant,
    /// Over iSER, while logging in: adds iSER's keys and decides the mode that follows.
    iser_login: Option<Box<IserLogin>>,
    /// What this connection's iSER login settled (RDMA or TCP mode, and what RDMA mode
    /// took), once it ended; `None` without iSER.
    iser_settled: Option<JoinedSession>,
}

impl Transport {
    /// Connects within the configured timeout, the socket set up as `opts.tcp` says.
    pub(crate) async fn connect(
        portal: &str,
        opts: &ConnectOptions,
        counters: Counters,
    ) -> Result<Self, Error> {
        // Over UDP the driver's stream is a loopback connection to the association, which
        // speaks UDP to the target (`sluice_udp::bridge`). Over iSER the login uses the
        // target's socket as it is; RDMA mode takes it over after the final Login Response.
        let bridged;
        let iser_login = opts
            .iser
            .as_ref()
            .map(|iser| Box::new(IserLogin::new(iser.clone(), opts.iser_stats.clone())));
        let stream_to = match (&opts.iser, opts.udp) {
            (Some(_), _) | (None, None) => portal,
            (None, Some(udp)) => {
                let local = sluice_udp::bridge::connect(portal, udp)
                    .await
                    .map_err(|error| Error::Connect {
                        portal: portal.to_owned(),
                        error,
                    })?;
                bridged = local.to_string();
                &bridged
            }
        };
        let connect = open_socket(stream_to, &opts.tcp);
        let stream = match tokio::time::timeout(opts.connect_timeout, connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(error)) => {
                return Err(Error::Connect {
                    portal: portal.to_owned(),
                    error,
                })
            }
            Err(_) => return Err(Error::Timeout("TCP connect")),
        };
        if let Some(hook) = &opts.socket_hook {
            hook(&stream);
        }
        if iser_login.is_some() {
            // iSER's Sends are small messages waiting for an answer.
            let _ = stream.set_nodelay(true);
        }
        let tuner = match opts.tcp.send_buffer {
            sluice_tcp::BufferPolicy::Grow { ceiling } => {
                Some(sluice_tcp::SendBufferTuner::new(ceiling))
            }
            _ => None,
        };
        Ok(Self {
            portal: portal.to_owned(),
            link: Link::Tcp(stream),
            framer: Framer::new(LOGIN_MAX_DATA_SEGMENT),
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            out: SendQueue::default(),
            digests: Digests::NONE,
            counters,
            placing: None,
            header_reads: false,
            trace: opts.trace.clone(),
            faults: None,
            tuner,
            next_tune: Instant::now(),
            iser_login,
            iser_settled: None,
        })
    }

    /// The socket took less than we had to write: if the send buffer is growable and it is
    /// time to look again, asks TCP_INFO whether the buffer is what limits the connection
    /// and grows it (see `sluice_tcp::SendBufferTuner`). At most once per [`TUNE_EVERY`],
    /// so a busy connection pays one `getsockopt` per interval and an idle one nothing.
    pub(crate) fn socket_full(&mut self) {
        let (Some(tuner), Link::Tcp(stream)) = (&mut self.tuner, &self.link) else {
            return;
        };
        let now = Instant::now();
        if now < self.next_tune {
            return;
        }
        self.next_tune = now + TUNE_EVERY;
        let (Ok(info), Ok(current)) = (
            sluice_tcp::tcp_info(stream),
            sluice_tcp::send_buffer_bytes(stream),
        ) else {
            // A socket without TCP_INFO (never on Linux): nothing to tune by.
            self.tuner = None;
            return;
        };
        if let sluice_tcp::TunerDecision::Grow(bytes) = tuner.decide(&info, current) {
            let after = sluice_tcp::set_send_buffer(stream, bytes).unwrap_or(current);
            tuner.applied(current, after);
            tracing::debug!(portal = %self.portal, before = current, after, "send buffer grown");
        }
    }

    /// Over iSER, the connection joins `session` (see `InitiatorLoginShim::joins_session`);
    /// nothing otherwise.
    pub(crate) fn iser_joins_session(&mut self, session: JoinedSession) {
        if let Some(login) = &mut self.iser_login {
            login.joins_session(session);
        }
    }

    /// What the connection's iSER login settled, for the connections that join its session
    /// when it is the leading one (RFC 7145 section 6.3.1: RDMAExtensions is leading-only);
    /// `None` without iSER.
    pub(crate) fn iser_settled(&self) -> Option<JoinedSession> {
        self.iser_settled
    }

    /// Whether this connection reached iSER's RDMA mode (an iSER connection that fell back
    /// to iSCSI over TCP did not).
    pub(crate) fn iser_rdma_mode(&self) -> bool {
        matches!(self.link, Link::Iser(_))
    }

    /// Over iSER, the Login Response `rsp` just received: iSER's answers taken off, and at
    /// the final one the switch to RDMA mode (or, when allowed, going on over TCP).
    async fn iser_login_response(
        &mut self,
        rsp: &mut sluice_proto::pdu::LoginResponse,
    ) -> Result<(), Error> {
        let Some(login) = &mut self.iser_login else {
            return Ok(());
        };
        let end = match login.response(rsp) {
            Ok(IserLoginEnd::Pending) => return Ok(()),
            Ok(end) => end,
            Err(why) => return Err(self.failed(why)),
        };
        let Some(login) = self.iser_login.take() else {
            return Ok(());
        };
        let IserLoginEnd::Rdma(end) = end else {
            self.iser_settled = JoinedSession::of(LoginEnd::Tcp, 0);
            return Ok(());
        };
        self.iser_settled = JoinedSession::of(end, 0);
        if !self.rbuf.is_empty() {
            // RFC 7145 section 5.1: in RDMA mode the target waits for the Hello; bytes after
            // the final Login Response belong to no mode.
            return Err(self.failed("the target sent bytes after the final Login Response".into()));
        }
        let Link::Tcp(stream) = std::mem::replace(&mut self.link, Link::Closed) else {
            return Err(self.failed("the connection is not a TCP stream".into()));
        };
        match login.start_rdma(stream, end).await {
            Ok(link) => {
                self.link = Link::Iser(link);
                Ok(())
            }
            Err(why) => Err(self.failed(why)),
        }
    }

    /// The connection cannot go on, for `why`.
    fn failed(&self, why: String) -> Error {
        tracing::warn!(portal = %self.portal, "iSER: {why}");
        Error::Io {
            portal: self.portal.clone(),
            error: std::io::Error::other(why),
        }
    }

    /// Over iSER in RDMA mode, hands the PDUs the session core has for connection `conn` to
    /// the datamover, while the link has room (see [`IserLink`]).
    pub(crate) fn pass_to_mover(
        &mut self,
        core: &mut sluice_proto::initiator::InitiatorSession,
        conn: sluice_proto::initiator::ConnId,
    ) {
        let Link::Iser(link) = &mut self.link else {
            return;
        };
        link.blocked = false;
        loop {
            let permit = match link.to_mover.try_reserve() {
                Ok(p) => p,
                Err(TrySendError::Full(())) => {
                    link.blocked = link.duplicate.is_some() || core.has_transmit(conn);
                    return;
                }
                // The datamover ended: the receiving side sees the link close.
                Err(TrySendError::Closed(())) => return,
            };
            if let Some(again) = link.duplicate.take() {
                permit.send(again);
                continue;
            }
            let Some(pdu) = core.poll_transmit(conn) else {
                return;
            };
            note_sent(&self.counters, self.trace.as_ref(), &self.portal, &pdu);
            if let Some(faults) = &mut self.faults {
                // The test hook on the PDUs the core hands to the datamover (see
                // `Self::enter_full_feature`).
                match faults.on_send_pdu(&pdu) {
                    0 => continue,
                    1 => {}
                    _ => link.duplicate = Some(pdu.clone()),
                }
            }
            permit.send(pdu);
        }
    }

    /// Over iSER in RDMA mode, how many copies of `pdu`, just handed over by the datamover,
    /// the core takes: 1, unless the fault test hook drops (0) or duplicates (2) it.
    pub(crate) fn fault_received_value(&mut self, pdu: &Pdu) -> u8 {
        match &mut self.faults {
            None => 1,
            Some(faults) => faults.on_receive_pdu(pdu),
        }
    }

    /// Whether the fault test hook resets the connection now.
    pub(crate) fn fault_reset_due(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.reset_due())
    }

    /// Accounts for a PDU the datamover handed over, as [`Self::decode`] does for one
    /// framed.
    pub(crate) fn note_value_received(&self, pdu: &Pdu) {
        self.counters.bytes_received(value_len(pdu));
        self.counters.pdu_received(pdu.opcode());
        self.trace_received(pdu);
    }

    /// Ends the connection: over TCP a shutdown, over iSER the link closed.
    pub(crate) async fn shutdown(&mut self) {
        match &mut self.link {
            Link::Tcp(stream) => {
                let _ = stream.shutdown().await;
            }
            Link::Iser(link) => link.from_mover.close(),
            Link::Closed => {}
        }
    }

    /// Switches to the negotiated parameters (RFC 7143 section 13.1: digests start with the
    /// first PDU after the final Login Response; section 13.12: our declared
    /// MaxRecvDataSegmentLength bounds what the target sends).
    /// A fault `hook` starts faulting this connection's PDUs from here on.
    pub(crate) fn enter_full_feature(
        &mut self,
        params: &SessionParams,
        hook: Option<&sluice_fault::FaultHook>,
    ) {
        self.digests = Digests::negotiated(params);
        self.framer.set_digests(self.digests);
        // RFC 7143 section 7.8: at ErrorRecoveryLevel 1 and above a PDU with a bad header
        // digest is skipped, and sequence numbers and timeouts recover it.
        self.framer
            .set_header_resync((params.error_recovery_level >= 1).then_some(Role::Initiator));
        self.framer
            .set_max_data_segment(params.initiator_max_recv_data_segment_length);
        // Over iSER in RDMA mode PDUs pass to and from the datamover as values: the hook
        // faults those (`Self::pass_to_mover`, `Self::fault_received_value`), judging each
        // by its frame. Drops, duplicates and resets apply as over TCP; corruption cannot
        // (RDMA mode has no digests, RFC 7145 section 5.1, so nothing would notice a
        // flipped bit): such PDUs are left alone and counted as skipped, as on a TCP
        // connection without digests.
        if let Some(h) = hook.filter(|_| self.iser_rdma_mode()) {
            if h.plan().corrupts() {
                tracing::warn!(
                    portal = %self.portal,
                    "fault hook: corruption does not apply to an iSER connection in RDMA \
                     mode (no digests would notice it); drops, duplicates and resets do"
                );
            }
        }
        self.faults = hook.map(|h| {
            Box::new(h.connection(
                sluice_fault::Sender::Initiator,
                self.digests,
                params.initiator_max_recv_data_segment_length,
            ))
        });
    }

    /// Queues `pdu` to be sent (over TCP; see [`Self::pass_to_mover`] for iSER).
    pub(crate) fn queue(&mut self, pdu: &Pdu) {
        let _probe = sluice_probe::span(sluice_probe::Stage::Framing);
        if let Some(faults) = &mut self.faults {
            // The hook rewrites, drops or repeats whole frames in place, so under it (tests
            // only) each PDU is encoded in one piece and copied into the queue.
            let mut frame = BytesMut::new();
            encode(pdu, self.digests, &mut frame);
            self.counters.pdu_sent(pdu, frame.len());
            for _ in 0..faults.on_send(&mut frame) {
                self.out.push_frame(&frame);
            }
        } else {
            let wire_len = self.out.push(pdu, self.digests);
            self.counters.pdu_sent(pdu, wire_len);
        }
        if let Some(trace) = &self.trace {
            trace(Direction::Sent, pdu);
        }
        tracing::trace!(portal = %self.portal, ?pdu, "sent");
    }

    /// Sends one PDU and waits until it is written.
    pub(crate) async fn send(&mut self, pdu: &Pdu) -> Result<(), Error> {
        if let Link::Iser(link) = &self.link {
            note_sent(&self.counters, self.trace.as_ref(), &self.portal, pdu);
            if link.to_mover.send(pdu.clone()).await.is_err() {
                return Err(self.io(std::io::ErrorKind::BrokenPipe.into()));
            }
            return Ok(());
        }
        match (&mut self.iser_login, pdu) {
            (Some(login), Pdu::LoginRequest(req)) => {
                let mut req = req.clone();
                login.request(&mut req);
                self.queue(&Pdu::LoginRequest(req));
            }
            _ => self.queue(pdu),
        }
        self.flush().await
    }

    /// Writes everything queued, with vectored writes (over iSER nothing is queued here).
    pub(crate) async fn flush(&mut self) -> Result<(), Error> {
        let res = match &mut self.link {
            Link::Tcp(stream) => self.out.write_all(stream).await,
            Link::Iser(_) => Ok(()),
            Link::Closed => Err(std::io::ErrorKind::NotConnected.into()),
        };
        // After an error the connection is over: what was not written never will be.
        self.out.clear();
        res.map_err(|source| self.io(source))
    }

    /// Receives one PDU. A data digest error is counted and returned (the stream is still in
    /// step); other framing errors end the connection.
    pub(crate) async fn recv(&mut self) -> Result<Pdu, Error> {
        let mut pdu = self.recv_pdu().await?;
        if let Pdu::LoginResponse(rsp) = &mut pdu {
            self.iser_login_response(rsp).await?;
        }
        Ok(pdu)
    }

    async fn recv_pdu(&mut self) -> Result<Pdu, Error> {
        if let Link::Iser(link) = &mut self.link {
            let Some(pdu) = link.from_mover.recv().await else {
                return Err(self.io(std::io::ErrorKind::UnexpectedEof.into()));
            };
            self.note_value_received(&pdu);
            return Ok(pdu);
        }
        loop {
            if let Some(pdu) = self.decode()? {
                return Ok(pdu);
            }
            self.rbuf.reserve(READ_CHUNK);
            let Link::Tcp(stream) = &mut self.link else {
                return Err(self.io(std::io::ErrorKind::NotConnected.into()));
            };
            let read = if self.iser_login.is_some() {
                // An iSER login reads no byte past each PDU: after the final Login Response
                // the RDMA provider reads the stream from where the login left it.
                let want = self.framer.bytes_needed(&self.rbuf).max(1);
                stream.read_buf(&mut (&mut self.rbuf).limit(want)).await
            } else {
                stream.read_buf(&mut self.rbuf).await
            };
            let n = read.map_err(|error| Error::Io {
                portal: self.portal.clone(),
                error,
            })?;
            if n == 0 {
                return Err(self.io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.counters.bytes_received(n);
        }
    }

    /// Cuts the next PDU off the receive buffer, if a whole one is there.
    pub(crate) fn decode(&mut self) -> Result<Option<Pdu>, Error> {
        let framing = sluice_probe::span(sluice_probe::Stage::Framing);
        let decoded = self.framer.decode(&mut self.rbuf);
        framing.close();
        match decoded {
            Ok(Some(pdu)) => {
                self.counters.pdu_received(pdu.opcode());
                self.trace_received(&pdu);
                Ok(Some(pdu))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                match &e {
                    FrameError::HeaderDigest { .. } | FrameError::HeaderDigestSkipped { .. } => {
                        self.counters.lock().header_digest_errors += 1;
                    }
                    FrameError::DataDigest { .. } => {
                        self.counters.lock().data_digest_errors += 1;
                    }
                    _ => {}
                }
                Err(Error::Frame(e))
            }
        }
    }

    /// Whether a PDU trace hook is installed.
    pub(crate) fn traced(&self) -> bool {
        self.trace.is_some()
    }

    /// Shows a received PDU to the trace hook and the `tracing` log.
    pub(crate) fn trace_received(&self, pdu: &Pdu) {
        if let Some(trace) = &self.trace {
            trace(Direction::Received, pdu);
        }
        tracing::trace!(portal = %self.portal, ?pdu, "received");
    }

    pub(crate) fn io(&self, error: std::io::Error) -> Error {
        // Over iSER in RDMA mode the link ends when the datamover does: its reason is the
        // error, not the closed link.
        let failure = match &self.link {
            Link::Iser(link) => link.failure.reason(),
            _ => None,
        };
        if let Some(why) = failure {
            return Error::Io {
                portal: self.portal.clone(),
                error: std::io::Error::other(why),
            };
        }
        Error::Io {
            portal: self.portal.clone(),
            error,
        }
    }
}

/// Counts and traces a PDU sent as a value (over iSER in RDMA mode).
fn note_sent(counters: &Counters, trace: Option<&PduTrace>, portal: &str, pdu: &Pdu) {
    counters.pdu_sent(pdu, value_len(pdu));
    if let Some(trace) = trace {
        trace(Direction::Sent, pdu);
    }
    tracing::trace!(portal, ?pdu, "sent");
}

/// What a PDU passed as a value is counted as: its length framed without digests (BHS and
/// padded data segment; an AHS, rare, is not counted).
fn value_len(pdu: &Pdu) -> usize {
    48 + pdu.data().len().next_multiple_of(4)
}

/// Resolves `portal` and connects to the first address that answers, each socket set up
/// with `tcp` before its SYN (the receive buffer fixes the window scale there).
async fn open_socket(portal: &str, tcp: &sluice_tcp::SocketOptions) -> std::io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host(portal).await? {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        tcp.apply(&socket)?;
        match socket.connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{portal} resolves to no address"),
        )
    }))
}
