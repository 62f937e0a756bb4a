//! Counters the data path keeps, read when metrics are scraped or sessions listed.
//!
//! Each connection's task owns its counters: it is their only writer, so an increment is a
//! relaxed load and store (no locked instruction, no lock, no allocation); readers load them
//! relaxed at any time and see a recent value. A connection counts the PDUs it receives and
//! sends ([`ConnCounters`]) and, per logical unit, the commands it runs ([`LuCounters`], one
//! set per LU the connection used, made on first use). A logical unit's totals
//! ([`LuMetrics`]) are its live connections' counters plus what connections that ended left
//! behind, folded in when they end, so they only grow while per-session series come and go
//! with their sessions. Logins are rare: their counters ([`LoginCounters`]) are shared atomics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sluice_proto::framing::FrameError;
use sluice_proto::pdu::codes::{LoginStatus, ScsiStatus, SnackType, TmfFunction};
use sluice_proto::pdu::Pdu;

use crate::status::{
    ConnCounts, HistogramCounts, LoginCounts, LoginFailure, LuCounts, Op, StatusKind,
    LATENCY_BOUNDS_NS,
};

/// A counter with one writer (the task that owns it) and any number of readers; or, through
/// [`add_shared`](Self::add_shared), several writers.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning task calls it: load and store need no locked instruction.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds `n` when other threads may add at the same time (commands of one connection
    /// finishing concurrently on the blocking pool): a locked add, so none is lost.
    #[inline]
    pub(crate) fn add_shared(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// [`add`](Self::add), or [`add_shared`](Self::add_shared) when `SHARED`.
    #[inline]
    fn add_by<const SHARED: bool>(&self, n: u64) {
        if SHARED {
            self.add_shared(n);
        } else {
            self.add(n);
        }
    }

    #[inline]
    pub(crate) fn inc(&self) {
        self.add(1);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

fn read<const N: usize>(c: &[Counter; N]) -> [u64; N] {
    std::array::from_fn(|i| c[i].get())
}

/// Latency histogram: one counter per bucket of [`LATENCY_BOUNDS_NS`] plus one above the
/// last bound, and the sum.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    buckets: [Counter; LATENCY_BOUNDS_NS.len() + 1],
    sum_ns: Counter,
}

impl Histogram {
    /// Counts one latency; `SHARED`: other threads may count at the same time.
    #[inline]
    fn record_by<const SHARED: bool>(&self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        // A bucket holds latencies up to and including its bound (Prometheus' `le`).
        let i = LATENCY_BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[i].add_by::<SHARED>(1);
        self.sum_ns.add_by::<SHARED>(ns);
    }

    pub(crate) fn counts(&self) -> HistogramCounts {
        HistogramCounts {
            buckets: read(&self.buckets),
            sum_ns: self.sum_ns.get(),
        }
    }
}

/// What one connection ran on one logical unit.
#[derive(Debug, Default)]
pub(crate) struct LuCounters {
    commands: [Counter; Op::ALL.len()],
    latency: [Histogram; Op::ALL.len()],
    read_bytes: Counter,
    write_bytes: Counter,
    status: [Counter; StatusKind::ALL.len()],
    sense_keys: [Counter; 16],
}

/// One finished command, as the driver saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Finished<'a> {
    pub(crate) cdb: &'a [u8],
    pub(crate) read_bytes: u64,
    pub(crate) write_bytes: u64,
    pub(crate) status: ScsiStatus,
    pub(crate) sense: &'a [u8],
    pub(crate) latency: Duration,
}

impl LuCounters {
    /// Counts a command the connection's own task ran.
    #[inline]
    pub(crate) fn record(&self, f: &Finished<'_>) {
        self.record_by::<false>(f);
    }

    /// Counts a command that ran beside the connection's task, maybe at the same time as
    /// others of the connection (`long_running`).
    pub(crate) fn record_shared(&self, f: &Finished<'_>) {
        self.record_by::<true>(f);
    }

