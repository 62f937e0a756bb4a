//! Connection recovery in a target session (ErrorRecoveryLevel 2, RFC 7143 sections 6.3.4,
//! 7.1.4.3, 7.2.2, 11.5.1, 11.14 and 11.15).
//!
//! A connection that fails does not take its tasks with it: they wait, allegiant to the dead
//! connection, for the initiator to log it out (explicitly with reason "remove the connection
//! for recovery", or implicitly by logging in a new connection with the same CID) and to move
//! each of them to a live connection with TASK REASSIGN. A write then asks for its missing data
//! with new R2Ts; a read sends its Data-In again from the acknowledged DataSN, cut to the new
//! connection's MaxRecvDataSegmentLength; every reassigned task ends with a status on the new
//! connection. What the SCSI layer finishes meanwhile is kept for that.
//!
//! The tasks wait DefaultTime2Wait + DefaultTime2Retain (sections 7.5 and 13.16) from the
//! failure. Then the state is discarded in this order: unstarted SCSI work is withdrawn, tasks
//! the SCSI layer still runs are marked so that their results are dropped when they come back
//! (nothing of them is freed under the SCSI layer's feet, the pattern of CVE-2023-54184 in
//! another target), held CmdSNs are skipped, the unit attention "commands cleared by iSCSI
//! protocol event" is raised for each LUN that lost a command (section 11.14.5), and the
//! session ends if nothing else is left of it.

use std::time::{Duration, Instant};

use super::connection::ConnState;
use super::recovery::RetentionCharge;
use super::scsi::{EndedBy, TaskState};
use super::{ConnId, TargetSession, TargetSessionEnv};
use crate::params::SessionParams;
use crate::pdu::codes::TmfResponse;
use crate::pdu::{Pdu, TaskMgmtRequest};
use crate::seq::{Itt, Lun, SeqNum};
use crate::window::Slot;

/// A connection whose transport is gone, whose tasks wait for reassignment.
#[derive(Debug)]
pub(super) struct Orphaned {
    pub(super) id: ConnId,
    pub(super) cid: u16,
    /// Its parameters, for answering the commands the SCSI layer finishes meanwhile.
    pub(super) params: SessionParams,
    /// Logged out for recovery (explicitly, or implicitly by a login with its CID): its
    /// tasks may be reassigned (section 7.2.2).
    pub(super) logged_out: bool,
    /// CmdSNs of commands it sent that were waiting for an earlier one: discarded, and
    /// waited for again (the initiator retries them), until the state is discarded.
    pub(super) held: Vec<SeqNum>,
    /// When its tasks are discarded: Time2Wait + Time2Retain after the failure.
    pub(super) expires: Instant,
}

impl TargetSession {
    /// Whether the session recovers connections (ErrorRecoveryLevel 2 was negotiated).
    pub(super) fn recovers_connections(&self) -> bool {
        self.params.error_recovery_level >= 2
            && self.config.session_type == crate::params::SessionType::Normal
    }

    /// The parameters of `conn`, live or orphaned.
    pub(super) fn conn_params(&self, conn: ConnId) -> Option<SessionParams> {
        self.find(conn)
            .map(|c| c.params)
            .or_else(|| self.orphans.iter().find(|o| o.id == conn).map(|o| o.params))
    }

    /// The transport of `conn` is gone and its tasks wait for reassignment (section 7.1.4.3):
    /// the connection is forgotten, its held commands discarded (section 11.14), and the
    /// Time2Wait + Time2Retain clock starts.
    pub(super) fn orphan_connection(&mut self, conn: ConnId, env: &mut dyn TargetSessionEnv) {
        let Some(index) = self.conns.iter().position(|c| c.id == conn) else {
            return;
        };
        let c = self.conns.remove(index);
        let held = self.window.discard_held_where(|h| h.conn == conn);
        for t in self.tasks.values_mut().filter(|t| t.conn == conn) {
            // No sequence reception timeout while nobody can send the data.
            t.deadline = None;
        }
        self.tmfs_of_closed_connection(conn);
        self.release_deferred_slots();
        let wait = Duration::from_secs(u64::from(self.params.default_time2wait));
        let retain = Duration::from_secs(u64::from(self.params.default_time2retain));
        let orphan = Orphaned {
            id: conn,
            cid: c.cid,
            params: c.params,
            logged_out: c.recovery_logout,
            held,
            expires: self.now + wait + retain,
        };
        self.stats.connections_orphaned += 1;
        if retain.is_zero() {
            // "If Time2Retain is 0, the target has already discarded the connection (and
            // possibly the session) state along with the task states" (section 11.15.4).
            self.orphans.push(orphan);
            self.discard_orphan(conn, env);
            return;
        }
        self.orphans.push(orphan);
        self.forget_settled_orphans();
    }

