//! Commands that run off their connection's task, on the blocking pool, while the
//! connection goes on reading and answering: every command of a LU whose backend waits (disk
//! files, block devices, RBD images; but the READ, WRITE and SYNCHRONIZE CACHE of a backend
//! that completes operations by itself are awaited on the connection's task: `device_io`),
//! and on any LU the commands that run for as long as
//! their data takes (`sluice_scsi::runs_long`: EXTENDED COPY, WRITE SAME, UNMAP, SANITIZE),
//! which can be aborted.
//!
//! Run on the connection's task, a command on a disk file held the connection for its whole
//! I/O: one command at a time per connection, however deep the initiator's queue. Here each
//! gets a task of its own and gives its result back to the session core (which answers on the
//! command's connection, or drops the answer of an aborted task) whenever it comes; the
//! connection's CmdSN window bounds how many run at once. The core hands out only work that
//! may start under its task attribute (SAM-5 8.6: ORDERED and HEAD OF QUEUE tasks are held
//! there), so SIMPLE tasks complete in any order and the rest as the attributes require.
//! Task management finds such a task in the core as running: ABORT TASK and the task-set
//! functions answer once its result is back. A long-running command also gets an
//! `AbortSignal`, raised when the core says the work is abandoned (ABORT TASK, a task-set
//! function or a reset that covers it, PREEMPT AND ABORT, the loss of its connection), so it
//! stops early.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{Bytes, BytesMut};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::target::{ScsiCompletion, ScsiWork, TargetSession, Ticket};
use sluice_scsi::{AbortSignal, ScsiTarget, SenseData, SenseKey};
use tracing::warn;

use crate::context::Context;
use crate::ffp::{abort_other_tasks, run, DriverEnv};
use crate::metrics::{Finished, LuCounters};
use crate::sessions::SharedSession;

/// The long-running commands of one session in the SCSI layer now, and their abort signals.
#[derive(Debug, Default)]
pub(crate) struct LongRunning {
    /// How many: checked on every input, so that a session without any pays one atomic load.
    count: AtomicUsize,
    running: Mutex<Vec<(Ticket, AbortSignal)>>,
}

impl LongRunning {
    fn running(&self) -> MutexGuard<'_, Vec<(Ticket, AbortSignal)>> {
        // The list is consistent after every push and retain: a poisoned lock is usable.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn track(&self, ticket: Ticket, abort: AbortSignal) {
        let mut running = self.running();
        running.push((ticket, abort));
        self.count.store(running.len(), Ordering::Release);
    }

    fn untrack(&self, ticket: Ticket) {
        let mut running = self.running();
        running.retain(|(t, _)| *t != ticket);
        self.count.store(running.len(), Ordering::Release);
    }

    /// Raises the signal of every command whose result the core no longer wants. Call with
    /// the core locked, after anything that may end tasks (a PDU, a timeout, a lost
    /// connection).
    pub(crate) fn abort_abandoned(&self, core: &TargetSession) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        for (ticket, abort) in self.running().iter() {
            if core.work_abandoned(*ticket) {
                abort.abort();
            }
        }
    }
}

/// Runs `work` on the blocking pool, counts it in `counters` (its LU's, for this
/// connection), hands its result to the session core when it ends, and wakes the session's
/// connections to send what that produced. `abortable`: the command runs long, and is told
/// to stop when the core abandons it.
pub(crate) fn spawn(
    ctx: Arc<Context>,
    session: Arc<SharedSession>,
    scsi: Arc<ScsiTarget>,
    work: ScsiWork,
    counters: Option<Arc<LuCounters>>,
    abortable: bool,
) {
    let abort = abortable.then(AbortSignal::new);
    let ticket = work.ticket;
    if let Some(abort) = &abort {
        session.long_running.track(ticket, abort.clone());
    }
    let nexus = session.nexus;
    tokio::spawn(async move {
        let lun = work.lun;
        let result = tokio::task::spawn_blocking(move || {
            let ((completion, aborts), _) =
                run(&scsi, nexus, &work, BytesMut::new(), abort.as_ref());
            if let Some(c) = counters {
                c.record_shared(&Finished {
                    cdb: work.cdb.as_bytes(),
                    read_bytes: (completion.data.len() as u64).min(u64::from(work.data_in_len)),
                    write_bytes: work.data_out.len() as u64,
                    status: completion.status,
                    sense: &completion.sense,
                    latency: std::time::Instant::now().saturating_duration_since(work.arrived),
                });
            }
            (completion, aborts)
        })
        .await;
        if abortable {
            session.long_running.untrack(ticket);
        }
        let (completion, aborts) = result.unwrap_or_else(|e| {
            warn!(error = %e, "command panicked");
            (internal_failure(), Vec::new())
        });
        // PREEMPT AND ABORT (on a LU whose backend waits, or with a state directory): the
        // preempted tasks end before this command's status goes out (SPC-4 5.12.11.2.5).
        if !aborts.is_empty() {
            abort_other_tasks(&ctx, &session, &aborts, lun, ticket);
        }
        {
            let mut env = DriverEnv::new(&ctx, &session);
            let mut core = session.lock();
            core.handle_completion(ticket, completion, &mut env);
            session.long_running.abort_abandoned(&core);
        }
        session.wake_all();
    });
}

/// HARDWARE ERROR / INTERNAL TARGET FAILURE: what a command that panicked ends with.
fn internal_failure() -> ScsiCompletion {
    let sense = SenseData::new(SenseKey::HARDWARE_ERROR, 0x44, 0x00);
    ScsiCompletion {
        status: ScsiStatus::CheckCondition,
        sense: Bytes::from(sense.to_bytes()),
        data: Bytes::new(),
    }
}
