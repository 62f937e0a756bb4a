//! Recovery in an initiator session (RFC 7143 section 7): the command deadline at every
//! ErrorRecoveryLevel, and at levels 1 and above the within-command and within-connection
//! classes (sections 7.1.4.1, 7.1.4.2): command retry for a command the target never
//! acknowledged (section 7.2.1), SNACKs for lost Data-In, R2Ts and statuses (section 11.16),
//! NOP-Out probes of the target's StatSN (section 7.1.3 a), and what to do with digest errors
//! and Rejects (sections 7.3, 7.8).

use smallvec::SmallVec;
use std::time::{Duration, Instant};

use super::connection::{ConnState, StatusArrival};
use super::requests::{nop_out, Request};
use super::task::snack;
use super::{CloseReason, Completion, ConnId, Failure, InitiatorSession};
use crate::framing::FrameError;
use crate::pdu::codes::{RejectReason, SnackType, TmfFunction};
use crate::pdu::{opcode, Pdu, Reject, BHS_LEN};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Recovery timers of an initiator session.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct RecoveryConfig {
    /// ErrorRecoveryLevel 1 and above: how long a command may see no progress before the
    /// initiator acts. A command the target has not acknowledged is retried; a read asks
    /// again for the Data-In it misses; the connection's StatSN is probed with a NOP-Out so
    /// that a lost status shows as a gap.
    pub retry_timeout: Duration,
    /// Most retries of one command before it fails ([`Failure::TooManyRetries`]).
    pub max_command_retries: u32,
    /// The longest a command may wait for its answer from its submission, at any
    /// ErrorRecoveryLevel: past it, it fails with [`Failure::Timeout`] and is aborted at the
    /// target (section 7.11: "On a ULP timeout for a command ... it MUST abort the command").
    /// `None`: no limit.
    pub command_timeout: Option<Duration>,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            retry_timeout: Duration::from_secs(1),
            max_command_retries: 8,
            command_timeout: Some(Duration::from_secs(120)),
        }
    }
}

/// A request (task management, ping, text, logout) on the wire.
#[derive(Debug)]
pub(super) struct RequestOnWire {
    conn: ConnId,
    pdu: Pdu,
    first_sent: Instant,
    sent: Instant,
    resends: u32,
}

/// What the StatSN of a PDU said, under recovery.
pub(super) enum Tracked {
    /// Process the PDU.
    Fresh,
    /// A copy of a status already processed: drop it.
    Duplicate,
}

impl InitiatorSession {
    /// Whether within-command and within-connection recovery are in force.
    pub(super) fn recovering(&self) -> bool {
        self.params.error_recovery_level > 0
    }

    /// How often the recovery timers are looked at while commands are outstanding.
    fn tick(&self) -> Duration {
        if self.recovering() {
            (self.config.recovery.retry_timeout / 4).max(Duration::from_millis(1))
        } else {
            Duration::from_secs(1)
        }
    }

    /// Starts the recovery tick when there is something to watch.
    pub(super) fn arm_recovery(&mut self, now: Instant) {
        let watching = self.recovering() || self.config.recovery.command_timeout.is_some();
        let busy = !self.tasks.is_empty()
            || !self.waiting.is_empty()
            || !self.request_wire.is_empty()
            || self.conns.iter().any(|c| c.status_gap_open());
        // Commands waiting for a window nothing in flight will open are watched at any level.
        let stuck = !self.waiting.is_empty() && self.tasks.is_empty();
        if ((watching && busy) || stuck) && self.next_tick.is_none() {
            self.next_tick = Some(now + self.tick());
        }
    }

    /// A request went out: it gets the same deadline as commands and, under recovery, is sent
    /// again if nothing answers it.
    pub(super) fn track_request(&mut self, conn: ConnId, itt: Itt, pdu: &Pdu) {
        let now = self.now;
        self.request_wire.insert(
            itt,
            RequestOnWire {
                conn,
                pdu: pdu.clone(),
                first_sent: now,
                sent: now,
                resends: 0,
            },
        );
        self.arm_recovery(now);
    }

