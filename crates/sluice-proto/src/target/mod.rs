//! The target's full feature phase as a sans-IO state machine (RFC 7143 sections 4.2, 7, 10
//! and 11): one [`TargetSession`] per iSCSI session, holding its connections.
//!
//! Session-wide state lives here once: the CmdSN window (section 4.2.2.1), the task table
//! (ITTs are unique within a session), target transfer tags, and task management that waits
//! for the tasks it affects. Each connection keeps its own StatSN (section 4.2.2.2), the
//! ExpStatSN its initiator acknowledged, its negotiated parameters (digests and
//! MaxRecvDataSegmentLength are per connection), its keepalive, its text exchange and its
//! queue of PDUs to send. Every task has allegiance to the connection its command arrived on
//! (section 4.2.4.1): its R2Ts, Data-In and status go there.
//!
//! # Driver contract
//!
//! The session never reads a clock, a socket or a disk. The driver:
//! - creates it from the leading login ([`TargetSession::new`]) and adds connections from
//!   later logins with the session's TSIH ([`TargetSession::add_connection`]);
//! - feeds every PDU received on a connection ([`TargetSession::handle_pdu`]) and every framing
//!   error ([`TargetSession::handle_frame_error`]);
//! - runs the SCSI work the session asks for ([`TargetSession::poll_work`]) and reports each
//!   result ([`TargetSession::handle_completion`]);
//! - after any `handle_*` call, sends each connection's PDUs in order
//!   ([`TargetSession::poll_transmit`]: already stamped with StatSN, ExpCmdSN and MaxCmdSN),
//!   acts on [`TargetSession::poll_event`] (close a connection once its queue is sent), and
//!   calls [`TargetSession::handle_timeout`] at [`TargetSession::poll_timeout`];
//! - reports a closed transport with [`TargetSession::handle_connection_closed`]; the session
//!   is over when [`TargetSession::is_ended`];
//! - when the SCSI layer names other I_T nexuses whose tasks a command aborts (PREEMPT AND
//!   ABORT), calls [`TargetSession::abort_tasks_of_lun`] on each one's session (this one's
//!   too, with the command's ticket excepted) before reporting that command's result.
//!
//! Everything it needs from the SCSI layer and the configuration comes through
//! [`TargetSessionEnv`]. `now` must never go backwards between calls.

mod command;
mod connection;
mod logout;
mod ordering;
mod preempt;
mod reassign;
mod recovery;
pub mod registry;
mod scsi;
mod stats;
mod text;
mod tmf;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use crate::map::Map;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::framing::FrameError;
use crate::params::{SessionParams, SessionType};
use crate::pdu::codes::{AsyncEvent, ScsiStatus};
use crate::pdu::{AsyncMessage, Cdb, Pdu};
use crate::seq::{Itt, Lun, SeqNum};
use crate::task::target_write::WriteData;
use crate::task::SequentialTtts;
use crate::window::CommandWindow;

use connection::{ConnState, Connection};
pub use recovery::RecoveryConfig;
use scsi::Task;
pub use stats::SessionStats;
use tmf::PendingTmf;

/// What a CDB moves, as the SCSI layer judges it (a transport-side copy of the SCSI layer's
/// answer: the protocol core does not depend on the SCSI crate).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub enum DataTransfer {
    /// No data phase (or a command the SCSI layer does not implement).
    #[default]
    None,
    /// The initiator sends this many bytes.
    ToDevice(u64),
    /// The target returns at most this many bytes.
    FromDevice(u64),
}

/// A reset the SCSI layer performs for a task management function (RFC 7143 section
/// 11.5.1).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ResetKind {
    /// LOGICAL UNIT RESET of this LUN.
    LogicalUnit(Lun),
    /// TARGET WARM RESET.
    TargetWarm,
    /// TARGET COLD RESET.
    TargetCold,
}

