//! Full feature phase of one connection (RFC 7143 sections 4, 11): command ordering,
//! SCSI commands with their data, NOP, Text, Logout and task management.
//!
//! Everything a connection sends is produced here, on the connection's own task, so StatSN
//! is assigned in send order without locks. SCSI commands run inline for memory and null
//! LUNs and on tokio's blocking pool for file LUNs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use sluice_proto::keepalive::{Keepalive, KeepaliveAction};
use sluice_proto::login::LoginOutcome;
use sluice_proto::params::{SessionParams, SessionType};
use sluice_proto::pdu::codes::{AsyncEvent, RejectReason, ScsiStatus};
use sluice_proto::pdu::{AsyncMessage, DataOut, NopIn, NopOut, Pdu, Reject, ScsiCommand};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
use sluice_proto::task::target_write::{TargetWrite, WriteData, WriteProgress};
use sluice_proto::task::{aborted_command_sense, PeerAction, SequentialTtts, TaskError};
use sluice_proto::window::{Admission, CommandWindow};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, trace, warn};

use crate::connection::{Incoming, ReadEnd, Reader};
use crate::context::{Context, TargetRuntime};
use crate::outbox::Outbox;
use crate::scsi_exec::Execution;
use crate::sessions::SessionGuard;

/// Answers queued below this many bytes wait for the rest of a batch of buffered commands
/// (see the end of `FullFeature::run`); above it they are written at once.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Room given to the recycled Data-In buffer when a read up to this size finds too little
/// spare capacity in it (see `execute`).
const DATA_IN_REFILL: usize = 64 * 1024;

/// Why full feature phase ended.
#[derive(Debug)]
pub(crate) enum End {
    /// Logout completed.
    Logout,
    /// The initiator closed the connection.
    PeerClosed,
    /// Socket error or the writer died.
    Io,
    /// The byte stream could not be framed.
    Framing,
    /// A protocol violation that ErrorRecoveryLevel 0 can only answer by closing.
    Protocol(&'static str),
    /// Another login reinstated this session.
    Reinstated,
    /// The target is shutting down.
    Shutdown,
    /// The initiator did not answer a NOP-In ping.
    KeepaliveTimeout,
    /// TARGET COLD RESET.
    ColdReset,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Logout => f.write_str("logout"),
            End::PeerClosed => f.write_str("initiator closed the connection"),
            End::Io => f.write_str("socket error"),
            End::Framing => f.write_str("unrecoverable framing error"),
            End::Protocol(what) => write!(f, "protocol error: {what}"),
            End::Reinstated => f.write_str("session reinstated by a new login"),
            End::Shutdown => f.write_str("target shutdown"),
            End::KeepaliveTimeout => f.write_str("no answer to NOP-In"),
            End::ColdReset => f.write_str("target cold reset"),
        }
    }
}

/// A write command waiting for its data.
#[derive(Debug)]
pub(crate) struct PendingWrite {
    pub task: TargetWrite,
    pub cmd: ScsiCommand,
    /// What the CDB moves, judged once when the command arrived.
    pub transfer: sluice_scsi::Transfer,
    /// Bytes of write buffer this task holds (counted against the connection limit).
    pub reserved_bytes: usize,
}

/// State of one connection in full feature phase.
pub(crate) struct FullFeature<'a> {
    pub ctx: &'a Context,
    pub outbox: &'a mut Outbox,
    pub params: SessionParams,
    pub session_type: SessionType,
    pub initiator: String,
    pub target_name: Option<String>,
    pub target: Option<&'a TargetRuntime>,
    pub local: SocketAddr,
    pub cid: u16,
    pub nexus: u64,
    pub stat_sn: SeqNum,
    pub window: CommandWindow<Pdu>,
    pub writes: HashMap<Itt, PendingWrite>,
    pub write_bytes: usize,
    pub ttts: SequentialTtts,
    pub text: crate::text::TextState,
    guard: SessionGuard,
    shutdown: watch::Receiver<bool>,
    logout_requested: Option<Instant>,
    /// NOP-In liveness timer (the sans-IO one in sluice-proto); `None` for discovery sessions
    /// and when keepalive is off.
    keepalive: Option<Keepalive>,
    data_in_buf: BytesMut,
    /// Whether the initiator had seen every status sent so far when it sent its latest SCSI
    /// command (its ExpStatSN was our next StatSN, RFC 7143 section 11.3.3): it waits for each
    /// answer before sending more, so busy polling for its next command saves a sleep and a
    /// wake-up per command. When its ExpStatSN lags, it is pipelining: commands come on their
    /// own, and spinning for them only takes CPU from the initiator (4 KiB writes at queue
    /// depth 32 from qemu-img ran at half speed on 2 vCPUs). See docs/performance.md.
    peer_waits: bool,
}

