//! Target side of a SCSI write: immediate data, unsolicited Data-Out, R2Ts and solicited
//! Data-Out (RFC 7143 sections 4.2.5.2, 11.7, 11.8). Data that arrives in offset order (the
//! usual case) is kept as the PDUs' own data segments, no copy; only out-of-order data is
//! gathered into one buffer.
//!
//! A target driver, per write command:
//! 1. `let (task, progress) = TargetWrite::new(&cmd, &params, wanted_len, &mut ttts)?;`
//!    where `wanted_len` is how many bytes the SCSI layer will consume (normally the EDTL).
//! 2. On [`WriteProgress::NeedR2ts`] send those R2Ts (stamping StatSN/ExpCmdSN/MaxCmdSN).
//! 3. For each Data-Out routed to this task by ITT: `task.handle_data_out(&pdu, &mut ttts)`.
//! 4. On [`WriteProgress::Complete`] hand the [`WriteData`] to the SCSI layer, then answer with
//!    [`TargetWrite::response`] (ExpDataSN 0, residual per section 11.4.5.1).
//! 5. On `Err(e)` do what `e.action()` says and drop the task.

use bytes::{Bytes, BytesMut};
use smallvec::{smallvec, SmallVec};

use super::coverage::{Coverage, Insert};
use super::{scsi_response, Residual, TaskCounters, TaskError, TttAllocator};
use crate::params::SessionParams;
use crate::pdu::codes::ScsiStatus;
use crate::pdu::{DataOut, R2t, ScsiCommand, ScsiResponse};
use crate::seq::{Itt, Lun, Ttt};

/// In-order data segments at least this long are kept as they arrived (a slice of the
/// driver's receive buffer); shorter ones are copied into their own small buffer, so that a
/// few bytes cannot keep a whole receive buffer alive while the write waits for the rest (an
/// initiator sending tiny Data-Out PDUs would otherwise pin far more memory than its writes
/// carry). Immediate data that completes its write is never copied: the write runs at once,
/// so the slice is not held for longer than the command.
pub const ZERO_COPY_MIN: usize = 16 * 1024;

/// Most segments one write keeps; past that its data is gathered into one buffer (bounds the
/// bookkeeping of writes made of many small PDUs).
pub const MAX_SEGMENTS: usize = 1024;

/// What the driver does next for a write task.
#[derive(Debug, Eq, PartialEq)]
pub enum WriteProgress {
    /// Send these R2Ts; more data will follow.
    NeedR2ts(Vec<R2t>),
    /// Nothing to send; wait for more Data-Out.
    Waiting,
    /// All data arrived: `wanted_len.min(EDTL)` bytes.
    Complete(WriteData),
    /// Data was lost to a digest error and the session does not recover it
    /// (ErrorRecoveryLevel 0): every outstanding sequence has ended, and the command ends with
    /// CHECK CONDITION, "Protocol Service CRC error" (RFC 7143 sections 7.8 b, 11.4.7.2).
    CrcError,
}

/// The data of a completed write, in offset order: the data segments as they arrived when
/// they came in order, otherwise one gathered buffer; or, for a write whose device keeps
/// nothing ([`TargetWrite::discard_data`]), only how many bytes arrived.
#[derive(Clone, Default)]
pub struct WriteData {
    segments: Segments,
    /// Bytes that arrived and were dropped on arrival (then `segments` is empty).
    unkept: usize,
}

/// Data segments of one write, the first few inline: most writes arrive in one to four
/// segments, and keeping them needs no allocation.
type Segments = SmallVec<[Bytes; 4]>;

impl WriteData {
    /// The pieces, back to back from offset 0; none is empty. Empty when the data was not
    /// kept ([`unkept`](Self::unkept)).
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// How many bytes arrived and were dropped as they came, when the write's data was not
    /// kept ([`TargetWrite::discard_data`]); `None` when [`segments`](Self::segments) hold
    /// the data.
    pub fn unkept(&self) -> Option<usize> {
        (self.unkept > 0).then_some(self.unkept)
    }