/// What the session needs from its driver: SCSI-layer judgements and configuration.
pub trait TargetSessionEnv {
    /// What the CDB moves on this LUN (how many bytes a write solicits, residuals).
    fn transfer(&self, lun: Lun, cdb: &Cdb) -> DataTransfer;

    /// Whether the LUN exists (task management answers "LUN does not exist" otherwise).
    fn lun_exists(&self, lun: Lun) -> bool;

    /// Performs a reset in the SCSI layer, after the affected tasks ended.
    fn reset(&mut self, kind: ResetKind);

    /// The key=value pairs answering `SendTargets=<query>` on connection `conn` (RFC 7143
    /// section 13.3 and Appendix C; the portal it arrived on matters for wildcard listeners).
    fn send_targets(&mut self, conn: ConnId, query: &str) -> Vec<(String, String)>;

    /// Commands of this session on `lun` were terminated by the protocol (tasks of a failed
    /// connection never reassigned, ErrorRecoveryLevel 2): the SCSI layer reports COMMANDS
    /// CLEARED BY ISCSI PROTOCOL EVENT (47h/7Fh) as a unit attention to this I_T_L nexus
    /// (RFC 7143 section 11.14.5).
    fn commands_cleared(&mut self, lun: Lun);

    /// Whether the SCSI layer reads this command's Data-Out. `false` lets the session drop
    /// a write's data as it arrives instead of holding it until the command runs (a WRITE to
    /// a device that keeps nothing); the command then runs with
    /// [`WriteData::unkept`](crate::task::target_write::WriteData::unkept), and such a write
    /// counts nothing against the connection's buffered write bytes. Asked only of writes
    /// that wait for data after their command PDU. The default is `true`.
    fn keeps_data_out(&self, _lun: Lun, _cdb: &Cdb) -> bool {
        true
    }
}

/// Limits and policy of one session, fixed when it is created.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SessionConfig {
    /// Normal or discovery.
    pub session_type: SessionType,
    /// Commands the CmdSN window admits at once (MaxCmdSN = ExpCmdSN + depth - 1 when idle).
    pub queue_depth: u32,
    /// Most write data buffered per connection for writes still collecting their Data-Out;
    /// a write beyond it ends with TASK SET FULL.
    pub max_write_bytes_per_connection: usize,
    /// NOP-In keepalive of normal sessions: ping after `interval` of silence, close when
    /// nothing arrives within `timeout` of the ping.
    pub keepalive: Option<KeepaliveConfig>,
    /// Error recovery settings, used when the login negotiated ErrorRecoveryLevel 1 or 2.
    pub recovery: RecoveryConfig,
}

/// Keepalive timing (RFC 7143 sections 11.18, 11.19).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct KeepaliveConfig {
    /// Idle time before a ping.
    pub interval: Duration,
    /// How long a ping may go unanswered.
    pub timeout: Duration,
}

/// One connection entering full feature phase, from its login.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct ConnectionSetup {
    /// Connection ID.
    pub cid: u16,
    /// What the login negotiated. On a connection added to an existing session only the
    /// connection-scoped values (digests, MaxRecvDataSegmentLength) count; the session keeps
    /// its own session-wide values (RFC 7143 section 13: "LO" keys are leading only).
    pub params: SessionParams,
    /// StatSN of the first status PDU sent on this connection.
    pub next_stat_sn: SeqNum,
    /// ExpCmdSN after the login (for the leading connection: the CmdSN of its login).
    pub exp_cmd_sn: SeqNum,
}

/// One connection of a session, as the session and its driver name it.
///
/// Not the CID: a login that reuses a CID (connection reinstatement) gets a new `ConnId`
/// while the connection it replaces is still closing, so the two never mix.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub struct ConnId(u32);

/// Identifies the SCSI work of one task; handed back with its result.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct Ticket {
    itt: Itt,
    serial: u64,
}

