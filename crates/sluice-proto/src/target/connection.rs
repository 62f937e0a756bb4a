//! One connection of a target session: StatSN numbering (RFC 7143 section 4.2.2.2), the
//! ExpStatSN its initiator acknowledged, keepalive, and its queue of PDUs to send.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::text::TextState;
use super::{CloseReason, ConnId, ConnectionSetup, Event, KeepaliveConfig};
use crate::keepalive::{Keepalive, KeepaliveAction};
use crate::params::SessionParams;
use crate::pdu::{NopIn, Pdu};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum ConnState {
    /// Full feature phase.
    Live,
    /// A close was decided: what is queued still goes out, nothing new is taken in.
    Closing,
}

/// Per-connection state (see the module docs).
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) id: ConnId,
    /// The CID the initiator gave it (logout names connections by CID).
    pub(super) cid: u16,
    /// The session-wide values plus this connection's digests and segment lengths.
    pub(super) params: SessionParams,
    /// StatSN of the next status PDU stamped.
    stat_sn: SeqNum,
    /// Queued PDUs that will take a StatSN when stamped.
    queued_statuses: u32,
    /// The highest ExpStatSN the initiator sent on this connection (every StatSN before it
    /// was received).
    pub(super) exp_stat_sn: SeqNum,
    out: VecDeque<Outgoing>,
    /// Status PDUs sent and not yet acknowledged, as stamped, oldest first: what a Status
    /// SNACK may ask for again (RFC 7143 section 11.16). Kept only under ErrorRecoveryLevel 1
    /// and above.
    pub(super) retained: VecDeque<Pdu>,
    /// Bytes of read data its answered tasks keep for resending, charged by each task's
    /// `recovery::RetentionCharge` (an atomic only because a charge drops wherever its task
    /// goes, even after this connection is gone; the session is used by one thread at a time).
    pub(super) retained_bytes: Arc<AtomicUsize>,
    /// A NOP-In went out to have the initiator acknowledge what this connection keeps, since
    /// its last acknowledgement released any (see `TargetSession::ping_retention_holders`).
    pub(super) retention_pinged: bool,
    retain: bool,
    /// Events for this connection's driver.
    pub(super) events: VecDeque<Event>,
    keepalive: Option<Keepalive>,
    pub(super) text: TextState,
    pub(super) state: ConnState,
    /// Write-buffer bytes reserved by this connection's writes still collecting data.
    pub(super) write_bytes: usize,
    /// See [`super::TargetSession::peer_waits`].
    pub(super) peer_waits: bool,
    /// Why it is closing, once it is.
    pub(super) close_reason: Option<CloseReason>,
    /// Logged out for recovery, explicitly (Logout reason 2) or implicitly (a login with its
    /// CID): its tasks may be reassigned (ErrorRecoveryLevel 2, RFC 7143 section 7.2.2).
    pub(super) recovery_logout: bool,
}

impl Connection {
    pub(super) fn new(
        id: ConnId,
        setup: ConnectionSetup,
        keepalive: Option<KeepaliveConfig>,
        now: Instant,
    ) -> Self {
        Self {
            id,
            cid: setup.cid,
            params: setup.params,
            stat_sn: setup.next_stat_sn,
            queued_statuses: 0,
            // The final Login Response carried StatSN next - 1: the initiator expects `next`.
            exp_stat_sn: setup.next_stat_sn,
            out: VecDeque::new(),
            retained: VecDeque::new(),
            retained_bytes: Arc::default(),
            retention_pinged: false,
            retain: setup.params.error_recovery_level > 0,
            events: VecDeque::new(),
            keepalive: keepalive.map(|k| Keepalive::new(k.interval, k.timeout, now)),
            text: TextState::default(),
            state: ConnState::Live,
            write_bytes: 0,
            peer_waits: true,
            close_reason: None,
            recovery_logout: false,
        }
    }