    /// Total bytes, kept or not.
    pub fn len(&self) -> usize {
        self.unkept + self.segments.iter().map(Bytes::len).sum::<usize>()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.unkept == 0
    }

    /// All bytes as one buffer: no copy when there is at most one segment. Data that was not
    /// kept reads as zeros.
    pub fn to_bytes(&self) -> Bytes {
        match &self.segments[..] {
            [] if self.unkept > 0 => Bytes::from(vec![0; self.unkept]),
            [] => Bytes::new(),
            [one] => one.clone(),
            many => Bytes::from(many.concat()),
        }
    }
}

impl PartialEq for WriteData {
    /// Equal when the bytes are, however they are split.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self.unkept == other.unkept
            && self
                .segments
                .iter()
                .flat_map(|s| s.iter())
                .eq(other.segments.iter().flat_map(|s| s.iter()))
    }
}

impl Eq for WriteData {}

impl std::fmt::Debug for WriteData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WriteData({} bytes in {} segments, {} not kept)",
            self.len(),
            self.segments.len(),
            self.unkept
        )
    }
}

impl From<&[u8]> for WriteData {
    fn from(data: &[u8]) -> Self {
        let segments = if data.is_empty() {
            Segments::new()
        } else {
            smallvec![Bytes::copy_from_slice(data)]
        };
        Self {
            segments,
            unkept: 0,
        }
    }
}

/// One data sequence being received: the unsolicited burst or the answer to one R2T.
#[derive(Debug)]
struct Burst {
    /// TTT of the R2T, [`Ttt::RESERVED`] for the unsolicited burst.
    ttt: Ttt,
    /// R2TSN of its R2T (`None` for the unsolicited burst), to resend it on an R2T SNACK.
    r2t_sn: Option<u32>,
    offset: u32,
    len: u32,
    received: Coverage,
    /// PDUs accepted (also the next expected DataSN when in order).
    pdus: u32,
    /// Highest DataSN seen (any-order mode).
    max_data_sn: u32,
    /// End of the highest byte range seen, lost PDUs included (recovery: an in-order PDU
    /// starting past it means the PDUs between were lost).
    frontier: u32,
    final_seen: bool,
}

impl Burst {
    fn new(ttt: Ttt, r2t_sn: Option<u32>, offset: u32, len: u32) -> Self {
        Self {
            ttt,
            r2t_sn,
            offset,
            len,
            received: Coverage::default(),
            pdus: 0,
            max_data_sn: 0,
            frontier: offset,
            final_seen: false,
        }
    }

    /// Whether the sequence ended (F bit seen) with bytes missing: PDUs were lost.
    fn ended_with_loss(&self) -> bool {
        self.final_seen && self.received.bytes() < self.len
    }

    fn end(&self) -> u32 {
        self.offset + self.len
    }

    fn is_done(&self) -> bool {
        self.final_seen && self.received.bytes() == self.len
    }
}

/// Target-side state of one write command.
#[derive(Debug)]
pub struct TargetWrite {
    itt: Itt,
    lun: Lun,
    edtl: u32,
    /// Bytes the SCSI layer consumes: `min(wanted_len, edtl)`; solicitation stops there.
    collect_len: u32,
    residual: Residual,
    params: SessionParams,
    /// In-order data so far: segments covering `0..segments_len`, no copy.
    segments: Segments,
    segments_len: usize,
    /// Out-of-order data, once any arrived: everything gathered here (`segments` is empty).
    gathered: Option<BytesMut>,
    /// Whether data is kept as it arrives (`false` after [`Self::discard_data`]).
    keep_data: bool,
    unsolicited: Option<Burst>,
    /// Outstanding R2T bursts in offset order (section 13.17: at most MaxOutstandingR2T).
    bursts: Vec<Burst>,
    next_r2t_offset: u32,
    next_r2t_sn: u32,
    counters: TaskCounters,
    done: bool,
    /// Within-command recovery (ErrorRecoveryLevel 1 and above): lost Data-Out is asked for
    /// again with recovery R2Ts instead of failing the command (RFC 7143 sections 7.8, 7.9).
    recovery: recovery::Recovery,
}

