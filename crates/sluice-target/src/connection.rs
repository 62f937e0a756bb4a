//! One TCP connection: the login phase, then full feature phase until logout or loss.
//!
//! An iSER connection (RFC 7145) is served here too: its login runs on the socket like any
//! other, through the iSER login shim (`crate::iser::IserLogin`); when the final Login
//! Response switches it to RDMA mode, the socket goes to the iSER datamover task and the
//! reader and outbox exchange PDUs with that task as values (`Reader::use_pdu_link`,
//! `Outbox::use_pdu_link`). Full feature phase does not know the difference.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use sluice_proto::framing::{Digests, FrameError, Framer};
use sluice_proto::iser::login::{JoinedSession, LoginEnd};
use sluice_proto::login::{LoginOutcome, LoginStatus, LoginStep, TargetLogin, LOGIN_SEGMENT_MAX};
use sluice_proto::pdu::{LoginResponse, Pdu};
use sluice_proto::seq::{SeqNum, Tsih};
use sluice_proto::target::registry::{Binding, ConnectionRef};
use sluice_proto::target::{
    Added, CloseReason, ConnId, ConnectionSetup, KeepaliveConfig, SessionConfig, TargetSession,
};
use sluice_proto::text::Role;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch, Notify};
use tracing::{debug, info, warn, Instrument};

use crate::config::TargetConfig;
use crate::context::Context;
use crate::login_env::LoginEnv;
use crate::metrics::{ConnCounters, LoginCounters};
use crate::outbox::Outbox;
use crate::sessions::{ConnEntry, SessionIdentity, SharedSession};
use crate::status::LoginFailure;

/// Largest read a busy-polling wait does itself, into a zeroed window (see
/// `Reader::spin_read`): enough for a batch of commands.
const DIRECT_READ: usize = 4096;

/// Smallest read buffer growth: enough for several small PDUs per `read` syscall.
const READ_CHUNK: usize = 64 * 1024;

/// Most a read asks for once reads keep filling what they are given: 4 KiB writes at queue
/// depth 32 are 132 KiB of PDUs, and a read that takes them all answers them with one
/// `writev` (see `Reader::size_reads`).
const READ_MAX: usize = 128 * 1024;

/// The receiving half of a connection's byte stream.
pub(crate) trait ReadHalf: AsyncRead + Send + Unpin {
    /// The TCP socket underneath, for busy polling; `None` for other streams.
    fn socket(&self) -> Option<socket2::SockRef<'_>> {
        None
    }

    /// The TCP socket's half itself, to give the socket to another owner (an iSER
    /// connection's RDMA provider); `None` for other streams.
    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedReadHalf> {
        None
    }
}

#[cfg(feature = "cost-probes")]
impl<R: ReadHalf> ReadHalf for sluice_probe::ProbedIo<R> {
    fn socket(&self) -> Option<socket2::SockRef<'_>> {
        self.0.socket()
    }

    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedReadHalf> {
        Box::new(self.0).into_tcp()
    }
}

impl<R: ReadHalf + ?Sized> ReadHalf for Box<R> {
    fn socket(&self) -> Option<socket2::SockRef<'_>> {
        (**self).socket()
    }

    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedReadHalf> {
        (*self).into_tcp()
    }
}

impl ReadHalf for tokio::net::tcp::OwnedReadHalf {
    fn socket(&self) -> Option<socket2::SockRef<'_>> {
        Some(socket2::SockRef::from(self.as_ref()))
    }

    fn into_tcp(self: Box<Self>) -> Option<tokio::net::tcp::OwnedReadHalf> {
        Some(*self)
    }
}

impl<S: AsyncRead + Send> ReadHalf for tokio::io::ReadHalf<S> {}

/// What a reader whose socket went elsewhere keeps in its place (see
/// [`Reader::use_pdu_link`]): nothing is read from it.
impl ReadHalf for tokio::io::Empty {}

/// Default busy-poll budget: how long a connection that just answered spins on its socket
/// (zero-timeout `poll`) for the initiator's next PDU before it sleeps in epoll. Override with
/// `SLUICE_BUSY_POLL_US` (0 disables). See docs/performance.md ("Busy polling").
const BUSY_POLL_US: u64 = 50;

