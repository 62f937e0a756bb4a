//! Raw throughput of the software provider: RDMA Writes or Reads of a fixed message size over
//! loopback TCP, with a fixed number outstanding. This is the ceiling an iSER datamover on
//! this provider can reach.

use std::io;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use crate::access::{Access, RemoteAddr, Sge, VaMode};
use crate::driver::SoftRdma;
use crate::pd::MemoryRegion;
use crate::qp::QpConfig;
use crate::work::{SendWr, WcStatus};

/// Which operation to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchOp {
    /// RDMA Write: the requester's data into the responder's region.
    Write,
    /// RDMA Read: the responder's region into the requester's.
    Read,
}

/// One measurement.
#[derive(Clone, Copy, Debug)]
pub struct BenchReport {
    /// The operation.
    pub op: BenchOp,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Bytes per work request.
    pub message_bytes: u32,
    /// Work requests outstanding at once.
    pub depth: usize,
    /// From the first post to the last completion.
    pub elapsed: Duration,
}

impl BenchReport {
    /// Payload throughput in Mbit/s.
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64().max(1e-9) / 1e6
    }
}

/// Moves `total_bytes` (rounded up to whole messages) with `op` in messages of
/// `message_bytes`, `depth` outstanding, between two endpoints connected over loopback TCP,
/// and times it from the first post to the last completion. Every completion must succeed.
/// Both endpoints run on the caller's runtime.
pub async fn loopback(
    op: BenchOp,
    total_bytes: u64,
    message_bytes: u32,
    depth: usize,
) -> io::Result<BenchReport> {
    loopback_on(op, total_bytes, message_bytes, depth, None).await
}

/// [`loopback`] with the responding endpoint (its socket and its tasks) on `responder`'s
/// runtime, as two peers run on a host with a core each: an iSCSI target and initiator in
/// one process each have a runtime thread of their own, and a ceiling measured with both
/// endpoints sharing one thread would be half a ceiling.
pub async fn loopback_on(
    op: BenchOp,
    total_bytes: u64,
    message_bytes: u32,
    depth: usize,
    responder: Option<&tokio::runtime::Handle>,
) -> io::Result<BenchReport> {
    run(
        op,
        Until::Bytes(total_bytes),
        message_bytes,
        depth,
        responder,
    )
    .await
}

/// [`loopback_on`] for `duration` rather than for a number of bytes: operations are posted
/// until it has passed, and the report covers them all. One connection and one pair of
/// regions serve the whole run, so a long measurement pays for its setup once.
pub async fn loopback_for(
    op: BenchOp,
    duration: Duration,
    message_bytes: u32,
    depth: usize,
    responder: Option<&tokio::runtime::Handle>,
) -> io::Result<BenchReport> {
    run(
        op,
        Until::Elapsed(duration),
        message_bytes,
        depth,
        responder,
    )
    .await
}

/// When a run stops posting.
#[derive(Clone, Copy)]
enum Until {
    Bytes(u64),
    Elapsed(Duration),
}

