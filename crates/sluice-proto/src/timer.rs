//! When a driver moves its timer.
//!
//! The session cores' next deadline moves with almost every PDU: a keepalive's idle deadline
//! is the last PDU received plus the interval. A driver that re-armed its timer to every new
//! deadline would pay a timer-wheel removal and insertion per PDU. Deadlines are only ever
//! handled as "whatever is due at `now`" (`handle_timeout` does nothing early), so a timer that
//! fires before the current deadline is harmless: [`TimerArm`] moves the timer only when the
//! deadline comes earlier than where it is armed, and otherwise lets it fire and re-arms then.

use std::time::Instant;

/// The state of a driver's one timer.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct TimerArm {
    armed: Option<Instant>,
}

impl TimerArm {
    /// A timer not armed.
    pub const fn new() -> Self {
        Self { armed: None }
    }

    /// The core's next deadline is now `next` (from its `poll_timeout`). Returns where to
    /// re-arm the timer, or `None` to leave it as it is: armed no later than `next`, or
    /// disarmed with no deadline (an early firing is harmless, so a timer left armed after the
    /// deadline went away is too).
    pub fn update(&mut self, next: Option<Instant>) -> Option<Instant> {
        let next = next?;
        if self.armed.is_some_and(|at| at <= next) {
            return None;
        }
        self.armed = Some(next);
        Some(next)
    }

    /// Whether the timer is armed (a driver polls it only then).
    pub const fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// The timer fired: the driver calls the core's `handle_timeout`, then [`Self::update`]
    /// with the core's new deadline.
    pub fn fired(&mut self) {
        self.armed = None;
    }
}

#[cfg(test)]
#[path = "timer_tests.rs"]
mod tests;