/// Whether every connection busy-polls whenever it waits, whatever its queue depth and
/// whether or not the initiator waits for each answer (`set_busy_poll_always`, or
/// `SLUICE_BUSY_POLL=always`).
static BUSY_POLL_ALWAYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes connections that start from now on spin on their socket before every wait, not only
/// when the initiator waits for each answer: for a target given cores of its own
/// (`sluice target --threads N --busy-poll`), where a spin takes the CPU from no one else
/// and saves the sleep in epoll and the wake-up that otherwise come with every batch of
/// commands (docs/performance.md, "Busy polling").
pub fn set_busy_poll_always(on: bool) {
    BUSY_POLL_ALWAYS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// See [`set_busy_poll_always`].
pub(crate) fn busy_poll_always() -> bool {
    static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    BUSY_POLL_ALWAYS.load(std::sync::atomic::Ordering::Relaxed)
        || *FROM_ENV.get_or_init(|| std::env::var("SLUICE_BUSY_POLL").is_ok_and(|v| v == "always"))
}

/// Adaptive busy polling of one connection's socket.
///
/// A round trip at queue depth 1 is dominated by sleeping and waking (epoll, scheduler, and
/// in a VM the halted vCPU), not by work. Spinning for a bounded time after each answer keeps
/// the thread awake when the next command is about to arrive. A spin that ends empty-handed
/// is a miss: after `m` misses in a row the next `2^m - 1` waits (at most 1023) skip
/// spinning, so an idle or slow connection quickly stops burning CPU, and a busy one (whose
/// data is already there) spins for nothing.
#[derive(Debug)]
struct BusyPoll {
    budget: std::time::Duration,
    /// Spin before every wait (see [`set_busy_poll_always`]), not only at queue depth 1.
    always: bool,
    misses: u32,
    skip: u32,
}

impl BusyPoll {
    fn new() -> Self {
        static BUDGET_US: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let us = *BUDGET_US.get_or_init(|| {
            std::env::var("SLUICE_BUSY_POLL_US")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(BUSY_POLL_US)
        });
        Self {
            budget: std::time::Duration::from_micros(us),
            always: busy_poll_always(),
            misses: 0,
            skip: 0,
        }
    }

    /// Whether this wait should spin.
    fn should_spin(&mut self) -> bool {
        if self.budget.is_zero() {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    fn hit(&mut self) {
        self.misses = 0;
    }

    fn miss(&mut self) {
        self.misses = (self.misses + 1).min(10);
        self.skip = (1 << self.misses) - 1;
    }
}

/// Whether a read of `sock` would not block (data, end of stream or an error waits), asked
/// without waiting and without taking the socket's lock.
fn readable_now(sock: &socket2::SockRef<'_>) -> std::io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let socket: &socket2::Socket = sock;
    let mut fds = [PollFd::new(socket, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The receiving half: socket, buffer and framer.
pub(crate) struct Reader {
    rd: Box<dyn ReadHalf>,
    buf: BytesMut,
    pub framer: Framer,
    busy: BusyPoll,
    /// Set by the full-feature loop when spinning is allowed for the next wait (nothing
    /// waits to be written, the session is not shutting down).
    pub spin_ok: bool,
    /// PDUs decoded since the last socket read, and in the batch before: a connection that
    /// gets one PDU per read is latency-bound (queue depth 1) and worth spinning for; one that
    /// gets several per read has more in flight, and spinning would only take CPU from the
    /// initiator (on a shared machine) for no latency gain.
    decoded: u32,
    last_batch: u32,
    /// How much the next socket read asks for at least (0: only what the next PDU needs),
    /// grown while reads fill what they are given and shrunk when they come back far from
    /// full (`size_reads`).
    read_hint: usize,
    /// The test hook's faults (see `TargetConfig::fault_hook`), shared with the outbox.
    faults: Option<crate::faults::SharedFaults>,
    /// When the reader was last at the socket: PDUs handed out after a stall are checked
    /// against a close the initiator already sent (see `crate::peer_gone`).
    stall: crate::peer_gone::StallWatch,
    /// Set in RDMA mode (iSER): PDUs come from the datamover task as values, not from `rd`.
    link: Option<mpsc::Receiver<Pdu>>,
    /// RDMA mode: a PDU the fault hook duplicated, handed out again next.
    duplicate: Option<Pdu>,
}

/// Why reading stopped.
#[derive(Debug)]
pub(crate) enum ReadEnd {
    /// The peer closed the connection.
    Closed,
    /// A socket error.
    Io(std::io::Error),
    /// The stream cannot be framed any more (header digest, oversized segment).
    Fatal(FrameError),
}

/// What one decode attempt produced.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A whole PDU.
    Pdu(Pdu),
    /// A PDU that was consumed but must be answered with a Reject.
    Reject(FrameError),
}

impl Reader {
    fn new(rd: Box<dyn ReadHalf>) -> Self {
        // A cost-probes build times every socket read (see `sluice_probe::ProbedIo`).
        #[cfg(feature = "cost-probes")]
        let rd: Box<dyn ReadHalf> = Box::new(sluice_probe::ProbedIo(rd));
        Self {
            rd,
            buf: BytesMut::with_capacity(8192),
            // During login only login PDUs arrive, each at most 8192 data bytes
            // (RFC 7143 sections 6.3 and 13.12: the default MaxRecvDataSegmentLength applies
            // until login completes).
            framer: Framer::new(LOGIN_SEGMENT_MAX as u32),
            busy: BusyPoll::new(),
            spin_ok: false,
            decoded: 0,
            last_batch: 0,
            read_hint: 0,
            faults: None,
            stall: crate::peer_gone::StallWatch::new(),
            link: None,
            duplicate: None,
        }
    }

    /// Switches to RDMA mode (iSER, RFC 7145): from now on PDUs come from the datamover task
    /// over `rx`, already parsed (no framing, no digests: section 5.1). Returns the socket's
    /// receiving half for the datamover, and the bytes read from it but not yet decoded:
    /// bytes that came after the last PDU this reader handed out, which belong to whoever
    /// reads the socket next.
    pub(crate) fn use_pdu_link(
        &mut self,
        rx: mpsc::Receiver<Pdu>,
    ) -> (Box<dyn ReadHalf>, BytesMut) {
        self.link = Some(rx);
        self.faults = None;
        let rd = std::mem::replace(&mut self.rd, Box::new(tokio::io::empty()));
        (rd, std::mem::take(&mut self.buf))
    }

    /// Hands bytes read from `from` on to the fault hook, if there is one; the hook's reset
    /// ends the connection as a peer's reset would.
    fn after_read(&mut self, from: usize) -> Result<(), ReadEnd> {
        let Some(faults) = &self.faults else {
            return Ok(());
        };
        crate::faults::on_receive(faults, &mut self.buf, from);
        if crate::faults::reset_due(faults) {
            return Err(ReadEnd::Io(std::io::ErrorKind::ConnectionReset.into()));
        }
        Ok(())
    }

    /// Spins on the socket for up to the busy-poll budget, until bytes are there to read.
    /// `Ok(Some(n))`: `n` bytes were read into `buf` directly (0: end of stream);
    /// `Ok(None)`: nothing came (or spinning is off), or data is there but too much is
    /// expected for the small direct read: the caller reads through tokio.
    ///
    /// The spin asks the socket directly (`poll` with a zero timeout), behind tokio's back:
    /// tokio caches readiness, so polling the `AsyncRead` would not see new data until the
    /// reactor runs. `poll` reads the socket's state without taking its lock, unlike a
    /// `recv(MSG_PEEK)`, which contends with the kernel delivering the initiator's data into
    /// the same socket (on loopback, from the other CPU: a sixth of the target's time went to
    /// that spinlock during 4 KiB writes at queue depth 32, which also spin). When what is awaited is small (a header,
    /// a command: the latency-bound case) the bytes are also read directly, into a small
    /// zeroed window. Otherwise the read goes through tokio, whose cached readiness is still
    /// "readable" (the last tokio read succeeded) so it reads at once; had it been cleared, the
    /// read waits for the reactor as it would have anyway (slower, never stuck: the arrival
    /// raised an edge-triggered event). Reading behind the reactor is harmless to it: at worst
    /// its next read finds nothing and re-arms.
    fn spin_read(&mut self, need: usize) -> std::io::Result<Option<usize>> {
        use std::io::Read;
        if !self.spin_ok || (self.last_batch > 1 && !self.busy.always) || !self.busy.should_spin() {
            return Ok(None);
        }
        let Some(sock) = self.rd.socket() else {
            return Ok(None);
        };
        let deadline = std::time::Instant::now() + self.busy.budget;
        let spinning = sluice_probe::span(sluice_probe::Stage::Poll);
        while !readable_now(&sock)? {
            if std::time::Instant::now() >= deadline {
                self.busy.miss();
                return Ok(None);
            }
            // Polite spinning: on an idle CPU this returns at once (the thread stays awake,
            // which is the point); when something else is runnable here (the initiator on a
            // small box, another connection's worker) it runs first, so the spin does not take
            // the CPU the answer is waiting for.
            std::thread::yield_now();
        }
        spinning.close();
        self.busy.hit();
        if need > DIRECT_READ || self.read_hint > DIRECT_READ {
            return Ok(None);
        }
        let start = self.buf.len();
        self.buf.resize(start + DIRECT_READ, 0);
        let mut s: &socket2::Socket = &sock;
        let _probe = sluice_probe::span(sluice_probe::Stage::Syscall);
        loop {
            match s.read(&mut self.buf[start..]) {
                Ok(n) => {
                    self.buf.truncate(start + n);
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(start);
                    return if e.kind() == std::io::ErrorKind::WouldBlock {
                        Ok(None)
                    } else {
                        Err(e)
                    };
                }
            }
        }
    }

    /// Sizes the next read from how this one went: `got` bytes of the `offered` room.
    ///
    /// `BytesMut::reserve` on a buffer whose earlier PDUs are gone may grant just the room
    /// asked for, so asking only for what the next PDU needs (four times that: 192 bytes for
    /// a 48-byte header, 16 KiB for the rest of a 4 KiB write) kept 4 KiB writes at queue
    /// depth 32 at one to four PDUs per `recv`, each batch answered by a `writev` of its own
    /// (0.23 to 1.07 `recv` per I/O from one run to the next, which is where their IOPS
    /// varied 2x between runs). A read that fills its room means more is waiting, so the
    /// next asks for at least `READ_CHUNK`, then up to `READ_MAX`; reads far from full (an
    /// idle or latency-bound connection) shrink the hint back, so idle connections keep
    /// small buffers. See docs/performance.md, "Against SPDK's iSCSI target, one core each".
    fn size_reads(&mut self, got: usize, offered: usize) {
        if got >= offered {
            self.read_hint = (self.read_hint * 2).clamp(READ_CHUNK, READ_MAX);
        } else if got < self.read_hint / 4 {
            self.read_hint /= 2;
            if self.read_hint < READ_CHUNK / 4 {
                self.read_hint = 0;
            }
        }
    }

    /// Makes room for `want` more bytes without `BytesMut::reserve`'s growth path. Growing a
    /// buffer this reader owns alone reallocates it, and the reallocation copies all of it,
    /// the PDUs already decoded and gone included (up to its whole capacity), to keep a few
    /// unread bytes: 6 % of the target's CPU on 1 MiB writes to an RBD LU went to that copy.
    /// Reclaiming the buffer's own room (the unread bytes moved to its start) is kept, as it
    /// allocates nothing; otherwise a new buffer takes just the unread bytes, at most a
    /// partial PDU.
    fn make_room(&mut self, want: usize) {
        if self.buf.capacity() - self.buf.len() >= want || self.buf.try_reclaim(want) {
            return;
        }
        let mut fresh = BytesMut::with_capacity(self.buf.len() + want);
        fresh.extend_from_slice(&self.buf);
        self.buf = fresh;
    }

    /// Whether this connection spins before every wait (see [`set_busy_poll_always`]).
    pub(crate) fn polls_always(&self) -> bool {
        self.busy.always
    }

    /// Whether the buffer already holds the whole next PDU, so [`next`](Self::next) needs no
    /// read (or fails at once on a malformed header).
    #[cfg(test)]
    pub(crate) fn has_complete_pdu(&self) -> bool {
        if let Some(rx) = &self.link {
            return self.duplicate.is_some() || !rx.is_empty();
        }
        self.buf.len() >= sluice_proto::pdu::BHS_LEN && self.framer.bytes_needed(&self.buf) == 0
    }

    /// After a stall, ends the connection instead of handing out a PDU if the initiator has
    /// already closed or reset it: its commands were meant for a connection it has given up
    /// on (see `crate::peer_gone`).
    fn unless_peer_gone(&mut self) -> Result<(), ReadEnd> {
        use crate::peer_gone::{peer_gone, Gone};
        if !self.stall.stalled() {
            return Ok(());
        }
        let Some(sock) = self.rd.socket() else {
            return Ok(());
        };
        let gone = peer_gone(&sock).map_err(ReadEnd::Io)?;
        let Some(gone) = gone else {
            return Ok(());
        };
        warn!(
            unexecuted_bytes = self.buf.len(),
            ?gone,
            "the initiator left this connection while the target was stalled: \
             its remaining commands are not executed"
        );
        Err(match gone {
            Gone::Closed => ReadEnd::Closed,
            Gone::Reset => ReadEnd::Io(std::io::ErrorKind::ConnectionReset.into()),
        })
    }

    /// The next PDU (or a rejectable error, or why reading ends) when the buffer already
    /// holds it (in RDMA mode: when the datamover has handed one over); `None` when getting
    /// it needs a read, which only [`next`](Self::next) does. Lets the connection's loop take
    /// a batch of buffered commands one after the other without going back to its `select!`
    /// (and the wake-up, shutdown and timer futures it sets up) for each.
    pub(crate) fn next_buffered(&mut self) -> Option<Result<Incoming, ReadEnd>> {
        if let Some(rx) = &mut self.link {
            // The test hook's faults (and a duplicate it left) are applied by `next` alone.
            if self.faults.is_some() || self.duplicate.is_some() {
                return None;
            }
            return rx.try_recv().ok().map(|pdu| Ok(Incoming::Pdu(pdu)));
        }
        self.decode_one()
    }

    /// Decodes the PDU at the front of the buffer; `None` when it is not all there yet.
    fn decode_one(&mut self) -> Option<Result<Incoming, ReadEnd>> {
        let framing = sluice_probe::span(sluice_probe::Stage::Framing);
        let decoded = self.framer.decode(&mut self.buf);
        framing.close();
        match decoded {
            Ok(Some(pdu)) => {
                self.decoded += 1;
                Some(self.unless_peer_gone().map(|()| Incoming::Pdu(pdu)))
            }
            Ok(None) => None,
            Err(e) if e.can_continue() => Some(Ok(Incoming::Reject(e))),
            Err(e) => Some(Err(ReadEnd::Fatal(e))),
        }
    }

    /// The next PDU (or a rejectable error), reading from the socket as needed (in RDMA
    /// mode: the next PDU the datamover hands over; `Closed` once it is gone).
    pub(crate) async fn next(&mut self) -> Result<Incoming, ReadEnd> {
        if let Some(rx) = &mut self.link {
            if let Some(pdu) = self.duplicate.take() {
                return Ok(Incoming::Pdu(pdu));
            }
            loop {
                let pdu = rx.recv().await.ok_or(ReadEnd::Closed)?;
                let Some(faults) = &self.faults else {
                    return Ok(Incoming::Pdu(pdu));
                };
                // The test hook on the PDUs the datamover hands over (see `crate::faults`).
                let copies = crate::faults::on_receive_pdu(faults, &pdu);
                if crate::faults::reset_due(faults) {
                    return Err(ReadEnd::Io(std::io::ErrorKind::ConnectionReset.into()));
                }
                match copies {
                    0 => continue,
                    1 => return Ok(Incoming::Pdu(pdu)),
                    _ => {
                        self.duplicate = Some(pdu.clone());
                        return Ok(Incoming::Pdu(pdu));
                    }
                }
            }
        }
        loop {
            if let Some(got) = self.decode_one() {
                return got;
            }
            let need = self.framer.bytes_needed(&self.buf).max(1);
            if self.decoded > 0 {
                self.last_batch = self.decoded;
                self.decoded = 0;
            }
            let before = self.buf.len();
            self.stall.reading();
            match self.spin_read(need) {
                Ok(Some(0)) => return Err(ReadEnd::Closed),
                Ok(Some(_)) => {
                    self.after_read(before)?;
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(ReadEnd::Io(e)),
            }
            self.make_room(need.max(READ_CHUNK.min(need * 4)).max(self.read_hint));
            let offered = self.buf.capacity() - self.buf.len();
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) => return Err(ReadEnd::Closed),
                Ok(n) => {
                    self.size_reads(n, offered);
                    self.after_read(before)?;
                }
                Err(e) => return Err(ReadEnd::Io(e)),
            }
        }
    }
}

/// Serves one accepted connection to the end. `local` is the address the initiator reached
/// (SendTargets reports it for wildcard portals); the connection belongs to that portal's
/// group (its TargetPortalGroupTag and target port).
pub(crate) async fn serve(
    ctx: Arc<Context>,
    rd: Box<dyn ReadHalf>,
    wr: crate::outbox::Writer,
    peer: SocketAddr,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    serve_inner(ctx, rd, wr, peer, local, shutdown, None).await;
}

/// Serves one accepted iSER connection to the end (RFC 7145): the login through the iSER
/// shim, then RDMA mode through the datamover task when the initiator asked for
/// RDMAExtensions, or iSCSI over TCP on the same socket when it did not (section 5.1).
/// Returns once the datamover task, if one started, has ended too.
pub(crate) async fn serve_iser(
    ctx: Arc<Context>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
    iser: crate::iser::IserLogin,
) {
    let (rd, wr) = tcp.into_split();
    let mover = serve_inner(
        ctx,
        Box::new(rd),
        Box::new(wr),
        peer,
        local,
        shutdown,
        Some(iser),
    )
    .await;
    if let Some(mover) = mover {
        let _ = mover.await;
    }
}

/// [`serve`], and [`serve_iser`] with `iser`; returns the iSER datamover task if the
/// connection switched to RDMA mode.
async fn serve_inner(
    ctx: Arc<Context>,
    rd: Box<dyn ReadHalf>,
    wr: crate::outbox::Writer,
    peer: SocketAddr,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
    mut iser: Option<crate::iser::IserLogin>,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut reader = Reader::new(rd);
    let mut outbox = Outbox::new(wr);
    // The configuration as this login found it: a change in the middle does not mix two.
    let config = ctx.config();
    let mut asked = LoginAsked::default();
    let portal_group = config.portal_group_of(local);

    let login = tokio::time::timeout(
        config.limits.login_timeout,
        login_phase(
            &ctx,
            &config,
            &mut reader,
            &mut outbox,
            &mut asked,
            portal_group,
            iser.as_mut(),
        ),
    )
    .await;
    let done = match login {
        Ok(Ok(done)) => done,
        Ok(Err(why)) => {
            asked.counters(&ctx, &config).failed(why);
            outbox.close().await;
            return None;
        }
        Err(_) => {
            asked.counters(&ctx, &config).failed(LoginFailure::Timeout);
            info!(%peer, "login did not complete in time; closing");
            return None;
        }
    };
    let logins = asked.counters(&ctx, &config);
    let LoginDone {
        outcome,
        binding,
        mut response,
    } = done;
    let span = tracing::info_span!(
        "session",
        initiator = %outcome.initiator_name,
        isid = %outcome.isid,
        tsih = outcome.tsih.0,
        cid = outcome.cid,
    );
    // The session's span covers the connection's log lines, and only them: entered here
    // and held across the awaits below, it would stay entered on the worker thread while
    // this task is suspended and tag other tasks' lines with this session.
    async {
        let wake = Arc::new(Notify::new());
        let counters = Arc::new(ConnCounters::default());
        let joining = Joining {
            ctx: &ctx,
            config: &config,
            logins: &logins,
            wake: &wake,
            counters: &counters,
            local,
            peer,
            portal_group,
        };
        // The session exists (or has the connection) before the initiator learns its TSIH from
        // the final Login Response, so a second connection's login can join it at once.
        let joins = matches!(binding, Binding::AddConnection { .. });
        let (session, id, conn_ref) = joining.join(&outcome, binding);
        if !still_admitted(&ctx, &session) {
            // A change removed the target, or took the initiator off its ACL, while this login
            // ran on the configuration before it; the change's sweep of the sessions may have
            // missed this one, which joined the table only now.
            info!(%peer, "the target or its ACL changed during the login; closing");
            logins.failed(LoginFailure::Authorization);
            leave_session(&ctx, &session, id, conn_ref);
            return None;
        }
        // The iSER shim sees the final Login Response too: it says whether the connection
        // switches to RDMA mode (RFC 7145 section 5.1). A connection joining a session takes
        // the session's mode, FirstBurstLength and unexpected-PDU limit, which the shim was
        // told at the login's first request, and may refuse RDMA mode for it
        // (`TargetLoginShim::joins_session`).
        let iser_end = iser.as_mut().map(|i| i.response(&mut response));
        let refused = match iser_end {
            Some(LoginEnd::Failed) => Some(
                "iSER login refused: the session's FirstBurstLength needs more Sends per \
                 command than this connection's receive buffers provision",
            ),
            _ if joins => refuse_other_mode(&session, iser_end, &mut response),
            _ => {
                // The leading connection settles the session's mode (RFC 7145 section
                // 6.3.1), recorded before the final response gives the initiator the TSIH.
                let end = iser_end.unwrap_or(LoginEnd::Tcp);
                if let Some(t) = JoinedSession::of(end, outcome.params.first_burst_length) {
                    session.set_transport(t);
                }
                None
            }
        };
        let status = response.status;
        if send_login(&mut outbox, response).await.is_none() {
            logins.failed(LoginFailure::Aborted);
            leave_session(&ctx, &session, id, conn_ref);
            return None;
        }
        if let Some(why) = refused {
            warn!(%peer, class = status.class, detail = status.detail, "{why}");
            logins.failed(LoginFailure::of(status));
            leave_session(&ctx, &session, id, conn_ref);
            outbox.close().await;
            return None;
        }
        let mut mover = None;
        match (iser, iser_end) {
            (Some(iser), Some(end @ LoginEnd::Rdma { .. })) => {
                match switch_to_rdma(&ctx, &mut reader, &mut outbox, iser, end) {
                    Ok(task) => mover = Some(task),
                    Err(why) => {
                        // The login did not complete: the connection ends before full feature
                        // phase, so it is counted with the failed logins, not the good ones.
                        logins.failed(why.failure);
                        ctx.iser.errors.fetch_add(1, Ordering::Relaxed);
                        warn!(%peer, "iSER connection closed: {}", why.reason);
                        leave_session(&ctx, &session, id, conn_ref);
                        return None;
                    }
                }
            }
            (Some(_), Some(LoginEnd::Tcp)) => {
                // RFC 7145 section 5.1: without RDMAExtensions=Yes the connection is plain iSCSI
                // over TCP, served on from here like any other.
                ctx.iser.tcp_connections.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        // Counted only now: a connection that could not enter RDMA mode never logged in.
        logins.succeeded();
        info!(%peer, target = outcome.target_name.as_deref().unwrap_or("(discovery)"), "logged in");
        debug!(params = ?outcome.params, "negotiated");
        if mover.is_none() {
            configure_stream(&mut reader, &mut outbox, &outcome, &config);
        } else {
            configure_rdma_faults(&mut reader, &mut outbox, &outcome, &config);
        }

        drop(config);
        // Held for the connection's life: a target removed meanwhile (its sessions are closed)
        // stays usable until this connection is gone.
        let target = session.target.as_deref().and_then(|n| ctx.target(n));
        let end = crate::ffp::Connection::new(
            &ctx,
            target.as_deref(),
            Arc::clone(&session),
            id,
            &mut outbox,
            wake,
            shutdown,
            counters,
        )
        .run(&mut reader)
        .await;
        info!(reason = %end, "connection closed");
        leave_session(&ctx, &session, id, conn_ref);
        outbox.close().await;
        mover
    }
    .instrument(span)
    .await
}

/// A join whose connection would not be in its session's mode, RDMA or TCP (the session's
/// leading connection settled it: RDMAExtensions is leading-only and session-wide, RFC 7145
/// section 6.3.1), such as a join through a portal without iSER to a session in RDMA mode,
/// is refused: the final Login Response says 0x0208, "can't include in session" (RFC 7143
/// section 11.13.5: the target cannot span the session to this connection). `None` when the
/// modes agree.
fn refuse_other_mode(
    session: &SharedSession,
    iser_end: Option<LoginEnd>,
    response: &mut LoginResponse,
) -> Option<&'static str> {
    let rdma = matches!(iser_end, Some(LoginEnd::Rdma { .. }));
    if session.transport().rdma == rdma {
        return None;
    }
    response.status = LoginStatus::CANT_INCLUDE_IN_SESSION;
    response.transit = false;
    response.data = bytes::Bytes::new();
    Some(if rdma {
        "login refused: the connection would be in iSER's RDMA mode, its session is not \
         (RDMAExtensions is leading-only, RFC 7145 section 6.3.1)"
    } else {
        "login refused: the session is in iSER's RDMA mode and this portal does not serve \
         iSER (RDMAExtensions is leading-only, RFC 7145 section 6.3.1)"
    })
}

/// Why a connection whose login ended in RDMA mode could not switch to it.
struct RdmaRefused {
    /// How the login counts it.
    failure: LoginFailure,
    reason: String,
}

/// Hands the socket of a connection whose login ended in RDMA mode to a new iSER datamover
/// task, and switches the reader and outbox to exchanging PDUs with it. `Err` says why the
/// connection cannot go on.
fn switch_to_rdma(
    ctx: &Arc<Context>,
    reader: &mut Reader,
    outbox: &mut Outbox,
    iser: crate::iser::IserLogin,
    end: LoginEnd,
) -> Result<tokio::task::JoinHandle<()>, RdmaRefused> {
    let (to_mover, from_core) = mpsc::channel(crate::iser::LINK_DEPTH);
    let (to_core, from_mover) = mpsc::channel(crate::iser::LINK_DEPTH);
    let (rd, unread) = reader.use_pdu_link(from_mover);
    let wr = outbox.use_pdu_link(to_mover);
    if !unread.is_empty() {
        // RFC 7145 section 5.1: the initiator sends nothing between its final Login Request
        // and the final Login Response (its iSER Hello follows the response); bytes in
        // between are neither iSCSI nor iSER. Like any other PDU than a Login Request
        // before full feature phase, they abort the login.
        return Err(RdmaRefused {
            failure: LoginFailure::Aborted,
            reason: format!(
                "protocol error: {} bytes arrived after the final Login Request, before the \
                 final Login Response switched the connection to RDMA mode",
                unread.len()
            ),
        });
    }
    let target_error = |reason: &str| RdmaRefused {
        failure: LoginFailure::TargetError,
        reason: reason.to_owned(),
    };
    let tcp = match (rd.into_tcp(), wr.into_tcp()) {
        (Some(rd), Some(wr)) => rd
            .reunite(wr)
            .map_err(|_| target_error("the socket's halves do not belong together"))?,
        _ => return Err(target_error("not a TCP socket: RDMA mode needs one")),
    };
    Ok(iser.start_rdma(Arc::clone(ctx), tcp, end, from_core, to_core))
}

/// The byte stream's settings once logged in (TCP streaming mode only).
fn configure_stream(
    reader: &mut Reader,
    outbox: &mut Outbox,
    outcome: &LoginOutcome,
    config: &TargetConfig,
) {
    // Digests apply from the first PDU after the final Login Response (RFC 7143 section
    // 13.1).
    let digests = Digests::negotiated(&outcome.params);
    reader.framer.set_digests(digests);
    // At ErrorRecoveryLevel 1 and above a PDU with a bad header digest costs the PDU, not
    // the connection (RFC 7143 section 7.8); the core's timers and SNACKs recover it.
    reader
        .framer
        .set_header_resync((outcome.params.error_recovery_level >= 1).then_some(Role::Target));
    reader
        .framer
        .set_max_data_segment(outcome.params.target_max_recv_data_segment_length);
    outbox.set_digests(digests);
    if let Some(hook) = &config.fault_hook {
        let faults = std::sync::Arc::new(std::sync::Mutex::new(hook.connection(
            sluice_fault::Sender::Target,
            digests,
            outcome.params.target_max_recv_data_segment_length,
        )));
        reader.faults = Some(std::sync::Arc::clone(&faults));
        outbox.set_faults(faults);
    }
}

/// RDMA mode (iSER): the test hook, if there is one, on the PDUs the connection exchanges
/// with the datamover (see `crate::faults`). Its corruption rules cannot apply there (no
/// digests, RFC 7145 section 5.1): said once here, and counted as skipped PDU by PDU.
fn configure_rdma_faults(
    reader: &mut Reader,
    outbox: &mut Outbox,
    outcome: &LoginOutcome,
    config: &TargetConfig,
) {
    let Some(hook) = &config.fault_hook else {
        return;
    };
    if hook.plan().corrupts() {
        warn!(
            "fault hook: corruption does not apply to an iSER connection in RDMA mode (no \
             digests would notice it); drops, duplicates and resets do"
        );
    }
    let faults = std::sync::Arc::new(std::sync::Mutex::new(hook.connection(
        sluice_fault::Sender::Target,
        Digests::NONE,
        outcome.params.target_max_recv_data_segment_length,
    )));
    reader.faults = Some(std::sync::Arc::clone(&faults));
    outbox.set_faults(faults);
}

/// Whether the configuration in force still serves the session's target and admits its
/// initiator (discovery sessions always).
fn still_admitted(ctx: &Context, session: &SharedSession) -> bool {
    let Some(target) = session.target.as_deref() else {
        return true;
    };
    let config = ctx.config();
    ctx.target(target).is_some()
        && crate::discovery::find_target(&config, target)
            .is_some_and(|t| crate::discovery::admits(&t.acl, &session.initiator))
}

/// What a completed login hands to full feature phase.
struct LoginDone {
    outcome: Box<LoginOutcome>,
    binding: Binding<Arc<SharedSession>>,
    /// The final Login Response, sent once the session is ready.
    response: LoginResponse,
}

/// What the target knows of a connection whose login completed, for joining its session.
struct Joining<'a> {
    ctx: &'a Context,
    config: &'a TargetConfig,
    logins: &'a LoginCounters,
    wake: &'a Arc<Notify>,
    counters: &'a Arc<ConnCounters>,
    local: SocketAddr,
    peer: SocketAddr,
    /// The tag of the portal group the connection arrived through.
    portal_group: u16,
}

impl Joining<'_> {
    fn entry(&self, id: ConnId) -> ConnEntry {
        ConnEntry {
            id,
            wake: Arc::clone(self.wake),
            local: self.local,
            peer: self.peer,
            counters: Arc::clone(self.counters),
        }
    }

    /// Creates the session of a leading login, or adds the connection to its session.
    fn join(
        &self,
        outcome: &LoginOutcome,
        binding: Binding<Arc<SharedSession>>,
    ) -> (Arc<SharedSession>, ConnId, ConnectionRef) {
        join_session(self, outcome, binding)
    }
}

fn join_session(
    j: &Joining<'_>,
    outcome: &LoginOutcome,
    binding: Binding<Arc<SharedSession>>,
) -> (Arc<SharedSession>, ConnId, ConnectionRef) {
    let (ctx, config) = (j.ctx, j.config);
    let now = tokio::time::Instant::now().into_std();
    let setup = ConnectionSetup {
        cid: outcome.cid,
        params: outcome.params,
        next_stat_sn: outcome.next_stat_sn,
        exp_cmd_sn: outcome.exp_cmd_sn,
    };
    match binding {
        Binding::NewSession { conn, replaced } => {
            if let Some(old) = replaced {
                info!(
                    old_nexus = old.nexus,
                    "session reinstated: the previous session is closed"
                );
                j.logins.session_reinstated();
                old.close(CloseReason::SessionReinstated);
            }
            let session_config = SessionConfig {
                session_type: outcome.session_type,
                queue_depth: config.offer.queue_depth,
                max_write_bytes_per_connection: config.limits.max_outstanding_bytes_per_connection,
                keepalive: config.keepalive.map(|k| KeepaliveConfig {
                    interval: k.interval,
                    timeout: k.timeout,
                }),
                recovery: config.recovery,
            };
            let (mut core, id) = TargetSession::new(session_config, setup, now);
            core.set_phase_collapse(config.offer.phase_collapse);
            let target = outcome.target_name.as_deref().map(str::to_ascii_lowercase);
            let nexus = ctx.sessions.next_nexus();
            if let Some(t) = target.as_deref().and_then(|n| ctx.target(n)) {
                // The I_T nexus as SCSI names it: the initiator port (RFC 7143 section
                // 4.2.7.4: InitiatorName and ISID) and the target port of this portal group.
                t.scsi.nexus_established(
                    nexus,
                    sluice_scsi::NexusIdentity {
                        initiator: sluice_scsi::TransportId::iscsi_port(
                            &outcome.initiator_name,
                            outcome.isid.0,
                        ),
                        target_port: j.portal_group,
                    },
                );
            }
            let who = SessionIdentity {
                nexus,
                target,
                initiator: outcome.initiator_name.clone(),
                session: conn.session,
                isid: outcome.isid,
                queue_depth: config.offer.queue_depth,
            };
            let session = Arc::new(SharedSession::new(core, who));
            session.register(j.entry(id));
            ctx.sessions.registry().attach(
                conn.session,
                Arc::clone(&session),
                outcome.params.max_connections,
            );
            (session, id, conn)
        }
        Binding::AddConnection { conn, handle, .. } => {
            let added = {
                let mut env = crate::ffp::DriverEnv::new(ctx, &handle);
                handle.lock().add_connection(setup, now, &mut env)
            };
            handle.register(j.entry(added.conn()));
            if let Added::Reinstated { replaced, .. } = added {
                info!("connection reinstated: the previous connection with this CID is closed");
                j.logins.connection_reinstated();
                handle.wake(replaced);
            }
            (handle, added.conn(), conn)
        }
    }
}

/// A connection's task is ending: the core forgets it, and the session ends with its last
/// connection (the SCSI layer drops the I_T nexus, the table forgets it). At
/// ErrorRecoveryLevel 2 a failed last connection leaves the session waiting for connection
/// recovery: it stays in the table, and a task runs its timers until a connection joins or
/// DefaultTime2Retain runs out.
fn leave_session(
    ctx: &Arc<Context>,
    session: &Arc<SharedSession>,
    id: ConnId,
    conn: ConnectionRef,
) {
    session.unregister(id);
    let ended = {
        let mut env = crate::ffp::DriverEnv::new(ctx, session);
        let mut core = session.lock();
        core.handle_connection_closed(id, &mut env);
        session.long_running.abort_abandoned(&core);
        session.wake_others(id, &core);
        core.is_ended()
    };
    ctx.sessions.registry().detach_connection(conn);
    if ended {
        end_session(ctx, session);
    } else if session.connection_count() == 0 {
        if session.lock().awaits_connection_recovery() {
            info!("the last connection failed; the session waits for connection recovery");
        } else {
            // ErrorRecoveryLevel 0 or 1: nothing to recover, but a command the SCSI layer is
            // still running keeps the I_T nexus until it returns.
            info!("the last connection is gone; the session ends when the SCSI layer returns its commands");
        }
        tokio::spawn(keep_session(Arc::clone(ctx), Arc::clone(session)));
    }
}

/// The session is over: out of the table, and its I_T nexus gone from the SCSI layer.
fn end_session(ctx: &Context, session: &SharedSession) {
    ctx.sessions.registry().remove_session(session.session);
    if let Some(t) = session.target.as_deref().and_then(|n| ctx.target(n)) {
        t.scsi.nexus_gone(session.nexus);
    }
}

/// Runs the timers of a session that has no connection (its tasks wait for reassignment,
/// ErrorRecoveryLevel 2, or the SCSI layer still runs a command of it) until a connection
/// joins it or it ends.
async fn keep_session(ctx: Arc<Context>, session: Arc<SharedSession>) {
    loop {
        let next = {
            let core = session.lock();
            if core.is_ended() {
                drop(core);
                info!("no connection recovery came in time; session over");
                end_session(&ctx, &session);
                return;
            }
            if session.connection_count() > 0 {
                // A connection joined: its task runs the timers now.
                return;
            }
            core.poll_timeout()
        };
        // Looked at again at least every second, to notice a joining connection.
        let soon = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        let at = next.map_or(soon, |t| tokio::time::Instant::from_std(t).min(soon));
        tokio::time::sleep_until(at).await;
        let now = tokio::time::Instant::now().into_std();
        let mut env = crate::ffp::DriverEnv::new(&ctx, &session);
        let mut core = session.lock();
        core.handle_timeout(now, &mut env);
        session.long_running.abort_abandoned(&core);
    }
}

/// What a login asked for, to count it against the right target.
#[derive(Debug, Default)]
struct LoginAsked {
    /// A discovery session.
    discovery: bool,
    /// The TargetName of a normal session.
    target: Option<String>,
}

impl LoginAsked {
    /// The counters this login's outcome goes to: its target's, discovery's, or those of
    /// names no target has (the name itself is never a label: it comes from the wire).
    fn counters<'c>(&self, ctx: &'c Context, config: &TargetConfig) -> LoginRef<'c> {
        if self.discovery {
            return LoginRef::Shared(&ctx.discovery_logins);
        }
        let known = self
            .target
            .as_deref()
            .filter(|n| crate::discovery::find_target(config, n).is_some())
            .and_then(|n| ctx.target(n));
        match known {
            Some(t) => LoginRef::Target(t),
            None => LoginRef::Shared(&ctx.unknown_logins),
        }
    }
}

/// Login counters: a target's (kept alive while counted), or the context's.
enum LoginRef<'c> {
    Target(Arc<crate::context::TargetRuntime>),
    Shared(&'c LoginCounters),
}

impl std::ops::Deref for LoginRef<'_> {
    type Target = LoginCounters;

    fn deref(&self) -> &LoginCounters {
        match self {
            LoginRef::Target(t) => &t.logins,
            LoginRef::Shared(c) => c,
        }
    }
}

