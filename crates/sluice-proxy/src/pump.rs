//! One direction of a connection: a reader that cuts frames and asks the relay about each, a
//! queue that holds them for the one-way delay, and a writer.
//!
//! Ordering: frames enter the queue in the order they arrived, each due at its arrival time
//! plus the direction's delay, and the writer takes them in that order, so a constant delay
//! never reorders. Memory: the receive buffer holds at most one frame (the relay refuses
//! frames above its limit) plus one read, and the queue at most [`MAX_QUEUED_BYTES`]: when it
//! is full the reader stops reading, so TCP's flow control slows the sender (backpressure)
//! instead of the proxy buffering without limit.

use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_fault::{Direction, FaultAction, Relay, RelayError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tracing::{debug, info};

use crate::shared::{lock, Shared};

/// Bytes one direction's delay queue may hold. With a delay `d` this caps the direction's
/// throughput at `MAX_QUEUED_BYTES / d` (the bandwidth-delay product): 32 MiB over 10 ms is
/// 3.2 GB/s, more than a loopback iSCSI session moves.
pub const MAX_QUEUED_BYTES: usize = 32 << 20;

/// Frames the queue may hold whatever their size (small PDUs cost a queue slot each).
const MAX_QUEUED_FRAMES: usize = 4096;

/// The least a read asks for: large enough to take many small PDUs in one call.
const READ_CHUNK: usize = 64 << 10;

/// What the writer gathers before a system call (small PDUs leave in batches).
const WRITE_BUFFER: usize = 64 << 10;

/// Why a direction stopped before its reader saw the end of the stream.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The plan reset the connection after the frame just written.
    Reset,
    /// The stream cannot be framed, or its login read.
    Relay(RelayError),
    /// A socket failed.
    Io(std::io::Error),
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Self {
        Stop::Io(e)
    }
}

/// One frame in the queue.
struct Queued<'a> {
    due: Instant,
    frame: Bytes,
    copies: u8,
    reset_after: bool,
    _budget: SemaphorePermit<'a>,
}

/// Moves one direction until the reader's end of stream has been passed on (`Ok`), or the
/// connection must end (`Err`).
pub(crate) async fn pump<R, W>(
    direction: Direction,
    reader: R,
    writer: W,
    relay: &Mutex<Relay>,
    shared: &Shared,
) -> Result<(), Stop>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let delay = shared.plan.rules(direction).delay;
    let budget = Semaphore::new(MAX_QUEUED_BYTES);
    let (tx, rx) = mpsc::channel(MAX_QUEUED_FRAMES);
    let read = read_frames(direction, reader, relay, shared, delay, &budget, tx);
    let write = write_frames(writer, rx);
    tokio::try_join!(read, write).map(|_| ())
}

/// Reads, cuts, faults and queues frames until the end of the stream (the queue's sender is
/// then dropped) or a reset was queued.
async fn read_frames<'a, R: AsyncRead + Unpin>(
    direction: Direction,
    mut reader: R,
    relay: &Mutex<Relay>,
    shared: &Shared,
    delay: Duration,
    budget: &'a Semaphore,
    tx: mpsc::Sender<Queued<'a>>,
) -> Result<(), Stop> {
    let mut buf = BytesMut::new();
    loop {
        loop {
            let next = lock(relay).next_frame(direction, &mut buf);
            let Some(relayed) = next.map_err(Stop::Relay)? else {
                break;
            };
            let decision = relayed.decision;
            if !decision.events.is_empty() {
                for e in &decision.events {
                    if matches!(e.action, FaultAction::Skipped { .. }) {
                        debug!(target: "sluice_proxy::fault", "{e}");
                    } else {
                        info!(target: "sluice_proxy::fault", "{e}");
                    }
                }
                shared.log(&decision.events);
            }
            if decision.copies > 0 || decision.reset_after {
                let frame = relayed.frame.freeze();
                let due = Instant::now() + delay;
                queue(
                    &tx,
                    budget,
                    due,
                    frame,
                    decision.copies,
                    decision.reset_after,
                )
                .await?;
            }
            if decision.reset_after {
                return Ok(());
            }
        }
        let needed = lock(relay).bytes_needed(&buf);
        buf.reserve(needed.max(READ_CHUNK));
        if reader.read_buf(&mut buf).await? == 0 {
            if !buf.is_empty() {
                // The sender closed in the middle of a PDU: pass the pieces on as they are,
                // the receiver judges them.
                let rest = buf.split().freeze();
                queue(&tx, budget, Instant::now() + delay, rest, 1, false).await?;
            }
            return Ok(());
        }
    }
}

/// Waits for room in the queue (backpressure), then queues a frame.
async fn queue<'a>(
    tx: &mpsc::Sender<Queued<'a>>,
    budget: &'a Semaphore,
    due: Instant,
    frame: Bytes,
    copies: u8,
    reset_after: bool,
) -> Result<(), Stop> {
    let bytes = frame.len().saturating_mul(usize::from(copies.max(1)));
    // A frame larger than the whole budget takes all of it.
    let permits = u32::try_from(bytes.min(MAX_QUEUED_BYTES)).unwrap_or(u32::MAX);
    let closed = || Stop::Io(std::io::ErrorKind::BrokenPipe.into());
    let permit = budget.acquire_many(permits).await.map_err(|_| closed())?;
    let item = Queued {
        due,
        frame,
        copies,
        reset_after,
        _budget: permit,
    };
    tx.send(item).await.map_err(|_| closed())
}

/// Writes queued frames when due; passes the end of stream on when the queue closes.
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::Receiver<Queued<'_>>,
) -> Result<(), Stop> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER, writer);
    loop {
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(mpsc::error::TryRecvError::Empty) => {
                // Nothing more at hand: what was gathered goes out now.
                out.flush().await?;
                match rx.recv().await {
                    Some(item) => item,
                    None => break,
                }
            }
            Err(mpsc::error::TryRecvError::Disconnected) => break,
        };
        if item.due > Instant::now() {
            out.flush().await?;
            tokio::time::sleep_until(item.due).await;
        }
        for _ in 0..item.copies {
            out.write_all(&item.frame).await?;
        }
        if item.reset_after {
            out.flush().await?;
            return Err(Stop::Reset);
        }
    }
    out.flush().await?;
    // The reader saw the end of its stream: pass it on (TCP FIN) and let the other direction
    // finish.
    out.shutdown().await?;
    Ok(())
}
