//! The initiator's full feature phase as a sans-IO state machine (RFC 7143 sections 4.2, 7,
//! 10 and 11): one [`InitiatorSession`] per iSCSI session, holding its connections.
//!
//! Session-wide state lives here once: CmdSN numbering within the target's window (section
//! 4.2.2.1), the task table, commands waiting for room, and the requests that are not SCSI
//! commands (task management, pings, text, logout). Each connection keeps the ExpStatSN it
//! acknowledges (section 4.2.2.2), its negotiated digests and segment lengths, its keepalive
//! and its queue of PDUs to send. Commands go to connections by a [`Policy`]; each task stays
//! on the connection it was issued on (allegiance, section 4.2.4.1).
//!
//! # Driver contract
//!
//! The session never reads a clock, a socket or a disk. The driver:
//! - creates it from the leading login ([`InitiatorSession::new`]) and adds connections it
//!   logged in with the session's TSIH ([`InitiatorSession::add_connection`]);
//! - submits work from the application ([`InitiatorSession::submit`],
//!   [`InitiatorSession::task_management`], [`InitiatorSession::ping`],
//!   [`InitiatorSession::text`], [`InitiatorSession::logout`],
//!   [`InitiatorSession::logout_connection`]);
//! - feeds every PDU received on a connection ([`InitiatorSession::handle_pdu`]), framing
//!   errors ([`InitiatorSession::handle_frame_error`]) and closed or lost transports
//!   ([`InitiatorSession::handle_connection_closed`]);
//! - after any call, sends each connection's PDUs ([`InitiatorSession::poll_transmit`],
//!   ExpStatSN stamped), hands out [`InitiatorSession::poll_completion`], acts on
//!   [`InitiatorSession::poll_event`] and calls [`InitiatorSession::handle_timeout`] at
//!   [`InitiatorSession::poll_timeout`].
//!
//! Error recovery is ErrorRecoveryLevel 0: a failed connection whose commands the target is
//! known to have received (ExpCmdSN passed them) has them retried on the others; one that may
//! have left a gap in the CmdSN sequence, or the last connection, needs session
//! reinstatement ([`Event::Reinstate`]: log in again with the same ISID and TSIH 0, then
//! [`InitiatorSession::reinstate`]), after which the outstanding commands are sent again.

mod connection;
mod inbound;
mod policy;
mod reassign;
mod recovery;
mod requests;
mod task;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use crate::map::Map;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::params::SessionParams;
use crate::pdu::codes::{
    LogoutResponseCode, RejectReason, ScsiResponseCode, ScsiStatus, TmfResponse,
};
use crate::pdu::{Cdb, TaskAttr};
use crate::seq::{Itt, Lun, SeqNum};
use crate::task::initiator::IttAllocator;
use crate::task::{Residual, TaskError};
use crate::window::CmdSnAllocator;

pub use policy::Policy;
pub use recovery::RecoveryConfig;

use connection::{ConnState, Connection};
use requests::Request;
use task::Task;

/// A SCSI command from the application.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Command {
    /// LUN field.
    pub lun: Lun,
    /// The CDB (longer than 16 bytes goes in an Extended CDB AHS).
    pub cdb: Cdb,
    /// Data direction and length.
    pub data: CommandData,
    /// Task attribute.
    pub attr: TaskAttr,
}

/// Which way a command's data flows.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum CommandData {
    /// No data.
    None,
    /// Data from the target: the Expected Data Transfer Length.
    Read(u32),
    /// Data to the target (its length is the EDTL).
    Write(Bytes),
}

impl Command {
    /// The Expected Data Transfer Length.
    pub fn edtl(&self) -> u32 {
        match &self.data {
            CommandData::None => 0,
            CommandData::Read(n) => *n,
            CommandData::Write(d) => u32::try_from(d.len()).unwrap_or(u32::MAX),
        }
    }

    /// Bytes this command moves, for the least-outstanding-bytes policy.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.edtl())
    }
}

