//! iSER on the initiator (RFC 7145) over the software RDMA provider.
//!
//! The login passes in TCP streaming mode on the driver's own socket, with iSER's keys added
//! and the target's iSER answers taken off by `IserLogin`
//! (`sluice_proto::iser::login::InitiatorLoginShim`). After the final Login Response the
//! socket goes to the RDMA provider, the iSER Hello is exchanged, and the connection becomes
//! an `IserLink`: two bounded channels of [`Pdu`] values between the driver's connection
//! task and a datamover task, where `sluice_proto::iser::InitiatorDatamover` decides what
//! each PDU becomes (a Send, a buffer advertised for RDMA Write or Read). No PDU is encoded
//! or parsed between the driver and the datamover: a read's data reaches the session core as
//! the registered buffer the target wrote into, and a write's data reaches the datamover as
//! the caller's buffer (copied once, into the buffer registered for the target's RDMA Read).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_proto::iser::login::{InitiatorLoginShim, JoinedSession, LoginEnd};
use sluice_proto::iser::{
    encode_send, BufferAdvertisement, Hello, InitiatorDatamover, InitiatorMoverStats, InitiatorOut,
    IserMessage, Regions, ISER_VERSION,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::{LoginRequest, LoginResponse, Pdu};
use sluice_rdma::{
    Access, BufferPool, Contents, FaultPlan, QpConfig, RecvRing, STag, SoftRdma, Stager, VaMode,
    WcOpcode, WcStatus,
};
use tokio::net::TcpStream;
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

/// PDUs each direction of an `IserLink` holds before its sender waits, by default: a full
/// command window's worth, so that neither side waits in steady state, and a bound on what a
/// stalled side can pile up. The driver takes PDUs from the session core only while there is
/// room.
pub const LINK_DEPTH: usize = 256;

/// The most [`IserOptions::link_depth`] may ask for.
pub const MAX_LINK_DEPTH: usize = 4096;

/// PDUs the driver hands to its session core under one lock before it looks at its other
/// work again.
pub(crate) const LINK_BATCH: usize = 64;

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
    /// PDUs each direction between the connection task and the datamover holds (1 to
    /// [`MAX_LINK_DEPTH`]; [`LINK_DEPTH`] by default). Tests shorten it to make both sides
    /// wait for room.
    pub link_depth: usize,
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
            link_depth: LINK_DEPTH,
        }
    }
}

/// Why the datamover task ended the connection, if it did: kept for the driver, which
/// only sees its link close.
#[derive(Clone, Debug, Default)]
pub(crate) struct IserFailure(Arc<Mutex<Option<String>>>);

impl IserFailure {
    fn set(&self, why: String) {
        // At debug level, as a TCP connection's loss is: the driver reports it as the
        // connection's error, and at the end of a session of several connections the
        // target's close reaches the others' datamovers before their driver ends them,
        // which is no failure.
        tracing::debug!("iSER: {why}");
        if let Ok(mut s) = self.0.lock() {
            s.get_or_insert(why);
        }
    }

    /// The reason, once the datamover failed.
    pub(crate) fn reason(&self) -> Option<String> {
        self.0.lock().ok().and_then(|s| s.clone())
    }
}

/// The session parameters the driver's session core runs a connection in RDMA mode with.
///
/// Over iSER, Data-Out answering an R2T never reaches the wire: the target fetches that data
/// with RDMA Reads from the buffer the command advertised (RFC 7145 section 7.3), and the
/// datamover asks the core for it with R2Ts of its own. Only immediate and unsolicited data
/// travel in Sends, bounded by TargetRecvDataSegmentLength (section 6.3.2), which the core
/// sees as the target's MaxRecvDataSegmentLength; solicited data is not cut by it, so each
/// burst reaches the datamover as one slice of the write data, and the target's RDMA Reads
/// are answered from it without a copy (cut into 8 KiB Data-Outs, a 512 KiB RDMA Read
/// spanned 64 of them and was answered from a copy).
pub(crate) fn rdma_mode_params(params: &mut SessionParams) {
    params.solicited_data_by_rdma = true;
}

/// What the datamovers of one session counted, live (each connection keeps its own slot up to
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

/// An iSER connection while it logs in: the shim that adds and takes off iSER's keys, and
/// what RDMA mode starts with.
pub(crate) struct IserLogin {
    shim: InitiatorLoginShim,
    opts: IserOptions,
    stats: IserStats,
}

/// How an iSER login ended.
pub(crate) enum IserLoginEnd {
    /// Not yet (or the login failed: the response says why).
    Pending,
    /// Switch the connection to RDMA mode.
    Rdma(LoginEnd),
    /// The target refused iSER and the options allow going on as iSCSI over TCP.
    Tcp,
}