    /// An implicit or explicit logout for recovery of the connection with `cid` (sections
    /// 6.3.4 and 11.14): its tasks may now be reassigned. Returns whether such a connection
    /// exists (live, closing or orphaned).
    pub(super) fn logout_for_recovery(&mut self, cid: u16) -> bool {
        let mut found = false;
        for c in self.conns.iter_mut().filter(|c| c.cid == cid) {
            c.recovery_logout = true;
            found = true;
        }
        for o in self.orphans.iter_mut().filter(|o| o.cid == cid) {
            o.logged_out = true;
            found = true;
        }
        self.forget_settled_orphans();
        found
    }

    /// Orphans logged out with no task left need no more waiting.
    fn forget_settled_orphans(&mut self) {
        let tasks = &self.tasks;
        self.orphans
            .retain(|o| !o.logged_out || tasks.values().any(|t| t.conn == o.id));
    }

    /// The earliest expiry of an orphaned connection.
    pub(super) fn orphan_deadline(&self) -> Option<Instant> {
        self.orphans.iter().map(|o| o.expires).min()
    }

    /// Discards the orphans whose time is up (see the module docs).
    pub(super) fn expire_orphans(&mut self, now: Instant, env: &mut dyn TargetSessionEnv) {
        let due: Vec<ConnId> = self
            .orphans
            .iter()
            .filter(|o| now >= o.expires)
            .map(|o| o.id)
            .collect();
        for id in due {
            self.discard_orphan(id, env);
        }
    }

    /// Discards every orphan (the session logs out).
    pub(super) fn discard_orphans(&mut self, env: &mut dyn TargetSessionEnv) {
        let ids: Vec<ConnId> = self.orphans.iter().map(|o| o.id).collect();
        for id in ids {
            self.discard_orphan(id, env);
        }
    }