    /// Requests without an answer: past the deadline they fail with [`Failure::Timeout`]
    /// (a session logout then ends the session, a connection logout closes its connection:
    /// a logout that cannot complete still frees this side); under recovery a request whose
    /// PDU may have been lost (no status gap explains the silence) is sent again, unchanged.
    fn expire_requests(&mut self, now: Instant) {
        let limit = self.config.recovery.command_timeout;
        let period = self.config.recovery.retry_timeout;
        let max = self.config.recovery.max_command_retries;
        let recovering = self.recovering();
        let itts: Vec<Itt> = self.request_wire.keys().copied().collect();
        for itt in itts {
            let Some(req) = self.requests.get(&itt) else {
                self.request_wire.remove(&itt);
                continue;
            };
            let logout = match req {
                Request::Logout { session, conn, .. } => Some((*session, *conn)),
                _ => None,
            };
            // An ABORT TASK that was to plug the CmdSN of a command the target never got
            // (section 7.11) and its acknowledgement never came.
            let plug = match req {
                Request::QuietAbort { ref_cmd_sn, .. } => Some(*ref_cmd_sn),
                _ => None,
            };
            let Some(w) = self.request_wire.get_mut(&itt) else {
                continue;
            };
            let expired = limit.is_some_and(|l| now.saturating_duration_since(w.first_sent) >= l)
                || (recovering
                    && w.resends >= max
                    && now.saturating_duration_since(w.sent) >= period);
            if expired {
                self.request_wire.remove(&itt);
                self.fail_request(itt, Failure::Timeout);
                // It may have been what held a connection's logout back.
                self.logout_may_be_due = true;
                match logout {
                    Some((true, _)) => self.end_session(),
                    Some((false, conn)) => self.close(conn, CloseReason::Logout),
                    None => {}
                }
                if plug.is_some_and(|sn| !sn.lt(self.window.exp_cmd_sn()))
                    && !self.closing
                    && !self.ended
                {
                    // Nothing else will fill that CmdSN: the target holds every later command
                    // back (its ExpCmdSN stays there), and once the window is used up nothing
                    // more can be sent (seed 438501: a damaged header stalled the connection
                    // that carried both the command and its ABORT TASK). Session recovery is
                    // what is left (section 7.1.4.4); reinstatement ends the old session's
                    // tasks (section 6.3.5) and the waiting commands go on the new session.
                    self.begin_reinstatement(CloseReason::Reinstate);
                }
                continue;
            }
            if !recovering || now.saturating_duration_since(w.sent) < period {
                continue;
            }
            w.sent = now;
            w.resends += 1;
            let (conn, pdu) = (w.conn, w.pdu.clone());
            let gap = self.find_mut(conn).and_then(|c| c.missing_statuses());
            match gap {
                // Its answer may be among the missing statuses: ask for them instead.
                Some((beg, run)) => self.status_snack(conn, beg, run),
                None => {
                    if let Some(c) = self
                        .find_mut(conn)
                        .filter(|c| c.state != ConnState::Closing)
                    {
                        c.queue(pdu);
                    }
                    self.probe(conn, now);
                }
            }
        }
    }

    /// The next recovery tick.
    pub(super) fn recovery_deadline(&self) -> Option<Instant> {
        self.next_tick
    }