impl IserLogin {
    pub(crate) fn new(opts: IserOptions, stats: IserStats) -> Self {
        IserLogin {
            shim: InitiatorLoginShim::new(INITIATOR_RECV_DSL).with_max_unexpected(MAX_UNEXPECTED),
            opts,
            stats,
        }
    }

    /// The connection joins `session` (see `InitiatorLoginShim::joins_session`).
    pub(crate) fn joins_session(&mut self, session: JoinedSession) {
        self.shim.joins_session(session);
    }

    /// A Login Request on its way out: iSER's keys added.
    pub(crate) fn request(&mut self, req: &mut LoginRequest) {
        self.shim.handle_request(req);
    }

    /// A Login Response that arrived: iSER's answers taken off; whether the login ended and
    /// how, or why the connection cannot go on.
    pub(crate) fn response(&mut self, rsp: &mut LoginResponse) -> Result<IserLoginEnd, String> {
        match self.shim.handle_response(rsp).map_err(|e| e.to_string())? {
            LoginEnd::Pending | LoginEnd::Failed => Ok(IserLoginEnd::Pending),
            end @ LoginEnd::Rdma { .. } => Ok(IserLoginEnd::Rdma(end)),
            // A connection joining a session in TCP mode: the session's mode, not a refusal.
            LoginEnd::Tcp if self.shim.joining() => Ok(IserLoginEnd::Tcp),
            LoginEnd::Tcp => {
                let answer = self.shim.rdma_answer().unwrap_or("nothing").to_owned();
                if !self.opts.fallback_to_tcp {
                    return Err(format!(
                        "the target refused iSER (RDMAExtensions answered {answer}); \
                         use iscsi:// or allow the fallback to TCP"
                    ));
                }
                tracing::info!(
                    "target answered RDMAExtensions={answer}: going on as iSCSI over TCP"
                );
                Ok(IserLoginEnd::Tcp)
            }
        }
    }

    /// Switches the logged-in socket to RDMA mode: the provider takes it, the Hello is
    /// exchanged (RFC 7145 section 5.1.3), and the datamover task starts.
    pub(crate) async fn start_rdma(
        self,
        tcp: TcpStream,
        end: LoginEnd,
    ) -> Result<IserLink, String> {
        let LoginEnd::Rdma {
            initiator_recv_dsl,
            max_burst,
            first_burst,
            peer_max_unexpected,
            ..
        } = end
        else {
            return Err("the login did not end in RDMA mode".into());
        };
        let rdma = SoftRdma::spawn_gated(tcp, self.opts.qp, self.opts.faults.clone());
        let depth = self
            .opts
            .recv_budget
            .map_or(RECV_DEPTH, |b| b.min(RECV_DEPTH));
        let ring = RecvRing::post(&rdma, depth, RECV_HEADROOM + INITIATOR_RECV_DSL)
            .map_err(|e| e.to_string())?;
        let mut receives = Receives {
            ring,
            posted: depth,
            budget: self.opts.recv_budget,
        };
        rdma.start();
        let mut stager = Stager::new();
        hello(&rdma, &mut receives, &mut stager, &self.opts).await?;
        let mover = InitiatorDatamover::new(initiator_recv_dsl, max_burst, first_burst)
            .with_unexpected_limit(peer_max_unexpected);
        let depth = self.opts.link_depth.clamp(1, MAX_LINK_DEPTH);
        let (to_mover, mut from_core) = mpsc::channel(depth);
        let (to_core, from_mover) = mpsc::channel(depth);
        let failure = IserFailure::default();
        let task = Mover {
            rdma,
            receives,
            stager,
            mover,
            skew: self.opts.advertise_skew,
            stats: self.stats,
        };
        let failed = failure.clone();
        tokio::spawn(async move {
            if let Err(why) = task.run(&mut from_core, &to_core).await {
                failed.set(why);
            }
            // `to_core` is dropped here, after the reason is recorded: the driver finds it
            // when it sees its link close.
            drop(to_core);
        });
        Ok(IserLink {
            to_mover,
            from_mover,
            failure,
            blocked: false,
            duplicate: None,
        })
    }
}

/// Sends the iSER Hello and waits for the HelloReply.
async fn hello(
    rdma: &SoftRdma,
    receives: &mut Receives,
    stager: &mut Stager,
    opts: &IserOptions,
) -> Result<(), String> {
    // RFC 7145 section 5.1.3 (iWARP): the initiator's first Send is the iSER Hello.
    let hello = Hello {
        max_version: ISER_VERSION,
        min_version: ISER_VERSION,
        ird: opts.qp.ird,
    };
    stager
        .send(rdma, &[&IserMessage::Hello(hello).emit()], None)
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
            stager.complete(rdma, &wc);
            continue;
        }
        let bytes = receives.take(rdma, &wc)?;
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
    Ok(())
}

