//! The log of what persistent reservation changes asked of other I_T nexuses, kept in the
//! state gateways share, so that a change made through one gateway reaches the I_T nexuses
//! of every other.
//!
//! A PERSISTENT RESERVE OUT that preempts, clears or releases raises unit attentions for
//! other I_T nexuses (SPC-4 5.12.11: RESERVATIONS PREEMPTED 2Ah/03h, RESERVATIONS RELEASED
//! 2Ah/04h, REGISTRATIONS PREEMPTED 2Ah/05h), and PREEMPT AND ABORT ends their tasks. The
//! gateway that ran it knows only its own I_T nexuses; the others learn which of theirs are
//! meant from this log: one [`PrEvent`] per registration named, by its initiator port
//! (TransportID: for iSCSI the initiator port name, `InitiatorName,i,0xISID`) and relative
//! target port, the identity SPC-4 gives an I_T nexus. Every command's events share one
//! sequence number; a gateway delivers those newer than the last it saw. The log keeps the
//! events of the last [`MAX_LOGGED_COMMANDS`] commands and at most [`MAX_EVENT_LINES`]
//! events, so it cannot grow without bound, and the decoder refuses more.

use crate::ports::NexusIdentity;
use crate::pr::model::{Holder, Registration, MAX_REGISTRATIONS};

/// Commands whose events the log keeps: a gateway that missed more (cut off from the
/// cluster's notifications for that long) falls back on comparing registrations.
pub const MAX_LOGGED_COMMANDS: usize = 32;
/// Most events the log keeps (and a decoder accepts): two per registration, enough for the
/// largest single command (one event per registration it names).
pub const MAX_EVENT_LINES: usize = 2 * MAX_REGISTRATIONS;

/// What one command asked of the I_T nexuses of one registration.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct PrEvent {
    /// The command's sequence number (1, 2, ... per logical unit).
    pub seq: u64,
    /// The I_T nexus that sent the command: it gets no unit attention for its own command.
    /// `None` for events a gateway makes up itself (see [`EventLog::since`]).
    pub sender: Option<Holder>,
    /// The registration whose I_T nexuses are meant.
    pub target: Holder,
    /// The unit attention (ASC, ASCQ) they get, if any.
    pub attention: Option<(u8, u8)>,
    /// Whether their tasks are aborted (PREEMPT AND ABORT).
    pub abort: bool,
}

impl PrEvent {
    /// Whether the I_T nexus `id` is one this event is for.
    pub fn covers(&self, id: &NexusIdentity) -> bool {
        let is_sender = self
            .sender
            .as_ref()
            .is_some_and(|s| s.port == id.target_port && s.initiator == id.initiator);
        !is_sender
            && self.target.port == id.target_port
            && self.target.initiator.covers(&id.initiator)
    }
}

/// The events of the last commands, oldest first.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct EventLog {
    events: Vec<PrEvent>,
}

/// What a gateway that last saw sequence number `seen` has to deliver.
#[derive(Debug, Default, Eq, PartialEq)]
pub struct Missed<'a> {
    /// The events newer than `seen` that the log still has.
    pub events: &'a [PrEvent],
    /// Whether some newer events are no longer in the log.
    pub lost: bool,
}

impl EventLog {
    /// The events, oldest first.
    pub fn events(&self) -> &[PrEvent] {
        &self.events
    }

    /// The newest sequence number (0: no event yet).
    pub fn last_seq(&self) -> u64 {
        self.events.last().map_or(0, |e| e.seq)
    }

    /// Appends the events of one command sent by `sender`: `attentions` (the registrations
    /// that get a unit attention, and which) and `aborted` (those whose tasks are aborted).
    /// Returns the command's sequence number, or `None` when it asked nothing of anyone.
    pub fn record(
        &mut self,
        sender: &Holder,
        attentions: &[(Registration, (u8, u8))],
        aborted: &[Registration],
    ) -> Option<u64> {
        if attentions.is_empty() && aborted.is_empty() {
            return None;
        }
        let seq = self.last_seq() + 1;
        let mut new: Vec<PrEvent> = attentions
            .iter()
            .map(|(r, code)| PrEvent {
                seq,
                sender: Some(sender.clone()),
                target: r.holder(),
                attention: Some(*code),
                abort: false,
            })
            .collect();
        for r in aborted {
            let target = r.holder();
            match new.iter_mut().find(|e| e.target == target) {
                Some(e) => e.abort = true,
                None => new.push(PrEvent {
                    seq,
                    sender: Some(sender.clone()),
                    target,
                    attention: None,
                    abort: true,
                }),
            }
        }
        // One command names each registration at most once (there are at most
        // MAX_REGISTRATIONS), so the newest command always fits.
        new.truncate(MAX_EVENT_LINES);
        self.events.extend(new);
        self.trim();
        Some(seq)
    }

    /// Drops the oldest commands' events beyond the bounds; the newest command's stay.
    fn trim(&mut self) {
        let last = self.last_seq();
        let oldest_kept = last.saturating_sub(MAX_LOGGED_COMMANDS as u64 - 1);
        self.events.retain(|e| e.seq >= oldest_kept);
        while self.events.len() > MAX_EVENT_LINES {
            let first = self.events[0].seq;
            if first == last {
                break;
            }
            self.events.retain(|e| e.seq != first);
        }
    }

