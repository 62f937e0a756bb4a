//! The full-feature driver: one tokio task owns the connection (no locks on the data path)
//! and serves the [`Session`](crate::Session) handles through a channel.
//!
//! Each loop turn does one of: read bytes and handle every whole PDU, write buffered bytes,
//! take a request, or fire the keepalive timer. Commands wait in `waiting` while the CmdSN
//! window is closed (RFC 7143 section 4.2.2.1). A lost connection at ErrorRecoveryLevel 0 is
//! recovered by session reinstatement: log in again with the same ISID and TSIH 0 (section
//! 6.3.5) and send the commands again, within [`ConnectOptions::max_reconnects`] and
//! [`ConnectOptions::max_retries`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::{LogoutReason, TmfFunction, TmfResponse};
use sluice_proto::pdu::{LogoutRequest, NopOut, Pdu, TaskMgmtRequest};
use sluice_proto::seq::{Isid, Itt, Lun, SeqNum, Ttt};
use sluice_proto::task::initiator::IttAllocator;
use sluice_proto::window::CmdSnAllocator;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::counters::Counters;
use crate::error::Error;
use crate::login::{login, LoggedIn};
use crate::options::ConnectOptions;
use crate::placement::{Placing, HEADER_READ_BYTES};
use crate::tasks::{Pending, Task};
use crate::transport::Transport;

/// Stop taking requests while this many bytes wait to be written.
const SEND_HIGH_WATER: usize = 8 << 20;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 256 * 1024;
/// Completed bytes after which the driver yields to its callers (see `completed_since_yield`):
/// once per large command, once per many small ones.
const YIELD_AFTER_BYTES: u64 = 256 * 1024;
/// Requests taken from the channel in one turn at most (its capacity is 1024).
const REQUEST_BATCH: usize = 256;

/// A request from a session handle.
pub(crate) enum Request {
    Command(Pending),
    TaskMgmt {
        function: TmfFunction,
        lun: u16,
        referenced: Itt,
        reply: oneshot::Sender<Result<TmfResponse, Error>>,
    },
    Ping(oneshot::Sender<Result<Duration, Error>>),
    Logout(oneshot::Sender<Result<(), Error>>),
}

/// What the handles can read about the session.
#[derive(Clone, Debug)]
pub(crate) struct Shared {
    pub(crate) params: SessionParams,
    pub(crate) tsih: u16,
    pub(crate) portal: String,
    pub(crate) target_alias: Option<String>,
}

enum Waiter {
    TaskMgmt(oneshot::Sender<Result<TmfResponse, Error>>),
    Ping(Option<oneshot::Sender<Result<Duration, Error>>>, Instant),
    Logout(Option<oneshot::Sender<Result<(), Error>>>),
}

pub(crate) enum Exit {
    /// Logged out or every handle dropped.
    Closed,
    /// The target asked for a logout (Async Message 1) and it is done: log in again.
    Relogin,
}

pub(crate) struct Driver {
    pub(crate) opts: ConnectOptions,
    pub(crate) target: String,
    pub(crate) isid: Isid,
    pub(crate) portal: String,
    pub(crate) conn: Transport,
    pub(crate) params: SessionParams,
    pub(crate) window: CmdSnAllocator,
    pub(crate) exp_stat_sn: SeqNum,
    pub(crate) itts: IttAllocator,
    pub(crate) tasks: HashMap<Itt, Task>,
    pub(crate) waiting: VecDeque<Pending>,
    waiters: HashMap<Itt, Waiter>,
    pub(crate) rx: mpsc::Receiver<Request>,
    pub(crate) counters: Counters,
    pub(crate) shared: Arc<Mutex<Shared>>,
    last_activity: Instant,
    handles_gone: bool,
    /// Bytes moved by commands completed since the driver last let other tasks run.
    completed_since_yield: u64,
}

