//! Initiator side of a task: ITT allocation, the Data-Out PDUs of a write (immediate,
//! unsolicited, per R2T) and Data-In reassembly of a read (RFC 7143 sections 4.2.5, 11.7,
//! 11.8).
//!
//! Per write: `InitiatorWrite::new`, put [`InitiatorWrite::immediate_data`] and
//! [`InitiatorWrite::command_final_bit`] in the SCSI Command, send
//! [`InitiatorWrite::unsolicited`], then for each R2T send [`InitiatorWrite::handle_r2t`]'s
//! PDUs, and finish with [`InitiatorWrite::handle_response`]. Per read: `InitiatorRead::new`,
//! feed every Data-In and the SCSI Response (if any) until [`ReadProgress::Complete`].

use bytes::Bytes;

use super::{Residual, TaskCounters, TaskError};
use crate::params::SessionParams;
use crate::pdu::codes::{ScsiResponseCode, ScsiStatus};
use crate::pdu::{DataOut, R2t, ScsiResponse};
use crate::seq::{Itt, Lun, Ttt};

#[path = "initiator_read.rs"]
mod read;
pub use read::{InitiatorRead, Placement, ReadAsk, ReadProgress, PLACEMENT_OVERRUN};

/// Most R2Ts one R2T can show missing before the gap is taken for a broken target rather than
/// losses (bounds the list of missing R2TSNs).
const MAX_MISSING_R2TS: u32 = 64;

/// Hands out Initiator Task Tags, never the reserved 0xffffffff (section 11.2.1.8).
#[derive(Clone, Debug, Default)]
pub struct IttAllocator {
    next: u32,
}

impl IttAllocator {
    /// Starts at `first` (skipped if reserved).
    pub fn starting_at(first: u32) -> Self {
        Self { next: first }
    }

    /// The next tag. The caller must not reuse a tag of a task still in progress.
    pub fn allocate(&mut self) -> Itt {
        if self.next == Itt::RESERVED.0 {
            self.next = 0;
        }
        let itt = Itt(self.next);
        self.next = self.next.wrapping_add(1);
        itt
    }
}

/// How a command ended, as the initiator sees it.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TaskStatus {
    /// SCSI status byte.
    pub status: ScsiStatus,
    /// Residual (section 11.4.5.1).
    pub residual: Residual,
    /// Sense data without its SenseLength prefix (empty if none).
    pub sense: Bytes,
}

impl TaskStatus {
    /// Reads status, residual and sense data from a SCSI Response.
    pub fn from_response(rsp: &ScsiResponse) -> Result<Self, TaskError> {
        let residual = Residual::from_flags(rsp.overflow, rsp.underflow, rsp.residual)
            .ok_or(TaskError::Inconsistent)?;
        // Section 11.4.7.1: the data segment starts with a 2-byte SenseLength.
        let sense = match rsp.data.get(..2) {
            Some(len) => {
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                rsp.data.slice(2..(2 + len).min(rsp.data.len()))
            }
            None => Bytes::new(),
        };
        Ok(Self {
            status: rsp.status,
            residual,
            sense,
        })
    }
}

/// Initiator-side state of one write command.
#[derive(Debug)]
pub struct InitiatorWrite {
    itt: Itt,
    lun: Lun,
    data: Bytes,
    params: SessionParams,
    immediate_len: u32,
    unsolicited_end: u32,
    next_r2t_sn: u32,
    counters: TaskCounters,
    /// Within-command recovery (ErrorRecoveryLevel 1 and above): R2TSNs not received yet
    /// although later ones were, each asked for with an R2T SNACK.
    recovering: bool,
    missing_r2ts: Vec<u32>,
    r2t_snacks: Vec<(u32, u32)>,
    /// Moved to a new connection (TASK REASSIGN): the next R2T's R2TSN is taken as it comes.
    r2t_sn_unknown: bool,
}