    /// Adds a decoded event; sequence numbers must not go down, and at most
    /// [`MAX_EVENT_LINES`] are taken.
    pub fn push_decoded(&mut self, event: PrEvent) -> Result<(), &'static str> {
        if self.events.len() >= MAX_EVENT_LINES {
            return Err("too many reservation events");
        }
        if event.seq == 0 || event.seq < self.last_seq() {
            return Err("reservation events out of order");
        }
        self.events.push(event);
        Ok(())
    }

    /// What a gateway that saw every event up to `seen` has not delivered yet.
    pub fn since(&self, seen: u64) -> Missed<'_> {
        let start = self.events.partition_point(|e| e.seq <= seen);
        let events = &self.events[start..];
        let lost = match events.first() {
            Some(first) => first.seq > seen + 1,
            // Nothing newer kept, yet the log went on past `seen`: impossible unless trimmed.
            None => self.last_seq() > seen,
        };
        Missed { events, lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport_id::TransportId;
    use crate::unit_attention as ua;

    pub(crate) fn reg(n: u8, port: u16) -> Registration {
        Registration {
            initiator: TransportId::iscsi_port(&format!("iqn.2026-11.test:h{n}"), [n; 6]),
            port,
            key: u64::from(n) + 1,
            all_tg_pt: false,
        }
    }

    #[test]
    fn a_command_gets_one_sequence_number_and_merges_aborts() {
        let mut log = EventLog::default();
        let me = reg(1, 1).holder();
        assert_eq!(log.record(&me, &[], &[]), None, "nothing asked of anyone");
        let ua = [
            (reg(2, 2), ua::REGISTRATIONS_PREEMPTED),
            (reg(3, 1), ua::REGISTRATIONS_PREEMPTED),
        ];
        assert_eq!(log.record(&me, &ua, &[reg(2, 2), reg(1, 1)]), Some(1));
        let e = log.events();
        assert_eq!(e.len(), 3);
        assert!(e.iter().all(|e| e.seq == 1));
        assert!(e[0].abort && !e[1].abort, "abort merged into the attention");
        assert_eq!((e[2].attention, e[2].abort), (None, true));
        assert_eq!(log.record(&me, &ua[..1], &[]), Some(2));
        assert_eq!(log.last_seq(), 2);
    }

    #[test]
    fn an_event_is_for_the_named_nexus_but_never_the_sender() {
        let mut log = EventLog::default();
        let me = reg(1, 1).holder();
        log.record(&me, &[(reg(2, 2), ua::RESERVATIONS_PREEMPTED)], &[]);
        let e = &log.events()[0];
        let id = |n: u8, port| NexusIdentity {
            initiator: reg(n, port).initiator,
            target_port: port,
        };
        assert!(e.covers(&id(2, 2)));
        assert!(!e.covers(&id(2, 1)), "same initiator port, other gateway");
        assert!(!e.covers(&id(3, 2)), "other initiator port (ISID)");
        let mut device = e.clone();
        device.target.initiator = TransportId::iscsi_device("iqn.2026-11.test:h1");
        device.target.port = 1;
        assert!(!device.covers(&id(1, 1)), "the sender is skipped");
    }

    #[test]
    fn since_finds_what_a_gateway_missed() {
        let mut log = EventLog::default();
        let me = reg(1, 1).holder();
        for _ in 0..3 {
            log.record(&me, &[(reg(2, 2), ua::RESERVATIONS_RELEASED)], &[]);
        }
        assert_eq!(log.since(3).events.len(), 0);
        assert!(!log.since(3).lost);
        assert_eq!(log.since(1).events.len(), 2);
        assert!(!log.since(0).lost);
        for _ in 0..MAX_LOGGED_COMMANDS {
            log.record(&me, &[(reg(2, 2), ua::RESERVATIONS_RELEASED)], &[]);
        }
        assert_eq!(log.events().len(), MAX_LOGGED_COMMANDS, "bounded");
        let missed = log.since(1);
        assert!(missed.lost, "older events were dropped");
        assert_eq!(missed.events.len(), MAX_LOGGED_COMMANDS);
    }

    #[test]
    fn the_log_stays_bounded_in_events() {
        let mut log = EventLog::default();
        let me = reg(0, 1).holder();
        let many: Vec<_> = (0..MAX_REGISTRATIONS as u16)
            .map(|p| (reg(1, p + 2), ua::RESERVATIONS_PREEMPTED))
            .collect();
        for seq in 1..=4 {
            assert_eq!(log.record(&me, &many, &[]), Some(seq));
            assert!(log.events().len() <= MAX_EVENT_LINES);
        }
        assert_eq!(log.events()[0].seq, 3, "the oldest commands went whole");
        let mut decoded = EventLog::default();
        for e in log.events() {
            decoded.push_decoded(e.clone()).unwrap();
        }
        assert_eq!(decoded, log);
        let extra = log.events()[0].clone();
        let mut last = log.events().last().unwrap().clone();
        last.seq += 1;
        assert!(decoded.push_decoded(last).is_err(), "over the bound");
        let mut small = EventLog::default();
        small
            .push_decoded(log.events()[MAX_REGISTRATIONS].clone())
            .unwrap();
        assert!(small.push_decoded(extra).is_err(), "sequence went down");
    }
}