impl TargetWrite {
    /// Starts a write from its command PDU and takes in its immediate data.
    ///
    /// `wanted_len` is the number of bytes the SCSI layer wants; fewer than EDTL means only
    /// that many are solicited and the response reports an underflow, more means overflow
    /// (section 11.4.5.1). Returns the first progress: R2Ts to send at once, waiting for
    /// unsolicited Data-Out, or already complete.
    pub fn new(
        cmd: &ScsiCommand,
        params: &SessionParams,
        wanted_len: u32,
        ttts: &mut dyn TttAllocator,
    ) -> Result<(Self, WriteProgress), TaskError> {
        let edtl = cmd.expected_data_transfer_length;
        if !cmd.write && (edtl != 0 || !cmd.data.is_empty()) {
            return Err(TaskError::NotAWrite);
        }
        let imm_len = seg_len(&cmd.data)?;
        let collect_len = wanted_len.min(edtl);
        let mut task = Self {
            itt: cmd.itt,
            lun: cmd.lun,
            edtl,
            collect_len,
            residual: Residual::from_lengths(edtl, wanted_len),
            params: *params,
            segments: Segments::new(),
            segments_len: 0,
            gathered: None,
            keep_data: true,
            unsolicited: None,
            bursts: Vec::new(),
            next_r2t_offset: 0,
            next_r2t_sn: 0,
            counters: TaskCounters::default(),
            done: false,
            recovery: recovery::Recovery::new(params.error_recovery_level > 0),
        };
        if imm_len > 0 {
            // Section 13.11: immediate data only with ImmediateData=Yes.
            if !params.immediate_data {
                return Err(TaskError::UnexpectedUnsolicited);
            }
            let max = params.target_max_recv_data_segment_length;
            if imm_len > max {
                return Err(TaskError::SegmentTooLong { len: imm_len, max });
            }
            if imm_len > edtl {
                return Err(TaskError::BeyondEdtl {
                    offset: 0,
                    len: imm_len,
                    edtl,
                });
            }
            // Section 13.14: FirstBurstLength covers the immediate data too.
            if imm_len > params.first_burst_length {
                return Err(TaskError::IncorrectUnsolicitedAmount);
            }
            let complete = Self::completes_with_command(cmd, collect_len);
            task.copy_in(0, &cmd.data, complete);
            task.counters.immediate_bytes = imm_len;
        }
        // Section 11.3.1 (F bit): F=0 announces unsolicited Data-Out; section 11.4.7.2: when
        // unsolicited Data-Out is sent, the unsolicited total is min(FirstBurstLength, EDTL).
        let mut unsolicited_end = imm_len;
        if !cmd.final_bit {
            if params.initial_r2t {
                return Err(TaskError::UnexpectedUnsolicited);
            }
            unsolicited_end = params.first_burst_length.min(edtl);
            if unsolicited_end <= imm_len {
                return Err(TaskError::IncorrectUnsolicitedAmount);
            }
            task.unsolicited = Some(Burst::new(
                Ttt::RESERVED,
                None,
                imm_len,
                unsolicited_end - imm_len,
            ));
        }
        task.next_r2t_offset = unsolicited_end;
        let progress = task.progress(ttts);
        Ok((task, progress))
    }

    /// Whether the command PDU alone carries all the data the write will collect
    /// (`collect_len` bytes): F=1 and enough immediate data. Such a write completes as it
    /// arrives and waits for no Data-Out (no pinning to fear).
    pub fn completes_with_command(cmd: &ScsiCommand, collect_len: u32) -> bool {
        cmd.final_bit && cmd.data.len() >= collect_len as usize
    }

