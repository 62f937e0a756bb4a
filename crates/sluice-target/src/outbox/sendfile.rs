//! Data-In segments sent with `sendfile(2)` straight from a LUN file's page cache.
//!
//! A read of a mapped LUN file (memory-backed, see `sluice_storage::FileDevice`) already hands
//! the outbox a view of the page cache, so `writev` copies each byte once, into the socket's
//! buffers. With `sendfile` the socket buffers reference the page-cache pages instead, and
//! that copy goes too: over loopback the only copy left is the receiver's, and a NIC reads the
//! pages itself. Linux's in-kernel target (LIO) sends Data-In the same way (`sendpage`) when
//! there is no data digest.
//!
//! When: a data segment of at least [`SENDFILE_MIN`] bytes that
//! `sluice_storage::file_range` finds inside a mapped LUN file, on a TCP socket, with
//! DataDigest=None, while the switch is on ([`set_sendfile`], `SLUICE_SENDFILE=1`). The header
//! before it is written with `MSG_MORE` so both share TCP segments. Smaller segments keep
//! their single `writev` per batch.
//!
//! Off by default, because on loopback under BBR (this project's benchmark host) it loses:
//! the kernel splices a file into a socket 16 pages (64 KiB) per `sendmsg`, each page its own
//! fragment, so a 1 MiB segment becomes many more, smaller pushes, each arming the pacing
//! timer; 1 MiB reads ran at half the rate with 1.4 times the CPU per read (docs/performance.md,
//! "sendfile for file LUNs"). Under CUBIC (`--tcp-congestion cubic`) it halves the target's CPU
//! per read, but over loopback the receiver then copies 4 KiB page fragments, and libiscsi's
//! client on the same host lost more than the target saved ("Congestion control"). Where the
//! sending copy is the bottleneck and pushes are cheap (a real NIC, which then reads the pages
//! itself; no internal pacing) it is the path to try.
//!
//! What goes on the wire, and why that is acceptable:
//! * The bytes are read when the kernel transmits them (and again for a retransmission), not
//!   when the command ran: a write to the same blocks that lands meanwhile can show through,
//!   as with LIO. The mapped path already sent a view read at `writev` time rather than a
//!   snapshot (`BlockDevice::read_shared`); this moves the moment from "the outbox writes
//!   it" to "TCP sends it". SAM-5 makes no promise for a read that overlaps a SIMPLE write in
//!   flight. An initiator that waits for the read's status before writing still gets the old
//!   bytes: TCP delivers the data before the status that follows it, so the data was already
//!   received (and any later retransmission of it is a duplicate the receiver drops). The
//!   one case that can now differ is a write queued as ORDERED right behind a read, which the
//!   target starts once the read's status is queued, possibly before its data left the host;
//!   the outbox's own queue had the same window before, only shorter.
//! * Data digests need the bytes in user space (the CRC must describe exactly what is sent,
//!   and a page changing between CRC and transmission would turn into a digest error and a
//!   dropped connection), so with DataDigest=CRC32C segments are copied as before.
//! * `O_DIRECT` files and block devices are never mapped, so they never get here: their page
//!   cache may be stale against what `O_DIRECT` I/O wrote. Memory LUNs are not files.
//! * Truncation: the file must not shrink while served (as for the mapping, where touching a
//!   lost page raises SIGBUS). If it does, `sendfile` stops at the new end of file and
//!   returns 0: the connection is closed with an error rather than sending a short segment.
//!   UNMAP never punches holes in a mapped file (thin files are not mapped). If pages leave
//!   the page cache anyway (a hole punched by another program), the socket buffers hold
//!   references to the pages they took: those pages are not freed or reused for other data
//!   until the transmission is done, so no other file's or process's data can leak; the
//!   initiator gets either the old contents or zeros.
//! * The file stays open while its range is queued: each segment holds an `Arc` of the
//!   mapping's own descriptor (and the mapped bytes, kept for a fallback copy when the kernel
//!   refuses to splice).

