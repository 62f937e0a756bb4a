//! One connection of an initiator session: the ExpStatSN it acknowledges (RFC 7143 section
//! 4.2.2.2), its keepalive, its counters and its queue of PDUs to send.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{ConnId, ConnectionSetup, ConnectionStats};
use crate::keepalive::{Keepalive as Timer, KeepaliveAction};
use crate::params::SessionParams;
use crate::pdu::codes::SnackType;
use crate::pdu::{Pdu, SnackRequest};
use crate::seq::SeqNum;

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum ConnState {
    /// Takes new commands.
    Live,
    /// Being logged out: finishes its commands, takes no new ones; the Logout Request goes
    /// out once it has none.
    Draining,
    /// Closed or failing: sends nothing new.
    Closing,
}

impl StatusTracker {
    /// The Status SNACK run for the statuses from ExpStatSN `exp` up to `until` (exclusive)
    /// not asked for yet.
    fn ask_until(&mut self, exp: SeqNum, until: SeqNum) -> Option<(SeqNum, u32)> {
        let mut from = if self.asked_to.gt(exp) {
            self.asked_to
        } else {
            exp
        };
        // Statuses that came in past the gap need no asking.
        while from.lt(until) && self.ahead.contains(&from) {
            from = from.next();
        }
        if !until.gt(from) {
            return None;
        }
        self.asked_to = until;
        Some((from, until.distance_from(from)))
    }
}

/// What the keepalive timer asks for.
pub(super) enum Keepalive {
    Nothing,
    Ping,
    Dead,
}

/// Per-connection state.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) id: ConnId,
    pub(super) cid: u16,
    pub(super) params: SessionParams,
    /// The next StatSN expected from the target on this connection.
    pub(super) exp_stat_sn: SeqNum,
    out: VecDeque<Pdu>,
    keepalive: Option<Timer>,
    pub(super) state: ConnState,
    pub(super) stats: ConnectionStats,
    /// Bytes of the commands outstanding on it.
    pub(super) outstanding_bytes: u64,
    /// A logout of this connection waits for its commands to finish: `Some(Some(id))` for
    /// the application's request, `Some(None)` for one the target asked for.
    pub(super) logout: Option<Option<super::RequestId>>,
    /// StatSN bookkeeping for recovering lost statuses (ErrorRecoveryLevel 1 and above).
    status: Option<Box<StatusTracker>>,
    /// When the last probe (a NOP-Out asking for the current StatSN) went out.
    pub(super) probed_at: Option<Instant>,
    /// Why it is closing, once it is.
    pub(super) close_reason: Option<super::CloseReason>,
}

/// Most statuses that may be missing at once before a gap is taken for a failed connection
/// rather than losses (RFC 7143 section 4.2.2.2: "A large absolute difference between the
/// StatSN and the ExpStatSN may indicate a failed connection. Initiators MUST undertake
/// recovery actions if the difference is greater than an implementation-defined constant").
pub(super) const MAX_STATUS_GAP: u32 = 4096;

/// Which statuses of a connection arrived, when some may be lost.
#[derive(Debug, Default)]
struct StatusTracker {
    /// StatSNs received past a gap, sorted.
    ahead: Vec<SeqNum>,
    /// Statuses of reads whose data is not all in: not acknowledged yet (section 7.9).
    held: Vec<SeqNum>,
    /// Statuses before this were asked for already.
    asked_to: SeqNum,
    /// When a Status SNACK last asked for a gap still open: a SNACK or its answer may be
    /// lost too, so the gap is asked for again a retry period later.
    gap_asked_at: Option<Instant>,
}

/// What the StatSN of an arriving status PDU says (under recovery).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum StatusArrival {
    /// Not seen before: process it.
    New,
    /// Seen before (a resent copy): discard it.
    Duplicate,
    /// Further ahead than any loss explains: the connection has failed.
    Unbelievable,
}

impl Connection {
    pub(super) fn new(
        id: ConnId,
        setup: ConnectionSetup,
        keepalive: Option<(Duration, Duration)>,
        now: Instant,
    ) -> Self {
        Self {
            id,
            cid: setup.cid,
            params: setup.params,
            exp_stat_sn: setup.exp_stat_sn,
            out: VecDeque::new(),
            keepalive: keepalive.map(|(interval, timeout)| Timer::new(interval, timeout, now)),
            state: ConnState::Live,
            stats: ConnectionStats {
                cid: setup.cid,
                ..ConnectionStats::default()
            },
            outstanding_bytes: 0,
            logout: None,
            status: (setup.params.error_recovery_level > 0).then(|| {
                Box::new(StatusTracker {
                    asked_to: setup.exp_stat_sn,
                    ..StatusTracker::default()
                })
            }),
            probed_at: None,
            close_reason: None,
        }
    }

    /// It is closing because it (or its session) logged out.
    pub(super) fn logged_out(&self) -> bool {
        self.state == ConnState::Closing && self.close_reason == Some(super::CloseReason::Logout)
    }