/// How many PDUs one command moved.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct CommandStats {
    /// Bytes of immediate data in the SCSI Command PDU.
    pub immediate_bytes: u32,
    /// Data-Out PDUs sent.
    pub data_out: u32,
    /// R2Ts received.
    pub r2t: u32,
    /// Data-In PDUs received.
    pub data_in: u32,
    /// Data-carrying PDUs per write sequence: the first entry is the unsolicited sequence
    /// (the command PDU if it carried immediate data, plus the unsolicited Data-Outs), then
    /// one entry per R2T. Empty for reads.
    pub sequences: Vec<u32>,
    /// Whether the status came in the last Data-In (phase collapse, section 11.7.3).
    pub phase_collapse: bool,
    /// Times the command was sent (more than 1 after a retry).
    pub attempts: u32,
    /// CID of the connection that carried the command (the last attempt).
    pub cid: u16,
}

/// How a command ended at the target.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct CommandResult {
    /// SCSI status.
    pub status: ScsiStatus,
    /// Sense data without its SenseLength prefix (empty if none).
    pub sense: Bytes,
    /// Residual (section 11.4.5.1).
    pub residual: Residual,
    /// Data read (EDTL minus any underflow); empty for writes.
    pub data: Bytes,
    /// Bytes of data the command sent (a write's data), whatever its status.
    pub written: u64,
    /// PDU counts.
    pub stats: CommandStats,
    /// Submission to completion.
    pub latency: Duration,
}

/// Why a request did not complete normally.
#[derive(Clone, Copy, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// The target rejected the request's PDU (section 11.17.1).
    #[error("target rejected the PDU: {0}")]
    Rejected(RejectReason),
    /// Task management ended the command.
    #[error("aborted by task management")]
    Aborted,
    /// A data-transfer rule was broken for this command.
    #[error("command data transfer: {0}")]
    Task(TaskError),
    /// The target answered with an iSCSI response code other than "completed at target".
    #[error("target failure (iSCSI response {0})")]
    TargetFailure(ScsiResponseCode),
    /// The target refused a logout (section 11.15.1).
    #[error("logout refused: {0}")]
    Logout(LogoutResponseCode),
    /// The connection carrying the request was lost and it could not be retried.
    #[error("connection lost")]
    ConnectionLost,
    /// The command was retried as often as allowed.
    #[error("command retried too often")]
    TooManyRetries,
    /// The session (or the request's connection) was logged out.
    #[error("session closed")]
    Closed,
    /// A Text Response that cannot be decoded, or a longer one than allowed.
    #[error("bad text response")]
    BadText,
    /// No answer within the command timeout ([`RecoveryConfig::command_timeout`]).
    #[error("no answer within the command timeout")]
    Timeout,
    /// Data or status was lost and the target could not send it again (it rejected the
    /// SNACK, RFC 7143 section 7.8).
    #[error("lost data the target could not resend")]
    Unrecoverable,
}

/// A SCSI command submitted with [`InitiatorSession::submit`].
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct TaskId(u64);

/// Any other request (task management, ping, text, logout).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct RequestId(u64);

/// One connection of a session (not its CID: see the target side's `ConnId`).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct ConnId(u32);

/// Something that finished.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Completion {
    /// A SCSI command.
    Command(TaskId, Result<CommandResult, Failure>),
    /// A task management function: the target's response (section 11.6.1).
    TaskMgmt(RequestId, Result<TmfResponse, Failure>),
    /// A NOP-Out ping: the round-trip time.
    Ping(RequestId, Result<Duration, Failure>),
    /// A text exchange: the key=value pairs of the answer.
    Text(RequestId, Result<Vec<(String, String)>, Failure>),
    /// A logout of the session or of one connection.
    Logout(RequestId, Result<(), Failure>),
}

