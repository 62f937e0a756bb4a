//! A run: validate the workload against the device, start `queue_depth` workers per session,
//! stop them on time or budget, merge what they measured.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use sluice_initiator::multipath::Multipath;
use sluice_initiator::{Session, SessionCounters};

use crate::arrival::{exponential, Arrival};
use crate::cpu::CpuTime;
use crate::error::LabError;
use crate::latency::{new_histogram, LatencySummary};
use crate::pdus::PduCounts;
use crate::progress::Progress;
use crate::region::Region;
use crate::report::{ConnectionCommands, ConnectionLogout, DirectionStats, Report, VerifyStats};
use crate::worker::{final_check, Issuer, Latencies, Shared, Worker, WorkerResult};
use crate::workload::Workload;

/// The LUN a run talks to, through one or more logged-in sessions.
#[derive(Clone, Debug)]
pub struct Device {
    /// Sessions to spread the workers over (each gets `queue_depth` of them).
    pub sessions: Vec<Session>,
    /// LUN numbers to spread each session's workers over (worker `i` of a session uses
    /// `luns[i % luns.len()]`); all of `block_size` and at least `capacity` bytes.
    pub luns: Vec<u16>,
    /// Logical block size in bytes.
    pub block_size: u32,
    /// Capacity in bytes.
    pub capacity: u64,
    /// A multipath device to run through instead of (or, with sessions, beside) sessions:
    /// it gets `queue_depth` workers of its own, and the report its paths' counters.
    pub multipath: Option<Multipath>,
}