impl Driver {
    pub(crate) fn new(
        logged: LoggedIn,
        opts: ConnectOptions,
        target: String,
        isid: Isid,
        rx: mpsc::Receiver<Request>,
        counters: Counters,
        shared: Arc<Mutex<Shared>>,
    ) -> Self {
        let o = &logged.outcome;
        Self {
            portal: logged.transport.portal.clone(),
            params: o.params,
            window: CmdSnAllocator::new(logged.cmd_sn, o.exp_cmd_sn, o.max_cmd_sn),
            exp_stat_sn: o.exp_stat_sn,
            conn: logged.transport,
            itts: IttAllocator::starting_at(1),
            tasks: HashMap::new(),
            waiting: VecDeque::new(),
            waiters: HashMap::new(),
            opts,
            target,
            isid,
            rx,
            counters,
            shared,
            last_activity: Instant::now(),
            handles_gone: false,
            completed_since_yield: 0,
        }
    }

    /// Runs until the session is closed or cannot be recovered.
    pub(crate) async fn run(mut self) {
        loop {
            let cause = match self.serve().await {
                Ok(Exit::Closed) => break,
                Ok(Exit::Relogin) => "target requested logout".to_owned(),
                Err(e) => e.to_string(),
            };
            tracing::debug!(%cause, "connection lost");
            if !self.reconnect(cause).await {
                break;
            }
        }
        let _ = self.conn.stream.shutdown().await;
        self.fail_all(|| Error::Closed);
    }

