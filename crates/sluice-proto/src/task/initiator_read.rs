//! Initiator side of a read: Data-In reassembly into one buffer (RFC 7143 sections 11.7,
//! 11.7.3, 13.18 and 13.19).

use bytes::buf::Limit;
use bytes::{BufMut, Bytes, BytesMut};

use super::TaskStatus;
use crate::params::SessionParams;
use crate::pdu::codes::ScsiStatus;
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
///
/// A driver may also receive a large in-order Data-In payload straight into the reassembly
/// buffer instead of buffering the whole PDU first: [`InitiatorRead::start_placement`] checks
/// the header and lends the buffer out as a [`Placement`], the driver appends the payload
/// (and checks its data digest where it landed), and [`InitiatorRead::handle_placed`] takes
/// the buffer back and accounts for the PDU exactly as [`InitiatorRead::handle_data_in`]
/// would.
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
    /// `buffer` is lent out to a [`Placement`].
    placing: bool,
    pdus: u32,
    max_data_sn: Option<u32>,
    counters: TaskCounters,
    done: bool,
    /// Within-command recovery of lost Data-In (ErrorRecoveryLevel 1 and above). An in-order
    /// read starts without it and creates it on the first thing that needs it (a DataSN out
    /// of sequence, an A bit, a loss, a stall with something missing, a reassignment): until
    /// then every Data-In arrived in order, which the plain path checks anyway, and the
    /// commonest read pays no allocation and no second bookkeeping for recovery it never
    /// needed (see `wake_recovery`).
    recovery: Option<Box<ReadRecovery>>,
    /// ErrorRecoveryLevel 1 and above was negotiated: `recovery` may be created.
    recoverable: bool,
}

/// Bytes a [`Placement`] can take past the end of its payload: enough for the padding and data
/// digest of the PDU (7 bytes) and the next PDU's header with its digest (52), so that one read
/// can fetch the rest of a payload and the next header (see [`Placement::spare_with_overrun`]).
pub const PLACEMENT_OVERRUN: usize = 64;

/// The reassembly buffer of an in-order read, lent out while one Data-In payload is received
/// into it in place (see [`InitiatorRead::start_placement`]).
#[derive(Debug)]
pub struct Placement {
    buffer: BytesMut,
    offset: usize,
    len: usize,
}

impl Placement {
    /// Payload bytes still to come.
    pub fn remaining(&self) -> usize {
        (self.offset + self.len).saturating_sub(self.buffer.len())
    }

    /// Where the rest of the payload goes: the buffer's spare capacity, limited to
    /// [`remaining`](Self::remaining) bytes (reserved when the placement started, so
    /// appending never reallocates). Read the socket into it.
    pub fn spare(&mut self) -> Limit<&mut BytesMut> {
        let remaining = self.remaining();
        (&mut self.buffer).limit(remaining)
    }

    /// [`spare`](Self::spare) plus [`PLACEMENT_OVERRUN`] bytes past the payload's end (also
    /// reserved), for a read that may fetch what follows the payload on the wire as well.
    /// Move those bytes out with [`split_overrun`](Self::split_overrun) after each read.
    pub fn spare_with_overrun(&mut self) -> Limit<&mut BytesMut> {
        let limit = self.remaining() + PLACEMENT_OVERRUN;
        (&mut self.buffer).limit(limit)
    }

    /// Moves whatever lies past the payload's end (bytes read by
    /// [`spare_with_overrun`](Self::spare_with_overrun) that belong to the stream after this
    /// PDU) to the end of `out`; returns how many.
    pub fn split_overrun(&mut self, out: &mut BytesMut) -> usize {
        let end = self.offset + self.len;
        let over = self.buffer.get(end..).unwrap_or_default();
        let n = over.len();
        if n > 0 {
            out.extend_from_slice(over);
            self.buffer.truncate(end);
        }
        n
    }

    /// Appends payload bytes that already arrived elsewhere (at most
    /// [`remaining`](Self::remaining) of them); returns how many were taken.
    pub fn append(&mut self, bytes: &[u8]) -> usize {
        let n = bytes.len().min(self.remaining());
        self.buffer.extend_from_slice(&bytes[..n]);
        n
    }