/// What handling one PDU asks of the loop.
pub(crate) enum Flow {
    Continue,
    Stop(End),
}

impl<'a> FullFeature<'a> {
    pub(crate) fn new(
        ctx: &'a Context,
        outcome: LoginOutcome,
        guard: SessionGuard,
        local: SocketAddr,
        outbox: &'a mut Outbox,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let target = outcome.target_name.as_deref().and_then(|n| ctx.target(n));
        let nexus = guard.nexus_id;
        Self {
            ctx,
            outbox,
            params: outcome.params,
            session_type: outcome.session_type,
            initiator: outcome.initiator_name,
            target_name: outcome.target_name,
            target,
            local,
            cid: outcome.cid,
            nexus,
            stat_sn: outcome.next_stat_sn,
            // The login's CmdSN was not advanced (login PDUs are immediate): the first
            // command carries ExpCmdSN as the login left it (RFC 7143 section 4.2.2.1).
            window: CommandWindow::new(outcome.exp_cmd_sn, ctx.config.offer.queue_depth),
            writes: HashMap::new(),
            write_bytes: 0,
            ttts: SequentialTtts::starting_at(1),
            text: crate::text::TextState::default(),
            guard,
            shutdown,
            logout_requested: None,
            keepalive: None,
            data_in_buf: BytesMut::new(),
            peer_waits: true,
        }
    }

    /// Serves PDUs until the connection ends.
    pub(crate) async fn run(mut self, reader: &mut Reader) -> End {
        self.keepalive = match self.session_type {
            // Discovery sessions get no NOP-In: open-iscsi drops a discovery connection on
            // any PDU but a Text Response (interop rule 15).
            SessionType::Discovery => None,
            SessionType::Normal => self
                .ctx
                .config
                .keepalive
                .map(|k| Keepalive::new(k.interval, k.timeout, Instant::now().into_std())),
        };
        loop {
            let deadline = self.next_deadline();
            let mut killed = self.guard.killed.clone();
            reader.spin_ok =
                self.peer_waits && !self.outbox.has_pending() && self.logout_requested.is_none();
            let incoming = tokio::select! {
                biased;
                _ = killed.changed() => return End::Reinstated,
                _ = self.shutdown.changed(), if self.logout_requested.is_none() => {
                    match self.begin_shutdown().await {
                        Flow::Continue => continue,
                        Flow::Stop(end) => return end,
                    }
                }
                r = reader.next(), if !self.outbox.congested() => r,
                w = self.outbox.write_some(), if self.outbox.has_pending() => {
                    if let Err(e) = w {
                        debug!(error = %e, "write failed");
                        return End::Io;
                    }
                    continue;
                }
                _ = sleep_until(deadline) => {
                    match self.handle_deadline() {
                        Flow::Continue => continue,
                        Flow::Stop(end) => return end,
                    }
                }
            };
            if let Some(k) = self.keepalive.as_mut() {
                // Any PDU is a sign of life, the ping's answer or not (open-iscsi #97).
                k.handle_received(Instant::now().into_std());
            }
            let flow = match incoming {
                Ok(Incoming::Pdu(pdu)) => self.handle_pdu(pdu).await,
                Ok(Incoming::Reject(e)) => {
                    debug!(error = %e, "rejecting PDU");
                    match e.reject() {
                        Some((reason, header)) => {
                            self.send_reject(reason, Bytes::copy_from_slice(header));
                            Flow::Continue
                        }
                        None => Flow::Stop(End::Framing),
                    }
                }
                Err(ReadEnd::Closed) => return End::PeerClosed,
                Err(ReadEnd::Io(e)) => {
                    debug!(error = %e, "read failed");
                    return End::Io;
                }
                Err(ReadEnd::Fatal(e)) => {
                    warn!(error = %e, "unrecoverable framing error; closing");
                    return End::Framing;
                }
            };
            if let Flow::Stop(end) = flow {
                return end;
            }
            // While the next command is already buffered, its answer can join this one's in a
            // single writev: a batch of commands read at once is answered with one syscall and
            // one TCP push, not one per command. A large queue goes out at once regardless,
            // so big reads keep streaming.
            if reader.has_complete_pdu() && self.outbox.queued_bytes() < WRITE_BATCH_BYTES {
                continue;
            }
            if let Err(e) = self.outbox.write_now() {
                debug!(error = %e, "write failed");
                return End::Io;
            }
        }
    }