    /// Takes in one Data-Out PDU for this task and says what to do next.
    pub fn handle_data_out(
        &mut self,
        pdu: &DataOut,
        ttts: &mut dyn TttAllocator,
    ) -> Result<WriteProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if pdu.itt != self.itt {
            return Err(TaskError::WrongTask(pdu.itt));
        }
        let len = seg_len(&pdu.data)?;
        let max = self.params.target_max_recv_data_segment_length;
        if len > max {
            return Err(TaskError::SegmentTooLong { len, max });
        }
        let offset = pdu.buffer_offset;
        let end = offset
            .checked_add(len)
            .filter(|&end| end <= self.edtl)
            .ok_or(TaskError::BeyondEdtl {
                offset,
                len,
                edtl: self.edtl,
            })?;
        let unsolicited = pdu.ttt == Ttt::RESERVED;
        let in_order = self.params.data_pdu_in_order;
        let Some(index) = self.burst_index(pdu)? else {
            // Data answering an R2T that a recovery R2T superseded: late, not wrong.
            self.handle_late_data(pdu)?;
            return Ok(self.progress(ttts));
        };
        if self.recovery.enabled() {
            // Section 7.9: data for a later sequence means what an earlier one still missed
            // was lost; those sequences are over, and their holes go to recovery R2Ts.
            self.end_sequences_before(index);
        }
        let recovering = self.recovery.enabled();
        let burst = self.burst_mut(unsolicited, pdu.ttt)?;
        if recovering {
            check_pdu_recovering(burst, offset, end, in_order)?;
        } else {
            check_pdu(burst, pdu, offset, end, in_order)?;
        }
        match burst.received.insert(offset, end) {
            Insert::Overlap => return Err(TaskError::Overlap(offset)),
            Insert::Duplicate if len > 0 => {
                self.counters.duplicates += 1;
                return Ok(WriteProgress::Waiting);
            }
            Insert::Duplicate | Insert::New => {}
        }
        // Section 11.7.1: one F bit per sequence.
        if !in_order && pdu.final_bit && burst.final_seen {
            return Err(burst_error(unsolicited));
        }
        burst.pdus += 1;
        burst.max_data_sn = burst.max_data_sn.max(pdu.data_sn);
        burst.frontier = burst.frontier.max(end);
        burst.final_seen |= pdu.final_bit;
        let full = burst.received.bytes() == burst.len;
        // Section 11.7.1: F marks the last PDU of the sequence; with in-order data it must be
        // exactly the PDU that fills the burst. Under recovery a final PDU may leave holes:
        // the PDUs before it were lost (section 7.9).
        let f_mismatch = if recovering {
            full && !pdu.final_bit && in_order
        } else {
            pdu.final_bit != full
        };
        if in_order && f_mismatch {
            return Err(burst_error(unsolicited));
        }
        if !recovering && burst.is_done() && burst.pdus != burst.max_data_sn.wrapping_add(1) {
            return Err(TaskError::Inconsistent);
        }
        let burst_done = burst.is_done();
        let lost = recovering && burst.ended_with_loss();
        self.counters.data_out += 1;
        self.copy_in(offset, &pdu.data, false);
        if recovering {
            self.recovery
                .got(offset, end.min(self.collect_len.max(offset)));
        }
        if burst_done {
            self.remove_burst(unsolicited, pdu.ttt);
        } else if lost {
            self.recover_burst(unsolicited, pdu.ttt);
        }
        if recovering {
            self.settle();
        }
        Ok(self.progress(ttts))
    }

    /// Where a Data-Out belongs: `Ok(Some(index))` for an outstanding sequence (index among
    /// the R2T bursts; 0 for the unsolicited one), `Ok(None)` for one superseded by a recovery
    /// R2T.
    fn burst_index(&self, pdu: &DataOut) -> Result<Option<usize>, TaskError> {
        if pdu.ttt == Ttt::RESERVED {
            return match self.unsolicited {
                Some(_) => Ok(Some(0)),
                None if self.recovery.unsolicited_retired() => Ok(None),
                None => Err(TaskError::UnexpectedUnsolicited),
            };
        }
        let Some(index) = self.bursts.iter().position(|b| b.ttt == pdu.ttt) else {
            if self.recovery.is_retired(pdu.ttt) {
                return Ok(None);
            }
            return Err(TaskError::UnknownTtt(pdu.ttt));
        };
        // Section 11.7.4 (LUN): solicited Data-Out echoes the R2T's LUN.
        if pdu.lun != self.lun {
            return Err(TaskError::WrongTask(pdu.itt));
        }
        // Section 13.19: with DataSequenceInOrder=Yes sequences use non-decreasing offsets,
        // so a sequence starts only when every earlier one has ended.
        if self.params.data_sequence_in_order
            && !self.recovery.enabled()
            && (index > 0 || self.unsolicited.is_some())
        {
            return Err(TaskError::SequenceOrder);
        }
        Ok(Some(index + usize::from(self.unsolicited.is_some())))
    }

    fn burst_mut(&mut self, unsolicited: bool, ttt: Ttt) -> Result<&mut Burst, TaskError> {
        if unsolicited {
            return self
                .unsolicited
                .as_mut()
                .ok_or(TaskError::UnexpectedUnsolicited);
        }
        self.bursts
            .iter_mut()
            .find(|b| b.ttt == ttt)
            .ok_or(TaskError::UnknownTtt(ttt))
    }

    fn remove_burst(&mut self, unsolicited: bool, ttt: Ttt) {
        if unsolicited {
            self.unsolicited = None;
        } else {
            self.bursts.retain(|b| b.ttt != ttt);
        }
        // Under recovery a copy of its data may still come (a retried command's unsolicited
        // data, or a PDU sent twice): it is recognised, not refused.
        self.recovery.retire_if_enabled(ttt);
    }

    /// The SCSI Response for this write with `status` (and optional sense data), the residual
    /// that of section 11.4.5.1. ExpDataSN counts Data-In PDUs only and "MUST be 0 if ... the
    /// target sent no Data-In PDUs for the command" (section 11.4.8), so it is 0 here; RFC 3720
    /// (section 10.4.8) counted R2Ts too, which RFC 7143 dropped.
    pub fn response(&self, status: ScsiStatus, sense: &[u8]) -> ScsiResponse {
        scsi_response(self.itt, status, self.residual, 0, sense)
    }

    /// The residual the response reports.
    pub fn residual(&self) -> Residual {
        self.residual
    }

    /// PDU counters so far.
    pub fn counters(&self) -> TaskCounters {
        self.counters
    }

    /// The task's ITT.
    pub fn itt(&self) -> Itt {
        self.itt
    }

    /// Issues R2Ts while slots are free, or completes.
    fn progress(&mut self, ttts: &mut dyn TttAllocator) -> WriteProgress {
        if self.recovery.crc_failed() {
            // Section 7.8 b: no more data is asked for, and the answer waits until "all the
            // data (signaled by a data PDU with the Final bit set for all outstanding R2Ts)"
            // arrived.
            if self.unsolicited.is_none() && self.bursts.is_empty() {
                self.done = true;
                return WriteProgress::CrcError;
            }
            return WriteProgress::Waiting;
        }
        if self.all_data_here() {
            // Under recovery every byte may be here before every sequence ended (late data
            // for superseded ones): nothing more to ask for.
            self.bursts.clear();
            self.unsolicited = None;
            return self.complete();
        }
        let mut r2ts = Vec::new();
        let max_outstanding = usize::from(self.params.max_outstanding_r2t.max(1));
        // Recovery R2Ts first: they ask again for what was lost (section 11.8), and count
        // against MaxOutstandingR2T like any other (section 13.17).
        while self.bursts.len() < max_outstanding {
            let Some((offset, len)) = self.recovery.next_range() else {
                break;
            };
            r2ts.push(self.issue_r2t(offset, len, ttts));
            self.counters.recovery_r2t += 1;
        }
        while self.bursts.len() < max_outstanding && self.next_r2t_offset < self.collect_len {
            // Section 11.8.4: each R2T asks for at most MaxBurstLength bytes.
            let len = (self.collect_len - self.next_r2t_offset).min(self.params.max_burst_length);
            r2ts.push(self.issue_r2t(self.next_r2t_offset, len, ttts));
            self.next_r2t_offset += len;
        }
        if !r2ts.is_empty() {
            return WriteProgress::NeedR2ts(r2ts);
        }
        if self.unsolicited.is_none() && self.bursts.is_empty() && !self.recovery.pending() {
            return self.complete();
        }
        WriteProgress::Waiting
    }

    /// Every byte the SCSI layer wants arrived: the data, in offset order.
    fn complete(&mut self) -> WriteProgress {
        self.done = true;
        if !self.keep_data {
            return WriteProgress::Complete(WriteData {
                segments: Segments::new(),
                unkept: self.collect_len as usize,
            });
        }
        let segments = match self.gathered.take() {
            Some(mut buf) => {
                // Every byte up to collect_len has arrived, so this only trims.
                buf.resize(self.collect_len as usize, 0);
                smallvec![buf.freeze()]
            }
            None => std::mem::take(&mut self.segments),
        };
        WriteProgress::Complete(WriteData {
            segments,
            unkept: 0,
        })
    }

    /// Stops keeping this write's data: what arrived so far is dropped now, and every later
    /// Data-Out as soon as it is checked and counted, so the write holds no memory while it
    /// waits for the rest. Its completion then carries only the length
    /// ([`WriteData::unkept`]). The session calls it when the SCSI layer will not read the
    /// data (a WRITE to a LU that keeps nothing, such as a null LUN); sequence numbers,
    /// bursts, R2Ts and recovery are unchanged.
    pub fn discard_data(&mut self) {
        self.keep_data = false;
        self.segments = Segments::new();
        self.gathered = None;
    }

    /// An R2T for `len` bytes at `offset` (a new sequence or a recovery one), its burst now
    /// outstanding.
    fn issue_r2t(&mut self, offset: u32, len: u32, ttts: &mut dyn TttAllocator) -> R2t {
        let ttt = ttts.allocate();
        // Section 11.8.2: R2TSN numbers the R2Ts of the task from 0; a recovery R2T "carries
        // the next unused R2TSN" (section 11.8).
        let r2t_sn = self.next_r2t_sn;
        self.next_r2t_sn += 1;
        self.counters.r2t += 1;
        self.bursts.push(Burst::new(ttt, Some(r2t_sn), offset, len));
        self.r2t_of(ttt, r2t_sn, offset, len)
    }

    fn r2t_of(&self, ttt: Ttt, r2t_sn: u32, offset: u32, len: u32) -> R2t {
        R2t {
            lun: self.lun,
            itt: self.itt,
            ttt,
            stat_sn: Default::default(),
            exp_cmd_sn: Default::default(),
            max_cmd_sn: Default::default(),
            r2t_sn,
            buffer_offset: offset,
            desired_data_transfer_length: len,
        }
    }

    /// Takes the part of `data` at `offset` that the SCSI layer wants: kept as it is when it
    /// continues the in-order data (no copy), otherwise everything is gathered into one buffer
    /// from then on, zero-filling a gap that later data will cover. Pieces shorter than
    /// [`ZERO_COPY_MIN`] are copied unless `keep_small` (the write completes with this data).
    fn copy_in(&mut self, offset: u32, data: &Bytes, keep_small: bool) {
        if !self.keep_data {
            return;
        }
        let start = offset as usize;
        let end = (start + data.len()).min(self.collect_len as usize);
        if start >= end {
            return;
        }
        if self.gathered.is_none()
            && start == self.segments_len
            && self.segments.len() < MAX_SEGMENTS
        {
            let piece = data.slice(..end - start);
            self.segments
                .push(if keep_small || piece.len() >= ZERO_COPY_MIN {
                    piece
                } else {
                    Bytes::copy_from_slice(&piece)
                });
            self.segments_len = end;
            return;
        }
        let collect_len = self.collect_len as usize;
        let segments = std::mem::take(&mut self.segments);
        let buf = self.gathered.get_or_insert_with(|| {
            let mut buf = BytesMut::with_capacity(collect_len);
            for s in &segments {
                buf.extend_from_slice(s);
            }
            buf
        });
        if start > buf.len() {
            buf.resize(start, 0);
        }
        let filled = buf.len();
        let overlap_end = end.min(filled);
        if start < overlap_end {
            buf[start..overlap_end].copy_from_slice(&data[..overlap_end - start]);
        }
        if end > filled {
            buf.extend_from_slice(&data[filled - start..end - start]);
        }
    }
}

