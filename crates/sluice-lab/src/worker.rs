//! One in-flight slot: a task that issues a command, waits for it, records it and issues the
//! next, reusing its write buffer and histograms. A session gets `queue_depth` of them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::Rng;
use sluice_initiator::multipath::Multipath;
use sluice_initiator::{Command, CommandOutcome, Error, Session};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_scsi::{cdb, SenseKey};

use crate::arrival::Arrival;
use crate::latency::{new_histogram, record};
use crate::pattern::{fill_pattern, first_mismatch};
use crate::progress::{Progress, Slot};
use crate::region::Region;
use crate::size_dist::SizeDist;
use crate::trace::TraceRecord;
use crate::workload::RwMode;

/// Times a command answered with a unit attention is sent again.
const UNIT_ATTENTION_RETRIES: u32 = 3;
/// Times a command answered BUSY or TASK SET FULL is sent again, and the pauses before
/// (doubling from the first up to the most): some 10 s in all before it counts as failed.
const BUSY_RETRIES: u32 = 110;
const BUSY_FIRST_PAUSE: Duration = Duration::from_millis(1);
const BUSY_MAX_PAUSE: Duration = Duration::from_millis(100);

/// What a worker sends its commands through: one session, or a multipath device that picks
/// a path per command and fails over.
#[derive(Clone, Debug)]
pub(crate) enum Issuer {
    Session(Session),
    Multipath(Multipath),
}

impl Issuer {
    async fn execute(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        match self {
            Issuer::Session(s) => s.execute(cmd).await,
            Issuer::Multipath(m) => m.execute(cmd).await,
        }
    }
}

/// State every worker of a run shares.
pub(crate) struct Shared {
    pub progress: Arc<Progress>,
    /// I/O budget, if any, and how much of it is claimed.
    pub count: Option<u64>,
    pub claimed: AtomicU64,
    /// Sequential position (bytes issued) for non-verify sequential runs.
    pub cursor: AtomicU64,
    pub trace: Option<Arc<[TraceRecord]>>,
    pub trace_next: AtomicUsize,
    pub speed: f64,
    pub start: Instant,
    pub rw: RwMode,
    pub read_percent: u8,
    pub sizes: SizeDist,
    pub verify: bool,
}

/// Latency histograms shared by the workers of one session. One pair per session rather than
/// per worker keeps the hot counters in cache (32 private histograms of 3 significant digits
/// cost more in cache misses than an uncontended lock).
pub(crate) struct Latencies {
    pub read: Histogram<u64>,
    pub write: Histogram<u64>,
}

impl Latencies {
    pub fn new() -> Self {
        Self {
            read: new_histogram(),
            write: new_histogram(),
        }
    }
}

/// What one worker measured (latencies go to the session's [`Latencies`]).
pub(crate) struct WorkerResult {
    /// Index of the worker's session.
    pub session: usize,
    /// Commands completed GOOD, by (CID of the connection that carried them, LUN).
    pub by_connection: Vec<(u16, u16, u64)>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub errors: u64,
    /// Commands sent again after BUSY or TASK SET FULL.
    pub busy_retries: u64,
    pub first_error: Option<String>,
    pub verified: u64,
    pub verified_bytes: u64,
    pub verify_errors: u64,
    pub first_mismatch: Option<String>,
    /// With verify: the acknowledged writes not overwritten since, by offset: (length,
    /// pattern tag). Read back once more after the run ([`final_check`]).
    pub written: BTreeMap<u64, (u32, u64)>,
    /// The LUN the worker addressed.
    pub lun: u16,
}

/// One command to issue.
struct Op {
    write: bool,
    offset: u64,
    len: u32,
    due: Option<Instant>,
}

/// A worker task's state.
pub(crate) struct Worker {
    pub id: u64,
    /// The LUN this worker's commands address.
    pub lun: u16,
    pub session: Issuer,
    pub shared: Arc<Shared>,
    pub region: Region,
    /// Own sequential cursor (verify mode: each worker walks its own stripe).
    pub own_cursor: AtomicU64,
    pub rng: SmallRng,
    pub arrival: Arrival,
    pub next_due: Option<Instant>,
    pub write_buf: Bytes,
    pub slot: Arc<Slot>,
    pub latencies: Arc<Mutex<Latencies>>,
    pub out: WorkerResult,
    seq: u64,
}

