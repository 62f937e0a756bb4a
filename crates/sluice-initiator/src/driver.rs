//! The tokio driver around the sans-IO session core (`sluice_proto::initiator`): one task per
//! connection owns its socket, the core sits behind a lock the session's tasks and handles
//! share (never held across an `.await`), and completions go to the waiting callers through
//! oneshot channels.
//!
//! A connection task reads bytes, frames PDUs and hands them to the core, writes what the core
//! queued for its connection, sleeps until the core's next deadline, and wakes the other
//! connections' tasks when the core queued something for them. Every protocol decision is
//! the core's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::{BufMut, BytesMut};
use rustc_hash::FxHashMap;
use sluice_proto::initiator::{
    Completion, ConnId, Event, Failure, InitiatorSession, RequestId, TaskId,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::{ScsiStatus, TmfResponse};
use sluice_proto::seq::Isid;
use sluice_proto::timer::TimerArm;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::counters::Counters;
use crate::error::Error;
use crate::options::ConnectOptions;
use crate::placement::Placing;
use crate::transport::{Link, Transport};

/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 256 * 1024;
/// How long a closing connection may take to send what was queued last (see
/// `ConnectionTask::before_close`).
const CLOSE_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);
/// Completed bytes after which a connection task yields to its callers (see
/// `completed_since_yield`): once per large command, once per many small ones.
const YIELD_AFTER_BYTES: u64 = 256 * 1024;

/// Where a finished request's result goes.
pub(crate) enum Waiter {
    Command(oneshot::Sender<Result<sluice_proto::initiator::CommandResult, Error>>),
    TaskMgmt(oneshot::Sender<Result<TmfResponse, Error>>),
    Ping(oneshot::Sender<Result<std::time::Duration, Error>>),
    Text(oneshot::Sender<Result<Vec<(String, String)>, Error>>),
    Logout(oneshot::Sender<Result<(), Error>>),
}

/// Waiters by what they wait for.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub(crate) enum Key {
    Task(TaskId),
    Request(RequestId),
}

/// What the session's users can read about it.
#[derive(Clone, Debug)]
pub(crate) struct Info {
    pub(crate) params: SessionParams,
    pub(crate) tsih: u16,
    pub(crate) portal: String,
    pub(crate) target_alias: Option<String>,
    /// What the leading connection settled of iSER, which joining connections follow.
    pub(crate) iser: Option<sluice_proto::iser::login::JoinedSession>,
}

/// Messages to the session's supervisor (connection management).
#[derive(Debug)]
pub(crate) enum ToSupervisor {
    /// The core asked for session reinstatement.
    Reinstate,
    /// The core asked for a connection with this CID to replace a failed one
    /// (ErrorRecoveryLevel 2).
    RecoverConnection(u16),
    /// A connection task ended.
    ConnectionEnded,
    /// The session is over.
    Ended,
}

#[derive(Debug)]
struct ConnEntry {
    id: ConnId,
    wake: Arc<Notify>,
    /// The core closed this connection: the task flushes and ends.
    close: Arc<AtomicBool>,
}

