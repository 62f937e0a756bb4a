//! Connection recovery in an initiator session (ErrorRecoveryLevel 2, RFC 7143 sections
//! 6.3.4, 7.1.4.3, 7.2.2 and 11.5.1).
//!
//! When a connection fails, its commands stay in progress ("a command is in progress as long
//! as it has not received a response or a Data-In PDU including status"). The driver logs in
//! a new connection with the session's TSIH and the failed connection's CID
//! ([`super::Event::RecoverConnection`]): connection reinstatement, which is the implicit
//! logout of the failed one with reason "remove the connection for recovery". Each command is
//! then moved to it with TASK REASSIGN. A read first forgets the Data-In it cannot vouch for
//! and tells the target, in ExpDataSN, where to resume; a write answers whatever new R2Ts
//! come. A command the target never had (its CmdSN was not acknowledged) is sent again with
//! its original CmdSN; one the target cannot reassign is issued again as a new command, as at
//! level 0. If the login fails, the session falls back to reinstatement.

use std::time::Instant;

use super::requests::Request;
use super::{CloseReason, ConnId, Event, Failure, InitiatorSession};
use crate::pdu::codes::{TmfFunction, TmfResponse};
use crate::pdu::{Pdu, TaskMgmtRequest};
use crate::seq::{Itt, SeqNum};

/// A connection lost at ErrorRecoveryLevel 2 whose commands wait for a replacement.
#[derive(Debug)]
pub(super) struct LostConnection {
    pub(super) id: ConnId,
    pub(super) cid: u16,
}

impl InitiatorSession {
    /// Whether the session recovers connections (ErrorRecoveryLevel 2 was negotiated).
    pub(super) fn recovers_connections(&self) -> bool {
        self.params.error_recovery_level >= 2
    }

    /// Connection `id` (CID `cid`) failed: its commands wait for a connection with the same
    /// CID, which the driver is asked to log in.
    pub(super) fn keep_for_reassignment(&mut self, id: ConnId, cid: u16) {
        for t in self.tasks.values_mut().filter(|t| t.conn == id) {
            t.reassigning = false;
            // Its StatSN bookkeeping died with the connection.
            t.held_stat_sn = None;
        }
        match self.lost.iter().find(|l| l.cid == cid).map(|l| l.id) {
            None if self.fruitless_recoveries >= self.config.recovery.max_command_retries => {
                // Replacement after replacement failed before the target could answer
                // anything: recovering the connection is not working, so the session is
                // reinstated (level 0), where each command's retries are bounded.
                self.lost.push(LostConnection { id, cid });
                self.fruitless_recoveries = 0;
                self.begin_reinstatement(CloseReason::Reinstate);
            }
            None => {
                self.fruitless_recoveries += 1;
                self.lost.push(LostConnection { id, cid });
                self.events.push_back(Event::RecoverConnection { cid });
            }
            // A recovery of this CID is under way already: these wait with its commands.
            Some(old) => {
                for t in self.tasks.values_mut().filter(|t| t.conn == id) {
                    t.conn = old;
                }
            }
        }
    }

    /// ABORT TASKs that would fill a CmdSN given up on, sent on connection `conn` that
    /// failed: sent again on another live connection, or kept for the one that replaces it.
    pub(super) fn keep_plugs_of(&mut self, conn: ConnId) {
        let plugs: Vec<(Itt, Itt, SeqNum, crate::seq::Lun)> = self
            .requests
            .iter()
            .filter_map(|(itt, r)| match r {
                Request::QuietAbort {
                    conn: c,
                    referenced,
                    ref_cmd_sn,
                    lun,
                } if *c == conn => Some((*itt, *referenced, *ref_cmd_sn, *lun)),
                _ => None,
            })
            .collect();
        for (itt, referenced, ref_cmd_sn, lun) in plugs {
            self.requests.remove(&itt);
            self.request_wire.remove(&itt);
            let live = self.live_connections().find(|c| *c != conn);
            match live {
                Some(live) => self.abort_quietly(live, referenced, ref_cmd_sn, lun),
                None => self.plugs.push((referenced, ref_cmd_sn, lun)),
            }
        }
    }

