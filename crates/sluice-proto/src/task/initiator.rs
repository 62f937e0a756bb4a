//! Initiator side of a task: ITT allocation, the Data-Out PDUs of a write (immediate,
//! unsolicited, per R2T) and Data-In reassembly of a read (RFC 7143 sections 4.2.5, 11.7,
//! 11.8).
//!
//! Per write: `InitiatorWrite::new`, put [`InitiatorWrite::immediate_data`] and
//! [`InitiatorWrite::command_final_bit`] in the SCSI Command, send
//! [`InitiatorWrite::unsolicited`], then for each R2T send [`InitiatorWrite::handle_r2t`]'s
//! PDUs, and finish with [`InitiatorWrite::handle_response`]. Per read: `InitiatorRead::new`,
//! feed every Data-In and the SCSI Response (if any) until [`ReadProgress::Complete`].

use bytes::{Bytes, BytesMut};

use super::coverage::{Coverage, Insert};
use super::{Residual, TaskCounters, TaskError};
use crate::params::SessionParams;
use crate::pdu::{DataIn, DataOut, R2t, ScsiResponse};
use crate::seq::{Itt, Lun, Ttt};

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
    pub status: u8,
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
        }
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
        // Section 11.8.4: R2TSN counts the task's R2Ts from 0; a gap is a sequence error.
        if r2t.r2t_sn != self.next_r2t_sn {
            return Err(TaskError::Sequence {
                expected: self.next_r2t_sn,
                got: r2t.r2t_sn,
            });
        }
        let len = r2t.desired_data_transfer_length;
        let end = r2t.buffer_offset.checked_add(len);
        // Section 11.8.3: the desired length is non-zero and at most MaxBurstLength.
        let valid = len > 0 && len <= self.params.max_burst_length;
        let end = end
            .filter(|&e| valid && e <= self.edtl())
            .ok_or(TaskError::InvalidR2t)?;
        self.next_r2t_sn += 1;
        self.counters.r2t += 1;
        let mut seq = self.sequence(r2t.ttt, r2t.buffer_offset, end);
        seq.lun = r2t.lun;
        self.counters.data_out += seq.pdu_count();
        Ok(seq)
    }

    /// Reads the final status; ExpDataSN must equal the R2Ts received (section 11.4.6).
    pub fn handle_response(&mut self, rsp: &ScsiResponse) -> Result<TaskStatus, TaskError> {
        if rsp.itt != self.itt {
            return Err(TaskError::WrongTask(rsp.itt));
        }
        if rsp.response == 0 && rsp.exp_data_sn != self.next_r2t_sn {
            return Err(TaskError::Inconsistent);
        }
        TaskStatus::from_response(rsp)
    }

    /// PDU counters so far (Data-Out counted when a sequence is handed out).
    pub fn counters(&self) -> TaskCounters {
        self.counters
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
            // Section 13.12: the target's MaxRecvDataSegmentLength bounds each Data-Out.
            max_segment_len: self.params.target_max_recv_data_segment_length.max(1),
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

/// What the initiator does next for a read task.
#[derive(Debug, Eq, PartialEq)]
pub enum ReadProgress {
    /// More Data-In (or the SCSI Response) is to come.
    Waiting,
    /// The command ended: the data received (EDTL minus any underflow) and its status.
    Complete(Bytes, TaskStatus),
}

/// Initiator-side state of one read command: reassembles Data-In into one buffer.
#[derive(Debug)]
pub struct InitiatorRead {
    itt: Itt,
    /// In-order reads keep their first Data-In payload as received (a slice of the receive
    /// buffer, no copy); a read that one PDU completes, the usual case up to
    /// MaxRecvDataSegmentLength, is handed back without ever being copied.
    first: Option<Bytes>,
    buffer: BytesMut,
    edtl: u32,
    received: Coverage,
    /// DataPDUInOrder=Yes and DataSequenceInOrder=Yes: strictly increasing offsets/DataSN.
    in_order: bool,
    pdus: u32,
    max_data_sn: Option<u32>,
    counters: TaskCounters,
    done: bool,
}

impl InitiatorRead {
    /// Starts a read of `edtl` bytes.
    pub fn new(itt: Itt, edtl: u32, params: &SessionParams) -> Self {
        Self {
            itt,
            first: None,
            buffer: if params.data_pdu_in_order && params.data_sequence_in_order {
                // Allocated only if a second PDU arrives (see `first`).
                BytesMut::new()
            } else {
                BytesMut::zeroed(edtl as usize)
            },
            edtl,
            received: Coverage::default(),
            in_order: params.data_pdu_in_order && params.data_sequence_in_order,
            pdus: 0,
            max_data_sn: None,
            counters: TaskCounters::default(),
            done: false,
        }
    }

    /// Takes in one Data-In PDU of this task.
    pub fn handle_data_in(&mut self, pdu: &DataIn) -> Result<ReadProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if pdu.itt != self.itt {
            return Err(TaskError::WrongTask(pdu.itt));
        }
        let edtl = self.edtl;
        let offset = pdu.buffer_offset;
        let len = u32::try_from(pdu.data.len()).unwrap_or(u32::MAX);
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= edtl)
            .ok_or(TaskError::BeyondEdtl { offset, len, edtl })?;
        if self.in_order {
            // Section 13.18: continuously increasing offsets; section 11.7.5: DataSN from 0.
            let expected = self.received.contiguous_end(0);
            if offset != expected {
                return Err(TaskError::Sequence {
                    expected,
                    got: offset,
                });
            }
            if pdu.data_sn != self.pdus {
                return Err(TaskError::Sequence {
                    expected: self.pdus,
                    got: pdu.data_sn,
                });
            }
        }
        match self.received.insert(offset, end) {
            Insert::Overlap => return Err(TaskError::Overlap(offset)),
            Insert::Duplicate if len > 0 => {
                self.counters.duplicates += 1;
                return Ok(ReadProgress::Waiting);
            }
            Insert::Duplicate | Insert::New => {}
        }
        if self.in_order {
            if offset == 0 && self.first.is_none() && self.buffer.is_empty() {
                self.first = Some(pdu.data.clone());
            } else {
                if let Some(first) = self.first.take() {
                    self.buffer.reserve(self.edtl as usize);
                    self.buffer.extend_from_slice(&first);
                }
                self.buffer.extend_from_slice(&pdu.data);
            }
        } else {
            self.buffer[offset as usize..end as usize].copy_from_slice(&pdu.data);
        }
        self.pdus += 1;
        self.counters.data_in += 1;
        self.max_data_sn = Some(self.max_data_sn.map_or(pdu.data_sn, |m| m.max(pdu.data_sn)));
        if !pdu.status_present {
            return Ok(ReadProgress::Waiting);
        }
        // Section 11.7.3: S=1 only with F=1, on the last Data-In; status GOOD-class only.
        let residual = Residual::from_flags(pdu.overflow, pdu.underflow, pdu.residual);
        let residual = residual
            .filter(|_| pdu.final_bit)
            .ok_or(TaskError::Inconsistent)?;
        self.finish(
            pdu.data_sn.wrapping_add(1),
            TaskStatus {
                status: pdu.status,
                residual,
                sense: Bytes::new(),
            },
        )
    }

    /// Takes in the SCSI Response ending this read (status not carried in a Data-In).
    pub fn handle_response(&mut self, rsp: &ScsiResponse) -> Result<ReadProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if rsp.itt != self.itt {
            return Err(TaskError::WrongTask(rsp.itt));
        }
        let status = TaskStatus::from_response(rsp)?;
        // Section 11.4.6: ExpDataSN is the number of Data-In PDUs the target sent.
        self.finish(rsp.exp_data_sn, status)
    }

    /// PDU counters so far.
    pub fn counters(&self) -> TaskCounters {
        self.counters
    }

    fn finish(&mut self, data_in_sent: u32, status: TaskStatus) -> Result<ReadProgress, TaskError> {
        // All DataSNs 0..data_in_sent must have arrived (section 7.9: a gap is a lost PDU).
        let all_arrived = self.pdus == data_in_sent
            && self.max_data_sn.map_or(0, |m| m.wrapping_add(1)) == data_in_sent;
        let edtl = self.edtl;
        let expected_bytes = match status.residual {
            Residual::Underflow(n) => edtl.checked_sub(n).ok_or(TaskError::Inconsistent)?,
            Residual::None | Residual::Overflow(_) => edtl,
        };
        let whole = self.received.bytes() == expected_bytes
            && self.received.contiguous_end(0) == expected_bytes;
        // A failed command may have moved any amount of data; a good one moved all of it.
        if !all_arrived || (status.status == super::STATUS_GOOD && !whole) {
            return Err(TaskError::Inconsistent);
        }
        self.done = true;
        let len = self.received.contiguous_end(0) as usize;
        if let Some(mut first) = self.first.take() {
            first.truncate(len);
            return Ok(ReadProgress::Complete(first, status));
        }
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.truncate(len);
        Ok(ReadProgress::Complete(buffer.freeze(), status))
    }
}

#[cfg(test)]
#[path = "initiator_tests.rs"]
mod tests;