async fn run(
    op: BenchOp,
    until: Until,
    message_bytes: u32,
    depth: usize,
    responder: Option<&tokio::runtime::Handle>,
) -> io::Result<BenchReport> {
    let depth = depth.max(1);
    let message_bytes = message_bytes.max(1);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
    let (client, (server, _)) = (client?, accepted?);
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let config = QpConfig {
        ord: u16::try_from(depth).unwrap_or(u16::MAX),
        ird: u16::try_from(depth).unwrap_or(u16::MAX),
        max_payload: message_bytes,
        ..QpConfig::default()
    };
    let requester = SoftRdma::spawn(client, config);
    let responder = match responder {
        Some(handle) => {
            // Registered with the other runtime's reactor, so that its I/O is driven there.
            let server = server.into_std()?;
            let _on = handle.enter();
            SoftRdma::spawn(TcpStream::from_std(server)?, config)
        }
        None => SoftRdma::spawn(server, config),
    };
    let span = u64::from(message_bytes) * depth as u64;
    let to_io = |e: crate::pd::RegisterError| io::Error::other(e.to_string());
    // Both regions are written once before the clock starts: zeroed memory would take its
    // page faults inside the measurement (a quarter of the bytes of a round that touches its
    // region four times), and reading never-written memory reads the kernel's one shared zero
    // page, which stays in cache, where an iSCSI payload never does.
    //
    // The data's source is registered as an immutable buffer, as iSER's sources are (a read's
    // data from the LUN, a write's from the application's buffer): an RDMA Write or a Read
    // Response then slices it into the socket, where a writable region's bytes are copied
    // out first. With both regions writable the ceiling paid a copy per byte that iSER does
    // not, and iSER on a LUN that keeps nothing outran it.
    let span_bytes = usize::try_from(span).map_err(|_| io::Error::other("region too large"))?;
    // The sink is a region per operation in flight, as iSER's are (a read's buffer, an RDMA
    // Read's sink): an operation that fills its region whole is placed without a copy (the
    // received buffer becomes the region's contents), one that fills part of a larger
    // region is copied in. With one region for all, the ceiling paid a copy iSER does not.
    let sinks = |peer: &SoftRdma, fill: u8, access: Access, va: VaMode| {
        (0..depth)
            .map(|_| {
                peer.register_vec(vec![fill; message_bytes as usize], access, va)
                    .map_err(to_io)
            })
            .collect::<io::Result<Vec<_>>>()
    };
    let source = |peer: &SoftRdma, fill: u8, access: Access, va: VaMode| {
        peer.register_shared(bytes::Bytes::from(vec![fill; span_bytes]), access, va)
            .map_err(to_io)
    };
    let remote_va = VaMode::Based(0x7f00_0000_0000);
    let (local, remote) = match op {
        BenchOp::Write => (
            vec![source(&requester, 0x5a, Access::NONE, VaMode::ZeroBased)?],
            sinks(
                &responder,
                0xa5,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                remote_va,
            )?,
        ),
        BenchOp::Read => (
            sinks(&requester, 0x5a, Access::LOCAL_WRITE, VaMode::ZeroBased)?,
            vec![source(&responder, 0xa5, Access::REMOTE_READ, remote_va)?],
        ),
    };
    let messages = match until {
        Until::Bytes(total) => total.div_ceil(u64::from(message_bytes)).max(1),
        Until::Elapsed(_) => u64::MAX,
    };
    let deadline = match until {
        Until::Bytes(_) => None,
        Until::Elapsed(d) => Some(d),
    };
    let wr = |n: u64| {
        let slot = (n % depth as u64) as usize;
        // Operation `n`'s place in a side's regions: the source is one region sliced by
        // slot, the sinks a region per slot (with one operation in flight both are one).
        let at = |regions: &[MemoryRegion]| match regions {
            [one] => (
                one.stag,
                one.base_va + slot as u64 * u64::from(message_bytes),
            ),
            many => (many[slot].stag, many[slot].base_va),
        };
        let (local_stag, local_va) = at(&local);
        let (remote_stag, remote_at) = at(&remote);
        let sge = Sge {
            stag: local_stag,
            va: local_va,
            len: message_bytes,
        };
        let remote = RemoteAddr {
            stag: remote_stag,
            va: remote_at,
        };
        match op {
            BenchOp::Write => SendWr::Write {
                wr_id: n,
                sge,
                remote,
            },
            BenchOp::Read => SendWr::Read {
                wr_id: n,
                sge,
                remote,
            },
        }
    };
    let post = |n: u64| {
        requester
            .post_send(wr(n))
            .map_err(|e| io::Error::other(e.to_string()))
    };
    let start = Instant::now();
    let mut posted = 0;
    while posted < messages.min(depth as u64) {
        post(posted)?;
        posted += 1;
    }
    let mut completed = 0;
    let mut stopped = false;
    while completed < posted {
        let wc = requester.next_completion().await;
        if wc.status != WcStatus::Success {
            return Err(io::Error::other(format!("completion failed: {wc:?}")));
        }
        completed += 1;
        stopped = stopped || deadline.is_some_and(|d| start.elapsed() >= d);
        if posted < messages && !stopped {
            post(posted)?;
            posted += 1;
        }
    }
    Ok(BenchReport {
        op,
        bytes: completed * u64::from(message_bytes),
        message_bytes,
        depth,
        elapsed: start.elapsed(),
    })
}
