//! Task management in a target session (RFC 7143 sections 11.5 and 11.6; SAM-5 7).
//!
//! A function that affects tasks answers only once they are over. ABORT TASK of a command the
//! SCSI layer is running waits for that command's result (which is dropped). ABORT TASK SET,
//! CLEAR TASK SET, LOGICAL UNIT RESET and the target resets affect the tasks of their scope
//! issued before them (CmdSN below the function's), and their answer follows section 11.6.2:
//! the target waits until every command before the function has arrived (later arrivals in
//! scope are aborted on the spot), until the affected tasks the SCSI layer is running have
//! ended, performs the reset, and then until the initiator has acknowledged (ExpStatSN) every
//! status sent before, on the session's other connections, asking with a NOP-In where needed.
//! On the function's own connection those statuses precede the answer in the same byte stream,
//! so its initiator reads them first; waiting for their acknowledgement there matters only
//! once statuses can be lost and recovered (ErrorRecoveryLevel 1 and above).

use super::connection::ping;
use super::scsi::EndedBy;
use super::{ConnId, Event, ResetKind, TargetSession, TargetSessionEnv};
use crate::pdu::codes::{TmfFunction, TmfResponse};
use crate::pdu::{Pdu, TaskMgmtRequest, TaskMgmtResponse};
use crate::seq::{Itt, Lun, SeqNum};
use crate::task::TttAllocator;
use crate::window::Slot;

/// A task management function waiting for the tasks it affects.
#[derive(Debug)]
pub(super) struct PendingTmf {
    id: u64,
    conn: ConnId,
    itt: Itt,
    cmd_sn: SeqNum,
    scope: Scope,
    response: TmfResponse,
    /// Done in the SCSI layer once the affected tasks ended.
    reset: Option<ResetKind>,
    slot: Option<Slot>,
    /// Wait until every command before this one arrived (task-set functions).
    wait_for_commands: bool,
    acks: Acks,
    /// TARGET COLD RESET: every connection closes after the answer.
    cold: bool,
}

/// Which tasks a function affects.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Scope {
    /// One task (ABORT TASK).
    Task,
    /// The tasks of one LUN issued before the function.
    Lun(Lun),
    /// Every task of the session issued before the function.
    All,
}

impl Scope {
    fn covers(self, lun: Lun) -> bool {
        match self {
            Scope::Task => false,
            Scope::Lun(l) => l == lun,
            Scope::All => true,
        }
    }
}

/// Acknowledgement of earlier statuses on the other connections (section 11.6.2 d).
#[derive(Debug)]
enum Acks {
    /// Not needed (ABORT TASK).
    None,
    /// Not asked yet.
    Pending,
    /// Waiting for ExpStatSN to reach these values on these connections.
    Waiting(Vec<(ConnId, SeqNum)>),
}

