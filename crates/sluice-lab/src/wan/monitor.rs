//! The study's kernel monitors without a kernel patch: a thread samples a socket's TCP_INFO,
//! send-queue lengths and send-buffer size every half millisecond (so never more than a
//! millisecond apart), and the samples are summarised per run.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_tcp::{tcp_info, SendQueue};

/// The sampling period: half the study's millisecond, so that scheduling delays on a busy
/// machine still leave samples at most about a millisecond apart.
pub const PERIOD: Duration = Duration::from_micros(500);

/// One look at the socket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Microseconds since the monitor's epoch.
    pub t_us: u64,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Sender MSS.
    pub mss: u32,
    /// Slow-start threshold, segments (0 while unset).
    pub ssthresh: u32,
    /// Smoothed RTT.
    pub srtt_us: u32,
    /// Minimum RTT seen.
    pub min_rtt_us: u32,
    /// Segments in flight.
    pub unacked: u32,
    /// Retransmitted segments over the connection's life.
    pub total_retrans: u32,
    /// Delivery rate, bytes/s.
    pub delivery_rate: u64,
    /// Pacing rate, bytes/s.
    pub pacing_rate: u64,
    /// The peer's window, bytes.
    pub snd_wnd: u32,
    /// Busy time so far, us.
    pub busy_us: u64,
    /// Of it, limited by the receiver's window, us.
    pub rwnd_limited_us: u64,
    /// Of it, limited by the send buffer, us.
    pub sndbuf_limited_us: u64,
    /// Payload bytes acknowledged.
    pub acked: u64,
    /// Bytes in the send queue, sent or not (`SIOCOUTQ`).
    pub queued: u32,
    /// Of them not yet sent (`SIOCOUTQNSD`).
    pub unsent: u32,
    /// The send buffer's size (`SO_SNDBUF`).
    pub sndbuf: u32,
}

impl Sample {
    /// Stream bytes sent so far (acknowledged, or on the wire).
    pub fn sent(&self) -> u64 {
        self.acked + u64::from(self.queued.saturating_sub(self.unsent))
    }

    /// Stream bytes written into the socket so far.
    pub fn written(&self) -> u64 {
        self.acked + u64::from(self.queued)
    }

    /// Bytes in flight (sent, not acknowledged).
    pub fn in_flight(&self) -> u32 {
        self.queued.saturating_sub(self.unsent)
    }

    fn read(fd: &OwnedFd, epoch: Instant) -> std::io::Result<Self> {
        let t = epoch.elapsed();
        let i = tcp_info(fd)?;
        let q = SendQueue::read(fd)?;
        let sndbuf = sluice_tcp::send_buffer_bytes(fd)?;
        Ok(Self {
            t_us: t.as_micros() as u64,
            cwnd: i.snd_cwnd,
            mss: i.snd_mss,
            ssthresh: if i.ssthresh_set() { i.snd_ssthresh } else { 0 },
            srtt_us: i.rtt_us,
            min_rtt_us: i.min_rtt_us,
            unacked: i.unacked,
            total_retrans: i.total_retrans,
            delivery_rate: i.delivery_rate,
            pacing_rate: i.pacing_rate,
            snd_wnd: i.snd_wnd.unwrap_or(0),
            busy_us: i.busy_time_us,
            rwnd_limited_us: i.rwnd_limited_us,
            sndbuf_limited_us: i.sndbuf_limited_us,
            acked: i.payload_acked(),
            queued: q.queued,
            unsent: q.not_sent,
            sndbuf: u32::try_from(sndbuf).unwrap_or(u32::MAX),
        })
    }
}

/// A thread sampling one socket until stopped.
pub struct Monitor {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

impl Monitor {
    /// Samples `fd` (a duplicate of the socket: the same connection) every [`PERIOD`],
    /// timing samples from `epoch`. Stops by itself when the socket can no longer be read.
    pub fn start(fd: OwnedFd, epoch: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (Arc::clone(&stop), Arc::clone(&samples));
        let thread = std::thread::Builder::new()
            .name("wan-monitor".into())
            .spawn(move || {
                crate::link::precise_timers();
                let mut next = Instant::now();
                while !s.load(Ordering::Relaxed) {
                    match Sample::read(&fd, epoch) {
                        Ok(x) => out.lock().unwrap_or_else(|p| p.into_inner()).push(x),
                        Err(_) => break,
                    }
                    next += PERIOD;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        // Fell behind (a busy machine): start again from now.
                        next = now;
                    }
                }
            })
            .ok();
        Self {
            stop,
            samples,
            thread,
        }
    }