    async fn serve(&mut self) -> Result<Exit, Error> {
        // One timer for the connection, re-armed lazily: moving it on every read (activity
        // pushes the keepalive deadline) cost a timer-wheel removal and insertion per turn.
        let mut armed = self.timer_deadline();
        let sleep = tokio::time::sleep_until(armed.into());
        tokio::pin!(sleep);
        loop {
            self.issue_waiting();
            let logging_out = self
                .waiters
                .values()
                .any(|w| matches!(w, Waiter::Logout(_)));
            if self.handles_gone && self.tasks.is_empty() && self.waiting.is_empty() && !logging_out
            {
                self.logout(None);
            }
            let deadline = self.timer_deadline();
            if deadline < armed {
                // Earlier than armed (a ping went out): re-arm. A later deadline waits until
                // the armed one fires, and `handle_timer` finds nothing due yet.
                armed = deadline;
                sleep.as_mut().reset(armed.into());
            }
            let ev = {
                let Transport {
                    stream,
                    rbuf,
                    wbuf,
                    placing,
                    framer,
                    header_reads,
                    ..
                } = &mut self.conn;
                let (mut rd, mut wr) = stream.split();
                let want_write = !wbuf.is_empty();
                // Taking requests first must not starve the socket: stop while many wait for
                // the CmdSN window or for the writes.
                let accept = wbuf.len() < SEND_HIGH_WATER
                    && self.waiting.len() < REQUEST_BATCH
                    && !self.handles_gone;
                let place = placing.as_mut().filter(|p| p.wants_data());
                let limit = if *header_reads {
                    HEADER_READ_BYTES
                } else {
                    usize::MAX
                };
                if place.is_none() {
                    // A PDU that is not placed is buffered whole: reserve the rest of it at
                    // once, so that it is not moved again by every read while earlier PDUs
                    // still share the buffer.
                    let rest = if rbuf.is_empty() {
                        0
                    } else {
                        framer.bytes_needed(rbuf)
                    };
                    rbuf.reserve(READ_CHUNK.max(rest));
                }
                // Requests first (all of them are taken at once, see `Ev::Request`), then the
                // write, so that the commands issued in one turn leave in one system call.
                tokio::select! {
                    biased;
                    q = self.rx.recv(), if accept => Ev::Request(q),
                    w = wr.write_buf(wbuf), if want_write => Ev::Wrote(w),
                    r = read_some(&mut rd, rbuf, limit, place) => Ev::Read(r),
                    () = &mut sleep => Ev::Timer,
                }
            };
            match ev {
                Ev::Read(Ok(0)) => {
                    return Err(self.conn.io(std::io::ErrorKind::UnexpectedEof.into()))
                }
                Ev::Read(Ok(n)) => {
                    self.counters.bytes_received(n);
                    self.last_activity = Instant::now();
                    if let Some(exit) = self.handle_received()? {
                        return Ok(exit);
                    }
                    if self.completed_since_yield >= YIELD_AFTER_BYTES {
                        // While large Data-In streams in, the socket is rarely empty, so the
                        // callers woken by these completions (same thread) would wait for
                        // the coop budget to run out before issuing their next command: let
                        // them run now, so the queue depth stays where they set it.
                        self.completed_since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
                Ev::Read(Err(e)) | Ev::Wrote(Err(e)) => return Err(self.conn.io(e)),
                Ev::Wrote(Ok(_)) => {}
                Ev::Request(Some(req)) => {
                    self.handle_request(req);
                    // Every request already queued, up to the channel's capacity.
                    for _ in 1..REQUEST_BATCH {
                        match self.rx.try_recv() {
                            Ok(req) => self.handle_request(req),
                            Err(mpsc::error::TryRecvError::Empty) => break,
                            Err(mpsc::error::TryRecvError::Disconnected) => {
                                self.handles_gone = true;
                                break;
                            }
                        }
                    }
                }
                Ev::Request(None) => self.handles_gone = true,
                Ev::Timer => {
                    self.handle_timer()?;
                    armed = self.timer_deadline();
                    sleep.as_mut().reset(armed.into());
                }
            }
        }
    }

    fn timer_deadline(&self) -> Instant {
        let ping = self.waiters.values().find_map(|w| match w {
            Waiter::Ping(_, sent) => Some(*sent + self.opts.keepalive_timeout),
            _ => None,
        });
        match (ping, self.opts.keepalive_interval) {
            (Some(d), _) => d,
            (None, Some(i)) => self.last_activity + i,
            (None, None) => self.last_activity + Duration::from_secs(3600),
        }
    }

    fn handle_timer(&mut self) -> Result<(), Error> {
        let now = Instant::now();
        let overdue = self.waiters.values().any(
            |w| matches!(w, Waiter::Ping(_, sent) if now >= *sent + self.opts.keepalive_timeout),
        );
        if overdue {
            return Err(Error::Timeout("NOP-Out keepalive not answered"));
        }
        if self
            .opts
            .keepalive_interval
            .is_some_and(|i| now >= self.last_activity + i)
        {
            self.ping(None);
        }
        Ok(())
    }

    fn handle_request(&mut self, req: Request) {
        match req {
            Request::Command(p) => self.waiting.push_back(p),
            Request::TaskMgmt {
                function,
                lun,
                referenced,
                reply,
            } => {
                let itt = self.next_itt();
                // Section 11.5: TMF requests are sent immediate; RefCmdSN names the task.
                let ref_cmd_sn = self
                    .tasks
                    .get(&referenced)
                    .map_or(self.window.current(), |t| t.cmd_sn);
                let pdu = Pdu::TaskMgmtRequest(TaskMgmtRequest {
                    immediate: true,
                    function,
                    lun: Lun::from_number(lun),
                    itt,
                    referenced_task_tag: referenced,
                    cmd_sn: self.window.immediate(),
                    exp_stat_sn: self.exp_stat_sn,
                    ref_cmd_sn,
                    exp_data_sn: 0,
                });
                self.conn.queue(&pdu);
                self.waiters.insert(itt, Waiter::TaskMgmt(reply));
            }
            Request::Ping(reply) => self.ping(Some(reply)),
            Request::Logout(reply) => self.logout(Some(reply)),
        }
    }

    fn ping(&mut self, reply: Option<oneshot::Sender<Result<Duration, Error>>>) {
        let itt = self.next_itt();
        // Section 11.18: a ping that wants an answer has a real ITT and the reserved TTT.
        let pdu = Pdu::NopOut(NopOut {
            immediate: true,
            lun: Lun::default(),
            itt,
            ttt: Ttt::RESERVED,
            cmd_sn: self.window.immediate(),
            exp_stat_sn: self.exp_stat_sn,
            data: Default::default(),
        });
        self.conn.queue(&pdu);
        self.last_activity = Instant::now();
        self.waiters
            .insert(itt, Waiter::Ping(reply, Instant::now()));
    }

    pub(crate) fn logout(&mut self, reply: Option<oneshot::Sender<Result<(), Error>>>) {
        let itt = self.next_itt();
        let pdu = Pdu::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: LogoutReason::CloseSession,
            itt,
            cid: 0,
            cmd_sn: self.window.immediate(),
            exp_stat_sn: self.exp_stat_sn,
        });
        self.conn.queue(&pdu);
        self.waiters.insert(itt, Waiter::Logout(reply));
    }