impl InitiatorWrite {
    /// Plans a write of `data` (its length is the EDTL) under the negotiated `params`.
    ///
    /// Section 13.11/13.14: immediate data (ImmediateData=Yes) is at most FirstBurstLength and
    /// the target's MaxRecvDataSegmentLength; with InitialR2T=No unsolicited Data-Out follows
    /// up to min(FirstBurstLength, EDTL), the amount section 11.4.7.2 requires.
    pub fn new(itt: Itt, lun: Lun, data: Bytes, params: &SessionParams) -> Self {
        let edtl = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let first_burst = params.first_burst_length.min(edtl);
        let immediate_len = if params.immediate_data {
            first_burst.min(params.target_max_recv_data_segment_length)
        } else {
            0
        };
        let unsolicited_end = if params.initial_r2t {
            immediate_len
        } else {
            first_burst
        };
        Self {
            itt,
            lun,
            data: data.slice(..edtl as usize),
            params: *params,
            immediate_len,
            unsolicited_end,
            next_r2t_sn: 0,
            counters: TaskCounters {
                immediate_bytes: immediate_len,
                ..TaskCounters::default()
            },
            recovering: params.error_recovery_level > 0,
            missing_r2ts: Vec::new(),
            r2t_snacks: Vec::new(),
            r2t_sn_unknown: false,
        }
    }

    /// TASK REASSIGN moved the write to a connection with `params` (section 7.2.2): R2Ts
    /// lost with the old connection are not asked for (the target sends new ones for what it
    /// misses, numbered on from its last R2TSN), and Data-Out is cut to the new connection's
    /// MaxRecvDataSegmentLength.
    pub fn reassigned(&mut self, params: &SessionParams) {
        self.params.target_max_recv_data_segment_length =
            params.target_max_recv_data_segment_length;
        self.params.solicited_data_by_rdma = params.solicited_data_by_rdma;
        self.missing_r2ts.clear();
        self.r2t_snacks.clear();
        self.r2t_sn_unknown = true;
    }

    /// The R2T SNACKs to send since the last call, as `(BegRun, RunLength)`.
    pub fn take_r2t_snacks(&mut self) -> Vec<(u32, u32)> {
        std::mem::take(&mut self.r2t_snacks)
    }

    /// The Expected Data Transfer Length for the command.
    pub fn edtl(&self) -> u32 {
        self.data.len() as u32
    }

    /// Immediate data for the SCSI Command PDU (a slice, no copy).
    pub fn immediate_data(&self) -> Bytes {
        self.data.slice(..self.immediate_len as usize)
    }

    /// The command's F bit: set when no unsolicited Data-Out follows (section 11.3.1).
    pub fn command_final_bit(&self) -> bool {
        self.unsolicited_end == self.immediate_len
    }

    /// The unsolicited Data-Out PDUs (TTT 0xffffffff) to send right after the command.
    pub fn unsolicited(&mut self) -> DataOutSequence {
        let seq = self.sequence(Ttt::RESERVED, self.immediate_len, self.unsolicited_end);
        self.counters.data_out += seq.pdu_count();
        seq
    }

    /// The Data-Out PDUs answering `r2t` (TTT and LUN echoed, DataSN from 0, F on the last).
    pub fn handle_r2t(&mut self, r2t: &R2t) -> Result<DataOutSequence, TaskError> {
        if r2t.itt != self.itt {
            return Err(TaskError::WrongTask(r2t.itt));
        }
        if std::mem::take(&mut self.r2t_sn_unknown) {
            self.next_r2t_sn = r2t.r2t_sn;
        }
        // Section 11.8.2: R2TSN counts the task's R2Ts from 0; a gap is a sequence error.
        if r2t.r2t_sn != self.next_r2t_sn {
            if !self.recovering {
                return Err(TaskError::Sequence {
                    expected: self.next_r2t_sn,
                    got: r2t.r2t_sn,
                });
            }
            if r2t.r2t_sn.wrapping_sub(self.next_r2t_sn) < 0x8000_0000 {
                // Section 7.9: R2Ts before this one were lost; ask for them (section 11.16)
                // and answer this one now.
                let missing = r2t.r2t_sn - self.next_r2t_sn;
                if missing > MAX_MISSING_R2TS {
                    return Err(TaskError::Sequence {
                        expected: self.next_r2t_sn,
                        got: r2t.r2t_sn,
                    });
                }
                self.r2t_snacks.push((self.next_r2t_sn, missing));
                self.missing_r2ts.extend(self.next_r2t_sn..r2t.r2t_sn);
                self.next_r2t_sn = r2t.r2t_sn;
            } else if let Some(at) = self.missing_r2ts.iter().position(|&m| m == r2t.r2t_sn) {
                // A lost R2T arriving after all: answered now.
                self.missing_r2ts.swap_remove(at);
                return self.answer_r2t(r2t);
            } else {
                // "When an initiator receives duplicate R2TSNs (due to proactive
                // retransmission of R2Ts by the target) ..., it MUST discard the duplicates."
                self.counters.duplicates += 1;
                return Ok(self.sequence(r2t.ttt, 0, 0));
            }
        }
        let seq = self.answer_r2t(r2t)?;
        self.next_r2t_sn += 1;
        Ok(seq)
    }

