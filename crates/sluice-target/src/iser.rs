//! iSER on the target (RFC 7145) over the software RDMA provider: a listener whose
//! connections log in as iSCSI over TCP and, when the initiator asked for RDMAExtensions,
//! switch to RDMA mode on the same socket after the final Login Response.
//!
//! The datamover sits below the session, at PDU level: the connection task (`connection.rs`,
//! `ffp.rs`) serves the connection exactly as it serves TCP, over an in-memory stream of
//! PDUs, and this driver carries those PDUs over the queue pair as
//! `sluice_proto::iser::TargetDatamover` decides (Data-In as RDMA Writes, R2Ts as RDMA
//! Reads, everything else in Sends). The TCP listeners never pass through here, so their
//! path is unchanged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use sluice_proto::framing::{encode, encode_chunks, Digests, Framer, LOGIN_MAX_DATA_SEGMENT};
use sluice_proto::iser::login::{LoginEnd, TargetLoginShim};
use sluice_proto::iser::{
    encode_send, IserMessage, MoverStats, TargetDatamover, TargetOp, ISER_VERSION,
};
use sluice_proto::pdu::Pdu;
use sluice_rdma::{
    FaultPlan, QpConfig, RecvRing, RemoteAddr, STag, SoftRdma, Stager, WcOpcode, WcStatus,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
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

/// Bytes the in-memory stream between this driver and the connection task buffers each way.
const PIPE_BYTES: usize = 4 << 20;

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
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("login: {0}")]
    Login(String),
    #[error("no iSER Hello within {0:?} of the final Login Response")]
    HelloTimeout(Duration),
    #[error("iSER: {0}")]
    Mover(#[from] sluice_proto::iser::MoverError),
    #[error("RDMA: {0}")]
    Stage(#[from] sluice_rdma::StageError),
    #[error("RDMA {op:?} completed with {status:?}")]
    Completion { op: WcOpcode, status: WcStatus },
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
            let opts = opts.clone();
            tokio::spawn(async move {
                serve_connection(Arc::clone(&ctx), stream, peer, local, shutdown, opts).await;
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
            });
        }
    }

    /// What the target's iSER connections did so far.
    pub fn iser_counters(&self) -> &IserCounters {
        &self.ctx.iser
    }
}

async fn serve_connection(
    ctx: Arc<Context>,
    tcp: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
    opts: IserServeOptions,
) {
    let (core_side, ours) = tokio::io::duplex(PIPE_BYTES);
    let (rd, wr) = tokio::io::split(core_side);
    let core = tokio::spawn(crate::connection::serve(
        Arc::clone(&ctx),
        Box::new(rd),
        Box::new(wr),
        peer,
        local,
        shutdown,
    ));
    if let Err(e) = bridge(&ctx, tcp, ours, &opts).await {
        ctx.iser.errors.fetch_add(1, Ordering::Relaxed);
        warn!(%peer, "iSER connection closed: {e}");
    }
    let _ = core.await;
}

/// Reads one PDU from `rd` without reading a byte past it (the bytes after the final Login
/// Response belong to the RDMA endpoint).
async fn read_login_pdu<R: AsyncRead + Unpin>(rd: &mut R) -> Result<Option<Pdu>, IserFailure> {
    let mut bhs = [0u8; 48];
    match rd.read_exact(&mut bhs).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let ahs = usize::from(bhs[4]) * 4;
    let dsl = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]);
    // RFC 7143 section 6.1: login PDUs carry at most 8192 bytes of data segment.
    if dsl > LOGIN_MAX_DATA_SEGMENT {
        return Err(IserFailure::Login(format!(
            "login PDU with a {dsl}-byte data segment"
        )));
    }
    let rest = ahs + (dsl as usize).next_multiple_of(4);
    let mut buf = BytesMut::with_capacity(48 + rest);
    buf.extend_from_slice(&bhs);
    buf.resize(48 + rest, 0);
    rd.read_exact(&mut buf[48..]).await?;
    let mut framer = Framer::new(LOGIN_MAX_DATA_SEGMENT);
    match framer.decode(&mut buf) {
        Ok(Some(pdu)) => Ok(Some(pdu)),
        Ok(None) => Err(IserFailure::Login("truncated login PDU".into())),
        Err(e) => Err(IserFailure::Login(e.to_string())),
    }
}