    /// Bookkeeping for every PDU received: liveness and the acknowledged StatSN.
    pub(super) fn handle_received(&mut self, pdu: &Pdu, now: Instant) {
        if let Some(k) = self.keepalive.as_mut() {
            // Any PDU is a sign of life, the ping's answer or not (open-iscsi #97: a busy
            // initiator may answer a ping late).
            k.handle_received(now);
        }
        if let Some(exp) = exp_stat_sn_of(pdu) {
            // RFC 7143 section 4.2.2.2: ExpStatSN acknowledges every status before it. It
            // cannot acknowledge a status not yet sent, and an older value is stale.
            if exp.gt(self.exp_stat_sn) && exp.le(self.stat_sn) {
                self.exp_stat_sn = exp;
            }
        }
    }

    /// Queues a PDU to send; its sequence numbers are stamped when it leaves.
    pub(super) fn queue(&mut self, pdu: Pdu) {
        if takes_stat_sn(&pdu) {
            self.queued_statuses += 1;
        }
        self.out.push_back(Outgoing { pdu, resend: false });
    }

    /// Queues a PDU sent before, again (an answer to a SNACK): "exact replicas ... except for
    /// the fields ExpCmdSN, MaxCmdSN, and ExpDataSN, which MUST carry the current values"
    /// (section 11.16). Its StatSN is kept, the connection's does not advance, and it is not
    /// retained a second time.
    pub(super) fn queue_resend(&mut self, pdu: Pdu) {
        self.out.push_back(Outgoing { pdu, resend: true });
    }

    /// Whether sent statuses are kept for Status SNACK (ErrorRecoveryLevel 1 and above).
    pub(super) fn retains(&self) -> bool {
        self.retain
    }

    /// The StatSN the next status PDU will take.
    pub(super) fn next_stat_sn(&self) -> SeqNum {
        self.stat_sn
    }

    /// The StatSN the initiator must acknowledge (ExpStatSN) to have seen every status
    /// queued so far.
    pub(super) fn stat_sn_after_queue(&self) -> SeqNum {
        self.stat_sn.add(self.queued_statuses)
    }

    /// Whether every status queued so far has been acknowledged.
    pub(super) fn all_acknowledged(&self) -> bool {
        self.exp_stat_sn == self.stat_sn_after_queue()
    }

    pub(super) fn has_output(&self) -> bool {
        !self.out.is_empty() || !self.events.is_empty()
    }

