//! Which tasks a task management function ends (RFC 7143 sections 4.2.3.2 and 11.5.1), as
//! both iSER datamover sides need to know it: the initiator's count of unexpected PDUs
//! releases the tasks whose responses will never come (`unexpected.rs`), the target's
//! holding of RDMA Read data drops what the ended tasks held (`read_order.rs`).
//!
//! - ABORT TASK ends the task its Referenced Task Tag names.
//! - ABORT TASK SET, CLEAR TASK SET and LOGICAL UNIT RESET end the tasks of the LUN they
//!   name; TARGET WARM RESET and TARGET COLD RESET every task of the session.
//! - Of those, only tasks issued before the function: section 11.5.1, "Task management
//!   requests must act on all the commands from the same session having a CmdSN lower than
//!   the task management CmdSN". A command with the function's own CmdSN or above came after
//!   it, whatever order the PDUs took; that includes an immediate command sent just before
//!   an immediate function, which carries the same CmdSN (immediate PDUs do not advance it,
//!   section 4.2.2.1), and which sluice's target runs on (`target/tmf.rs` ends tasks by the
//!   same rule).
//! - Only SCSI tasks are in a logical unit's task set: an immediate NOP-Out, Text or Logout
//!   Request on the same connection is not ended by a task-set function or a reset, whatever
//!   its LUN field says; its own response still comes.
//!
//! Section 11.5.1 also lets the resets reach commands with CmdSN at or above their own. The
//! scope keeps to what every target must do (and what sluice's target does exactly): a task
//! a reset ended beyond it stays counted by the initiator until the connection ends. That is
//! the safe side of the count: counting too few could overrun the target's receive buffers,
//! counting too many only holds the initiator's immediate requests back.

use crate::pdu::codes::TmfFunction;
use crate::pdu::TaskMgmtRequest;
use crate::seq::{Itt, Lun, SeqNum};

/// The tasks one task management function ends.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum TmfScope {
    /// ABORT TASK: the task with this tag.
    Task(Itt),
    /// The SCSI tasks of one LUN issued before the function (CmdSN below its own).
    Lun(Lun, SeqNum),
    /// Every SCSI task issued before the function.
    All(SeqNum),
}

/// A task as the scope sees it.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct TaskRef {
    pub itt: Itt,
    /// The LUN of a SCSI task; `None` for other requests (not in any LUN's task set).
    pub lun: Option<Lun>,
    pub cmd_sn: SeqNum,
}

impl TmfScope {
    /// The scope of `req`; `None` for functions that end no task (CLEAR ACA, TASK REASSIGN
    /// and those not known).
    pub(crate) fn of(req: &TaskMgmtRequest) -> Option<Self> {
        match req.function {
            TmfFunction::AbortTask => Some(TmfScope::Task(req.referenced_task_tag)),
            TmfFunction::AbortTaskSet
            | TmfFunction::ClearTaskSet
            | TmfFunction::LogicalUnitReset => Some(TmfScope::Lun(req.lun, req.cmd_sn)),
            TmfFunction::TargetWarmReset | TmfFunction::TargetColdReset => {
                Some(TmfScope::All(req.cmd_sn))
            }
            _ => None,
        }
    }

    /// Whether the function ends `task`.
    pub(crate) fn covers(self, task: TaskRef) -> bool {
        match self {
            TmfScope::Task(t) => t == task.itt,
            TmfScope::Lun(lun, sn) => task.lun == Some(lun) && task.cmd_sn.lt(sn),
            TmfScope::All(sn) => task.lun.is_some() && task.cmd_sn.lt(sn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scsi(itt: u32, lun: u64, cmd_sn: u32) -> TaskRef {
        TaskRef {
            itt: Itt(itt),
            lun: Some(Lun(lun)),
            cmd_sn: SeqNum::new(cmd_sn),
        }
    }

    fn request(function: TmfFunction, lun: u64, rtt: u32, cmd_sn: u32) -> TaskMgmtRequest {
        TaskMgmtRequest {
            immediate: true,
            function,
            lun: Lun(lun),
            itt: Itt(100),
            referenced_task_tag: Itt(rtt),
            cmd_sn: SeqNum::new(cmd_sn),
            exp_stat_sn: SeqNum::new(1),
            ref_cmd_sn: SeqNum::new(cmd_sn),
            exp_data_sn: 0,
        }
    }

    #[test]
    fn abort_task_ends_the_referenced_task_only() {
        let s = TmfScope::of(&request(TmfFunction::AbortTask, 0, 7, 10)).unwrap();
        // An immediate task's RefCmdSN is the function's own CmdSN (section 11.5.1): the
        // tag alone names it.
        assert!(s.covers(scsi(7, 0, 10)));
        assert!(s.covers(scsi(7, 3, 5)));
        assert!(!s.covers(scsi(8, 0, 5)));
    }

    #[test]
    fn task_set_functions_end_that_luns_earlier_tasks() {
        for f in [
            TmfFunction::AbortTaskSet,
            TmfFunction::ClearTaskSet,
            TmfFunction::LogicalUnitReset,
        ] {
            let s = TmfScope::of(&request(f, 2, u32::MAX, 10)).unwrap();
            assert!(s.covers(scsi(1, 2, 9)), "{f:?}");
            assert!(!s.covers(scsi(1, 3, 9)), "{f:?}: another LUN");
            assert!(!s.covers(scsi(1, 2, 10)), "{f:?}: the function's own CmdSN");
            assert!(!s.covers(scsi(1, 2, 11)), "{f:?}: issued after");
        }
    }

    #[test]
    fn target_resets_end_every_earlier_scsi_task() {
        for f in [TmfFunction::TargetWarmReset, TmfFunction::TargetColdReset] {
            let s = TmfScope::of(&request(f, 0, u32::MAX, 10)).unwrap();
            assert!(s.covers(scsi(1, 0, 9)) && s.covers(scsi(2, 5, 3)), "{f:?}");
            assert!(!s.covers(scsi(3, 0, 10)), "{f:?}");
        }
    }

    #[test]
    fn cmd_sn_is_compared_across_the_wrap() {
        let s = TmfScope::of(&request(TmfFunction::AbortTaskSet, 0, u32::MAX, 2)).unwrap();
        assert!(s.covers(scsi(1, 0, u32::MAX)), "2^32-1 comes before 2");
        assert!(!s.covers(scsi(1, 0, 3)));
    }

    #[test]
    fn requests_outside_task_sets_are_never_in_a_luns_scope() {
        let ping = TaskRef {
            itt: Itt(4),
            lun: None,
            cmd_sn: SeqNum::new(1),
        };
        for f in [
            TmfFunction::AbortTaskSet,
            TmfFunction::LogicalUnitReset,
            TmfFunction::TargetWarmReset,
        ] {
            let s = TmfScope::of(&request(f, 0, u32::MAX, 10)).unwrap();
            assert!(!s.covers(ping), "{f:?}");
        }
        // ABORT TASK may name any tagged operation (section 11.5.1).
        let s = TmfScope::of(&request(TmfFunction::AbortTask, 0, 4, 10)).unwrap();
        assert!(s.covers(ping));
    }

    #[test]
    fn functions_that_end_no_task_have_no_scope() {
        for f in [TmfFunction::ClearAca, TmfFunction::TaskReassign] {
            assert_eq!(TmfScope::of(&request(f, 0, 1, 1)), None, "{f:?}");
        }
    }
}