    async fn handle_pdu(&mut self, pdu: Pdu) -> Flow {
        trace!(opcode = pdu.opcode(), itt = ?pdu.itt(), "received");
        if self.session_type == SessionType::Discovery
            && !matches!(
                pdu,
                Pdu::TextRequest(_) | Pdu::LogoutRequest(_) | Pdu::NopOut(_)
            )
        {
            // RFC 7143 section 13.21: a discovery session carries only Text and Logout.
            self.reject_pdu(RejectReason::ProtocolError, &pdu);
            return Flow::Continue;
        }
        match pdu {
            Pdu::DataOut(d) => self.handle_data_out(d).await,
            Pdu::SnackRequest(_) => {
                // ErrorRecoveryLevel 0: SNACK support is not required (RFC 7143 section 11.16).
                self.reject_pdu(RejectReason::CommandNotSupported, &pdu);
                Flow::Continue
            }
            Pdu::ScsiCommand(_)
            | Pdu::NopOut(_)
            | Pdu::TaskMgmtRequest(_)
            | Pdu::TextRequest(_)
            | Pdu::LogoutRequest(_) => self.admit_command(pdu).await,
            // Target-to-initiator opcodes, or a Login Request after login: protocol errors.
            other => {
                self.reject_pdu(RejectReason::ProtocolError, &other);
                Flow::Continue
            }
        }
    }

    /// Orders commands by CmdSN (RFC 7143 section 4.2.2.1) and runs those that are due.
    async fn admit_command(&mut self, pdu: Pdu) -> Flow {
        let (cmd_sn, immediate) = command_numbering(&pdu);
        match self.window.handle_command(cmd_sn, immediate, pdu) {
            Admission::Deliver(p) => {
                if let Flow::Stop(end) = self.dispatch(p, immediate).await {
                    return Flow::Stop(end);
                }
            }
            Admission::Held => {}
            Admission::Ignored(why, p) => {
                // Section 4.2.2.1: "the target MUST silently ignore any non-immediate command
                // outside of this range or non-immediate duplicates within the range".
                debug!(
                    ?why,
                    cmd_sn = cmd_sn.0,
                    opcode = p.opcode(),
                    "command outside the window ignored"
                );
            }
        }
        while let Some(p) = self.window.poll_ready() {
            if let Flow::Stop(end) = self.dispatch(p, false).await {
                return Flow::Stop(end);
            }
        }
        Flow::Continue
    }

    async fn dispatch(&mut self, pdu: Pdu, immediate: bool) -> Flow {
        let flow = match pdu {
            Pdu::ScsiCommand(cmd) => {
                // A SCSI command frees its window slot when it completes (see `finish`).
                return self.handle_scsi_command(cmd).await;
            }
            Pdu::NopOut(n) => self.handle_nop_out(n),
            Pdu::TaskMgmtRequest(t) => self.handle_tmf(t),
            Pdu::TextRequest(t) => self.handle_text(t),
            Pdu::LogoutRequest(l) => self.handle_logout(l),
            other => {
                self.reject_pdu(RejectReason::ProtocolError, &other);
                Flow::Continue
            }
        };
        if !immediate {
            self.window.complete();
        }
        flow
    }