/// PDUs from the connection task, framed off the in-memory stream.
struct CoreReader<R> {
    rd: R,
    framer: Framer,
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> CoreReader<R> {
    /// The next PDU; `None` once the connection task closed its side.
    async fn next(&mut self) -> Result<Option<Pdu>, IserFailure> {
        loop {
            match self.framer.decode(&mut self.buf) {
                Ok(Some(pdu)) => return Ok(Some(pdu)),
                Ok(None) => {}
                Err(e) => return Err(IserFailure::Login(e.to_string())),
            }
            self.buf.reserve(64 << 10);
            if self.rd.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }
}

/// Writes PDUs to the connection task from a queue, so that the bridge never waits on the
/// task while the task waits on the bridge.
fn core_writer<W: AsyncWrite + Unpin + Send + 'static>(mut wr: W) -> mpsc::UnboundedSender<Pdu> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Pdu>();
    tokio::spawn(async move {
        let mut out = BytesMut::new();
        while let Some(pdu) = rx.recv().await {
            let mut batch = vec![pdu];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
            }
            if write_pdus(&mut wr, batch, &mut out).await.is_err() {
                return;
            }
        }
        let _ = wr.shutdown().await;
    });
    tx
}

/// Data segments at least this long are written from the PDU's own buffer (write data,
/// straight out of the RDMA Read's sink) instead of being copied into the batch.
const ZERO_COPY_MIN: usize = 16 << 10;

/// Writes `pdus`: long data segments from their own `Bytes`, the rest batched in `out`
/// (`encode_chunks`).
async fn write_pdus<W: AsyncWrite + Unpin>(
    wr: &mut W,
    pdus: Vec<Pdu>,
    out: &mut BytesMut,
) -> std::io::Result<()> {
    for chunk in encode_chunks(pdus, Digests::NONE, ZERO_COPY_MIN, out) {
        wr.write_all(&chunk).await?;
    }
    Ok(())
}

async fn bridge(
    ctx: &Context,
    mut tcp: TcpStream,
    ours: tokio::io::DuplexStream,
    opts: &IserServeOptions,
) -> Result<(), IserFailure> {
    let (core_rd, mut core_wr) = tokio::io::split(ours);
    // The core's framer bounds nothing here: what it sends is trusted; its Data-In can be
    // as long as the initiator's MaxRecvDataSegmentLength.
    let mut core = CoreReader {
        rd: core_rd,
        framer: Framer::new(0x00ff_ffff),
        buf: BytesMut::new(),
    };
    // A Send carries at most what the target's core takes in one PDU, so a smaller configured
    // MaxRecvDataSegmentLength is the receive length declared (and the unit of the
    // FirstBurstLength cap: each unsolicited Data-Out needs a receive buffer).
    let recv_dsl = TARGET_RECV_DSL.min(ctx.config().offer.max_recv_data_segment_length.max(512));
    let max_unexpected = opts
        .declare_max_unexpected
        .unwrap_or_else(|| declared_unexpected(ctx.config().offer.queue_depth));
    let mut shim = TargetLoginShim::new(true, recv_dsl).with_max_unexpected(max_unexpected);
    // The connection task times the login out on its side; this side stops waiting then too
    // (an initiator that connects and says nothing must not hold the bridge).
    let login_timeout = ctx.config().limits.login_timeout;
    let relay = relay_login(&mut tcp, &mut core, &mut core_wr, &mut shim);
    let end = match tokio::time::timeout(login_timeout, relay).await {
        Ok(Ok(Some(end))) => end,
        Ok(Ok(None)) | Err(_) => return Ok(()),
        Ok(Err(e)) => return Err(e),
    };
    match end {
        LoginEnd::Rdma {
            target_recv_dsl,
            target_core_max_recv,
            first_burst,
            peer_max_unexpected,
            ..
        } => {
            ctx.iser.rdma_connections.fetch_add(1, Ordering::Relaxed);
            let core_tx = core_writer(core_wr);
            let mut mover = TargetDatamover::new(
                target_recv_dsl,
                target_core_max_recv,
                opts.send_with_invalidate,
                first_burst,
            )
            .with_unexpected_limit(peer_max_unexpected);
            rdma_mode(tcp, &mut core, &core_tx, &mut mover, opts, &ctx.iser).await
        }
        LoginEnd::Tcp => {
            // RFC 7145 section 5.1: without RDMAExtensions=Yes the connection is plain
            // iSCSI; relay it as bytes (the login is over, digests and all are the core's).
            ctx.iser.tcp_connections.fetch_add(1, Ordering::Relaxed);
            let leftover = std::mem::take(&mut core.buf);
            tcp.write_all(&leftover).await?;
            let mut ours = core.rd.unsplit(core_wr);
            let _ = tokio::io::copy_bidirectional(&mut tcp, &mut ours).await;
            Ok(())
        }
        LoginEnd::Failed | LoginEnd::Pending => Ok(()),
    }
}