/// Everything a session's tasks and handles share.
pub(crate) struct Shared {
    core: Mutex<InitiatorSession>,
    /// Keys are ids the session core hands out, not peer input: a fast unkeyed hash will do.
    waiters: Mutex<FxHashMap<Key, Waiter>>,
    conns: Mutex<Vec<ConnEntry>>,
    pub(crate) counters: Counters,
    pub(crate) info: Mutex<Info>,
    pub(crate) opts: ConnectOptions,
    pub(crate) target: String,
    pub(crate) isid: Isid,
    pub(crate) supervisor: mpsc::UnboundedSender<ToSupervisor>,
    /// Why the last connection attempt failed, for [`Error::ConnectionLost`].
    pub(crate) last_error: Mutex<(u32, String)>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        core: InitiatorSession,
        info: Info,
        opts: ConnectOptions,
        target: String,
        isid: Isid,
        counters: Counters,
        supervisor: mpsc::UnboundedSender<ToSupervisor>,
    ) -> Self {
        Self {
            core: Mutex::new(core),
            waiters: Mutex::new(FxHashMap::default()),
            conns: Mutex::new(Vec::new()),
            counters,
            info: Mutex::new(info),
            opts,
            target,
            isid,
            supervisor,
            last_error: Mutex::new((0, String::new())),
        }
    }

    /// The core. Lock order: core, then waiters, then conns.
    pub(crate) fn lock(&self) -> MutexGuard<'_, InitiatorSession> {
        // Every core method keeps its invariants before returning: a poisoned lock is usable.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn waiters(&self) -> MutexGuard<'_, FxHashMap<Key, Waiter>> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conns(&self) -> MutexGuard<'_, Vec<ConnEntry>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits a request to the core and registers who waits for it, then does what the core
    /// asks (under the same lock, so its completion cannot be missed).
    pub(crate) fn call<T>(
        &self,
        submit: impl FnOnce(&mut InitiatorSession, Instant) -> Key,
        waiter: impl FnOnce(oneshot::Sender<T>) -> Waiter,
    ) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let mut core = self.lock();
        let key = submit(&mut core, Instant::now());
        self.waiters().insert(key, waiter(tx));
        self.after(&mut core, None);
        drop(core);
        rx
    }

    /// Submits a command; its id, and where its result arrives.
    pub(crate) fn submit(
        &self,
        cmd: sluice_proto::initiator::Command,
    ) -> (
        TaskId,
        oneshot::Receiver<Result<sluice_proto::initiator::CommandResult, Error>>,
    ) {
        let (tx, rx) = oneshot::channel();
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let mut core = self.lock();
        let id = core.submit(cmd, Instant::now());
        self.waiters().insert(Key::Task(id), Waiter::Command(tx));
        self.after(&mut core, None);
        drop(core);
        (id, rx)
    }

    /// After any call into the core: completions to their waiters, events acted on, and the
    /// connections with something to send (other than `me`) woken. Returns the payload bytes
    /// of the commands that completed.
    pub(crate) fn after(&self, core: &mut InitiatorSession, me: Option<ConnId>) -> u64 {
        let mut completed = 0;
        while let Some(c) = core.poll_completion() {
            completed += self.deliver(c, core);
        }
        while let Some(e) = core.poll_event() {
            match e {
                Event::Close(conn, reason) => {
                    tracing::debug!(?conn, %reason, "closing connection");
                    if let Some(c) = self.conns().iter().find(|c| c.id == conn) {
                        c.close.store(true, Ordering::Release);
                        c.wake.notify_one();
                    }
                }
                Event::Reinstate => {
                    let _ = self.supervisor.send(ToSupervisor::Reinstate);
                }
                Event::RecoverConnection { cid } => {
                    let _ = self.supervisor.send(ToSupervisor::RecoverConnection(cid));
                }
                Event::Ended => {
                    let _ = self.supervisor.send(ToSupervisor::Ended);
                }
            }
        }
        for c in self.conns().iter() {
            if Some(c.id) != me && core.has_transmit(c.id) {
                c.wake.notify_one();
            }
        }
        completed
    }

    fn deliver(&self, c: Completion, core: &InitiatorSession) -> u64 {
        let key = match &c {
            Completion::Command(id, _) => Key::Task(*id),
            Completion::TaskMgmt(id, _)
            | Completion::Ping(id, _)
            | Completion::Text(id, _)
            | Completion::Logout(id, _) => Key::Request(*id),
        };
        let mut moved = 0;
        if let Completion::Command(_, result) = &c {
            let ok = matches!(result, Ok(r) if r.status == ScsiStatus::Good);
            let (latency, read, written) = match result {
                Ok(r) => (
                    r.latency,
                    r.data.len() as u64,
                    if ok { r.written } else { 0 },
                ),
                Err(_) => (std::time::Duration::ZERO, 0, 0),
            };
            self.counters.completed(ok, latency, read, written);
            self.counters.lock().max_in_flight = core.stats().max_in_flight;
            moved = read + written;
        }
        let Some(waiter) = self.waiters().remove(&key) else {
            return moved;
        };
        let err = |f: Failure| self.error(f);
        // A waiter that went away (its future was dropped) is not an error.
        match (waiter, c) {
            (Waiter::Command(tx), Completion::Command(_, r)) => drop(tx.send(r.map_err(err))),
            (Waiter::TaskMgmt(tx), Completion::TaskMgmt(_, r)) => drop(tx.send(r.map_err(err))),
            (Waiter::Ping(tx), Completion::Ping(_, r)) => drop(tx.send(r.map_err(err))),
            (Waiter::Text(tx), Completion::Text(_, r)) => drop(tx.send(r.map_err(err))),
            (Waiter::Logout(tx), Completion::Logout(_, r)) => drop(tx.send(r.map_err(err))),
            _ => {}
        }
        moved
    }

    /// A core failure in the crate's error type.
    fn error(&self, f: Failure) -> Error {
        match f {
            Failure::Rejected(reason) => Error::Rejected(reason),
            Failure::Aborted => Error::Aborted,
            Failure::Task(e) => Error::Task(e),
            Failure::TargetFailure(r) => Error::TargetFailure(r),
            Failure::ConnectionLost => {
                let (attempts, last) = self
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                Error::ConnectionLost { attempts, last }
            }
            Failure::TooManyRetries => Error::ConnectionLost {
                attempts: self.opts.max_retries,
                last: "command retried too often".into(),
            },
            Failure::Closed => Error::Closed,
            Failure::BadText => Error::Protocol("bad Text Response".into()),
            Failure::Logout(code) => Error::Protocol(format!("logout refused: {code}")),
            _ => Error::Protocol(f.to_string()),
        }
    }

    /// Starts the task of a logged-in connection the core knows as `id`.
    pub(crate) fn spawn_connection(self: &Arc<Self>, id: ConnId, transport: Transport) {
        let wake = Arc::new(Notify::new());
        let close = Arc::new(AtomicBool::new(false));
        self.conns().push(ConnEntry {
            id,
            wake: Arc::clone(&wake),
            close: Arc::clone(&close),
        });
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let mut task = ConnectionTask {
                shared,
                id,
                t: transport,
                wake,
                close,
                completed_since_yield: 0,
            };
            let end = task.run().await;
            task.finish(end).await;
        });
    }

    /// Number of connection tasks running.
    pub(crate) fn connection_tasks(&self) -> usize {
        self.conns().len()
    }
}

