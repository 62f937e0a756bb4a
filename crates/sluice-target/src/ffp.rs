//! Full feature phase of one connection: a thin loop around the session's sans-IO core
//! (`sluice_proto::target::TargetSession`), which decides every protocol rule.
//!
//! The loop reads PDUs and hands them to the core, runs the SCSI work the core asks for
//! (inline for memory, null and tmpfs LUNs; for LUs whose backend waits, disk files and RBD
//! images, and for commands that run long, concurrently on tokio's blocking pool, each in a
//! task of its own: `long_running`; but READ, WRITE and SYNCHRONIZE CACHE on a LU whose
//! backend completes operations by itself, RBD images, are planned here and awaited:
//! `device_io`), writes what the core stamped for this
//! connection, sleeps until the core's next deadline, and wakes
//! the tasks of the session's other connections when the core queued something for them. The
//! core sits behind a lock shared by the session's connections; it is never held across an
//! `.await`.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, StreamExt};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{Cdb, Pdu};
use sluice_proto::seq::Lun;
use sluice_proto::target::{
    CloseReason, ConnId, DataTransfer, Event, ResetKind, ScsiCompletion, ScsiWork,
    TargetSessionEnv, Ticket,
};
use sluice_proto::timer::TimerArm;
use sluice_scsi::{AbortSignal, DataOut, Delivery, Planned};
use tokio::sync::{watch, Notify};
use tokio::time::{Instant, Sleep};
use tracing::{debug, trace, warn};

use crate::connection::{Incoming, ReadEnd, Reader};
use crate::context::{Context, LunRuntime, TargetRuntime};
use crate::device_io::InFlight;
use crate::metrics::{ConnCounters, Finished, LuCounters};
use crate::outbox::Outbox;
use crate::sessions::SharedSession;

/// Answers queued below this many bytes wait for the rest of a batch of buffered commands
/// (see the end of `Connection::run`); above it they are written at once.
///
/// Large reads gain most from sharing a write: each `writev` pays a TCP push, a pacing
/// decision and, on loopback, the receiver's wake-up, whatever it carries, while the copy
/// into the socket costs the same per byte either way. With 64 KiB every 128 KiB answer
/// left in a write of its own; 1 MiB lets eight of them go together. Measured on a 2-vCPU
/// AMD EPYC guest, 128 KiB sequential reads at queue depth 32, alternating rounds: through
/// iscsi-perf 14K-21K → 27K-36K IOPS and target CPU 47-68 → 27-37 µs per read (BBR; CUBIC
/// alike), through `sluice bench` one core each 16K-19K → 28K-38K; 64 KiB reads 1.2-1.6x,
/// 16 KiB reads and 1 MiB reads (one answer already fills a write) within noise. The
/// eight-command limit below still splits small answers. See docs/performance.md.
const WRITE_BATCH_BYTES: usize = 1 << 20;

/// Most buffered commands answered in one write (see the end of `Connection::run`).
///
/// Answering a whole read's worth of commands at once locks a pipelining initiator into
/// step with us: it sends its queue depth of commands, waits while we answer all of them,
/// then we wait while it takes every answer and sends the next lot, so each side idles
/// while the other works. Answering every eighth command lets it take the first answers and
/// send new commands while we work on the rest. Measured with `sluice bench` against
/// `sluice target --threads 1`, one core each (2-vCPU Xeon guest, 4 KiB random I/O at queue
/// depth 32): reads 220K to 350K IOPS, writes 160K to 340K, and the target's core went from
/// 55-77 % busy to 97 %. Four commands cost more syscalls than they win (300K writes);
/// sixteen left queue depth 32 in step again. Depth 16 gained 20 %, depth 64 and 128
/// lost 3 %, depth 1 and 8 moved within noise.
const WRITE_BATCH_COMMANDS: usize = 8;

/// Room given to the recycled Data-In buffer when a read up to this size finds too little
/// spare capacity in it (see `execute`).
const DATA_IN_REFILL: usize = 64 * 1024;