/// A SCSI command for the driver to run on the SCSI layer.
#[derive(Clone, Debug)]
pub struct ScsiWork {
    /// Hand this back with the result.
    pub ticket: Ticket,
    /// The connection the task has allegiance to.
    pub conn: ConnId,
    /// LUN field of the command.
    pub lun: Lun,
    /// The CDB.
    pub cdb: Cdb,
    /// The write data, as it arrived (empty for commands without Data-Out).
    pub data_out: WriteData,
    /// Data-In the initiator expects (its Expected Data Transfer Length when the R bit is
    /// set, else 0).
    pub data_in_len: u32,
    /// When the SCSI Command PDU arrived (the `now` of that call): the driver measures the
    /// command's latency from it.
    pub arrived: Instant,
    /// Data-Out the initiator announced (its Expected Data Transfer Length when the W bit is
    /// set, else 0). `data_out` holds at most what the SCSI layer asked for; a command whose
    /// Data-Out must be exact compares the two.
    pub data_out_len: u32,
}

/// The result of a [`ScsiWork`].
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ScsiCompletion {
    /// SCSI status (SAM-5).
    pub status: ScsiStatus,
    /// Sense data (empty when none).
    pub sense: Bytes,
    /// Data-In the SCSI layer produced (cut to the EDTL by the session).
    pub data: Bytes,
}

/// Why the session closes a connection.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum CloseReason {
    /// A Logout Request for this connection or its session completed.
    Logout,
    /// A protocol violation that ErrorRecoveryLevel 0 answers only by closing (section 7).
    Protocol(&'static str),
    /// The byte stream cannot be framed any more.
    Framing,
    /// No sign of life within the keepalive timeout.
    KeepaliveTimeout,
    /// The logout grace period after an Async logout request ran out.
    Shutdown,
    /// TARGET COLD RESET (section 11.6.1: the target closes all its connections).
    ColdReset,
    /// A login with the same CID replaced this connection (connection reinstatement).
    Reinstated,
    /// A login with the same ISID and TSIH 0 replaced the whole session (session
    /// reinstatement, RFC 7143 section 6.3.5).
    SessionReinstated,
    /// The target dropped the connection after an Async Message saying so.
    Dropped,
    /// A Logout Request with reason "remove the connection for recovery" (ErrorRecoveryLevel
    /// 2): its tasks wait for reassignment.
    RemovedForRecovery,
    /// The target's operator closed the session, removed its target or took the initiator
    /// off the target's ACL. Like a shutdown, nothing waits for connection recovery.
    Administrative,
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Logout => f.write_str("logout"),
            Self::Protocol(what) => write!(f, "protocol error: {what}"),
            Self::Framing => f.write_str("unrecoverable framing error"),
            Self::KeepaliveTimeout => f.write_str("no answer to NOP-In"),
            Self::Shutdown => f.write_str("target shutdown"),
            Self::ColdReset => f.write_str("target cold reset"),
            Self::Reinstated => f.write_str("connection reinstated by a new login"),
            Self::SessionReinstated => f.write_str("session reinstated by a new login"),
            Self::Dropped => f.write_str("connection dropped by the target"),
            Self::RemovedForRecovery => f.write_str("logged out for connection recovery"),
            Self::Administrative => f.write_str("closed by the target's operator"),
        }
    }
}

/// Something the driver of one connection must act on ([`TargetSession::poll_event`]).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Event {
    /// Send what [`TargetSession::poll_transmit`] still has for this connection, then close
    /// its transport and report it with [`TargetSession::handle_connection_closed`].
    Close(CloseReason),
    /// TARGET COLD RESET: besides this session's connections (closed through
    /// [`Event::Close`]), the driver closes every other session of the target (section
    /// 11.6.1).
    ColdReset,
}