    async fn handle_scsi_command(&mut self, cmd: ScsiCommand) -> Flow {
        self.peer_waits = initiator_waits(
            self.stat_sn,
            cmd.exp_stat_sn,
            self.ctx.config.offer.queue_depth,
        );
        let Some(target) = self.target else {
            self.window.complete();
            return Flow::Continue;
        };
        let transfer = target.scsi.transfer(cmd.lun.0, &cmd.cdb);
        if !cmd.write {
            let exec = Execution::new(&cmd, transfer, WriteData::default());
            return self.execute(exec, None).await;
        }
        let wanted = match transfer {
            sluice_scsi::Transfer::ToDevice(n) => u32::try_from(n).unwrap_or(u32::MAX),
            // A CDB that moves no data out (or reads) sent with the W bit: take the data the
            // initiator announced and discard it, so the stream stays in step
            // (iSCSIResiduals.Read10Invalid (e)).
            _ => cmd.expected_data_transfer_length,
        };
        let reserve = wanted.min(cmd.expected_data_transfer_length) as usize;
        if self.write_bytes + reserve > self.ctx.config.limits.max_outstanding_bytes_per_connection
        {
            // Bounded buffering: too much write data in flight on this connection. TASK SET
            // FULL tells the initiator to retry later (SAM-5 5.3).
            debug!(itt = ?cmd.itt, reserve, "write buffer limit reached; TASK SET FULL");
            let rsp = sluice_proto::task::scsi_response(
                cmd.itt,
                ScsiStatus::TaskSetFull,
                sluice_proto::task::Residual::None,
                0,
                &[],
            );
            self.send(Pdu::ScsiResponse(rsp));
            self.window.complete();
            return Flow::Continue;
        }
        match TargetWrite::new(&cmd, &self.params, wanted, &mut self.ttts) {
            Ok((task, progress)) => {
                self.write_bytes += reserve;
                let pending = PendingWrite {
                    transfer,
                    task,
                    cmd,
                    reserved_bytes: reserve,
                };
                self.write_progress(pending, progress).await
            }
            Err(e) => self.task_error(cmd.itt, e),
        }
    }

    async fn handle_data_out(&mut self, d: DataOut) -> Flow {
        let Some(mut pending) = self.writes.remove(&d.itt) else {
            // Data for a task we no longer have (aborted, or already failed): drop it. An
            // initiator with FastAbort may still send some (interop rule 13).
            debug!(itt = ?d.itt, "Data-Out for an unknown task dropped");
            return Flow::Continue;
        };
        match pending.task.handle_data_out(&d, &mut self.ttts) {
            Ok(progress) => self.write_progress(pending, progress).await,
            Err(e) => {
                self.release(&pending);
                self.task_error(d.itt, e)
            }
        }
    }

    async fn write_progress(&mut self, pending: PendingWrite, progress: WriteProgress) -> Flow {
        match progress {
            WriteProgress::NeedR2ts(r2ts) => {
                for r2t in r2ts {
                    self.send(Pdu::R2t(r2t));
                }
                self.writes.insert(pending.cmd.itt, pending);
                Flow::Continue
            }
            WriteProgress::Waiting => {
                self.writes.insert(pending.cmd.itt, pending);
                Flow::Continue
            }
            WriteProgress::Complete(data) => {
                self.release(&pending);
                let exec = Execution::new(&pending.cmd, pending.transfer, data);
                self.execute(exec, Some(pending.task)).await
            }
        }
    }

    fn release(&mut self, pending: &PendingWrite) {
        self.write_bytes = self.write_bytes.saturating_sub(pending.reserved_bytes);
    }

    /// A data-transfer rule was broken: do what the rule says (RFC 7143 sections 7, 11.4.7.2).
    fn task_error(&mut self, itt: Itt, e: TaskError) -> Flow {
        debug!(?itt, error = %e, "task error");
        match e.action() {
            PeerAction::Reject(reason) => {
                // The command is over: answer it too, so the initiator does not wait forever.
                let sense = aborted_command_sense(0x0c, 0x0d);
                self.finish_command(itt, ScsiStatus::CheckCondition, &sense);
                self.send_reject(reason, Bytes::new());
                Flow::Continue
            }
            PeerAction::CheckCondition { asc, ascq } => {
                let sense = aborted_command_sense(asc, ascq);
                self.finish_command(itt, ScsiStatus::CheckCondition, &sense);
                Flow::Continue
            }
            PeerAction::Close => Flow::Stop(End::Protocol("data sequence error")),
        }
    }

    /// Ends a command early with a status (no data).
    fn finish_command(&mut self, itt: Itt, status: ScsiStatus, sense: &[u8]) {
        let rsp = sluice_proto::task::scsi_response(
            itt,
            status,
            sluice_proto::task::Residual::None,
            0,
            sense,
        );
        self.send(Pdu::ScsiResponse(rsp));
        self.window.complete();
    }