/// Why full feature phase ended.
#[derive(Debug)]
pub(crate) enum End {
    /// The session core closed the connection.
    Closed(CloseReason),
    /// The initiator closed the connection.
    PeerClosed,
    /// Socket error.
    Io,
    /// The byte stream could not be framed.
    Framing,
    /// The fault test hook reset the connection.
    FaultReset,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed(reason) => reason.fmt(f),
            End::PeerClosed => f.write_str("initiator closed the connection"),
            End::Io => f.write_str("socket error"),
            End::Framing => f.write_str("unrecoverable framing error"),
            End::FaultReset => f.write_str("reset by the fault test hook"),
        }
    }
}

/// One connection in full feature phase.
pub(crate) struct Connection<'a> {
    pub ctx: &'a Arc<Context>,
    pub session: Arc<SharedSession>,
    pub id: ConnId,
    pub outbox: &'a mut Outbox,
    pub wake: Arc<Notify>,
    pub shutdown: watch::Receiver<bool>,
    target: Option<&'a TargetRuntime>,
    /// The target's LUs as of `luns_generation` (see `TargetRuntime::generation`).
    luns: Arc<[Arc<LunRuntime>]>,
    luns_generation: u64,
    /// Counters of the LUs this connection ran commands on; given to the LUs' totals when
    /// the connection ends.
    lu_slots: Vec<LuSlot>,
    /// Its PDU counters.
    counters: Arc<ConnCounters>,
    data_in_buf: BytesMut,
    /// The core asked to close this connection once its queue is sent.
    closing: Option<CloseReason>,
    /// The one timer, moved only as `timer_arm` says (see `sluice_proto::timer`).
    timer: Pin<Box<Sleep>>,
    timer_arm: TimerArm,
    /// See `TargetSession::peer_waits`: busy polling only pays for initiators that wait for
    /// each answer (docs/performance.md, "Busy polling").
    peer_waits: bool,
    shutting_down: bool,
    /// Commands whose device operation is in flight (`device_io`), polled by this task.
    in_flight: InFlight,
}

/// This connection's counters for one LU.
struct LuSlot {
    lun: Arc<LunRuntime>,
    counters: Arc<LuCounters>,
    /// Whether `lun` is still served (a LU removed and added again is another LU).
    current: bool,
}

impl Drop for Connection<'_> {
    fn drop(&mut self) {
        if !self.in_flight.is_empty() {
            let in_flight = std::mem::take(&mut self.in_flight);
            crate::device_io::drain(Arc::clone(self.ctx), Arc::clone(&self.session), in_flight);
        }
        for slot in &self.lu_slots {
            slot.lun.metrics.retire(&slot.counters);
        }
    }
}

/// What woke the loop.
enum Input {
    Pdu(Pdu),
    FrameError(sluice_proto::framing::FrameError),
    /// A command's device operation completed (`device_io`).
    Completed(Ticket, ScsiCompletion),
    Wake,
    Shutdown,
    Deadline,
}

/// The loop's input for what the reader produced, or why the connection ends.
fn input_of(read: Result<Incoming, ReadEnd>) -> Result<Input, End> {
    match read {
        Ok(Incoming::Pdu(pdu)) => Ok(Input::Pdu(pdu)),
        Ok(Incoming::Reject(e)) => Ok(Input::FrameError(e)),
        Err(ReadEnd::Closed) => Err(End::PeerClosed),
        Err(ReadEnd::Io(e)) => {
            debug!(error = %e, "read failed");
            Err(End::Io)
        }
        Err(ReadEnd::Fatal(e)) => {
            warn!(error = %e, "unrecoverable framing error; closing");
            Err(End::Framing)
        }
    }
}

