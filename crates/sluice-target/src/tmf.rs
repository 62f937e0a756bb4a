//! Task management (RFC 7143 sections 11.5, 11.6; SAM-5 7).
//!
//! Commands run to completion as they arrive, so the only tasks a TMF can find in progress are
//! writes waiting for Data-Out. Aborted tasks get no further PDUs (interop rule 13).

use sluice_proto::pdu::codes::{TmfFunction, TmfResponse};
use sluice_proto::pdu::{Pdu, TaskMgmtRequest, TaskMgmtResponse};
use sluice_proto::seq::{Lun, SeqNum};
use sluice_scsi::ResetKind;
use tracing::info;

use crate::ffp::{End, Flow, FullFeature};

impl FullFeature<'_> {
    pub(crate) fn handle_tmf(&mut self, req: TaskMgmtRequest) -> Flow {
        let (response, then) = match req.function {
            TmfFunction::AbortTask => (self.abort_task(&req), Flow::Continue),
            TmfFunction::AbortTaskSet | TmfFunction::ClearTaskSet => {
                if self.lun_exists(req.lun) {
                    self.abort_where(|lun| lun == req.lun);
                    (TmfResponse::FunctionComplete, Flow::Continue)
                } else {
                    (TmfResponse::LunDoesNotExist, Flow::Continue)
                }
            }
            TmfFunction::LogicalUnitReset => {
                if self.lun_exists(req.lun) {
                    self.abort_where(|lun| lun == req.lun);
                    self.reset(ResetKind::LogicalUnit(req.lun.0));
                    (TmfResponse::FunctionComplete, Flow::Continue)
                } else {
                    (TmfResponse::LunDoesNotExist, Flow::Continue)
                }
            }
            TmfFunction::TargetWarmReset => {
                self.abort_where(|_| true);
                self.reset(ResetKind::TargetWarm);
                (TmfResponse::FunctionComplete, Flow::Continue)
            }
            TmfFunction::TargetColdReset => {
                // Section 11.5.1: after a cold reset the target closes the connections; the
                // response is sent first.
                self.abort_where(|_| true);
                self.reset(ResetKind::TargetCold);
                (TmfResponse::FunctionComplete, Flow::Stop(End::ColdReset))
            }
            // ErrorRecoveryLevel 0 has no task reassignment (section 7.2.2).
            TmfFunction::TaskReassign => (TmfResponse::ReassignmentNotSupported, Flow::Continue),
            // CLEAR ACA: NACA=1 is refused, so no ACA condition ever exists to clear; and any
            // function this target does not know.
            _ => (TmfResponse::NotSupported, Flow::Continue),
        };
        info!(
            function = req.function.code(),
            lun = ?req.lun,
            response = response.code(),
            "task management"
        );
        let rsp = TaskMgmtResponse {
            response,
            itt: req.itt,
            stat_sn: SeqNum(0),
            exp_cmd_sn: SeqNum(0),
            max_cmd_sn: SeqNum(0),
        };
        self.send(Pdu::TaskMgmtResponse(rsp));
        then
    }

    /// ABORT TASK (section 11.5.1 and 11.6.1).
    fn abort_task(&mut self, req: &TaskMgmtRequest) -> TmfResponse {
        if let Some(pending) = self.writes.remove(&req.referenced_task_tag) {
            self.abort_pending(pending);
            return TmfResponse::FunctionComplete;
        }
        // "If the Referenced Task Tag does not identify an existing task, but if the CmdSN
        // indicated by the RefCmdSN field ... is within the valid CmdSN window and less than
        // the CmdSN of the Task Management Function Request itself, then targets must
        // consider the CmdSN as received and return the 'Function complete' response."
        // A RefCmdSN below ExpCmdSN names a command that already completed: "Task does not
        // exist".
        let exp = self.window.exp_cmd_sn();
        let max = self.window.max_cmd_sn();
        if req.ref_cmd_sn.in_window(exp, max) && req.ref_cmd_sn.lt(req.cmd_sn) {
            TmfResponse::FunctionComplete
        } else {
            TmfResponse::TaskDoesNotExist
        }
    }

    fn abort_where(&mut self, mut matches: impl FnMut(Lun) -> bool) {
        let itts: Vec<_> = self
            .writes
            .iter()
            .filter(|(_, p)| matches(p.cmd.lun))
            .map(|(itt, _)| *itt)
            .collect();
        for itt in itts {
            if let Some(p) = self.writes.remove(&itt) {
                self.abort_pending(p);
            }
        }
    }

    fn abort_pending(&mut self, pending: crate::ffp::PendingWrite) {
        self.write_bytes = self.write_bytes.saturating_sub(pending.reserved_bytes);
        // The aborted command's slot in the window is free again.
        self.window.complete();
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        match (self.target, sluice_scsi::decode_lun(lun.0)) {
            (Some(t), sluice_scsi::LunAddress::Lun(n)) => t.scsi.lu(n).is_some(),
            _ => false,
        }
    }

    fn reset(&mut self, kind: ResetKind) {
        if let Some(t) = self.target {
            t.scsi.reset(kind, self.nexus);
        }
    }
}