    // Always inlined: on the memory LU's path the call alone showed in callgrind.
    #[inline(always)]
    fn record_by<const SHARED: bool>(&self, f: &Finished<'_>) {
        let op = Op::of_cdb(f.cdb);
        self.commands[op as usize].add_by::<SHARED>(1);
        self.latency[op as usize].record_by::<SHARED>(f.latency);
        // Bytes of READ and WRITE commands only: what an operator calls throughput, not the
        // few bytes of INQUIRY or MODE SENSE.
        match op {
            Op::Read => self.read_bytes.add_by::<SHARED>(f.read_bytes),
            Op::Write => self.write_bytes.add_by::<SHARED>(f.write_bytes),
            Op::Other => {}
        }
        self.status[StatusKind::of(f.status) as usize].add_by::<SHARED>(1);
        if f.status == ScsiStatus::CheckCondition {
            if let Some(key) = sense_key(f.sense) {
                self.sense_keys[usize::from(key)].add_by::<SHARED>(1);
            }
        }
    }

    pub(crate) fn counts(&self) -> LuCounts {
        LuCounts {
            commands: read(&self.commands),
            latency: std::array::from_fn(|i| self.latency[i].counts()),
            read_bytes: self.read_bytes.get(),
            write_bytes: self.write_bytes.get(),
            status: read(&self.status),
            sense_keys: read(&self.sense_keys),
        }
    }
}

/// The sense key of fixed (70h/71h) or descriptor (72h/73h) sense data (SPC-4 4.5).
fn sense_key(sense: &[u8]) -> Option<u8> {
    match sense.first()? & 0x7F {
        0x70 | 0x71 => sense.get(2).map(|b| b & 0x0F),
        0x72 | 0x73 => sense.get(1).map(|b| b & 0x0F),
        _ => None,
    }
}

/// A logical unit's counters across connections: the live ones, and the totals of those that
/// ended.
#[derive(Debug, Default)]
pub(crate) struct LuMetrics {
    inner: Mutex<LuMetricsInner>,
}

#[derive(Debug, Default)]
struct LuMetricsInner {
    live: Vec<Arc<LuCounters>>,
    retired: LuCounts,
}

impl LuMetrics {
    fn inner(&self) -> std::sync::MutexGuard<'_, LuMetricsInner> {
        // Plain numbers: any state a panic left is still a usable state.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counters for a connection that starts using this LU.
    pub(crate) fn register(&self) -> Arc<LuCounters> {
        let c = Arc::new(LuCounters::default());
        self.inner().live.push(Arc::clone(&c));
        c
    }

    /// A connection ends: its counters join the totals.
    pub(crate) fn retire(&self, c: &Arc<LuCounters>) {
        let mut inner = self.inner();
        if let Some(i) = inner.live.iter().position(|l| Arc::ptr_eq(l, c)) {
            inner.live.swap_remove(i);
            let counts = c.counts();
            inner.retired.add(&counts);
        }
    }

    /// Everything run on the LU so far.
    pub(crate) fn totals(&self) -> LuCounts {
        let inner = self.inner();
        let mut total = inner.retired.clone();
        for l in &inner.live {
            total.add(&l.counts());
        }
        total
    }
}

/// What one connection received and sent in full feature phase.
#[derive(Debug, Default)]
pub(crate) struct ConnCounters {
    pdus_received: Counter,
    pdus_sent: Counter,
    commands: [Counter; Op::ALL.len()],
    data_out_bytes: Counter,
    data_in_bytes: Counter,
    r2ts: Counter,
    responses: [Counter; StatusKind::ALL.len()],
    rejects_sent: Counter,
    header_digest_errors: Counter,
    data_digest_errors: Counter,
    framing_errors: Counter,
    snacks: [Counter; 4],
    task_management: [Counter; 8],
    nop_outs: Counter,
}

