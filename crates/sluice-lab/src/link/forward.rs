//! The user-space link: packets from one TUN device to the other after the wire's
//! serialisation time at the link rate, a tail-drop queue, a delay with optional jitter, and
//! optional random loss. The writer records how late each packet left against its schedule,
//! the emulator's own accuracy.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::spec::PathSpec;
use super::tun::{nonblocking, precise_timers, read_packet, write_packet};

/// A packet this close to its time leaves at once: sleeping for each packet of a gigabit
/// link (one every 12 us at MTU 1500) would cost more CPU than the forwarding. The rate
/// holds on average (the reader schedules by it); single packets may leave this much early.
const EARLY: Duration = Duration::from_micros(50);

/// What one direction carried, and how punctually.
#[derive(Debug)]
pub struct DirectionCounters {
    /// Packets delivered.
    pub packets: AtomicU64,
    /// Bytes delivered (IP packets).
    pub bytes: AtomicU64,
    /// Packets dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Packets lost on purpose (the link's random loss).
    pub lost: AtomicU64,
    /// How late each packet left against its schedule, microseconds (0 when early).
    lateness_us: Mutex<Histogram<u64>>,
}

impl Default for DirectionCounters {
    fn default() -> Self {
        Self {
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lateness_us: Mutex::new(crate::latency::new_histogram()),
        }
    }
}

/// How late packets left, over some stretch of time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lateness {
    /// Packets measured.
    pub packets: u64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// Median, microseconds.
    pub p50_us: u64,
    /// 99th percentile, microseconds.
    pub p99_us: u64,
    /// Largest, microseconds.
    pub max_us: u64,
}

impl DirectionCounters {
    /// The lateness of the packets since the last [`Self::take_lateness`], and a fresh start.
    pub fn take_lateness(&self) -> Lateness {
        let mut h = self.lateness_us.lock().unwrap_or_else(|p| p.into_inner());
        let l = Lateness {
            packets: h.len(),
            mean_us: if h.is_empty() { 0.0 } else { h.mean() },
            p50_us: h.value_at_quantile(0.5),
            p99_us: h.value_at_quantile(0.99),
            max_us: h.max(),
        };
        h.reset();
        l
    }

    fn record_lateness(&self, us: u64) {
        let mut h = self.lateness_us.lock().unwrap_or_else(|p| p.into_inner());
        h.saturating_record(us.max(1));
    }
}

/// A direction's scheduling state: when the wire is next free, when the last packet is
/// delivered (jitter never reorders), and the loss and jitter draws.
pub(super) struct Scheduler {
    wire_free: Instant,
    last_delivery: Instant,
    rng: SmallRng,
}

/// What becomes of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Delivered at this time.
    Deliver(Instant),
    /// Dropped: the queue ahead of it was full.
    QueueFull,
    /// Lost on the way (random loss), after taking its time on the wire.
    Lost,
}

