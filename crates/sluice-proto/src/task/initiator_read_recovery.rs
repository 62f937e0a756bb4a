//! Within-command recovery of a read at the initiator (ErrorRecoveryLevel 1 and above, RFC
//! 7143 sections 7.8, 7.9, 11.7.2 and 11.16): Data-In lost to a digest error or missing from
//! the DataSN sequence is asked for with a Data SNACK, DataACK answers the A bit once no hole
//! is left, a status that arrives before all the data waits for it, and a read that stays
//! stuck discards what was not acknowledged and asks for it again with an R-Data SNACK.
//!
//! The bookkeeping follows the missing-list algorithm of Hussain's iSCSI simulation study
//! (its Figure 4.5): `exp` is the first DataSN not received, `max` the highest seen, and the
//! holes between them are what the SNACKs ask for.

use smallvec::SmallVec;

use super::{InitiatorRead, ReadProgress, TaskStatus};
use crate::pdu::DataIn;
use crate::seq::{Lun, Ttt};
use crate::task::coverage::{Coverage, Insert};
use crate::task::{Residual, TaskError};

/// Most holes one stall asks for with Data SNACKs (the rest wait for the next stall).
const MAX_HOLES_ASKED: usize = 32;

/// Stalls in a row without a missing Data-In getting through (counting the first, which has
/// nothing to compare with) before the read falls back to an R-Data SNACK.
const RDATA_AFTER_FRUITLESS: u32 = 3;

/// Something the read asks the target for; the session turns it into a SNACK Request.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ReadAsk {
    /// Data SNACK (type 0) for DataSN `beg_run` and the `run_length` after it (0: all from
    /// `beg_run` on).
    Data {
        /// First DataSN.
        beg_run: u32,
        /// How many (0: all from `beg_run`).
        run_length: u32,
    },
    /// DataACK (type 2): every Data-In before `beg_run` arrived; copies the A-bit PDU's TTT
    /// and LUN (section 11.7.4).
    DataAck {
        /// TTT of the A-bit Data-In.
        ttt: Ttt,
        /// LUN of the A-bit Data-In.
        lun: Lun,
        /// The next expected DataSN.
        beg_run: u32,
    },
    /// R-Data SNACK (type 3) with this SNACK Tag.
    RData {
        /// The tag; the final SCSI Response must carry it.
        tag: u32,
    },
}

/// The recovery state of one read.
#[derive(Debug, Default)]
pub(super) struct ReadRecovery {
    /// DataSNs received, as unit ranges (everything below `acked` counts as received).
    sns: Coverage,
    /// One past the highest DataSN seen, received or lost to a data digest error.
    seen_end: u32,
    /// DataSNs below this were asked for already (or seen).
    asked_end: u32,
    /// First DataSN not covered by a DataACK we sent (the "data acknowledgment reference
    /// number" of section 11.5.6), and the bytes before it.
    acked: u32,
    acked_offset: u32,
    /// An A bit arrived while holes remained: its DataACK waits (section 11.16.2).
    pending_ack: Option<(Ttt, Lun)>,
    /// A status that arrived before all its data: the Data-In count it reports, the status.
    pending_status: Option<(u32, TaskStatus)>,
    /// SNACK Tag of our last R-Data SNACK (0: none sent).
    snack_tag: u32,
    /// The previous stall already asked with a Data SNACK.
    stalled: bool,
    /// DataSNs missing at the previous stall, and stalls in a row that did not reduce them.
    missing_at_stall: Option<u32>,
    fruitless_stalls: u32,
    asks: SmallVec<[ReadAsk; 2]>,
}

impl ReadRecovery {
    /// Whether the Data-In with `data_sn` may be received in place: it is exactly the next one
    /// and nothing is missing before it.
    pub(super) fn places(&self, data_sn: u32, pdus: u32) -> bool {
        self.snack_tag == 0
            && self.pending_status.is_none()
            && data_sn == self.seen_end
            && self.sns.contiguous_end(0) == self.seen_end
            && data_sn == pdus
    }

    fn has_holes(&self) -> bool {
        self.sns.contiguous_end(0) < self.seen_end
    }

    /// Asks for the DataSNs from what was asked so far up to `end` (exclusive).
    fn ask_up_to(&mut self, end: u32) {
        let from = self.seen_end.max(self.asked_end);
        if end > from {
            self.asks.push(ReadAsk::Data {
                beg_run: from,
                run_length: end - from,
            });
        }
        self.asked_end = self.asked_end.max(end);
    }
}