/// Runs the login; `Err` says why it failed and the connection should be closed. On an iSER
/// connection each Login Request passes through `iser`'s shim after decoding and each Login
/// Response but the final one before it is written (the final one is the caller's).
async fn login_phase(
    ctx: &Context,
    config: &TargetConfig,
    reader: &mut Reader,
    outbox: &mut Outbox,
    asked: &mut LoginAsked,
    portal_group: u16,
    mut iser: Option<&mut crate::iser::IserLogin>,
) -> Result<LoginDone, LoginFailure> {
    let window = config.offer.queue_depth;
    // The initial StatSN is arbitrary (RFC 7143 section 4.2.2.2); a random start makes stale
    // responses from an earlier connection easy to spot. It stays below 2^31 because libiscsi
    // 1.19 compares StatSNs as signed integers and stops advancing its ExpStatSN past 2^31,
    // which would hide from the busy-polling heuristic that the initiator is pipelining.
    let stat_sn = SeqNum(rand::random::<u32>() >> 1);
    let mut login = TargetLogin::new(stat_sn, window);
    let mut first_request = true;
    let mut env = LoginEnv {
        config,
        sessions: &ctx.sessions,
        portal_group,
        bound: None,
        asked_target: Default::default(),
        asked_discovery: Default::default(),
    };
    loop {
        let pdu = match reader.next().await {
            Ok(Incoming::Pdu(p)) => p,
            Ok(Incoming::Reject(e)) => {
                debug!(error = %e, "malformed PDU during login; closing");
                return Err(LoginFailure::Aborted);
            }
            Err(e) => {
                debug!(reason = ?e, "connection ended during login");
                return Err(LoginFailure::Aborted);
            }
        };
        let Pdu::LoginRequest(mut req) = pdu else {
            // RFC 7143 section 4.2.4: only Login Requests are allowed before full feature
            // phase; anything else ends the connection.
            debug!(opcode = pdu.opcode(), "non-login PDU during login; closing");
            return Err(LoginFailure::Aborted);
        };
        let first = std::mem::take(&mut first_request);
        if let Some(iser) = iser.as_deref_mut() {
            if first && req.tsih != Tsih::NEW_SESSION {
                // A join takes its session's mode (RFC 7145 section 6.3.1); an unknown TSIH
                // is refused by the login core (0x020a).
                let session = ctx.sessions.registry().by_tsih(req.tsih).cloned();
                if let Some(session) = session {
                    iser.joins_session(session.transport());
                }
            }
            if let Err(why) = iser.request(&mut req) {
                ctx.iser.errors.fetch_add(1, Ordering::Relaxed);
                warn!("iSER connection closed: login: {why}");
                return Err(LoginFailure::Aborted);
            }
        }
        let step = login.handle_request(&req, &mut env);
        asked.discovery |= env.asked_discovery.get();
        if let Some(t) = env.asked_target.take() {
            asked.target = Some(t);
        }
        match step {
            LoginStep::Respond(mut rsp) => {
                if let Some(iser) = iser.as_deref_mut() {
                    iser.response(&mut rsp);
                }
                send_login(outbox, rsp).await.ok_or(LoginFailure::Aborted)?
            }
            LoginStep::Complete { response, outcome } => {
                let binding = env.bound.take().ok_or(LoginFailure::TargetError)?;
                return Ok(LoginDone {
                    outcome,
                    binding,
                    response,
                });
            }
            LoginStep::Fail(mut rsp) => {
                if let Some(iser) = iser.as_deref_mut() {
                    iser.response(&mut rsp);
                }
                warn!(
                    initiator = ?initiator_name(&req.data),
                    class = rsp.status.class,
                    detail = rsp.status.detail,
                    "login refused"
                );
                let why = LoginFailure::of(rsp.status);
                let _ = send_login(outbox, rsp).await;
                return Err(why);
            }
        }
    }
}