/// Checks one Data-Out against its burst, before it is recorded.
fn check_pdu(
    burst: &Burst,
    pdu: &DataOut,
    offset: u32,
    end: u32,
    in_order: bool,
) -> Result<(), TaskError> {
    let unsolicited = burst.ttt == Ttt::RESERVED;
    if offset < burst.offset || end > burst.end() || burst.is_done() {
        return Err(burst_error(unsolicited));
    }
    if in_order {
        let expected = burst.received.contiguous_end(burst.offset);
        let duplicate = end <= expected && pdu.data_sn < burst.pdus && end > offset;
        if duplicate {
            return Ok(());
        }
        // Section 13.18: DataPDUInOrder=Yes means continuously increasing offsets; section
        // 11.7.5: DataSN counts the PDUs of the sequence from 0.
        if offset != expected {
            return Err(TaskError::Sequence {
                expected,
                got: offset,
            });
        }
        if pdu.data_sn != burst.pdus {
            return Err(TaskError::Sequence {
                expected: burst.pdus,
                got: pdu.data_sn,
            });
        }
    }
    Ok(())
}

/// The checks of [`check_pdu`] under within-command recovery: DataSN and offset gaps are lost
/// PDUs (section 7.9), not errors; only data outside the burst, after its end, or overlapping
/// what arrived (within one sequence nothing is sent twice) is refused.
fn check_pdu_recovering(
    burst: &Burst,
    offset: u32,
    end: u32,
    in_order: bool,
) -> Result<(), TaskError> {
    let unsolicited = burst.ttt == Ttt::RESERVED;
    if offset < burst.offset || end > burst.end() || burst.is_done() {
        return Err(burst_error(unsolicited));
    }
    // Section 13.18: DataPDUInOrder=Yes means increasing offsets; one below the highest seen
    // can only be a duplicate (the insert tells).
    if in_order && offset < burst.frontier && end > burst.frontier {
        return Err(TaskError::Overlap(offset));
    }
    Ok(())
}

fn burst_error(unsolicited: bool) -> TaskError {
    if unsolicited {
        TaskError::IncorrectUnsolicitedAmount
    } else {
        TaskError::BurstMismatch
    }
}

fn seg_len(data: &Bytes) -> Result<u32, TaskError> {
    u32::try_from(data.len()).map_err(|_| TaskError::SegmentTooLong {
        len: u32::MAX,
        max: 0,
    })
}

#[path = "target_write_recovery.rs"]
mod recovery;

#[cfg(test)]
#[path = "target_write_tests.rs"]
mod tests;