impl<'a> Connection<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctx: &'a Arc<Context>,
        target: Option<&'a TargetRuntime>,
        session: Arc<SharedSession>,
        id: ConnId,
        outbox: &'a mut Outbox,
        wake: Arc<Notify>,
        shutdown: watch::Receiver<bool>,
        counters: Arc<ConnCounters>,
    ) -> Self {
        let luns_generation = target.map_or(0, |t| t.generation.load(Ordering::Acquire));
        let luns = target.map_or_else(|| Arc::from(Vec::new()), TargetRuntime::luns);
        Self {
            ctx,
            session,
            id,
            outbox,
            wake,
            shutdown,
            target,
            luns,
            luns_generation,
            lu_slots: Vec::new(),
            counters,
            data_in_buf: BytesMut::new(),
            closing: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            timer_arm: TimerArm::new(),
            peer_waits: true,
            shutting_down: false,
            in_flight: InFlight::new(),
        }
    }

    /// Serves PDUs until the connection ends.
    pub(crate) async fn run(mut self, reader: &mut Reader) -> End {
        if let Err(end) = self.pump().await {
            return end;
        }
        loop {
            if let Some(reason) = self.closing {
                return End::Closed(reason);
            }
            if self.outbox.reset_due() {
                // What the hook passed before the reset goes out first, as through a proxy.
                let _ = self.outbox.flush().await;
                return End::FaultReset;
            }
            reader.spin_ok = (self.peer_waits || reader.polls_always())
                && !self.outbox.has_pending()
                && !self.shutting_down;
            let input = tokio::select! {
                biased;
                () = self.wake.notified() => Input::Wake,
                Some((ticket, done)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    Input::Completed(ticket, done)
                }
                _ = self.shutdown.changed(), if !self.shutting_down => Input::Shutdown,
                r = reader.next(), if !self.outbox.congested() => match input_of(r) {
                    Ok(input) => input,
                    Err(end) => return end,
                },
                w = self.outbox.write_some(), if self.outbox.has_pending() => {
                    if let Err(e) = w {
                        debug!(error = %e, "write failed");
                        return End::Io;
                    }
                    continue;
                }
                () = &mut self.timer, if self.timer_arm.is_armed() => Input::Deadline,
            };
            let now = Instant::now().into_std();
            let mut input = input;
            let mut batched = 0;
            loop {
                self.handle(input, now);
                batched += 1;
                if let Err(end) = self.pump().await {
                    return end;
                }
                // While the next command is already buffered, its answer can join this one's
                // in a single writev: a batch of commands read at once is answered with one
                // syscall and one TCP push, not one per command. A large queue goes out at
                // once regardless, so big reads keep streaming. The buffered commands are
                // taken here, not through the `select!` above: its wake-up, shutdown and
                // timer futures (each registering with a `Notify`) would be set up and torn
                // down again for every command. Those inputs wait until the batch is
                // answered, at most the commands one read brought in (`now` is when the batch
                // was read). A batch ends at WRITE_BATCH_COMMANDS, so that a pipelining
                // initiator works on the first answers while we work on the rest.
                if self.closing.is_some()
                    || batched >= WRITE_BATCH_COMMANDS
                    || self.outbox.queued_bytes() >= WRITE_BATCH_BYTES
                    || self.outbox.reset_due()
                {
                    break;
                }
                match reader.next_buffered().map(input_of) {
                    Some(Ok(next)) => input = next,
                    Some(Err(end)) => return end,
                    None => break,
                }
            }
            if let Err(e) = self.outbox.write_now() {
                debug!(error = %e, "write failed");
                return End::Io;
            }
        }
    }

    /// Hands one input to the session's core, at `now`.
    fn handle(&mut self, input: Input, now: std::time::Instant) {
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let session = Arc::clone(&self.session);
        let mut env = self.env();
        let mut core = session.lock();
        match input {
            Input::Pdu(pdu) => {
                trace!(opcode = pdu.opcode(), itt = ?pdu.itt(), "received");
                self.counters.received(&pdu);
                core.handle_pdu(self.id, pdu, now, &mut env);
            }
            Input::FrameError(e) => {
                debug!(error = %e, "rejecting PDU");
                self.counters.frame_error(&e);
                core.handle_frame_error(self.id, &e, now, &mut env);
            }
            Input::Completed(ticket, done) => {
                core.handle_completion(ticket, done, &mut env);
                // Every other completion that is ready joins this one's answer.
                while let Some(Some((ticket, done))) = self.in_flight.next().now_or_never() {
                    core.handle_completion(ticket, done, &mut env);
                }
            }
            Input::Wake => {}
            Input::Shutdown => {
                self.shutting_down = true;
                let grace = self.ctx.config().limits.shutdown_grace;
                core.request_logout(now, grace);
            }
            Input::Deadline => {
                self.timer_arm.fired();
                core.handle_timeout(now, &mut env);
            }
        }
        session.long_running.abort_abandoned(&core);
    }

    /// Runs the SCSI work the core asked for, then takes this connection's PDUs and events
    /// and wakes the other connections that have some.
    async fn pump(&mut self) -> Result<(), End> {
        // One lock of the core per command run here, taken for its result and kept to ask for
        // the next command (and, after the last, for this connection's PDUs), rather than
        // one to ask, one to answer and two more at the end.
        let session = Arc::clone(&self.session);
        let mut env = self.env();
        let polling = sluice_probe::span(sluice_probe::Stage::Protocol);
        let mut core = session.lock();
        polling.close();
        while let Some(work) = core.poll_work() {
            drop(core);
            let done = self.run_work(work);
            let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
            core = session.lock();
            if let Some((ticket, completion)) = done {
                core.handle_completion(ticket, completion, &mut env);
            }
        }
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let mut cold_reset = false;
        while let Some(pdu) = core.poll_transmit(self.id) {
            self.counters.sent(&pdu);
            self.outbox.push(pdu);
        }
        while let Some(event) = core.poll_event(self.id) {
            match event {
                Event::Close(reason) => self.closing = Some(reason),
                Event::ColdReset => cold_reset = true,
            }
        }
        if let Some(at) = self.timer_arm.update(core.poll_timeout()) {
            self.timer.as_mut().reset(Instant::from_std(at));
        }
        self.peer_waits = core.peer_waits(self.id);
        if core.connections().nth(1).is_some() {
            // Only a session of several connections has others to wake.
            session.wake_others(self.id, &core);
        }
        drop(core);
        if cold_reset {
            self.close_other_sessions();
        }
        Ok(())
    }

    /// Runs one command the core asked for: here, returning its result for the core (after
    /// ending the tasks it aborts elsewhere), or handed off (planned on a submitting LU,
    /// spawned on the blocking pool), returning `None`. Called without the core's lock.
    fn run_work(&mut self, mut work: ScsiWork) -> Option<(Ticket, ScsiCompletion)> {
        let slot = match self.target {
            Some(target) => self.lu_slot(target, work.lun.0),
            None => None,
        };
        let runs_long = sluice_scsi::runs_long(&work.cdb);
        if let Some(target) = self.target {
            // Data dropped on arrival is for the synchronous path, which checks it is
            // still right for the LU; a planned write would need the bytes.
            if !runs_long
                && work.data_out.unkept().is_none()
                && slot.is_some_and(|i| self.lu_slots[i].lun.submits)
            {
                work = self.plan(target, work, slot)?;
            }
            if runs_long || self.runs_off_task(&work, slot) {
                let counters = slot.map(|i| Arc::clone(&self.lu_slots[i].counters));
                crate::long_running::spawn(
                    Arc::clone(self.ctx),
                    Arc::clone(&self.session),
                    Arc::clone(&target.scsi),
                    work,
                    counters,
                    runs_long,
                );
                return None;
            }
        }
        let (ticket, lun) = (work.ticket, work.lun);
        let (completion, aborts) = self.execute(&work, slot);
        drop(work);
        if !aborts.is_empty() {
            abort_other_tasks(self.ctx, &self.session, &aborts, lun, ticket);
        }
        Some((ticket, completion))
    }

    /// Whether `work` runs on the blocking pool beside the connection rather than on its
    /// task: every command of a LU whose backend waits (so that a deep queue keeps the disk
    /// or the cluster busy), and PERSISTENT RESERVE OUT when it may write and fsync the
    /// reservation state file (APTPL). Memory, null and tmpfs LUs answer on the task.
    #[inline]
    fn runs_off_task(&self, work: &ScsiWork, slot: Option<usize>) -> bool {
        slot.is_some_and(|i| self.lu_slots[i].lun.blocking)
            || (work.cdb.first() == Some(&sluice_scsi::cdb::opcode::PERSISTENT_RESERVE_OUT)
                && self.ctx.config().state_dir.is_some())
    }

    /// Runs one command on the SCSI layer, on this task (see `runs_off_task`).
    #[inline]
    fn execute(&mut self, work: &ScsiWork, slot: Option<usize>) -> (ScsiCompletion, Vec<u64>) {
        let Some(target) = self.target else {
            // Discovery sessions have no LUNs; the core never asks them to run a command.
            let done = ScsiCompletion {
                status: ScsiStatus::Good,
                sense: Bytes::new(),
                data: Bytes::new(),
            };
            return (done, Vec::new());
        };
        let mut buf = std::mem::take(&mut self.data_in_buf);
        let want = work.data_in_len as usize;
        if want > 0 && want <= DATA_IN_REFILL && buf.capacity() < want {
            // Data built in the buffer leaves as slices of it; give it room for many small
            // answers at once, so that refilling (one allocation, and one more when the first
            // slice is shared) happens once per 64 KiB rather than once per command.
            buf = BytesMut::with_capacity(DATA_IN_REFILL);
        }
        let nexus = self.session.nexus;
        let ((completion, aborts), buf) = {
            let _probe = sluice_probe::span(sluice_probe::Stage::Scsi);
            run(&target.scsi, nexus, work, buf, None)
        };
        self.data_in_buf = buf;
        if let Some(i) = slot {
            self.lu_slots[i].counters.record(&Finished {
                cdb: work.cdb.as_bytes(),
                read_bytes: (completion.data.len() as u64).min(u64::from(work.data_in_len)),
                write_bytes: work.data_out.len() as u64,
                status: completion.status,
                sense: &completion.sense,
                latency: Instant::now()
                    .into_std()
                    .saturating_duration_since(work.arrived),
            });
        }
        (completion, aborts)
    }

    /// A READ, WRITE or SYNCHRONIZE CACHE on a LU whose backend submits: planned on the SCSI
    /// layer and its device operation put in flight (`device_io`), or ended by its checks.
    /// Gives `work` back when the SCSI layer runs it on its synchronous path instead.
    // Kept out of `pump`, whose inlined body is the memory LU's path.
    #[inline(never)]
    fn plan(
        &mut self,
        target: &TargetRuntime,
        work: ScsiWork,
        slot: Option<usize>,
    ) -> Option<ScsiWork> {
        let nexus = self.session.nexus;
        match target
            .scsi
            .plan(nexus, work.lun.0, &work.cdb, work.data_out.len())
        {
            Planned::Io(plan) => {
                let counters = slot.map(|i| Arc::clone(&self.lu_slots[i].counters));
                let completing = crate::device_io::start(plan, work, counters);
                self.in_flight.push(completing);
                None
            }
            Planned::Done(result) => {
                let completion = crate::device_io::completion_of(&result, Bytes::new());
                self.finish_on_task(work, slot, completion);
                None
            }
            Planned::Execute => Some(work),
        }
    }

    /// Counts a command that ended on this task without running on the SCSI layer's
    /// synchronous path (planned, and ended by its checks), and gives its result to the core.
    fn finish_on_task(&mut self, work: ScsiWork, slot: Option<usize>, completion: ScsiCompletion) {
        if let Some(i) = slot {
            self.lu_slots[i].counters.record(&Finished {
                cdb: work.cdb.as_bytes(),
                read_bytes: 0,
                write_bytes: work.data_out.len() as u64,
                status: completion.status,
                sense: &completion.sense,
                latency: Instant::now()
                    .into_std()
                    .saturating_duration_since(work.arrived),
            });
        }
        let ticket = work.ticket;
        drop(work);
        let session = Arc::clone(&self.session);
        let mut env = self.env();
        session
            .lock()
            .handle_completion(ticket, completion, &mut env);
    }

    /// This connection's counter slot for the LU at `raw`, made on the LU's first command;
    /// `None` when no LU is there.
    fn lu_slot(&mut self, target: &TargetRuntime, raw: u64) -> Option<usize> {
        let generation = target.generation.load(Ordering::Acquire);
        if generation != self.luns_generation {
            self.luns = target.luns();
            self.luns_generation = generation;
            for slot in &mut self.lu_slots {
                slot.current = self.luns.iter().any(|l| Arc::ptr_eq(l, &slot.lun));
            }
        }
        if let Some(i) = self
            .lu_slots
            .iter()
            .position(|s| s.current && s.lun.raw == raw)
        {
            return Some(i);
        }
        let lun = self.luns.iter().find(|l| l.raw == raw)?;
        self.lu_slots.push(LuSlot {
            counters: lun.metrics.register(),
            lun: Arc::clone(lun),
            current: true,
        });
        Some(self.lu_slots.len() - 1)
    }

    /// TARGET COLD RESET: "the target MUST then close all of its TCP connections to all
    /// initiators" (RFC 7143 section 11.6.1); this session's connections close through the
    /// core already.
    fn close_other_sessions(&self) {
        for other in self.ctx.sessions.all() {
            if !Arc::ptr_eq(&other, &self.session) {
                other.close(CloseReason::ColdReset);
            }
        }
    }

    fn env(&self) -> DriverEnv<'a> {
        DriverEnv {
            ctx: self.ctx,
            target: self
                .target
                .map_or(TargetHandle::None, TargetHandle::Borrowed),
            session: Arc::clone(&self.session),
        }
    }
}

