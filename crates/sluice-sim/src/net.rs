//! The simulated network: each connection is a pair of byte pipes, one per direction, with a
//! latency, a jitter, a bandwidth and a segment size. Like TCP, a pipe delivers every byte
//! once and in order, cut into segments of any size. Faults (module `faults`) act on whole
//! PDUs before they enter a pipe, or reset it.

use std::collections::VecDeque;

use bytes::Bytes;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Segments one [`Pipe::send`] cuts its bytes into, at most (about).
const MAX_SEGMENTS_PER_SEND: usize = 64;

/// One direction of a connection.
#[derive(Debug)]
pub(crate) struct Pipe {
    latency_ns: u64,
    jitter_ns: u64,
    /// Picoseconds per byte (1 / bandwidth).
    ps_per_byte: u64,
    max_segment: usize,
    /// When the sender's "wire" is free again.
    busy_until: u64,
    /// The latest delivery time so far: segments never overtake one another.
    last_delivery: u64,
    in_flight: VecDeque<(u64, Bytes)>,
    /// The sender closed its side: after the bytes in flight, the receiver sees the end.
    fin: bool,
    /// Bytes sent, for the summary.
    pub(crate) bytes: u64,
}

/// How a link behaves, drawn from the seed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LinkShape {
    pub(crate) latency_ns: u64,
    pub(crate) jitter_ns: u64,
    pub(crate) bytes_per_sec: u64,
    pub(crate) max_segment: usize,
}

impl LinkShape {
    pub(crate) fn random(rng: &mut ChaCha8Rng) -> Self {
        Self {
            // Loopback to a WAN: 5 µs to 20 ms one way.
            latency_ns: log_uniform(rng, 5_000, 20_000_000),
            jitter_ns: if rng.gen_bool(0.5) {
                0
            } else {
                rng.gen_range(0..200_000)
            },
            // 10 MB/s to 10 GB/s.
            bytes_per_sec: log_uniform(rng, 10_000_000, 10_000_000_000),
            // From byte-by-byte to jumbo segments.
            max_segment: match rng.gen_range(0..4) {
                0 => rng.gen_range(1..=64),
                1 => 1448,
                2 => 8948,
                _ => rng.gen_range(1..=65_536),
            },
        }
    }
}

/// A value between `lo` and `hi`, uniform in its logarithm.
pub(crate) fn log_uniform(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> u64 {
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    (rng.gen_range(l..=h).exp() as u64).clamp(lo, hi)
}

impl Pipe {
    pub(crate) fn new(shape: LinkShape) -> Self {
        Self {
            latency_ns: shape.latency_ns,
            jitter_ns: shape.jitter_ns,
            ps_per_byte: 1_000_000_000_000 / shape.bytes_per_sec.max(1),
            max_segment: shape.max_segment.max(1),
            busy_until: 0,
            last_delivery: 0,
            in_flight: VecDeque::new(),
            fin: false,
            bytes: 0,
        }
    }

    /// Sends `data` at `now`, cut into segments of random sizes: no more than about
    /// [`MAX_SEGMENTS_PER_SEND`] per call, so that a tiny segment size on a long transfer
    /// does not turn a run into millions of events (the cuts still fall anywhere).
    pub(crate) fn send(&mut self, now: u64, mut data: Bytes, rng: &mut ChaCha8Rng) {
        self.bytes += data.len() as u64;
        let floor = data.len().div_ceil(MAX_SEGMENTS_PER_SEND);
        while !data.is_empty() {
            let n = rng
                .gen_range(1..=self.max_segment)
                .max(floor)
                .min(data.len());
            let segment = data.split_to(n);
            let start = self.busy_until.max(now);
            self.busy_until = start + (n as u64 * self.ps_per_byte).div_ceil(1000);
            let jitter = if self.jitter_ns == 0 {
                0
            } else {
                rng.gen_range(0..=self.jitter_ns)
            };
            let at = (self.busy_until + self.latency_ns + jitter).max(self.last_delivery);
            self.last_delivery = at;
            self.in_flight.push_back((at, segment));
        }
    }

    /// Closes the sending side: the receiver sees the end after what is in flight.
    pub(crate) fn close(&mut self) {
        self.fin = true;
    }

    /// A connection reset: what is in flight is lost, and the receiver sees the end at once.
    pub(crate) fn reset(&mut self) {
        self.in_flight.clear();
        self.fin = true;
    }

    /// When the next segment arrives.
    pub(crate) fn next_delivery(&self) -> Option<u64> {
        self.in_flight.front().map(|(at, _)| *at)
    }

    /// The next segment due at `now`.
    pub(crate) fn take_due(&mut self, now: u64) -> Option<Bytes> {
        match self.in_flight.front() {
            Some((at, _)) if *at <= now => self.in_flight.pop_front().map(|(_, b)| b),
            _ => None,
        }
    }

    /// Whether the sender closed and every byte arrived.
    pub(crate) fn finished(&self) -> bool {
        self.fin && self.in_flight.is_empty()
    }

    /// Whether nothing is in flight.
    pub(crate) fn idle(&self) -> bool {
        self.in_flight.is_empty()
    }
}
