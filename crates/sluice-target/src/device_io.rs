//! READ, WRITE and SYNCHRONIZE CACHE on LUs whose backend completes operations by itself
//! (`BlockDevice::submits`: RBD images through librbd's asynchronous calls).
//!
//! On the blocking pool (`long_running`), each such command in flight held a thread asleep in
//! its device call: sixteen commands were sixteen threads waking and sleeping. Here the SCSI
//! layer plans the command on the connection's task (every check `execute_with` makes, with
//! the LU's shared I/O hold taken: `sluice_scsi::Planned`), the device operation is submitted
//! there too, in arrival order, and the connection's task itself awaits its completion among
//! those of its other commands in flight ([`InFlight`], polled beside the socket): librbd's
//! callback wakes that task, which ends the command through its plan and gives the result to
//! the session core, with every other completion ready by then, before it writes. No thread
//! waits per command and no task is spawned per command; the CmdSN window bounds how many are
//! in flight. A connection that ends with commands in flight hands them to a task of their own
//! ([`drain`]), so the core still gets every result (connection recovery may reassign them).
//!
//! These commands are short and not abortable: task management that covers one answers once
//! its result is back, as for any command the core reports running.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::target::{ScsiCompletion, ScsiWork, Ticket};
use sluice_scsi::{CommandResult, IoPlan, PlannedIo};
use sluice_storage::DeviceOp;

use crate::context::Context;
use crate::ffp::DriverEnv;
use crate::metrics::{Finished, LuCounters};
use crate::sessions::SharedSession;

/// A command whose device operation is in flight: resolves to its ticket and completion.
pub(crate) type Completing = Pin<Box<dyn Future<Output = (Ticket, ScsiCompletion)> + Send>>;

/// The commands in flight on one connection.
pub(crate) type InFlight = FuturesUnordered<Completing>;

/// Submits the device operation of `plan` (the command `work`) and returns the future that
/// ends the command when it completes; `counters` are its LU's, for this connection.
pub(crate) fn start(plan: IoPlan, work: ScsiWork, counters: Option<Arc<LuCounters>>) -> Completing {
    let op = match plan.io() {
        PlannedIo::Read { offset, len } => DeviceOp::Read { offset, len },
        PlannedIo::Write { offset, len, fua } => DeviceOp::Write {
            offset,
            segments: first_bytes(work.data_out.segments(), len),
            fua,
        },
        PlannedIo::Flush => DeviceOp::Flush,
    };
    let submission = plan.device().submit(op);
    let ticket = work.ticket;
    let cdb = work.cdb;
    let (arrived, data_in_len, write_bytes) =
        (work.arrived, work.data_in_len, work.data_out.len() as u64);
    // The Data-Out now travels in the submission; what else `work` holds goes here.
    Box::pin(async move {
        let (result, data) = match submission.await {
            Ok(data) => (Ok(()), data),
            Err(e) => (Err(e), Bytes::new()),
        };
        let completion = completion_of(&plan.finish(result), data);
        if let Some(c) = counters {
            // Shared: a connection that ends hands what it has in flight to another task.
            c.record_shared(&Finished {
                cdb: cdb.as_bytes(),
                read_bytes: (completion.data.len() as u64).min(u64::from(data_in_len)),
                write_bytes,
                status: completion.status,
                sense: &completion.sense,
                latency: Instant::now().saturating_duration_since(arrived),
            });
        }
        (ticket, completion)
    })
}

/// Gives every command still in flight on a connection that ended its result, as it comes, in
/// a task of its own.
pub(crate) fn drain(ctx: Arc<Context>, session: Arc<SharedSession>, mut in_flight: InFlight) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // The runtime is going away: the commands die with the sessions.
        return;
    };
    runtime.spawn(async move {
        while let Some((ticket, completion)) = in_flight.next().await {
            {
                let mut env = DriverEnv::new(&ctx, &session);
                let mut core = session.lock();
                core.handle_completion(ticket, completion, &mut env);
                session.long_running.abort_abandoned(&core);
            }
            session.wake_all();
        }
    });
}

/// The completion the core takes for `result`, with `data` as Data-In when it is GOOD.
pub(crate) fn completion_of(result: &CommandResult, data: Bytes) -> ScsiCompletion {
    ScsiCompletion {
        status: ScsiStatus::from(result.status),
        sense: result.sense_bytes().map(Bytes::from).unwrap_or_default(),
        data: if result.is_good() { data } else { Bytes::new() },
    }
}

/// The first `len` bytes of `segments` (which hold at least that many), as shared slices of
/// them: nothing is copied.
fn first_bytes(segments: &[Bytes], len: usize) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(segments.len());
    let mut left = len;
    for s in segments {
        if left == 0 {
            break;
        }
        let take = left.min(s.len());
        out.push(s.slice(..take));
        left -= take;
    }
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::first_bytes;

    #[test]
    fn first_bytes_cuts_the_segments_without_copying() {
        let segs = [
            Bytes::from_static(b"abcd"),
            Bytes::from_static(b"efgh"),
            Bytes::from_static(b"ij"),
        ];
        let cut = first_bytes(&segs, 6);
        assert_eq!(
            cut,
            vec![Bytes::from_static(b"abcd"), Bytes::from_static(b"ef")]
        );
        assert_eq!(cut[0].as_ptr(), segs[0].as_ptr());
        assert_eq!(first_bytes(&segs, 10).len(), 3);
        assert!(first_bytes(&segs, 0).is_empty());
    }
}