/// What [`TargetSession::add_connection`] did.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Added {
    /// A new connection joined the session.
    New(ConnId),
    /// The CID was in use: the old connection (`replaced`) is closing and its tasks ended
    /// (connection reinstatement, RFC 7143 section 6.3.4; at ErrorRecoveryLevel 0 its tasks
    /// are not reassigned). The driver wakes its task.
    Reinstated {
        /// The new connection.
        conn: ConnId,
        /// The connection it replaces.
        replaced: ConnId,
    },
}

impl Added {
    /// The new connection.
    pub fn conn(self) -> ConnId {
        match self {
            Self::New(conn) | Self::Reinstated { conn, .. } => conn,
        }
    }
}

/// Full feature phase of one target session (see the module docs).
#[derive(Debug)]
pub struct TargetSession {
    config: SessionConfig,
    /// Session-wide parameters from the leading login.
    params: SessionParams,
    window: CommandWindow<command::Held>,
    tasks: Map<Itt, Task>,
    ttts: SequentialTtts,
    conns: Vec<Connection>,
    work: VecDeque<ScsiWork>,
    /// Work held back by task attributes (`ordering`).
    ordering: ordering::Ordering,
    tmfs: VecDeque<PendingTmf>,
    next_conn: u32,
    /// ITTs of tasks ended by task management, so that their late Data-Out is dropped
    /// quietly rather than rejected (bounded ring).
    recently_aborted: VecDeque<Itt>,
    next_serial: u64,
    /// Async logout request sent: close every connection at this time.
    logout_deadline: Option<Instant>,
    /// No task's sequence reception timer runs out before this (ErrorRecoveryLevel 1 and
    /// above): lowered whenever a timer starts, made exact when timers are looked at, so that
    /// `poll_timeout` does not scan every task on each turn of the driver's loop.
    sequence_wakeup: Option<Instant>,
    /// The latest `now` a call brought (timers set by PDUs start from it).
    now: Instant,
    /// Window places of ended commands held back while too many statuses wait for
    /// acknowledgement (ErrorRecoveryLevel 1 and above).
    deferred_slots: Vec<crate::window::Slot>,
    /// Failed connections whose tasks wait for reassignment (ErrorRecoveryLevel 2).
    orphans: Vec<reassign::Orphaned>,
    /// Whether GOOD status of a read rides in its last Data-In (phase collapse, RFC 7143
    /// section 11.7.3). The initiator has no say: it is the target's choice.
    phase_collapse: bool,
    /// Recovery and task management counters.
    stats: SessionStats,
}

/// How many recently aborted ITTs are remembered (a window's worth is plenty: late Data-Out
/// can only belong to tasks that were in flight).
const RECENTLY_ABORTED: usize = 256;

impl TargetSession {
    /// A session from its leading login, entering full feature phase at `now`, and the id of
    /// that first connection.
    pub fn new(config: SessionConfig, leading: ConnectionSetup, now: Instant) -> (Self, ConnId) {
        let mut session = Self {
            config,
            params: leading.params,
            // The login's CmdSN was not advanced (login PDUs are immediate): the first
            // command carries ExpCmdSN as the login left it (RFC 7143 section 4.2.2.1).
            window: CommandWindow::new(leading.exp_cmd_sn, config.queue_depth),
            tasks: Map::default(),
            ttts: SequentialTtts::starting_at(1),
            conns: Vec::new(),
            work: VecDeque::new(),
            ordering: ordering::Ordering::default(),
            tmfs: VecDeque::new(),
            next_conn: 0,
            recently_aborted: VecDeque::new(),
            next_serial: 1,
            logout_deadline: None,
            sequence_wakeup: None,
            now,
            deferred_slots: Vec::new(),
            orphans: Vec::new(),
            phase_collapse: true,
            stats: SessionStats::default(),
        };
        let conn = session.insert_connection(leading, now);
        (session, conn)
    }

