//! iSER on the initiator (RFC 7145) over the software RDMA provider.
//!
//! The initiator's driver speaks PDUs over a TCP stream; rather than teach it a second kind
//! of stream (the same choice the UDP transport made), an iSER connection gives it a
//! loopback TCP connection carrying whole PDUs, and talks iSER to the target: the login
//! passes through in TCP streaming mode with iSER's keys added
//! (`sluice_proto::iser::login::InitiatorLoginShim`); after the final Login Response the
//! same socket to the target switches to RDMA mode, the iSER Hello is exchanged, and from
//! then on `sluice_proto::iser::InitiatorDatamover` decides what each PDU becomes. The
//! extra loopback hop is iSER's cost here, never the TCP path's.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, encode_chunks, Digests, Framer, LOGIN_MAX_DATA_SEGMENT};
use sluice_proto::iser::login::{InitiatorLoginShim, LoginEnd};
use sluice_proto::iser::{
    encode_send, BufferAdvertisement, Hello, InitiatorDatamover, InitiatorMoverStats, InitiatorOut,
    IserMessage, Regions, ISER_VERSION,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_rdma::{
    Access, BufferPool, FaultPlan, PostError, QpConfig, RecvRing, STag, SoftRdma, StageError,
    Stager, VaMode, WcOpcode, WcStatus,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Data segment bytes a Send to the initiator may carry (InitiatorRecvDataSegmentLength,
/// RFC 7145 section 6.3.3; its default). Only control-type PDUs arrive in Sends (SCSI
/// Responses with sense data, NOP-Ins, text, Async Messages); read data is RDMA-Written.
pub const INITIATOR_RECV_DSL: u32 = 8192;

/// Receive buffers kept for the target's unexpected PDUs (NOP-In pings, Async Messages:
/// what no request of this initiator asked for), declared to the target as
/// MaxOutstandingUnexpectedPDUs (RFC 7145 section 6.3.4). A target keeps one ping
/// outstanding at a time, or a few; 64 is room to spare.
pub const MAX_UNEXPECTED: u32 = 64;

/// Receive buffers for what the initiator's own requests ask for: a SCSI Response per
/// command in flight (sluice's target grants a window of 128 by default) and the answers to
/// task management, text, logout and pings.
const RESPONSE_RECVS: u32 = 448;

/// Receive buffers posted: the responses plus the unexpected PDUs declared.
const RECV_DEPTH: u32 = RESPONSE_RECVS + MAX_UNEXPECTED;

/// Header room in a receive buffer: the iSER header, the BHS, the largest AHS and padding.
const RECV_HEADROOM: u32 = 28 + 48 + 1020 + 4;

/// How long the bridge waits for the driver to connect to it.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an iSER connection is made.
#[derive(Clone, Debug)]
pub struct IserOptions {
    /// When the target does not answer RDMAExtensions=Yes: go on as iSCSI over TCP on the
    /// same connection (`true`) or fail the login with the target's answer (`false`).
    pub fallback_to_tcp: bool,
    /// How long to wait for the target's HelloReply.
    pub hello_timeout: Duration,
    /// Queue pair limits.
    pub qp: QpConfig,
    /// Test hook: faults injected into this side's RDMA traffic.
    pub faults: FaultPlan,
    /// Test hook: added to the base offset of every read buffer advertised, so that the
    /// target's RDMA Writes fall outside the region (a remote access error).
    pub advertise_skew: u64,
    /// Test hook: receive buffers posted in all, the HelloReply's included; once they are
    /// used none is posted again, so the target's next Send finds no receive (receiver not
    /// ready).
    pub recv_budget: Option<u32>,
}

impl Default for IserOptions {
    fn default() -> Self {
        IserOptions {
            fallback_to_tcp: false,
            hello_timeout: Duration::from_secs(10),
            qp: QpConfig::default(),
            faults: FaultPlan::default(),
            advertise_skew: 0,
            recv_budget: None,
        }
    }
}

/// What the bridge tells the driver: whether the connection switched to RDMA mode, and why
/// it ended the connection, if it did (kept for the driver's error).
#[derive(Clone, Debug, Default)]
pub(crate) struct BridgeSlot {
    failure: Arc<Mutex<Option<String>>>,
    rdma_mode: Arc<AtomicBool>,
}

impl BridgeSlot {
    fn set(&self, why: String) {
        tracing::warn!("iSER: {why}");
        if let Ok(mut s) = self.failure.lock() {
            s.get_or_insert(why);
        }
    }

    /// The reason, once the bridge failed.
    pub(crate) fn reason(&self) -> Option<String> {
        self.failure.lock().ok().and_then(|s| s.clone())
    }

    /// Whether the connection is in RDMA mode (set before the final Login Response reaches
    /// the driver; a connection that fell back to iSCSI over TCP never is).
    pub(crate) fn rdma_mode(&self) -> bool {
        self.rdma_mode.load(Ordering::Acquire)
    }
}

/// The session parameters the driver's session core runs a connection in RDMA mode with.
///
/// Over iSER, Data-Out answering an R2T never reaches the wire: the target fetches that data
/// with RDMA Reads from the buffer the command advertised (RFC 7145 section 7.3), and the
/// datamover asks the core for it with R2Ts of its own. Only immediate and unsolicited data
/// travel in Sends, bounded by TargetRecvDataSegmentLength (section 6.3.2), which the core
/// sees as the target's MaxRecvDataSegmentLength. When the session sends neither
/// (ImmediateData=No, InitialR2T=Yes), that bound limits nothing on the wire, and the core
/// may hand the datamover each burst as one Data-Out PDU instead of one per 16 KiB.
pub(crate) fn rdma_mode_params(params: &mut SessionParams) {
    if !params.immediate_data && params.initial_r2t {
        params.target_max_recv_data_segment_length = params
            .target_max_recv_data_segment_length
            .max(params.max_burst_length);
    }
}

/// What the bridges of one session counted, live (each connection keeps its own slot up to
/// date; a snapshot sums them).
#[derive(Clone, Debug, Default)]
pub struct IserStats(Arc<Mutex<Vec<InitiatorMoverStats>>>);

impl IserStats {
    /// The totals so far.
    pub fn snapshot(&self) -> InitiatorMoverStats {
        let slots = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        let mut t = InitiatorMoverStats::default();
        for s in &slots {
            t.sends += s.sends;
            t.sends_received += s.sends_received;
            t.read_buffers += s.read_buffers;
            t.placed_bytes += s.placed_bytes;
            t.write_buffers += s.write_buffers;
            t.readable_bytes += s.readable_bytes;
            t.unsolicited_bytes += s.unsolicited_bytes;
            t.unsolicited_data_outs += s.unsolicited_data_outs;
            t.held_back += s.held_back;
            t.peak_unexpected = t.peak_unexpected.max(s.peak_unexpected);
        }
        t
    }

    fn slot(&self) -> usize {
        self.0
            .lock()
            .map(|mut s| {
                s.push(InitiatorMoverStats::default());
                s.len() - 1
            })
            .unwrap_or(usize::MAX)
    }

    fn update(&self, slot: usize, now: &InitiatorMoverStats) {
        if let Ok(mut s) = self.0.lock() {
            if let Some(x) = s.get_mut(slot) {
                *x = *now;
            }
        }
    }
}

/// Connects to the target at `portal` and returns the loopback address the caller's driver
/// connects to; the bridge lives as long as that connection. Failures after this returns are
/// written to `slot`.
pub(crate) async fn connect(
    portal: &str,
    opts: IserOptions,
    stats: IserStats,
    slot: BridgeSlot,
    connect_timeout: Duration,
) -> std::io::Result<SocketAddr> {
    let tcp = tokio::time::timeout(connect_timeout, TcpStream::connect(portal))
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "TCP connect timed out")
        })??;
    let _ = tcp.set_nodelay(true);
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        let accepted = tokio::time::timeout(ACCEPT_TIMEOUT, listener.accept()).await;
        let Ok(Ok((driver, _))) = accepted else {
            return;
        };
        drop(listener);
        let _ = driver.set_nodelay(true);
        // A second descriptor of the driver's socket keeps it open until the reason is
        // recorded: the driver must find the reason when it sees the connection end.
        let Ok((driver, keep)) = driver
            .into_std()
            .and_then(|s| Ok((s.try_clone()?, s)))
            .and_then(|(s, keep)| Ok((TcpStream::from_std(s)?, keep)))
        else {
            return;
        };
        if let Err(why) = bridge(driver, tcp, &opts, &stats, &slot).await {
            slot.set(why);
        }
        drop(keep);
    });
    Ok(local)
}