/// One connection's task.
struct ConnectionTask {
    shared: Arc<Shared>,
    id: ConnId,
    t: Transport,
    wake: Arc<Notify>,
    close: Arc<AtomicBool>,
    /// Bytes moved by commands completed since the task last let other tasks run.
    completed_since_yield: u64,
}

impl ConnectionTask {
    async fn run(&mut self) -> Result<(), Error> {
        if !matches!(self.t.link, Link::Tcp(_)) {
            return self.run_iser().await;
        }
        // The one timer, moved only as `arm` says (see `sluice_proto::timer`): the core's
        // deadline moves with nearly every PDU.
        let mut timer = std::pin::pin!(tokio::time::sleep(std::time::Duration::ZERO));
        let mut arm = TimerArm::new();
        let mut deadline = self.pump();
        loop {
            if let Some(at) = arm.update(deadline) {
                timer.as_mut().reset(at.into());
            }
            if self.close.load(Ordering::Acquire) {
                // Send what the core queued last (a Logout Response's answer, say), then end.
                return self.before_close(|t| t.t.flush()).await;
            }
            if self.t.faults.as_ref().is_some_and(|f| f.reset_due()) {
                // The fault test hook resets the connection once what it passed is out.
                let _ = self.t.flush().await;
                return Err(self.t.io(std::io::ErrorKind::ConnectionReset.into()));
            }
            let read_from = self.t.rbuf.len();
            let ev = {
                let Transport {
                    link,
                    rbuf,
                    out,
                    placing,
                    framer,
                    header_reads,
                    ..
                } = &mut self.t;
                let Link::Tcp(stream) = link else {
                    return Err(Error::Closed);
                };
                let (mut rd, mut wr) = stream.split();
                let want_write = !out.is_empty();
                let place = placing.as_mut().filter(|p| p.wants_data());
                let limit = if *header_reads {
                    crate::placement::HEADER_READ_BYTES
                } else {
                    usize::MAX
                };
                if place.is_none() {
                    // A PDU that is not placed is buffered whole: reserve the rest of it at
                    // once, so that it is not moved again by every read.
                    let rest = if rbuf.is_empty() {
                        0
                    } else {
                        framer.bytes_needed(rbuf)
                    };
                    rbuf.reserve(READ_CHUNK.max(rest));
                }
                // Every read and write is a span in a cost-probes build (a newtype that
                // only forwards otherwise).
                let mut rd = sluice_probe::ProbedIo(&mut rd);
                let mut wr = sluice_probe::ProbedIo(&mut wr);
                tokio::select! {
                    biased;
                    () = self.wake.notified() => Ev::Wake,
                    w = out.write_some(&mut wr), if want_write => Ev::Wrote(w),
                    // Reading goes on however much waits to be written: a target that stops
                    // reading while its own answers wait (as sluice's does above 8 MiB) would
                    // otherwise wait for us forever while we wait for it (mixed 16 MiB reads
                    // and writes did). What reading adds to the queue is bounded without it:
                    // Data-Out only for writes already in flight, whose data the callers hold.
                    r = read_some(&mut rd, rbuf, limit, place) => Ev::Read(r),
                    () = timer.as_mut(), if arm.is_armed() => Ev::Timer,
                }
            };
            match ev {
                Ev::Read(Ok(0)) => {
                    return Err(self.t.io(std::io::ErrorKind::UnexpectedEof.into()));
                }
                Ev::Read(Ok(n)) => {
                    self.shared.counters.bytes_received(n);
                    if let Some(faults) = &mut self.t.faults {
                        faults.on_receive(&mut self.t.rbuf, read_from);
                    }
                    self.handle_received()?;
                    if self.completed_since_yield >= YIELD_AFTER_BYTES {
                        // While large Data-In streams in, the socket is rarely empty, so the
                        // callers woken by these completions (same thread) would wait for
                        // the coop budget to run out before issuing their next command: let
                        // them run now, so the queue depth stays where they set it.
                        self.completed_since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
                Ev::Read(Err(e)) | Ev::Wrote(Err(e)) => return Err(self.t.io(e)),
                Ev::Wrote(Ok(_)) => {
                    if !self.t.out.is_empty() {
                        // The socket took less than we had: its send buffer is full.
                        self.t.socket_full();
                    }
                }
                Ev::Wake => {}
                Ev::Timer => {
                    arm.fired();
                    let mut core = self.shared.lock();
                    core.handle_timeout(Instant::now());
                }
            }
            deadline = self.pump();
        }
    }

    /// [`Self::run`] over iSER in RDMA mode: PDUs go to the datamover task and come from it
    /// as values (see `crate::iser::IserLink`); no bytes are framed here.
    async fn run_iser(&mut self) -> Result<(), Error> {
        let mut timer = std::pin::pin!(tokio::time::sleep(std::time::Duration::ZERO));
        let mut arm = TimerArm::new();
        let mut deadline = self.pump();
        loop {
            if let Some(at) = arm.update(deadline) {
                timer.as_mut().reset(at.into());
            }
            if self.close.load(Ordering::Acquire) {
                // Hand over what the core queued last (the datamover sends it before it
                // sees the link close), then end.
                return self.before_close(Self::drain_iser).await;
            }
            if self.t.fault_reset_due() {
                // The fault test hook resets the connection, as over TCP.
                return Err(self.t.io(std::io::ErrorKind::ConnectionReset.into()));
            }
            let ev = {
                let Link::Iser(link) = &mut self.t.link else {
                    return Err(Error::Closed);
                };
                let blocked = link.blocked;
                tokio::select! {
                    biased;
                    () = self.wake.notified() => IserEv::Wake,
                    room = link.to_mover.reserve(), if blocked => IserEv::Room(room.is_ok()),
                    pdu = link.from_mover.recv() => IserEv::Received(pdu),
                    () = timer.as_mut(), if arm.is_armed() => IserEv::Timer,
                }
            };
            match ev {
                IserEv::Received(Some(pdu)) => {
                    self.handle_values(pdu);
                    if self.completed_since_yield >= YIELD_AFTER_BYTES {
                        // As over TCP: let the callers woken by these completions run.
                        self.completed_since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
                IserEv::Received(None) | IserEv::Room(false) => {
                    return Err(self.t.io(std::io::ErrorKind::UnexpectedEof.into()));
                }
                // The permit is dropped unused: `pump` takes the room again.
                IserEv::Room(true) | IserEv::Wake => {}
                IserEv::Timer => {
                    arm.fired();
                    let mut core = self.shared.lock();
                    core.handle_timeout(Instant::now());
                }
            }
            deadline = self.pump();
        }
    }

    /// Runs `last` (what sends the core's last PDUs) for at most [`CLOSE_FLUSH_LIMIT`]. The
    /// close may be because the peer stopped taking anything in (a command's deadline
    /// passed with its data stuck behind a full socket): waiting for it to read would keep the
    /// connection, and the session's recovery, waiting for ever.
    async fn before_close<'a, F>(
        &'a mut self,
        last: impl FnOnce(&'a mut Self) -> F,
    ) -> Result<(), Error>
    where
        F: std::future::Future<Output = Result<(), Error>> + 'a,
    {
        let res = tokio::time::timeout(CLOSE_FLUSH_LIMIT, last(self)).await;
        res.unwrap_or_else(|_| {
            tracing::debug!(
                limit = ?CLOSE_FLUSH_LIMIT,
                "closing without sending the rest: the peer took nothing in"
            );
            Ok(())
        })
    }

    /// The core closed this iSER connection: waits for room for what it still has for the
    /// datamover. PDUs arriving meanwhile are dropped (the connection is over for the core).
    async fn drain_iser(&mut self) -> Result<(), Error> {
        loop {
            let Link::Iser(link) = &mut self.t.link else {
                return Ok(());
            };
            if !link.blocked {
                return Ok(());
            }
            tokio::select! {
                room = link.to_mover.reserve() => {
                    if room.is_err() {
                        return Ok(());
                    }
                }
                pdu = link.from_mover.recv() => {
                    if pdu.is_none() {
                        return Ok(());
                    }
                }
            }
            self.pump();
        }
    }

    /// Hands `first` and the PDUs queued behind it on the iSER link (up to
    /// `crate::iser::LINK_BATCH`) to the core under one lock.
    fn handle_values(&mut self, first: sluice_proto::pdu::Pdu) {
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let shared = Arc::clone(&self.shared);
        let mut core = shared.lock();
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(pdu) = next.take() {
            self.t.note_value_received(&pdu);
            match self.t.fault_received_value(&pdu) {
                0 => {}
                1 => core.handle_pdu(self.id, pdu, Instant::now()),
                _ => {
                    core.handle_pdu(self.id, pdu.clone(), Instant::now());
                    core.handle_pdu(self.id, pdu, Instant::now());
                }
            }
            handled += 1;
            if self.t.fault_reset_due() {
                // The rest waits: the connection resets next (see `run_iser`).
                break;
            }
            if handled < crate::iser::LINK_BATCH {
                if let Link::Iser(link) = &mut self.t.link {
                    next = link.from_mover.try_recv().ok();
                }
            }
        }
        self.completed_since_yield += shared.after(&mut core, Some(self.id));
    }

    /// Hands every whole PDU in the receive buffer to the core (under one lock), finishing
    /// and starting in-place payloads (see `placement`).
    fn handle_received(&mut self) -> Result<(), Error> {
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let shared = Arc::clone(&self.shared);
        let mut core = shared.lock();
        let r =
            crate::placement::handle_received(&mut core, self.id, &mut self.t, &shared.counters);
        self.completed_since_yield += shared.after(&mut core, Some(self.id));
        r
    }

    /// Takes this connection's PDUs from the core into the send buffer and does what the
    /// core asks of the driver. Returns the core's next deadline.
    fn pump(&mut self) -> Option<Instant> {
        let _probe = sluice_probe::span(sluice_probe::Stage::Protocol);
        let shared = Arc::clone(&self.shared);
        let mut core = shared.lock();
        if let Link::Tcp(_) = self.t.link {
            while let Some(pdu) = core.poll_transmit(self.id) {
                self.t.queue(&pdu);
            }
        } else {
            self.t.pass_to_mover(&mut core, self.id);
        }
        self.completed_since_yield += shared.after(&mut core, Some(self.id));
        core.poll_timeout()
    }

    /// The connection ended (closed by the core, or lost): the core decides what follows.
    async fn finish(mut self, end: Result<(), Error>) {
        if let Err(e) = &end {
            tracing::debug!(error = %e, "connection lost");
            let mut last = self
                .shared
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            last.1 = e.to_string();
        }
        self.t.shutdown().await;
        self.shared.conns().retain(|c| c.id != self.id);
        {
            let shared = Arc::clone(&self.shared);
            let mut core = shared.lock();
            core.handle_connection_closed(self.id, Instant::now());
            shared.after(&mut core, None);
        }
        let _ = self.shared.supervisor.send(ToSupervisor::ConnectionEnded);
    }
}

/// Reads into the placed payload when there is one, else at most `limit` bytes into the
/// receive buffer. Cancel-safe like `read_buf`: the bytes are either all accounted or none
/// were read.
async fn read_some(
    rd: &mut (impl tokio::io::AsyncRead + Unpin),
    rbuf: &mut BytesMut,
    limit: usize,
    place: Option<&mut Placing>,
) -> std::io::Result<usize> {
    match place {
        Some(p) => {
            let n = rd.read_buf(&mut p.spare()).await?;
            p.landed(n, rbuf);
            Ok(n)
        }
        None => rd.read_buf(&mut rbuf.limit(limit)).await,
    }
}

/// What woke an iSER connection's task.
enum IserEv {
    /// A PDU from the datamover (`None`: the datamover ended).
    Received(Option<sluice_proto::pdu::Pdu>),
    /// Room on the link to the datamover (`false`: the datamover ended).
    Room(bool),
    Wake,
    Timer,
}

enum Ev {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Wake,
    Timer,
}