impl ConnCounters {
    /// A PDU from the initiator.
    #[inline]
    pub(crate) fn received(&self, pdu: &Pdu) {
        self.pdus_received.inc();
        match pdu {
            Pdu::ScsiCommand(c) => {
                self.commands[Op::of_cdb(c.cdb.as_bytes()) as usize].inc();
                self.data_out_bytes.add(c.data.len() as u64);
            }
            Pdu::DataOut(d) => self.data_out_bytes.add(d.data.len() as u64),
            Pdu::SnackRequest(s) => {
                if let Some(i) = snack_index(s.snack_type) {
                    self.snacks[i].inc();
                }
            }
            Pdu::TaskMgmtRequest(t) => {
                if let Some(i) = tmf_index(t.function) {
                    self.task_management[i].inc();
                }
            }
            Pdu::NopOut(_) => self.nop_outs.inc(),
            _ => {}
        }
    }

    /// A PDU to the initiator.
    #[inline]
    pub(crate) fn sent(&self, pdu: &Pdu) {
        self.pdus_sent.inc();
        match pdu {
            Pdu::DataIn(d) => {
                self.data_in_bytes.add(d.data.len() as u64);
                if d.status_present {
                    self.responses[StatusKind::of(d.status) as usize].inc();
                }
            }
            Pdu::ScsiResponse(r) => self.responses[StatusKind::of(r.status) as usize].inc(),
            Pdu::R2t(_) => self.r2ts.inc(),
            Pdu::Reject(_) => self.rejects_sent.inc(),
            _ => {}
        }
    }

    /// A PDU the framer refused.
    pub(crate) fn frame_error(&self, e: &FrameError) {
        match e {
            FrameError::HeaderDigest { .. } | FrameError::HeaderDigestSkipped { .. } => {
                self.header_digest_errors.inc()
            }
            FrameError::DataDigest { .. } => self.data_digest_errors.inc(),
            _ => self.framing_errors.inc(),
        }
    }

    pub(crate) fn counts(&self) -> ConnCounts {
        ConnCounts {
            pdus_received: self.pdus_received.get(),
            pdus_sent: self.pdus_sent.get(),
            commands: read(&self.commands),
            data_out_bytes: self.data_out_bytes.get(),
            data_in_bytes: self.data_in_bytes.get(),
            r2ts: self.r2ts.get(),
            responses: read(&self.responses),
            rejects_sent: self.rejects_sent.get(),
            header_digest_errors: self.header_digest_errors.get(),
            data_digest_errors: self.data_digest_errors.get(),
            framing_errors: self.framing_errors.get(),
            snacks: read(&self.snacks),
            task_management: read(&self.task_management),
            nop_outs: self.nop_outs.get(),
        }
    }
}

fn snack_index(t: SnackType) -> Option<usize> {
    match t {
        SnackType::DataR2t => Some(0),
        SnackType::Status => Some(1),
        SnackType::DataAck => Some(2),
        SnackType::RData => Some(3),
        SnackType::Unknown(_) => None,
    }
}

fn tmf_index(f: TmfFunction) -> Option<usize> {
    let code = u8::from(f);
    (1..=8).contains(&code).then(|| usize::from(code - 1))
}

/// Logins to one target (or to discovery, or to names no target has), and reinstatements.
/// Several connections' tasks count here at once: shared atomics (logins are rare).
#[derive(Debug, Default)]
pub(crate) struct LoginCounters {
    ok: AtomicU64,
    failed: [AtomicU64; LoginFailure::ALL.len()],
    session_reinstatements: AtomicU64,
    connection_reinstatements: AtomicU64,
}

