//! iSER on the target (RFC 7145) over the software RDMA provider: a listener whose
//! connections log in as iSCSI over TCP and, when the initiator asked for RDMAExtensions,
//! switch to RDMA mode on the same socket after the final Login Response.
//!
//! Each connection is served by the ordinary connection task (`connection.rs`, `ffp.rs`).
//! Its login runs on the socket like any TCP login, with `IserLogin`'s shim
//! (`sluice_proto::iser::login::TargetLoginShim`) rewriting each Login Request after it is
//! decoded and each Login Response before it is written. When the final Login Response says
//! RDMA mode, the connection task gives the socket to a datamover task started here, which
//! runs the software provider on it, answers the iSER Hello and carries PDUs over the queue
//! pair as `sluice_proto::iser::TargetDatamover` decides (Data-In as RDMA Writes, R2Ts as
//! RDMA Reads, everything else in Sends). Between the two tasks PDUs travel as values over
//! two bounded channels, the datamover seam of RFC 7143 and RFC 7145 at PDU level: nothing
//! is encoded or framed in between, and write data fetched by RDMA Reads reaches the
//! session core as the Read's own buffer. A login without RDMAExtensions=Yes simply goes on
//! as iSCSI over TCP in the same task. The TCP listeners never pass through here, so their
//! path is unchanged.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_proto::iser::login::{JoinedSession, LoginEnd, TargetLoginShim};
use sluice_proto::iser::{
    encode_send, IserMessage, MoverStats, TargetDatamover, TargetOp, ISER_VERSION,
};
use sluice_proto::pdu::{LoginRequest, LoginResponse, Pdu};
use sluice_rdma::{
    FaultPlan, PostError, QpConfig, RecvRing, RemoteAddr, STag, SoftRdma, StageError, Stager,
    WcOpcode, WcStatus,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::context::Context;
use crate::server::Target;

/// The port `sluice target --iser` listens on by default. iSER over an RNIC listens on
/// 3260 in the RDMA-CM port space, beside iSCSI's TCP 3260; the software provider runs over
/// TCP itself, so it needs a TCP port of its own, and takes the next one.
pub const DEFAULT_ISER_PORT: u16 = 3261;

/// Data segment bytes a Send to the target may carry (TargetRecvDataSegmentLength, RFC 7145
/// section 6.3.2): immediate data up to this goes in the command's Send; the target's
/// declared MaxRecvDataSegmentLength is capped to it so the initiator never sends more.
pub const TARGET_RECV_DSL: u32 = 16384;

/// Receive buffers posted per connection: a full command window (128 by default), each
/// command with its unsolicited Data-Out (at most `keys::MAX_UNSOLICITED_SENDS` more Sends:
/// the login caps FirstBurstLength at that many TargetRecvDataSegmentLengths), 640 Sends,
/// plus task management, NOP-Outs, text and logout, with room to spare. A Send that finds
/// none is final (the provider does not retry), so the depth is generous; the provider's
/// receive queue holds 1024.
const RECV_DEPTH: u32 = 1024;

/// The MaxOutstandingUnexpectedPDUs this target declares (RFC 7145 section 6.3.4): the
/// receive buffers left once a full command window (`queue_depth`, MaxCmdSN - ExpCmdSN + 1)
/// has one for each command and for each of its unsolicited Data-Out: 1024 - 128 x 5 = 384
/// by default. Unexpected PDUs are those outside that flow control: immediate requests
/// (task management, NOP-Out pings, text, logout) and NOP-Outs that answer nothing. Never
/// below 2, the key's minimum and iSCSI's own promise (RFC 7143 section 4.2.2.1: one
/// immediate task management and one other immediate request per connection).
pub fn declared_unexpected(queue_depth: u32) -> u32 {
    let expected = queue_depth.saturating_mul(1 + sluice_proto::iser::keys::MAX_UNSOLICITED_SENDS);
    RECV_DEPTH.saturating_sub(expected).max(2)
}

/// Header room in a receive buffer: the iSER header, the BHS, the largest AHS and padding.
const RECV_HEADROOM: u32 = 28 + 48 + 1020 + 4;

/// PDUs each channel between the connection task and the datamover task holds: a command
/// window's worth (128 by default) twice over, so that neither task waits on the other in
/// steady state.
pub(crate) const LINK_DEPTH: usize = 256;

/// PDUs for the connection task that the datamover keeps waiting while the channel to it is
/// full, at most. A compliant initiator cannot come near it: what it sends is bounded by the
/// command window and MaxOutstandingUnexpectedPDUs, which the receive ring is sized for
/// (`RECV_DEPTH`), and the Data-Out PDUs of completed RDMA Reads by the send queue. More
/// means an initiator sending past its flow control while the connection task is not
/// taking PDUs: the connection fails rather than queue without bound.
const MAX_WAITING_FOR_CORE: usize = 2 * RECV_DEPTH as usize;

/// How an iSER listener serves.
#[derive(Clone, Debug)]
pub struct IserServeOptions {
    /// How long to wait for the initiator's iSER Hello after the final Login Response.
    pub hello_timeout: Duration,
    /// Queue pair limits.
    pub qp: QpConfig,
    /// Faults to inject into every connection's RDMA traffic (tests).
    pub faults: FaultPlan,
    /// Answer a SCSI Response with Send with Invalidate of the task's STag.
    pub send_with_invalidate: bool,
    /// Test hook: the MaxOutstandingUnexpectedPDUs declared (RFC 7145 section 6.3.4) in
    /// place of what the receive buffers leave (`declared_unexpected`), so that a test can
    /// hold the initiator to a small limit.
    pub declare_max_unexpected: Option<u32>,
}

impl Default for IserServeOptions {
    fn default() -> Self {
        IserServeOptions {
            hello_timeout: Duration::from_secs(10),
            qp: QpConfig::default(),
            faults: FaultPlan::default(),
            send_with_invalidate: true,
            declare_max_unexpected: None,
        }
    }
}

/// What every iSER connection of a target did, summed (connections add theirs as they end).
#[derive(Debug, Default)]
pub struct IserCounters {
    /// Connections that switched to RDMA mode.
    pub rdma_connections: AtomicU64,
    /// Connections that logged in without RDMAExtensions and stayed on TCP.
    pub tcp_connections: AtomicU64,
    /// Connections ended by an iSER or RDMA error.
    pub errors: AtomicU64,
    /// Sends posted.
    pub sends: AtomicU64,
    /// Sends received.
    pub sends_received: AtomicU64,
    /// RDMA Writes posted, in place of Data-In PDUs.
    pub rdma_writes: AtomicU64,
    /// Bytes they carried.
    pub rdma_write_bytes: AtomicU64,
    /// RDMA Reads posted, in place of R2T and Data-Out PDUs.
    pub rdma_reads: AtomicU64,
    /// Bytes they fetched.
    pub rdma_read_bytes: AtomicU64,
    /// Unsolicited Data-Out PDUs received in Sends.
    pub unsolicited_data_outs: AtomicU64,
    /// Write data received in Sends (immediate data and unsolicited Data-Out).
    pub unsolicited_bytes: AtomicU64,
}

impl IserCounters {
    /// The totals so far.
    pub fn status(&self) -> crate::status::IserStatus {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::status::IserStatus {
            rdma_connections: l(&self.rdma_connections),
            tcp_connections: l(&self.tcp_connections),
            errors: l(&self.errors),
            sends: l(&self.sends),
            sends_received: l(&self.sends_received),
            rdma_writes: l(&self.rdma_writes),
            rdma_write_bytes: l(&self.rdma_write_bytes),
            rdma_reads: l(&self.rdma_reads),
            rdma_read_bytes: l(&self.rdma_read_bytes),
            unsolicited_data_outs: l(&self.unsolicited_data_outs),
            unsolicited_bytes: l(&self.unsolicited_bytes),
        }
    }

    /// Adds what a datamover did since `reported`, and remembers it as reported.
    fn add_since(&self, now: &MoverStats, reported: &mut MoverStats) {
        let d = MoverStats {
            sends: now.sends - reported.sends,
            sends_received: now.sends_received - reported.sends_received,
            rdma_writes: now.rdma_writes - reported.rdma_writes,
            rdma_write_bytes: now.rdma_write_bytes - reported.rdma_write_bytes,
            rdma_reads: now.rdma_reads - reported.rdma_reads,
            rdma_read_bytes: now.rdma_read_bytes - reported.rdma_read_bytes,
            unsolicited_bytes: now.unsolicited_bytes - reported.unsolicited_bytes,
            unsolicited_data_outs: now.unsolicited_data_outs - reported.unsolicited_data_outs,
        };
        self.add(&d);
        *reported = *now;
    }

    fn add(&self, s: &MoverStats) {
        self.sends.fetch_add(s.sends, Ordering::Relaxed);
        self.sends_received
            .fetch_add(s.sends_received, Ordering::Relaxed);
        self.rdma_writes.fetch_add(s.rdma_writes, Ordering::Relaxed);
        self.rdma_write_bytes
            .fetch_add(s.rdma_write_bytes, Ordering::Relaxed);
        self.rdma_reads.fetch_add(s.rdma_reads, Ordering::Relaxed);
        self.rdma_read_bytes
            .fetch_add(s.rdma_read_bytes, Ordering::Relaxed);
        self.unsolicited_data_outs
            .fetch_add(s.unsolicited_data_outs, Ordering::Relaxed);
        self.unsolicited_bytes
            .fetch_add(s.unsolicited_bytes, Ordering::Relaxed);
    }
}

/// Why an iSER connection ended early.
#[derive(Debug, thiserror::Error)]
enum IserFailure {
    #[error("login: {0}")]
    Login(String),
    #[error("no iSER Hello within {0:?} of the final Login Response")]
    HelloTimeout(Duration),
    #[error("iSER: {0}")]
    Mover(#[from] sluice_proto::iser::MoverError),
    #[error("RDMA: {0}")]
    Stage(#[from] StageError),
    #[error("RDMA {op:?} completed with {status:?}")]
    Completion { op: WcOpcode, status: WcStatus },
    #[error(
        "more than {0} PDUs from the initiator waiting for the connection task: the initiator \
         sends past its command window or MaxOutstandingUnexpectedPDUs"
    )]
    Flood(usize),
}

impl Target {
    /// Serves iSER on `listener` until [`Target::shutdown`]: each connection logs in over
    /// TCP and switches to RDMA mode on the software provider when the initiator offers
    /// RDMAExtensions=Yes; one that does not stays iSCSI over TCP (RFC 7145 section 5.1).
    /// Connections count against the same limit as TCP's.
    pub async fn serve_iser(&self, listener: TcpListener, opts: IserServeOptions) {
        let mut stop = self.stop_tx.subscribe();
        let local = listener.local_addr().ok();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = stop.changed() => return,
            };
            let Ok((stream, peer)) = accepted else {
                continue;
            };
            let ctx = Arc::clone(&self.ctx);
            let limit = ctx.config().limits.max_connections;
            if ctx.connections.fetch_add(1, Ordering::AcqRel) >= limit {
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
                warn!(%peer, limit, "connection limit reached; refusing an iSER connection");
                continue;
            }
            let _ = stream.set_nodelay(true);
            let local = stream.local_addr().ok().or(local).unwrap_or(peer);
            let shutdown = self.stop_tx.subscribe();
            let login = IserLogin::new(&ctx, opts.clone());
            tokio::spawn(async move {
                crate::connection::serve_iser(
                    Arc::clone(&ctx),
                    stream,
                    peer,
                    local,
                    shutdown,
                    login,
                )
                .await;
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// What the target's iSER connections did so far.
    pub fn iser_counters(&self) -> &IserCounters {
        &self.ctx.iser
    }
}

/// An iSER connection while it logs in: the shim that takes iSER's keys off the Login
/// Requests and adds its answers to the Login Responses, and what RDMA mode starts with.
pub(crate) struct IserLogin {
    shim: TargetLoginShim,
    opts: IserServeOptions,
}

impl IserLogin {
    pub(crate) fn new(ctx: &Context, opts: IserServeOptions) -> Self {
        let config = ctx.config();
        // A Send carries at most what the target's core takes in one PDU, so a smaller
        // configured MaxRecvDataSegmentLength is the receive length declared (and the unit
        // of the FirstBurstLength cap: each unsolicited Data-Out needs a receive buffer).
        let recv_dsl = TARGET_RECV_DSL.min(config.offer.max_recv_data_segment_length.max(512));
        let max_unexpected = opts
            .declare_max_unexpected
            .unwrap_or_else(|| declared_unexpected(config.offer.queue_depth));
        IserLogin {
            shim: TargetLoginShim::new(true, recv_dsl).with_max_unexpected(max_unexpected),
            opts,
        }
    }

    /// A Login Request just decoded, rewritten for the login core; `Err` says why the
    /// connection cannot go on (malformed iSER keys).
    pub(crate) fn request(&mut self, req: &mut LoginRequest) -> Result<(), String> {
        self.shim.handle_request(req).map_err(|e| e.to_string())
    }

    /// The login joins `session` (see `TargetLoginShim::joins_session`).
    pub(crate) fn joins_session(&mut self, session: JoinedSession) {
        self.shim.joins_session(session);
    }

    /// A Login Response from the login core, rewritten for the initiator before it is
    /// written; whether the login ended and how.
    pub(crate) fn response(&mut self, rsp: &mut LoginResponse) -> LoginEnd {
        self.shim.handle_response(rsp)
    }

    /// Starts RDMA mode on `tcp`, whose final Login Response (`end`) has been written: a
    /// datamover task runs the provider on the socket, exchanges the iSER Hello and moves
    /// PDUs between the queue pair and the connection task (`from_core`, `to_core`) until
    /// either ends the connection. A failure is counted and logged here; the connection task
    /// sees its channel close.
    pub(crate) fn start_rdma(
        self,
        ctx: Arc<Context>,
        tcp: TcpStream,
        end: LoginEnd,
        from_core: mpsc::Receiver<Pdu>,
        to_core: mpsc::Sender<Pdu>,
    ) -> tokio::task::JoinHandle<()> {
        ctx.iser.rdma_connections.fetch_add(1, Ordering::Relaxed);
        let peer = tcp.peer_addr().ok();
        // The datamover's log lines belong to the connection's session, as its task's do.
        let span = tracing::Span::current();
        let task = async move {
            let link = CoreLink {
                from_core,
                to_core: ToCore {
                    tx: to_core,
                    waiting: VecDeque::new(),
                },
            };
            if let Err(e) = rdma_mode(tcp, end, link, &self.opts, &ctx.iser).await {
                ctx.iser.errors.fetch_add(1, Ordering::Relaxed);
                warn!(?peer, "iSER connection closed: {e}");
            }
        };
        tokio::spawn(tracing::Instrument::instrument(task, span))
    }
}

/// The datamover task's two channels to the connection task.
struct CoreLink {
    from_core: mpsc::Receiver<Pdu>,
    to_core: ToCore,
}

/// PDUs for the connection task, handed over in order as its channel has room. The
/// datamover task never waits on that channel (the connection task may be waiting for room
/// on the other one): what does not fit waits here, bounded by `MAX_WAITING_FOR_CORE`.
struct ToCore {
    tx: mpsc::Sender<Pdu>,
    waiting: VecDeque<Pdu>,
}

impl ToCore {
    /// Hands `pdu` over, or queues it behind those waiting. `Ok(false)`: the connection
    /// task is gone.
    fn push(&mut self, pdu: Pdu) -> Result<bool, IserFailure> {
        if self.waiting.is_empty() {
            match self.tx.try_send(pdu) {
                Ok(()) => return Ok(true),
                Err(mpsc::error::TrySendError::Closed(_)) => return Ok(false),
                Err(mpsc::error::TrySendError::Full(pdu)) => self.waiting.push_back(pdu),
            }
        } else {
            self.waiting.push_back(pdu);
        }
        if self.waiting.len() > MAX_WAITING_FOR_CORE {
            return Err(IserFailure::Flood(MAX_WAITING_FOR_CORE));
        }
        Ok(true)
    }

    /// Waits for room, then hands over as much of what waits as fits; `false` when the
    /// connection task is gone. Cancel safe: a PDU leaves the queue only with a permit.
    async fn deliver(&mut self) -> bool {
        let Ok(permit) = self.tx.reserve().await else {
            return false;
        };
        if let Some(pdu) = self.waiting.pop_front() {
            permit.send(pdu);
        }
        while !self.waiting.is_empty() {
            match self.tx.try_reserve() {
                Ok(permit) => {
                    if let Some(pdu) = self.waiting.pop_front() {
                        permit.send(pdu);
                    }
                }
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => return false,
            }
        }
        true
    }
}

async fn rdma_mode(
    tcp: TcpStream,
    end: LoginEnd,
    link: CoreLink,
    opts: &IserServeOptions,
    counters: &IserCounters,
) -> Result<(), IserFailure> {
    let LoginEnd::Rdma {
        target_recv_dsl,
        target_core_max_recv,
        first_burst,
        peer_max_unexpected,
        ..
    } = end
    else {
        return Err(IserFailure::Login(
            "the login did not end in RDMA mode".into(),
        ));
    };
    let mut mover = TargetDatamover::new(
        target_recv_dsl,
        target_core_max_recv,
        opts.send_with_invalidate,
        first_burst,
    )
    .with_unexpected_limit(peer_max_unexpected);
    let mut reported = MoverStats::default();
    let result = rdma_loop(tcp, link, &mut mover, opts, counters, &mut reported).await;
    counters.add_since(&mover.stats, &mut reported);
    result
}

/// The queue pair's send side as the datamover task posts to it.
struct Poster<'a> {
    rdma: &'a SoftRdma,
    stager: Stager,
    /// RDMA Reads in flight: the datamover's id of each, by work request.
    reads: HashMap<u64, u64>,
    /// Sends encoded and not yet posted, back to back, and each one's range and STag to
    /// invalidate.
    buf: BytesMut,
    sends: Vec<(Range<usize>, Option<STag>)>,
}

impl Poster<'_> {
    /// Posts the work requests the datamover asked for, in order: consecutive Sends
    /// together (one lock of the queue pair and one wake-up of its task for the lot), RDMA
    /// Writes and Reads one at a time between them. An RDMA Write of Data-In must precede
    /// the Send of its SCSI Response (RFC 7145 section 7.3.5), which the order of posting
    /// keeps.
    fn post(&mut self, ops: &mut Vec<TargetOp>) -> Result<(), IserFailure> {
        for op in ops.drain(..) {
            match op {
                TargetOp::Send {
                    header,
                    pdu,
                    invalidate,
                } => {
                    let start = self.buf.len();
                    encode_send(&header, &pdu, &mut self.buf);
                    self.sends
                        .push((start..self.buf.len(), invalidate.map(STag)));
                }
                TargetOp::Write { stag, va, data } => {
                    self.post_sends()?;
                    self.stager.write(
                        self.rdma,
                        data,
                        RemoteAddr {
                            stag: STag(stag),
                            va,
                        },
                    )?;
                }
                TargetOp::Read { id, stag, va, len } => {
                    self.post_sends()?;
                    let wr = self.stager.read(
                        self.rdma,
                        len,
                        RemoteAddr {
                            stag: STag(stag),
                            va,
                        },
                    )?;
                    self.reads.insert(wr, id);
                }
            }
        }
        self.post_sends()
    }

    /// Posts the Sends encoded so far.
    fn post_sends(&mut self) -> Result<(), IserFailure> {
        match &self.sends[..] {
            [] => {}
            [(range, invalidate)] => {
                self.stager
                    .send(self.rdma, &[&self.buf[range.clone()]], *invalidate)?;
            }
            many => {
                let msgs: Vec<(&[u8], Option<STag>)> = many
                    .iter()
                    .map(|(range, invalidate)| (&self.buf[range.clone()], *invalidate))
                    .collect();
                // Room was checked before the PDUs were taken (`takes_more`): a Send that
                // does not fit is the error posting it alone would be.
                if self.stager.send_all_invalidating(self.rdma, &msgs)? < msgs.len() {
                    return Err(StageError::Post(PostError::QueueFull).into());
                }
            }
        }
        self.sends.clear();
        self.buf.clear();
        Ok(())
    }
}

/// Sends what the datamover held back for the initiator's MaxOutstandingUnexpectedPDUs, as
/// far as its limit and the send queue's room allow.
fn release_held(
    mover: &mut TargetDatamover,
    opts: &IserServeOptions,
    poster: &mut Poster<'_>,
    ops: &mut Vec<TargetOp>,
) -> Result<(), IserFailure> {
    if mover.held_back() == 0 {
        return Ok(());
    }
    let room = opts
        .qp
        .send_queue_depth
        .saturating_sub(poster.stager.outstanding())
        / MAX_OPS_PER_CORE_PDU;
    mover.release_held(room, ops)?;
    poster.post(ops)
}

/// PDUs the datamover may hold back for the initiator's MaxOutstandingUnexpectedPDUs before
/// the driver stops taking more from the connection task.
const MAX_HELD: usize = 64;

/// Work requests one PDU from the connection task can become: a Data-In carrying status is an
/// RDMA Write and a Send (`TargetDatamover::handle_core_pdu`); anything else is one.
const MAX_OPS_PER_CORE_PDU: usize = 2;

/// Whether the datamover takes another PDU from the connection task, with `pending` work
/// requests decided and not yet posted.
///
/// The send queue holds `send_queue_depth` work requests, and posting past that fails the
/// connection (QueueFull). One core PDU becomes at most `MAX_OPS_PER_CORE_PDU` work
/// requests, so the next is taken only while that much room is left; otherwise completions
/// make room first, and the connection task waits for room on its channel meanwhile. PDUs
/// held back for the initiator's MaxOutstandingUnexpectedPDUs (pings, and what queues behind
/// a held Async Message) are bounded: past `MAX_HELD` the connection task waits too.
fn takes_more(
    mover: &TargetDatamover,
    stager: &Stager,
    opts: &IserServeOptions,
    pending: usize,
) -> bool {
    mover.held_back() < MAX_HELD
        && stager.outstanding() + pending + MAX_OPS_PER_CORE_PDU <= opts.qp.send_queue_depth
}

async fn rdma_loop(
    tcp: TcpStream,
    mut link: CoreLink,
    mover: &mut TargetDatamover,
    opts: &IserServeOptions,
    counters: &IserCounters,
    reported: &mut MoverStats,
) -> Result<(), IserFailure> {
    let rdma = SoftRdma::spawn_gated(tcp, opts.qp, opts.faults.clone());
    let ring = RecvRing::post(&rdma, RECV_DEPTH, RECV_HEADROOM + TARGET_RECV_DSL)?;
    rdma.start();
    let mut poster = Poster {
        rdma: &rdma,
        stager: Stager::new(),
        reads: HashMap::new(),
        buf: BytesMut::new(),
        sends: Vec::new(),
    };

    // RFC 7145 section 5.1.3 (iWARP): the initiator's first Send is the iSER Hello; the
    // target answers with a HelloReply before any iSCSI PDU moves.
    let wc = tokio::time::timeout(opts.hello_timeout, rdma.next_completion())
        .await
        .map_err(|_| IserFailure::HelloTimeout(opts.hello_timeout))?;
    if wc.opcode != WcOpcode::Recv || wc.status != WcStatus::Success {
        return Err(IserFailure::Completion {
            op: wc.opcode,
            status: wc.status,
        });
    }
    let bytes = ring.take(&rdma, &wc)?;
    let hello = match IserMessage::parse(&bytes) {
        Ok((IserMessage::Hello(h), _)) => h,
        _ => return Err(IserFailure::Login("first Send is not an iSER Hello".into())),
    };
    let reply = hello.reply(ISER_VERSION, ISER_VERSION, opts.qp.ord);
    poster
        .stager
        .send(&rdma, &[&IserMessage::HelloReply(reply).emit()], None)?;
    if reply.reject {
        return Err(IserFailure::Login(format!(
            "iSER versions {}..={} not served",
            hello.min_version, hello.max_version
        )));
    }
    info!("iSER connection in RDMA mode");

    let mut ops = Vec::new();
    loop {
        counters.add_since(&mover.stats, reported);
        tokio::select! {
            delivered = link.to_core.deliver(), if !link.to_core.waiting.is_empty() => {
                if !delivered {
                    break;
                }
            }
            pdu = link.from_core.recv(), if takes_more(mover, &poster.stager, opts, 0) => {
                let Some(pdu) = pdu else { break };
                mover.handle_core_pdu(pdu, &mut ops)?;
                // The PDUs already waiting join this one's batch of work requests, as far as
                // the send queue's room goes.
                while takes_more(mover, &poster.stager, opts, ops.len()) {
                    let Ok(pdu) = link.from_core.try_recv() else { break };
                    mover.handle_core_pdu(pdu, &mut ops)?;
                }
                poster.post(&mut ops)?;
            }
            wc = rdma.next_completion() => {
                if wc.status != WcStatus::Success {
                    return Err(IserFailure::Completion { op: wc.opcode, status: wc.status });
                }
                if wc.opcode == WcOpcode::Recv {
                    let bytes = ring.take(&rdma, &wc)?;
                    let pdu = mover.handle_send(&bytes)?;
                    if !link.to_core.push(pdu)? {
                        break;
                    }
                    // Solicited data whose RDMA Read completed before this Send finished the
                    // task's unsolicited data was held (RDMA does not order the initiator's
                    // Sends against its Read Responses); it follows the Send to the core.
                    for pdu in mover.take_released() {
                        link.to_core.push(pdu)?;
                    }
                    release_held(mover, opts, &mut poster, &mut ops)?;
                    continue;
                }
                if let Some(done) = poster.stager.complete(&rdma, &wc) {
                    let data = done.map_err(|e| IserFailure::Stage(e.into()))?;
                    if let (Some(data), Some(id)) = (data, poster.reads.remove(&wc.wr_id)) {
                        // Data-Out PDUs whose data is the Read's own buffer, to the core as
                        // they are.
                        for pdu in mover.handle_read_done(id, data)? {
                            link.to_core.push(pdu)?;
                        }
                    }
                }
                // A completion made room in the send queue for what is held back.
                release_held(mover, opts, &mut poster, &mut ops)?;
            }
        }
    }
    // The connection task ended (logout, or it closed the connection): let the last Sends
    // (the Logout Response) reach the wire before the endpoint goes.
    let drain = async {
        while poster.stager.outstanding() > 0 {
            let wc = rdma.next_completion().await;
            if poster.stager.complete(&rdma, &wc).is_none() && wc.status != WcStatus::Success {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_proto::iser::IserHeader;
    use sluice_proto::pdu::NopIn;
    use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
    use sluice_rdma::{Access, VaMode};

    fn nop_in(itt: u32) -> Pdu {
        Pdu::NopIn(NopIn {
            lun: Lun::default(),
            itt: Itt(itt),
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum(7),
            exp_cmd_sn: SeqNum(1),
            max_cmd_sn: SeqNum(128),
            data: bytes::Bytes::new(),
        })
    }

    fn itt_of(pdu: &Pdu) -> u32 {
        pdu.itt().0
    }

    /// PDUs for the connection task go over in order: what the channel has no room for
    /// waits and follows as room appears; a connection task that is gone stops the
    /// datamover; past `MAX_WAITING_FOR_CORE` waiting, the connection fails instead of
    /// queueing without bound.
    #[tokio::test]
    async fn pdus_for_the_core_keep_their_order_and_their_bound() {
        let (tx, mut rx) = mpsc::channel(2);
        let mut to_core = ToCore {
            tx,
            waiting: VecDeque::new(),
        };
        for itt in 0..5 {
            assert!(to_core.push(nop_in(itt)).unwrap());
        }
        assert_eq!(to_core.waiting.len(), 3);
        let mut got = Vec::new();
        while got.len() < 5 {
            while let Ok(pdu) = rx.try_recv() {
                got.push(itt_of(&pdu));
            }
            if !to_core.waiting.is_empty() {
                assert!(to_core.deliver().await);
            }
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);

        for itt in 0..2 + MAX_WAITING_FOR_CORE as u32 {
            assert!(to_core.push(nop_in(itt)).unwrap());
        }
        assert!(matches!(
            to_core.push(nop_in(0)),
            Err(IserFailure::Flood(MAX_WAITING_FOR_CORE))
        ));

        drop(rx);
        assert!(!to_core.deliver().await, "the connection task is gone");
        to_core.waiting.clear();
        assert!(!to_core.push(nop_in(0)).unwrap());
    }

    /// The work requests of one batch reach the initiator in the order decided: Sends posted
    /// together, each Send with Invalidate invalidating its own STag, and an RDMA Write
    /// between two Sends placed before the Send after it arrives.
    #[tokio::test]
    async fn a_batch_posts_in_order_with_each_sends_invalidate() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let target = SoftRdma::spawn(accepted.unwrap().0, QpConfig::default());
        let initiator = SoftRdma::spawn(client.unwrap(), QpConfig::default());
        let ring = RecvRing::post(&initiator, 8, 4096).unwrap();
        let access = Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let written = initiator.register(64, access, VaMode::ZeroBased).unwrap();
        let invalidated = initiator.register(64, access, VaMode::ZeroBased).unwrap();

        let send = |itt, invalidate| TargetOp::Send {
            header: IserHeader::default(),
            pdu: nop_in(itt),
            invalidate,
        };
        let mut ops = vec![
            send(1, None),
            send(2, Some(invalidated.stag.0)),
            TargetOp::Write {
                stag: written.stag.0,
                va: 0,
                data: bytes::Bytes::from_static(b"read data"),
            },
            send(3, None),
            send(4, None),
        ];
        let mut poster = Poster {
            rdma: &target,
            stager: Stager::new(),
            reads: HashMap::new(),
            buf: BytesMut::new(),
            sends: Vec::new(),
        };
        poster.post(&mut ops).unwrap();
        assert!(ops.is_empty());
        assert_eq!(poster.stager.outstanding(), 5);

        let mut received = Vec::new();
        while received.len() < 4 {
            tokio::select! {
                wc = target.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    assert!(poster.stager.complete(&target, &wc).is_some());
                }
                wc = initiator.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    let bytes = ring.take(&initiator, &wc).unwrap();
                    let placed = initiator.contents(written.stag, 0, 9).unwrap();
                    if received.len() >= 2 {
                        assert_eq!(placed, b"read data", "the Write lands before the Sends after it");
                    }
                    received.push((bytes, wc.invalidated));
                }
            }
        }
        let want: Vec<(Vec<u8>, Option<STag>)> =
            [(1, None), (2, Some(invalidated.stag)), (3, None), (4, None)]
                .into_iter()
                .map(|(itt, invalidate)| {
                    let mut b = BytesMut::new();
                    encode_send(&IserHeader::default(), &nop_in(itt), &mut b);
                    (b.to_vec(), invalidate)
                })
                .collect();
        assert_eq!(received, want);
    }

    #[test]
    fn the_declared_limit_is_what_the_receives_leave() {
        // 1,024 receives, 128 commands each with up to four unsolicited Data-Out Sends.
        assert_eq!(declared_unexpected(128), 384);
        assert_eq!(declared_unexpected(1), 1019);
        // A window the ring cannot hold: the key's minimum, never 0 (which means no limit).
        assert_eq!(declared_unexpected(1000), 2);
        assert_eq!(declared_unexpected(u32::MAX), 2);
    }
}
