//! Tasks ended by another I_T nexus. PREEMPT AND ABORT (SPC-4 5.12.11.2.5) aborts every task
//! of the preempted I_T nexuses on the logical unit, as ABORT TASK SET would (SAM-5 7.3),
//! except the PERSISTENT RESERVE OUT command itself. The SCSI layer says which I_T nexuses;
//! the driver asks each one's session core here.
//!
//! The Control mode page's TAS bit is zero, so the aborted tasks end without a status (SAM-5
//! 5.6): their initiator learns of the preemption from the unit attention REGISTRATIONS
//! PREEMPTED, and an ABORT TASK it sends for one of them finds no task.

use super::scsi::EndedBy;
use super::{TargetSession, Ticket};
use crate::seq::{Itt, Lun};

impl TargetSession {
    /// Aborts every unanswered task of `lun` except `except` (the preempting command, when it
    /// is this session's): tasks collecting Data-Out end now, those the SCSI layer is running
    /// end when their result comes back (and it is dropped). Returns how many were aborted.
    pub fn abort_tasks_of_lun(&mut self, lun: Lun, except: Option<Ticket>) -> usize {
        let affected: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(itt, t)| {
                t.lun == lun && !t.answered() && except.is_none_or(|e| e.itt != **itt)
            })
            .map(|(itt, _)| *itt)
            .collect();
        for &itt in &affected {
            self.remember_aborted(itt);
            self.end_task(itt, EndedBy::OtherNexus);
        }
        affected.len()
    }
}
