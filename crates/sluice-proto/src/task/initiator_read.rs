//! Initiator side of a read: Data-In reassembly into one buffer (RFC 7143 sections 11.7,
//! 11.7.3, 13.18 and 13.19).

use bytes::{Bytes, BytesMut};

use super::TaskStatus;
use crate::params::SessionParams;
use crate::pdu::{DataIn, ScsiResponse};
use crate::seq::Itt;
use crate::task::coverage::{Coverage, Insert};
use crate::task::{Residual, TaskCounters, TaskError};

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
        if !all_arrived || (status.status == crate::task::STATUS_GOOD && !whole) {
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