/// Runs `workload` on `device`. `progress` shows live totals and stops the run early when
/// its [`Progress::stop`] is called (e.g. on Ctrl-C). Must run inside a tokio runtime (the
/// one the sessions were opened on).
pub async fn run(
    workload: &Workload,
    device: &Device,
    progress: Arc<Progress>,
) -> Result<Report, LabError> {
    let w = workload;
    let bad = |why: String| Err(LabError::Workload(why));
    let mut lanes: Vec<Issuer> = device
        .sessions
        .iter()
        .cloned()
        .map(Issuer::Session)
        .collect();
    lanes.extend(device.multipath.iter().cloned().map(Issuer::Multipath));
    if lanes.is_empty() || w.queue_depth == 0 || device.luns.is_empty() {
        return bad("at least one session, one LUN and a queue depth of 1 are needed".into());
    }
    if w.verify && w.trace.is_some() {
        return bad("--verify cannot be combined with a trace replay".into());
    }
    if !(w.speed.is_finite() && w.speed >= 0.0) || w.read_percent > 100 {
        return bad("the speed must be >= 0 and the read percentage 0 to 100".into());
    }
    if let Arrival::Fixed { rate } | Arrival::Poisson { rate } = w.arrival {
        if !(rate.is_finite() && rate > 0.0) {
            return bad(format!("rate {rate} must be positive"));
        }
    }
    let block = device.block_size;
    let size = w
        .size
        .unwrap_or_else(|| device.capacity.saturating_sub(w.offset));
    let region = Region::new(w.offset, size, block, device.capacity)?;
    let workers = lanes.len() * w.queue_depth;
    let regions = if w.verify {
        region.split(workers)
    } else {
        vec![region; workers]
    };
    let max_len = match &w.trace {
        Some(t) => t
            .iter()
            .map(|r| region.round_len(r.size))
            .max()
            .unwrap_or(block),
        None => {
            if let Some((s, _)) = w.sizes.entries().iter().find(|(s, _)| s % block != 0) {
                return bad(format!(
                    "command size {s} is not a multiple of the block size {block}"
                ));
            }
            w.sizes.max()
        }
    };
    if u64::from(max_len) > regions[0].size {
        return bad(format!(
            "commands of {max_len} bytes do not fit in {} bytes{}",
            regions[0].size,
            if w.verify {
                " (with --verify each worker has its own stripe of the range)"
            } else {
                ""
            }
        ));
    }

    let before: Vec<SessionCounters> = device.sessions.iter().map(Session::counters).collect();
    let mut seeder = SmallRng::seed_from_u64(w.seed);
    let mut data = vec![0u8; max_len as usize];
    seeder.fill_bytes(&mut data);
    let write_buf = Bytes::from(data);
    let cpu0 = CpuTime::now();
    let start = Instant::now();
    let shared = Arc::new(Shared {
        progress: Arc::clone(&progress),
        count: w.count,
        claimed: AtomicU64::new(0),
        cursor: AtomicU64::new(0),
        trace: w.trace.clone(),
        trace_next: AtomicUsize::new(0),
        speed: w.speed,
        start,
        rw: w.rw,
        read_percent: w.read_percent,
        sizes: w.sizes.clone(),
        verify: w.verify,
    });
    let per_worker = w.arrival.split(workers);
    let latencies: Vec<Arc<Mutex<Latencies>>> = lanes
        .iter()
        .map(|_| Arc::new(Mutex::new(Latencies::new())))
        .collect();
    let mut handles = Vec::with_capacity(workers);
    for (i, region) in regions.into_iter().enumerate() {
        let session = lanes[i / w.queue_depth].clone();
        let mut rng = SmallRng::seed_from_u64(seeder.next_u64());
        let first_due = match w.arrival {
            Arrival::Closed => None,
            // Stagger evenly spaced workers so that together they are evenly spaced.
            Arrival::Fixed { rate } => Some(start + Duration::from_secs_f64(i as f64 / rate)),
            Arrival::Poisson { .. } => {
                let rate = per_worker.mean_gap().map_or(1.0, |g| 1.0 / g.as_secs_f64());
                Some(start + Duration::from_secs_f64(exponential(&mut rng, rate)))
            }
        };
        let worker = Worker::new(
            i as u64 + 1,
            i / w.queue_depth,
            device.luns[(i % w.queue_depth) % device.luns.len()],
            session,
            Arc::clone(&shared),
            region,
            rng,
            per_worker,
            first_due,
            write_buf.clone(),
            Arc::clone(&latencies[i / w.queue_depth]),
        );
        handles.push(tokio::spawn(worker.run()));
    }
    let logout = w.logout_connection_after.map(|after| {
        let sessions = device.sessions.clone();
        let p = Arc::clone(&progress);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(after) => {}
                () = p.wait_stop() => return Vec::new(),
            }
            logout_last_connections(&sessions, start).await
        })
    });
    let timer = w.time.map(|t| {
        let p = Arc::clone(&progress);
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            p.stop();
        })
    });
    let mut results = Vec::with_capacity(workers);
    for h in handles {
        match h.await {
            Ok(r) => results.push(r),
            Err(e) => return bad(format!("a worker task failed: {e}")),
        }
    }
    let elapsed = start.elapsed();
    let cpu = CpuTime::now().since(&cpu0);
    if let Some(t) = timer {
        t.abort();
    }
    let logouts = match logout {
        Some(task) => task.await.unwrap_or_default(),
        None => Vec::new(),
    };
    // The run's PDUs, before the read-back below adds its own.
    let mut pdus = PduCounts::default();
    for (s, b) in device.sessions.iter().zip(&before) {
        pdus.add(&PduCounts::delta(b, &s.counters()));
    }
    let finals = if w.verify {
        let checks: Vec<_> = results
            .iter_mut()
            .map(|r| {
                let written = std::mem::take(&mut r.written);
                let issuer = lanes[r.session].clone();
                tokio::spawn(final_check(issuer, r.lun, block, written))
            })
            .collect();
        let mut all = Vec::with_capacity(checks.len());
        for c in checks {
            match c.await {
                Ok(f) => all.push(f),
                Err(e) => return bad(format!("a read-back task failed: {e}")),
            }
        }
        all
    } else {
        Vec::new()
    };
    let trace_records = w.trace.as_ref().map(|t| {
        let n = shared.trace_next.load(std::sync::atomic::Ordering::Relaxed);
        n.min(t.len()) as u64
    });
    let mut report = merge(results, &latencies, w.verify);
    for f in finals {
        report.errors += f.failed;
        report.first_error = report.first_error.take().or(f.first_failure);
        if let Some(v) = report.verify.as_mut() {
            v.final_checked += f.checked;
            v.final_errors += f.errors;
            v.final_first_error = v.final_first_error.take().or(f.first_error);
        }
    }
    report.logouts = logouts;
    report.elapsed = elapsed;
    report.sessions = lanes.len();
    report.queue_depth = w.queue_depth;
    report.pdus = pdus;
    report.negotiated = device
        .sessions
        .first()
        .cloned()
        .or_else(|| device.multipath.as_ref().and_then(Multipath::any_session))
        .map(|s| s.params());
    if let Some(m) = &device.multipath {
        report.paths = m.path_stats();
        report.failover_times = m.failover_times();
        report.longest_pause = Some(m.longest_pause());
    }
    report.cpu = cpu;
    report.trace_records = trace_records;
    Ok(report)
}