impl LoginCounters {
    pub(crate) fn succeeded(&self) {
        self.ok.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failed(&self, why: LoginFailure) {
        self.failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn session_reinstated(&self) {
        self.session_reinstatements.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_reinstated(&self) {
        self.connection_reinstatements
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn counts(&self) -> LoginCounts {
        LoginCounts {
            ok: self.ok.load(Ordering::Relaxed),
            failed: std::array::from_fn(|i| self.failed[i].load(Ordering::Relaxed)),
            session_reinstatements: self.session_reinstatements.load(Ordering::Relaxed),
            connection_reinstatements: self.connection_reinstatements.load(Ordering::Relaxed),
        }
    }
}

impl LoginFailure {
    /// The kind of a refusal the login core answered with.
    pub(crate) fn of(status: LoginStatus) -> Self {
        match (status.class, status.detail) {
            (2, 1) => Self::Authentication,
            (2, 2) => Self::Authorization,
            (2, 3) | (2, 4) => Self::NotFound,
            (2, 6) => Self::TooManyConnections,
            (2, 8..=0x0a) => Self::Session,
            (2, _) => Self::InitiatorError,
            _ => Self::TargetError,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_hold_up_to_their_bound() {
        let h = Histogram::default();
        h.record_by::<false>(Duration::from_nanos(LATENCY_BOUNDS_NS[0]));
        h.record_by::<false>(Duration::from_nanos(LATENCY_BOUNDS_NS[0] + 1));
        h.record_by::<false>(Duration::from_secs(3600));
        let c = h.counts();
        assert_eq!(c.buckets[0], 1);
        assert_eq!(c.buckets[1], 1);
        assert_eq!(c.buckets[LATENCY_BOUNDS_NS.len()], 1);
        assert_eq!(c.count(), 3);
        assert_eq!(c.sum_ns, 2 * LATENCY_BOUNDS_NS[0] + 1 + 3_600_000_000_000);
    }

    #[test]
    fn sense_keys_of_both_formats() {
        assert_eq!(sense_key(&[0x70, 0, 0x05, 0, 0, 0, 0, 10]), Some(5));
        assert_eq!(sense_key(&[0xF0, 0, 0x26]), Some(6), "VALID bit set");
        assert_eq!(sense_key(&[0x72, 0x0B, 0x47, 0x05]), Some(11));
        assert_eq!(sense_key(&[0x7F, 1, 2]), None);
        assert_eq!(sense_key(&[]), None);
    }

    #[test]
    fn totals_survive_their_connections() {
        let lu = LuMetrics::default();
        let a = lu.register();
        let b = lu.register();
        let read10 = [0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        let f = Finished {
            cdb: &read10,
            read_bytes: 4096,
            write_bytes: 0,
            status: ScsiStatus::Good,
            sense: &[],
            latency: Duration::from_micros(30),
        };
        a.record(&f);
        b.record(&f);
        b.record(&Finished {
            status: ScsiStatus::CheckCondition,
            sense: &[0x70, 0, 0x06],
            ..f
        });
        lu.retire(&b);
        lu.retire(&b);
        let t = lu.totals();
        assert_eq!(t.commands[Op::Read as usize], 3);
        assert_eq!(t.read_bytes, 3 * 4096);
        assert_eq!(t.latency[Op::Read as usize].count(), 3);
        assert_eq!(t.status[StatusKind::CheckCondition as usize], 1);
        assert_eq!(t.sense_keys[6], 1);
    }

    /// Commands of one connection finishing on several threads at once lose no count.
    #[test]
    fn shared_records_from_many_threads_all_count() {
        let lu = LuMetrics::default();
        let c = lu.register();
        let write10 = [0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        let f = Finished {
            cdb: &write10,
            read_bytes: 0,
            write_bytes: 4096,
            status: ScsiStatus::Good,
            sense: &[],
            latency: Duration::from_micros(100),
        };
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        c.record_shared(&f);
                    }
                });
            }
        });
        let t = lu.totals();
        assert_eq!(t.commands[Op::Write as usize], 40_000);
        assert_eq!(t.write_bytes, 40_000 * 4096);
        assert_eq!(t.latency[Op::Write as usize].count(), 40_000);
    }

    #[test]
    fn login_refusals_by_kind() {
        assert_eq!(
            LoginFailure::of(LoginStatus::AUTH_FAILURE),
            LoginFailure::Authentication
        );
        assert_eq!(
            LoginFailure::of(LoginStatus::AUTHORIZATION_FAILURE),
            LoginFailure::Authorization
        );
        assert_eq!(
            LoginFailure::of(LoginStatus::TARGET_REMOVED),
            LoginFailure::NotFound
        );
        assert_eq!(
            LoginFailure::of(LoginStatus::SESSION_DOES_NOT_EXIST),
            LoginFailure::Session
        );
        assert_eq!(
            LoginFailure::of(LoginStatus::OUT_OF_RESOURCES),
            LoginFailure::TargetError
        );
    }
}