    /// The next PDU, stamped. StatSN advances for every PDU that carries status (RFC 7143
    /// section 4.2.2.2); R2T and a NOP-In with the reserved ITT carry the next StatSN without
    /// taking it (sections 11.8.3, 11.19.2).
    pub(super) fn poll_transmit(&mut self, exp: SeqNum, max: SeqNum) -> Option<Pdu> {
        let Outgoing { mut pdu, resend } = self.out.pop_front()?;
        if resend {
            restamp(&mut pdu, self.stat_sn, exp, max);
            return Some(pdu);
        }
        let stat_sn = self.stat_sn;
        let advance = match &mut pdu {
            Pdu::ScsiResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::DataIn(p) => {
                (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max);
                if p.status_present {
                    p.stat_sn = stat_sn;
                }
                p.status_present
            }
            Pdu::R2t(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                false
            }
            Pdu::NopIn(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                p.itt != Itt::RESERVED
            }
            Pdu::TaskMgmtResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::TextResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::LogoutResponse(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::AsyncMessage(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            Pdu::Reject(p) => {
                (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max);
                true
            }
            _ => false,
        };
        if advance {
            self.stat_sn = self.stat_sn.next();
            self.queued_statuses = self.queued_statuses.saturating_sub(1);
            if self.retain {
                // Section 7.1.3: a target supporting status retransmission keeps "the status
                // and sense" until acknowledged. The clone shares any data (`Bytes`).
                self.retained.push_back(pdu.clone());
            }
        }
        Some(pdu)
    }

    /// When the keepalive wants [`Connection::handle_timeout`].
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.keepalive.as_ref().map(Keepalive::poll_timeout)
    }

    /// Keepalive: a ping to send (queued here), or a reason to close.
    pub(super) fn handle_timeout(&mut self, now: Instant) -> Option<CloseReason> {
        let k = self.keepalive.as_mut()?;
        match k.handle_timeout(now) {
            KeepaliveAction::Nothing => None,
            KeepaliveAction::Dead => Some(CloseReason::KeepaliveTimeout),
            KeepaliveAction::Ping(tag) => {
                self.queue(ping(Ttt(tag)));
                None
            }
        }
    }
}

/// A NOP-In the initiator must answer: ITT reserved, TTT set (RFC 7143 section 11.19.1).
pub(super) fn ping(ttt: Ttt) -> Pdu {
    Pdu::NopIn(NopIn {
        lun: Lun(0),
        itt: Itt::RESERVED,
        ttt,
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(0),
        max_cmd_sn: SeqNum(0),
        data: Bytes::new(),
    })
}

/// A PDU waiting to be sent, new or sent again.
#[derive(Debug)]
struct Outgoing {
    pdu: Pdu,
    /// Sent before (a SNACK's answer): keeps its StatSN.
    resend: bool,
}

/// Stamps a resent PDU: current ExpCmdSN and MaxCmdSN; an R2T also the current StatSN
/// (section 11.16: "R2T(s) requested by SNACK MUST also carry the current value of the
/// StatSN"); a status PDU keeps the StatSN it was first sent with.
fn restamp(pdu: &mut Pdu, stat_sn: SeqNum, exp: SeqNum, max: SeqNum) {
    match pdu {
        Pdu::ScsiResponse(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::DataIn(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::R2t(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn) = (stat_sn, exp, max),
        Pdu::NopIn(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::TaskMgmtResponse(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::TextResponse(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::LogoutResponse(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::AsyncMessage(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        Pdu::Reject(p) => (p.exp_cmd_sn, p.max_cmd_sn) = (exp, max),
        _ => {}
    }
}

/// The StatSN a status PDU was stamped with (`None` for PDUs that take none).
pub(super) fn stat_sn_of(pdu: &Pdu) -> Option<SeqNum> {
    Some(match pdu {
        Pdu::ScsiResponse(p) => p.stat_sn,
        Pdu::DataIn(p) if p.status_present => p.stat_sn,
        Pdu::NopIn(p) if p.itt != Itt::RESERVED => p.stat_sn,
        Pdu::TaskMgmtResponse(p) => p.stat_sn,
        Pdu::TextResponse(p) => p.stat_sn,
        Pdu::LogoutResponse(p) => p.stat_sn,
        Pdu::AsyncMessage(p) => p.stat_sn,
        Pdu::Reject(p) => p.stat_sn,
        _ => return None,
    })
}

/// Whether a target PDU advances StatSN when sent (see [`Connection::poll_transmit`]).
fn takes_stat_sn(pdu: &Pdu) -> bool {
    match pdu {
        Pdu::ScsiResponse(_)
        | Pdu::TaskMgmtResponse(_)
        | Pdu::TextResponse(_)
        | Pdu::LogoutResponse(_)
        | Pdu::AsyncMessage(_)
        | Pdu::Reject(_) => true,
        Pdu::DataIn(p) => p.status_present,
        Pdu::NopIn(p) => p.itt != Itt::RESERVED,
        _ => false,
    }
}

/// The ExpStatSN an initiator PDU carries.
fn exp_stat_sn_of(pdu: &Pdu) -> Option<SeqNum> {
    Some(match pdu {
        Pdu::NopOut(p) => p.exp_stat_sn,
        Pdu::ScsiCommand(p) => p.exp_stat_sn,
        Pdu::TaskMgmtRequest(p) => p.exp_stat_sn,
        Pdu::TextRequest(p) => p.exp_stat_sn,
        Pdu::DataOut(p) => p.exp_stat_sn,
        Pdu::LogoutRequest(p) => p.exp_stat_sn,
        Pdu::SnackRequest(p) => p.exp_stat_sn,
        _ => return None,
    })
}
