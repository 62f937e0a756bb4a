//! Within-connection and within-command recovery in a target session (ErrorRecoveryLevel 1
//! and above, RFC 7143 sections 7.1.4.1, 7.1.4.2, 7.8, 7.9 and 11.16): SNACKs of every type,
//! DataACK, status retention until acknowledged, Data-Out lost to a data digest error, and the
//! sequence reception timeout of writes.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use smallvec::SmallVec;

use super::connection::{stat_sn_of, ConnState};
use super::scsi::TaskState;
use super::{ConnId, TargetSession};
use crate::pdu::codes::{RejectReason, SnackType};
use crate::pdu::{DataOut, Pdu, SnackRequest, BHS_LEN};
use crate::seq::{Itt, SeqNum, Ttt};
use crate::task::TttAllocator;

/// The hard bound of kept statuses, as a multiple of the soft one.
const HARD_BOUND_FACTOR: usize = 4;

/// Most doublings of the sequence reception timeout for one write (64 times the setting).
const MAX_BACKOFF_DOUBLINGS: u8 = 6;

/// Recovery settings of a session (used when ErrorRecoveryLevel 1 or 2 was negotiated).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct RecoveryConfig {
    /// Ask for a DataACK (the A bit, RFC 7143 section 11.7.2) every this many Data-In PDUs,
    /// and never more often than once per MaxBurstLength bytes; `None` never asks (the
    /// status acknowledgement then releases a read's data).
    pub data_ack_every: Option<u32>,
    /// How long a write waits for an expected Data-Out before asking again with a recovery
    /// R2T (the sequence reception timeout of section 7.1.4.1).
    pub sequence_timeout: Duration,
    /// Status PDUs kept per connection for Status SNACK (section 11.16) until the initiator
    /// acknowledges them (raised to 2 x queue depth + 64 if lower). At this many the command
    /// window stops opening until the initiator acknowledges; an initiator that goes on
    /// without acknowledging (ImmediateData pings, say) meets a hard bound of 4 times it,
    /// past which the oldest is forgotten with the answered task it belongs to (a SNACK for
    /// it is then rejected). Bounds the memory an initiator can make the target hold.
    pub max_retained_statuses: usize,
    /// Bytes of answered reads' data a connection keeps for Data and R-Data SNACK until their
    /// statuses are acknowledged: at this many the command window stops opening until the
    /// initiator acknowledges, as at `max_retained_statuses`. What a live connection keeps
    /// then stays below this plus the data of the reads already in the window (which a
    /// target at ErrorRecoveryLevel 0 holds too, while sending it). A failed connection's
    /// tasks (ErrorRecoveryLevel 2) keep theirs until reassigned or until Time2Wait +
    /// Time2Retain ends them; the initiator cannot acknowledge them meanwhile, so they do not
    /// hold the window shut.
    pub max_retained_bytes: usize,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            data_ack_every: None,
            sequence_timeout: Duration::from_secs(1),
            max_retained_statuses: 1024,
            max_retained_bytes: 256 << 20,
        }
    }
}

/// A read's data kept for resending, counted in its connection's total for as long as it is
/// kept: the count falls when the charge is dropped, whichever way its task leaves
/// (acknowledged, aborted, its connection or session ended), so that it cannot drift.
#[derive(Debug)]
pub(super) struct RetentionCharge {
    bytes: usize,
    total: Arc<AtomicUsize>,
}

impl RetentionCharge {
    pub(super) fn new(bytes: usize, total: &Arc<AtomicUsize>) -> Self {
        total.fetch_add(bytes, Ordering::Relaxed);
        Self {
            bytes,
            total: Arc::clone(total),
        }
    }
}

impl Drop for RetentionCharge {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl TargetSession {
    /// Starts, moves or stops the sequence reception timer of write `itt`: running while the
    /// write expects Data-Out, from the last time it got some (or sent an R2T).
    pub(super) fn rearm_sequence_timer(&mut self, itt: Itt) {
        if self.params.error_recovery_level == 0 {
            return;
        }
        let base = self.config.recovery.sequence_timeout;
        let now = self.now;
        if let Some(task) = self.tasks.get_mut(&itt) {
            let deadline = now + base * (1u32 << task.timeouts.min(MAX_BACKOFF_DOUBLINGS));
            task.deadline = match &task.state {
                TaskState::Collecting { write, .. } if write.awaits_data() => Some(deadline),
                _ => None,
            };
            if let Some(d) = task.deadline {
                self.sequence_wakeup = Some(self.sequence_wakeup.map_or(d, |w| w.min(d)));
            }
        }
    }

