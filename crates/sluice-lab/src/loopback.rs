//! What one loopback TCP stream can move, fed three ways from a LUN file: how much of a
//! cache-hot stream a plain sender keeps when it reads a LUN bigger than the caches.
//!
//! `iperf3 -l 1M` resends one 1 MiB buffer, which stays in the sender's L2 cache. A target
//! serving a LUN larger than the caches copies every byte from DRAM into the socket instead
//! (the one copy a sockets target cannot avoid on loopback: `MSG_ZEROCOPY` pages are copied
//! again when loopback delivers them, and `sendfile` hands the socket at most 16 pages per
//! `sendmsg`). This module measures the same plain sender three ways, alternating, against a
//! plain receiver on another thread:
//! - [`Source::Hot`]: `write` of the first chunk of the mapping, again and again (iperf3's
//!   pattern);
//! - [`Source::Cold`]: `write` of consecutive chunks walking the whole file (a target's
//!   pattern for sequential reads);
//! - [`Source::Sendfile`]: `sendfile` of consecutive chunks (no copy on the sending side).
//!
//! The file is mapped exactly as `sluice target` maps a LUN ([`FileDevice`], huge pages
//! included) and the chunks are [`BlockDevice::read_shared`] views of it, so `Cold` is the same
//! one-copy path the target's Data-In PDUs take, minus iSCSI.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use sluice_storage::{BlockDevice, FileDevice, FileOptions};

/// How the sender feeds the stream.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Source {
    /// `write` of one chunk, again and again: cache-hot, like `iperf3 -l`.
    Hot,
    /// `write` of consecutive chunks of the whole file: read from DRAM once per pass.
    Cold,
    /// `sendfile` of consecutive chunks of the whole file: no copy when sending.
    Sendfile,
}

impl Source {
    /// Every source, in the order a round runs them.
    pub const ALL: [Source; 3] = [Source::Hot, Source::Cold, Source::Sendfile];

    /// Short lowercase name (`hot`, `cold`, `sendfile`).
    pub fn name(self) -> &'static str {
        match self {
            Source::Hot => "hot",
            Source::Cold => "cold",
            Source::Sendfile => "sendfile",
        }
    }
}

/// One timed stream.
#[derive(Clone, Copy, Debug)]
pub struct StreamResult {
    /// How the sender fed it.
    pub source: Source,
    /// Bytes the receiver read (equal to the bytes sent: the stream ends cleanly).
    pub bytes: u64,
    /// From the first send to the receiver reading end-of-stream.
    pub elapsed: Duration,
}

impl StreamResult {
    /// Throughput in MiB (2^20 bytes) per second, the unit iscsi-perf prints as "MB/s".
    pub fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9) / f64::from(1u32 << 20)
    }
}

/// An open LUN file ready to feed streams.
pub struct LoopbackSource {
    device: FileDevice,
    file: File,
    chunk: usize,
    /// Bytes of whole chunks in the file: the cold walk wraps here.
    span: u64,
}

impl LoopbackSource {
    /// Maps `path` as `sluice target --file` does and waits (at most `huge_page_wait`) for the
    /// background collapse into huge pages to finish, so the cold source is what the target
    /// reads from once warm.
    ///
    /// Fails unless the file is fully allocated on tmpfs or ramfs (only such files are mapped)
    /// and holds at least one `chunk`.
    pub fn open(path: &Path, chunk: usize, huge_page_wait: Duration) -> io::Result<Self> {
        if chunk == 0 {
            return Err(invalid("the chunk size must not be zero"));
        }
        let options = FileOptions {
            read_only: true,
            ..FileOptions::default()
        };
        let device = FileDevice::open(path, options).map_err(io::Error::other)?;
        let span = device.size_bytes() - device.size_bytes() % chunk as u64;
        if span == 0 {
            return Err(invalid("the file is smaller than one chunk"));
        }
        if device.read_shared(0, chunk).is_none() {
            return Err(invalid(
                "the file is not mapped: it must be fully allocated on tmpfs or ramfs \
                 (e.g. fallocate -l 1G /dev/shm/lun)",
            ));
        }
        let deadline = Instant::now() + huge_page_wait;
        while device.huge_pages().is_some_and(|s| !s.finished) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let file = File::open(path)?;
        Ok(Self {
            device,
            file,
            chunk,
            span,
        })
    }

    /// The mapped LUN, e.g. to report its huge-page status.
    pub fn device(&self) -> &FileDevice {
        &self.device
    }

