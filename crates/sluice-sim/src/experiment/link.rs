//! One direction of a point-to-point link: a drop-tail queue of at most N packets in front
//! of a transmitter of fixed bandwidth, then a fixed propagation delay, and bit errors that
//! corrupt a packet with probability 1 - (1 - BER)^bits (the study's equation 4.5). Like
//! ns-2's DropTail queue, a packet arriving at a full queue is dropped; the packet being
//! transmitted is not counted in the queue.

use std::collections::VecDeque;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A link direction's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Bits per second.
    pub bits_per_sec: u64,
    /// One-way propagation delay in nanoseconds.
    pub delay_ns: u64,
    /// Packets the queue holds (not counting the one on the wire).
    pub queue_packets: usize,
    /// Bit error rate: each bit of a packet is wrong with this probability.
    pub ber: f64,
    /// The largest IP packet (the path MTU), header included.
    pub mtu: usize,
}

impl LinkConfig {
    /// The study's link: 1 Gb/s, 10 ms, a 500-packet drop-tail queue, 1500-byte packets.
    pub fn study() -> Self {
        Self {
            bits_per_sec: 1_000_000_000,
            delay_ns: 10_000_000,
            queue_packets: 500,
            ber: 0.0,
            mtu: 1500,
        }
    }

    fn ns_for(&self, bytes: usize) -> u64 {
        (bytes as u64 * 8 * 1_000_000_000).div_ceil(self.bits_per_sec.max(1))
    }
}

/// What happened to a packet offered to the link.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Offer {
    /// It will arrive (intact or corrupted) at the given time.
    Queued,
    /// The queue was full.
    Dropped,
}

/// A packet on its way.
#[derive(Debug)]
pub(crate) struct InFlight<P> {
    pub(crate) at: u64,
    pub(crate) corrupted: bool,
    pub(crate) packet: P,
}

/// Counters of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered.
    pub offered: u64,
    /// Packets dropped at the full queue.
    pub dropped: u64,
    /// Packets corrupted by bit errors (discarded by the receiver's checksum).
    pub corrupted: u64,
    /// Bytes put on the wire (headers included).
    pub wire_bytes: u64,
    /// The most packets the queue ever held.
    pub max_queue: usize,
}

/// One direction of the link.
#[derive(Debug)]
pub(crate) struct LinkDir<P> {
    cfg: LinkConfig,
    /// When each accepted packet starts its transmission, for those still queued or on the
    /// wire (non-decreasing).
    starts: VecDeque<u64>,
    busy_until: u64,
    in_flight: VecDeque<InFlight<P>>,
    pub(crate) stats: LinkStats,
}

impl<P> LinkDir<P> {
    pub(crate) fn new(cfg: LinkConfig) -> Self {
        Self {
            cfg,
            starts: VecDeque::new(),
            busy_until: 0,
            in_flight: VecDeque::new(),
            stats: LinkStats::default(),
        }
    }

    /// Packets waiting at `now` (not counting one being transmitted).
    pub(crate) fn queued(&mut self, now: u64) -> usize {
        while self.starts.front().is_some_and(|&s| s <= now) {
            self.starts.pop_front();
        }
        self.starts.len()
    }

    /// Offers a packet of `bytes` on the wire at `now`.
    pub(crate) fn offer(
        &mut self,
        now: u64,
        bytes: usize,
        packet: P,
        rng: &mut ChaCha8Rng,
    ) -> Offer {
        self.stats.offered += 1;
        let waiting = self.queued(now);
        let wire_busy = self.busy_until > now;
        if wire_busy && waiting >= self.cfg.queue_packets {
            self.stats.dropped += 1;
            return Offer::Dropped;
        }
        let start = self.busy_until.max(now);
        if start > now {
            self.starts.push_back(start);
            self.stats.max_queue = self.stats.max_queue.max(self.starts.len());
        }
        self.busy_until = start + self.cfg.ns_for(bytes);
        self.stats.wire_bytes += bytes as u64;
        let corrupted = self.cfg.ber > 0.0 && {
            let p = 1.0 - (1.0 - self.cfg.ber).powf(bytes as f64 * 8.0);
            rng.gen_bool(p.clamp(0.0, 1.0))
        };
        if corrupted {
            self.stats.corrupted += 1;
        }
        self.in_flight.push_back(InFlight {
            at: self.busy_until + self.cfg.delay_ns,
            corrupted,
            packet,
        });
        Offer::Queued
    }

    /// When the next packet arrives.
    pub(crate) fn next_arrival(&self) -> Option<u64> {
        self.in_flight.front().map(|p| p.at)
    }

    /// The next packet due at `now`.
    pub(crate) fn take_due(&mut self, now: u64) -> Option<InFlight<P>> {
        if self.in_flight.front().is_some_and(|p| p.at <= now) {
            self.in_flight.pop_front()
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn link(queue: usize) -> LinkDir<u32> {
        LinkDir::new(LinkConfig {
            bits_per_sec: 8_000_000, // 1 byte per µs
            delay_ns: 1_000_000,
            queue_packets: queue,
            ber: 0.0,
            mtu: 1500,
        })
    }

    #[test]
    fn drop_tail_holds_at_most_n_packets_behind_the_wire() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut l = link(5);
        let offers: Vec<Offer> = (0..10).map(|n| l.offer(0, 1000, n, &mut rng)).collect();
        // One on the wire and five queued; the other four dropped.
        assert_eq!(offers.iter().filter(|o| **o == Offer::Queued).count(), 6);
        assert_eq!(l.stats.dropped, 4);
        assert_eq!(l.stats.max_queue, 5);
        // Once the first left the wire (1000 µs) there is room for one more.
        assert_eq!(l.offer(1_000_000, 1000, 99, &mut rng), Offer::Queued);
        assert_eq!(l.offer(1_000_000, 1000, 100, &mut rng), Offer::Dropped);
    }

    #[test]
    fn packets_arrive_after_serialisation_and_delay_in_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut l = link(10);
        l.offer(0, 1000, 1, &mut rng);
        l.offer(0, 500, 2, &mut rng);
        assert_eq!(l.next_arrival(), Some(1_000_000 + 1_000_000));
        assert!(l.take_due(1_999_999).is_none());
        assert_eq!(l.take_due(2_000_000).map(|p| p.packet), Some(1));
        assert_eq!(l.next_arrival(), Some(1_500_000 + 1_000_000));
    }

    #[test]
    fn bit_errors_corrupt_packets_at_the_expected_rate() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut l = LinkDir::new(LinkConfig {
            ber: 1e-5,
            queue_packets: usize::MAX,
            ..LinkConfig::study()
        });
        for n in 0..20_000u32 {
            l.offer(u64::from(n) * 1_000_000, 1500, n, &mut rng);
        }
        // 1 - (1 - 1e-5)^12000 = 0.113.
        let rate = l.stats.corrupted as f64 / 20_000.0;
        assert!((rate - 0.113).abs() < 0.01, "{rate}");
    }
}