/// PREEMPT AND ABORT: before its status goes out, the tasks of the preempted I_T nexuses on
/// `lun` end (SPC-4 5.12.11.2.5), the preempting command (`ticket` of `mine`) excepted, and the
/// long-running commands among them are told to stop. Each session is locked on its own; no
/// lock is held here.
pub(crate) fn abort_other_tasks(
    ctx: &Context,
    mine: &Arc<SharedSession>,
    nexuses: &[u64],
    lun: Lun,
    ticket: sluice_proto::target::Ticket,
) {
    abort_tasks_of(ctx, nexuses, lun, Some((mine, ticket)));
}

/// Ends the tasks of `nexuses` on `lun` (PREEMPT AND ABORT through this process, or through
/// another gateway of the same LU), but the preempting command (`mine`, when it is this
/// process's).
pub(crate) fn abort_tasks_of(
    ctx: &Context,
    nexuses: &[u64],
    lun: Lun,
    mine: Option<(&Arc<SharedSession>, sluice_proto::target::Ticket)>,
) {
    for session in ctx.sessions.all() {
        if !nexuses.contains(&session.nexus) {
            continue;
        }
        let except = mine.and_then(|(m, ticket)| Arc::ptr_eq(&session, m).then_some(ticket));
        let is_mine = except.is_some();
        let aborted = {
            let mut core = session.lock();
            let aborted = core.abort_tasks_of_lun(lun, except);
            session.long_running.abort_abandoned(&core);
            aborted
        };
        debug!(
            nexus = session.nexus,
            aborted, "tasks aborted by PREEMPT AND ABORT"
        );
        if !is_mine {
            session.wake_all();
        }
    }
}