/// Why the session closes a connection.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum CloseReason {
    /// Its logout (or the session's) completed.
    Logout,
    /// The target broke a protocol rule, or its byte stream cannot be framed.
    Protocol(&'static str),
    /// No sign of life within the keepalive timeout.
    KeepaliveTimeout,
    /// The target announced it drops the connection (Async Message 2 or 3).
    DroppedByTarget,
    /// Session reinstatement: every connection is replaced.
    Reinstate,
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Logout => f.write_str("logout"),
            Self::Protocol(what) => write!(f, "protocol error: {what}"),
            Self::KeepaliveTimeout => f.write_str("NOP-Out keepalive not answered"),
            Self::DroppedByTarget => f.write_str("the target dropped the connection"),
            Self::Reinstate => f.write_str("session reinstatement"),
        }
    }
}

/// Something the driver must act on.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Event {
    /// Send what is queued for the connection, close its transport and report it with
    /// [`InitiatorSession::handle_connection_closed`].
    Close(ConnId, CloseReason),
    /// The session cannot go on (ErrorRecoveryLevel 0 session recovery, RFC 7143 section
    /// 7.1.5): close every connection, log in again with the same ISID and TSIH 0, and call
    /// [`InitiatorSession::reinstate`]; or give up with [`InitiatorSession::fail_all`].
    Reinstate,
    /// A connection failed at ErrorRecoveryLevel 2: after DefaultTime2Wait, log in a new
    /// connection with the session's TSIH and this CID (connection reinstatement, RFC 7143
    /// section 6.3.4) and add it with [`InitiatorSession::add_connection`]; its commands move
    /// there. If that login fails, call [`InitiatorSession::connection_recovery_failed`].
    RecoverConnection {
        /// The failed connection's CID.
        cid: u16,
    },
    /// The session is over (logged out): every request has completed.
    Ended,
}

/// Policy and limits of an initiator session.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SessionConfig {
    /// How commands are spread over connections.
    pub policy: Policy,
    /// Most times one command is sent again after its connection failed.
    pub max_retries: u32,
    /// NOP-Out keepalive: ping after `interval` idle, the connection is dead when nothing
    /// arrives within `timeout` of the ping.
    pub keepalive: Option<(Duration, Duration)>,
    /// Error recovery timers, used when the login negotiated ErrorRecoveryLevel 1 or 2.
    pub recovery: RecoveryConfig,
}

/// One connection entering full feature phase, from its login.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct ConnectionSetup {
    /// The CID it logged in with.
    pub cid: u16,
    /// What its login negotiated (a joining connection's session-wide values are the
    /// session's).
    pub params: SessionParams,
    /// The CmdSN of its login (login PDUs are immediate: the next command carries it).
    pub cmd_sn: SeqNum,
    /// ExpStatSN after the login.
    pub exp_stat_sn: SeqNum,
    /// ExpCmdSN and MaxCmdSN of the final Login Response.
    pub exp_cmd_sn: SeqNum,
    /// See above.
    pub max_cmd_sn: SeqNum,
}

/// Per-connection counters, for reports (`sluice bench --json`).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct ConnectionStats {
    /// The connection's CID.
    pub cid: u16,
    /// SCSI commands issued on it.
    pub commands: u64,
    /// Payload bytes of completed reads.
    pub read_bytes: u64,
    /// Payload bytes of completed writes.
    pub write_bytes: u64,
    /// Commands outstanding on it now.
    pub outstanding: u32,
}

