//! Timing one CRC algorithm on one buffer size: nanoseconds and TSC ticks per call, as
//! medians of repeated trials with their spread, on a warm buffer or on cold ones.
//!
//! The fast-path study counted cycles with RDTSC. On today's CPUs the time-stamp counter ticks
//! at a constant rate whatever the core's clock does (`constant_tsc`), so ticks per byte are
//! reference cycles, not core cycles; [`tsc_hz`] measures the rate against the monotonic clock
//! so that a report can state it, and GB/s come from the clock directly. Warm: the same buffer
//! every call, so it stays in L1/L2. Cold: consecutive calls walk a set of buffers larger than
//! the last-level cache, so every call reads its bytes from DRAM.
#![allow(unsafe_code)] // RDTSC; see the SAFETY comment

use std::hint::black_box;
use std::time::{Duration, Instant};

use super::LabCrc;

/// Where the bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cache {
    /// One buffer, reused: in cache.
    Warm,
    /// A walk over `set_bytes` of memory, so that no call finds its bytes in cache.
    Cold {
        /// Size of the buffer set; choose it well above the last-level cache.
        set_bytes: usize,
    },
}

/// What to measure and how long.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// The algorithm.
    pub crc: LabCrc,
    /// Bytes per call.
    pub size: usize,
    /// Warm or cold.
    pub cache: Cache,
    /// Trials; the result is their median.
    pub trials: usize,
    /// Minimum duration of one trial (calls are repeated until it is reached).
    pub trial_time: Duration,
}

/// The result of a [`Plan`].
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Nanoseconds per call: median, lowest and highest trial.
    pub ns_per_call: Spread,
    /// TSC ticks per byte (`None` where the CPU has no TSC): median, lowest and highest trial.
    pub ticks_per_byte: Option<Spread>,
    /// Calls per trial.
    pub calls_per_trial: u64,
}

impl Measurement {
    /// Median throughput in GB/s (10^9 bytes per second) for `size`-byte calls.
    #[must_use]
    pub fn gb_per_s(&self, size: usize) -> f64 {
        size as f64 / self.ns_per_call.median
    }
}

/// A median with the lowest and highest value it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Lowest.
    pub min: f64,
    /// Highest.
    pub max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Option<Self> {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => values[n / 2],
            _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        };
        Some(Self {
            median,
            min: values[0],
            max: values[n - 1],
        })
    }
}

