//! The points of each preset.

use std::time::Duration;

/// How much to measure.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Scale {
    /// Seconds: two sizes, a few commands each (the test suite's run).
    Tiny,
    /// A few minutes: 4 KiB to 1 MiB by powers of four, 1 % loss.
    Quick,
    /// Longer: 4 KiB to 1 MiB by powers of two, more commands, 1 % and 3 % loss.
    Full,
}

impl Scale {
    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Quick => "quick",
            Scale::Full => "full",
        }
    }

    fn sizes(self) -> Vec<u32> {
        match self {
            Scale::Tiny => vec![4 << 10, 256 << 10],
            Scale::Quick => vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20],
            Scale::Full => (12..=20).map(|p| 1u32 << p).collect(),
        }
    }

    fn commands(self) -> u64 {
        match self {
            Scale::Tiny => 4,
            Scale::Quick => 40,
            Scale::Full => 200,
        }
    }

    fn time_cap(self) -> Duration {
        match self {
            // Generous: the test suite asserts that every command completes, and at 2 % loss
            // a 256 KiB read with a 1 s retry period often waits out two retries (a run
            // measured 1.3-2.3 s per command, so four commands overran a 5 s cap).
            Scale::Tiny => Duration::from_secs(30),
            Scale::Quick => Duration::from_secs(8),
            Scale::Full => Duration::from_secs(30),
        }
    }

    fn losses(self) -> Vec<f64> {
        match self {
            Scale::Tiny => vec![0.02],
            Scale::Quick => vec![0.01],
            Scale::Full => vec![0.01, 0.03],
        }
    }
}

/// The transport of a point.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Transport {
    /// iSCSI over TCP.
    Tcp,
    /// iSCSI over the experimental UDP transport.
    Udp,
}

impl Transport {
    /// "tcp" or "udp".
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Udp => "udp",
        }
    }
}

/// One measurement: a transport, a direction, a size, a loss rate and a timeout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// The study's figure it belongs to ("5.10" or "5.11").
    pub figure: &'static str,
    /// TCP or UDP.
    pub transport: Transport,
    /// Reads (true) or writes.
    pub read: bool,
    /// ExpectedDataTransferLength of each command, bytes.
    pub edtl: u32,
    /// Probability that the relay drops a datagram, either way (UDP only).
    pub loss: f64,
    /// The TransferContext timeout: the initiator's retry period and the target's sequence
    /// reception timeout.
    pub timeout: Duration,
    /// Commands to time.
    pub commands: u64,
    /// Most time spent on the point.
    pub time_cap: Duration,
}

/// The points of `scale`: Fig. 5.10 (no loss, both transports, 1 s), then Fig. 5.11 (UDP
/// with loss at the study's 0.1 s and at 1 s).
pub fn plan(scale: Scale) -> Vec<Point> {
    let mut points = Vec::new();
    let base = |figure, transport, read, edtl, loss, timeout_ms| Point {
        figure,
        transport,
        read,
        edtl,
        loss,
        timeout: Duration::from_millis(timeout_ms),
        commands: scale.commands(),
        time_cap: scale.time_cap(),
    };
    for read in [false, true] {
        for transport in [Transport::Tcp, Transport::Udp] {
            for &edtl in &scale.sizes() {
                points.push(base("5.10", transport, read, edtl, 0.0, 1000));
            }
        }
    }
    for read in [false, true] {
        for &loss in &scale.losses() {
            for timeout_ms in [100, 1000] {
                for &edtl in &scale.sizes() {
                    points.push(base("5.11", Transport::Udp, read, edtl, loss, timeout_ms));
                }
            }
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_covers_both_figures() {
        for scale in [Scale::Tiny, Scale::Quick, Scale::Full] {
            let p = plan(scale);
            let n = scale.sizes().len();
            assert_eq!(p.iter().filter(|p| p.figure == "5.10").count(), 2 * 2 * n);
            assert_eq!(
                p.iter().filter(|p| p.figure == "5.11").count(),
                2 * 2 * n * scale.losses().len()
            );
            assert!(p.iter().all(|p| p.edtl >= 4096 && p.edtl <= 1 << 20));
            assert!(p
                .iter()
                .filter(|p| p.transport == Transport::Tcp)
                .all(|p| p.loss == 0.0));
        }
    }
}