/// Logs out the connection with the highest CID of every session that has more than one,
/// while the run goes on (the other connections finish its commands).
async fn logout_last_connections(sessions: &[Session], start: Instant) -> Vec<ConnectionLogout> {
    let mut out = Vec::new();
    for (session, s) in sessions.iter().enumerate() {
        let conns = s.connections();
        if conns.len() < 2 {
            continue;
        }
        let Some(cid) = conns.iter().map(|c| c.cid).max() else {
            continue;
        };
        let at = start.elapsed();
        let result = s.logout_connection(cid).await.map_err(|e| e.to_string());
        out.push(ConnectionLogout {
            session,
            cid,
            at,
            result,
        });
    }
    out
}

/// Sums the workers' results.
fn merge(results: Vec<WorkerResult>, latencies: &[Arc<Mutex<Latencies>>], verify: bool) -> Report {
    let (mut rh, mut wh, mut all) = (new_histogram(), new_histogram(), new_histogram());
    for l in latencies {
        let l = l.lock().unwrap_or_else(|e| e.into_inner());
        // Same bounds everywhere: add cannot fail.
        let _ = rh.add(&l.read);
        let _ = wh.add(&l.write);
    }
    let mut r = Report::default();
    let mut v = VerifyStats::default();
    for x in &results {
        for &(cid, lun, n) in &x.by_connection {
            let key = (x.session, cid);
            let c = match r.connections.iter_mut().find(|c| (c.session, c.cid) == key) {
                Some(c) => c,
                None => {
                    r.connections.push(ConnectionCommands {
                        session: x.session,
                        cid,
                        commands: 0,
                        by_lun: Vec::new(),
                    });
                    r.connections.last_mut().expect("just pushed")
                }
            };
            c.commands += n;
            match c.by_lun.iter_mut().find(|(l, _)| *l == lun) {
                Some((_, m)) => *m += n,
                None => c.by_lun.push((lun, n)),
            }
        }
    }
    r.connections.sort_by_key(|c| (c.session, c.cid));
    for c in &mut r.connections {
        c.by_lun.sort_unstable();
    }
    for x in results {
        r.read.bytes += x.read_bytes;
        r.write.bytes += x.write_bytes;
        r.errors += x.errors;
        r.busy_retries += x.busy_retries;
        r.first_error = r.first_error.or(x.first_error);
        v.checked += x.verified;
        v.bytes += x.verified_bytes;
        v.errors += x.verify_errors;
        v.first_error = v.first_error.or(x.first_mismatch);
    }
    let _ = all.add(&rh);
    let _ = all.add(&wh);
    r.read = DirectionStats {
        ios: rh.len(),
        bytes: r.read.bytes,
        latency: LatencySummary::from_histogram(&rh),
    };
    r.write = DirectionStats {
        ios: wh.len(),
        bytes: r.write.bytes,
        latency: LatencySummary::from_histogram(&wh),
    };
    r.latency = LatencySummary::from_histogram(&all);
    r.verify = verify.then_some(v);
    r
}