    /// Runs a command and sends its Data-In and status.
    async fn execute(&mut self, exec: Execution, write: Option<TargetWrite>) -> Flow {
        let Some(target) = self.target else {
            return Flow::Continue;
        };
        let blocking = target.blocking_luns.contains(&exec.lun.0);
        let mut buf = std::mem::take(&mut self.data_in_buf);
        let want = exec.data_in_len();
        if want > 0 && want <= DATA_IN_REFILL && buf.capacity() < want {
            // Data built in the buffer leaves as slices of it; give it room for many small
            // answers at once, so that refilling (one allocation, and one more when the first
            // slice is shared) happens once per 64 KiB rather than once per command.
            buf = BytesMut::with_capacity(DATA_IN_REFILL);
        }
        let (result, data_in) = if blocking {
            let scsi = Arc::clone(&target.scsi);
            let nexus = self.nexus;
            match tokio::task::spawn_blocking(move || exec.run(&scsi, nexus, buf)).await {
                Ok(r) => r,
                Err(e) => {
                    warn!(error = %e, "command execution panicked");
                    return Flow::Stop(End::Protocol("internal error"));
                }
            }
        } else {
            exec.run(&target.scsi, self.nexus, buf)
        };
        self.send_result(result, data_in, write);
        self.window.complete();
        Flow::Continue
    }

    fn handle_nop_out(&mut self, n: NopOut) -> Flow {
        if n.ttt != Ttt::RESERVED {
            // The answer to our NOP-In ping (RFC 7143 section 11.18.2); receiving it already
            // counted as a sign of life.
            return Flow::Continue;
        }
        if n.itt == Itt::RESERVED {
            // A NOP-Out that wants no answer.
            return Flow::Continue;
        }
        // Section 11.19: the NOP-In answer echoes the ITT and the ping data.
        let nop = NopIn {
            lun: n.lun,
            itt: n.itt,
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            data: n.data,
        };
        self.send(Pdu::NopIn(nop));
        Flow::Continue
    }

    /// Target shutdown: ask the initiator to log out (Async Message, AsyncEvent 1) and keep
    /// serving until it does or the grace period ends (RFC 7143 section 11.9.1).
    async fn begin_shutdown(&mut self) -> Flow {
        if self.session_type == SessionType::Discovery {
            return Flow::Stop(End::Shutdown);
        }
        let grace = self.ctx.config.limits.shutdown_grace;
        self.logout_requested = Some(Instant::now() + grace);
        let msg = AsyncMessage {
            lun: Lun(0),
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            async_event: AsyncEvent::LogoutRequested,
            async_vcode: 0,
            parameter1: 0,
            parameter2: 0,
            // Parameter3: seconds the initiator has to log out.
            parameter3: u16::try_from(grace.as_secs()).unwrap_or(u16::MAX).max(1),
            data: Bytes::new(),
        };
        self.send(Pdu::AsyncMessage(msg));
        match self.outbox.write_now() {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop(End::Io),
        }
    }