    /// The samples taken since the last call.
    pub fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the samples of one run say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TcpSummary {
    /// Samples.
    pub samples: usize,
    /// The 99th percentile of the gaps between samples, us.
    pub gap_p99_us: u64,
    /// Busy time over the run, s.
    pub busy_s: f64,
    /// Of it limited by the receiver's window, s.
    pub rwnd_limited_s: f64,
    /// Of it limited by the send buffer, s.
    pub sndbuf_limited_s: f64,
    /// Segments retransmitted during the run.
    pub retrans: u64,
    /// Largest congestion window, bytes.
    pub max_cwnd_bytes: u64,
    /// Largest send queue, bytes.
    pub max_queued: u64,
    /// Largest send buffer, bytes.
    pub max_sndbuf: u64,
    /// Mean smoothed RTT, ms.
    pub mean_srtt_ms: f64,
    /// The connection's minimum RTT at the end, ms.
    pub min_rtt_ms: f64,
}

/// Summarises a run's samples (`None` with fewer than two).
pub fn summarize(s: &[Sample]) -> Option<TcpSummary> {
    let (first, last) = (s.first()?, s.last()?);
    if s.len() < 2 {
        return None;
    }
    let mut gaps: Vec<u64> = s.windows(2).map(|w| w[1].t_us - w[0].t_us).collect();
    gaps.sort_unstable();
    let us = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e6;
    Some(TcpSummary {
        samples: s.len(),
        gap_p99_us: gaps[((gaps.len() - 1) as f64 * 0.99) as usize],
        busy_s: us(first.busy_us, last.busy_us),
        rwnd_limited_s: us(first.rwnd_limited_us, last.rwnd_limited_us),
        sndbuf_limited_s: us(first.sndbuf_limited_us, last.sndbuf_limited_us),
        retrans: u64::from(last.total_retrans.saturating_sub(first.total_retrans)),
        max_cwnd_bytes: s
            .iter()
            .map(|x| u64::from(x.cwnd) * u64::from(x.mss))
            .max()
            .unwrap_or(0),
        max_queued: s.iter().map(|x| u64::from(x.queued)).max().unwrap_or(0),
        max_sndbuf: s.iter().map(|x| u64::from(x.sndbuf)).max().unwrap_or(0),
        mean_srtt_ms: s.iter().map(|x| f64::from(x.srtt_us)).sum::<f64>() / s.len() as f64 / 1e3,
        min_rtt_ms: f64::from(last.min_rtt_us) / 1e3,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn samples_a_live_socket_in_order() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        let epoch = Instant::now();
        let m = Monitor::start(a.as_fd().try_clone_to_owned().unwrap(), epoch);
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            let mut n = 0;
            while n < 8 << 20 {
                n += b.read(&mut buf).unwrap();
            }
        });
        a.write_all(&vec![3u8; 8 << 20]).unwrap();
        reader.join().unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let s = m.take();
        drop(m);
        let sum = summarize(&s).unwrap();
        // How often it samples is a measurement (each run's report states its gaps), not
        // something a unit test on a shared machine can hold to a bound: only that it
        // sampled, in order.
        assert!(sum.samples >= 2, "{sum:?}");
        assert!(s.windows(2).all(|w| w[1].t_us >= w[0].t_us));
        assert!(s.windows(2).all(|w| w[1].acked >= w[0].acked));
        assert_eq!(s.last().unwrap().acked, 8 << 20);
        assert!(s.iter().all(|x| x.sent() <= x.written() && x.sndbuf > 0));
        assert!(sum.max_cwnd_bytes > 0 && sum.min_rtt_ms > 0.0);
    }

    #[test]
    fn summaries_are_deltas_over_the_run() {
        let mk = |t_us, busy_us, snd, retrans| Sample {
            t_us,
            busy_us,
            sndbuf_limited_us: snd,
            total_retrans: retrans,
            cwnd: 10,
            mss: 1000,
            ..Sample::default()
        };
        let s = [
            mk(0, 1_000_000, 0, 5),
            mk(500, 1_500_000, 250_000, 7),
            mk(1000, 2_000_000, 400_000, 9),
        ];
        let sum = summarize(&s).unwrap();
        assert_eq!(sum.busy_s, 1.0);
        assert_eq!(sum.sndbuf_limited_s, 0.4);
        assert_eq!(sum.retrans, 4);
        assert_eq!(sum.max_cwnd_bytes, 10_000);
        assert_eq!(sum.gap_p99_us, 500);
        assert!(summarize(&s[..1]).is_none());
    }
}
