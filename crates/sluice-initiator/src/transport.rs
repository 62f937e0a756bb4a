//! One TCP connection: the sans-IO framer on the receive side, a [`SendQueue`] on the send side
//! (data segments written from the caller's buffers, not copied), counters and the PDU trace on
//! both. Login and discovery use [`Transport::send`] and
//! [`Transport::recv`]; the full-feature driver uses the buffers directly so that it can read
//! and write at the same time.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use sluice_proto::framing::{encode, Digests, FrameError, Framer, LOGIN_MAX_DATA_SEGMENT};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_proto::text::Role;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::counters::Counters;
use crate::error::Error;
use crate::options::{ConnectOptions, Direction, PduTrace};
use crate::placement::Placing;
use crate::send_queue::SendQueue;

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 * 1024;
/// How often a connection whose socket is full looks at its send buffer: often enough to
/// follow slow start over a long path (a few round trips), rarely enough to cost nothing.
const TUNE_EVERY: Duration = Duration::from_millis(10);

/// A connected socket with its framing state.
pub(crate) struct Transport {
    /// `host:port` as connected, for messages.
    pub(crate) portal: String,
    pub(crate) stream: TcpStream,
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
    /// Over iSER: whether the bridge switched to RDMA mode, and why it ended the
    /// connection to the target, if it did.
    iser_failure: Option<crate::iser::BridgeSlot>,
}

impl Transport {
    /// Connects within the configured timeout, the socket set up as `opts.tcp` says.
    pub(crate) async fn connect(
        portal: &str,
        opts: &ConnectOptions,
        counters: Counters,
    ) -> Result<Self, Error> {
        // Over UDP the driver's stream is a loopback connection to the association, which
        // speaks UDP to the target (`sluice_udp::bridge`).
        let bridged;
        let iser_failure = opts
            .iser
            .as_ref()
            .map(|_| crate::iser::BridgeSlot::default());
        let stream_to = match (&opts.iser, opts.udp) {
            (Some(iser), _) => {
                let local = crate::iser::connect(
                    portal,
                    iser.clone(),
                    opts.iser_stats.clone(),
                    iser_failure.clone().unwrap_or_default(),
                    opts.connect_timeout,
                )
                .await
                .map_err(|error| Error::Connect {
                    portal: portal.to_owned(),
                    error,
                })?;
                bridged = local.to_string();
                &bridged
            }
            (None, None) => portal,
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
        let tuner = match opts.tcp.send_buffer {
            sluice_tcp::BufferPolicy::Grow { ceiling } => {
                Some(sluice_tcp::SendBufferTuner::new(ceiling))
            }
            _ => None,
        };
        Ok(Self {
            portal: portal.to_owned(),
            stream,
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
            iser_failure,
        })
    }

    /// The socket took less than we had to write: if the send buffer is growable and it is
    /// time to look again, asks TCP_INFO whether the buffer is what limits the connection
    /// and grows it (see `sluice_tcp::SendBufferTuner`). At most once per [`TUNE_EVERY`],
    /// so a busy connection pays one `getsockopt` per interval and an idle one nothing.
    pub(crate) fn socket_full(&mut self) {
        let Some(tuner) = &mut self.tuner else {
            return;
        };
        let now = Instant::now();
        if now < self.next_tune {
            return;
        }
        self.next_tune = now + TUNE_EVERY;
        let (Ok(info), Ok(current)) = (
            sluice_tcp::tcp_info(&self.stream),
            sluice_tcp::send_buffer_bytes(&self.stream),
        ) else {
            // A socket without TCP_INFO (never on Linux): nothing to tune by.
            self.tuner = None;
            return;
        };
        if let sluice_tcp::TunerDecision::Grow(bytes) = tuner.decide(&info, current) {
            let after = sluice_tcp::set_send_buffer(&self.stream, bytes).unwrap_or(current);
            tuner.applied(current, after);
            tracing::debug!(portal = %self.portal, before = current, after, "send buffer grown");
        }
    }

    /// Whether this connection reached iSER's RDMA mode (an iSER connection that fell back
    /// to iSCSI over TCP did not).
    pub(crate) fn iser_rdma_mode(&self) -> bool {
        self.iser_failure
            .as_ref()
            .is_some_and(crate::iser::BridgeSlot::rdma_mode)
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
        self.faults = hook.map(|h| {
            Box::new(h.connection(
                sluice_fault::Sender::Initiator,
                self.digests,
                params.initiator_max_recv_data_segment_length,
            ))
        });
    }

    /// Queues `pdu` to be sent.
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
        self.queue(pdu);
        self.flush().await
    }

    /// Writes everything queued, with vectored writes.
    pub(crate) async fn flush(&mut self) -> Result<(), Error> {
        let res = self.out.write_all(&mut self.stream).await;
        // After an error the connection is over: what was not written never will be.
        self.out.clear();
        res.map_err(|source| self.io(source))
    }

    /// Receives one PDU. A data digest error is counted and returned (the stream is still in
    /// step); other framing errors end the connection.
    pub(crate) async fn recv(&mut self) -> Result<Pdu, Error> {
        loop {
            if let Some(pdu) = self.decode()? {
                return Ok(pdu);
            }
            self.rbuf.reserve(READ_CHUNK);
            let n = self
                .stream
                .read_buf(&mut self.rbuf)
                .await
                .map_err(|error| Error::Io {
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
        // Over iSER the driver's socket is the bridge's; when the bridge ended it, its
        // reason is the error, not the closed loopback socket.
        if let Some(why) = self.iser_failure.as_ref().and_then(|f| f.reason()) {
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