    /// The earliest of the logout grace deadline and the keepalive timer's.
    fn next_deadline(&self) -> Option<Instant> {
        let ping = self
            .keepalive
            .as_ref()
            .map(|k| Instant::from_std(k.poll_timeout()));
        match (self.logout_requested, ping) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_deadline(&mut self) -> Flow {
        let now = Instant::now();
        if self.logout_requested.is_some_and(|d| now >= d) {
            return Flow::Stop(End::Shutdown);
        }
        let Some(k) = self.keepalive.as_mut() else {
            return Flow::Continue;
        };
        match k.handle_timeout(now.into_std()) {
            KeepaliveAction::Nothing => Flow::Continue,
            KeepaliveAction::Dead => Flow::Stop(End::KeepaliveTimeout),
            KeepaliveAction::Ping(tag) => {
                // A ping the initiator must answer: ITT reserved, TTT set (section 11.19.1).
                let nop = NopIn {
                    lun: Lun(0),
                    itt: Itt::RESERVED,
                    ttt: Ttt(tag),
                    stat_sn: SeqNum(0),
                    exp_cmd_sn: SeqNum(0),
                    max_cmd_sn: SeqNum(0),
                    data: Bytes::new(),
                };
                self.send(Pdu::NopIn(nop));
                match self.outbox.write_now() {
                    Ok(()) => Flow::Continue,
                    Err(_) => Flow::Stop(End::Io),
                }
            }
        }
    }

    /// Rejects a PDU, quoting its header (RFC 7143 section 11.17).
    pub(crate) fn reject_pdu(&mut self, reason: RejectReason, pdu: &Pdu) {
        let mut header = BytesMut::new();
        sluice_proto::framing::encode(pdu, sluice_proto::framing::Digests::NONE, &mut header);
        header.truncate(sluice_proto::pdu::BHS_LEN);
        self.send_reject(reason, header.freeze());
    }

    pub(crate) fn send_reject(&mut self, reason: RejectReason, header: Bytes) {
        let r = Reject {
            reason,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
            data_sn: 0,
            data: header,
        };
        self.send(Pdu::Reject(r));
    }

    /// Stamps StatSN, ExpCmdSN and MaxCmdSN into a target PDU and queues it. StatSN advances
    /// for every PDU that carries status (RFC 7143 section 4.2.2.2).
    pub(crate) fn send(&mut self, mut pdu: Pdu) {
        let exp = self.window.exp_cmd_sn();
        let max = self.window.max_cmd_sn();
        let stat_sn = self.stat_sn;
        let advance = match &mut pdu {
            Pdu::ScsiResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::DataIn(p) => {
                (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max);
                if p.status_present {
                    p.stat_sn = stat_sn;
                }
                p.status_present
            }
            Pdu::R2t(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                false
            }
            Pdu::NopIn(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                // Section 11.19.2: StatSN is not advanced for a NOP-In with a reserved ITT.
                p.itt != Itt::RESERVED
            }
            Pdu::TaskMgmtResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::TextResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::LogoutResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::AsyncMessage(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::Reject(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            _ => false,
        };
        if advance {
            self.stat_sn = self.stat_sn.next();
        }
        self.outbox.push(&pdu);
    }

    pub(crate) fn recycle_data_in(&mut self, buf: BytesMut) {
        self.data_in_buf = buf;
    }
}

/// CmdSN and the I bit of a command PDU.
fn command_numbering(pdu: &Pdu) -> (SeqNum, bool) {
    match pdu {
        Pdu::ScsiCommand(p) => (p.cmd_sn, p.immediate),
        Pdu::NopOut(p) => (p.cmd_sn, p.immediate),
        Pdu::TaskMgmtRequest(p) => (p.cmd_sn, p.immediate),
        Pdu::TextRequest(p) => (p.cmd_sn, p.immediate),
        Pdu::LogoutRequest(p) => (p.cmd_sn, p.immediate),
        _ => (SeqNum(0), true),
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending::<()>().await,
    }
}

/// Whether an initiator that sent a command carrying `exp_stat_sn` had seen every status up to
/// our next StatSN `stat_sn`, i.e. waits for answers rather than pipelining (see
/// `FullFeature::peer_waits`).
///
/// The difference counts statuses sent that it had not seen. More than `queue_depth` (the
/// most it can have outstanding) means it does not track ExpStatSN at all (libiscsi 1.19 stops
/// updating it once StatSN passes 2^31): nothing is known then, and the answer is `true`, which
/// keeps busy polling as it was before this signal existed.
fn initiator_waits(stat_sn: SeqNum, exp_stat_sn: SeqNum, queue_depth: u32) -> bool {
    let unseen = stat_sn.0.wrapping_sub(exp_stat_sn.0);
    unseen == 0 || unseen > queue_depth
}

#[cfg(test)]
mod initiator_waits_tests {
    use super::*;

    #[test]
    fn only_an_initiator_that_saw_every_status_waits() {
        assert!(initiator_waits(SeqNum(100), SeqNum(100), 128));
        assert!(!initiator_waits(SeqNum(101), SeqNum(100), 128));
        assert!(!initiator_waits(SeqNum(228), SeqNum(100), 128));
    }

    #[test]
    fn counts_across_the_wrap() {
        assert!(initiator_waits(SeqNum(3), SeqNum(3), 128));
        assert!(!initiator_waits(SeqNum(2), SeqNum(u32::MAX - 4), 128));
    }

    #[test]
    fn an_initiator_that_does_not_track_exp_stat_sn_is_not_judged() {
        // libiscsi 1.19 past 2^31: ExpStatSN stuck at 1.
        assert!(initiator_waits(SeqNum(0x9000_0000), SeqNum(1), 128));
        // ExpStatSN ahead of StatSN (a confused initiator): also unknown.
        assert!(initiator_waits(SeqNum(100), SeqNum(105), 128));
    }
}