/// Reads one PDU from `rd` without reading a byte past it.
async fn read_login_pdu<R: AsyncRead + Unpin>(rd: &mut R) -> Result<Option<Pdu>, String> {
    let mut bhs = [0u8; 48];
    match rd.read_exact(&mut bhs).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let ahs = usize::from(bhs[4]) * 4;
    let dsl = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]);
    // RFC 7143 section 6.1: login PDUs carry at most 8192 bytes of data segment.
    if dsl > LOGIN_MAX_DATA_SEGMENT {
        return Err(format!("login PDU with a {dsl}-byte data segment"));
    }
    let mut buf = BytesMut::zeroed(48 + ahs + (dsl as usize).next_multiple_of(4));
    buf[..48].copy_from_slice(&bhs);
    rd.read_exact(&mut buf[48..])
        .await
        .map_err(|e| e.to_string())?;
    match Framer::new(LOGIN_MAX_DATA_SEGMENT).decode(&mut buf) {
        Ok(Some(pdu)) => Ok(Some(pdu)),
        Ok(None) => Err("truncated login PDU".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn encoded(pdu: &Pdu) -> BytesMut {
    let mut out = BytesMut::new();
    encode(pdu, Digests::NONE, &mut out);
    out
}

async fn bridge(
    mut driver: TcpStream,
    mut tcp: TcpStream,
    opts: &IserOptions,
    stats: &IserStats,
    slot: &BridgeSlot,
) -> Result<(), String> {
    let mut shim = InitiatorLoginShim::new(INITIATOR_RECV_DSL).with_max_unexpected(MAX_UNEXPECTED);
    let (end, final_rsp) = loop {
        let Some(mut pdu) = read_login_pdu(&mut driver).await? else {
            return Ok(());
        };
        if let Pdu::LoginRequest(req) = &mut pdu {
            shim.handle_request(req);
        }
        tcp.write_all(&encoded(&pdu))
            .await
            .map_err(|e| e.to_string())?;
        let Some(mut rsp) = read_login_pdu(&mut tcp).await? else {
            return Err("the target closed the connection during login".into());
        };
        let end = match &mut rsp {
            Pdu::LoginResponse(r) => shim.handle_response(r).map_err(|e| e.to_string())?,
            _ => LoginEnd::Pending,
        };
        if end == LoginEnd::Pending || end == LoginEnd::Failed {
            driver
                .write_all(&encoded(&rsp))
                .await
                .map_err(|e| e.to_string())?;
            if end == LoginEnd::Failed {
                return Ok(());
            }
            continue;
        }
        break (end, rsp);
    };
    match end {
        LoginEnd::Rdma {
            initiator_recv_dsl,
            initiator_core_max_recv,
            max_burst,
            first_burst,
            peer_max_unexpected,
            ..
        } => {
            let mut mover = InitiatorDatamover::new(
                initiator_recv_dsl,
                initiator_core_max_recv,
                max_burst,
                first_burst,
            )
            .with_unexpected_limit(peer_max_unexpected);
            rdma_mode(driver, tcp, &final_rsp, &mut mover, opts, stats, slot).await
        }
        _ => {
            let answer = shim.rdma_answer().unwrap_or("nothing").to_owned();
            if !opts.fallback_to_tcp {
                return Err(format!(
                    "the target refused iSER (RDMAExtensions answered {answer}); \
                     use iscsi:// or allow the fallback to TCP"
                ));
            }
            tracing::info!("target answered RDMAExtensions={answer}: going on as iSCSI over TCP");
            driver
                .write_all(&encoded(&final_rsp))
                .await
                .map_err(|e| e.to_string())?;
            let _ = tokio::io::copy_bidirectional(&mut driver, &mut tcp).await;
            Ok(())
        }
    }
}

/// The driver's queue pair's memory as the datamover sees it: each buffer its own region,
/// at a virtual base address of its own (not zero-based), so the base offsets the iSER
/// header carries are exercised. Their memory comes from a pool and goes back to it (a
/// read's data once the driver has taken it), zeroed on reuse: a target that places less
/// than it reports must find zeros, not an earlier command's data.
struct SoftRegions<'a> {
    rdma: &'a SoftRdma,
    next_va: u64,
    skew: u64,
    pool: BufferPool,
}

impl Regions for SoftRegions<'_> {
    fn register(&mut self, len: u32, remote_write: bool) -> Result<BufferAdvertisement, String> {
        let access = if remote_write {
            Access::LOCAL_WRITE | Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        let va = self.next_va;
        self.next_va = self
            .next_va
            .wrapping_add(u64::from(len).next_multiple_of(4096) + 4096)
            % (1 << 48);
        let memory = self.pool.get(len.max(1) as usize, true);
        let mr = self
            .rdma
            .register_vec(memory, access, VaMode::Based(va))
            .map_err(|e| e.to_string())?;
        Ok(BufferAdvertisement {
            stag: mr.stag.0,
            base_offset: mr.base_va + if remote_write { self.skew } else { 0 },
        })
    }

    fn fill(&mut self, buf: BufferAdvertisement, offset: u32, data: &[u8]) -> Result<(), String> {
        self.rdma
            .fill(STag(buf.stag), buf.base_offset + u64::from(offset), data)
            .map_err(|e| e.to_string())
    }

    /// Called once the target is done with the buffer (its SCSI Response arrived): the
    /// region is deregistered and its memory handed over as it is, without a copy.
    fn contents(&mut self, buf: BufferAdvertisement, len: u32) -> Result<Bytes, String> {
        let stag = STag(buf.stag);
        let offset = buf
            .base_offset
            .wrapping_sub(self.skew)
            .checked_sub(self.rdma.describe_base(stag).ok_or("unknown read buffer")?)
            .ok_or("read buffer offset below its region")?;
        let bytes = self
            .pool
            .share(self.rdma.take(stag).map_err(|e| e.to_string())?);
        let start = usize::try_from(offset).map_err(|e| e.to_string())?;
        let end = start
            .checked_add(len as usize)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| format!("{len} bytes at {offset} leave the read buffer"))?;
        Ok(bytes.slice(start..end))
    }

    fn release(&mut self, buf: BufferAdvertisement) {
        if let Ok(memory) = self.rdma.take(STag(buf.stag)) {
            self.pool.put(memory);
        }
    }
}

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
    });
    tx
}