    /// Under recovery: a status PDU numbered `sn` arrived. Statuses skipped before it are
    /// asked for with a Status SNACK (returned as `(BegRun, RunLength)`, section 7.9); one
    /// seen before is a duplicate.
    pub(super) fn status_arrived(
        &mut self,
        sn: SeqNum,
        now: Instant,
    ) -> (StatusArrival, Option<(SeqNum, u32)>) {
        if let Some(k) = self.keepalive.as_mut() {
            k.handle_received(now);
        }
        let exp = self.exp_stat_sn;
        let Some(t) = self.status.as_mut() else {
            return (StatusArrival::New, None);
        };
        if sn.lt(exp) || t.ahead.contains(&sn) {
            return (StatusArrival::Duplicate, None);
        }
        if sn.distance_from(exp) > MAX_STATUS_GAP || t.ahead.len() >= MAX_STATUS_GAP as usize {
            return (StatusArrival::Unbelievable, None);
        }
        let mut ask = None;
        if sn == exp {
            let mut next = sn.next();
            while let Some(at) = t.ahead.iter().position(|&a| a == next) {
                t.ahead.remove(at);
                next = next.next();
            }
            self.exp_stat_sn = next;
        } else {
            let at = t.ahead.partition_point(|a| a.lt(sn));
            t.ahead.insert(at, sn);
            ask = t.ask_until(exp, sn);
            if ask.is_some() {
                t.gap_asked_at = Some(now);
            }
        }
        if t.ahead.is_empty() {
            t.gap_asked_at = None;
        }
        if t.asked_to.lt(self.exp_stat_sn) {
            t.asked_to = self.exp_stat_sn;
        }
        (StatusArrival::New, ask)
    }

    /// Under recovery: a PDU carrying the next StatSN without taking one (R2T, a NOP-In
    /// ping) says `next`: statuses before it not seen are lost (section 7.1.4.2: a target may
    /// send a NOP-In "that carries the next status sequence number it is going to use in the
    /// StatSN field. This helps the initiator detect any missing StatSN(s)").
    pub(super) fn next_stat_sn_seen(&mut self, next: SeqNum) -> Option<(SeqNum, u32)> {
        let exp = self.exp_stat_sn;
        let t = self.status.as_mut()?;
        if !next.gt(exp) || next.distance_from(exp) > MAX_STATUS_GAP {
            return None;
        }
        t.ask_until(exp, next)
    }

    /// Under recovery: a status gap asked for at least `period` ago and still open (the
    /// SNACK or the statuses it brought were lost as well) is asked for again (section 7.1.4.1:
    /// the initiator retries a SNACK that got no answer).
    pub(super) fn stale_status_gap(
        &mut self,
        now: Instant,
        period: Duration,
    ) -> Option<(SeqNum, u32)> {
        let t = self.status.as_mut()?;
        if t.ahead.is_empty() {
            return None;
        }
        if t.gap_asked_at
            .is_some_and(|at| now.saturating_duration_since(at) < period)
        {
            return None;
        }
        t.gap_asked_at = Some(now);
        self.missing_statuses()
    }

    /// The status gap a probe asks for at `now` (see [`Self::missing_statuses`]), noted as
    /// asked so that [`Self::stale_status_gap`] does not ask for it again within the period.
    pub(super) fn probe_status_gap(&mut self, now: Instant) -> Option<(SeqNum, u32)> {
        let missing = self.missing_statuses()?;
        if let Some(t) = self.status.as_mut() {
            t.gap_asked_at = Some(now);
        }
        Some(missing)
    }

    /// Under recovery: a status gap is open (statuses received past a missing one).
    pub(super) fn status_gap_open(&self) -> bool {
        self.status.as_ref().is_some_and(|t| !t.ahead.is_empty())
    }

    /// Under recovery: the first run of statuses still missing, the one that holds
    /// acknowledgement back: from ExpStatSN to the first status received past it. Not every
    /// status up to the highest seen: the ones received since would come again for nothing
    /// (hundreds of resent PDUs for one lost), and a link that loses the same place in every
    /// such burst would lose the missing one every time. Later holes are asked for once this
    /// one closes.
    pub(super) fn missing_statuses(&mut self) -> Option<(SeqNum, u32)> {
        let exp = self.exp_stat_sn;
        let t = self.status.as_mut()?;
        let first = *t.ahead.first()?;
        Some((exp, first.distance_from(exp)))
    }

    /// The target cannot resend statuses `beg` and the `run` after it (0: all up to the
    /// highest seen): they count as received, so that acknowledgement goes on past them.
    pub(super) fn give_up_statuses(&mut self, beg: SeqNum, run: u32) {
        let Some(t) = self.status.as_mut() else {
            return;
        };
        let end = match (run, t.ahead.last()) {
            (0, Some(last)) => last.next(),
            (0, None) => beg,
            (n, _) => beg.add(n),
        };
        let mut sn = self.exp_stat_sn;
        // Only the run asked for, and only from where acknowledgement stands.
        if sn.lt(beg) || !end.gt(sn) || end.distance_from(sn) > MAX_STATUS_GAP {
            return;
        }
        while sn.lt(end) {
            sn = sn.next();
            while let Some(at) = t.ahead.iter().position(|&a| a == sn) {
                t.ahead.remove(at);
                sn = sn.next();
            }
        }
        self.exp_stat_sn = sn;
    }