async fn send_login(outbox: &mut Outbox, rsp: LoginResponse) -> Option<()> {
    outbox.push(Pdu::LoginResponse(rsp));
    outbox.flush().await.ok()
}

/// The InitiatorName in a login request's text, for logging refused logins.
fn initiator_name(text: &[u8]) -> Option<String> {
    text.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(b"InitiatorName=")
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> Reader {
        let (stream, _) = tokio::io::duplex(64);
        let (rd, _) = tokio::io::split(stream);
        Reader::new(Box::new(rd))
    }

    /// A NOP-Out header: immediate, no data, ITT 0xffffffff.
    fn nop_out() -> [u8; sluice_proto::pdu::BHS_LEN] {
        let mut nop = [0u8; sluice_proto::pdu::BHS_LEN];
        nop[0] = 0x40;
        nop[1] = 0x80;
        nop[16..20].copy_from_slice(&[0xff; 4]);
        nop
    }

    /// A PDU read before the initiator's FIN is handed out as usual; one handed out after the
    /// reader stalled, with the FIN already there, ends the connection instead (what a
    /// resumed target must not execute: see `crate::peer_gone`).
    #[tokio::test]
    async fn commands_behind_a_close_are_not_handed_out_after_a_stall() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("nonblocking");
        let (rd, _wr) = tokio::net::TcpStream::from_std(server)
            .expect("tokio stream")
            .into_split();
        // Two NOP-Outs (immediate, no data), then the initiator closes its half.
        let nop = nop_out();
        client.write_all(&nop).expect("first NOP-Out");
        client.write_all(&nop).expect("second NOP-Out");
        client.shutdown(std::net::Shutdown::Write).expect("FIN");
        std::thread::sleep(std::time::Duration::from_millis(20));

        let mut r = Reader::new(Box::new(rd));
        assert!(
            matches!(r.next().await, Ok(Incoming::Pdu(_))),
            "no stall: handed out"
        );
        r.stall = crate::peer_gone::StallWatch::stalled_since(crate::peer_gone::STALL * 2);
        assert!(
            matches!(r.next().await, Err(ReadEnd::Closed)),
            "after a stall, the closed connection ends instead"
        );
    }

    /// Switched to RDMA mode, the reader hands out the PDUs the datamover sends and ends
    /// when it is gone; the bytes already read from the socket but not decoded come back
    /// to the caller, not lost.
    #[tokio::test]
    async fn rdma_mode_reads_pdus_from_the_datamover_and_returns_unread_bytes() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(4096);
        let (rd, _wr) = tokio::io::split(server);
        let mut r = Reader::new(Box::new(rd));
        let nop = nop_out();
        let mut bytes = nop.to_vec();
        bytes.extend_from_slice(b"ten bytes!");
        client.write_all(&bytes).await.unwrap();
        assert!(matches!(r.next().await, Ok(Incoming::Pdu(Pdu::NopOut(_)))));

        let (tx, rx) = mpsc::channel(2);
        let (_socket, unread) = r.use_pdu_link(rx);
        assert_eq!(&unread[..], b"ten bytes!");
        assert!(!r.has_complete_pdu());
        let mut framer = Framer::new(8192);
        let pdu = framer
            .decode(&mut BytesMut::from(&nop[..]))
            .unwrap()
            .unwrap();
        tx.send(pdu.clone()).await.unwrap();
        assert!(r.has_complete_pdu(), "a PDU is waiting in the channel");
        match r.next().await {
            Ok(Incoming::Pdu(got)) => assert_eq!(got, pdu),
            other => panic!("expected the PDU, got {other:?}"),
        }
        drop(tx);
        assert!(matches!(r.next().await, Err(ReadEnd::Closed)));
    }

    /// `next_buffered` hands out the PDUs a read already brought in, and never reads: a PDU
    /// only partly in the buffer waits for `next`.
    #[tokio::test]
    async fn buffered_pdus_are_handed_out_without_reading() {
        use tokio::io::AsyncWriteExt;
        let (mut client, server) = tokio::io::duplex(4096);
        let (rd, _wr) = tokio::io::split(server);
        let mut r = Reader::new(Box::new(rd));
        let nop = nop_out();
        let mut bytes = nop.repeat(3);
        bytes.truncate(2 * nop.len() + 20);
        client.write_all(&bytes).await.unwrap();
        assert!(r.next_buffered().is_none(), "nothing read yet");
        assert!(matches!(r.next().await, Ok(Incoming::Pdu(Pdu::NopOut(_)))));
        assert!(matches!(
            r.next_buffered(),
            Some(Ok(Incoming::Pdu(Pdu::NopOut(_))))
        ));
        assert!(r.next_buffered().is_none(), "the third is not all there");
        client.write_all(&nop[20..]).await.unwrap();
        assert!(r.next_buffered().is_none(), "its rest is not read here");
        assert!(matches!(r.next().await, Ok(Incoming::Pdu(Pdu::NopOut(_)))));
        assert!(r.next_buffered().is_none());
    }

    /// Reads that fill their room make the next ask for more, up to `READ_MAX`; reads that
    /// come back far from full bring it back down to what the next PDU needs.
    /// A hook whose connection faults the target's side with `plan` in RDMA mode.
    fn rdma_faults(plan: sluice_fault::FaultPlan) -> crate::faults::SharedFaults {
        let hook = sluice_fault::FaultHook::new(plan, 7);
        std::sync::Arc::new(std::sync::Mutex::new(hook.connection(
            sluice_fault::Sender::Target,
            Digests::NONE,
            8192,
        )))
    }

    fn ping(itt: u32) -> Pdu {
        Pdu::NopOut(sluice_proto::pdu::NopOut {
            immediate: true,
            lun: sluice_proto::seq::Lun(0),
            itt: sluice_proto::seq::Itt(itt),
            ttt: sluice_proto::seq::Ttt::RESERVED,
            cmd_sn: SeqNum(1),
            exp_stat_sn: SeqNum(1),
            data: bytes::Bytes::new(),
        })
    }

    /// In RDMA mode the test hook faults the PDUs the datamover hands over: every one
    /// duplicated, every third NOP-Out dropped.
    #[tokio::test]
    async fn rdma_mode_applies_the_fault_hook_to_pdus_from_the_datamover() {
        use std::num::NonZeroU64;
        let plan = sluice_fault::FaultPlan {
            to_target: sluice_fault::Rules {
                drop: vec![sluice_fault::DropEvery {
                    kind: sluice_fault::PduKind::NopOut,
                    every: NonZeroU64::new(3).unwrap(),
                }],
                duplicate: sluice_fault::Rate::ONE,
                ..sluice_fault::Rules::default()
            },
            ..sluice_fault::FaultPlan::default()
        };
        let mut r = reader();
        let (tx, rx) = mpsc::channel(8);
        let _ = r.use_pdu_link(rx);
        r.faults = Some(rdma_faults(plan));
        for itt in 1..=4 {
            tx.send(ping(itt)).await.unwrap();
        }
        drop(tx);
        let mut itts = Vec::new();
        loop {
            match r.next().await {
                Ok(Incoming::Pdu(p)) => itts.push(p.itt().0),
                Err(ReadEnd::Closed) => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(itts, [1, 1, 2, 2, 4, 4]);
    }

    /// The hook's reset ends an RDMA-mode connection as it ends a TCP one.
    #[tokio::test]
    async fn rdma_mode_resets_when_the_hook_says_so() {
        let plan = sluice_fault::FaultPlan {
            reset_every: std::num::NonZeroU64::new(2),
            ..sluice_fault::FaultPlan::default()
        };
        let mut r = reader();
        let (tx, rx) = mpsc::channel(8);
        let _ = r.use_pdu_link(rx);
        r.faults = Some(rdma_faults(plan));
        tx.send(ping(1)).await.unwrap();
        tx.send(ping(2)).await.unwrap();
        assert!(matches!(r.next().await, Ok(Incoming::Pdu(_))));
        match r.next().await {
            Err(ReadEnd::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            other => panic!("expected the reset, got {other:?}"),
        }
    }

    #[test]
    fn read_size_follows_how_full_reads_come_back() {
        let mut r = reader();
        assert_eq!(r.read_hint, 0);
        r.size_reads(192, 192);
        assert_eq!(r.read_hint, READ_CHUNK);
        r.size_reads(READ_CHUNK, READ_CHUNK);
        assert_eq!(r.read_hint, READ_MAX);
        r.size_reads(READ_MAX, READ_MAX);
        assert_eq!(r.read_hint, READ_MAX, "never above READ_MAX");
        r.size_reads(READ_MAX / 3, READ_MAX);
        assert_eq!(r.read_hint, READ_MAX, "a third full keeps the size");
        let mut hints = Vec::new();
        for _ in 0..4 {
            r.size_reads(100, READ_MAX);
            hints.push(r.read_hint);
        }
        assert_eq!(hints, [READ_MAX / 2, READ_MAX / 4, READ_MAX / 8, 0]);
    }

    /// Making room keeps the unread bytes, whether the buffer can reclaim its own front, must
    /// grow while owned alone, or is shared with a PDU handed out before (which stays as it
    /// was). What the change saves (copying the consumed front along) is measured in
    /// docs/performance.md, not here.
    #[test]
    fn making_room_keeps_the_unread_bytes() {
        let mut r = reader();
        let mut buf = BytesMut::with_capacity(1 << 20);
        buf.extend((0..(1u32 << 20)).map(|i| i as u8));
        drop(buf.split_to((1 << 20) - 10).freeze()); // consumed: the buffer is owned alone
        r.buf = buf;
        let unread = r.buf.to_vec();
        for want in [300 << 10, 3 << 20] {
            // Reclaimed in place first, then grown past the original allocation.
            r.make_room(want);
            assert_eq!(&r.buf[..], &unread[..]);
            assert!(r.buf.capacity() - r.buf.len() >= want);
        }

        // Shared: a decoded PDU still holds the front of the buffer.
        let held = r.buf.split_to(4).freeze();
        let unread = r.buf.to_vec();
        r.make_room(1 << 20);
        assert_eq!(&r.buf[..], &unread[..]);
        assert!(r.buf.capacity() - r.buf.len() >= 1 << 20);
        assert_eq!(&held[..], &[246, 247, 248, 249]);

        // Room enough already: nothing moves.
        let before = r.buf.as_ptr();
        r.make_room(16);
        assert_eq!(r.buf.as_ptr(), before);
    }
}