    /// Chooses whether GOOD status of a read travels in its last Data-In (`true`, the
    /// default: phase collapse, RFC 7143 section 11.7.3) or in a separate SCSI Response.
    pub fn set_phase_collapse(&mut self, collapse: bool) {
        self.phase_collapse = collapse;
    }

    /// Adds the connection of a login that named this session's TSIH. A CID in use is
    /// connection reinstatement: the old connection closes first. At ErrorRecoveryLevel 2
    /// that is its implicit logout for recovery, and its tasks (or those of a failed
    /// connection with that CID) wait for TASK REASSIGN (RFC 7143 section 6.3.4); below, they
    /// end. The caller has checked MaxConnections (see [`registry`]).
    pub fn add_connection(
        &mut self,
        setup: ConnectionSetup,
        now: Instant,
        env: &mut dyn TargetSessionEnv,
    ) -> Added {
        self.now = now;
        let replaced = self.live_by_cid(setup.cid);
        if let Some(old) = replaced {
            self.close_connection(old, CloseReason::Reinstated);
            if !self.recovers_connections() {
                self.end_tasks_of(old);
            }
        }
        if self.recovers_connections() {
            self.logout_for_recovery(setup.cid);
        }
        let mut setup = setup;
        // Session-wide keys are the leading login's; only connection keys come from this one.
        setup.params = setup.params.joined(&self.params);
        let conn = self.insert_connection(setup, now);
        self.progress(env);
        match replaced {
            Some(replaced) => Added::Reinstated { conn, replaced },
            None => Added::New(conn),
        }
    }

    fn insert_connection(&mut self, setup: ConnectionSetup, now: Instant) -> ConnId {
        let keepalive = match self.config.session_type {
            // Discovery sessions get no NOP-In: open-iscsi drops a discovery connection on any
            // PDU but a Text Response (`usr/discovery.c`) and reconnects.
            SessionType::Discovery => None,
            SessionType::Normal => self.config.keepalive,
        };
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.push(Connection::new(id, setup, keepalive, now));
        id
    }

    /// Session-wide negotiated parameters (from the leading login).
    pub fn params(&self) -> &SessionParams {
        &self.params
    }

    /// The parameters of one connection (its digests and MaxRecvDataSegmentLengths).
    pub fn connection_params(&self, conn: ConnId) -> Option<&SessionParams> {
        self.find(conn).map(|c| &c.params)
    }

    /// The CID of a connection.
    pub fn cid(&self, conn: ConnId) -> Option<u16> {
        self.find(conn).map(|c| c.cid)
    }

    /// Normal or discovery.
    pub fn session_type(&self) -> SessionType {
        self.config.session_type
    }

    /// ExpCmdSN and MaxCmdSN as the session advertises them now (the Login Responses of a
    /// connection joining the session carry them).
    pub fn command_window(&self) -> (SeqNum, SeqNum) {
        (self.window.exp_cmd_sn(), self.window.max_cmd_sn())
    }

