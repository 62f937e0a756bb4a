//! One SCSI command of an initiator session: its PDUs out (command, immediate and unsolicited
//! data, Data-Out per R2T) and in (Data-In reassembly, status), with the planners of
//! [`crate::task::initiator`].

use std::time::Instant;

use bytes::Bytes;

use super::{Command, CommandData, CommandResult, CommandStats, ConnId, Failure, TaskId};
use crate::params::SessionParams;
use crate::pdu::codes::{ScsiResponseCode, ScsiStatus};
use crate::pdu::{DataIn, Pdu, R2t, ScsiCommand, ScsiResponse};
use crate::seq::{Itt, SeqNum};
use crate::task::initiator::{InitiatorRead, InitiatorWrite, Placement, ReadProgress, TaskStatus};
use crate::task::TaskError;

/// A command not (or no longer) on the wire.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) id: TaskId,
    pub(super) command: Command,
    pub(super) submitted: Instant,
    /// Times it was sent before.
    pub(super) attempts: u32,
}

/// A command on the wire.
#[derive(Debug)]
pub(super) struct Task {
    pub(super) queued: Queued,
    pub(super) cmd_sn: SeqNum,
    pub(super) conn: ConnId,
    state: State,
    stats: CommandStats,
}

#[derive(Debug)]
enum State {
    Read(InitiatorRead),
    Write(InitiatorWrite),
    NoData,
}

/// What a PDU did to a task.
pub(super) enum Progress {
    /// More to come.
    Waiting,
    /// Done.
    Done(Result<(Bytes, TaskStatus), Failure>),
}

impl Task {
    /// Plans the command and appends its PDUs (command, immediate and unsolicited data) to
    /// `out`; ExpStatSN is stamped when they leave.
    pub(super) fn start(
        mut queued: Queued,
        itt: Itt,
        cmd_sn: SeqNum,
        conn: ConnId,
        cid: u16,
        params: &SessionParams,
        out: &mut Vec<Pdu>,
    ) -> Self {
        queued.attempts += 1;
        let cmd = &queued.command;
        let mut stats = CommandStats {
            attempts: queued.attempts,
            cid,
            ..CommandStats::default()
        };
        let mut pdu = ScsiCommand {
            immediate: false,
            final_bit: true,
            read: false,
            write: false,
            attr: cmd.attr,
            lun: cmd.lun,
            itt,
            expected_data_transfer_length: cmd.edtl(),
            cmd_sn,
            exp_stat_sn: SeqNum(0),
            cdb: cmd.cdb.clone(),
            bidi_read_length: None,
            data: Bytes::new(),
        };
        let state = match &cmd.data {
            CommandData::Read(len) if *len > 0 => {
                pdu.read = true;
                out.push(Pdu::ScsiCommand(pdu));
                State::Read(InitiatorRead::new(itt, *len, params))
            }
            CommandData::Write(data) if !data.is_empty() => {
                let mut w = InitiatorWrite::new(itt, cmd.lun, data.clone(), params);
                pdu.write = true;
                pdu.data = w.immediate_data();
                pdu.final_bit = w.command_final_bit();
                stats.immediate_bytes = pdu.data.len() as u32;
                let carried = u32::from(!pdu.data.is_empty());
                out.push(Pdu::ScsiCommand(pdu));
                let unsolicited = w.unsolicited();
                let first = carried + unsolicited.pdu_count();
                if first > 0 {
                    stats.sequences.push(first);
                }
                stats.data_out += unsolicited.pdu_count();
                out.extend(unsolicited.map(Pdu::DataOut));
                State::Write(w)
            }
            _ => {
                out.push(Pdu::ScsiCommand(pdu));
                State::NoData
            }
        };
        Self {
            queued,
            cmd_sn,
            conn,
            state,
            stats,
        }
    }

    /// Bytes the command moves.
    pub(super) fn bytes(&self) -> u64 {
        self.queued.command.bytes()
    }

    /// Payload bytes written, for the counters.
    pub(super) fn write_len(&self) -> u64 {
        match &self.queued.command.data {
            CommandData::Write(d) => d.len() as u64,
            _ => 0,
        }
    }