impl Scheduler {
    pub(super) fn new(now: Instant, seed: u64) -> Self {
        Self {
            wire_free: now,
            last_delivery: now,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// The fate of a packet of `len` bytes that arrives at `now`.
    pub(super) fn schedule(&mut self, spec: &PathSpec, now: Instant, len: usize) -> Verdict {
        let sent = match spec.rate_bps {
            None => now,
            Some(rate) => {
                let start = self.wire_free.max(now);
                // Bytes still waiting for the wire ahead of this packet.
                let backlog = start.duration_since(now).as_secs_f64() * rate as f64 / 8.0;
                if backlog + len as f64 > spec.queue_bytes as f64 {
                    return Verdict::QueueFull;
                }
                self.wire_free = start + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
                self.wire_free
            }
        };
        if spec.loss > 0.0 && self.rng.gen::<f64>() < spec.loss {
            return Verdict::Lost;
        }
        let delay = if spec.jitter.is_zero() {
            spec.delay
        } else {
            let j = spec.jitter.as_secs_f64();
            let d = spec.delay.as_secs_f64() + self.rng.gen_range(-j..=j);
            Duration::from_secs_f64(d.max(0.0))
        };
        let at = (sent + delay).max(self.last_delivery);
        self.last_delivery = at;
        Verdict::Deliver(at)
    }
}

/// Starts the two threads of one direction: a reader that timestamps and queues packets
/// from `from`, and a writer that delivers them to `to` on time. `spec` may change while
/// they run.
pub(super) fn direction(
    spec: Arc<Mutex<PathSpec>>,
    seed: u64,
    from: OwnedFd,
    to: OwnedFd,
    stop: Arc<AtomicBool>,
    counters: Arc<DirectionCounters>,
) -> Vec<JoinHandle<()>> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_stop = Arc::clone(&stop);
    let reader_counters = Arc::clone(&counters);
    let reader = std::thread::spawn(move || {
        if nonblocking(&from).is_err() {
            return;
        }
        let mut buf = vec![0u8; 65_536];
        let mut sched = Scheduler::new(Instant::now(), seed);
        while !reader_stop.load(Ordering::Relaxed) {
            let n = match read_packet(&from, &mut buf, 100) {
                Ok(0) => continue,
                Ok(n) => n,
                Err(_) => break,
            };
            let path = *spec.lock().unwrap_or_else(|p| p.into_inner());
            match sched.schedule(&path, Instant::now(), n) {
                Verdict::Deliver(at) => {
                    if tx.send((at, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Verdict::QueueFull => {
                    reader_counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Verdict::Lost => {
                    reader_counters.lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let writer = std::thread::spawn(move || {
        precise_timers();
        while !stop.load(Ordering::Relaxed) {
            let (at, pkt) = match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(p) => p,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let now = Instant::now();
            if at > now + EARLY {
                std::thread::sleep(at - now);
            }
            let left = Instant::now();
            // A full or vanished device loses the packet, as a wire would; TCP recovers.
            if write_packet(&to, &pkt).is_ok() {
                counters.packets.fetch_add(1, Ordering::Relaxed);
                counters
                    .bytes
                    .fetch_add(pkt.len() as u64, Ordering::Relaxed);
                let late = left.saturating_duration_since(at);
                counters.record_lateness(late.as_micros() as u64);
            }
        }
    });
    vec![reader, writer]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(v: Verdict) -> Instant {
        match v {
            Verdict::Deliver(at) => at,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn serialises_at_the_rate_and_drops_past_the_queue() {
        let spec = PathSpec {
            rate_bps: Some(8_000_000), // 1 byte per microsecond
            delay: Duration::from_millis(2),
            queue_bytes: 3000,
            ..PathSpec::default()
        };
        let t0 = Instant::now();
        let mut s = Scheduler::new(t0, 1);
        assert_eq!(
            deliver(s.schedule(&spec, t0, 1000)) - t0,
            Duration::from_micros(3000)
        );
        assert_eq!(
            deliver(s.schedule(&spec, t0, 1000)) - t0,
            Duration::from_micros(4000)
        );
        // 2000 bytes wait ahead; 1000 more fit, another 1000 do not.
        assert!(matches!(s.schedule(&spec, t0, 1000), Verdict::Deliver(_)));
        assert_eq!(s.schedule(&spec, t0, 1000), Verdict::QueueFull);
        // Later, the queue has drained.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(
            deliver(s.schedule(&spec, later, 500)) - later,
            Duration::from_micros(2500)
        );
    }

    #[test]
    fn unlimited_rate_only_delays() {
        let spec = PathSpec {
            rate_bps: None,
            delay: Duration::from_millis(1),
            ..PathSpec::default()
        };
        let t0 = Instant::now();
        let mut s = Scheduler::new(t0, 1);
        for _ in 0..1000 {
            assert_eq!(
                s.schedule(&spec, t0, 1500),
                Verdict::Deliver(t0 + Duration::from_millis(1))
            );
        }
    }

    #[test]
    fn jitter_spreads_the_delay_without_reordering() {
        let spec = PathSpec {
            rate_bps: None,
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(2),
            ..PathSpec::default()
        };
        let t0 = Instant::now();
        let mut s = Scheduler::new(t0, 42);
        let mut last = t0;
        let mut sum = Duration::ZERO;
        let n = 10_000u32;
        for i in 0..n {
            let now = t0 + Duration::from_micros(u64::from(i) * 100);
            let at = deliver(s.schedule(&spec, now, 100));
            assert!(at >= last, "reordered");
            let d = at - now;
            assert!(d <= Duration::from_millis(12), "{d:?}");
            last = at;
            sum += d;
        }
        // Packets 100 us apart with +-2 ms of jitter: holding order pushes the mean up a
        // little, never below the nominal delay.
        let mean = sum / n;
        assert!(
            mean >= Duration::from_millis(10) && mean < Duration::from_millis(12),
            "{mean:?}"
        );
    }

    #[test]
    fn random_loss_takes_its_share_the_same_way_for_a_seed() {
        let spec = PathSpec {
            rate_bps: None,
            loss: 0.01,
            ..PathSpec::default()
        };
        let count = |seed| {
            let t0 = Instant::now();
            let mut s = Scheduler::new(t0, seed);
            (0..100_000)
                .filter(|_| s.schedule(&spec, t0, 1500) == Verdict::Lost)
                .count()
        };
        let lost = count(5);
        assert!((800..1200).contains(&lost), "{lost} of 100000 at 1%");
        assert_eq!(count(5), lost);
    }

    #[test]
    fn lateness_is_summarised_and_reset() {
        let c = DirectionCounters::default();
        for us in [10, 20, 30, 1000] {
            c.record_lateness(us);
        }
        let l = c.take_lateness();
        assert_eq!(l.packets, 4);
        assert!(
            l.max_us >= 1000 && l.p50_us >= 19 && l.p50_us <= 21,
            "{l:?}"
        );
        assert_eq!(c.take_lateness().packets, 0);
    }
}
