//! A plain TCP stream through the link, the study's iperf: one socket writing as fast as
//! TCP lets it to a sink inside the link's namespace, with the same socket settings and the
//! same monitor as the iSCSI runs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SocketType};
use sluice_tcp::{BufferPolicy, SendBufferTuner, SocketOptions, TunerDecision};

use super::monitor::{Monitor, Sample};
use crate::error::LabError;
use crate::link::EmulatedLink;

/// A sink that reads and discards every connection to it.
pub struct Sink {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Listens inside `link`'s namespace on the target's address.
    pub fn start(link: &EmulatedLink) -> Result<Self, LabError> {
        let host = link.target_addr();
        let listener = link.in_netns(move || {
            let l = TcpListener::bind((host.as_str(), 0))?;
            l.set_nonblocking(true)?;
            Ok(l)
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| LabError::Link(format!("the sink's address: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut c, _)) => {
                        let _ = c.set_nonblocking(false);
                        std::thread::spawn(move || {
                            let mut buf = vec![0u8; 1 << 20];
                            while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What one stream moved in its measured span.
#[derive(Clone, Debug, Default)]
pub struct StreamResult {
    /// Payload bytes acknowledged by the sink's kernel within the span.
    pub bytes: u64,
    /// The span, s.
    pub seconds: f64,
    /// The monitor's samples within the span.
    pub samples: Vec<Sample>,
}

/// Connects to `to` with `tcp` (set before the SYN), writes `chunk`-byte buffers for
/// `warmup` and then `span`, and measures what was acknowledged during `span`. `stop` ends
/// it early (the result is then not a measurement).
pub fn run_stream(
    to: SocketAddr,
    tcp: &SocketOptions,
    chunk: usize,
    warmup: Duration,
    span: Duration,
    stop: &dyn Fn() -> bool,
) -> std::io::Result<StreamResult> {
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None)?;
    tcp.apply(&fd)?;
    rustix::net::connect(&fd, &to)?;
    let mut sock = TcpStream::from(fd);
    // A write never blocks past the run by more than this.
    sock.set_write_timeout(Some(Duration::from_millis(200)))?;
    let epoch = Instant::now();
    let monitor = Monitor::start(sock.as_fd().try_clone_to_owned()?, epoch);
    let mut tuner = match tcp.send_buffer {
        BufferPolicy::Grow { ceiling } => Some(SendBufferTuner::new(ceiling)),
        _ => None,
    };
    let buf = vec![0xa5u8; chunk];
    let mut mark: Option<(Instant, u64)> = None;
    let mut next_tune = epoch;
    let end = epoch + warmup + span;
    while Instant::now() < end && !stop() {
        match sock.write(&buf) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
        let now = Instant::now();
        if mark.is_none() && now >= epoch + warmup {
            mark = Some((now, sluice_tcp::tcp_info(&sock)?.payload_acked()));
            monitor.take();
        }
        if let Some(t) = tuner.as_mut().filter(|_| now >= next_tune) {
            // The same rule as the initiator's driver: a blocking writer is always full.
            next_tune = now + Duration::from_millis(10);
            let info = sluice_tcp::tcp_info(&sock)?;
            let current = sluice_tcp::send_buffer_bytes(&sock)?;
            if let TunerDecision::Grow(n) = t.decide(&info, current) {
                let after = sluice_tcp::set_send_buffer(&sock, n)?;
                t.applied(current, after);
            }
        }
    }
    let (t0, acked0) = mark.unwrap_or((epoch, 0));
    let acked1 = sluice_tcp::tcp_info(&sock)?.payload_acked();
    let seconds = t0.elapsed().as_secs_f64();
    let samples = monitor.take();
    drop(monitor);
    let _ = sock.shutdown(std::net::Shutdown::Both);
    Ok(StreamResult {
        bytes: acked1.saturating_sub(acked0),
        seconds,
        samples,
    })
}
