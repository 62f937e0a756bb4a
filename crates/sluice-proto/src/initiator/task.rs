//! One SCSI command of an initiator session: its PDUs out (command, immediate and unsolicited
//! data, Data-Out per R2T) and in (Data-In reassembly, status), with the planners of
//! [`crate::task::initiator`].

use std::time::Instant;

use bytes::Bytes;

use super::{Command, CommandData, CommandResult, CommandStats, ConnId, Failure, TaskId};
use crate::params::SessionParams;
use crate::pdu::codes::SnackType;
use crate::pdu::codes::{ScsiResponseCode, ScsiStatus};
use crate::pdu::{DataIn, Pdu, R2t, ScsiCommand, ScsiResponse, SnackRequest};
use crate::seq::{Itt, Lun, SeqNum, Ttt};
use crate::task::initiator::{
    InitiatorRead, InitiatorWrite, Placement, ReadAsk, ReadProgress, TaskStatus,
};
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
    /// Under ErrorRecoveryLevel 1 and above: the command PDU as first sent, for a retry
    /// (section 7.2.1: "the command PDU MUST carry the original Initiator Task Tag and the
    /// original operational attributes ... as well as the original CmdSN").
    pub(super) sent: Option<ScsiCommand>,
    /// When anything last happened for it (sent, or a PDU for it arrived): the retry timer
    /// runs from here.
    pub(super) last_activity: Instant,
    /// Something for it arrived from the target (so the target has the command).
    pub(super) heard: bool,
    /// Times it was retried (command retry, section 7.2.1).
    pub(super) retries: u32,
    /// StatSN of its status when the status arrived before all the data: not acknowledged
    /// until the data is in (section 7.9).
    pub(super) held_stat_sn: Option<SeqNum>,
    /// A TASK REASSIGN for it waits for its answer (ErrorRecoveryLevel 2).
    pub(super) reassigning: bool,
    /// Times it was moved to a new connection.
    pub(super) reassignments: u32,
}

#[derive(Debug)]
enum State {
    Read(InitiatorRead),
    Write(InitiatorWrite),
    NoData,
}