    /// Discards an orphan's tasks and forgets it; `env` hears of the cleared commands.
    fn discard_orphan(&mut self, id: ConnId, env: &mut dyn TargetSessionEnv) {
        let Some(at) = self.orphans.iter().position(|o| o.id == id) else {
            return;
        };
        let orphan = self.orphans.remove(at);
        // 1. Work the SCSI layer has not taken will not run.
        let unstarted: Vec<super::Ticket> = self
            .work
            .iter()
            .filter(|w| w.conn == id)
            .map(|w| w.ticket)
            .collect();
        self.work.retain(|w| w.conn != id);
        for ticket in unstarted {
            self.drop_unstarted(ticket);
        }
        // 2. Tasks end: running ones when their result comes back (and it is dropped).
        let mut cleared: Vec<Lun> = Vec::new();
        let itts: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.conn == id)
            .map(|(itt, _)| *itt)
            .collect();
        for itt in itts {
            let Some((lost, answered, lun)) = self.tasks.get(&itt).map(|t| {
                // An answered task whose status went out only waited for an acknowledgement
                // the dead connection could not carry: nothing of it is lost.
                let delivered = matches!(&t.state, TaskState::Answered(a) if a.delivered);
                (!delivered, t.answered(), t.lun)
            }) else {
                continue;
            };
            if lost && !cleared.contains(&lun) {
                cleared.push(lun);
            }
            self.remember_aborted(itt);
            if answered {
                self.tasks.remove(&itt);
            } else {
                self.end_task(itt, EndedBy::ConnectionLost);
            }
        }
        // 3. Commands it had sent out of order are given up: the window moves past them.
        for sn in orphan.held {
            self.window.cancel(sn);
        }
        self.release_deferred_slots();
        // 4. Section 11.14.5: "the target MUST report a Unit Attention condition on the next
        // command processed on any connection for each affected I_T_L nexus ... 47h/7Fh".
        for lun in cleared {
            env.commands_cleared(lun);
        }
    }

    /// TASK REASSIGN (sections 7.2.2, 11.5.1): moves the task's allegiance to `conn` once its
    /// old connection was logged out for recovery, then resumes it there.
    pub(super) fn reassign_task(
        &mut self,
        conn: ConnId,
        req: &TaskMgmtRequest,
        slot: Option<Slot>,
    ) {
        if !self.recovers_connections() {
            // "When a target does not support allegiance reassignment, it MUST respond with a
            // task management response code of 'Task allegiance reassignment not supported'."
            return self.tmf_respond(conn, req.itt, TmfResponse::ReassignmentNotSupported, slot);
        }
        let itt = req.referenced_task_tag;
        let Some(task) = self.tasks.get(&itt).filter(|t| t.ended.is_none()) else {
            return self.tmf_respond(conn, req.itt, TmfResponse::TaskDoesNotExist, slot);
        };
        let old = task.conn;
        if old == conn {
            // Reassigned here already: the initiator sent the request again (its answer was
            // lost, or it retried). What the first one resent is not sent twice.
            return self.tmf_respond(conn, req.itt, TmfResponse::FunctionComplete, slot);
        }
        let released = self.orphans.iter().any(|o| o.id == old && o.logged_out)
            || self
                .find(old)
                .is_some_and(|c| c.state == ConnState::Closing && c.recovery_logout);
        if !released {
            // "If allegiance reassignment is supported by the target but the task is still
            // allegiant to a different connection, or a successful recovery Logout of the
            // previously allegiant connection was not performed, the target MUST respond with
            // a task management response code of 'Task still allegiant'."
            return self.tmf_respond(conn, req.itt, TmfResponse::TaskStillAllegiant, slot);
        }
        // "The task management response MUST be issued before the reassignment becomes
        // effective" (section 11.5.1): it is queued first on the new connection.
        self.tmf_respond(conn, req.itt, TmfResponse::FunctionComplete, slot);
        self.stats.tasks_reassigned += 1;
        self.take_over(itt, conn, req.exp_data_sn);
        self.forget_settled_orphans();
    }

    /// The task `itt` continues on `conn` "from its current state" (section 7.2.2).
    fn take_over(&mut self, itt: Itt, conn: ConnId, exp_data_sn: u32) {
        let Some((params, counter)) = self
            .find(conn)
            .map(|c| (c.params, std::sync::Arc::clone(&c.retained_bytes)))
        else {
            return;
        };
        let Some(task) = self.tasks.get_mut(&itt) else {
            return;
        };
        task.conn = conn;
        task.timeouts = 0;
        // "any SNACK Tag it holds for a final response from the original connection is
        // deleted, and the default value of 0 MUST be used instead."
        task.snack_tag = 0;
        match &mut task.state {
            TaskState::Collecting {
                write, reserved, ..
            } => {
                let reserved = *reserved;
                // New R2Ts for everything still missing; the old ones died with the
                // connection.
                let progress = write.reassign(&params, &mut self.ttts);
                if let Some(c) = self.find_mut(conn) {
                    c.write_bytes += reserved;
                }
                self.write_progress(itt, progress);
            }
            // The SCSI layer has it: its answer goes to the new connection.
            TaskState::Running { .. } => {}
            TaskState::Answered(a) => {
                // Its data is kept for the new connection now, and counted there (not before,
                // if the SCSI layer finished it while it was orphaned).
                a.charge = a
                    .data_in
                    .as_ref()
                    .filter(|seq| seq.data_len() > 0)
                    .map(|seq| RetentionCharge::new(seq.data_len(), &counter));
                let mut out: Vec<Pdu> = Vec::new();
                match a.data_in.as_ref() {
                    Some(seq) => {
                        // Section 11.5.6: ExpDataSN "MUST be 0 or higher than the DataSN of
                        // the last acknowledged Data-In PDU, but not larger than DataSN + 1 of
                        // the last Data-IN PDU sent by the target. Any other value MUST be
                        // ignored"; 0 leaves the acknowledgement where it was.
                        if exp_data_sn != 0
                            && exp_data_sn >= a.acked_data_sn
                            && exp_data_sn <= a.data_in_sent
                        {
                            a.acked_data_sn = exp_data_sn;
                        }
                        // "the target MUST transmit all Data-In PDUs (if any) starting with
                        // the data acknowledgment reference number", cut for the new
                        // connection, "and MUST involve the (re)transmission of the status".
                        if let Some(mut resumed) = seq.resume(a.acked_data_sn, &params) {
                            out.extend(resumed.by_ref().map(Pdu::DataIn));
                            let mut rsp = match a.response.clone() {
                                Some(r) => r,
                                None => resumed.response(&[]),
                            };
                            rsp.exp_data_sn = resumed.data_in_count();
                            rsp.snack_tag = 0;
                            a.data_in_sent = resumed.data_in_count();
                            a.response = Some(rsp.clone());
                            out.push(Pdu::ScsiResponse(rsp));
                        }
                    }
                    None => {
                        if let Some(mut rsp) = a.response.clone() {
                            rsp.snack_tag = 0;
                            out.push(Pdu::ScsiResponse(rsp));
                        }
                    }
                }
                a.delivered = true;
                for pdu in out {
                    // New PDUs of this connection: the status takes a StatSN here.
                    self.queue_to(conn, pdu);
                }
            }
        }
    }
}