impl TargetSession {
    pub(super) fn handle_tmf(
        &mut self,
        conn: ConnId,
        req: TaskMgmtRequest,
        slot: Option<Slot>,
        env: &mut dyn TargetSessionEnv,
    ) {
        let function = req.function;
        if self.tmfs.iter().any(|t| t.itt == req.itt && t.conn == conn) {
            // The same request again (an initiator under error recovery resends a request
            // whose answer it has not seen): it is already being carried out.
            self.release_slot(slot);
            return;
        }
        let (scope, reset) = match function {
            TmfFunction::AbortTask => return self.abort_task(conn, &req, slot),
            TmfFunction::AbortTaskSet | TmfFunction::ClearTaskSet => (Scope::Lun(req.lun), None),
            TmfFunction::LogicalUnitReset => {
                (Scope::Lun(req.lun), Some(ResetKind::LogicalUnit(req.lun)))
            }
            TmfFunction::TargetWarmReset => (Scope::All, Some(ResetKind::TargetWarm)),
            TmfFunction::TargetColdReset => (Scope::All, Some(ResetKind::TargetCold)),
            // Connection recovery (ErrorRecoveryLevel 2; below it, "not supported").
            TmfFunction::TaskReassign => return self.reassign_task(conn, &req, slot),
            // CLEAR ACA: NACA=1 is refused by the SCSI layer, so no ACA condition ever exists
            // to clear; and any function this target does not know.
            _ => return self.tmf_respond(conn, req.itt, TmfResponse::NotSupported, slot),
        };
        if let Scope::Lun(lun) = scope {
            if !env.lun_exists(lun) {
                return self.tmf_respond(conn, req.itt, TmfResponse::LunDoesNotExist, slot);
            }
        }
        let id = self.next_tmf_id();
        let affected: Vec<Itt> = self
            .tasks
            .iter()
            // Answered commands kept for recovery are over; a reset does not reach them.
            .filter(|(_, t)| scope.covers(t.lun) && t.cmd_sn.lt(req.cmd_sn) && !t.answered())
            .map(|(itt, _)| *itt)
            .collect();
        for itt in affected {
            self.remember_aborted(itt);
            self.end_task(itt, EndedBy::Tmf(id));
        }
        self.tmfs.push_back(PendingTmf {
            id,
            conn,
            itt: req.itt,
            cmd_sn: req.cmd_sn,
            scope,
            response: TmfResponse::FunctionComplete,
            reset,
            slot,
            wait_for_commands: true,
            acks: Acks::Pending,
            cold: function == TmfFunction::TargetColdReset,
        });
    }

    /// ABORT TASK (section 11.5.1 and 11.6.1).
    fn abort_task(&mut self, conn: ConnId, req: &TaskMgmtRequest, slot: Option<Slot>) {
        let referenced = req.referenced_task_tag;
        let live = self.tasks.get(&referenced).filter(|t| !t.answered());
        if let Some(running) = live.map(|t| t.running()) {
            self.remember_aborted(referenced);
            if !running {
                // Still collecting its data: it ends now.
                let id = self.next_tmf_id();
                self.end_task(referenced, EndedBy::Tmf(id));
                return self.tmf_respond(conn, req.itt, TmfResponse::FunctionComplete, slot);
            }
            let id = self.next_tmf_id();
            self.end_task(referenced, EndedBy::Tmf(id));
            self.tmfs.push_back(PendingTmf {
                id,
                conn,
                itt: req.itt,
                cmd_sn: req.cmd_sn,
                scope: Scope::Task,
                response: TmfResponse::FunctionComplete,
                reset: None,
                slot,
                wait_for_commands: false,
                acks: Acks::None,
                cold: false,
            });
            return;
        }
        // "If the Referenced Task Tag does not identify an existing task, but if the CmdSN
        // indicated by the RefCmdSN field ... is within the valid CmdSN window and less than
        // the CmdSN of the Task Management Function Request itself, then targets must
        // consider the CmdSN as received and return the 'Function complete' response." The
        // command, held or still on its way, will not run. A RefCmdSN below ExpCmdSN names a
        // command that already completed: "Task does not exist".
        let response = if req.ref_cmd_sn.lt(req.cmd_sn) && self.window.cancel(req.ref_cmd_sn) {
            self.remember_aborted(referenced);
            TmfResponse::FunctionComplete
        } else {
            TmfResponse::TaskDoesNotExist
        };
        self.tmf_respond(conn, req.itt, response, slot);
    }

    /// Whether a pending task-set function issued after a command with `cmd_sn` on `lun`
    /// covers it: it is aborted on arrival.
    pub(super) fn covered_by_pending_tmf(&self, lun: Lun, cmd_sn: SeqNum) -> bool {
        self.tmfs
            .iter()
            .any(|t| t.scope.covers(lun) && cmd_sn.lt(t.cmd_sn))
    }