/// Runs a command against the SCSI layer; `buf` is a recycled Data-In buffer, returned for
/// the next command; `abort` stops a long-running one.
pub(crate) fn run(
    scsi: &sluice_scsi::ScsiTarget,
    nexus: u64,
    work: &ScsiWork,
    mut buf: BytesMut,
    abort: Option<&AbortSignal>,
) -> ((ScsiCompletion, Vec<u64>), BytesMut) {
    let mut shared = None;
    let delivery = Delivery {
        data_out: match work.data_out.unkept() {
            Some(n) => DataOut::Unkept(n),
            None => DataOut::Segments(work.data_out.segments()),
        },
        data_out_len: Some(u64::from(work.data_out_len)),
        abort,
    };
    let result = scsi.execute_with(
        nexus,
        work.lun.0,
        &work.cdb,
        delivery,
        &mut buf,
        &mut shared,
    );
    // A zero-copy read hands over the backend's bytes; everything else was built in the
    // recycled buffer, split off here (the buffer keeps its spare capacity for the next).
    let data = match shared {
        Some(b) => b,
        None => buf.split().freeze(),
    };
    let completion = ScsiCompletion {
        status: ScsiStatus::from(result.status),
        sense: result.sense_bytes().map(Bytes::from).unwrap_or_default(),
        data,
    };
    ((completion, result.abort_nexuses), buf)
}