/// Full feature phase of one initiator session (see the module docs).
#[derive(Debug)]
pub struct InitiatorSession {
    config: SessionConfig,
    params: SessionParams,
    window: CmdSnAllocator,
    itts: IttAllocator,
    tasks: Map<Itt, Task>,
    waiting: VecDeque<task::Queued>,
    requests: Map<Itt, Request>,
    conns: Vec<Connection>,
    policy: policy::State,
    completions: VecDeque<Completion>,
    events: VecDeque<Event>,
    next_id: u64,
    next_conn: u32,
    /// The session is logging out: nothing new is issued.
    closing: bool,
    /// Session recovery was asked for: nothing is issued until [`Self::reinstate`].
    reinstating: bool,
    /// A session logout asked for (or under way) while the session was being reinstated: it
    /// goes out on the new session's leading connection. The target still has the session
    /// (reinstatement replaces it, RFC 7143 section 6.3.5), so it is not over before then.
    /// One entry per logout asked for (a logout asked for twice is sent twice, as on a live
    /// session).
    logout_after_reinstatement: Vec<Option<RequestId>>,
    /// The session is over (logged out, or given up): nothing is recovered any more.
    ended: bool,
    max_in_flight: usize,
    retried: u64,
    rejects: u64,
    async_messages: u64,
    /// The latest `now` a call brought.
    now: Instant,
    /// When the recovery timers are looked at next (while commands are outstanding).
    next_tick: Option<Instant>,
    /// SNACK Tags of R-Data SNACKs come from here.
    stall_tag: u32,
    /// Requests on the wire, for their deadline and (under recovery) their resending.
    request_wire: Map<Itt, recovery::RequestOnWire>,
    /// Failed connections whose commands wait for a replacement (ErrorRecoveryLevel 2).
    lost: Vec<reassign::LostConnection>,
    /// Commands moved to another connection with TASK REASSIGN.
    reassigned: u64,
    /// ABORT TASKs of commands given up on, whose connection failed before they were
    /// answered: sent on the next connection (they may fill a CmdSN, section 7.11).
    plugs: Vec<(Itt, SeqNum, Lun)>,
    /// Connection recoveries since the target last answered a command or request: a link
    /// that fails before any answer gets back would otherwise be recovered for ever.
    fruitless_recoveries: u32,
    /// A request expired on the recovery tick: due connection logouts are looked at after it.
    logout_may_be_due: bool,
}

/// Session-wide counters the core keeps (the driver counts PDUs and bytes).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct SessionStats {
    /// Commands sent again after their connection failed.
    pub retried: u64,
    /// Reject PDUs received.
    pub rejects: u64,
    /// Asynchronous Messages received.
    pub async_messages: u64,
    /// Most commands on the wire at once.
    pub max_in_flight: u64,
    /// Commands moved to a new connection with TASK REASSIGN (ErrorRecoveryLevel 2).
    pub reassigned: u64,
}

impl InitiatorSession {
    /// A session from its leading login, and the id of that first connection.
    pub fn new(config: SessionConfig, leading: ConnectionSetup, now: Instant) -> (Self, ConnId) {
        let mut s = Self {
            config,
            params: leading.params,
            window: CmdSnAllocator::new(leading.cmd_sn, leading.exp_cmd_sn, leading.max_cmd_sn),
            itts: IttAllocator::starting_at(1),
            tasks: Map::default(),
            waiting: VecDeque::new(),
            requests: Map::default(),
            conns: Vec::new(),
            policy: policy::State::default(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            next_id: 1,
            next_conn: 0,
            closing: false,
            reinstating: false,
            logout_after_reinstatement: Vec::new(),
            ended: false,
            max_in_flight: 0,
            retried: 0,
            rejects: 0,
            async_messages: 0,
            now,
            next_tick: None,
            stall_tag: 0,
            request_wire: Map::default(),
            lost: Vec::new(),
            reassigned: 0,
            plugs: Vec::new(),
            fruitless_recoveries: 0,
            logout_may_be_due: false,
        };
        let id = s.insert_connection(leading, now);
        (s, id)
    }

    /// Adds a connection the driver logged in with the session's TSIH.
    pub fn add_connection(&mut self, setup: ConnectionSetup, now: Instant) -> ConnId {
        let mut setup = setup;
        setup.params = setup.params.joined(&self.params);
        self.window.update(setup.exp_cmd_sn, setup.max_cmd_sn);
        let id = self.insert_connection(setup, now);
        if self.reinstating || self.ended {
            // It joined a session that is being replaced (or is over): it closes at once.
            self.close(id, CloseReason::Reinstate);
            return id;
        }
        // It replaces a failed connection with its CID: that one's commands move here.
        self.reassign_to(id, setup.cid, now);
        self.issue_waiting(now);
        self.arm_recovery(now);
        id
    }

    fn insert_connection(&mut self, setup: ConnectionSetup, now: Instant) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns
            .push(Connection::new(id, setup, self.config.keepalive, now));
        id
    }