    /// The payload bytes received so far, where they landed (for the data digest).
    pub fn landed(&self) -> &[u8] {
        let end = self.buffer.len().min(self.offset + self.len);
        self.buffer.get(self.offset..end).unwrap_or_default()
    }
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
            placing: false,
            pdus: 0,
            max_data_sn: None,
            counters: TaskCounters::default(),
            done: false,
            // Out of order, DataSNs must be tracked from the first PDU.
            recovery: (params.error_recovery_level > 0
                && !(params.data_pdu_in_order && params.data_sequence_in_order))
                .then(Box::default),
            recoverable: params.error_recovery_level > 0,
        }
    }

    /// Takes in one Data-In PDU of this task.
    pub fn handle_data_in(&mut self, pdu: &DataIn) -> Result<ReadProgress, TaskError> {
        if self.placing {
            // The buffer is lent out: the stream cannot hold a PDU inside another one.
            return Err(TaskError::Inconsistent);
        }
        let offset = pdu.buffer_offset;
        let len = u32::try_from(pdu.data.len()).unwrap_or(u32::MAX);
        let checked = match self.recovery {
            Some(_) => None,
            None => Some(self.check(pdu, len)),
        };
        if checked.as_ref().is_some_and(Result::is_err) {
            // Not the next Data-In in order: under recovery, a loss or a duplicate to sort out.
            self.wake_recovery();
        }
        let (Some(checked), None) = (checked, &self.recovery) else {
            return self.handle_data_in_recovering(pdu);
        };
        let end = checked?;
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
                self.unfreeze_first();
                self.buffer.extend_from_slice(&pdu.data);
            }
        } else {
            self.buffer[offset as usize..end as usize].copy_from_slice(&pdu.data);
        }
        self.account(pdu)
    }

    /// Offers to receive the payload of the Data-In whose header is `pdu` (its `data` is
    /// ignored) and whose DataSegmentLength is `len` straight into the reassembly buffer.
    ///
    /// `len` must already be bounded by our MaxRecvDataSegmentLength (the framer does that).
    /// The header gets the checks of [`handle_data_in`](Self::handle_data_in): ITT, the EDTL
    /// bound, and (section 13.18/13.19, in-order reads only) Buffer Offset and DataSN
    /// continuing the previous PDU. `None` when the payload cannot be placed: a read that
    /// accepts any order, an empty segment, or a header `handle_data_in` would refuse. Then
    /// receive the whole PDU and hand it to `handle_data_in`, which reports what is wrong.
    pub fn start_placement(&mut self, pdu: &DataIn, len: u32) -> Option<Placement> {
        if !self.in_order || self.placing || len == 0 {
            return None;
        }
        if self
            .recovery
            .as_ref()
            .is_some_and(|r| !r.places(pdu.data_sn, self.pdus))
        {
            // Not the next PDU in order (a loss, a duplicate, a resent one): the whole PDU goes
            // through `handle_data_in`, which sorts it out.
            return None;
        }
        let end = self.check(pdu, len).ok()?;
        self.unfreeze_first();
        let want = (end as usize).max(self.edtl as usize) + PLACEMENT_OVERRUN;
        if self.buffer.capacity() < want {
            // In order, so `buffer.len()` is the offset; one reservation for the whole read.
            self.buffer.reserve(want - self.buffer.len());
        }
        self.placing = true;
        Some(Placement {
            buffer: std::mem::take(&mut self.buffer),
            offset: pdu.buffer_offset as usize,
            len: len as usize,
        })
    }

    /// Takes the buffer back from a [`Placement`] whose payload has all arrived (and whose
    /// data digest, if negotiated, the caller has verified) and accounts for the Data-In
    /// `pdu` (the header passed to [`start_placement`](Self::start_placement)) as
    /// [`handle_data_in`](Self::handle_data_in) would, status bits included.
    pub fn handle_placed(
        &mut self,
        pdu: &DataIn,
        placement: Placement,
    ) -> Result<ReadProgress, TaskError> {
        let Placement {
            mut buffer,
            offset,
            len,
        } = placement;
        let landed = buffer.len() == offset + len;
        let same = pdu.buffer_offset as usize == offset;
        if !self.placing || !landed || !same {
            // Not the placement lent out, or not all of it: the caller's mistake, not the
            // peer's; the task cannot be trusted any more.
            return Err(TaskError::Inconsistent);
        }
        self.placing = false;
        let len32 = len as u32;
        let checked = self.check(pdu, len32).and_then(|end| {
            match self.received.insert(pdu.buffer_offset, end) {
                Insert::New => Ok(()),
                Insert::Overlap | Insert::Duplicate => Err(TaskError::Overlap(pdu.buffer_offset)),
            }
        });
        if let Err(e) = checked {
            buffer.truncate(offset);
            self.buffer = buffer;
            return Err(e);
        }
        self.buffer = buffer;
        self.account(pdu)
    }

    /// Takes the buffer back from a [`Placement`] whose payload is not to be used (its data
    /// digest failed): what it received is dropped and the read goes on as if the PDU had
    /// not arrived.
    pub fn abandon_placement(&mut self, placement: Placement) {
        if !self.placing {
            return;
        }
        let Placement {
            mut buffer, offset, ..
        } = placement;
        buffer.truncate(offset);
        self.buffer = buffer;
        self.placing = false;
    }

    /// Takes in the SCSI Response ending this read (status not carried in a Data-In).
    pub fn handle_response(&mut self, rsp: &ScsiResponse) -> Result<ReadProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if rsp.itt != self.itt {
            return Err(TaskError::WrongTask(rsp.itt));
        }
        if self.placing {
            // The buffer is lent out: the stream cannot hold a Response inside a Data-In.
            return Err(TaskError::Inconsistent);
        }
        let status = TaskStatus::from_response(rsp)?;
        if rsp.exp_data_sn != self.pdus {
            // Some Data-In it counts did not arrive (or more came than it counts).
            self.wake_recovery();
        }
        if self.recovery.is_some() {
            return self.status_recovering(rsp.exp_data_sn, status, Some(rsp.snack_tag));
        }
        // Section 11.4.8: ExpDataSN is the number of Data-In PDUs the target sent.
        self.finish(rsp.exp_data_sn, status)
    }

    /// PDU counters so far.
    pub fn counters(&self) -> TaskCounters {
        self.counters
    }

    /// The header checks of a Data-In carrying `len` bytes; returns where its data ends.
    fn check(&self, pdu: &DataIn, len: u32) -> Result<u32, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if pdu.itt != self.itt {
            return Err(TaskError::WrongTask(pdu.itt));
        }
        let edtl = self.edtl;
        let offset = pdu.buffer_offset;
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
        Ok(end)
    }

    /// An in-order read that kept its first payload as received: copy it into the
    /// reassembly buffer (sized for the whole read) before more data follows it.
    fn unfreeze_first(&mut self) {
        if let Some(first) = self.first.take() {
            self.buffer.reserve(self.edtl as usize + PLACEMENT_OVERRUN);
            self.buffer.extend_from_slice(&first);
        }
    }

    /// Counts a Data-In whose data is stored and reads its status, if it carries one.
    fn account(&mut self, pdu: &DataIn) -> Result<ReadProgress, TaskError> {
        if pdu.ack {
            // Section 11.7.2: the A bit asks for a DataACK, which the recovery state answers.
            self.wake_recovery();
        }
        self.pdus += 1;
        self.counters.data_in += 1;
        self.max_data_sn = Some(self.max_data_sn.map_or(pdu.data_sn, |m| m.max(pdu.data_sn)));
        if self.recovery.is_some() {
            return self.account_recovering(pdu);
        }
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
        if !all_arrived || (status.status == ScsiStatus::Good && !whole) {
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

#[path = "initiator_read_recovery.rs"]
mod recovery;
pub use recovery::ReadAsk;
use recovery::ReadRecovery;