/// Carries the login between the socket and the connection task, a request and its response
/// at a time, through the shim; `None` when either side closed.
async fn relay_login<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    tcp: &mut TcpStream,
    core: &mut CoreReader<R>,
    core_wr: &mut W,
    shim: &mut TargetLoginShim,
) -> Result<Option<LoginEnd>, IserFailure> {
    loop {
        let Some(mut pdu) = read_login_pdu(tcp).await? else {
            return Ok(None);
        };
        if let Pdu::LoginRequest(req) = &mut pdu {
            shim.handle_request(req)
                .map_err(|e| IserFailure::Login(e.to_string()))?;
        }
        let mut out = BytesMut::new();
        encode(&pdu, Digests::NONE, &mut out);
        core_wr.write_all(&out).await?;
        let Some(mut rsp) = core.next().await? else {
            return Ok(None);
        };
        let end = match &mut rsp {
            Pdu::LoginResponse(r) => shim.handle_response(r),
            _ => LoginEnd::Pending,
        };
        out.clear();
        encode(&rsp, Digests::NONE, &mut out);
        tcp.write_all(&out).await?;
        if end != LoginEnd::Pending {
            return Ok(Some(end));
        }
    }
}

async fn rdma_mode<R: AsyncRead + Unpin>(
    tcp: TcpStream,
    core: &mut CoreReader<R>,
    core_tx: &mpsc::UnboundedSender<Pdu>,
    mover: &mut TargetDatamover,
    opts: &IserServeOptions,
    counters: &IserCounters,
) -> Result<(), IserFailure> {
    let mut reported = MoverStats::default();
    let result = rdma_loop(tcp, core, core_tx, mover, opts, counters, &mut reported).await;
    counters.add_since(&mover.stats, &mut reported);
    result
}

/// Posts the work requests the datamover asked for.
fn post_ops(
    rdma: &SoftRdma,
    stager: &mut Stager,
    reads: &mut std::collections::HashMap<u64, u64>,
    ops: &mut Vec<TargetOp>,
    buf: &mut BytesMut,
) -> Result<(), IserFailure> {
    for op in ops.drain(..) {
        match op {
            TargetOp::Send {
                header,
                pdu,
                invalidate,
            } => {
                buf.clear();
                encode_send(&header, &pdu, buf);
                stager.send(rdma, &[&buf[..]], invalidate.map(STag))?;
            }
            TargetOp::Write { stag, va, data } => {
                stager.write(
                    rdma,
                    data,
                    RemoteAddr {
                        stag: STag(stag),
                        va,
                    },
                )?;
            }
            TargetOp::Read { id, stag, va, len } => {
                let wr = stager.read(
                    rdma,
                    len,
                    RemoteAddr {
                        stag: STag(stag),
                        va,
                    },
                )?;
                reads.insert(wr, id);
            }
        }
    }
    Ok(())
}

/// Sends what the datamover held back for the initiator's MaxOutstandingUnexpectedPDUs, as
/// far as its limit and the send queue's room allow.
#[allow(clippy::too_many_arguments)]
fn release_held(
    mover: &mut TargetDatamover,
    opts: &IserServeOptions,
    rdma: &SoftRdma,
    stager: &mut Stager,
    reads: &mut std::collections::HashMap<u64, u64>,
    ops: &mut Vec<TargetOp>,
    buf: &mut BytesMut,
) -> Result<(), IserFailure> {
    if mover.held_back() == 0 {
        return Ok(());
    }
    let room = opts
        .qp
        .send_queue_depth
        .saturating_sub(stager.outstanding())
        / MAX_OPS_PER_CORE_PDU;
    mover.release_held(room, ops)?;
    post_ops(rdma, stager, reads, ops, buf)
}