    /// After [`Event::Reinstate`]: the new session's leading connection. Every connection of
    /// the old one is forgotten; its outstanding commands wait to be sent again (within
    /// [`SessionConfig::max_retries`]), its other requests fail.
    pub fn reinstate(&mut self, leading: ConnectionSetup, now: Instant) -> ConnId {
        self.reinstating = false;
        self.params = leading.params;
        self.window = CmdSnAllocator::new(leading.cmd_sn, leading.exp_cmd_sn, leading.max_cmd_sn);
        self.fail_waiting_logouts(Failure::ConnectionLost);
        self.conns.clear();
        self.lost.clear();
        self.plugs.clear();
        self.policy = policy::State::default();
        self.requeue_tasks(|_| true);
        self.fail_requests(|_| true, Failure::ConnectionLost);
        let id = self.insert_connection(leading, now);
        self.issue_waiting(now);
        for logout in std::mem::take(&mut self.logout_after_reinstatement) {
            self.send_session_logout(logout);
        }
        id
    }

    /// Gives up (session recovery failed): every command and request completes with
    /// `failure`, and the session is over.
    pub fn fail_all(&mut self, failure: Failure) {
        let itts: Vec<Itt> = self.tasks.keys().copied().collect();
        for itt in itts {
            if let Some(t) = self.tasks.remove(&itt) {
                self.finish_task(t, Err(failure));
            }
        }
        while let Some(q) = self.waiting.pop_front() {
            self.completions
                .push_back(Completion::Command(q.id, Err(failure)));
        }
        self.fail_requests(|_| true, failure);
        self.fail_waiting_logouts(failure);
        for id in std::mem::take(&mut self.logout_after_reinstatement)
            .into_iter()
            .flatten()
        {
            self.completions
                .push_back(Completion::Logout(id, Err(failure)));
        }
        self.conns.clear();
        self.ended = true;
        self.events.push_back(Event::Ended);
    }

    /// The session-wide negotiated parameters.
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// The parameters of one connection.
    pub fn connection_params(&self, conn: ConnId) -> Option<&SessionParams> {
        self.find(conn).map(|c| &c.params)
    }

    /// The CID of a connection.
    pub fn cid(&self, conn: ConnId) -> Option<u16> {
        self.find(conn).map(|c| c.cid)
    }