/// A connection in RDMA mode as the driver sees it: PDUs to the datamover task, PDUs from
/// it, both as values over bounded channels.
///
/// The driver always receives (the datamover may wait for room on `from_mover` while it
/// holds PDUs the driver sent), and sends only while `to_mover` has room, leaving the rest
/// queued in the session core: neither side can wait for the other forever, and neither
/// channel grows past its depth ([`IserOptions::link_depth`]).
pub(crate) struct IserLink {
    pub(crate) to_mover: mpsc::Sender<Pdu>,
    pub(crate) from_mover: mpsc::Receiver<Pdu>,
    pub(crate) failure: IserFailure,
    /// The session core has PDUs for this connection that found `to_mover` full.
    pub(crate) blocked: bool,
    /// A PDU the fault test hook duplicated, handed to the datamover again when there is
    /// room (`ConnectOptions::fault_hook`; tests only).
    pub(crate) duplicate: Option<Pdu>,
}

/// The driver's queue pair's memory as the datamover sees it: each buffer its own region,
/// at a virtual base address of its own (not zero-based), so the base offsets the iSER
/// header carries are exercised. A read buffer's memory comes from a pool and goes back to
/// it (once the driver has taken the read's data), zeroed on reuse: a target that places
/// less than it reports must find zeros, not an earlier command's data. A write's region is
/// the application's data itself, the slices the core handed out, registered in place.
struct SoftRegions<'a> {
    rdma: &'a SoftRdma,
    next_va: u64,
    skew: u64,
    pool: BufferPool,
}

impl SoftRegions<'_> {
    /// The base address of the next buffer of `len` bytes: a gap after every buffer, so a
    /// write past one's end never lands in the next.
    fn next_va(&mut self, len: u64) -> u64 {
        let va = self.next_va;
        self.next_va = self.next_va.wrapping_add(len.next_multiple_of(4096) + 4096) % (1 << 48);
        va
    }
}

impl Regions for SoftRegions<'_> {
    fn register(&mut self, len: u32) -> Result<BufferAdvertisement, String> {
        let va = self.next_va(u64::from(len));
        // Registered as zeros without clearing the reused buffer: a read of one burst is
        // placed whole and never needs it cleared; a partial placement clears it first.
        let memory = self.pool.get(len.max(1) as usize, false);
        let mr = self
            .rdma
            .register_cleared(
                memory,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                VaMode::Based(va),
            )
            .map_err(|e| e.to_string())?;
        Ok(BufferAdvertisement {
            stag: mr.stag.0,
            base_offset: mr.base_va + self.skew,
        })
    }

    fn register_gathered(&mut self, chunks: Vec<Bytes>) -> Result<BufferAdvertisement, String> {
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        let va = self.next_va(len);
        let mr = self
            .rdma
            .register_gathered(chunks, Access::REMOTE_READ, VaMode::Based(va))
            .map_err(|e| e.to_string())?;
        Ok(BufferAdvertisement {
            stag: mr.stag.0,
            base_offset: mr.base_va,
        })
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
        // A buffer one RDMA Write filled whole holds the very buffer the data arrived in.
        let bytes = match self.rdma.take_contents(stag).map_err(|e| e.to_string())? {
            Some(Contents::Owned(memory)) => self.pool.share(memory),
            Some(Contents::Placed { data, spare }) => {
                self.pool.put(spare);
                data
            }
            None => return Err("a read buffer is registered writable".to_owned()),
        };
        let start = usize::try_from(offset).map_err(|e| e.to_string())?;
        let end = start
            .checked_add(len as usize)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| format!("{len} bytes at {offset} leave the read buffer"))?;
        Ok(bytes.slice(start..end))
    }

    /// A read buffer's memory goes back to the pool; a write's region only drops its
    /// references to the application's data.
    fn release(&mut self, buf: BufferAdvertisement) {
        if let Ok(Some(memory)) = self.rdma.retire(STag(buf.stag)) {
            self.pool.put(memory);
        }
    }
}

/// The datamover task's state: the provider, the receive buffers posted, the datamover.
struct Mover {
    rdma: SoftRdma,
    receives: Receives,
    stager: Stager,
    mover: InitiatorDatamover,
    skew: u64,
    stats: IserStats,
}