use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use sluice_storage::FileRange;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Smallest data segment sent with `sendfile` (one `sendfile` per segment instead of one
/// `writev` per batch: 4 KiB reads keep their batching). Chosen, not tuned: on the benchmark
/// host sendfile lost at every size measured (128 KiB and 1 MiB).
pub(super) const SENDFILE_MIN: usize = 64 * 1024;

/// 0: not decided yet (the environment decides), 1: on, 2: off.
static SWITCH: AtomicU8 = AtomicU8::new(0);

/// Bytes sent with `sendfile`, by every connection of the process.
static SENT: AtomicU64 = AtomicU64::new(0);

/// Turns sending large Data-In segments of mapped LUN files with `sendfile(2)` on or off for
/// connections that start from now on. Off by default; `SLUICE_SENDFILE=1` (or `on`) in the
/// environment turns it on unless this is called. See docs/performance.md ("sendfile for file
/// LUNs").
pub fn set_sendfile(on: bool) {
    SWITCH.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// Bytes this process has sent with `sendfile(2)` so far (all targets and connections): shows
/// whether the zero-copy path is taken.
pub fn sendfile_bytes() -> u64 {
    SENT.load(Ordering::Relaxed)
}

/// Whether new connections may use `sendfile`.
pub(super) fn enabled() -> bool {
    match SWITCH.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            *FROM_ENV.get_or_init(|| {
                std::env::var("SLUICE_SENDFILE")
                    .is_ok_and(|v| matches!(v.trim(), "1" | "on" | "true" | "yes"))
            })
        }
    }
}

/// A queued data segment that is a range of a LUN file.
pub(super) struct FileSegment {
    /// The same bytes, mapped: for a copy if the kernel refuses `sendfile`.
    bytes: Bytes,
    file: Arc<File>,
    /// Where the unsent rest starts in the file.
    offset: u64,
}

impl FileSegment {
    /// `bytes` are the mapped view of `range` (same length).
    pub(super) fn new(bytes: Bytes, range: FileRange) -> Self {
        debug_assert_eq!(bytes.len(), range.len);
        Self {
            bytes,
            file: range.file,
            offset: range.offset,
        }
    }

    /// Bytes not yet sent.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// `n` more bytes were sent.
    pub(super) fn advance(&mut self, n: usize) {
        let _ = self.bytes.split_to(n);
        self.offset += n as u64;
    }

    /// The unsent rest as bytes, for a copy.
    pub(super) fn to_bytes(&self) -> Bytes {
        self.bytes.clone()
    }
}

/// Writes `slices` with `MSG_MORE` (more data follows at once) when `tcp` is writable.
pub(super) fn poll_send_more(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    slices: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    let n = ready!(poll_io(tcp, cx, || {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendFlags};
        let flags = SendFlags::MORE | SendFlags::NOSIGNAL;
        sendmsg(tcp, slices, &mut SendAncillaryBuffer::default(), flags).map_err(io::Error::from)
    }))?;
    if n == 0 && !slices.is_empty() {
        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
    }
    Poll::Ready(Ok(n))
}

/// Sends as much of `segment` as `tcp` takes now; the caller consumes what was sent.
pub(super) fn poll_sendfile(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    segment: &FileSegment,
) -> Poll<io::Result<usize>> {
    let want = segment.len();
    let n = ready!(poll_io(tcp, cx, || {
        let mut offset = segment.offset;
        rustix::fs::sendfile(tcp, &*segment.file, Some(&mut offset), want).map_err(io::Error::from)
    }))?;
    if n == 0 && want > 0 {
        // End of file inside the range: the file shrank while served.
        return Poll::Ready(Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "LUN file shorter than a queued Data-In segment",
        )));
    }
    SENT.fetch_add(n as u64, Ordering::Relaxed);
    Poll::Ready(Ok(n))
}

/// Whether `e` says this file cannot be spliced into this socket at all (rather than a broken
/// connection): the data is then copied instead.
pub(super) fn unsupported(e: &io::Error) -> bool {
    use rustix::io::Errno;
    matches!(
        Errno::from_io_error(e),
        Some(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
    )
}

/// Runs the non-blocking `op` once `tcp` is writable, as tokio's own writes do: on
/// `WouldBlock` the readiness is cleared and the wait registered with `cx`.
fn poll_io<T>(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    mut op: impl FnMut() -> io::Result<T>,
) -> Poll<io::Result<T>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        let probe = sluice_probe::span(sluice_probe::Stage::Syscall);
        let result = tcp.try_io(Interest::WRITABLE, &mut op);
        probe.close();
        match result {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return Poll::Ready(r),
        }
    }
}
