//! What a run does: the workload specification.

use std::sync::Arc;
use std::time::Duration;

use crate::arrival::Arrival;
use crate::size_dist::SizeDist;
use crate::trace::TraceRecord;

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random reads.
    RandRead,
    /// Uniformly random writes.
    RandWrite,
    /// Uniformly random reads and writes, [`Workload::read_percent`] of them reads.
    RandRw,
}

impl RwMode {
    /// Whether addresses are random (else sequential).
    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }
}

/// A workload: what to send, how much at once, for how long.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Access pattern.
    pub rw: RwMode,
    /// Percent of commands that are reads, for [`RwMode::RandRw`] (0 to 100).
    pub read_percent: u8,
    /// Command sizes (multiples of the LUN's block size).
    pub sizes: SizeDist,
    /// Commands in flight per session (worker tasks per session).
    pub queue_depth: usize,
    /// Stop after this long (whichever of `time` and `count` comes first).
    pub time: Option<Duration>,
    /// Stop after this many I/Os (a verified I/O is one write and one read).
    pub count: Option<u64>,
    /// When commands are issued.
    pub arrival: Arrival,
    /// Write a pattern and read it back, comparing; the workers own disjoint stripes of the
    /// range so that none overwrites another's data between write and read.
    pub verify: bool,
    /// First byte of the range (a multiple of the block size).
    pub offset: u64,
    /// Bytes of the range; `None` for the rest of the LUN.
    pub size: Option<u64>,
    /// Replay this trace instead of generating I/Os (records in timestamp order); the
    /// addresses are wrapped into the range, the sizes rounded up to whole blocks, and every
    /// ASU goes to the one LUN.
    pub trace: Option<Arc<[TraceRecord]>>,
    /// Trace replay speed: 1 at the recorded pace, 2 twice as fast, 0 as fast as the queue
    /// depth allows.
    pub speed: f64,
    /// Seed of the random generators (addresses, sizes, mix, arrivals).
    pub seed: u64,
    /// Log out the highest-CID connection of every session with more than one after this
    /// long, while the run goes on over the others.
    pub logout_connection_after: Option<Duration>,
}

impl Default for Workload {
    /// 4 KiB random reads at queue depth 32 for 10 seconds.
    fn default() -> Self {
        Self {
            rw: RwMode::RandRead,
            read_percent: 50,
            sizes: SizeDist::Fixed(4096),
            queue_depth: 32,
            time: Some(Duration::from_secs(10)),
            count: None,
            arrival: Arrival::Closed,
            verify: false,
            offset: 0,
            size: None,
            trace: None,
            speed: 1.0,
            seed: 0x5eed,
            logout_connection_after: None,
        }
    }
}