    /// Sends for `duration` over a fresh loopback connection and returns what the receiver
    /// read. The cold walk starts where `start` says (callers alternate sources, so each cold
    /// run continues where the last one stopped and never rereads a cache-warm stretch).
    pub fn stream(
        &self,
        source: Source,
        duration: Duration,
        start: &mut u64,
    ) -> io::Result<StreamResult> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
        let addr = listener.local_addr()?;
        // Connected before the receiver thread starts, so a failed connect cannot leave
        // `accept` waiting forever.
        let receiving = TcpStream::connect(addr)?;
        let (mut socket, _) = listener.accept()?;
        let chunk = self.chunk;
        let receiver = thread::spawn(move || receive_all(receiving, chunk));
        socket.set_nodelay(true)?;
        let began = Instant::now();
        let sent = self.send_for(&mut socket, source, duration, start);
        // Closing ends the receiver's loop whether or not sending failed.
        drop(socket);
        let received = receiver
            .join()
            .map_err(|_| io::Error::other("the receiver thread panicked"))??;
        let elapsed = began.elapsed();
        let sent = sent?;
        if sent != received {
            return Err(io::Error::other(format!(
                "sent {sent} bytes but the receiver read {received}"
            )));
        }
        Ok(StreamResult {
            source,
            bytes: received,
            elapsed,
        })
    }

    fn send_for(
        &self,
        socket: &mut TcpStream,
        source: Source,
        duration: Duration,
        start: &mut u64,
    ) -> io::Result<u64> {
        let began = Instant::now();
        let mut sent = 0u64;
        while began.elapsed() < duration {
            let offset = match source {
                Source::Hot => 0,
                Source::Cold | Source::Sendfile => {
                    let at = *start;
                    *start = (at + self.chunk as u64) % self.span;
                    at
                }
            };
            match source {
                Source::Hot | Source::Cold => {
                    let bytes = self
                        .device
                        .read_shared(offset, self.chunk)
                        .ok_or_else(|| io::Error::other("the file is no longer mapped"))?
                        .map_err(io::Error::other)?;
                    socket.write_all(&bytes)?;
                }
                Source::Sendfile => self.sendfile_chunk(socket, offset)?,
            }
            sent += self.chunk as u64;
        }
        Ok(sent)
    }

    fn sendfile_chunk(&self, socket: &TcpStream, offset: u64) -> io::Result<()> {
        let mut at = offset;
        let end = offset + self.chunk as u64;
        while at < end {
            // The kernel advances `at` by what it sent.
            let want = (end - at) as usize;
            let n = rustix::fs::sendfile(socket, &self.file, Some(&mut at), want)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "sendfile sent nothing",
                ));
            }
        }
        Ok(())
    }
}

/// The receiving side: reads into one buffer of `chunk` bytes until end-of-stream, as
/// iperf3's server does.
fn receive_all(mut socket: TcpStream, chunk: usize) -> io::Result<u64> {
    let mut buf = vec![0u8; chunk];
    let mut total = 0u64;
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The TCP congestion control a new loopback connection gets on this host (it decides the
/// ceiling: under BBR each send is paced, under CUBIC it is not).
pub fn congestion_control() -> io::Result<String> {
    let socket = std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    Ok(rustix::net::sockopt::tcp_congestion(&socket)?)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: usize = 256 << 10;

    /// A fully allocated file of `len` bytes on /dev/shm (tmpfs), as the target maps.
    fn tmpfs_file(len: usize) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new()
            .prefix("sluice-lab-loopback")
            .tempfile_in("/dev/shm")
            .expect("create a file on /dev/shm");
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).expect("fill the file");
        f.flush().expect("flush");
        f
    }

    #[test]
    fn every_source_delivers_exactly_what_it_sent() {
        let file = tmpfs_file(4 * CHUNK);
        let lun = LoopbackSource::open(file.path(), CHUNK, Duration::from_secs(5)).unwrap();
        let mut at = 0;
        for source in Source::ALL {
            let r = lun
                .stream(source, Duration::from_millis(100), &mut at)
                .unwrap();
            assert_eq!(r.source, source);
            assert!(
                r.bytes >= CHUNK as u64,
                "{source:?} moved {} bytes",
                r.bytes
            );
            assert_eq!(r.bytes % CHUNK as u64, 0, "{source:?}: whole chunks only");
            assert!(r.mib_per_s() > 0.0);
        }
    }

    #[test]
    fn cold_sources_walk_the_file_and_hot_stays_put() {
        let file = tmpfs_file(4 * CHUNK);
        let lun = LoopbackSource::open(file.path(), CHUNK, Duration::from_secs(5)).unwrap();
        let span = 4 * CHUNK as u64;
        let mut at = CHUNK as u64;
        let r = lun
            .stream(Source::Cold, Duration::from_millis(50), &mut at)
            .unwrap();
        let chunks = r.bytes / CHUNK as u64;
        assert_eq!(at, (CHUNK as u64 + chunks * CHUNK as u64) % span);
        let before = at;
        let r = lun
            .stream(Source::Sendfile, Duration::from_millis(50), &mut at)
            .unwrap();
        assert_eq!(at, (before + r.bytes) % span);
        let before = at;
        lun.stream(Source::Hot, Duration::from_millis(50), &mut at)
            .unwrap();
        assert_eq!(at, before, "the hot source always sends the first chunk");
    }

    #[test]
    fn refuses_files_it_cannot_map_and_empty_chunks() {
        let sparse = tempfile::Builder::new()
            .tempfile_in("/dev/shm")
            .expect("create a file on /dev/shm");
        sparse.as_file().set_len(4 * CHUNK as u64).unwrap();
        let e = LoopbackSource::open(sparse.path(), CHUNK, Duration::ZERO)
            .err()
            .expect("a sparse file is not mapped");
        assert!(e.to_string().contains("not mapped"), "{e}");

        let small = tmpfs_file(CHUNK);
        let e = LoopbackSource::open(small.path(), 2 * CHUNK, Duration::ZERO)
            .err()
            .expect("a file smaller than a chunk");
        assert!(e.to_string().contains("smaller than one chunk"), "{e}");
        let e = LoopbackSource::open(small.path(), 0, Duration::ZERO)
            .err()
            .expect("a zero chunk");
        assert!(e.to_string().contains("zero"), "{e}");
    }

    #[test]
    fn reports_a_congestion_control() {
        let cc = congestion_control().unwrap();
        assert!(!cc.is_empty() && cc.is_ascii(), "{cc:?}");
    }
}