impl InitiatorRead {
    /// Creates the recovery state of an in-order read that had none yet (under
    /// ErrorRecoveryLevel 1 and above; nothing below it or when it exists). Until now every
    /// Data-In arrived in order, DataSN 0 to `pdus` - 1 (the plain path refuses anything
    /// else), with no A bit and no loss: exactly the state the recovery bookkeeping would hold
    /// had it followed the read from its first PDU.
    pub(super) fn wake_recovery(&mut self) {
        if !self.recoverable || self.recovery.is_some() {
            return;
        }
        let mut r = Box::<ReadRecovery>::default();
        r.sns.insert(0, self.pdus);
        r.seen_end = self.pdus;
        r.asked_end = self.pdus;
        self.recovery = Some(r);
    }

    /// What the read asks the target for since the last call (SNACKs to send).
    pub fn take_asks(&mut self) -> SmallVec<[ReadAsk; 2]> {
        self.recovery
            .as_mut()
            .map(|r| std::mem::take(&mut r.asks))
            .unwrap_or_default()
    }

    /// Whether the status arrived before all the Data-In it counts (its acknowledgement must
    /// wait, section 7.9).
    pub fn status_waits_for_data(&self) -> bool {
        self.recovery
            .as_ref()
            .is_some_and(|r| r.pending_status.is_some())
    }

    /// The data acknowledgement reference number: the first DataSN not acknowledged by a
    /// DataACK (the ExpDataSN of a TASK REASSIGN, section 11.5.6).
    pub fn acknowledged_data_sn(&self) -> u32 {
        self.recovery.as_ref().map_or(0, |r| r.acked)
    }

    /// A Data-In whose data segment failed its digest (section 7.8): its DataSN is missing,
    /// and asked for at once. Whatever status it carried is lost with it ("the entire PDU,
    /// including the header, MUST be discarded").
    pub fn handle_lost_data_in(&mut self, header: &DataIn) {
        if self.done || header.itt != self.itt {
            return;
        }
        self.wake_recovery();
        let Some(r) = self.recovery.as_mut() else {
            return;
        };
        self.counters.lost += 1;
        let sn = header.data_sn;
        if has_unit(&r.sns, sn) {
            // Already have it (a copy arrived): nothing lost.
            return;
        }
        r.ask_up_to(sn.saturating_add(1));
        r.seen_end = r.seen_end.max(sn.saturating_add(1));
    }

    /// No progress for a while (the session's retry timer): ask again for what is missing.
    /// The first stall sends a Data SNACK for everything from the first hole on; a second one
    /// in a row gives up on the unacknowledged data: it is discarded and asked for with an
    /// R-Data SNACK (section 11.16.3), whose answer may be cut anew. Nothing is asked when
    /// nothing is known to be missing (a lost status shows as a StatSN gap instead).
    pub fn handle_stall(&mut self, next_tag: u32) {
        self.stall_asks(next_tag);
    }

    /// Stalls in a row in which no missing Data-In arrived (0 for a read without recovery):
    /// the session gives the read up past a bound (RFC 7143 section 7.1.4.1 leaves the number
    /// of retries to the initiator).
    pub fn fruitless_stalls(&self) -> u32 {
        self.recovery.as_ref().map_or(0, |r| r.fruitless_stalls)
    }

    fn stall_asks(&mut self, next_tag: u32) {
        // A read without recovery state (see `wake_recovery`) has nothing missing and no
        // R-Data SNACK out: nothing to ask.
        let Some(r) = self.recovery.as_ref() else {
            return;
        };
        let missing_tail = r
            .pending_status
            .as_ref()
            .is_some_and(|(count, _)| r.sns.contiguous_end(0) < *count);
        let missing = r.has_holes() || missing_tail;
        if self.done || !(missing || r.snack_tag != 0) {
            return;
        }
        let end = r
            .pending_status
            .as_ref()
            .map_or(r.seen_end, |(count, _)| (*count).max(r.seen_end));
        let holes = r.sns.gaps(0, end);
        let missing_now: u32 = holes.iter().map(|(beg, stop)| stop - beg).sum();
        // Data SNACKs that keep filling holes go on; an R-Data SNACK would discard what
        // arrived past the first hole and start over, which under steady loss never ends.
        let progressed = missing && r.missing_at_stall.is_some_and(|m| missing_now < m);
        let stalled = r.stalled;
        if let Some(r) = self.recovery.as_mut() {
            r.fruitless_stalls = if progressed {
                0
            } else {
                r.fruitless_stalls + 1
            };
            r.missing_at_stall = Some(missing_now);
        }
        // A Data SNACK whose answer was lost too (one fruitless round) is tried once more
        // before giving up on them: one lost retransmission is likelier than a target that
        // cannot resend, and a fixed pattern of losses can hit the last lone retransmission
        // of every round while the next one gets through.
        let fruitless = self.recovery.as_ref().map_or(0, |r| r.fruitless_stalls);
        if missing && (!stalled || progressed || fruitless < RDATA_AFTER_FRUITLESS) {
            // Each hole asked for again (its SNACK, or what it asked for, may have been lost
            // too), up to a bound; a status that arrived says where the tail ends.
            if let Some(r) = self.recovery.as_mut() {
                for (beg, stop) in holes.into_iter().take(MAX_HOLES_ASKED) {
                    r.asks.push(ReadAsk::Data {
                        beg_run: beg,
                        run_length: stop - beg,
                    });
                }
                r.stalled = true;
            }
            return;
        }
        // Still missing after a Data SNACK, or an earlier R-Data SNACK (or its answer) was
        // lost: everything unacknowledged is asked for again, under a new tag.
        self.restart_from_ack();
        if let Some(r) = self.recovery.as_mut() {
            r.snack_tag = next_tag.max(1);
            r.asks.push(ReadAsk::RData { tag: r.snack_tag });
            r.stalled = false;
        }
    }