impl Worker {
    /// A worker; `first_due` is its first arrival for open-loop runs.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        session_index: usize,
        lun: u16,
        session: Issuer,
        shared: Arc<Shared>,
        region: Region,
        rng: SmallRng,
        arrival: Arrival,
        first_due: Option<Instant>,
        write_buf: Bytes,
        latencies: Arc<Mutex<Latencies>>,
    ) -> Self {
        let slot = shared.progress.slot();
        Self {
            id,
            lun,
            session,
            shared,
            region,
            own_cursor: AtomicU64::new(0),
            rng,
            arrival,
            next_due: first_due,
            write_buf,
            slot,
            latencies,
            out: WorkerResult {
                session: session_index,
                by_connection: Vec::new(),
                read_bytes: 0,
                write_bytes: 0,
                errors: 0,
                busy_retries: 0,
                first_error: None,
                verified: 0,
                verified_bytes: 0,
                verify_errors: 0,
                first_mismatch: None,
                written: BTreeMap::new(),
                lun,
            },
            seq: 0,
        }
    }

    /// Issues commands until the run stops, the budget or trace is used up, or the session
    /// closes.
    pub async fn run(mut self) -> WorkerResult {
        while let Some(op) = self.next_op() {
            if let Some(due) = op.due {
                if due > Instant::now() {
                    // A stop must not wait for a far-off arrival.
                    tokio::select! {
                        _ = tokio::time::sleep_until(due.into()) => {}
                        _ = self.shared.progress.wait_stop() => {}
                    }
                }
                if self.shared.progress.stopped() {
                    break;
                }
            }
            let alive = if self.shared.verify {
                self.verify(op.offset, op.len).await
            } else {
                let payload = if op.write {
                    self.write_buf.slice(..op.len as usize)
                } else {
                    Bytes::new()
                };
                let r = self.command(op.write, op.offset, op.len, payload).await;
                !matches!(r, Err(true))
            };
            if !alive {
                break;
            }
        }
        self.out
    }

    fn next_op(&mut self) -> Option<Op> {
        let sh = &self.shared;
        if sh.progress.stopped() {
            return None;
        }
        if let Some(c) = sh.count {
            if sh.claimed.fetch_add(1, Ordering::Relaxed) >= c {
                return None;
            }
        }
        if let Some(trace) = &sh.trace {
            let i = sh.trace_next.fetch_add(1, Ordering::Relaxed);
            let rec = trace.get(i)?;
            let len = self.region.round_len(rec.size);
            let due = (sh.speed > 0.0).then(|| {
                let t = (rec.time - trace[0].time).max(0.0) / sh.speed;
                sh.start + Duration::from_secs_f64(t)
            });
            return Some(Op {
                write: rec.write,
                offset: self.region.place(rec.byte_offset(), len),
                len,
                due,
            });
        }
        let len = sh.sizes.sample(&mut self.rng);
        let write = match sh.rw {
            RwMode::Read | RwMode::RandRead => false,
            RwMode::Write | RwMode::RandWrite => true,
            RwMode::RandRw => self.rng.gen_range(0..100u8) >= sh.read_percent,
        };
        let offset = if sh.rw.is_random() {
            self.region.random(len, &mut self.rng)
        } else if sh.verify {
            self.region.sequential(len, &self.own_cursor)
        } else {
            self.region.sequential(len, &sh.cursor)
        };
        let due = self.next_due;
        if let (Some(d), Some(gap)) = (due, self.arrival.next_gap(&mut self.rng)) {
            self.next_due = Some(d + gap);
        }
        Some(Op {
            write,
            offset,
            len,
            due,
        })
    }

    /// Runs one command and records it. `Err(true)`: the session is gone.
    async fn command(
        &mut self,
        write: bool,
        offset: u64,
        len: u32,
        payload: Bytes,
    ) -> Result<Bytes, bool> {
        let b = u64::from(self.region.block);
        let (lba, blocks) = (offset / b, len / self.region.block);
        let lun = self.lun;
        let cmd = || {
            if write {
                Command::write(lun, &cdb::write16(lba, blocks, false), payload.clone())
            } else {
                Command::read(lun, &cdb::read16(lba, blocks, false), len)
            }
        };
        let mut result = self.session.execute(cmd()).await;
        // A unit attention (a new I_T nexus after session reinstatement, a reset) reports an
        // event, not a failure of this command: sent again, as SCSI initiators do.
        for _ in 0..UNIT_ATTENTION_RETRIES {
            let ua = matches!(&result, Ok(out)
                if out.sense.as_ref().is_some_and(|d| d.key == SenseKey::UNIT_ATTENTION));
            if !ua {
                break;
            }
            result = self.session.execute(cmd()).await;
        }
        // BUSY and TASK SET FULL say the target cannot take the command now (SAM-5 5.3: a
        // target bounding its buffered write data answers TASK SET FULL): sent again after a
        // pause that doubles, as operating system initiators requeue it, for a while.
        let mut pause = BUSY_FIRST_PAUSE;
        for _ in 0..BUSY_RETRIES {
            let busy = matches!(&result, Ok(out)
                if matches!(out.status, ScsiStatus::Busy | ScsiStatus::TaskSetFull));
            if !busy {
                break;
            }
            self.out.busy_retries += 1;
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(BUSY_MAX_PAUSE);
            result = self.session.execute(cmd()).await;
        }
        let what = if write { "WRITE(16)" } else { "READ(16)" };
        let (fatal, why) = match result {
            Ok(out) if out.is_good() => {
                // The initiator's own submission-to-completion time: no extra clock reads.
                let ns = u64::try_from(out.latency.as_nanos()).unwrap_or(u64::MAX);
                let mut lat = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
                if write {
                    record(&mut lat.write, ns);
                    self.out.write_bytes += u64::from(len);
                } else {
                    record(&mut lat.read, ns);
                    self.out.read_bytes += u64::from(len);
                }
                drop(lat);
                self.slot.done(u64::from(len), ns);
                self.count_connection(out.stats.cid, lun);
                return Ok(out.data);
            }
            Ok(out) => (false, out.check().err().map(|e| e.to_string())),
            Err(e) => (true, Some(e.to_string())),
        };
        self.slot.error();
        self.out.errors += 1;
        if self.out.first_error.is_none() {
            let why = why.unwrap_or_default();
            self.out.first_error = Some(format!("{what} of {len} bytes at {offset}: {why}"));
        }
        Err(fatal)
    }

    /// One more command carried by connection `cid` for `lun` (a few entries: a linear
    /// search beats a map).
    fn count_connection(&mut self, cid: u16, lun: u16) {
        match self
            .out
            .by_connection
            .iter_mut()
            .find(|(c, l, _)| *c == cid && *l == lun)
        {
            Some((_, _, n)) => *n += 1,
            None => self.out.by_connection.push((cid, lun, 1)),
        }
    }

    /// Records an acknowledged write, forgetting those it overwrote (wholly or in part).
    fn remember_write(&mut self, offset: u64, len: u32, tag: u64) {
        let end = offset + u64::from(len);
        let overlapped: Vec<u64> = self
            .out
            .written
            .range(..end)
            .rev()
            .take_while(|(o, (l, _))| **o + u64::from(*l) > offset)
            .map(|(o, _)| *o)
            .collect();
        for o in overlapped {
            self.out.written.remove(&o);
        }
        self.out.written.insert(offset, (len, tag));
    }

    /// Writes a pattern unique to this write, reads it back and compares. Returns whether the
    /// session is still usable.
    async fn verify(&mut self, offset: u64, len: u32) -> bool {
        self.seq += 1;
        let tag = (self.id << 40) | self.seq;
        let mut buf = BytesMut::zeroed(len as usize);
        fill_pattern(&mut buf, offset, tag);
        match self.command(true, offset, len, buf.freeze()).await {
            Ok(_) => self.remember_write(offset, len, tag),
            Err(fatal) => return !fatal,
        }
        let data = match self.command(false, offset, len, Bytes::new()).await {
            Ok(d) => d,
            Err(fatal) => return !fatal,
        };
        self.out.verified += 1;
        self.out.verified_bytes += u64::from(len);
        let bad = if data.len() != len as usize {
            Some(format!("{} bytes instead of {len}", data.len()))
        } else {
            first_mismatch(&data, offset, tag).map(|i| format!("first difference at byte {i}"))
        };
        if let Some(why) = bad {
            self.out.verify_errors += 1;
            if self.out.first_mismatch.is_none() {
                self.out.first_mismatch = Some(format!(
                    "read-back of {len} bytes at {offset} differs from what was written: {why}"
                ));
            }
        }
        true
    }
}