    /// No sequence reception timeout comes before this (it may be early: a timer stopped
    /// since leaves it, and the next look corrects it).
    pub(super) fn sequence_deadline(&self) -> Option<Instant> {
        if self.params.error_recovery_level == 0 {
            return None;
        }
        self.sequence_wakeup
    }

    /// Writes whose expected Data-Out did not come in time ask for it again (section 7.1.4.1
    /// b: "considered an implicit sequence error and dealt with as specified in Section 7.9,
    /// using the option of a recovery R2T").
    pub(super) fn handle_sequence_timeouts(&mut self, now: Instant) {
        if self.sequence_wakeup.is_none_or(|w| now < w) {
            return;
        }
        let due: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.deadline.is_some_and(|d| now >= d))
            .map(|(itt, _)| *itt)
            .collect();
        for itt in due {
            let Some(task) = self.tasks.get_mut(&itt) else {
                continue;
            };
            task.deadline = None;
            task.timeouts = task.timeouts.saturating_add(1);
            self.stats.sequence_timeouts += 1;
            let TaskState::Collecting { write, .. } = &mut task.state else {
                continue;
            };
            let progress = write.handle_sequence_timeout(&mut self.ttts);
            self.write_progress(itt, progress);
        }
        self.sequence_wakeup = self.tasks.values().filter_map(|t| t.deadline).min();
    }

    /// A PDU whose data segment failed its digest (section 7.8): "When a target receives any
    /// iSCSI PDU with a payload digest error, it MUST answer with a Reject PDU with a reason
    /// code of Data-Digest-Error and discard the PDU." Lost Data-Out is asked for again with a
    /// recovery R2T once its sequence is over; a discarded command leaves a CmdSN gap that the
    /// initiator plugs by retrying it (section 7.3), and the unsolicited data that followed it
    /// is dropped quietly meanwhile.
    pub(super) fn handle_data_digest_error(&mut self, conn: ConnId, header: &[u8; BHS_LEN]) {
        self.send_reject(
            conn,
            RejectReason::DataDigestError,
            Bytes::copy_from_slice(header),
        );
        let len = crate::pdu::Bhs::from_array(header).data_segment_len();
        match Pdu::parse_header_only(header) {
            // Without recovery the write ends with CHECK CONDITION once its data stops
            // coming (section 7.8 b); with it, the data is asked for again.
            Ok(Pdu::DataOut(d)) => self.handle_lost_data_out(conn, &d, len),
            Ok(Pdu::ScsiCommand(c)) => self.remember_aborted(c.itt),
            _ => {}
        }
    }

    fn handle_lost_data_out(&mut self, conn: ConnId, header: &DataOut, len: u32) {
        let itt = header.itt;
        let Some(task) = self.tasks.get_mut(&itt).filter(|t| t.conn == conn) else {
            return;
        };
        let TaskState::Collecting { write, .. } = &mut task.state else {
            return;
        };
        // A header that does not fit the write is ignored: its data would have been refused
        // anyway. The write goes on; its sequence timer still asks for what is missing.
        if let Ok(progress) = write.handle_lost_data_out(header, len, &mut self.ttts) {
            self.stats.lost_data_out += 1;
            self.write_progress(itt, progress);
        }
    }