    /// Connections that take new commands.
    pub fn live_connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns
            .iter()
            .filter(|c| c.state == ConnState::Live)
            .map(|c| c.id)
    }

    /// Every connection the session still has.
    pub fn connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns.iter().map(|c| c.id)
    }

    /// Counters of each connection still in the session. A connection whose logout completed
    /// has left it (RFC 7143 section 11.15), even while its transport is still being closed.
    pub fn connection_stats(&self) -> Vec<ConnectionStats> {
        self.conns
            .iter()
            .filter(|c| !c.logged_out())
            .map(|c| c.stats)
            .collect()
    }

    /// Commands on the wire.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Session-wide counters.
    pub fn stats(&self) -> SessionStats {
        SessionStats {
            retried: self.retried,
            rejects: self.rejects,
            async_messages: self.async_messages,
            max_in_flight: self.max_in_flight as u64,
            reassigned: self.reassigned,
        }
    }

    /// Commands waiting for room in the CmdSN window (or for a connection).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Requests other than commands still waiting for an answer.
    pub fn requests_pending(&self) -> usize {
        self.requests.len()
    }

    /// The pending requests, for diagnostics (a simulator's trace of a stuck run).
    pub fn describe_requests(&self) -> String {
        format!("{:?}", self.requests)
    }

    /// The CmdSN the next non-immediate command gets, and the target's ExpCmdSN and MaxCmdSN
    /// as last learnt.
    pub fn command_window(&self) -> (SeqNum, SeqNum, SeqNum) {
        (
            self.window.current(),
            self.window.exp_cmd_sn(),
            self.window.max_cmd_sn(),
        )
    }

    /// Queues a SCSI command; it is sent as soon as the CmdSN window and a connection allow.
    pub fn submit(&mut self, command: Command, now: Instant) -> TaskId {
        let id = TaskId(self.next_id());
        self.waiting.push_back(task::Queued {
            id,
            command,
            submitted: now,
            attempts: 0,
        });
        self.issue_waiting(now);
        id
    }

    /// The next PDU to send on `conn`, with its ExpStatSN stamped.
    #[must_use]
    pub fn poll_transmit(&mut self, conn: ConnId) -> Option<crate::pdu::Pdu> {
        self.find_mut(conn)?.poll_transmit()
    }

    /// Whether `conn` has PDUs waiting.
    pub fn has_transmit(&self, conn: ConnId) -> bool {
        self.find(conn).is_some_and(Connection::has_transmit)
    }

    /// The next finished command or request.
    #[must_use]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The next event for the driver.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`InitiatorSession::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let keepalive = self
            .conns
            .iter()
            .filter(|c| c.state != ConnState::Closing)
            .filter_map(Connection::poll_timeout)
            .min();
        match (keepalive, self.recovery_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`: keepalive pings, dead connections, command deadlines
    /// and (ErrorRecoveryLevel 1 and above) the retry timers of stalled commands.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        self.handle_recovery_tick(now);
        for i in 0..self.conns.len() {
            if self.conns[i].state == ConnState::Closing {
                continue;
            }
            match self.conns[i].keepalive_due(now) {
                connection::Keepalive::Nothing => {}
                connection::Keepalive::Ping => {
                    let itt = self.next_itt();
                    let cmd_sn = self.window.immediate();
                    // An earlier keepalive ping of this connection still unanswered was lost
                    // (or its answer was): the new one replaces it, so that unanswered pings
                    // do not pile up for the life of the connection.
                    let conn = self.conns[i].id;
                    self.requests.retain(
                        |_, r| !matches!(r, Request::Ping { id: None, conn: c, .. } if *c == conn),
                    );
                    let c = &mut self.conns[i];
                    c.queue(requests::nop_out(itt, cmd_sn));
                    self.requests.insert(
                        itt,
                        Request::Ping {
                            id: None,
                            conn: c.id,
                            sent: now,
                        },
                    );
                }
                connection::Keepalive::Dead => {
                    let id = self.conns[i].id;
                    self.fail_connection(id, CloseReason::KeepaliveTimeout);
                }
            }
        }
    }

    fn find(&self, conn: ConnId) -> Option<&Connection> {
        self.conns.iter().find(|c| c.id == conn)
    }

    fn find_mut(&mut self, conn: ConnId) -> Option<&mut Connection> {
        self.conns.iter_mut().find(|c| c.id == conn)
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// A tag no outstanding task or request uses (section 11.2.1.8: unique in the session).
    fn next_itt(&mut self) -> Itt {
        loop {
            let itt = self.itts.allocate();
            if !self.tasks.contains_key(&itt) && !self.requests.contains_key(&itt) {
                return itt;
            }
        }
    }

    /// Issues waiting commands while the window is open and a connection takes them.
    fn issue_waiting(&mut self, now: Instant) {
        if self.closing || self.reinstating {
            return;
        }
        let mut out = Vec::new();
        while let Some(front) = self.waiting.front() {
            if !self.window.can_send() {
                break;
            }
            let Some(index) =
                self.policy
                    .choose(self.config.policy, &self.conns, front.command.lun)
            else {
                break;
            };
            let Some(cmd_sn) = self.window.next() else {
                break;
            };
            let Some(queued) = self.waiting.pop_front() else {
                break;
            };
            let itt = self.next_itt();
            let conn = &mut self.conns[index];
            let issue = task::Issue {
                itt,
                cmd_sn,
                conn: conn.id,
                cid: conn.cid,
                now,
            };
            let task = Task::start(queued, issue, &conn.params, &mut out);
            conn.issued(task.bytes());
            for pdu in out.drain(..) {
                conn.queue(pdu);
            }
            self.tasks.insert(itt, task);
        }
        self.max_in_flight = self.max_in_flight.max(self.tasks.len());
        self.arm_recovery(now);
    }
}
