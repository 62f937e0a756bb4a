//! Per-command state in the driver: turning a [`Command`] into PDUs with the sans-IO task
//! planners (`InitiatorWrite`, `InitiatorRead`) and turning their results into a
//! [`CommandOutcome`].

use std::time::Instant;

use bytes::Bytes;
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::{ScsiResponseCode, ScsiStatus};
use sluice_proto::pdu::{Cdb, DataIn, DataOut, Pdu, R2t, ScsiCommand, ScsiResponse};
use sluice_proto::seq::{Itt, Lun, SeqNum};
use sluice_proto::task::initiator::{
    InitiatorRead, InitiatorWrite, Placement, ReadProgress, TaskStatus,
};
use sluice_proto::task::TaskError;
use sluice_scsi::SenseData;
use tokio::sync::oneshot;

use crate::command::{Command, CommandOutcome, CommandStats, DataDirection};
use crate::error::Error;

/// Where a command's result goes.
pub(crate) type Reply = oneshot::Sender<Result<CommandOutcome, Error>>;

/// A command not yet (or no longer) on the wire.
pub(crate) struct Pending {
    pub(crate) cmd: Command,
    pub(crate) reply: Reply,
    pub(crate) submitted: Instant,
    pub(crate) attempts: u32,
}

/// A command on the wire.
pub(crate) struct Task {
    pub(crate) pending: Pending,
    pub(crate) cmd_sn: SeqNum,
    state: State,
    stats: CommandStats,
}

enum State {
    Read(InitiatorRead),
    Write(InitiatorWrite),
    NoData,
}

/// What a PDU did to a task.
pub(crate) enum Progress {
    /// More to come.
    Waiting,
    /// Done: reply with this.
    Done(Result<CommandOutcome, Error>),
}

impl Task {
    /// Plans the command and appends its PDUs (command, immediate and unsolicited data) to
    /// `out`. `exp_stat_sn` is stamped by the caller.
    pub(crate) fn start(
        pending: Pending,
        itt: Itt,
        cmd_sn: SeqNum,
        params: &SessionParams,
        out: &mut Vec<Pdu>,
    ) -> Self {
        let cmd = &pending.cmd;
        let lun = Lun::from_number(cmd.lun);
        let mut stats = CommandStats {
            attempts: pending.attempts,
            ..CommandStats::default()
        };
        let mut pdu = ScsiCommand {
            immediate: false,
            final_bit: true,
            read: false,
            write: false,
            attr: cmd.attr,
            lun,
            itt,
            expected_data_transfer_length: cmd.edtl(),
            cmd_sn,
            exp_stat_sn: SeqNum(0),
            // The BHS CDB field is 16 bytes; shorter CDBs are zero-padded (section 11.3.5).
            cdb: Cdb::new(&cmd.cdb),
            bidi_read_length: None,
            data: Bytes::new(),
        };
        let state = match &cmd.data {
            DataDirection::Read(len) if *len > 0 => {
                pdu.read = true;
                out.push(Pdu::ScsiCommand(pdu));
                State::Read(InitiatorRead::new(itt, *len, params))
            }
            DataDirection::Write(data) if !data.is_empty() => {
                let mut w = InitiatorWrite::new(itt, lun, data.clone(), params);
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
            pending,
            cmd_sn,
            state,
            stats,
        }
    }

    /// An R2T: appends the Data-Out PDUs answering it (section 11.8).
    pub(crate) fn handle_r2t(&mut self, r2t: &R2t, out: &mut Vec<DataOut>) -> Progress {
        let State::Write(w) = &mut self.state else {
            return Progress::Done(Err(TaskError::NotAWrite.into()));
        };
        match w.handle_r2t(r2t) {
            Ok(seq) => {
                self.stats.r2t += 1;
                self.stats.sequences.push(seq.pdu_count());
                self.stats.data_out += seq.pdu_count();
                out.extend(seq);
                Progress::Waiting
            }
            Err(e) => Progress::Done(Err(e.into())),
        }
    }

    /// A Data-In PDU (section 11.7), possibly carrying the status (phase collapse).
    pub(crate) fn handle_data_in(&mut self, pdu: &DataIn) -> Progress {
        let State::Read(r) = &mut self.state else {
            return Progress::Done(Err(Error::Protocol(
                "Data-In for a command without R bit".into(),
            )));
        };
        self.stats.data_in += 1;
        if pdu.status_present {
            self.stats.phase_collapse = true;
        }
        match r.handle_data_in(pdu) {
            Ok(ReadProgress::Waiting) => Progress::Waiting,
            Ok(ReadProgress::Complete(data, status)) => self.finish(data, status),
            Err(e) => Progress::Done(Err(e.into())),
        }
    }

    /// Offers the read's buffer for the payload of the Data-In with header `pdu` and `len`
    /// data bytes (see `placement`); `None` if it is not a read or not placeable.
    pub(crate) fn start_placement(&mut self, pdu: &DataIn, len: u32) -> Option<Placement> {
        match &mut self.state {
            State::Read(r) => r.start_placement(pdu, len),
            State::Write(_) | State::NoData => None,
        }
    }

    /// A Data-In whose payload was received into the read's buffer: as [`Self::handle_data_in`].
    pub(crate) fn handle_placed(&mut self, pdu: &DataIn, placement: Placement) -> Progress {
        let State::Read(r) = &mut self.state else {
            return Progress::Done(Err(Error::Protocol(
                "Data-In for a command without R bit".into(),
            )));
        };
        self.stats.data_in += 1;
        if pdu.status_present {
            self.stats.phase_collapse = true;
        }
        match r.handle_placed(pdu, placement) {
            Ok(ReadProgress::Waiting) => Progress::Waiting,
            Ok(ReadProgress::Complete(data, status)) => self.finish(data, status),
            Err(e) => Progress::Done(Err(e.into())),
        }
    }

    /// The SCSI Response (section 11.4).
    pub(crate) fn handle_response(&mut self, rsp: &ScsiResponse) -> Progress {
        if rsp.response != ScsiResponseCode::Completed {
            return Progress::Done(Err(Error::TargetFailure(rsp.response)));
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
            // SNACK), so any other value is logged and the status taken as sent.
            State::Write(w) => match w.handle_response(rsp) {
                Err(TaskError::Inconsistent) => {
                    tracing::debug!(itt = ?rsp.itt, exp_data_sn = rsp.exp_data_sn, "ExpDataSN differs from the R2Ts received");
                    TaskStatus::from_response(rsp)
                }
                other => other,
            }
            .map(|s| (Bytes::new(), s)),
            State::NoData => TaskStatus::from_response(rsp).map(|s| (Bytes::new(), s)),
        };
        match result {
            Ok((data, status)) => self.finish(data, status),
            Err(e) => Progress::Done(Err(e.into())),
        }
    }

    /// Bytes read so far or written, for the counters.
    pub(crate) fn write_len(&self) -> u64 {
        match &self.pending.cmd.data {
            DataDirection::Write(d) => d.len() as u64,
            _ => 0,
        }
    }

    fn finish(&mut self, data: Bytes, status: TaskStatus) -> Progress {
        let sense = (!status.sense.is_empty())
            .then(|| SenseData::parse(&status.sense).ok())
            .flatten();
        Progress::Done(Ok(CommandOutcome {
            status: status.status,
            sense_bytes: status.sense,
            sense,
            residual: status.residual,
            data,
            stats: std::mem::take(&mut self.stats),
            latency: self.pending.submitted.elapsed(),
        }))
    }
}