    /// A SNACK Request (section 11.16). "If the implementation supports ErrorRecoveryLevel
    /// greater than zero, it MUST support all SNACK types."
    pub(super) fn handle_snack(&mut self, conn: ConnId, snack: SnackRequest) {
        if self.params.error_recovery_level == 0 {
            // ErrorRecoveryLevel 0: SNACK support is not required (section 11.16).
            self.reject_pdu(
                conn,
                RejectReason::CommandNotSupported,
                &Pdu::SnackRequest(snack),
            );
            return;
        }
        let ok = match snack.snack_type {
            SnackType::DataR2t => self.snack_data_or_r2t(conn, &snack),
            SnackType::Status => self.snack_status(conn, &snack),
            SnackType::DataAck => {
                self.data_ack(conn, &snack);
                true
            }
            SnackType::RData => self.snack_rdata(conn, &snack),
            SnackType::Unknown(_) => {
                self.reject_pdu(
                    conn,
                    RejectReason::InvalidPduField,
                    &Pdu::SnackRequest(snack),
                );
                return;
            }
        };
        if !ok {
            // "Any SNACK that requests a numbered response, data, or R2T that was not sent by
            // the target or was already acknowledged by the initiator MUST be rejected with a
            // reason code of 'Protocol Error'."
            self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::SnackRequest(snack));
        }
    }

    /// Data/R2T SNACK: Data-In of a read, or R2Ts of a write, sent again as exact replicas.
    fn snack_data_or_r2t(&mut self, conn: ConnId, snack: &SnackRequest) -> bool {
        let (beg, run) = (snack.beg_run, snack.run_length);
        let Some(task) = self.tasks.get(&snack.itt).filter(|t| t.conn == conn) else {
            return false;
        };
        match &task.state {
            TaskState::Collecting { write, .. } => match write.r2t_replicas(beg, run) {
                Some(r2ts) => {
                    for r2t in r2ts {
                        self.resend_to(conn, Pdu::R2t(r2t));
                    }
                    true
                }
                None => false,
            },
            // Nothing sent yet (the SCSI layer still runs it): "all unacknowledged" is none.
            TaskState::Running { .. } => beg == 0 && run == 0,
            TaskState::Answered(a) => {
                let Some(seq) = a.data_in.as_ref() else {
                    return beg == 0 && run == 0;
                };
                let sent = a.data_in_sent;
                let (from, to) = if beg == 0 && run == 0 {
                    (a.acked_data_sn, sent)
                } else if run == 0 {
                    (beg, sent)
                } else {
                    (beg, beg.saturating_add(run))
                };
                // Section 11.16.2: data acknowledged by a DataACK is not sent again.
                if from < a.acked_data_sn || to > sent || from > to {
                    return false;
                }
                let replicas: Vec<Pdu> = seq.replay(from, to).map(Pdu::DataIn).collect();
                let itt = snack.itt;
                for pdu in replicas {
                    match pdu {
                        // The PDU that carried the status goes as it was stamped: same StatSN
                        // (section 11.4.9: no new StatSN for a retransmission).
                        Pdu::DataIn(d) if d.status_present => {
                            let kept = self.retained_status_of(conn, itt);
                            self.resend_to(conn, kept.unwrap_or(Pdu::DataIn(d)));
                        }
                        other => self.resend_to(conn, other),
                    }
                }
                true
            }
        }
    }

    /// Status SNACK: numbered responses sent again with their StatSNs.
    fn snack_status(&mut self, conn: ConnId, snack: &SnackRequest) -> bool {
        let Some(c) = self.find(conn) else {
            return false;
        };
        let (acked, next) = (c.exp_stat_sn, c.next_stat_sn());
        let (beg, run) = (snack.beg_run, snack.run_length);
        let from = if beg == 0 && run == 0 {
            acked
        } else {
            SeqNum(beg)
        };
        let count = if run == 0 {
            next.distance_from(from)
        } else {
            run
        };
        // Sent (below the next StatSN) and not acknowledged (at or past ExpStatSN).
        let sent = from.distance_from(acked) < 0x8000_0000
            && count <= next.distance_from(from)
            && next.distance_from(from) < 0x8000_0000;
        if !sent {
            return false;
        }
        let wanted: Vec<Pdu> = c
            .retained
            .iter()
            .filter(|p| stat_sn_of(p).is_some_and(|sn| sn.distance_from(from) < count))
            .cloned()
            .collect();
        if (wanted.len() as u32) < count {
            // Forgotten past the retention bound: cannot be sent again.
            return false;
        }
        for pdu in wanted {
            self.resend_to(conn, pdu);
        }
        true
    }

    /// DataACK: the initiator has every Data-In before BegRun (section 11.16.1); they are no
    /// longer sent again. Not a request, so never rejected: a stale or unknown one is ignored.
    fn data_ack(&mut self, conn: ConnId, snack: &SnackRequest) {
        let Some(task) = self.tasks.values_mut().find(|t| {
            t.conn == conn
                && matches!(&t.state, TaskState::Answered(a)
                    if a.data_in.as_ref().and_then(|s| s.ack_ttt()) == Some(snack.ttt))
        }) else {
            return;
        };
        if let TaskState::Answered(a) = &mut task.state {
            if snack.beg_run > a.acked_data_sn && snack.beg_run <= a.data_in_sent {
                a.acked_data_sn = snack.beg_run;
            }
        }
    }

    /// R-Data SNACK (section 11.16.3): the initiator discarded every unacknowledged Data-In
    /// of a read; they go again, cut to its current MaxRecvDataSegmentLength, numbered from
    /// the last DataACK, and the command ends with a SCSI Response carrying the SNACK Tag.
    fn snack_rdata(&mut self, conn: ConnId, snack: &SnackRequest) -> bool {
        let tag = snack.ttt.0;
        // Section 11.16.5/11.16.6: a tag other than 0 and 0xffffffff; BegRun and RunLength 0.
        if tag == 0 || snack.ttt == Ttt::RESERVED || snack.beg_run != 0 || snack.run_length != 0 {
            return false;
        }
        let Some(params) = self.find(conn).map(|c| c.params) else {
            return false;
        };
        let stat_sn = self
            .retained_status_of(conn, snack.itt)
            .and_then(|p| stat_sn_of(&p));
        let Some(task) = self.tasks.get_mut(&snack.itt).filter(|t| t.conn == conn) else {
            return false;
        };
        task.snack_tag = tag;
        let TaskState::Answered(a) = &mut task.state else {
            // Not answered yet: the answer will be cut anew and carry the tag.
            return matches!(task.state, TaskState::Running { .. });
        };
        let Some(seq) = a.data_in.as_ref() else {
            return false;
        };
        let Some(mut resumed) = seq.resume(a.acked_data_sn, &params) else {
            return false;
        };
        let data: Vec<Pdu> = resumed.by_ref().map(Pdu::DataIn).collect();
        let mut rsp = match a.response.clone() {
            // Section 11.16: ExpDataSN carries the current value.
            Some(mut r) => {
                r.exp_data_sn = resumed.data_in_count();
                r
            }
            None => resumed.response(&[]),
        };
        rsp.snack_tag = tag;
        a.data_in_sent = resumed.data_in_count();
        a.response = Some(rsp.clone());
        for pdu in data {
            self.resend_to(conn, pdu);
        }
        match stat_sn {
            // "all SCSI Response PDUs must carry the same StatSN"; the latest content is what
            // a later Status SNACK gets.
            Some(sn) => {
                rsp.stat_sn = sn;
                self.replace_retained(conn, sn, Pdu::ScsiResponse(rsp.clone()));
                self.resend_to(conn, Pdu::ScsiResponse(rsp));
            }
            None => self.queue_to(conn, Pdu::ScsiResponse(rsp)),
        }
        true
    }

    /// Statuses the initiator acknowledged on `conn` are forgotten, with the answered tasks
    /// they ended (section 4.2.2.2: state "can safely [be] discard[ed] ... after the delivery
    /// of the status for the command ... is acknowledged through the ExpStatSN"). The oldest
    /// beyond the retention bound go too.
    pub(super) fn release_acknowledged(&mut self, conn: ConnId) {
        // Past the hard bound the oldest status is forgotten (an initiator that never
        // acknowledges, pinging forever); the window already stopped opening at the soft one.
        let bound = HARD_BOUND_FACTOR * self.retention_bound();
        // The connection and the task table are borrowed apart, so that each released task
        // leaves the table as its status leaves the queue (no list of them in between).
        let Some(c) = self.conns.iter_mut().find(|c| c.id == conn) else {
            return;
        };
        let acked = c.exp_stat_sn;
        let kept = c.retained.len();
        while let Some(front) = c.retained.front() {
            let acknowledged = stat_sn_of(front).is_none_or(|sn| sn.lt(acked));
            if !acknowledged && c.retained.len() <= bound {
                break;
            }
            let Some(pdu) = c.retained.pop_front() else {
                break;
            };
            if matches!(pdu, Pdu::ScsiResponse(_) | Pdu::DataIn(_)) {
                if let Entry::Occupied(task) = self.tasks.entry(pdu.itt()) {
                    if task.get().conn == conn && task.get().answered() {
                        task.remove();
                    }
                }
            }
        }
        if c.retained.len() < kept {
            // Acknowledgement came: a later hold may ping again.
            c.retention_pinged = false;
        }
        self.release_deferred_slots();
    }

    /// Statuses a connection keeps before the session stops opening its command window:
    /// never below what a full window of answers needs (an initiator acknowledges with its
    /// next PDU, and a bound under the queue depth would throttle statuses merely in flight).
    fn retention_bound(&self) -> usize {
        let depth = self.config.queue_depth as usize;
        self.config
            .recovery
            .max_retained_statuses
            .max(2 * depth + 64)
    }

    /// Whether some connection keeps as many unacknowledged statuses, or bytes of read data,
    /// as it may: the command window then stops opening (commands ending keep their places) until the initiator
    /// acknowledges, so that what is kept for retransmission stays bounded while an
    /// initiator holds its acknowledgement back for data it is still recovering.
    pub(super) fn retention_full(&self) -> bool {
        self.conns.iter().any(|c| self.over_retention_bound(c))
    }

    /// Whether connection `c` keeps as many statuses or bytes for retransmission as it may.
    fn over_retention_bound(&self, c: &super::connection::Connection) -> bool {
        c.retained.len() >= self.retention_bound()
            || c.retained_bytes.load(Ordering::Relaxed) >= self.config.recovery.max_retained_bytes
    }

    /// The window is held shut for what some connections keep: each of them gets a NOP-In
    /// ping (once per acknowledgement that released any), whose answer carries that
    /// connection's ExpStatSN (RFC 7143 sections 4.2.2.2 and 11.19: a NOP-In with a valid
    /// TTT must be answered). An initiator with nothing else to send on that connection would
    /// otherwise acknowledge nothing there, and its waiting commands would wait for ever.
    pub(super) fn ping_retention_holders(&mut self) {
        let holders: SmallVec<[ConnId; 4]> = self
            .conns
            .iter()
            .filter(|c| c.state == ConnState::Live && !c.retention_pinged)
            .filter(|c| self.over_retention_bound(c))
            .map(|c| c.id)
            .collect();
        for conn in holders {
            let ttt = self.ttts.allocate();
            if let Some(c) = self.find_mut(conn) {
                c.retention_pinged = true;
                c.queue(super::connection::ping(ttt));
            }
        }
    }

    /// Bytes of answered reads' data kept for resending by the live connections.
    pub fn retained_bytes(&self) -> usize {
        self.conns
            .iter()
            .map(|c| c.retained_bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Gives back the window places held back while retention was full.
    pub(super) fn release_deferred_slots(&mut self) {
        while !self.deferred_slots.is_empty() && !self.retention_full() {
            if let Some(slot) = self.deferred_slots.pop() {
                self.window.release(slot);
            }
        }
    }

    /// The status PDU of task `itt` as sent on `conn`, if still kept.
    fn retained_status_of(&self, conn: ConnId, itt: Itt) -> Option<Pdu> {
        self.find(conn)?
            .retained
            .iter()
            .rev()
            .find(|p| p.itt() == itt && matches!(p, Pdu::ScsiResponse(_) | Pdu::DataIn(_)))
            .cloned()
    }

    fn replace_retained(&mut self, conn: ConnId, stat_sn: SeqNum, pdu: Pdu) {
        if let Some(c) = self.find_mut(conn) {
            if let Some(slot) = c
                .retained
                .iter_mut()
                .find(|p| stat_sn_of(p) == Some(stat_sn))
            {
                *slot = pdu;
            }
        }
    }

    /// Queues a PDU sent before on `conn` again, if the connection is live.
    fn resend_to(&mut self, conn: ConnId, pdu: Pdu) {
        if let Some(c) = self.find_mut(conn).filter(|c| c.state == ConnState::Live) {
            c.queue_resend(pdu);
            self.stats.pdus_resent += 1;
        }
    }
}
