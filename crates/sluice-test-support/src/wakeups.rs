//! How promptly this machine wakes a sleeping thread right now: a baseline for the tests
//! that check a timed loop (a sampler, a delay line) against its schedule.
//!
//! Such a test asserts two things of different kinds. What the code controls holds on any
//! machine (a delay is never short, a sample is never early). How late a thread wakes is the
//! scheduler's business: on a shared, loaded machine it grows by milliseconds whatever the
//! code does. So a test's upper bound is written as "the code's own allowance plus what a
//! thread that does nothing but sleep saw meanwhile", measured by [`Wakeups`] in the same
//! test, at the same time. A quiet machine then holds the code to the tight allowance; a
//! loaded one widens the bound by exactly the lateness it imposed on everyone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A thread sleeping `period` at a time on a fixed schedule (the schedule of a sampling
/// loop: the next deadline one period after the last; from now when it fell behind), until
/// [`Wakeups::finish`].
pub struct Wakeups {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Vec<u64>, Vec<u64>)>,
    period: Duration,
}

impl Wakeups {
    /// Starts the sleeper.
    pub fn start(period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let (mut gaps_us, mut lateness_us) = (Vec::new(), Vec::new());
            let mut last = Instant::now();
            let mut next = last;
            while !running.load(Ordering::Relaxed) {
                next += period;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
                let woke = Instant::now();
                gaps_us.push(woke.duration_since(last).as_micros() as u64);
                lateness_us.push(woke.saturating_duration_since(next).as_micros() as u64);
                last = woke;
            }
            (gaps_us, lateness_us)
        });
        Self {
            stop,
            thread,
            period,
        }
    }

    /// Stops the sleeper and summarises what it saw.
    pub fn finish(self) -> WakeupStats {
        self.stop.store(true, Ordering::Relaxed);
        let (mut gaps_us, lateness_us) = self.thread.join().expect("the sleeper thread");
        gaps_us.sort_unstable();
        let mean_lateness_us = if lateness_us.is_empty() {
            0.0
        } else {
            lateness_us.iter().sum::<u64>() as f64 / lateness_us.len() as f64
        };
        WakeupStats {
            gaps_us,
            mean_lateness_us,
            period: self.period,
        }
    }
}

/// What a sleeper saw: the gaps between its wake-ups (sorted) and how late it woke.
#[derive(Clone)]
pub struct WakeupStats {
    gaps_us: Vec<u64>,
    mean_lateness_us: f64,
    period: Duration,
}

impl WakeupStats {
    /// Wake-ups seen.
    pub fn wakeups(&self) -> usize {
        self.gaps_us.len()
    }

    /// The `q` quantile of the gaps, microseconds (the index rule of the lab's summaries:
    /// `(n - 1) * q`, rounded down). Zero without wake-ups.
    pub fn gap_quantile_us(&self, q: f64) -> u64 {
        if self.gaps_us.is_empty() {
            return 0;
        }
        self.gaps_us[((self.gaps_us.len() - 1) as f64 * q) as usize]
    }

    /// The mean gap between wake-ups, microseconds.
    pub fn mean_gap_us(&self) -> f64 {
        if self.gaps_us.is_empty() {
            return 0.0;
        }
        self.gaps_us.iter().sum::<u64>() as f64 / self.gaps_us.len() as f64
    }

    /// How late the sleeper woke on average, past each deadline, microseconds: the expected
    /// delay of one wake-up on this machine during the measurement.
    pub fn mean_lateness_us(&self) -> f64 {
        self.mean_lateness_us
    }
}

/// A summary, not every gap.
impl std::fmt::Debug for WakeupStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeupStats")
            .field("period", &self.period)
            .field("wakeups", &self.wakeups())
            .field("gap_p50_us", &self.gap_quantile_us(0.5))
            .field("gap_p99_us", &self.gap_quantile_us(0.99))
            .field("mean_lateness_us", &self.mean_lateness_us())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_follow_the_schedule() {
        let w = Wakeups::start(Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(30));
        let s = w.finish();
        assert!(s.wakeups() >= 2, "{s:?}");
        // A late wake-up shortens the next gap (the schedule does not slip), but no deadline
        // comes early: the gaps add up to at least a period each, so the largest is one.
        assert!(s.gap_quantile_us(1.0) >= 1_000, "{s:?}");
        assert!(s.mean_lateness_us() >= 0.0);
    }

    #[test]
    fn quantiles_of_known_gaps() {
        let s = WakeupStats {
            gaps_us: (1..=100).map(|i| 1_000 + i).collect(),
            mean_lateness_us: 50.5,
            period: Duration::from_millis(1),
        };
        assert_eq!(s.gap_quantile_us(0.99), 1_099);
        assert_eq!(s.gap_quantile_us(0.0), 1_001);
        assert_eq!(s.wakeups(), 100);
    }
}
