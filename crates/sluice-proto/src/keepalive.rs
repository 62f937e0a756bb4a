//! NOP-based liveness checking (RFC 7143 sections 11.18, 11.19), as a timer that reports
//! deadlines instead of reading the clock.
//!
//! Either side may ping: the target with a NOP-In whose ITT is reserved and whose TTT is
//! real (the initiator must answer with a NOP-Out echoing the TTT), the initiator with a
//! NOP-Out whose ITT is real (the target answers with a NOP-In echoing the ITT). The rule is
//! the same for both: after `interval` without receiving anything, send one ping; if nothing at
//! all arrives within `timeout` of it, the connection is dead. Any received PDU counts as a
//! sign of life, not only the ping's answer: a peer busy sending a long Data-In stream may
//! answer late (open-iscsi #97), and the bytes prove it is alive.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use sluice_proto::keepalive::{Keepalive, KeepaliveAction};
//!
//! let start = Instant::now(); // the driver reads the clock, never this crate
//! let mut k = Keepalive::new(Duration::from_secs(30), Duration::from_secs(30), start);
//! assert_eq!(k.poll_timeout(), start + Duration::from_secs(30));
//! let KeepaliveAction::Ping(tag) = k.handle_timeout(k.poll_timeout()) else { panic!() };
//! k.handle_received(k.poll_timeout() - Duration::from_secs(1)); // an answer (or any PDU)
//! assert_eq!(k.outstanding_ping(), None);
//! # let _ = tag;
//! ```

use std::time::{Duration, Instant};

/// What the driver must do when a keepalive deadline passes.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum KeepaliveAction {
    /// Nothing yet (the deadline moved because something was received).
    Nothing,
    /// Send a ping carrying this tag (the target's TTT or the initiator's ITT).
    Ping(u32),
    /// No sign of life within the timeout: close the connection.
    Dead,
}

/// Liveness state of one connection.
#[derive(Clone, Debug)]
pub struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_received: Instant,
    /// The outstanding ping: its tag and when it was sent.
    ping: Option<(u32, Instant)>,
    next_tag: u32,
}

impl Keepalive {
    /// Starts the timer at `now` (the connection entered full feature phase).
    pub fn new(interval: Duration, timeout: Duration, now: Instant) -> Self {
        Self {
            interval,
            timeout,
            last_received: now,
            ping: None,
            next_tag: 1,
        }
    }

    /// Anything arrived from the peer at `now`.
    pub fn handle_received(&mut self, now: Instant) {
        if now > self.last_received {
            self.last_received = now;
        }
        self.ping = None;
    }

    /// The tag of the ping still waiting for an answer, if any.
    pub fn outstanding_ping(&self) -> Option<u32> {
        self.ping.map(|(tag, _)| tag)
    }

    /// When [`Keepalive::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Instant {
        match self.ping {
            Some((_, sent)) => sent + self.timeout,
            None => self.last_received + self.interval,
        }
    }

    /// The deadline from [`Keepalive::poll_timeout`] may have passed at `now`.
    pub fn handle_timeout(&mut self, now: Instant) -> KeepaliveAction {
        if now < self.poll_timeout() {
            return KeepaliveAction::Nothing;
        }
        if self.ping.is_some() {
            return KeepaliveAction::Dead;
        }
        // Tags stay below 0x8000_0000 and never take the reserved value 0xffffffff
        // (RFC 7143 sections 11.18.1 and 11.19.1).
        let tag = self.next_tag;
        self.next_tag = (self.next_tag % 0x7fff_ffff) + 1;
        self.ping = Some((tag, now));
        KeepaliveAction::Ping(tag)
    }
}

#[cfg(test)]
#[path = "keepalive_tests.rs"]
mod tests;
