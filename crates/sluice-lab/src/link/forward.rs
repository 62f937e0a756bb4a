//! The user-space link: packets from one TUN device to the other after the wire's
//! serialisation time at the link rate, a tail-drop queue and a fixed delay.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::spec::LinkSpec;
use super::tun::{nonblocking, precise_timers, read_packet, write_packet};

/// A packet this close to its time leaves at once: sleeping for each packet of a gigabit
/// link (one every 12 us) would cost more CPU than the forwarding. The rate holds on
/// average (the reader schedules by it); single packets may leave this much early.
const EARLY: Duration = Duration::from_micros(50);

/// What one direction carried.
#[derive(Debug, Default)]
pub struct DirectionCounters {
    /// Packets delivered.
    pub packets: AtomicU64,
    /// Bytes delivered (IP packets).
    pub bytes: AtomicU64,
    /// Packets dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// When a packet of `len` bytes that arrives at `now` is delivered, given when the wire is
/// next free; `None` when the queue ahead of it already holds `queue_bytes` or more.
pub(super) fn schedule(
    spec: &LinkSpec,
    now: Instant,
    wire_free: &mut Instant,
    len: usize,
) -> Option<Instant> {
    let Some(rate) = spec.rate_bps else {
        return Some(now + spec.delay);
    };
    let start = (*wire_free).max(now);
    // Bytes still waiting for the wire ahead of this packet.
    let backlog = start.duration_since(now).as_secs_f64() * rate as f64 / 8.0;
    if backlog + len as f64 > spec.queue_bytes as f64 {
        return None;
    }
    *wire_free = start + Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
    Some(*wire_free + spec.delay)
}

/// Starts the two threads of one direction: a reader that timestamps and queues packets
/// from `from`, and a writer that delivers them to `to` on time.
pub(super) fn direction(
    spec: LinkSpec,
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
        let mut wire_free = Instant::now();
        while !reader_stop.load(Ordering::Relaxed) {
            let n = match read_packet(&from, &mut buf, 100) {
                Ok(0) => continue,
                Ok(n) => n,
                Err(_) => break,
            };
            match schedule(&spec, Instant::now(), &mut wire_free, n) {
                Some(at) => {
                    if tx.send((at, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                None => {
                    reader_counters.dropped.fetch_add(1, Ordering::Relaxed);
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
            // A full or vanished device loses the packet, as a wire would; TCP recovers.
            if write_packet(&to, &pkt).is_ok() {
                counters.packets.fetch_add(1, Ordering::Relaxed);
                counters
                    .bytes
                    .fetch_add(pkt.len() as u64, Ordering::Relaxed);
            }
        }
    });
    vec![reader, writer]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_at_the_rate_and_drops_past_the_queue() {
        let spec = LinkSpec {
            rate_bps: Some(8_000_000), // 1 byte per microsecond
            delay: Duration::from_millis(2),
            queue_bytes: 3000,
            mtu: 1500,
        };
        let t0 = Instant::now();
        let mut free = t0;
        let a = schedule(&spec, t0, &mut free, 1000).unwrap();
        assert_eq!(a - t0, Duration::from_micros(3000));
        let b = schedule(&spec, t0, &mut free, 1000).unwrap();
        assert_eq!(b - t0, Duration::from_micros(4000));
        // 2000 bytes wait ahead; 1000 more fit, another 1000 do not.
        assert!(schedule(&spec, t0, &mut free, 1000).is_some());
        assert!(schedule(&spec, t0, &mut free, 1000).is_none());
        // Later, the queue has drained.
        let later = t0 + Duration::from_millis(10);
        let c = schedule(&spec, later, &mut free, 500).unwrap();
        assert_eq!(c - later, Duration::from_micros(2500));
    }

    #[test]
    fn unlimited_rate_only_delays() {
        let spec = LinkSpec {
            rate_bps: None,
            delay: Duration::from_millis(1),
            ..LinkSpec::default()
        };
        let t0 = Instant::now();
        let mut free = t0;
        for _ in 0..1000 {
            assert_eq!(
                schedule(&spec, t0, &mut free, 1500),
                Some(t0 + Duration::from_millis(1))
            );
        }
    }
}
