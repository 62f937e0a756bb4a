//! Within-command recovery of a write at the target (ErrorRecoveryLevel 1 and above, RFC 7143
//! sections 7.1.4.1, 7.8, 7.9 and 11.8): Data-Out lost to a digest error, a DataSN or offset
//! gap or a sequence reception timeout is asked for again with a recovery R2T, and R2Ts are
//! resent on an R2T SNACK (section 11.16).
//!
//! A sequence (the unsolicited burst or the answer to one R2T) that ended with holes is
//! retired: its holes become pending ranges, each asked for by a recovery R2T that "carries the
//! next unused R2TSN but requests part of or the entire data burst that an earlier R2T (with a
//! lower R2TSN) had already requested" (section 11.8). Late data for a retired sequence is
//! dropped quietly: the initiator may still be answering it when the recovery R2T leaves.

use std::collections::VecDeque;

use super::{Burst, TargetWrite, WriteProgress};
use crate::params::SessionParams;
use crate::pdu::{DataOut, R2t};
use crate::seq::Ttt;
use crate::task::coverage::Coverage;
use crate::task::{TaskError, TttAllocator};

/// The recovery state of one write.
#[derive(Debug, Default)]
pub(super) struct Recovery {
    enabled: bool,
    /// Every byte that arrived, whichever sequence carried it: data for a sequence a recovery
    /// R2T superseded still counts (the initiator was only slow), and the write completes once
    /// every byte it wants is here.
    got: Coverage,
    /// Byte ranges `(offset, len)` lost and not yet asked for again, in offset order.
    pending: VecDeque<(u32, u32)>,
    /// TTTs of sequences that are over: superseded by recovery R2Ts, or complete (a copy of
    /// their data may still come). All of them, as ranges of tag values (a session allocates
    /// tags counting up, so a write's tags mostly merge into a few ranges): the initiator
    /// answers every R2T it received (section 11.8), however long ago, and a write with many
    /// small bursts retires far more sequences than a fixed window could hold. Forgetting one
    /// turned its late data into an unknown TTT, which ended the write with CHECK CONDITION
    /// (seeds 549705, 598875, 679196, 976491).
    retired: Coverage,
    /// The unsolicited sequence was retired.
    unsolicited_retired: bool,
    /// Without recovery: data was lost to a digest error, so the write will fail (section
    /// 7.8 b) once its outstanding sequences end.
    crc_failed: bool,
}

impl Recovery {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(super) fn pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(super) fn next_range(&mut self) -> Option<(u32, u32)> {
        self.pending.pop_front()
    }

    pub(super) fn is_retired(&self, ttt: Ttt) -> bool {
        ttt != Ttt::RESERVED && self.retired.covers(ttt.0, ttt.0 + 1)
    }

    pub(super) fn unsolicited_retired(&self) -> bool {
        self.unsolicited_retired
    }

    pub(super) fn crc_failed(&self) -> bool {
        self.crc_failed
    }

    pub(super) fn retire_if_enabled(&mut self, ttt: Ttt) {
        if self.enabled {
            self.retire(ttt);
        }
    }

    fn retire(&mut self, ttt: Ttt) {
        if ttt == Ttt::RESERVED {
            self.unsolicited_retired = true;
            return;
        }
        // Never RESERVED here, so `ttt.0 + 1` does not overflow.
        self.retired.add(ttt.0, ttt.0 + 1);
    }

    fn add(&mut self, offset: u32, len: u32) {
        let at = self.pending.partition_point(|&(o, _)| o < offset);
        self.pending.insert(at, (offset, len));
    }

    /// Bytes `[start, end)` arrived.
    pub(super) fn got(&mut self, start: u32, end: u32) {
        if self.enabled {
            self.got.add(start, end);
        }
    }

    /// Whether every byte of `[start, end)` arrived.
    pub(super) fn has(&self, start: u32, end: u32) -> bool {
        self.got.covers(start, end)
    }

    /// The parts of `[start, end)` still missing.
    fn missing(&self, start: u32, end: u32) -> Vec<(u32, u32)> {
        self.got.gaps(start, end)
    }
}

impl TargetWrite {
    /// Whether a sequence is still expected: the unsolicited burst or an R2T's answer. While
    /// one is, a sequence reception timeout applies (section 7.1.4.1 b).
    pub fn awaits_data(&self) -> bool {
        !self.done && (self.unsolicited.is_some() || !self.bursts.is_empty())
    }