    /// TASK REASSIGN (section 11.5.6): the Data-In received without a gap count as
    /// acknowledged by the ExpDataSN the reassignment carries (when data arrives in order,
    /// so that they are the bytes from offset 0); everything after them is forgotten and sent
    /// again by the target. Returns that ExpDataSN. A SNACK Tag of the old connection no
    /// longer applies (section 7.2.2).
    pub fn reassign(&mut self) -> u32 {
        self.wake_recovery();
        let in_order = self.in_order;
        let contiguous_bytes = self.received.contiguous_end(0);
        if let Some(r) = self.recovery.as_mut() {
            let contiguous = r.sns.contiguous_end(0);
            if in_order && contiguous > r.acked {
                r.acked = contiguous;
                r.acked_offset = contiguous_bytes;
            }
            r.snack_tag = 0;
            r.stalled = false;
        }
        self.restart_from_ack()
    }

    /// Forgets every Data-In after the last DataACK, as an R-Data SNACK or a TASK REASSIGN
    /// requires ("The initiator MUST discard any data PDUs from the previous execution that
    /// it did not acknowledge", section 11.5.6); returns the DataSN the target resumes from.
    pub fn restart_from_ack(&mut self) -> u32 {
        self.wake_recovery();
        self.gather();
        let Some(r) = self.recovery.as_mut() else {
            return 0;
        };
        let (acked, acked_offset) = (r.acked, r.acked_offset);
        r.sns = Coverage::default();
        r.sns.insert(0, acked);
        r.seen_end = acked;
        r.asked_end = acked;
        r.pending_status = None;
        r.pending_ack = None;
        self.received = Coverage::default();
        self.received.insert(0, acked_offset);
        self.pdus = acked;
        self.max_data_sn = acked.checked_sub(1);
        acked
    }