    /// Answers whatever pending functions may answer now, in arrival order. Returns whether
    /// anything moved.
    pub(super) fn progress_tmfs(&mut self, env: &mut dyn TargetSessionEnv) -> bool {
        let mut moved = false;
        while let Some(t) = self.tmfs.front_mut() {
            if t.wait_for_commands && self.window.exp_cmd_sn().lt(t.cmd_sn) {
                break;
            }
            let id = t.id;
            if self
                .tasks
                .values()
                .any(|k| k.ended == Some(EndedBy::Tmf(id)))
            {
                break;
            }
            if let Some(kind) = t.reset.take() {
                env.reset(kind);
            }
            if !self.acknowledged() {
                break;
            }
            let Some(t) = self.tmfs.pop_front() else {
                break;
            };
            moved = true;
            self.tmf_respond(t.conn, t.itt, t.response, t.slot);
            if t.cold {
                self.cold_reset(t.conn);
            }
        }
        moved
    }

    /// Section 11.6.2 d) for the function at the head of the queue: every status sent before
    /// it on the other connections acknowledged. Solicits acknowledgement once.
    fn acknowledged(&mut self) -> bool {
        let Some(t) = self.tmfs.front() else {
            return true;
        };
        let own = t.conn;
        match &t.acks {
            Acks::None => true,
            Acks::Pending => {
                let lagging: Vec<(ConnId, SeqNum)> = self
                    .conns
                    .iter()
                    .filter(|c| c.id != own && c.state == super::ConnState::Live)
                    .filter(|c| !c.all_acknowledged())
                    .map(|c| (c.id, c.stat_sn_after_queue()))
                    .collect();
                for &(conn, _) in &lagging {
                    // "may solicit for acknowledgement by way of a NOP-In"
                    let ttt = self.ttts.allocate();
                    self.queue_to(conn, ping(ttt));
                }
                let done = lagging.is_empty();
                if let Some(t) = self.tmfs.front_mut() {
                    t.acks = Acks::Waiting(lagging);
                }
                done
            }
            Acks::Waiting(list) => {
                let remaining: Vec<(ConnId, SeqNum)> = list
                    .iter()
                    .copied()
                    .filter(|&(conn, wanted)| {
                        self.find(conn).is_some_and(|c| {
                            c.state == super::ConnState::Live && c.exp_stat_sn.lt(wanted)
                        })
                    })
                    .collect();
                let done = remaining.is_empty();
                if let Some(t) = self.tmfs.front_mut() {
                    t.acks = Acks::Waiting(remaining);
                }
                done
            }
        }
    }

    pub(super) fn tmf_respond(
        &mut self,
        conn: ConnId,
        itt: Itt,
        response: TmfResponse,
        slot: Option<Slot>,
    ) {
        let rsp = TaskMgmtResponse {
            response,
            itt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
        };
        self.queue_to(conn, Pdu::TaskMgmtResponse(rsp));
        self.release_slot(slot);
    }

    /// Section 11.6.1: "For the TARGET COLD RESET function, the target MUST then close all of
    /// its TCP connections to all initiators (terminates all sessions)." This session's
    /// connections close after sending what is queued (the response first); the driver
    /// closes the others.
    fn cold_reset(&mut self, conn: ConnId) {
        if let Some(c) = self.find_mut(conn) {
            c.events.push_back(Event::ColdReset);
        }
        self.close_all(super::CloseReason::ColdReset);
    }

    /// Pending functions of a connection that is gone cannot be answered: dropped, their slots
    /// given back (tasks they ended stay ended).
    pub(super) fn tmfs_of_closed_connection(&mut self, conn: ConnId) {
        let mut kept = std::collections::VecDeque::new();
        while let Some(t) = self.tmfs.pop_front() {
            if t.conn == conn {
                self.release_slot(t.slot);
            } else {
                kept.push_back(t);
            }
        }
        self.tmfs = kept;
    }

    fn next_tmf_id(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }
}