    /// Sequence numbers of a PDU under recovery (section 4.2.2.2, 7.9): statuses counted
    /// one by one, gaps asked for with a Status SNACK, copies dropped.
    pub(super) fn track_recovering(&mut self, conn: ConnId, pdu: &Pdu, now: Instant) -> Tracked {
        let (stat_sn, exp, max, kind) = match pdu {
            Pdu::ScsiResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::DataIn(p) if p.status_present => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status)
            }
            Pdu::DataIn(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::None),
            Pdu::R2t(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Next),
            Pdu::NopIn(p) if p.itt == Itt::RESERVED => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Next)
            }
            Pdu::NopIn(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::TaskMgmtResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::TextResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::AsyncMessage(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::Reject(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            Pdu::LogoutResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, Kind::Status),
            _ => return Tracked::Fresh,
        };
        self.window.update(exp, max);
        // The status of a command still waiting for it always goes to the command, even a
        // copy: a read that discarded what it had (an R-Data SNACK) needs it again.
        let for_a_task = matches!(pdu, Pdu::ScsiResponse(_) | Pdu::DataIn(_))
            && self.tasks.get(&pdu.itt()).is_some_and(|t| t.conn == conn);
        let Some(c) = self.find_mut(conn) else {
            return Tracked::Duplicate;
        };
        let ask = match kind {
            Kind::Status => match c.status_arrived(stat_sn, now) {
                (StatusArrival::New, ask) => ask,
                (StatusArrival::Duplicate, _) if for_a_task => None,
                (StatusArrival::Duplicate, _) => return Tracked::Duplicate,
                (StatusArrival::Unbelievable, _) => {
                    self.fail_connection(conn, CloseReason::Protocol("StatSN far out of sequence"));
                    return Tracked::Duplicate;
                }
            },
            Kind::Next => {
                c.received(None, now);
                c.next_stat_sn_seen(stat_sn)
            }
            Kind::None => {
                c.received(None, now);
                None
            }
        };
        if let Some((beg, run)) = ask {
            self.status_snack(conn, beg, run);
        }
        Tracked::Fresh
    }

    /// A Status SNACK for `run` statuses from `beg` on `conn`.
    pub(super) fn status_snack(&mut self, conn: ConnId, beg: SeqNum, run: u32) {
        let pdu = snack(
            SnackType::Status,
            Lun::default(),
            Itt::RESERVED,
            Ttt::RESERVED,
            beg.0,
            run,
        );
        if let Some(c) = self.find_mut(conn) {
            c.queue(pdu);
        }
    }

    /// Sends what a task asks for (SNACKs, DataACKs) on its connection.
    pub(super) fn flush_task_snacks(&mut self, itt: Itt) {
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        let conn = t.conn;
        let snacks = t.take_snacks(itt);
        if let Some(c) = self.find_mut(conn) {
            for pdu in snacks {
                c.queue(pdu);
            }
        }
    }

    /// Keeps ExpStatSN below the status of a read that waits for data, or lets it go.
    pub(super) fn hold_status_for_data(&mut self, itt: Itt, stat_sn: SeqNum) {
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        if !t.status_waits_for_data() || t.held_stat_sn.is_some() {
            return;
        }
        t.held_stat_sn = Some(stat_sn);
        let conn = t.conn;
        if let Some(c) = self.find_mut(conn) {
            c.hold_status(stat_sn);
        }
    }

    /// A task ended: a status it held back may be acknowledged.
    pub(super) fn release_held_status(&mut self, conn: ConnId, held: Option<SeqNum>) {
        if let (Some(sn), Some(c)) = (held, self.find_mut(conn)) {
            c.release_status(sn);
        }
    }

    /// A frame error on `conn` under recovery (section 7.8): a PDU whose data failed its
    /// digest is discarded and asked for again, a header skipped by the framer is left to
    /// sequence numbers and timeouts. `false` for the errors that end the connection.
    pub(super) fn recover_frame_error(&mut self, conn: ConnId, error: &FrameError) -> bool {
        match error {
            FrameError::HeaderDigestSkipped { .. } => true,
            FrameError::DataDigest { header, .. } => {
                self.lost_data_segment(conn, header);
                true
            }
            _ => false,
        }
    }

    fn lost_data_segment(&mut self, conn: ConnId, header: &[u8; BHS_LEN]) {
        match Pdu::parse_header_only(header) {
            Ok(Pdu::DataIn(d)) => {
                // "If the discarded PDU is an iSCSI data PDU, the initiator MUST ... Request
                // the desired data PDU through SNACK."
                let itt = d.itt;
                let now = self.now;
                if let Some(t) = self.tasks.get_mut(&itt).filter(|t| t.conn == conn) {
                    // Its header (which its own digest vouched for, when one is in force)
                    // shows the target has the command: it is not retried.
                    t.heard = true;
                    t.last_activity = now;
                    t.handle_lost_data_in(&d);
                }
                self.flush_task_snacks(itt);
            }
            Ok(pdu) => {
                // "If the discarded PDU is a response PDU or an unsolicited PDU ... Request PDU
                // retransmission with a status of SNACK."
                if let Some(sn) = stat_sn_of(&pdu) {
                    self.status_snack(conn, sn, 1);
                }
            }
            Err(_) => {}
        }
    }

    /// A Reject (section 7.3). A rejected command was discarded: "the initiator MUST plug the
    /// CmdSN gap", under recovery by retrying it at once, at ErrorRecoveryLevel 0 by an ABORT
    /// TASK (section 7.11: the target then considers the command received) while the command
    /// fails. A rejected Data-Out or SNACK only informs: "the initiator can eventually expect a
    /// response on receiving Rejects, if the received Reject is for a PDU other than the
    /// command PDU itself" (the target recovers the data, or ends the command). `false` when
    /// the caller fails what the Reject names.
    pub(super) fn handle_reject(&mut self, conn: ConnId, r: &Reject) -> bool {
        let op = r.data.first().map(|b| b & 0x3f);
        if op == Some(opcode::SNACK_REQUEST) {
            self.snack_rejected(conn, r);
            return true;
        }
        if op == Some(opcode::DATA_OUT) {
            return true;
        }
        if self.recovering() {
            return self.recover_reject(conn, r);
        }
        if op == Some(opcode::SCSI_COMMAND) && r.reason == RejectReason::DataDigestError {
            if let Some(t) = r
                .data
                .get(16..20)
                .map(|b| Itt(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            {
                if let Some(task) = self.tasks.get(&t).filter(|t| t.conn == conn) {
                    let (cmd_sn, lun) = (task.cmd_sn, task.queued.command.lun);
                    self.abort_quietly(conn, t, cmd_sn, lun);
                }
            }
        }
        false
    }

    /// The target cannot serve a SNACK (section 11.16: it was never sent, or it no longer
    /// has it). Statuses it cannot resend are given up (the ExpStatSN moves past them); a read
    /// whose data it cannot resend fails, and the target is told to forget the command. A
    /// write's R2T SNACK is only a hint: the target's own timer recovers a write.
    fn snack_rejected(&mut self, conn: ConnId, r: &Reject) {
        let Some(header) = r
            .data
            .get(..BHS_LEN)
            .and_then(|h| <[u8; BHS_LEN]>::try_from(h).ok())
        else {
            return;
        };
        let Ok(Pdu::SnackRequest(snack)) = Pdu::parse_header_only(&header) else {
            return;
        };
        match snack.snack_type {
            SnackType::Status => {
                if let Some(c) = self.find_mut(conn) {
                    c.give_up_statuses(SeqNum(snack.beg_run), snack.run_length);
                }
            }
            SnackType::DataR2t | SnackType::RData => {
                let itt = snack.itt;
                if self
                    .tasks
                    .get(&itt)
                    .is_some_and(|t| t.conn == conn && t.is_read())
                {
                    self.give_up_task(itt, Failure::Unrecoverable, conn, self.now);
                }
            }
            _ => {}
        }
    }

    fn recover_reject(&mut self, conn: ConnId, r: &Reject) -> bool {
        let Some(op) = r.data.first().map(|b| b & 0x3f) else {
            return false;
        };
        let itt = r
            .data
            .get(16..20)
            .map(|b| Itt(u32::from_be_bytes([b[0], b[1], b[2], b[3]])));
        match op {
            opcode::SCSI_COMMAND if r.reason == RejectReason::DataDigestError => {
                if let Some(itt) = itt {
                    self.retry_command(itt);
                }
                true
            }
            // The target still has the task (this was a retry of a command it had): wait.
            opcode::SCSI_COMMAND if r.reason == RejectReason::TaskInProgress => true,
            opcode::DATA_OUT | opcode::SNACK_REQUEST => true,
            // A request discarded for its data digest: sent again as it was.
            opcode::NOP_OUT
            | opcode::TEXT_REQUEST
            | opcode::TASK_MGMT_REQUEST
            | opcode::LOGOUT_REQUEST
                if r.reason == RejectReason::DataDigestError =>
            {
                if let Some(itt) = itt {
                    self.resend_request(conn, itt);
                }
                true
            }
            _ => false,
        }
    }

    /// Sends request `itt` again at once, unchanged (it counts as one of its resends).
    fn resend_request(&mut self, conn: ConnId, itt: Itt) {
        let now = self.now;
        let Some(w) = self.request_wire.get_mut(&itt).filter(|w| w.conn == conn) else {
            return;
        };
        w.sent = now;
        w.resends += 1;
        let pdu = w.pdu.clone();
        if let Some(c) = self
            .find_mut(conn)
            .filter(|c| c.state != ConnState::Closing)
        {
            c.queue(pdu);
        }
    }

    /// Sends a command again as first sent (section 7.2.1), on its own connection.
    pub(super) fn retry_command(&mut self, itt: Itt) {
        let max = self.config.recovery.max_command_retries;
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        if t.retries >= max {
            // Giving up leaves the CmdSN gap the command never filled: an ABORT TASK plugs
            // it (section 7.11: the target then "MUST consider the original command with
            // that RefCmdSN as received").
            let conn = t.conn;
            self.give_up_task(itt, Failure::TooManyRetries, conn, self.now);
            return;
        }
        let mut out = Vec::new();
        if !t.retry_pdus(&mut out) {
            return;
        }
        t.last_activity = self.now;
        let conn = t.conn;
        self.retried += 1;
        if let Some(c) = self
            .find_mut(conn)
            .filter(|c| c.state != ConnState::Closing)
        {
            for pdu in out {
                c.queue(pdu);
            }
        }
    }

    /// The recovery tick: command deadlines, and under recovery the retry timer of every
    /// command and the probes of connections with stalled commands.
    pub(super) fn handle_recovery_tick(&mut self, now: Instant) {
        if self.next_tick.is_none_or(|t| now < t) {
            return;
        }
        self.next_tick = None;
        self.expire_commands(now);
        self.expire_requests(now);
        if std::mem::take(&mut self.logout_may_be_due) {
            self.send_due_logouts();
        }
        self.probe_closed_window(now);
        if self.recovering() {
            self.retry_stalled(now);
            self.ask_stale_status_gaps(now);
        }
        self.arm_recovery(now);
    }

    /// Status gaps nothing else asks about again: a lost answer to a keepalive ping, say,
    /// would otherwise hold ExpStatSN back for the life of the connection.
    fn ask_stale_status_gaps(&mut self, now: Instant) {
        let period = self.config.recovery.retry_timeout;
        let stale: Vec<(ConnId, SeqNum, u32)> = self
            .conns
            .iter_mut()
            .filter(|c| c.state != ConnState::Closing)
            .filter_map(|c| {
                c.stale_status_gap(now, period)
                    .map(|(beg, run)| (c.id, beg, run))
            })
            .collect();
        for (conn, beg, run) in stale {
            self.status_snack(conn, beg, run);
        }
    }

    /// Commands wait for a window that no PDU in flight will open: the target may have moved
    /// MaxCmdSN in an answer that was lost with its connection, or (ErrorRecoveryLevel 1 and
    /// above) it holds the window shut until the statuses and read data it keeps for
    /// retransmission are acknowledged. A NOP-Out brings the current window back (its NOP-In
    /// carries ExpCmdSN and MaxCmdSN, section 11.19), and acknowledges with its ExpStatSN what
    /// arrived on its connection; ExpStatSN is per connection (section 4.2.2.2), so every live
    /// connection sends one.
    fn probe_closed_window(&mut self, now: Instant) {
        if self.waiting.is_empty() || !self.tasks.is_empty() || self.window.can_send() {
            return;
        }
        if self.closing || self.reinstating || self.ended {
            return;
        }
        let conns: SmallVec<[ConnId; 4]> = self.live_connections().collect();
        for conn in conns {
            self.probe(conn, now);
        }
    }

    /// Commands past their deadline fail with [`Failure::Timeout`] and are aborted at the
    /// target with an ABORT TASK whose answer nobody waits for.
    fn expire_commands(&mut self, now: Instant) {
        let Some(limit) = self.config.recovery.command_timeout else {
            return;
        };
        let expired: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(t.queued.submitted) >= limit)
            .map(|(itt, _)| *itt)
            .collect();
        for itt in expired {
            let Some(t) = self.tasks.remove(&itt) else {
                continue;
            };
            let (conn, cmd_sn, lun, held) =
                (t.conn, t.cmd_sn, t.queued.command.lun, t.held_stat_sn);
            self.release_held_status(conn, held);
            self.finish_task(t, Err(Failure::Timeout));
            self.abort_quietly(conn, itt, cmd_sn, lun);
        }
        // Commands not sent yet (waiting for the window, for a connection, or for the
        // session's reinstatement) have the same deadline: the target never saw them, so
        // there is nothing to abort.
        let completions = &mut self.completions;
        self.waiting.retain(|q| {
            let late = now.saturating_duration_since(q.submitted) >= limit;
            if late {
                completions.push_back(Completion::Command(q.id, Err(Failure::Timeout)));
            }
            !late
        });
    }

    /// Ends task `itt` with `failure` and tells the target to end it too, with an ABORT TASK
    /// on `conn` whose answer is not reported (section 11.5.1): that also fills the CmdSN of a
    /// command the target never got (section 7.11).
    pub(super) fn give_up_task(&mut self, itt: Itt, failure: Failure, conn: ConnId, now: Instant) {
        let Some(t) = self.tasks.get(&itt) else {
            return;
        };
        let (cmd_sn, lun) = (t.cmd_sn, t.queued.command.lun);
        self.complete_task(itt, Err(failure), now);
        self.abort_quietly(conn, itt, cmd_sn, lun);
    }

    /// ABORT TASK for a task this side already gave up on (section 11.5.1); its answer is
    /// not reported.
    pub(super) fn abort_quietly(
        &mut self,
        conn: ConnId,
        referenced: Itt,
        ref_cmd_sn: SeqNum,
        lun: Lun,
    ) {
        if self
            .find(conn)
            .is_none_or(|c| c.state == ConnState::Closing)
        {
            return;
        }
        let itt = self.next_itt();
        let cmd_sn = self.window.immediate();
        let pdu = Pdu::TaskMgmtRequest(crate::pdu::TaskMgmtRequest {
            immediate: true,
            function: TmfFunction::AbortTask,
            lun,
            itt,
            referenced_task_tag: referenced,
            cmd_sn,
            exp_stat_sn: SeqNum(0),
            ref_cmd_sn,
            exp_data_sn: 0,
        });
        self.queue_request(
            conn,
            itt,
            pdu,
            Request::QuietAbort {
                conn,
                referenced,
                ref_cmd_sn,
                lun,
            },
        );
        // Sent again by the retry timer like any request (under recovery a lost PDU is not
        // an error): a target that never got it keeps the task, and with it a slot of the
        // command window, for ever (seed 413401: a queue depth of 1 closed the window for
        // good). Sent twice it is harmless: the second finds no task and is answered "task
        // does not exist" (section 11.6.1), an answer nobody reads.
    }

    /// Section 7.1.4: commands without progress for the retry period.
    fn retry_stalled(&mut self, now: Instant) {
        let period = self.config.recovery.retry_timeout;
        let exp_cmd_sn = self.window.exp_cmd_sn();
        let conns = &self.conns;
        let stalled: Vec<(Itt, bool)> = self
            .tasks
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(t.last_activity) >= period)
            // Waiting for a connection or for a reassignment's answer (ErrorRecoveryLevel
            // 2): nothing to ask on a connection that is gone.
            .filter(|(_, t)| {
                !t.reassigning
                    && conns
                        .iter()
                        .any(|c| c.id == t.conn && c.state != ConnState::Closing)
            })
            .map(|(itt, t)| (*itt, !t.heard && !t.cmd_sn.lt(exp_cmd_sn)))
            .collect();
        let mut probe: Vec<ConnId> = Vec::new();
        for (itt, unacknowledged) in stalled {
            if unacknowledged {
                // Section 7.1.4.2 a: "Requests not acknowledged for a long time ... The
                // initiator MAY retry non-acknowledged commands".
                self.retry_command(itt);
                // The acknowledgement may have been lost with the only PDU that answered
                // the command (a Data-In carrying its status): the target then ignores the
                // retry as a duplicate CmdSN (section 4.2.2.1), and only the probe's NOP-In
                // (ExpCmdSN, the next StatSN) shows the command received and its status
                // missing, which a Status SNACK then asks for.
                if let Some(t) = self.tasks.get(&itt) {
                    if !probe.contains(&t.conn) {
                        probe.push(t.conn);
                    }
                }
                continue;
            }
            self.stall_tag = self.stall_tag.wrapping_add(1).max(1);
            let tag = self.stall_tag;
            let max = self.config.recovery.max_command_retries;
            if let Some(t) = self.tasks.get(&itt).filter(|t| t.fruitless_stalls() >= max) {
                // Asked again and again without a missing Data-In getting through (a link
                // that loses every copy of it): the read fails, and the target is told to end
                // it (an ABORT TASK on its connection, section 11.5.1).
                let conn = t.conn;
                self.give_up_task(itt, Failure::TooManyRetries, conn, now);
                continue;
            }
            if let Some(t) = self.tasks.get_mut(&itt) {
                t.last_activity = now;
                t.handle_stall(tag);
                if !probe.contains(&t.conn) {
                    probe.push(t.conn);
                }
            }
            self.flush_task_snacks(itt);
        }
        for conn in probe {
            self.probe(conn, now);
        }
    }

    /// Asks the target for its current StatSN with a NOP-Out (section 7.1.3 a), at most once
    /// per retry period, and again for statuses still missing.
    fn probe(&mut self, conn: ConnId, now: Instant) {
        let period = self.config.recovery.retry_timeout;
        let itt = self.next_itt();
        let cmd_sn = self.window.immediate();
        let Some(c) = self
            .find_mut(conn)
            .filter(|c| c.state != ConnState::Closing)
        else {
            return;
        };
        if c.probed_at
            .is_some_and(|t| now.saturating_duration_since(t) < period)
        {
            return;
        }
        c.probed_at = Some(now);
        let missing = c.probe_status_gap(now);
        let ping = nop_out(itt, cmd_sn);
        c.queue(ping.clone());
        self.requests.insert(
            itt,
            Request::Ping {
                id: None,
                conn,
                sent: now,
            },
        );
        // A probe is not sent again (the next one asks the same), and one whose PDU or answer
        // was lost is forgotten after a retry period instead of waiting for ever.
        self.track_request(conn, itt, &ping);
        if let Some(w) = self.request_wire.get_mut(&itt) {
            w.resends = self.config.recovery.max_command_retries;
        }
        if let Some((beg, run)) = missing {
            self.status_snack(conn, beg, run);
        }
    }
}

/// How a PDU's StatSN field is used.
enum Kind {
    /// It numbers this status.
    Status,
    /// It is the next StatSN, not taken.
    Next,
    /// Reserved.
    None,
}

/// The StatSN a target PDU carries as its own (status PDUs only).
fn stat_sn_of(pdu: &Pdu) -> Option<SeqNum> {
    Some(match pdu {
        Pdu::ScsiResponse(p) => p.stat_sn,
        Pdu::DataIn(p) if p.status_present => p.stat_sn,
        Pdu::NopIn(p) if p.itt != Itt::RESERVED => p.stat_sn,
        Pdu::TaskMgmtResponse(p) => p.stat_sn,
        Pdu::TextResponse(p) => p.stat_sn,
        Pdu::AsyncMessage(p) => p.stat_sn,
        Pdu::Reject(p) => p.stat_sn,
        Pdu::LogoutResponse(p) => p.stat_sn,
        _ => return None,
    })
}