/// PDUs the datamover may hold back for the initiator's MaxOutstandingUnexpectedPDUs before
/// the driver stops taking more from the connection task.
const MAX_HELD: usize = 64;

/// Work requests one PDU from the connection task can become: a Data-In carrying status is an
/// RDMA Write and a Send (`TargetDatamover::handle_core_pdu`); anything else is one.
const MAX_OPS_PER_CORE_PDU: usize = 2;

async fn rdma_loop<R: AsyncRead + Unpin>(
    tcp: TcpStream,
    core: &mut CoreReader<R>,
    core_tx: &mpsc::UnboundedSender<Pdu>,
    mover: &mut TargetDatamover,
    opts: &IserServeOptions,
    counters: &IserCounters,
    reported: &mut MoverStats,
) -> Result<(), IserFailure> {
    let rdma = SoftRdma::spawn_gated(tcp, opts.qp, opts.faults.clone());
    let ring = RecvRing::post(&rdma, RECV_DEPTH, RECV_HEADROOM + TARGET_RECV_DSL)?;
    rdma.start();
    let mut stager = Stager::new();

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
    stager.send(&rdma, &[&IserMessage::HelloReply(reply).emit()], None)?;
    if reply.reject {
        return Err(IserFailure::Login(format!(
            "iSER versions {}..={} not served",
            hello.min_version, hello.max_version
        )));
    }
    info!("iSER connection in RDMA mode");

    let mut reads = std::collections::HashMap::new();
    let mut ops = Vec::new();
    let mut buf = BytesMut::new();
    loop {
        counters.add_since(&mover.stats, reported);
        tokio::select! {
            // The send queue holds `send_queue_depth` work requests, and posting past that
            // fails the connection (QueueFull). One core PDU becomes at most
            // `MAX_OPS_PER_CORE_PDU` work requests, so the next is taken only while that much
            // room is left; otherwise the completions below make room first, and the
            // connection task waits on its PDU stream meanwhile.
            // PDUs held back for the initiator's MaxOutstandingUnexpectedPDUs (pings, and
            // what queues behind a held Async Message) are bounded: past `MAX_HELD` the
            // connection task waits on its PDU stream.
            pdu = core.next(), if mover.held_back() < MAX_HELD
                && stager.outstanding() + MAX_OPS_PER_CORE_PDU <= opts.qp.send_queue_depth => {
                let Some(pdu) = pdu? else { break };
                mover.handle_core_pdu(pdu, &mut ops)?;
                post_ops(&rdma, &mut stager, &mut reads, &mut ops, &mut buf)?;
            }
            wc = rdma.next_completion() => {
                if wc.status != WcStatus::Success {
                    return Err(IserFailure::Completion { op: wc.opcode, status: wc.status });
                }
                if wc.opcode == WcOpcode::Recv {
                    let bytes = ring.take(&rdma, &wc)?;
                    let pdu = mover.handle_send(&bytes)?;
                    if core_tx.send(pdu).is_err() {
                        break;
                    }
                    release_held(mover, opts, &rdma, &mut stager, &mut reads, &mut ops, &mut buf)?;
                    continue;
                }
                if let Some(done) = stager.complete(&rdma, &wc) {
                    let data = done.map_err(|e| IserFailure::Stage(e.into()))?;
                    if let (Some(data), Some(id)) = (data, reads.remove(&wc.wr_id)) {
                        for pdu in mover.handle_read_done(id, data)? {
                            let _ = core_tx.send(pdu);
                        }
                    }
                }
                // A completion made room in the send queue for what is held back.
                release_held(mover, opts, &rdma, &mut stager, &mut reads, &mut ops, &mut buf)?;
            }
        }
    }
    // The connection task ended (logout, or it closed the connection): let the last Sends
    // (the Logout Response) reach the wire before the endpoint goes.
    let drain = async {
        while stager.outstanding() > 0 {
            let wc = rdma.next_completion().await;
            if stager.complete(&rdma, &wc).is_none() && wc.status != WcStatus::Success {
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