    /// An R2T: appends the Data-Out PDUs answering it (section 11.8).
    pub(super) fn handle_r2t(&mut self, r2t: &R2t, out: &mut Vec<Pdu>) -> Progress {
        let State::Write(w) = &mut self.state else {
            return Progress::Done(Err(Failure::Task(TaskError::NotAWrite)));
        };
        match w.handle_r2t(r2t) {
            Ok(seq) => {
                self.stats.r2t += 1;
                self.stats.sequences.push(seq.pdu_count());
                self.stats.data_out += seq.pdu_count();
                out.extend(seq.map(Pdu::DataOut));
                Progress::Waiting
            }
            Err(e) => Progress::Done(Err(Failure::Task(e))),
        }
    }

    /// A Data-In PDU (section 11.7), possibly carrying the status (phase collapse).
    pub(super) fn handle_data_in(&mut self, pdu: &DataIn) -> Progress {
        let State::Read(r) = &mut self.state else {
            return Progress::Done(Err(Failure::Task(TaskError::WrongTask(pdu.itt))));
        };
        self.stats.data_in += 1;
        self.stats.phase_collapse |= pdu.status_present;
        read_progress(r.handle_data_in(pdu))
    }

    /// Offers the read's buffer for the payload of the Data-In with header `pdu` and `len`
    /// data bytes; `None` if it is not a read or not placeable.
    pub(super) fn start_placement(&mut self, pdu: &DataIn, len: u32) -> Option<Placement> {
        match &mut self.state {
            State::Read(r) => r.start_placement(pdu, len),
            State::Write(_) | State::NoData => None,
        }
    }

    /// A Data-In whose payload was received into the read's buffer.
    pub(super) fn handle_placed(&mut self, pdu: &DataIn, placement: Placement) -> Progress {
        let State::Read(r) = &mut self.state else {
            return Progress::Done(Err(Failure::Task(TaskError::WrongTask(pdu.itt))));
        };
        self.stats.data_in += 1;
        self.stats.phase_collapse |= pdu.status_present;
        read_progress(r.handle_placed(pdu, placement))
    }

    /// The SCSI Response (section 11.4).
    pub(super) fn handle_response(&mut self, rsp: &ScsiResponse) -> Progress {
        if rsp.response != ScsiResponseCode::Completed {
            return Progress::Done(Err(Failure::TargetFailure(rsp.response)));
        }
        let result = match &mut self.state {
            // A failed read's data does not matter. tgtd (1.0.85) sends a Data-In before a
            // CHECK CONDITION but reports ExpDataSN 0 (section 11.4.8 wants the Data-In
            // count), which the strict reassembly check would call inconsistent.
            State::Read(_) if rsp.status != ScsiStatus::Good => {
                TaskStatus::from_response(rsp).map(|s| (Bytes::new(), s))
            }
            State::Read(r) => match r.handle_response(rsp) {
                Ok(ReadProgress::Complete(data, status)) => Ok((data, status)),
                Ok(ReadProgress::Waiting) => return Progress::Waiting,
                Err(e) => Err(e),
            },
            // ExpDataSN of a write is 0 (RFC 7143 section 11.4.8) or, from RFC 3720 targets,
            // the number of R2Ts sent. At ErrorRecoveryLevel 0 nothing depends on it (no
            // SNACK), so any other value is taken as sent.
            State::Write(w) => match w.handle_response(rsp) {
                Err(TaskError::Inconsistent) => TaskStatus::from_response(rsp),
                other => other,
            }
            .map(|s| (Bytes::new(), s)),
            State::NoData => TaskStatus::from_response(rsp).map(|s| (Bytes::new(), s)),
        };
        Progress::Done(result.map_err(Failure::Task))
    }

    /// The result handed to the application.
    pub(super) fn result(
        &mut self,
        data: Bytes,
        status: TaskStatus,
        now: Instant,
    ) -> CommandResult {
        CommandResult {
            status: status.status,
            sense: status.sense,
            residual: status.residual,
            data,
            written: self.write_len(),
            stats: std::mem::take(&mut self.stats),
            latency: now.saturating_duration_since(self.queued.submitted),
        }
    }
}

fn read_progress(p: Result<ReadProgress, TaskError>) -> Progress {
    match p {
        Ok(ReadProgress::Waiting) => Progress::Waiting,
        Ok(ReadProgress::Complete(data, status)) => Progress::Done(Ok((data, status))),
        Err(e) => Progress::Done(Err(Failure::Task(e))),
    }
}