    /// The connections in full feature phase (not closing).
    pub fn live_connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns
            .iter()
            .filter(|c| c.state == ConnState::Live)
            .map(|c| c.id)
    }

    /// Every connection the session still has, closing ones included.
    pub fn connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns.iter().map(|c| c.id)
    }

    /// Whether no connection is left, no failed one whose tasks wait for reassignment, and
    /// no command is still with the SCSI layer: the session is over. (A task ended while the
    /// SCSI layer runs it stays until its result comes back and is dropped.)
    pub fn is_ended(&self) -> bool {
        self.conns.is_empty()
            && self.orphans.is_empty()
            && !self.tasks.values().any(scsi::Task::running)
    }

    /// Whether a failed connection's tasks wait for a connection to take them over
    /// (ErrorRecoveryLevel 2, RFC 7143 section 7.2.2), as opposed to a session kept only
    /// until the SCSI layer returns the commands it still runs.
    pub fn awaits_connection_recovery(&self) -> bool {
        !self.orphans.is_empty()
    }

    /// Tasks in the task table (commands delivered and not yet answered or aborted).
    pub fn task_count(&self) -> usize {
        self.tasks.len()
    }

    /// The tasks, for diagnostics (a simulator's trace of a stuck run).
    pub fn describe_tasks(&self) -> String {
        format!("{:?}", self.tasks)
    }

    /// What recovery and task management did so far.
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// Slots of the CmdSN window held by commands in progress.
    pub fn window_slots_held(&self) -> u32 {
        self.window.active()
    }

    /// Commands held waiting for an earlier CmdSN.
    pub fn commands_held(&self) -> usize {
        self.window.held()
    }

    /// Whether the initiator on `conn` had seen every status sent so far when it sent its
    /// latest SCSI command (its ExpStatSN was our next StatSN): it waits for each answer
    /// before sending more, so a driver busy polling for its next command saves a sleep and a
    /// wake-up per command. When its ExpStatSN lags it is pipelining: commands come on their
    /// own, and spinning for them only takes CPU from the initiator (4 KiB writes at queue
    /// depth 32 from qemu-img ran at half speed on 2 vCPUs; docs/performance.md).
    pub fn peer_waits(&self, conn: ConnId) -> bool {
        self.find(conn).is_none_or(|c| c.peer_waits)
    }

    /// A PDU received on connection `conn` at `now`.
    pub fn handle_pdu(
        &mut self,
        conn: ConnId,
        pdu: Pdu,
        now: Instant,
        env: &mut dyn TargetSessionEnv,
    ) {
        self.now = now;
        let Some(c) = self.find_mut(conn) else {
            return;
        };
        if c.state != ConnState::Live {
            return;
        }
        c.handle_received(&pdu, now);
        if c.retains() {
            self.release_acknowledged(conn);
        }
        self.dispatch(conn, pdu, env);
        self.progress(env);
    }

    /// The framer refused a PDU on `conn` at `now`: a Reject when the stream is still in
    /// step (the PDU's header is quoted), else the connection closes (RFC 7143 section 7.3).
    /// Under ErrorRecoveryLevel 1 and above, data a digest error discarded is asked for again
    /// (section 7.8), and a header the framer skipped is left to sequence numbers and timeouts.
    pub fn handle_frame_error(
        &mut self,
        conn: ConnId,
        error: &FrameError,
        now: Instant,
        env: &mut dyn TargetSessionEnv,
    ) {
        self.now = now;
        if self.find(conn).is_none_or(|c| c.state != ConnState::Live) {
            return;
        }
        match error {
            FrameError::DataDigest { header, .. } => self.handle_data_digest_error(conn, header),
            FrameError::HeaderDigestSkipped { .. } => {}
            _ => match error.reject() {
                Some((reason, header)) => {
                    self.send_reject(conn, reason, Bytes::copy_from_slice(header));
                }
                None => self.close_connection(conn, CloseReason::Framing),
            },
        }
        self.progress(env);
    }

    /// The result of a [`ScsiWork`].
    pub fn handle_completion(
        &mut self,
        ticket: Ticket,
        completion: ScsiCompletion,
        env: &mut dyn TargetSessionEnv,
    ) {
        self.complete_task(ticket, completion);
        self.progress(env);
    }

    /// Runs the timers due at `now`: keepalive pings and deaths, the logout grace period,
    /// the sequence reception timeouts of writes.
    pub fn handle_timeout(&mut self, now: Instant, env: &mut dyn TargetSessionEnv) {
        self.now = now;
        self.handle_sequence_timeouts(now);
        self.expire_orphans(now, env);
        if self.logout_deadline.is_some_and(|d| now >= d) {
            self.logout_deadline = None;
            self.close_all(CloseReason::Shutdown);
        }
        for i in 0..self.conns.len() {
            if self.conns[i].state != ConnState::Live {
                continue;
            }
            if let Some(close) = self.conns[i].handle_timeout(now) {
                let id = self.conns[i].id;
                self.close_connection(id, close);
            }
        }
        self.progress(env);
    }

    /// The transport of `conn` is gone (closed after an [`Event::Close`], or lost). Below
    /// ErrorRecoveryLevel 2 nothing of a failed connection is recovered (RFC 7143 section
    /// 7.1.5): its tasks end without answers, and held commands it sent are skipped so that
    /// the window still moves past them. At level 2 a connection that failed (rather than
    /// logged out) keeps its tasks for reassignment, for DefaultTime2Wait +
    /// DefaultTime2Retain (section 7.1.4.3), and the session outlives its last connection
    /// meanwhile.
    pub fn handle_connection_closed(&mut self, conn: ConnId, env: &mut dyn TargetSessionEnv) {
        let failed = self.find(conn).is_some_and(|c| {
            !matches!(
                c.close_reason,
                Some(
                    CloseReason::Logout
                        | CloseReason::SessionReinstated
                        | CloseReason::ColdReset
                        | CloseReason::Shutdown
                        | CloseReason::Administrative
                )
            )
        });
        if failed && self.recovers_connections() {
            self.orphan_connection(conn, env);
        } else {
            self.remove_connection(conn);
        }
        self.progress(env);
    }

    /// Closes every connection (session reinstatement by another login, a cold reset
    /// elsewhere in the target): each gets an [`Event::Close`] with `reason`.
    pub fn close_all(&mut self, reason: CloseReason) {
        for conn in self.live_connections().collect::<Vec<_>>() {
            self.close_connection(conn, reason);
        }
    }

    /// Target shutdown: asks the initiator to log out (Async Message, AsyncEvent 1, Parameter3
    /// = seconds it has) on every connection, and closes them all after `grace` (RFC 7143
    /// section 11.9.1). Discovery sessions close at once.
    pub fn request_logout(&mut self, now: Instant, grace: Duration) {
        if self.logout_deadline.is_some() {
            // Asked already (every connection of the session may relay the same shutdown).
            return;
        }
        if self.config.session_type == SessionType::Discovery {
            self.close_all(CloseReason::Shutdown);
            return;
        }
        let seconds = u16::try_from(grace.as_secs()).unwrap_or(u16::MAX).max(1);
        for conn in self.live_connections().collect::<Vec<_>>() {
            self.queue_to(
                conn,
                async_message(AsyncEvent::LogoutRequested, 0, 0, seconds),
            );
        }
        self.logout_deadline = Some(now + grace);
    }

    /// Drops connection `conn` on the target's initiative: an Async Message (AsyncEvent 2,
    /// Parameter1 = its CID, Parameter2 = Time2Wait) goes out on it first (section 11.9.1).
    pub fn drop_connection(&mut self, conn: ConnId, time2wait: u16) {
        let Some(cid) = self
            .find(conn)
            .filter(|c| c.state == ConnState::Live)
            .map(|c| c.cid)
        else {
            return;
        };
        let msg = async_message(AsyncEvent::DropConnection, cid, time2wait, 0);
        self.queue_to(conn, msg);
        self.close_connection(conn, CloseReason::Dropped);
        self.end_tasks_of(conn);
    }

    /// The next PDU to send on `conn`, stamped with its StatSN, ExpCmdSN and MaxCmdSN.
    #[must_use]
    pub fn poll_transmit(&mut self, conn: ConnId) -> Option<Pdu> {
        let (exp, max) = self.command_window();
        self.find_mut(conn)?.poll_transmit(exp, max)
    }

    /// Whether `conn` has PDUs or events waiting (after a call made on another connection of
    /// the session, the driver wakes this one's task).
    pub fn has_output(&self, conn: ConnId) -> bool {
        self.find(conn).is_some_and(Connection::has_output)
    }

    /// The next SCSI command to run.
    #[must_use]
    pub fn poll_work(&mut self) -> Option<ScsiWork> {
        self.work.pop_front()
    }

    /// The next event for the driver of `conn`.
    #[must_use]
    pub fn poll_event(&mut self, conn: ConnId) -> Option<Event> {
        self.find_mut(conn)?.events.pop_front()
    }

    /// When [`TargetSession::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let keepalive = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Live)
            .filter_map(Connection::poll_timeout)
            .min();
        [
            keepalive,
            self.logout_deadline,
            self.sequence_deadline(),
            self.orphan_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn find(&self, conn: ConnId) -> Option<&Connection> {
        self.conns.iter().find(|c| c.id == conn)
    }

    fn find_mut(&mut self, conn: ConnId) -> Option<&mut Connection> {
        self.conns.iter_mut().find(|c| c.id == conn)
    }

    /// The live connection with this CID, if any.
    fn live_by_cid(&self, cid: u16) -> Option<ConnId> {
        self.conns
            .iter()
            .find(|c| c.cid == cid && c.state == ConnState::Live)
            .map(|c| c.id)
    }

    /// Queues a PDU on `conn` if it is still live (a closing or gone connection sends nothing
    /// more).
    fn queue_to(&mut self, conn: ConnId, pdu: Pdu) {
        if let Some(c) = self.find_mut(conn).filter(|c| c.state == ConnState::Live) {
            c.queue(pdu);
        }
    }

    /// Stops taking input on `conn` and tells its driver to close it once its queue is sent.
    fn close_connection(&mut self, conn: ConnId, reason: CloseReason) {
        let Some(c) = self.find_mut(conn) else {
            return;
        };
        if c.state == ConnState::Closing {
            return;
        }
        c.state = ConnState::Closing;
        c.close_reason = Some(reason);
        c.events.push_back(Event::Close(reason));
    }

    /// Forgets a connection: its tasks end unanswered, its held commands are skipped.
    fn remove_connection(&mut self, conn: ConnId) {
        let Some(index) = self.conns.iter().position(|c| c.id == conn) else {
            return;
        };
        self.conns.remove(index);
        self.window.cancel_held_where(|h| h.conn == conn);
        // Work for its tasks that no driver took yet will not run: nobody could answer it.
        let unstarted: Vec<Ticket> = self
            .work
            .iter()
            .filter(|w| w.conn == conn)
            .map(|w| w.ticket)
            .collect();
        self.work.retain(|w| w.conn != conn);
        for ticket in unstarted {
            self.drop_unstarted(ticket);
        }
        self.end_tasks_of(conn);
        self.tmfs_of_closed_connection(conn);
        // What its kept statuses held back is free again.
        self.release_deferred_slots();
    }

    /// Work that may have become possible: held commands now in order, deferred task
    /// management.
    fn progress(&mut self, env: &mut dyn TargetSessionEnv) {
        loop {
            let mut moved = false;
            while let Some((held, slot)) = self.window.poll_ready() {
                self.deliver(held, Some(slot), env);
                moved = true;
            }
            moved |= self.release_held();
            moved |= self.progress_tmfs(env);
            if !moved {
                break;
            }
        }
    }

    fn remember_aborted(&mut self, itt: Itt) {
        if self.recently_aborted.len() == RECENTLY_ABORTED {
            self.recently_aborted.pop_front();
        }
        self.recently_aborted.push_back(itt);
    }
}

/// An Async Message (RFC 7143 section 11.9) with its sequence numbers left for stamping.
fn async_message(event: AsyncEvent, p1: u16, p2: u16, p3: u16) -> Pdu {
    Pdu::AsyncMessage(AsyncMessage {
        lun: Lun(0),
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(0),
        max_cmd_sn: SeqNum(0),
        async_event: event,
        async_vcode: 0,
        parameter1: p1,
        parameter2: p2,
        parameter3: p3,
        data: Bytes::new(),
    })
}