    /// The driver could not log in a connection to replace CID `cid` (the target forgot the
    /// session, say): the session is reinstated instead, and its commands issued again there
    /// (level 0 recovery).
    pub fn connection_recovery_failed(&mut self, cid: u16) {
        if self.lost.iter().any(|l| l.cid == cid) {
            self.begin_reinstatement(CloseReason::Reinstate);
        }
    }

    /// A connection with CID `cid` joined as `new`: the commands of the lost connection with
    /// that CID are moved to it, each with a TASK REASSIGN.
    pub(super) fn reassign_to(&mut self, new: ConnId, cid: u16, now: Instant) {
        for (referenced, ref_cmd_sn, lun) in std::mem::take(&mut self.plugs) {
            self.abort_quietly(new, referenced, ref_cmd_sn, lun);
        }
        let Some(at) = self.lost.iter().position(|l| l.cid == cid) else {
            return;
        };
        let old = self.lost.remove(at).id;
        let Some(params) = self.find(new).map(|c| c.params) else {
            return;
        };
        let mut itts: Vec<(SeqNum, Itt)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.conn == old)
            .map(|(itt, t)| (t.cmd_sn, *itt))
            .collect();
        itts.sort_by(|a, b| a.0.serial_cmp(b.0).unwrap_or(std::cmp::Ordering::Equal));
        let max = self.config.recovery.max_command_retries;
        for (_, itt) in itts {
            let Some(t) = self.tasks.get_mut(&itt) else {
                continue;
            };
            t.reassignments += 1;
            if t.reassignments > max {
                // Its connection keeps failing under it (a link that cannot carry the whole
                // of it between two failures): it ends rather than move for ever, and the
                // target is told to end it too (its connection was just logged out, so the
                // ABORT TASK may go on another one, section 11.5.1), freeing its CmdSN slot.
                self.give_up_task(itt, Failure::TooManyRetries, new, now);
                continue;
            }
            let exp_data_sn = t.prepare_reassign(&params);
            t.conn = new;
            t.reassigning = true;
            t.last_activity = now;
            let (bytes, lun, ref_cmd_sn) = (t.bytes(), t.queued.command.lun, t.cmd_sn);
            let tmf_itt = self.next_itt();
            // "TASK REASSIGN MUST be issued as an immediate command" (section 11.5.1).
            let pdu = Pdu::TaskMgmtRequest(TaskMgmtRequest {
                immediate: true,
                function: TmfFunction::TaskReassign,
                lun,
                itt: tmf_itt,
                referenced_task_tag: itt,
                cmd_sn: self.window.immediate(),
                exp_stat_sn: SeqNum(0),
                ref_cmd_sn,
                exp_data_sn,
            });
            if let Some(c) = self.find_mut(new) {
                c.issued(bytes);
            }
            self.queue_request(
                new,
                tmf_itt,
                pdu,
                Request::Reassign {
                    task: itt,
                    conn: new,
                },
            );
            self.reassigned += 1;
        }
    }

    /// The answer to a TASK REASSIGN of command `itt` (sections 7.2.2, 11.6.1).
    pub(super) fn answer_reassign(&mut self, itt: Itt, response: TmfResponse, now: Instant) {
        let Some(t) = self.tasks.get_mut(&itt) else {
            return;
        };
        t.reassigning = false;
        t.last_activity = now;
        match response {
            // It goes on from where it was; the target resends what is needed.
            TmfResponse::FunctionComplete => {}
            TmfResponse::TaskDoesNotExist if !t.cmd_sn.lt(self.window.exp_cmd_sn()) => {
                // The target never took it in (its CmdSN was not acknowledged): sent again
                // with its original tag and CmdSN (section 7.2.1), it fills its place.
                self.retry_command(itt);
            }
            TmfResponse::TaskStillAllegiant => {
                // The target kept it on the failed connection although a login replaced it:
                // issuing it again could run it twice, so it fails.
                self.complete_task(itt, Err(Failure::ConnectionLost), now);
            }
            _ => {
                // The target cannot reassign it (or no longer has it): as at level 0, issued
                // again as a new command (within the retry bound).
                let id = t.queued.id;
                self.requeue_tasks(|t| t.queued.id == id);
                self.issue_waiting(now);
            }
        }
    }
}
