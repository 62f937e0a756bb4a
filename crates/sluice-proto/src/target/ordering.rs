//! Task attributes (SAM-5 8.6; RFC 7143 section 11.3.1 ATTR): when a command's work may go
//! to the SCSI layer.
//!
//! A driver may run the work the core hands out concurrently and complete it in any order
//! (SIMPLE tasks may be reordered). The core therefore hands out only work that may start:
//!
//! - HEAD OF QUEUE starts at once (SAM-5 8.6.2.3).
//! - SIMPLE (and untagged, ACA and reserved codes, which this target treats as SIMPLE: it
//!   never enters an ACA condition, as NACA=1 is refused) waits until every older ORDERED task
//!   and every HEAD OF QUEUE task of its LU has completed (8.6.2.2, 8.6.2.3).
//! - ORDERED waits until every older task and every HEAD OF QUEUE task of its LU has
//!   completed (8.6.2.4).
//!
//! Age is CmdSN order, the order in which the initiator issued the commands (RFC 7143 section
//! 3.2.2.1), whatever order their data arrived in: a write still collecting Data-Out is in the
//! task set and holds back a younger ORDERED command. The task set is the session's (one I_T
//! nexus) per LU. Held work stays here until a completion or a task's end lets it go; a held
//! task ended meanwhile (task management, a lost connection) leaves without running.
//!
//! No task ever waits for a younger non-HEAD-OF-QUEUE task and HEAD OF QUEUE tasks wait for
//! nothing, so the oldest unfinished task can always start: holding never deadlocks.

use std::collections::VecDeque;

use super::scsi::Task;
use super::{ScsiWork, TargetSession};
use crate::pdu::TaskAttr;

/// Work held back by task attributes.
#[derive(Debug, Default)]
pub(super) struct Ordering {
    /// Work that may not start yet, in the order it became ready.
    held: VecDeque<ScsiWork>,
    /// At least the number of unfinished ORDERED and HEAD OF QUEUE tasks: raised when one
    /// arrives, made exact whenever the table is scanned. While it is 0 a SIMPLE task starts
    /// without a scan (the common case costs one comparison).
    special: usize,
}

/// How a task's attribute orders it.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum Kind {
    Simple,
    Ordered,
    HeadOfQueue,
}

impl Kind {
    pub(super) fn of(attr: TaskAttr) -> Self {
        match attr {
            TaskAttr::Ordered => Kind::Ordered,
            TaskAttr::HeadOfQueue => Kind::HeadOfQueue,
            TaskAttr::Untagged | TaskAttr::Simple | TaskAttr::Aca | TaskAttr::Reserved(_) => {
                Kind::Simple
            }
        }
    }
}

impl Ordering {
    /// The held work, for a task that may not start yet.
    pub(super) fn held_mut(&mut self) -> &mut VecDeque<ScsiWork> {
        &mut self.held
    }

    /// A task of this kind entered the table.
    pub(super) fn arrived(&mut self, kind: Kind) {
        if kind != Kind::Simple {
            self.special += 1;
        }
    }
}

impl TargetSession {
    /// Whether `task` (not in the table) may go to the SCSI layer now (see the module docs).
    #[inline]
    pub(super) fn may_start(&mut self, task: &Task) -> bool {
        match task.kind {
            Kind::HeadOfQueue => true,
            Kind::Simple if self.ordering.special == 0 => true,
            _ => self.may_start_scan(task),
        }
    }

    /// [`may_start`](Self::may_start) when an ORDERED or HEAD OF QUEUE task may be about:
    /// a look at the table.
    #[cold]
    fn may_start_scan(&mut self, task: &Task) -> bool {
        let mut special = usize::from(task.kind != Kind::Simple);
        let mut blocked = false;
        for t in self.tasks.values() {
            if t.answered() {
                continue;
            }
            if t.kind != Kind::Simple {
                special += 1;
            }
            if t.lun != task.lun {
                continue;
            }
            let older = t.cmd_sn.lt(task.cmd_sn);
            blocked |= t.kind == Kind::HeadOfQueue
                || (older && (task.kind == Kind::Ordered || t.kind == Kind::Ordered));
        }
        self.ordering.special = special;
        !blocked
    }

    /// Lets go of held work that may start now, and drops the held work of tasks that ended
    /// meanwhile (their window places given back). Returns whether anything changed.
    #[inline]
    pub(super) fn release_held(&mut self) -> bool {
        !self.ordering.held.is_empty() && self.release_held_scan()
    }

    #[cold]
    fn release_held_scan(&mut self) -> bool {
        let mut moved = false;
        let mut i = 0;
        while i < self.ordering.held.len() {
            let ticket = self.ordering.held[i].ticket;
            let state = self
                .tasks
                .get(&ticket.itt)
                .filter(|t| t.serial == ticket.serial && t.running())
                .map(|t| t.ended.is_some());
            match state {
                None => {
                    self.ordering.held.remove(i);
                    moved = true;
                }
                Some(true) => {
                    self.ordering.held.remove(i);
                    self.drop_unstarted(ticket);
                    moved = true;
                }
                Some(false) => {
                    // Checked against the table without it: take it out for the check.
                    let Some(task) = self.tasks.remove(&ticket.itt) else {
                        i += 1;
                        continue;
                    };
                    let start = self.may_start(&task);
                    self.tasks.insert(ticket.itt, task);
                    if start {
                        if let Some(work) = self.ordering.held.remove(i) {
                            self.work.push_back(work);
                        }
                        moved = true;
                    } else {
                        i += 1;
                    }
                }
            }
        }
        moved
    }

    /// Whether work is held back by task attributes.
    #[must_use]
    pub fn has_held_work(&self) -> bool {
        !self.ordering.held.is_empty()
    }
}
