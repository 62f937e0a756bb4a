//! Task management (RFC 7143 sections 11.5, 11.6; SAM-5 7).
//!
//! Commands run to completion as they arrive, so the only tasks a TMF can find in progress are
//! writes waiting for Data-Out. Aborted tasks get no further PDUs: an aborted task ends without
//! status (SAM-5), and the Linux initiator fails the connection on a PDU for a task it has
//! already freed (`drivers/scsi/libiscsi.c`, connection error 1010, BAD_ITT).

use sluice_proto::pdu::codes::{tmf, tmf_response};
use sluice_proto::pdu::{Pdu, TaskMgmtRequest, TaskMgmtResponse};
use sluice_proto::seq::{Lun, SeqNum};
use sluice_scsi::ResetKind;
use tracing::info;

use crate::ffp::{End, Flow, FullFeature};

impl FullFeature<'_> {
    pub(crate) fn handle_tmf(&mut self, req: TaskMgmtRequest) -> Flow {
        let function = req.function & 0x7f;
        let (response, then) = match function {
            tmf::ABORT_TASK => (self.abort_task(&req), Flow::Continue),
            tmf::ABORT_TASK_SET | tmf::CLEAR_TASK_SET => {
                if self.lun_exists(req.lun) {
                    self.abort_where(|lun| lun == req.lun);
                    (tmf_response::FUNCTION_COMPLETE, Flow::Continue)
                } else {
                    (tmf_response::LUN_DOES_NOT_EXIST, Flow::Continue)
                }
            }
            tmf::LOGICAL_UNIT_RESET => {
                if self.lun_exists(req.lun) {
                    self.abort_where(|lun| lun == req.lun);
                    self.reset(ResetKind::LogicalUnit(req.lun.0));
                    (tmf_response::FUNCTION_COMPLETE, Flow::Continue)
                } else {
                    (tmf_response::LUN_DOES_NOT_EXIST, Flow::Continue)
                }
            }
            tmf::TARGET_WARM_RESET => {
                self.abort_where(|_| true);
                self.reset(ResetKind::TargetWarm);
                (tmf_response::FUNCTION_COMPLETE, Flow::Continue)
            }
            tmf::TARGET_COLD_RESET => {
                // Section 11.5.1: after a cold reset the target closes the connections; the
                // response is sent first.
                self.abort_where(|_| true);
                self.reset(ResetKind::TargetCold);
                (tmf_response::FUNCTION_COMPLETE, Flow::Stop(End::ColdReset))
            }
            // ErrorRecoveryLevel 0 has no task reassignment (section 7.2.2).
            tmf::TASK_REASSIGN => (tmf_response::REASSIGNMENT_NOT_SUPPORTED, Flow::Continue),
            // CLEAR ACA: NACA=1 is refused, so no ACA condition ever exists to clear; and any
            // function this target does not know.
            _ => (tmf_response::NOT_SUPPORTED, Flow::Continue),
        };
        info!(function, lun = ?req.lun, response, "task management");
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
    fn abort_task(&mut self, req: &TaskMgmtRequest) -> u8 {
        if let Some(pending) = self.writes.remove(&req.referenced_task_tag) {
            self.abort_pending(pending);
            return tmf_response::FUNCTION_COMPLETE;
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
            tmf_response::FUNCTION_COMPLETE
        } else {
            tmf_response::TASK_DOES_NOT_EXIST
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