    /// A Data-Out whose data segment failed its digest (section 7.8): the target answered with
    /// a Reject and discards the data, but the header (verified by its own digest, or not
    /// digested at all) still tells which sequence lost which bytes and whether it ended.
    /// Under recovery the lost range is asked for again once its sequence is over; without it
    /// the write cannot complete (the caller ends it, section 7.8 b).
    pub fn handle_lost_data_out(
        &mut self,
        header: &DataOut,
        len: u32,
        ttts: &mut dyn TttAllocator,
    ) -> Result<WriteProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if header.itt != self.itt {
            return Err(TaskError::WrongTask(header.itt));
        }
        let unsolicited = header.ttt == Ttt::RESERVED;
        let Some(index) = self.burst_index(header)? else {
            return Ok(WriteProgress::Waiting);
        };
        if !self.recovery.enabled {
            // Section 7.8 b: the command will end with CHECK CONDITION once its data stops
            // coming; the sequence this PDU ended (F bit) is over.
            self.recovery.crc_failed = true;
            self.counters.lost += 1;
            if header.final_bit {
                self.remove_burst(unsolicited, header.ttt);
            }
            return Ok(self.progress(ttts));
        }
        self.end_sequences_before(index);
        let end = header.buffer_offset.saturating_add(len);
        let burst = self.burst_mut(unsolicited, header.ttt)?;
        if header.buffer_offset < burst.offset || end > burst.end() {
            return Err(super::burst_error(unsolicited));
        }
        burst.frontier = burst.frontier.max(end);
        burst.max_data_sn = burst.max_data_sn.max(header.data_sn);
        burst.final_seen |= header.final_bit;
        let ended = burst.final_seen;
        self.counters.lost += 1;
        if ended {
            self.recover_burst(unsolicited, header.ttt);
        }
        Ok(self.progress(ttts))
    }

    /// The sequence reception timeout (section 7.1.4.1 b): nothing more arrived for the
    /// outstanding sequences, so whatever they still miss was lost ("partial-data-and-no-
    /// F-bit", or an R2T or all its data lost). Every one of them is retired and its holes
    /// asked for again.
    pub fn handle_sequence_timeout(&mut self, ttts: &mut dyn TttAllocator) -> WriteProgress {
        if !self.recovery.enabled || self.done {
            return WriteProgress::Waiting;
        }
        if self.unsolicited.is_some() {
            self.recover_burst(true, Ttt::RESERVED);
        }
        let ttts_out: Vec<Ttt> = self.bursts.iter().map(|b| b.ttt).collect();
        for ttt in ttts_out {
            self.recover_burst(false, ttt);
        }
        self.progress(ttts)
    }

    /// TASK REASSIGN moved the write to a connection with `params` (ErrorRecoveryLevel 2,
    /// section 7.2.2: "the target SHOULD continue the command from its current state"): the
    /// R2Ts and unsolicited data outstanding on the failed connection are given up, and what
    /// they still miss is asked for with new R2Ts on the new one (its segment length bounds
    /// the Data-Out from now on).
    pub fn reassign(
        &mut self,
        params: &SessionParams,
        ttts: &mut dyn TttAllocator,
    ) -> WriteProgress {
        self.params = SessionParams {
            target_max_recv_data_segment_length: params.target_max_recv_data_segment_length,
            initiator_max_recv_data_segment_length: params.initiator_max_recv_data_segment_length,
            header_digest: params.header_digest,
            data_digest: params.data_digest,
            ..self.params
        };
        if self.done {
            return WriteProgress::Waiting;
        }
        if self.unsolicited.is_some() {
            self.recover_burst(true, Ttt::RESERVED);
        }
        let outstanding: Vec<Ttt> = self.bursts.iter().map(|b| b.ttt).collect();
        for ttt in outstanding {
            self.recover_burst(false, ttt);
        }
        self.progress(ttts)
    }

    /// The R2Ts an R2T SNACK asks for (section 11.16): R2TSN `beg_run` and the `run_length`
    /// after it (0: all from `beg_run`; both 0: every outstanding one), as exact replicas.
    /// `None` when one of them was never sent or is no longer outstanding (its data arrived,
    /// or a recovery R2T replaced it): the SNACK is then rejected.
    pub fn r2t_replicas(&self, beg_run: u32, run_length: u32) -> Option<Vec<R2t>> {
        let all = beg_run == 0 && run_length == 0;
        let end = if run_length == 0 {
            self.next_r2t_sn
        } else {
            beg_run.checked_add(run_length)?
        };
        if !all && (beg_run >= end || end > self.next_r2t_sn) {
            return None;
        }
        let mut out = Vec::new();
        if all {
            for b in &self.bursts {
                if let Some(sn) = b.r2t_sn {
                    out.push(self.r2t_of(b.ttt, sn, b.offset, b.len));
                }
            }
            return Some(out);
        }
        for sn in beg_run..end {
            let b = self.bursts.iter().find(|b| b.r2t_sn == Some(sn))?;
            out.push(self.r2t_of(b.ttt, sn, b.offset, b.len));
        }
        Some(out)
    }

    /// Data arrived for sequence `index` (0 is the unsolicited one when outstanding): the
    /// sequences before it are over, since an initiator answers R2Ts in the order it received
    /// them and sends unsolicited data first (section 11.8). What they miss was lost.
    pub(super) fn end_sequences_before(&mut self, index: usize) {
        if index == 0 {
            return;
        }
        let mut remaining = index;
        if self.unsolicited.is_some() {
            self.recover_burst(true, Ttt::RESERVED);
            remaining -= 1;
        }
        let earlier: Vec<Ttt> = self.bursts.iter().take(remaining).map(|b| b.ttt).collect();
        for ttt in earlier {
            self.recover_burst(false, ttt);
        }
    }

    /// Retires a sequence that is over with holes: they are asked for again. One without
    /// holes (all its data arrived) simply ends.
    pub(super) fn recover_burst(&mut self, unsolicited: bool, ttt: Ttt) {
        let burst: Option<Burst> = if unsolicited {
            self.unsolicited.take()
        } else {
            let at = self.bursts.iter().position(|b| b.ttt == ttt);
            at.map(|i| self.bursts.remove(i))
        };
        let Some(burst) = burst else {
            return;
        };
        // Only what the SCSI layer consumes is asked for again (unsolicited data may run past
        // it when the CDB wanted less than the EDTL).
        let end = burst.end().min(self.collect_len);
        for (start, stop) in self.recovery.missing(burst.offset, end.max(burst.offset)) {
            self.recovery.add(start, stop - start);
        }
        self.recovery.retire(burst.ttt);
    }

    /// Data for a sequence a recovery R2T superseded (the initiator was slower than the
    /// sequence reception timeout): whatever it brings that is still missing is taken, and
    /// what it makes unnecessary is no longer waited for.
    pub(super) fn handle_late_data(&mut self, pdu: &DataOut) -> Result<(), TaskError> {
        let len = u32::try_from(pdu.data.len()).unwrap_or(u32::MAX);
        let offset = pdu.buffer_offset;
        let end =
            offset
                .checked_add(len)
                .filter(|&e| e <= self.edtl)
                .ok_or(TaskError::BeyondEdtl {
                    offset,
                    len,
                    edtl: self.edtl,
                })?;
        let end = end.min(self.collect_len.max(offset));
        if self.recovery.has(offset, end) {
            self.counters.duplicates += 1;
            return Ok(());
        }
        self.counters.data_out += 1;
        self.recovery.got(offset, end);
        self.copy_in(offset, &pdu.data, false);
        self.settle();
        Ok(())
    }

    /// Sequences and pending recovery ranges whose bytes all arrived by other means are over.
    pub(super) fn settle(&mut self) {
        let done: Vec<Ttt> = self
            .bursts
            .iter()
            .filter(|b| self.recovery.has(b.offset, b.end().min(self.collect_len)))
            .map(|b| b.ttt)
            .collect();
        for ttt in done {
            self.bursts.retain(|b| b.ttt != ttt);
            self.recovery.retire(ttt);
        }
        if self
            .unsolicited
            .as_ref()
            .is_some_and(|b| self.recovery.has(b.offset, b.end().min(self.collect_len)))
        {
            self.unsolicited = None;
            self.recovery.retire(Ttt::RESERVED);
        }
        let got = &self.recovery.got;
        let pending: VecDeque<(u32, u32)> = self
            .recovery
            .pending
            .iter()
            .copied()
            .filter(|&(o, l)| !got.covers(o, o + l))
            .collect();
        self.recovery.pending = pending;
    }

    /// Under recovery, whether every byte the SCSI layer wants arrived.
    pub(super) fn all_data_here(&self) -> bool {
        self.recovery.enabled && self.recovery.has(0, self.collect_len)
    }
}

#[cfg(test)]
#[path = "target_write_recovery_tests.rs"]
mod tests;