    /// A status `sn` waits for its data: not acknowledged until [`Self::release_status`].
    pub(super) fn hold_status(&mut self, sn: SeqNum) {
        if let Some(t) = self.status.as_mut() {
            if !t.held.contains(&sn) {
                t.held.push(sn);
            }
        }
    }

    /// A held status may be acknowledged now.
    pub(super) fn release_status(&mut self, sn: SeqNum) {
        if let Some(t) = self.status.as_mut() {
            t.held.retain(|&h| h != sn);
        }
    }

    /// The ExpStatSN to send: every status before it arrived, and none whose data is
    /// still missing ("it MUST NOT acknowledge the received responses that start from the
    /// StatSN of the relevant command until it has completed receiving all the data PDUs of
    /// the command", section 7.9).
    fn acknowledged(&self) -> SeqNum {
        let exp = self.exp_stat_sn;
        self.status
            .as_ref()
            .and_then(|t| {
                t.held
                    .iter()
                    .copied()
                    .filter(|h| h.lt(exp))
                    .reduce(|a, b| if a.lt(b) { a } else { b })
            })
            .unwrap_or(exp)
    }

    /// A status-carrying PDU with `stat_sn` arrived: acknowledge it (section 4.2.2.2). Any PDU
    /// is a sign of life.
    pub(super) fn received(&mut self, stat_sn: Option<SeqNum>, now: Instant) {
        if let Some(k) = self.keepalive.as_mut() {
            k.handle_received(now);
        }
        if let Some(sn) = stat_sn {
            let next = sn.next();
            if next.gt(self.exp_stat_sn) {
                self.exp_stat_sn = next;
            }
        }
    }

    pub(super) fn queue(&mut self, pdu: Pdu) {
        self.out.push_back(pdu);
    }

    pub(super) fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// The next PDU, its ExpStatSN stamped with what has arrived so far.
    pub(super) fn poll_transmit(&mut self) -> Option<Pdu> {
        let exp = self.acknowledged();
        let mut pdu = loop {
            let mut pdu = self.out.pop_front()?;
            if let Pdu::SnackRequest(s) = &mut pdu {
                if s.snack_type == SnackType::Status && !trim_status_run(s, exp) {
                    continue;
                }
            }
            break pdu;
        };
        match &mut pdu {
            Pdu::ScsiCommand(p) => p.exp_stat_sn = exp,
            Pdu::DataOut(p) => p.exp_stat_sn = exp,
            Pdu::NopOut(p) => p.exp_stat_sn = exp,
            Pdu::TaskMgmtRequest(p) => p.exp_stat_sn = exp,
            Pdu::TextRequest(p) => p.exp_stat_sn = exp,
            Pdu::LogoutRequest(p) => p.exp_stat_sn = exp,
            Pdu::SnackRequest(p) => p.exp_stat_sn = exp,
            _ => {}
        }
        Some(pdu)
    }

    /// A command went out on this connection.
    pub(super) fn issued(&mut self, bytes: u64) {
        self.stats.commands += 1;
        self.stats.outstanding += 1;
        self.outstanding_bytes += bytes;
    }

    /// A command of this connection ended.
    pub(super) fn ended(&mut self, bytes: u64, read: u64, written: u64) {
        self.stats.outstanding = self.stats.outstanding.saturating_sub(1);
        self.outstanding_bytes = self.outstanding_bytes.saturating_sub(bytes);
        self.stats.read_bytes += read;
        self.stats.write_bytes += written;
    }

    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.keepalive.as_ref().map(Timer::poll_timeout)
    }

    pub(super) fn keepalive_due(&mut self, now: Instant) -> Keepalive {
        let Some(k) = self.keepalive.as_mut() else {
            return Keepalive::Nothing;
        };
        match k.handle_timeout(now) {
            KeepaliveAction::Nothing => Keepalive::Nothing,
            KeepaliveAction::Ping(_) => Keepalive::Ping,
            KeepaliveAction::Dead => Keepalive::Dead,
        }
    }
}

/// A Status SNACK is built when a gap shows, but statuses may arrive before it leaves (in
/// the same batch, or as answers to an earlier SNACK); the ExpStatSN it then carries
/// acknowledges them, and "any SNACK that requests a numbered response ... that was already
/// acknowledged by the initiator MUST be rejected" (RFC 7143 section 11.16). So the run is
/// cut to start at `acknowledged`; `false` when nothing of it is left to ask for.
fn trim_status_run(snack: &mut SnackRequest, acknowledged: SeqNum) -> bool {
    let beg = SeqNum(snack.beg_run);
    if !beg.lt(acknowledged) {
        return true;
    }
    if snack.run_length == 0 {
        // "All statuses from BegRun on": from the first unacknowledged one.
        snack.beg_run = acknowledged.0;
        return true;
    }
    let end = beg.add(snack.run_length);
    if !end.gt(acknowledged) {
        return false;
    }
    snack.beg_run = acknowledged.0;
    snack.run_length = end.distance_from(acknowledged);
    true
}
