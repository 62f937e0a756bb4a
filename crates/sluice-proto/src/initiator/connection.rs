//! One connection of an initiator session: the ExpStatSN it acknowledges (RFC 7143 section
//! 4.2.2.2), its keepalive, its counters and its queue of PDUs to send.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{ConnId, ConnectionSetup, ConnectionStats};
use crate::keepalive::{Keepalive as Timer, KeepaliveAction};
use crate::params::SessionParams;
use crate::pdu::Pdu;
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
        }
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
        let mut pdu = self.out.pop_front()?;
        let exp = self.exp_stat_sn;
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