/// The time-stamp counter, where the CPU has one.
fn ticks() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC reads a counter and touches no memory; every x86-64 CPU has it.
        Some(unsafe { std::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The TSC rate in Hz, measured against the monotonic clock over `over`.
#[must_use]
pub fn tsc_hz(over: Duration) -> Option<f64> {
    let (t0, c0) = (Instant::now(), ticks()?);
    while t0.elapsed() < over {
        std::hint::spin_loop();
    }
    let (t1, c1) = (Instant::now(), ticks()?);
    Some(c1.wrapping_sub(c0) as f64 / (t1 - t0).as_secs_f64())
}

/// Bytes that are not constant (so no algorithm meets a special case), for buffers to time on.
#[must_use]
pub fn test_bytes(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
        .collect()
}

/// The buffer a plan times on: one call's worth when warm, the whole set when cold, every page
/// touched before timing (first touches are not the CRC's).
#[must_use]
pub fn buffer_for(size: usize, cache: Cache) -> Vec<u8> {
    match cache {
        Cache::Warm => test_bytes(size),
        Cache::Cold { set_bytes } => test_bytes(set_bytes.max(2 * size)),
    }
}

/// Runs `plan`; `None` if the CPU cannot run the algorithm or the plan is empty.
#[must_use]
pub fn measure(plan: &Plan) -> Option<Measurement> {
    measure_on(plan, &buffer_for(plan.size, plan.cache))
}

/// Runs `plan` on `buf` (from [`buffer_for`], or any buffer of at least `plan.size` bytes:
/// consecutive calls walk it in `plan.size` steps, so a buffer larger than the last-level cache
/// makes every call a cold one).
#[must_use]
pub fn measure_on(plan: &Plan, buf: &[u8]) -> Option<Measurement> {
    if !plan.crc.available() {
        return None;
    }
    let size = plan.size;
    time_calls(
        size,
        buf.len() / size.max(1),
        plan.trials,
        plan.trial_time,
        |slot| {
            let at = slot * size;
            plan.crc
                .update(!0, black_box(&buf[at..at + size]))
                .unwrap_or(0)
        },
    )
}

/// Times `call(slot)` for slots 0, 1, ... `slots - 1` in turn, as many calls per trial as
/// `trial_time` needs (found by doubling), `trials` times; each call handles `size` bytes.
/// `None` if there is nothing to time.
pub fn time_calls(
    size: usize,
    slots: usize,
    trials: usize,
    trial_time: Duration,
    mut call: impl FnMut(usize) -> u32,
) -> Option<Measurement> {
    if size == 0 || slots == 0 || trials == 0 {
        return None;
    }
    let mut next = 0;
    let mut one = || {
        let slot = next;
        next = (next + 1) % slots;
        black_box(call(slot))
    };
    // Calls per trial: enough for `trial_time`, found by doubling.
    let mut calls: u64 = 1;
    loop {
        let t = Instant::now();
        for _ in 0..calls {
            one();
        }
        if t.elapsed() >= trial_time || calls >= 1 << 30 {
            break;
        }
        calls *= 2;
    }
    let mut ns = Vec::with_capacity(trials);
    let mut per_byte = Vec::with_capacity(trials);
    for _ in 0..trials {
        let (t0, c0) = (Instant::now(), ticks());
        for _ in 0..calls {
            one();
        }
        let (elapsed, c1) = (t0.elapsed(), ticks());
        ns.push(elapsed.as_nanos() as f64 / calls as f64);
        if let (Some(c0), Some(c1)) = (c0, c1) {
            per_byte.push(c1.wrapping_sub(c0) as f64 / (calls as f64 * size as f64));
        }
    }
    Some(Measurement {
        ns_per_call: Spread::of(ns)?,
        ticks_per_byte: Spread::of(per_byte),
        calls_per_trial: calls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_digest::Algorithm;

    fn plan(crc: LabCrc, size: usize, cache: Cache) -> Plan {
        Plan {
            crc,
            size,
            cache,
            trials: 3,
            trial_time: Duration::from_millis(2),
        }
    }

    #[test]
    fn medians_lie_within_their_spread_and_throughput_follows_from_time() {
        let m = measure(&plan(LabCrc::Digest(Algorithm::Sarwate), 4096, Cache::Warm)).unwrap();
        let s = m.ns_per_call;
        assert!(
            s.min > 0.0 && s.min <= s.median && s.median <= s.max,
            "{s:?}"
        );
        assert!((m.gb_per_s(4096) - 4096.0 / s.median).abs() < 1e-9);
        if let Some(t) = m.ticks_per_byte {
            assert!(
                t.min > 0.0 && t.min <= t.median && t.median <= t.max,
                "{t:?}"
            );
        }
        assert!(m.calls_per_trial >= 1);
    }

    #[test]
    fn cold_walks_a_set_and_empty_plans_measure_nothing() {
        let cold = Cache::Cold { set_bytes: 1 << 20 };
        assert!(measure(&plan(LabCrc::Digest(Algorithm::Hardware), 8192, cold)).is_some());
        assert!(measure(&plan(LabCrc::Digest(Algorithm::Hardware), 0, Cache::Warm)).is_none());
        let mut p = plan(LabCrc::Digest(Algorithm::Hardware), 64, Cache::Warm);
        p.trials = 0;
        assert!(measure(&p).is_none());
    }

    #[test]
    fn the_tsc_rate_is_plausible() {
        if let Some(hz) = tsc_hz(Duration::from_millis(20)) {
            assert!((1e8..1e10).contains(&hz), "{hz}");
        }
    }
}