/// What the core needs from the SCSI layer and the configuration, for one call.
pub(crate) struct DriverEnv<'a> {
    ctx: &'a Context,
    target: TargetHandle<'a>,
    session: Arc<SharedSession>,
}

/// A target's runtime, borrowed from a connection that holds it or held here.
enum TargetHandle<'a> {
    Borrowed(&'a TargetRuntime),
    Held(Arc<TargetRuntime>),
    None,
}

impl TargetHandle<'_> {
    fn get(&self) -> Option<&TargetRuntime> {
        match self {
            TargetHandle::Borrowed(t) => Some(t),
            TargetHandle::Held(t) => Some(t),
            TargetHandle::None => None,
        }
    }
}

impl<'a> DriverEnv<'a> {
    pub(crate) fn new(ctx: &'a Context, session: &Arc<SharedSession>) -> Self {
        let target = session.target.as_deref().and_then(|n| ctx.target(n));
        Self {
            ctx,
            target: target.map_or(TargetHandle::None, TargetHandle::Held),
            session: Arc::clone(session),
        }
    }
}

impl TargetSessionEnv for DriverEnv<'_> {
    fn transfer(&self, lun: Lun, cdb: &Cdb) -> DataTransfer {
        let Some(t) = self.target.get() else {
            return DataTransfer::None;
        };
        match t.scsi.transfer(lun.0, cdb) {
            sluice_scsi::Transfer::None => DataTransfer::None,
            sluice_scsi::Transfer::ToDevice(n) => DataTransfer::ToDevice(n),
            sluice_scsi::Transfer::FromDevice(n) => DataTransfer::FromDevice(n),
        }
    }

    fn keeps_data_out(&self, lun: Lun, cdb: &Cdb) -> bool {
        self.target
            .get()
            .is_none_or(|t| t.scsi.keeps_data_out(lun.0, cdb))
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        match (self.target.get(), sluice_scsi::decode_lun(lun.0)) {
            (Some(t), sluice_scsi::LunAddress::Lun(n)) => t.scsi.lu(n).is_some(),
            _ => false,
        }
    }

    fn reset(&mut self, kind: ResetKind) {
        let Some(t) = self.target.get() else {
            return;
        };
        let kind = match kind {
            ResetKind::LogicalUnit(lun) => sluice_scsi::ResetKind::LogicalUnit(lun.0),
            ResetKind::TargetWarm => sluice_scsi::ResetKind::TargetWarm,
            ResetKind::TargetCold => sluice_scsi::ResetKind::TargetCold,
        };
        tracing::info!(?kind, "task management reset");
        t.scsi.reset(kind, self.session.nexus);
    }

    fn commands_cleared(&mut self, lun: Lun) {
        if let Some(t) = self.target.get() {
            tracing::info!(
                lun = lun.0,
                "commands cleared: tasks of a failed connection were never reassigned"
            );
            t.scsi.commands_cleared(self.session.nexus, lun.0);
        }
    }

    fn send_targets(&mut self, conn: ConnId, query: &str) -> Vec<(String, String)> {
        let Some(local) = self.session.local(conn) else {
            return Vec::new();
        };
        let query = crate::discovery::Query::parse(query);
        let listeners = self
            .ctx
            .listeners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        crate::discovery::send_targets(
            &self.ctx.config(),
            &query,
            &self.session.initiator,
            self.session.target.as_deref(),
            local,
            &listeners,
        )
    }
}
