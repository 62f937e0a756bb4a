//! What the emulated link really does, measured through it: the round-trip time of small UDP
//! probes echoed from inside the namespace against the configured delays, the rate a paced
//! UDP stream arrives at against the configured rate, and how late the forwarder's packets
//! left against their schedule while it carried them.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::forward::Lateness;
use super::{EmulatedLink, LinkSpec};
use crate::error::LabError;

/// UDP and IPv4 headers: what a datagram adds to its payload on the wire.
const UDP_IP_HEADERS: usize = 28;
/// Round-trip probes sent.
const RTT_PROBES: usize = 50;
/// Probes of the rate are paced this much above the link's rate, so that its queue, not
/// the sender, sets the pace.
const OVERDRIVE: f64 = 1.2;

/// Round-trip times of small probes, microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RttProbe {
    /// Probes answered.
    pub answered: usize,
    /// Probes sent.
    pub sent: usize,
    /// Smallest.
    pub min_us: f64,
    /// Median.
    pub median_us: f64,
    /// 99th percentile (the largest, with 50 probes).
    pub p99_us: f64,
}

/// Configured against measured.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkAccuracy {
    /// What was configured.
    pub spec: LinkSpec,
    /// Round trips through the link.
    pub rtt: RttProbe,
    /// The rate a paced stream arrived at, initiator to target, bits per second of IP
    /// packets (`None` for an unlimited link: nothing to compare).
    pub forward_rate_bps: Option<f64>,
    /// How late the forwarder's packets left during the probes, initiator to target.
    pub forward_lateness: Lateness,
    /// The same, target to initiator.
    pub backward_lateness: Lateness,
}

impl LinkAccuracy {
    /// Measured median RTT over configured, minus one (0.01: 1 % long).
    pub fn rtt_error(&self) -> f64 {
        let want = self.spec.rtt().as_secs_f64() * 1e6;
        if want <= 0.0 {
            return 0.0;
        }
        self.rtt.median_us / want - 1.0
    }

    /// Measured rate over configured, minus one.
    pub fn rate_error(&self) -> Option<f64> {
        let want = self.spec.forward.rate_bps? as f64;
        Some(self.forward_rate_bps? / want - 1.0)
    }
}

impl EmulatedLink {
    /// Measures the link as it is set now: 50 echoes, then a paced stream for
    /// `rate_probe` (none when zero or the rate is unlimited). Run it with nothing else on
    /// the link.
    pub fn measure_accuracy(&self, rate_probe: Duration) -> Result<LinkAccuracy, LabError> {
        let io = |what: &str, e: std::io::Error| LabError::Link(format!("{what}: {e}"));
        self.forward.take_lateness();
        self.backward.take_lateness();
        let rtt = self.probe_rtt().map_err(|e| io("round-trip probe", e))?;
        let spec = self.spec();
        let forward_rate_bps = match spec.forward.rate_bps {
            Some(rate) if !rate_probe.is_zero() => Some(
                self.probe_rate(rate, rate_probe)
                    .map_err(|e| io("rate probe", e))?,
            ),
            _ => None,
        };
        Ok(LinkAccuracy {
            spec,
            rtt,
            forward_rate_bps,
            forward_lateness: self.forward.take_lateness(),
            backward_lateness: self.backward.take_lateness(),
        })
    }

    fn probe_rtt(&self) -> std::io::Result<RttProbe> {
        let target = self.target_addr();
        let echo = self
            .in_netns(move || UdpSocket::bind((target.as_str(), 0)))
            .map_err(std::io::Error::other)?;
        let echo_addr = echo.local_addr()?;
        echo.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let echo_stop = Arc::clone(&stop);
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while !echo_stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = echo.recv_from(&mut buf) {
                    let _ = echo.send_to(&buf[..n], from);
                }
            }
        });
        let me = UdpSocket::bind((self.initiator_addr().as_str(), 0))?;
        me.connect(echo_addr)?;
        let wait = self.spec().rtt() * 2 + Duration::from_millis(200);
        me.set_read_timeout(Some(wait))?;
        let mut rtts = Vec::with_capacity(RTT_PROBES);
        for seq in 0..RTT_PROBES as u64 {
            let sent = Instant::now();
            me.send(&seq.to_ne_bytes())?;
            let mut buf = [0u8; 64];
            // Answers to earlier probes that came late are skipped by their number.
            while let Ok(n) = me.recv(&mut buf) {
                if n == 8 && buf[..8] == seq.to_ne_bytes() {
                    rtts.push(sent.elapsed().as_secs_f64() * 1e6);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        let _ = server.join();
        rtts.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if rtts.is_empty() {
                0.0
            } else {
                rtts[((rtts.len() - 1) as f64 * q).round() as usize]
            }
        };
        Ok(RttProbe {
            answered: rtts.len(),
            sent: RTT_PROBES,
            min_us: at(0.0),
            median_us: at(0.5),
            p99_us: at(0.99),
        })
    }

    /// Sends datagrams of a full MTU paced at [`OVERDRIVE`] times `rate` for `span` to a
    /// sink in the namespace; returns the rate they arrived at (IP bytes per second between
    /// the first arrival and the last).
    fn probe_rate(&self, rate: u64, span: Duration) -> std::io::Result<f64> {
        let target = self.target_addr();
        let sink = self
            .in_netns(move || UdpSocket::bind((target.as_str(), 0)))
            .map_err(std::io::Error::other)?;
        let sink_addr = sink.local_addr()?;
        // Room for the bursts the sender's 1 ms pacing makes, should the reader fall behind.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(&sink, 4 << 20);
        sink.set_read_timeout(Some(Duration::from_millis(300) + self.spec().rtt()))?;
        let payload = self.spec().mtu as usize - UDP_IP_HEADERS;
        let receiver = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            let (mut first, mut last, mut bytes) = (None, None, 0usize);
            loop {
                match sink.recv(&mut buf) {
                    Ok(n) => {
                        let now = Instant::now();
                        // The first packet's bytes arrived before the clock started.
                        if first.is_none() {
                            first = Some(now);
                        } else {
                            bytes += n + UDP_IP_HEADERS;
                        }
                        last = Some(now);
                    }
                    Err(_) if first.is_some() => break,
                    Err(e) => return Err(e),
                }
            }
            match (first, last) {
                (Some(a), Some(b)) if b > a => Ok(bytes as f64 * 8.0 / (b - a).as_secs_f64()),
                _ => Err(std::io::Error::other("too few packets arrived to time")),
            }
        });
        let me = UdpSocket::bind((self.initiator_addr().as_str(), 0))?;
        me.connect(sink_addr)?;
        let pkt = vec![0x5au8; payload];
        let wire = (payload + UDP_IP_HEADERS) as f64;
        let start = Instant::now();
        let mut sent = 0f64;
        while start.elapsed() < span {
            let due = start.elapsed().as_secs_f64() * rate as f64 * OVERDRIVE / 8.0;
            while sent + wire <= due {
                // A full device queue drops the datagram, as a wire would.
                let _ = me.send(&pkt);
                sent += wire;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        receiver
            .join()
            .map_err(|_| std::io::Error::other("the rate sink panicked"))?
    }
}