/// Data segments at least this long are written from the PDU's own buffer (a read's data,
/// straight out of the region the target wrote) instead of being copied into the batch.
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

async fn rdma_mode(
    driver: TcpStream,
    tcp: TcpStream,
    final_rsp: &Pdu,
    mover: &mut InitiatorDatamover,
    opts: &IserOptions,
    stats: &IserStats,
    bridge_slot: &BridgeSlot,
) -> Result<(), String> {
    let slot = stats.slot();
    let rdma = SoftRdma::spawn_gated(tcp, opts.qp, opts.faults.clone());
    let depth = opts.recv_budget.map_or(RECV_DEPTH, |b| b.min(RECV_DEPTH));
    let ring = RecvRing::post(&rdma, depth, RECV_HEADROOM + INITIATOR_RECV_DSL)
        .map_err(|e| e.to_string())?;
    let mut receives = Receives {
        ring,
        posted: depth,
        budget: opts.recv_budget,
    };
    rdma.start();
    let mut stager = Stager::new();
    // RFC 7145 section 5.1.3 (iWARP): the initiator's first Send is the iSER Hello.
    let hello = Hello {
        max_version: ISER_VERSION,
        min_version: ISER_VERSION,
        ird: opts.qp.ird,
    };
    stager
        .send(&rdma, &[&IserMessage::Hello(hello).emit()], None)
        .map_err(|e| e.to_string())?;
    let reply = loop {
        let wc = tokio::time::timeout(opts.hello_timeout, rdma.next_completion())
            .await
            .map_err(|_| {
                format!(
                    "no iSER HelloReply within {:?} of the Hello (lost, or the target does \
                     not speak iSER on this port)",
                    opts.hello_timeout
                )
            })?;
        if wc.status != WcStatus::Success {
            return Err(format!(
                "iSER Hello failed: RDMA {:?} completed with {:?}",
                wc.opcode, wc.status
            ));
        }
        if wc.opcode != WcOpcode::Recv {
            stager.complete(&rdma, &wc);
            continue;
        }
        let bytes = receives.take(&rdma, &wc)?;
        match IserMessage::parse(&bytes) {
            Ok((IserMessage::HelloReply(r), _)) => break r,
            _ => return Err("the target's first Send is not an iSER HelloReply".into()),
        }
    };
    if reply.reject {
        return Err(format!(
            "the target rejected iSER version {} (it supports up to {})",
            ISER_VERSION, reply.max_version
        ));
    }
    let (driver_rd, driver_wr) = driver.into_split();
    let core_tx = core_writer(driver_wr);
    bridge_slot.rdma_mode.store(true, Ordering::Release);
    let _ = core_tx.send(final_rsp.clone());
    let mut core = driver_rd;
    let mut framer = Framer::new(0x00ff_ffff);
    let mut rbuf = BytesMut::with_capacity(64 << 10);
    let mut regions = SoftRegions {
        rdma: &rdma,
        next_va: 0x7f00_0000_0000,
        skew: opts.advertise_skew,
        pool: BufferPool::new(),
    };
    let mut out = InitiatorOut::default();
    let mut buf = BytesMut::new();
    let mut backlog = SendBacklog::default();
    let mut logged_out = false;
    let result = loop {
        stats.update(slot, &mover.stats);
        tokio::select! {
            n = core.read_buf(&mut rbuf) => {
                match n {
                    Ok(0) | Err(_) => break Ok(()),
                    Ok(_) => {}
                }
                loop {
                    let pdu = match framer.decode(&mut rbuf) {
                        Ok(Some(p)) => p,
                        Ok(None) => break,
                        Err(e) => return Err(format!("from the driver: {e}")),
                    };
                    if let Err(e) = mover.handle_core_pdu(pdu, &mut regions, &mut out) {
                        return Err(e.to_string());
                    }
                    for (header, pdu) in out.sends.drain(..) {
                        buf.clear();
                        encode_send(&header, &pdu, &mut buf);
                        backlog.send(&rdma, &mut stager, &buf)?;
                    }
                    for pdu in out.to_core.drain(..) {
                        let _ = core_tx.send(pdu);
                    }
                }
                rbuf.reserve(64 << 10);
            }
            wc = rdma.next_completion() => {
                if wc.status != WcStatus::Success {
                    // After the Logout Response the target closes the connection (RFC
                    // 7143 section 11.14): that is the end, not a failure.
                    if logged_out {
                        break Ok(());
                    }
                    break Err(describe_failure(wc.opcode, wc.status));
                }
                if wc.opcode == WcOpcode::Recv {
                    let bytes = receives.take(&rdma, &wc)?;
                    if let Err(e) = mover.handle_send(&bytes, &mut regions, &mut out) {
                        break Err(e.to_string());
                    }
                    // A response may free room for Sends held back by the target's
                    // MaxOutstandingUnexpectedPDUs.
                    for (header, pdu) in out.sends.drain(..) {
                        buf.clear();
                        encode_send(&header, &pdu, &mut buf);
                        backlog.send(&rdma, &mut stager, &buf)?;
                    }
                    for pdu in out.to_core.drain(..) {
                        logged_out |= matches!(pdu, Pdu::LogoutResponse(_));
                        let _ = core_tx.send(pdu);
                    }
                } else {
                    stager.complete(&rdma, &wc);
                    backlog.flush(&rdma, &mut stager)?;
                }
            }
        }
    };
    mover.release_all(&mut regions);
    stats.update(slot, &mover.stats);
    result
}