/// Where and when a command goes out.
pub(super) struct Issue {
    pub(super) itt: Itt,
    pub(super) cmd_sn: SeqNum,
    pub(super) conn: ConnId,
    pub(super) cid: u16,
    pub(super) now: Instant,
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
        issue: Issue,
        params: &SessionParams,
        out: &mut Vec<Pdu>,
    ) -> Self {
        let Issue {
            itt,
            cmd_sn,
            conn,
            cid,
            now,
        } = issue;
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
        let recovering = params.error_recovery_level > 0;
        let mut sent = None;
        let state = match &cmd.data {
            CommandData::Read(len) if *len > 0 => {
                pdu.read = true;
                if recovering {
                    sent = Some(pdu.clone());
                }
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
                if recovering {
                    sent = Some(pdu.clone());
                }
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
                if recovering {
                    sent = Some(pdu.clone());
                }
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
            sent,
            last_activity: now,
            heard: false,
            retries: 0,
            held_stat_sn: None,
            reassigning: false,
            reassignments: 0,
        }
    }

    /// Gets the task ready to continue on a new connection with `params` (TASK REASSIGN,
    /// section 7.2.2) and returns the ExpDataSN to send: a read forgets the Data-In after the
    /// ones it has without a gap, which the target then sends again; a write answers the new
    /// connection's R2Ts, whatever R2TSN they start at.
    pub(super) fn prepare_reassign(&mut self, params: &SessionParams) -> u32 {
        self.held_stat_sn = None;
        self.heard = false;
        match &mut self.state {
            State::Read(r) => r.reassign(),
            State::Write(w) => {
                w.reassigned(params);
                0
            }
            State::NoData => 0,
        }
    }

    /// The PDUs of a command retry (section 7.2.1): the command as first sent, and the
    /// unsolicited data after it ("the immediate data is implicitly recovered when the task is
    /// retried ..., followed by the entire data transfer for the task", section 7.8). `false`
    /// when the command was not kept (ErrorRecoveryLevel 0).
    pub(super) fn retry_pdus(&mut self, out: &mut Vec<Pdu>) -> bool {
        let Some(cmd) = self.sent.clone() else {
            return false;
        };
        out.push(Pdu::ScsiCommand(cmd));
        if let State::Write(w) = &mut self.state {
            out.extend(w.unsolicited().map(Pdu::DataOut));
        }
        self.retries += 1;
        true
    }

    /// The SNACKs the task asks for since the last call (lost Data-In, R2Ts, DataACKs).
    pub(super) fn take_snacks(&mut self, itt: Itt) -> Vec<Pdu> {
        let lun = self.queued.command.lun;
        match &mut self.state {
            State::Read(r) => r
                .take_asks()
                .into_iter()
                .map(|a| match a {
                    ReadAsk::Data {
                        beg_run,
                        run_length,
                    } => snack(
                        SnackType::DataR2t,
                        lun,
                        itt,
                        Ttt::RESERVED,
                        beg_run,
                        run_length,
                    ),
                    // Section 11.16.4: the ITT of a DataACK is the reserved value.
                    ReadAsk::DataAck { ttt, lun, beg_run } => {
                        snack(SnackType::DataAck, lun, Itt::RESERVED, ttt, beg_run, 0)
                    }
                    ReadAsk::RData { tag } => snack(SnackType::RData, lun, itt, Ttt(tag), 0, 0),
                })
                .collect(),
            State::Write(w) => w
                .take_r2t_snacks()
                .into_iter()
                .map(|(beg, run)| snack(SnackType::DataR2t, lun, itt, Ttt::RESERVED, beg, run))
                .collect(),
            State::NoData => Vec::new(),
        }
    }

    /// A Data-In of this task whose data failed its digest: asked for again.
    pub(super) fn handle_lost_data_in(&mut self, header: &DataIn) {
        if let State::Read(r) = &mut self.state {
            r.handle_lost_data_in(header);
        }
    }

    /// No progress for a retry period: a read asks again for what it misses.
    pub(super) fn handle_stall(&mut self, tag: u32) {
        if let State::Read(r) = &mut self.state {
            r.handle_stall(tag);
        }
    }

    /// Retry periods in a row in which a read's missing data did not shrink.
    pub(super) fn fruitless_stalls(&self) -> u32 {
        match &self.state {
            State::Read(r) => r.fruitless_stalls(),
            _ => 0,
        }
    }

    /// Whether this is a read.
    pub(super) fn is_read(&self) -> bool {
        matches!(self.state, State::Read(_))
    }

    /// Whether this is a read whose status arrived before all its data.
    pub(super) fn status_waits_for_data(&self) -> bool {
        matches!(&self.state, State::Read(r) if r.status_waits_for_data())
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

    /// A placement whose payload cannot be used: the read takes its buffer back.
    pub(super) fn abandon_placement(&mut self, placement: Placement) {
        if let State::Read(r) = &mut self.state {
            r.abandon_placement(placement);
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

/// A SNACK Request (section 11.16); ExpStatSN is stamped when it leaves.
pub(super) fn snack(
    snack_type: SnackType,
    lun: Lun,
    itt: Itt,
    ttt: Ttt,
    beg_run: u32,
    run_length: u32,
) -> Pdu {
    Pdu::SnackRequest(SnackRequest {
        snack_type,
        lun,
        itt,
        ttt,
        exp_stat_sn: SeqNum(0),
        beg_run,
        run_length,
    })
}

fn read_progress(p: Result<ReadProgress, TaskError>) -> Progress {
    match p {
        Ok(ReadProgress::Waiting) => Progress::Waiting,
        Ok(ReadProgress::Complete(data, status)) => Progress::Done(Ok((data, status))),
        Err(e) => Progress::Done(Err(Failure::Task(e))),
    }
}