    /// Sends waiting commands while the CmdSN window is open.
    fn issue_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let mut out = Vec::new();
        while !self.waiting.is_empty() && self.window.can_send() {
            let Some(cmd_sn) = self.window.next() else {
                break;
            };
            let Some(pending) = self.waiting.pop_front() else {
                break;
            };
            let itt = self.next_itt();
            let task = Task::start(pending, itt, cmd_sn, &self.params, &mut out);
            for pdu in out.drain(..) {
                self.send_stamped(pdu);
            }
            self.tasks.insert(itt, task);
        }
        let mut c = self.counters.lock();
        c.max_in_flight = c.max_in_flight.max(self.tasks.len() as u64);
    }

    /// Queues a PDU with the current ExpStatSN.
    pub(crate) fn send_stamped(&mut self, mut pdu: Pdu) {
        match &mut pdu {
            Pdu::ScsiCommand(p) => p.exp_stat_sn = self.exp_stat_sn,
            Pdu::DataOut(p) => p.exp_stat_sn = self.exp_stat_sn,
            Pdu::NopOut(p) => p.exp_stat_sn = self.exp_stat_sn,
            _ => {}
        }
        self.conn.queue(&pdu);
    }

    fn next_itt(&mut self) -> Itt {
        loop {
            let itt = self.itts.allocate();
            if !self.tasks.contains_key(&itt) && !self.waiters.contains_key(&itt) {
                return itt;
            }
        }
    }

    /// Ends a task and answers its caller.
    pub(crate) fn complete(&mut self, itt: Itt, result: Result<crate::CommandOutcome, Error>) {
        let Some(task) = self.tasks.remove(&itt) else {
            return;
        };
        let ok = result.as_ref().is_ok_and(|o| o.is_good());
        let read = result.as_ref().map_or(0, |o| o.data.len() as u64);
        let written = if ok { task.write_len() } else { 0 };
        // The outcome's latency was measured when it was built: no second clock read.
        let latency = match &result {
            Ok(o) => o.latency,
            Err(_) => task.pending.submitted.elapsed(),
        };
        self.counters.completed(ok, latency, read, written);
        self.completed_since_yield += read + written;
        let _ = task.pending.reply.send(result);
    }

    fn fail_all(&mut self, err: impl Fn() -> Error) {
        for (_, t) in self.tasks.drain() {
            let _ = t.pending.reply.send(Err(err()));
        }
        for p in self.waiting.drain(..) {
            let _ = p.reply.send(Err(err()));
        }
        for (_, w) in self.waiters.drain() {
            match w {
                Waiter::TaskMgmt(r) => drop(r.send(Err(err()))),
                Waiter::Ping(Some(r), _) => drop(r.send(Err(err()))),
                Waiter::Logout(Some(r)) => drop(r.send(Err(err()))),
                Waiter::Ping(None, _) | Waiter::Logout(None) => {}
            }
        }
        while let Ok(req) = self.rx.try_recv() {
            if let Request::Command(p) = req {
                let _ = p.reply.send(Err(err()));
            }
        }
    }

    /// Session reinstatement after a lost connection (section 6.3.5, ERL 0).
    async fn reconnect(&mut self, cause: String) -> bool {
        let mut last = cause;
        if self.opts.max_reconnects == 0 || self.handles_gone && self.tasks.is_empty() {
            self.fail_all(|| Error::ConnectionLost {
                attempts: 0,
                last: last.clone(),
            });
            return false;
        }
        for attempt in 1..=self.opts.max_reconnects {
            let delay = self
                .opts
                .reconnect_delay
                .unwrap_or(Duration::from_secs(u64::from(
                    self.params.default_time2wait,
                )));
            tokio::time::sleep(delay).await;
            match login(
                self.portal.clone(),
                Some(&self.target),
                self.isid,
                &self.opts,
                &self.counters,
            )
            .await
            {
                Ok(l) => {
                    self.adopt(l);
                    return true;
                }
                Err(e) => {
                    tracing::debug!(attempt, error = %e, "reconnect failed");
                    let fatal = e.login_status().is_some_and(|s| s.class == 2);
                    last = e.to_string();
                    if fatal {
                        break;
                    }
                }
            }
        }
        let attempts = self.opts.max_reconnects;
        self.fail_all(|| Error::ConnectionLost {
            attempts,
            last: last.clone(),
        });
        false
    }

    /// Takes over a new connection and queues the outstanding commands again, in CmdSN order.
    fn adopt(&mut self, l: LoggedIn) {
        let o = &l.outcome;
        self.params = o.params;
        self.window = CmdSnAllocator::new(l.cmd_sn, o.exp_cmd_sn, o.max_cmd_sn);
        self.exp_stat_sn = o.exp_stat_sn;
        if let Ok(mut s) = self.shared.lock() {
            s.params = o.params;
            s.tsih = o.tsih.0;
        }
        self.conn = l.transport;
        self.last_activity = Instant::now();
        let mut old: Vec<Task> = self.tasks.drain().map(|(_, t)| t).collect();
        old.sort_by(|a, b| {
            b.cmd_sn
                .serial_cmp(a.cmd_sn)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut retried = 0;
        for t in old {
            let mut p = t.pending;
            p.attempts += 1;
            if p.attempts > self.opts.max_retries + 1 {
                let _ = p.reply.send(Err(Error::ConnectionLost {
                    attempts: p.attempts - 1,
                    last: "command retried too often".into(),
                }));
            } else {
                retried += 1;
                self.waiting.push_front(p);
            }
        }
        for (_, w) in self.waiters.drain() {
            match w {
                Waiter::TaskMgmt(r) => drop(r.send(Err(Error::Closed))),
                Waiter::Ping(Some(r), _) => drop(r.send(Err(Error::Closed))),
                Waiter::Logout(Some(r)) => drop(r.send(Ok(()))),
                _ => {}
            }
        }
        let mut c = self.counters.lock();
        c.reconnects += 1;
        c.commands_retried += retried;
    }

    pub(crate) fn answer_ping(&mut self, itt: Itt) {
        if let Some(Waiter::Ping(Some(r), sent)) = self.waiters.remove(&itt) {
            let _ = r.send(Ok(sent.elapsed()));
        }
    }

    pub(crate) fn answer_tmf(&mut self, itt: Itt, response: TmfResponse) {
        if let Some(Waiter::TaskMgmt(r)) = self.waiters.remove(&itt) {
            let _ = r.send(Ok(response));
        }
    }

    /// A Logout Response: `Some(exit)` ends the connection.
    fn answer_logout(&mut self, itt: Itt) -> Option<Exit> {
        match self.waiters.remove(&itt) {
            Some(Waiter::Logout(Some(r))) => {
                let _ = r.send(Ok(()));
                Some(Exit::Closed)
            }
            Some(Waiter::Logout(None)) if self.handles_gone => Some(Exit::Closed),
            Some(Waiter::Logout(None)) => Some(Exit::Relogin),
            _ => None,
        }
    }

    pub(crate) fn handle_pdu(&mut self, pdu: Pdu) -> Result<Option<Exit>, Error> {
        if let Pdu::LogoutResponse(r) = &pdu {
            self.window.update(r.exp_cmd_sn, r.max_cmd_sn);
            return Ok(self.answer_logout(r.itt));
        }
        self.handle_ffp_pdu(pdu)?;
        Ok(None)
    }
}

/// Reads into the placed payload when there is one, else at most `limit` bytes into the
/// receive buffer. Cancel-safe like `read_buf`: the bytes are either all accounted or none
/// were read.
async fn read_some(
    rd: &mut tokio::net::tcp::ReadHalf<'_>,
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

enum Ev {
    Read(std::io::Result<usize>),
    Wrote(std::io::Result<usize>),
    Request(Option<Request>),
    Timer,
}