/// The receive ring, and how many buffers it may still post under a test's budget.
struct Receives {
    ring: RecvRing,
    posted: u32,
    budget: Option<u32>,
}

impl Receives {
    fn take(
        &mut self,
        rdma: &SoftRdma,
        wc: &sluice_rdma::WorkCompletion,
    ) -> Result<Vec<u8>, String> {
        let taken = if self.budget.is_some_and(|b| self.posted >= b) {
            self.ring.take_last(rdma, wc)
        } else {
            self.posted += 1;
            self.ring.take(rdma, wc)
        };
        taken.map_err(|e| e.to_string())
    }
}

/// Sends that found the send queue full, in order: a write's unsolicited Data-Out can post
/// more Sends at once than the queue holds; they wait for completions to free room rather
/// than fail the connection.
#[derive(Default)]
struct SendBacklog(std::collections::VecDeque<Vec<u8>>);

impl SendBacklog {
    fn send(&mut self, rdma: &SoftRdma, stager: &mut Stager, msg: &[u8]) -> Result<(), String> {
        if self.0.is_empty() && try_send(rdma, stager, msg)? {
            return Ok(());
        }
        self.0.push_back(msg.to_vec());
        Ok(())
    }

    fn flush(&mut self, rdma: &SoftRdma, stager: &mut Stager) -> Result<(), String> {
        while let Some(msg) = self.0.front() {
            if !try_send(rdma, stager, msg)? {
                break;
            }
            self.0.pop_front();
        }
        Ok(())
    }
}

/// Posts a Send; `false` when the send queue is full.
fn try_send(rdma: &SoftRdma, stager: &mut Stager, msg: &[u8]) -> Result<bool, String> {
    match stager.send(rdma, &[msg], None) {
        Ok(_) => Ok(true),
        Err(StageError::Post(PostError::QueueFull)) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

fn describe_failure(op: WcOpcode, status: WcStatus) -> String {
    match status {
        WcStatus::RemoteAccess => format!(
            "RDMA remote access error ({op:?}): an access to an advertised buffer fell outside \
             its region or rights; the connection is closed"
        ),
        WcStatus::TransportLost => "the target closed the RDMA connection".into(),
        // RFC 7145 section 8: every Send needs a receive buffer posted at the other end; a
        // Send that finds none is final (no retry).
        WcStatus::ReceiveQueueEmpty => {
            "a Send from the target found no receive buffer posted here (receiver not ready); \
             the connection is closed"
                .into()
        }
        WcStatus::ReceiverNotReady => {
            "the target had no receive buffer posted for a Send (receiver not ready); the \
             connection is closed"
                .into()
        }
        other => format!("RDMA {op:?} completed with {other:?}; the connection is closed"),
    }
}