impl Mover {
    /// Moves PDUs between the driver and the target until either ends the connection.
    async fn run(
        mut self,
        from_core: &mut mpsc::Receiver<Pdu>,
        to_core: &mpsc::Sender<Pdu>,
    ) -> Result<(), String> {
        let slot = self.stats.slot();
        let mut regions = SoftRegions {
            rdma: &self.rdma,
            next_va: 0x7f00_0000_0000,
            skew: self.skew,
            pool: BufferPool::new(),
        };
        let mut out = InitiatorOut::default();
        let mut buf = BytesMut::new();
        let mut backlog = SendBacklog::default();
        let mut logged_out = false;
        let result = loop {
            self.stats.update(slot, &self.mover.stats);
            tokio::select! {
                pdu = from_core.recv() => {
                    let Some(pdu) = pdu else {
                        // The driver closed the connection.
                        break Ok(());
                    };
                    if let Err(e) = self.mover.handle_core_pdu(pdu, &mut regions, &mut out) {
                        break Err(e.to_string());
                    }
                    // A command and the unsolicited Data-Out behind it are posted together:
                    // were the Data-Out posted later, the Read Response to the target's
                    // RDMA Read for the same command could reach the wire ahead of it.
                    let msgs = encode_sends(&mut out, &mut buf);
                    if let Err(e) = backlog.send_all(&self.rdma, &mut self.stager, msgs) {
                        break Err(e);
                    }
                    if forward(&mut out, to_core, &mut logged_out).await.is_err() {
                        break Ok(());
                    }
                }
                wc = self.rdma.next_completion() => {
                    if wc.status != WcStatus::Success {
                        // After the Logout Response the target closes the connection (RFC
                        // 7143 section 11.14): that is the end, not a failure.
                        if logged_out {
                            break Ok(());
                        }
                        break Err(describe_failure(wc.opcode, wc.status));
                    }
                    if wc.opcode == WcOpcode::Recv {
                        let bytes = match self.receives.take(&self.rdma, &wc) {
                            Ok(b) => b,
                            Err(e) => break Err(e),
                        };
                        if let Err(e) = self.mover.handle_send(&bytes, &mut regions, &mut out) {
                            break Err(e.to_string());
                        }
                        // A response may free room for Sends held back by the target's
                        // MaxOutstandingUnexpectedPDUs.
                        let msgs = encode_sends(&mut out, &mut buf);
                        if let Err(e) = backlog.send_all(&self.rdma, &mut self.stager, msgs) {
                            break Err(e);
                        }
                        if forward(&mut out, to_core, &mut logged_out).await.is_err() {
                            break Ok(());
                        }
                    } else {
                        self.stager.complete(&self.rdma, &wc);
                        if let Err(e) = backlog.flush(&self.rdma, &mut self.stager) {
                            break Err(e);
                        }
                    }
                }
            }
        };
        self.mover.release_all(&mut regions);
        self.stats.update(slot, &self.mover.stats);
        result
    }
}

/// Hands the PDUs the datamover has for the session core to the driver, in order, waiting
/// for room on the link. `Err` when the driver is gone.
async fn forward(
    out: &mut InitiatorOut,
    to_core: &mpsc::Sender<Pdu>,
    logged_out: &mut bool,
) -> Result<(), ()> {
    for pdu in out.to_core.drain(..) {
        *logged_out |= matches!(pdu, Pdu::LogoutResponse(_));
        to_core.send(pdu).await.map_err(|_| ())?;
    }
    Ok(())
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
    /// Posts `msgs` behind whatever already waits, as many as fit, all at once.
    fn send_all(
        &mut self,
        rdma: &SoftRdma,
        stager: &mut Stager,
        msgs: Vec<Vec<u8>>,
    ) -> Result<(), String> {
        self.0.extend(msgs);
        self.flush(rdma, stager)
    }

    /// Posts what waits, as many as fit, all at once.
    fn flush(&mut self, rdma: &SoftRdma, stager: &mut Stager) -> Result<(), String> {
        if self.0.is_empty() {
            return Ok(());
        }
        let posted = stager
            .send_all(rdma, self.0.make_contiguous())
            .map_err(|e| e.to_string())?;
        self.0.drain(..posted);
        Ok(())
    }
}

/// The Sends the datamover decided on, each encoded (iSER header, then the PDU) into a
/// message of its own, in order.
fn encode_sends(out: &mut InitiatorOut, buf: &mut BytesMut) -> Vec<Vec<u8>> {
    out.sends
        .drain(..)
        .map(|(header, pdu)| {
            buf.clear();
            encode_send(&header, &pdu, buf);
            buf.to_vec()
        })
        .collect()
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