    /// `handle_data_in` under recovery: any DataSN order, duplicates dropped, gaps asked for.
    pub(super) fn handle_data_in_recovering(
        &mut self,
        pdu: &DataIn,
    ) -> Result<ReadProgress, TaskError> {
        if self.done {
            return Err(TaskError::AfterCompletion);
        }
        if pdu.itt != self.itt {
            return Err(TaskError::WrongTask(pdu.itt));
        }
        let len = u32::try_from(pdu.data.len()).unwrap_or(u32::MAX);
        let offset = pdu.buffer_offset;
        let edtl = self.edtl;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= edtl)
            .ok_or(TaskError::BeyondEdtl { offset, len, edtl })?;
        let duplicate = self.recovery.as_ref().is_some_and(|r| {
            r.sns.contiguous_end(0) > pdu.data_sn || has_unit(&r.sns, pdu.data_sn)
        });
        if duplicate {
            // Section 7.9: "duplicate DataSNs (due to proactive SNACKs by the initiator), it
            // MUST discard the duplicates."
            self.counters.duplicates += 1;
            return Ok(ReadProgress::Waiting);
        }
        let in_sequence = self.in_order
            && offset == self.received.contiguous_end(0)
            && self.received.bytes() == offset
            && self.recovery.as_ref().is_some_and(|r| {
                pdu.data_sn == r.seen_end && r.sns.contiguous_end(0) == r.seen_end
            });
        match self.received.insert(offset, end) {
            Insert::Overlap => return Err(TaskError::Overlap(offset)),
            Insert::Duplicate if len > 0 => {
                self.counters.duplicates += 1;
                return Ok(ReadProgress::Waiting);
            }
            Insert::Duplicate | Insert::New => {}
        }
        if in_sequence {
            if offset == 0 && self.first.is_none() && self.buffer.is_empty() {
                self.first = Some(pdu.data.clone());
            } else {
                self.unfreeze_first();
                self.buffer.extend_from_slice(&pdu.data);
            }
        } else {
            self.gather();
            self.buffer[offset as usize..end as usize].copy_from_slice(&pdu.data);
        }
        self.account(pdu)
    }

    /// `account` under recovery: the DataSN bookkeeping, the A bit, and the status.
    pub(super) fn account_recovering(&mut self, pdu: &DataIn) -> Result<ReadProgress, TaskError> {
        let contiguous = self.received.contiguous_end(0);
        let Some(r) = self.recovery.as_mut() else {
            return Ok(ReadProgress::Waiting);
        };
        let sn = pdu.data_sn;
        r.ask_up_to(sn);
        r.sns.insert(sn, sn.saturating_add(1));
        r.seen_end = r.seen_end.max(sn.saturating_add(1));
        r.asked_end = r.asked_end.max(r.seen_end);
        r.stalled = false;
        if pdu.ack {
            // Section 11.7.2: answer the A bit with a DataACK, postponed while holes remain.
            r.pending_ack = Some((pdu.ttt, pdu.lun));
        }
        if !r.has_holes() {
            if let Some((ttt, lun)) = r.pending_ack.take() {
                let next = r.sns.contiguous_end(0);
                r.asks.push(ReadAsk::DataAck {
                    ttt,
                    lun,
                    beg_run: next,
                });
                r.acked = next;
                r.acked_offset = contiguous;
            }
        }
        if pdu.status_present {
            // Section 11.7.3: S=1 only with F=1; status GOOD-class only.
            let residual = Residual::from_flags(pdu.overflow, pdu.underflow, pdu.residual)
                .filter(|_| pdu.final_bit)
                .ok_or(TaskError::Inconsistent)?;
            let status = TaskStatus {
                status: pdu.status,
                residual,
                sense: bytes::Bytes::new(),
            };
            return self.status_recovering(sn.saturating_add(1), status, None);
        }
        self.try_finish()
    }

    /// A status under recovery: `data_in_count` Data-In PDUs were sent for the command. It
    /// waits until all of them arrived; the ones never seen are asked for. After an R-Data
    /// SNACK only a SCSI Response carrying its tag counts (section 11.4.4).
    pub(super) fn status_recovering(
        &mut self,
        data_in_count: u32,
        status: TaskStatus,
        snack_tag: Option<u32>,
    ) -> Result<ReadProgress, TaskError> {
        let Some(r) = self.recovery.as_mut() else {
            return Ok(ReadProgress::Waiting);
        };
        if r.snack_tag != 0 && snack_tag != Some(r.snack_tag) {
            return Ok(ReadProgress::Waiting);
        }
        r.ask_up_to(data_in_count);
        r.pending_status = Some((data_in_count, status));
        self.try_finish()
    }

    /// Completes the read once its status and every Data-In it counts are in.
    fn try_finish(&mut self) -> Result<ReadProgress, TaskError> {
        let Some(r) = self.recovery.as_mut() else {
            return Ok(ReadProgress::Waiting);
        };
        let Some((count, _)) = r.pending_status.as_ref() else {
            return Ok(ReadProgress::Waiting);
        };
        let count = *count;
        if r.sns.contiguous_end(0) < count {
            return Ok(ReadProgress::Waiting);
        }
        let Some((_, status)) = r.pending_status.take() else {
            return Ok(ReadProgress::Waiting);
        };
        // Every DataSN before `count` arrived; the checks of `finish` on bytes still apply.
        self.pdus = count;
        self.max_data_sn = count.checked_sub(1);
        self.finish(count, status)
    }

    /// Switches to one zeroed buffer of the whole EDTL (data arriving out of order).
    fn gather(&mut self) {
        if !self.in_order {
            return;
        }
        self.unfreeze_first();
        let mut buffer = bytes::BytesMut::zeroed(self.edtl as usize);
        let have = self.buffer.len().min(buffer.len());
        buffer[..have].copy_from_slice(&self.buffer[..have]);
        self.buffer = buffer;
        self.in_order = false;
    }
}

/// Whether `sn` is covered.
fn has_unit(c: &Coverage, sn: u32) -> bool {
    c.covers(sn, sn.saturating_add(1))
}

#[cfg(test)]
#[path = "initiator_read_recovery_tests.rs"]
mod tests;
