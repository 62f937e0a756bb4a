//! What the proxy's connections share: the plan and seed, the live relays, the totals of the
//! finished ones, and the fault log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_fault::{Direction, FaultCounters, FaultEvent, FaultPlan, Relay};

/// Most events the fault log keeps (the first ones of a run; the rest are only counted):
/// about 4 MiB, so that a long run at a high rate cannot grow the proxy without bound.
pub const FAULT_LOG_CAPACITY: usize = 65_536;

/// The proxy's counters: one [`FaultCounters`] per direction, over every connection so far,
/// live ones included.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct ProxyCounters {
    /// Initiator to target.
    pub to_target: FaultCounters,
    /// Target to initiator.
    pub to_initiator: FaultCounters,
    /// Initiator connections accepted.
    pub connections: u64,
    /// Of those, the ones whose connection to the target could not be made.
    pub upstream_failures: u64,
    /// Connections whose stream could not be framed (closed with a reset).
    pub unframeable: u64,
    /// Events left out of the fault log because it was full.
    pub events_not_logged: u64,
}

impl ProxyCounters {
    /// The counters of one direction.
    pub fn direction(&self, dir: Direction) -> &FaultCounters {
        match dir {
            Direction::ToTarget => &self.to_target,
            Direction::ToInitiator => &self.to_initiator,
        }
    }

    /// Connection resets decided by the plan, both directions.
    pub fn resets(&self) -> u64 {
        self.to_target.resets + self.to_initiator.resets
    }

    fn add_relay(&mut self, relay: &Relay) {
        self.to_target.add(relay.counters(Direction::ToTarget));
        self.to_initiator
            .add(relay.counters(Direction::ToInitiator));
    }
}

/// The registry behind one lock. Lock order: the registry, then a relay; never the reverse.
#[derive(Debug, Default)]
struct Registry {
    live: HashMap<u64, Arc<Mutex<Relay>>>,
    /// Totals of finished connections, plus the proxy's own counts.
    totals: ProxyCounters,
    log: Vec<FaultEvent>,
}

/// State shared by the accept loop, every connection task and every handle.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) upstream: SocketAddr,
    pub(crate) plan: FaultPlan,
    pub(crate) seed: u64,
    registry: Mutex<Registry>,
}

/// Locks a mutex, also after a task panicked while holding it: counters and logs stay usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn new(upstream: SocketAddr, plan: FaultPlan, seed: u64) -> Shared {
        Shared {
            upstream,
            plan,
            seed,
            registry: Mutex::new(Registry::default()),
        }
    }

    /// A new connection: its index and its relay, registered as live.
    pub(crate) fn open(&self) -> (u64, Arc<Mutex<Relay>>) {
        let mut r = lock(&self.registry);
        let index = r.totals.connections;
        r.totals.connections += 1;
        let relay = Arc::new(Mutex::new(Relay::new(self.plan.clone(), self.seed, index)));
        r.live.insert(index, Arc::clone(&relay));
        (index, relay)
    }

    /// Connection `index` ended: its counters join the totals.
    pub(crate) fn close(&self, index: u64) {
        let mut r = lock(&self.registry);
        if let Some(relay) = r.live.remove(&index) {
            let relay = lock(&relay);
            r.totals.add_relay(&relay);
        }
    }

    /// The target could not be reached for one connection.
    pub(crate) fn upstream_failed(&self) {
        lock(&self.registry).totals.upstream_failures += 1;
    }

    /// A connection's stream could not be framed.
    pub(crate) fn unframeable(&self) {
        lock(&self.registry).totals.unframeable += 1;
    }

    /// Keeps events for [`Shared::fault_log`], up to [`FAULT_LOG_CAPACITY`].
    pub(crate) fn log(&self, events: &[FaultEvent]) {
        let mut r = lock(&self.registry);
        let room = FAULT_LOG_CAPACITY.saturating_sub(r.log.len());
        let kept = events.len().min(room);
        r.log.extend_from_slice(&events[..kept]);
        r.totals.events_not_logged += (events.len() - kept) as u64;
    }

    pub(crate) fn counters(&self) -> ProxyCounters {
        let r = lock(&self.registry);
        let mut c = r.totals;
        for relay in r.live.values() {
            c.add_relay(&lock(relay));
        }
        c
    }

    pub(crate) fn fault_log(&self) -> Vec<FaultEvent> {
        let mut log = lock(&self.registry).log.clone();
        // Stable: the events of one PDU keep the order they were decided in.
        log.sort_by_key(|e| (e.connection, e.direction, e.pdu));
        log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_cover_live_and_finished_connections() {
        let shared = Shared::new("127.0.0.1:3260".parse().unwrap(), FaultPlan::default(), 0);
        let (a, relay_a) = shared.open();
        let (b, _relay_b) = shared.open();
        assert_eq!((a, b), (0, 1));
        let mut buf = bytes::BytesMut::from(&[0u8; 48][..]);
        let out = lock(&relay_a).next_frame(Direction::ToTarget, &mut buf);
        assert!(matches!(out, Ok(Some(_))));
        assert_eq!(shared.counters().to_target.pdus, 1);
        shared.close(a);
        shared.close(a);
        let c = shared.counters();
        assert_eq!(
            (c.connections, c.to_target.pdus, c.to_target.bytes),
            (2, 1, 48)
        );
    }

    #[test]
    fn the_fault_log_is_bounded_and_sorted() {
        let shared = Shared::new("127.0.0.1:3260".parse().unwrap(), FaultPlan::default(), 0);
        let event = |connection, pdu| FaultEvent {
            connection,
            direction: Direction::ToInitiator,
            pdu,
            opcode: 0x21,
            itt: sluice_proto::seq::Itt(1),
            seq: None,
            action: sluice_fault::FaultAction::Duplicate,
        };
        shared.log(&[event(1, 0), event(0, 5), event(0, 2)]);
        let log = shared.fault_log();
        let order: Vec<(u64, u64)> = log.iter().map(|e| (e.connection, e.pdu)).collect();
        assert_eq!(order, vec![(0, 2), (0, 5), (1, 0)]);
        let many = vec![event(2, 0); FAULT_LOG_CAPACITY];
        shared.log(&many);
        assert_eq!(shared.fault_log().len(), FAULT_LOG_CAPACITY);
        assert_eq!(shared.counters().events_not_logged, 3);
    }
}