    /// The Data-Out answering a valid R2T.
    fn answer_r2t(&mut self, r2t: &R2t) -> Result<DataOutSequence, TaskError> {
        let len = r2t.desired_data_transfer_length;
        let end = r2t.buffer_offset.checked_add(len);
        // Section 11.8.4: the desired length is non-zero and at most MaxBurstLength.
        let valid = len > 0 && len <= self.params.max_burst_length;
        let end = end
            .filter(|&e| valid && e <= self.edtl())
            .ok_or(TaskError::InvalidR2t)?;
        self.counters.r2t += 1;
        let mut seq = self.sequence(r2t.ttt, r2t.buffer_offset, end);
        seq.lun = r2t.lun;
        self.counters.data_out += seq.pdu_count();
        Ok(seq)
    }

    /// Reads the final status. A write has no Data-In, so ExpDataSN must be 0 (RFC 7143 section
    /// 11.4.8); targets written to RFC 3720 (section 10.4.8) count the R2Ts they sent instead,
    /// and that is accepted too.
    pub fn handle_response(&mut self, rsp: &ScsiResponse) -> Result<TaskStatus, TaskError> {
        if rsp.itt != self.itt {
            return Err(TaskError::WrongTask(rsp.itt));
        }
        if rsp.response == ScsiResponseCode::Completed
            && rsp.exp_data_sn != 0
            && rsp.exp_data_sn != self.next_r2t_sn
        {
            return Err(TaskError::Inconsistent);
        }
        TaskStatus::from_response(rsp)
    }

    /// PDU counters so far (Data-Out counted when a sequence is handed out).
    pub fn counters(&self) -> TaskCounters {
        self.counters
    }

    /// The longest Data-Out of a sequence: section 13.12, the target's
    /// MaxRecvDataSegmentLength; over iSER, solicited data (answering an R2T) is fetched by
    /// RDMA Read and never framed, so it goes to the datamover as one Data-Out, whose payload
    /// stays one slice of the write data (RFC 7145 section 7.3).
    fn max_segment_len(&self, ttt: Ttt) -> u32 {
        if self.params.solicited_data_by_rdma && ttt != Ttt::RESERVED {
            u32::MAX
        } else {
            self.params.target_max_recv_data_segment_length.max(1)
        }
    }

    fn sequence(&self, ttt: Ttt, offset: u32, end: u32) -> DataOutSequence {
        DataOutSequence {
            itt: self.itt,
            lun: self.lun,
            ttt,
            data: self.data.slice(offset as usize..end as usize),
            base_offset: offset,
            sent: 0,
            data_sn: 0,
            max_segment_len: self.max_segment_len(ttt),
        }
    }
}

/// The Data-Out PDUs of one sequence, slicing the write data without copying.
#[derive(Clone, Debug)]
pub struct DataOutSequence {
    itt: Itt,
    lun: Lun,
    ttt: Ttt,
    data: Bytes,
    base_offset: u32,
    sent: u32,
    data_sn: u32,
    max_segment_len: u32,
}

impl DataOutSequence {
    /// How many PDUs the sequence has in all.
    pub fn pdu_count(&self) -> u32 {
        (self.data.len() as u32).div_ceil(self.max_segment_len)
    }
}

impl Iterator for DataOutSequence {
    type Item = DataOut;

    fn next(&mut self) -> Option<DataOut> {
        let total = self.data.len() as u32;
        if self.sent >= total {
            return None;
        }
        let len = (total - self.sent).min(self.max_segment_len);
        let start = self.sent as usize;
        let pdu = DataOut {
            // Section 11.7.1: F on the last PDU of the sequence.
            final_bit: self.sent + len == total,
            lun: self.lun,
            itt: self.itt,
            ttt: self.ttt,
            exp_stat_sn: Default::default(),
            // Section 11.7.5: DataSN restarts at 0 for each R2T and the unsolicited sequence.
            data_sn: self.data_sn,
            buffer_offset: self.base_offset + self.sent,
            data: self.data.slice(start..start + len as usize),
        };
        self.sent += len;
        self.data_sn += 1;
        Some(pdu)
    }
}

#[cfg(test)]
#[path = "initiator_tests.rs"]
mod tests;
