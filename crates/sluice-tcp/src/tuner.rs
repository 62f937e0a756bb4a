//! Growing the send buffer where the kernel's autotuning stops.
//!
//! Linux sizes a TCP send buffer from the congestion window (twice the memory of the
//! segments it allows), but never past `net.ipv4.tcp_wmem`'s third value (4 MiB by
//! default). A path whose bandwidth-delay product is larger, 6.25 MB for 1 Gbit/s at 50 ms,
//! then stalls exactly as Oguchi et al. found: the sender has data and the window has room,
//! but the buffer is full of unacknowledged bytes, so every round trip carries at most a
//! buffer's worth. The kernel says so: TCP_INFO's `tcpi_sndbuf_limited` counts the time
//! spent in that state (the congestion window not full, the application blocked on the
//! buffer).
//!
//! The tuner reads that time as the connection runs. When the buffer limited more than a
//! tenth of the busy time since its last look, it asks for twice the buffer, or twice what
//! the delivery rate times the minimum RTT needs if that is more, up to a ceiling; once the
//! buffer holds the path's bandwidth-delay product the limited time stops growing and so
//! does the buffer. It settles within a factor of two of what the path needs, and costs
//! nothing on a path the kernel already sizes well.
//!
//! Sans-IO: the caller reads TCP_INFO and the buffer size and applies the decision.

use crate::info::TcpInfo;

/// The default ceiling: 64 MiB holds the bandwidth-delay product of 1 Gbit/s at 500 ms or
/// 10 Gbit/s at 50 ms, twice over for the kernel's bookkeeping. The memory is only used
/// while that much data is in flight.
pub const DEFAULT_SEND_BUFFER_CEILING: usize = 64 << 20;

/// Busy time a decision waits for, so that a few jiffies of limited time (the counters'
/// resolution) do not read as a trend.
const MIN_BUSY_US: u64 = 20_000;

/// The share of busy time the buffer may limit before it grows: one part in ten.
const LIMITED_SHARE_DIVISOR: u64 = 10;

/// What to do with the send buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TunerDecision {
    /// Leave it.
    Keep,
    /// Set it to this many bytes (as the kernel accounts them).
    Grow(usize),
}

/// Watches one connection's send-buffer-limited time and grows its buffer.
#[derive(Clone, Debug)]
pub struct SendBufferTuner {
    ceiling: usize,
    /// Busy and send-buffer-limited time at the last decision.
    mark: Option<(u64, u64)>,
    /// The kernel gave less than asked (no CAP_NET_ADMIN past `net.core.wmem_max`): asking
    /// again would change nothing.
    exhausted: bool,
}

impl SendBufferTuner {
    /// A tuner that never grows the buffer past `ceiling` bytes.
    pub fn new(ceiling: usize) -> Self {
        Self {
            ceiling,
            mark: None,
            exhausted: false,
        }
    }

    /// Decides from a fresh TCP_INFO sample and the buffer's current size.
    pub fn decide(&mut self, info: &TcpInfo, current: usize) -> TunerDecision {
        let now = (info.busy_time_us, info.sndbuf_limited_us);
        let Some((busy0, limited0)) = self.mark else {
            self.mark = Some(now);
            return TunerDecision::Keep;
        };
        let busy = now.0.saturating_sub(busy0);
        if busy < MIN_BUSY_US {
            return TunerDecision::Keep;
        }
        self.mark = Some(now);
        let limited = now.1.saturating_sub(limited0);
        if self.exhausted || current >= self.ceiling || limited * LIMITED_SHARE_DIVISOR < busy {
            return TunerDecision::Keep;
        }
        // What the path carried per round trip, twice over for the kernel's accounting of
        // each segment's memory (the factor its own autotuning uses).
        let bdp = info.delivery_rate as u128 * u128::from(info.min_rtt_us) / 1_000_000;
        let want = (2 * current).max((2 * bdp).min(usize::MAX as u128) as usize);
        TunerDecision::Grow(want.min(self.ceiling))
    }

    /// Tells the tuner what the kernel made of a [`TunerDecision::Grow`]: when it gave no
    /// more than the buffer had, the tuner stops asking.
    pub fn applied(&mut self, before: usize, after: usize) {
        if after <= before {
            self.exhausted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::TCP_INFO_MIN_LEN;

    fn info(busy_us: u64, limited_us: u64, rate: u64, min_rtt_us: u32) -> TcpInfo {
        let mut i = TcpInfo::decode(&[0u8; TCP_INFO_MIN_LEN]).unwrap();
        i.busy_time_us = busy_us;
        i.sndbuf_limited_us = limited_us;
        i.delivery_rate = rate;
        i.min_rtt_us = min_rtt_us;
        i
    }

    #[test]
    fn grows_while_the_buffer_limits_and_stops_when_it_does_not() {
        let mut t = SendBufferTuner::new(64 << 20);
        let four = 4 << 20;
        assert_eq!(t.decide(&info(0, 0, 0, 50_000), four), TunerDecision::Keep);
        // Too little busy time yet to judge.
        assert_eq!(
            t.decide(&info(10_000, 9_000, 0, 50_000), four),
            TunerDecision::Keep
        );
        // Half the time limited by the buffer at 80 MB/s over 50 ms: 4 MB in flight, so
        // twice the buffer.
        assert_eq!(
            t.decide(&info(100_000, 50_000, 80_000_000, 50_000), four),
            TunerDecision::Grow(8 << 20)
        );
        // A measured product larger than twice the buffer wins.
        assert_eq!(
            t.decide(&info(200_000, 100_000, 200_000_000, 50_000), 8 << 20),
            TunerDecision::Grow(20_000_000)
        );
        // Less than a tenth of the busy time limited: the buffer is large enough.
        assert_eq!(
            t.decide(&info(300_000, 105_000, 119_000_000, 50_000), 20_000_000),
            TunerDecision::Keep
        );
    }

    #[test]
    fn stops_at_the_ceiling_and_when_the_kernel_gives_no_more() {
        let mut t = SendBufferTuner::new(10 << 20);
        t.decide(&info(0, 0, 0, 1), 8 << 20);
        assert_eq!(
            t.decide(&info(100_000, 90_000, 0, 1), 8 << 20),
            TunerDecision::Grow(10 << 20)
        );
        assert_eq!(
            t.decide(&info(200_000, 180_000, 0, 1), 10 << 20),
            TunerDecision::Keep
        );
        let mut t = SendBufferTuner::new(64 << 20);
        t.decide(&info(0, 0, 0, 1), 8 << 20);
        assert!(matches!(
            t.decide(&info(100_000, 90_000, 0, 1), 8 << 20),
            TunerDecision::Grow(_)
        ));
        t.applied(8 << 20, 8 << 20);
        assert_eq!(
            t.decide(&info(200_000, 180_000, 0, 1), 8 << 20),
            TunerDecision::Keep
        );
    }
}
