//! READ, WRITE and SYNCHRONIZE CACHE on LUs whose backend completes operations by itself
//! (`BlockDevice::submits`: RBD images through librbd's asynchronous calls).
//!
//! On the blocking pool (`long_running`), each such command in flight held a thread asleep in
//! its device call: sixteen commands were sixteen threads waking and sleeping. Here the SCSI
//! layer plans the command on the connection's task (every check `execute_with` makes, with
//! the LU's shared I/O hold taken: `sluice_scsi::Planned`), the device operation is submitted
//! there too, in arrival order, and a small task awaits its completion (woken by librbd's
//! callback), ends the command through the plan and gives the result to the session core. No
//! thread waits per command; the CmdSN window bounds how many are in flight.
//!
//! These commands are short and not abortable: task management that covers one answers once
//! its result is back, as for any command the core reports running.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::target::{ScsiCompletion, ScsiWork};
use sluice_scsi::{CommandResult, IoPlan, PlannedIo};
use sluice_storage::DeviceOp;

use crate::context::Context;
use crate::ffp::DriverEnv;
use crate::metrics::{Finished, LuCounters};
use crate::sessions::SharedSession;

/// Submits the device operation of `plan` (the command `work`) and spawns the task that
/// completes it; `counters` are its LU's, for this connection.
pub(crate) fn start(
    ctx: Arc<Context>,
    session: Arc<SharedSession>,
    plan: IoPlan,
    work: ScsiWork,
    counters: Option<Arc<LuCounters>>,
) {
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
    tokio::spawn(async move {
        let (result, data) = match submission.await {
            Ok(data) => (Ok(()), data),
            Err(e) => (Err(e), Bytes::new()),
        };
        let completion = completion_of(&plan.finish(result), data);
        if let Some(c) = counters {
            c.record_shared(&Finished {
                cdb: cdb.as_bytes(),
                read_bytes: (completion.data.len() as u64).min(u64::from(data_in_len)),
                write_bytes,
                status: completion.status,
                sense: &completion.sense,
                latency: Instant::now().saturating_duration_since(arrived),
            });
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