/// What the read-back of a run's acknowledged writes after the run found.
#[derive(Default)]
pub(crate) struct FinalCheck {
    /// Writes read back and compared.
    pub checked: u64,
    /// Of those, the ones whose data was not there.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Reads that failed (counted with the run's failed commands, not as lost writes).
    pub failed: u64,
    pub first_failure: Option<String>,
}

/// Reads back every write in `written` (acknowledged, not overwritten since) and compares it
/// with its pattern: an acknowledged write that a later one did not replace must still be
/// there, whatever happened to the paths in between.
pub(crate) async fn final_check(
    issuer: Issuer,
    lun: u16,
    block: u32,
    written: BTreeMap<u64, (u32, u64)>,
) -> FinalCheck {
    let mut out = FinalCheck::default();
    for (offset, (len, tag)) in written {
        let lba = offset / u64::from(block);
        let cmd = Command::read(lun, &cdb::read16(lba, len / block, false), len);
        let mut result = issuer.execute(cmd.clone()).await;
        for _ in 0..UNIT_ATTENTION_RETRIES {
            let ua = matches!(&result, Ok(o)
                if o.sense.as_ref().is_some_and(|d| d.key == SenseKey::UNIT_ATTENTION));
            if !ua {
                break;
            }
            result = issuer.execute(cmd.clone()).await;
        }
        let out_data = match result.and_then(CommandOutcome::check) {
            Ok(o) => o.data,
            Err(e) => {
                out.failed += 1;
                out.first_failure.get_or_insert_with(|| {
                    format!("read-back after the run of {len} bytes at {offset}: {e}")
                });
                continue;
            }
        };
        out.checked += 1;
        let bad = if out_data.len() != len as usize {
            Some(format!("{} bytes instead of {len}", out_data.len()))
        } else {
            first_mismatch(&out_data, offset, tag).map(|i| format!("first difference at byte {i}"))
        };
        if let Some(why) = bad {
            out.errors += 1;
            out.first_error.get_or_insert_with(|| {
                format!(
                    "acknowledged write of {len} bytes at {offset} not found after the run: {why}"
                )
            });
        }
    }
    out
}
