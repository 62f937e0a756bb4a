//! Running an iSER plan: one target in this process serving iSCSI over TCP and iSER on the
//! software provider from a memory LUN and a null LUN, sluice's initiator against each, and
//! the provider's raw loopback benchmark, run by run.
//!
//! CPU is the whole process's (getrusage): the target, the initiator and, for iSER and raw
//! runs, both ends of the provider all run here, so a run's CPU per byte is what the host
//! spent to move a byte from one end to the other.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_initiator::{ConnectOptions, Session};
use sluice_rdma::bench::{loopback_for, BenchOp};
use sluice_target::config::{Backend, LunDef, OperationalOffer};

use super::plan::{Direction, IserPlan, IserPoint, Lun, Transport};
use super::row::IserRun;
use crate::lab_target::{memory_target_config, InProcessTarget};
use crate::{CpuTime, LabError, Progress, RwMode, SizeDist, Workload};

const IQN: &str = "iqn.2026-11.io.sluice:lab-iser";
/// Each LUN: room for a full queue of the largest transfer, several times over.
const LUN_BYTES: u64 = 256 << 20;
/// The study's negotiated values (its section 3): 512 KiB for MaxRecvDataSegmentLength and
/// MaxBurstLength, InitialR2T=Yes, ImmediateData=No. Over iSER the data segment lengths are
/// the RDMA-mode keys each side declares (sluice's target: 16 KiB), which bound only Sends.
pub const STUDY_SEGMENT: u32 = 512 << 10;

/// What [`run`] reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A run begins.
    Point(&'a IserPoint),
    /// A run was measured.
    Done(IserRun),
    /// A run was in the output already (resume).
    Skipped(&'a IserPoint),
    /// A run failed; the plan goes on.
    Failed {
        /// The run.
        point: &'a IserPoint,
        /// Why.
        error: String,
    },
}

/// The addresses of the study's in-process target: iSCSI over TCP, and iSER.
struct Portals {
    tcp: SocketAddr,
    iser: SocketAddr,
}

/// The study's target: TCP and iSER on the software provider, from a memory LUN
/// ([`Lun::Memory`], number 0) and a null LUN ([`Lun::Null`], number 1).
type LabTarget = InProcessTarget<Portals>;

fn start_target() -> Result<LabTarget, LabError> {
    let offer = OperationalOffer {
        max_recv_data_segment_length: STUDY_SEGMENT,
        max_burst_length: STUDY_SEGMENT,
        first_burst_length: STUDY_SEGMENT,
        initial_r2t: true,
        immediate_data: false,
        ..OperationalOffer::default()
    };
    let mut config = memory_target_config(IQN, LUN_BYTES, offer);
    config.targets[0].luns.push(LunDef::new(
        Lun::Null.number(),
        Backend::Null { size: LUN_BYTES },
        512,
    ));
    InProcessTarget::start(
        "lab-iser-target",
        config,
        "TCP and iSER",
        |target, addrs| {
            let tcp = addrs.first().copied()?;
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::TcpListener::from_std)
                .ok()?;
            let iser = listener.local_addr().ok()?;
            let target = Arc::clone(target);
            tokio::spawn(async move {
                target
                    .serve_iser(listener, sluice_target::IserServeOptions::default())
                    .await;
            });
            Some(Portals { tcp, iser })
        },
    )
}

/// Measures every run of `plan` whose key is not in `done`, reporting to `sink`; stops early
/// (between runs) once `stop` says so. Blocks: it makes its own runtime.
pub fn run(
    plan: &IserPlan,
    done: &HashSet<String>,
    stop: &dyn Fn() -> bool,
    sink: &mut dyn FnMut(Event<'_>),
) -> Result<(), LabError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lab-iser-initiator")
        .enable_all()
        .build()
        .map_err(|e| LabError::Workload(format!("runtime: {e}")))?;
    let target = start_target()?;
    // The raw runs' responding endpoint gets a runtime thread of its own, as the target has:
    // both ends of an iSER run have a thread each, and so must the ceiling's.
    let raw_peer = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lab-iser-raw-peer")
        .enable_all()
        .build()
        .map_err(|e| LabError::Workload(format!("runtime: {e}")))?;
    rt.block_on(prefill(&target))?;
    for p in &plan.points {
        if stop() {
            return Ok(());
        }
        if done.contains(&p.key()) {
            sink(Event::Skipped(p));
            continue;
        }
        sink(Event::Point(p));
        let measured = match p.transport {
            Transport::Raw => rt.block_on(measure_raw(p, plan, raw_peer.handle())),
            Transport::Tcp | Transport::Iser => rt.block_on(measure_iscsi(p, plan, &target)),
        };
        match measured {
            Ok(row) => sink(Event::Done(row)),
            Err(error) => sink(Event::Failed { point: p, error }),
        }
    }
    Ok(())
}

/// LUN `lun` through `session`, as the load generator drives it.
fn lun_device(session: &Session, lun: Lun) -> crate::Device {
    crate::Device {
        sessions: vec![session.clone()],
        luns: vec![lun.number()],
        block_size: 512,
        capacity: LUN_BYTES,
        multipath: None,
    }
}

/// Writes the whole memory LUN once, over TCP, before anything is measured. A memory LUN commits
/// its memory at the first write to each chunk, and the kernel zero-fills every new page
/// then: measured on a fresh LUN, half of the target's CPU during 16 MiB writes went to
/// clearing pages (`clear_page_erms`), a cost the raw RDMA runs never pay, and reads of
/// chunks never written are served from one static zero buffer that stays in cache. Written
/// once, every run sees the steady state of a LUN in use: committed memory, real data.
async fn prefill(target: &LabTarget) -> Result<(), LabError> {
    const PIECE: u32 = 1 << 20;
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        LabError::Workload(format!("writing the LUN before the runs: {what}: {e}"))
    };
    let opts = ConnectOptions {
        keepalive_interval: None,
        ..ConnectOptions::default()
    };
    let session = Session::connect(&target.addrs.tcp.to_string(), IQN, opts)
        .await
        .map_err(|e| fail("login", &e))?;
    let _ = session.test_unit_ready(0).await;
    let device = lun_device(&session, Lun::Memory);
    let workload = Workload {
        rw: RwMode::Write,
        sizes: SizeDist::Fixed(PIECE),
        queue_depth: 8,
        count: Some(LUN_BYTES / u64::from(PIECE)),
        time: None,
        ..Workload::default()
    };
    let report = crate::run(&workload, &device, Arc::new(Progress::new()))
        .await
        .map_err(|e| fail("writes", &e))?;
    let _ = session.logout().await;
    if report.errors > 0 || report.write.bytes != LUN_BYTES {
        let what = report.first_error.unwrap_or_default();
        return Err(fail(
            "writes",
            &format!(
                "{} of {LUN_BYTES} bytes written; {what}",
                report.write.bytes
            ),
        ));
    }
    Ok(())
}

/// The shapes the provider is measured in, as (bytes per operation, operations in flight):
/// whole transfers, `queue_depth` at a time, and what iSER puts on the queue pair for the
/// same commands: an operation per burst of at most MaxBurstLength, with as many in flight
/// as `queue_depth` commands allow (every Data-In burst of a read at once; for a write at
/// most MaxOutstandingR2T bursts per command, and no more RDMA Reads than the queue pair's
/// ORD), and that shape with twice as many in flight (RDMA Reads still within the ORD). iSER moved 1 MiB faster than the first
/// shape alone, because it has more, smaller operations in flight; a ceiling has to be
/// measured in the shape that reaches it.
fn raw_shapes(p: &IserPoint, plan: &IserPlan) -> Vec<(u32, usize)> {
    let t = p.transfer_bytes.max(1);
    let bursts = t.div_ceil(STUDY_SEGMENT) as usize;
    let ord = usize::from(sluice_rdma::QpConfig::default().ord);
    let in_flight = match p.direction {
        Direction::Read => plan.queue_depth * bursts,
        Direction::Write => {
            let r2ts = usize::from(
                OperationalOffer::default()
                    .max_outstanding_r2t
                    .min(ConnectOptions::default().offer.max_outstanding_r2t),
            )
            .max(1);
            (plan.queue_depth * bursts.min(r2ts)).min(ord)
        }
    };
    let whole = (t, plan.queue_depth.max(1));
    let as_iser = (t.min(STUDY_SEGMENT), in_flight.clamp(1, 256));
    // The requester counts an RDMA Write done when the responder's Ack comes back, a round
    // trip, while iSER's initiator counts a read done when the target's Send that follows
    // its RDMA Writes arrives, one way: at the same number in flight the raw Writes waited
    // longer, and iSER's reads of 64 KiB and 16 MiB outran their "ceiling". Twice as many in
    // flight takes the round trip out of the raw figure. RDMA Reads stay within the queue
    // pair's ORD, which bounds iSER's (and, at 16, a real RNIC's) as well.
    let deeper_depth = match p.direction {
        Direction::Read => as_iser.1 * 2,
        Direction::Write => (as_iser.1 * 2).min(ord),
    };
    let deeper = (as_iser.0, deeper_depth.clamp(1, 256));
    let mut shapes = vec![whole];
    for shape in [as_iser, deeper] {
        if !shapes.contains(&shape) {
            shapes.push(shape);
        }
    }
    shapes
}

/// Rounds per shape of a raw run.
const RAW_ROUNDS: u32 = 2;

/// What one shape of a raw run moved.
#[derive(Default)]
struct RawTally {
    bytes: u64,
    elapsed: Duration,
    cpu: f64,
    ops: u64,
}

/// The provider alone: the operation iSER maps the SCSI direction to (reads become RDMA
/// Writes into the initiator, writes RDMA Reads from it), in each of [`raw_shapes`], rounds
/// of the shapes alternating so that the machine's moods fall on both; the row is the faster
/// shape's (its operations in flight are the row's queue depth). The responding endpoint runs
/// on `peer`, a runtime thread of its own.
async fn measure_raw(
    p: &IserPoint,
    plan: &IserPlan,
    peer: &tokio::runtime::Handle,
) -> Result<IserRun, String> {
    let op = match p.direction {
        Direction::Read => BenchOp::Write,
        Direction::Write => BenchOp::Read,
    };
    let shapes = raw_shapes(p, plan);
    let mut tallies: Vec<RawTally> = shapes.iter().map(|_| RawTally::default()).collect();
    // Each shape runs as long as an iSCSI run, so that the ceiling is measured over as long a
    // stretch as what it bounds, in two rounds alternating with the other shape's.
    for _ in 0..RAW_ROUNDS {
        for (&(size, depth), tally) in shapes.iter().zip(tallies.iter_mut()) {
            let before = CpuTime::now();
            let report = loopback_for(op, plan.run_time / RAW_ROUNDS, size, depth, Some(peer))
                .await
                .map_err(|e| format!("raw RDMA {op:?} of {size} bytes x {depth}: {e}"))?;
            tally.cpu += CpuTime::now().since(&before).total().as_secs_f64();
            tally.bytes += report.bytes;
            tally.elapsed += report.elapsed;
            tally.ops += report.bytes / u64::from(size);
        }
    }
    let rate = |t: &RawTally| t.bytes as f64 / t.elapsed.as_secs_f64().max(1e-9);
    let best = (0..shapes.len())
        .max_by(|&a, &b| rate(&tallies[a]).total_cmp(&rate(&tallies[b])))
        .unwrap_or(0);
    let (tally, depth) = (&tallies[best], shapes[best].1);
    let commands = tally.bytes / u64::from(p.transfer_bytes.max(1));
    let mut row = IserRun::example();
    row.point = *p;
    row.queue_depth = depth as u32;
    row.rdma_mode = true;
    row.commands = commands;
    row.session_commands = commands;
    row.bytes = tally.bytes;
    row.seconds = tally.elapsed.as_secs_f64();
    row.cpu_seconds = tally.cpu;
    match op {
        BenchOp::Write => row.rdma_writes = tally.ops,
        BenchOp::Read => row.rdma_reads = tally.ops,
    }
    Ok(row)
}

async fn measure_iscsi(
    p: &IserPoint,
    plan: &IserPlan,
    target: &LabTarget,
) -> Result<IserRun, String> {
    let mut opts = ConnectOptions::default();
    opts.offer.max_recv_data_segment_length = STUDY_SEGMENT;
    opts.offer.max_burst_length = STUDY_SEGMENT;
    opts.offer.first_burst_length = STUDY_SEGMENT;
    opts.offer.initial_r2t = true;
    opts.offer.immediate_data = false;
    opts.keepalive_interval = None;
    let portal = match p.transport {
        Transport::Iser => {
            opts.use_iser(sluice_initiator::iser::IserOptions::default());
            target.addrs.iser
        }
        _ => target.addrs.tcp,
    };
    let counters = target.target.iser_counters();
    let before_target = counters.status();
    let session = Session::connect(&portal.to_string(), IQN, opts)
        .await
        .map_err(|e| format!("login: {e}"))?;
    let measured = async {
        // The first clears the power-on unit attention of the new I_T nexus.
        let _ = session.test_unit_ready(0).await;
        let params = session.params();
        let lun = p.lun.ok_or_else(|| "an iSCSI run needs a LUN".to_owned())?;
        let device = lun_device(&session, lun);
        let workload = Workload {
            rw: match p.direction {
                Direction::Read => RwMode::Read,
                Direction::Write => RwMode::Write,
            },
            sizes: SizeDist::Fixed(p.transfer_bytes),
            queue_depth: plan.queue_depth,
            time: Some(plan.run_time),
            seed: u64::from(p.rep),
            ..Workload::default()
        };
        // Warm the buffers, the LUN's pages and the provider's registrations first.
        let warm = Workload {
            time: Some(plan.run_time / 5),
            ..workload.clone()
        };
        let warmed = crate::run(&warm, &device, Arc::new(Progress::new()))
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
        let before = CpuTime::now();
        let report = crate::run(&workload, &device, Arc::new(Progress::new()))
            .await
            .map_err(|e| e.to_string())?;
        let cpu = CpuTime::now().since(&before).total().as_secs_f64();
        Ok::<_, String>((params, report, cpu, warmed.ios()))
    }
    .await;
    let _ = session.logout().await;
    let (params, report, cpu, warm_commands) = measured?;
    // A connection adds its iSER counts as it ends: wait for it to end.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut after = counters.status();
    while p.transport == Transport::Iser
        && after.rdma_connections == before_target.rdma_connections
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
        after = counters.status();
    }
    // Settle: the counters of the last data are added with the connection's end.
    tokio::time::sleep(Duration::from_millis(20)).await;
    after = counters.status();
    Ok(IserRun {
        point: *p,
        queue_depth: plan.queue_depth as u32,
        mrdsl: match p.direction {
            Direction::Read => params.initiator_max_recv_data_segment_length,
            Direction::Write => params.target_max_recv_data_segment_length,
        },
        max_burst: params.max_burst_length,
        initial_r2t: params.initial_r2t,
        immediate_data: params.immediate_data,
        rdma_mode: after.rdma_connections > before_target.rdma_connections,
        commands: report.ios(),
        errors: report.errors,
        bytes: report.bytes(),
        seconds: report.elapsed.as_secs_f64(),
        cpu_seconds: cpu,
        data_in_pdus: report.pdus.data_in,
        data_out_pdus: report.pdus.data_out,
        r2t_pdus: report.pdus.r2t,
        session_commands: warm_commands + report.ios(),
        rdma_writes: after.rdma_writes - before_target.rdma_writes,
        rdma_reads: after.rdma_reads - before_target.rdma_reads,
        sends: (after.sends - before_target.sends)
            + (after.sends_received - before_target.sends_received),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> IserPlan {
        IserPlan {
            name: "test",
            points: Vec::new(),
            queue_depth: 4,
            run_time: Duration::from_millis(1),
        }
    }

    fn point(direction: Direction, transfer_bytes: u32) -> IserPoint {
        IserPoint {
            transport: Transport::Raw,
            lun: None,
            direction,
            transfer_bytes,
            rep: 0,
        }
    }

    #[test]
    fn the_raw_provider_is_also_measured_in_the_shape_iser_gives_it() {
        let p = plan();
        // Up to one burst per command, iSER's shape is the whole transfer; it is also
        // measured with twice as many in flight.
        assert_eq!(
            raw_shapes(&point(Direction::Write, 64 << 10), &p),
            [(64 << 10, 4), (64 << 10, 8)]
        );
        assert_eq!(
            raw_shapes(&point(Direction::Read, STUDY_SEGMENT), &p),
            [(STUDY_SEGMENT, 4), (STUDY_SEGMENT, 8)]
        );
        // 16 MiB reads: 32 Data-In bursts per command, all at once (and never more than 256
        // operations in flight).
        assert_eq!(
            raw_shapes(&point(Direction::Read, 16 << 20), &p),
            [(16 << 20, 4), (STUDY_SEGMENT, 128), (STUDY_SEGMENT, 256)]
        );
        // 1 MiB writes: two R2Ts per command; 16 MiB writes: MaxOutstandingR2T (8) per
        // command; never more RDMA Reads than the queue pair's ORD (16), deeper or not.
        assert_eq!(
            raw_shapes(&point(Direction::Write, 1 << 20), &p),
            [(1 << 20, 4), (STUDY_SEGMENT, 8), (STUDY_SEGMENT, 16)]
        );
        assert_eq!(
            raw_shapes(&point(Direction::Write, 16 << 20), &p),
            [(16 << 20, 4), (STUDY_SEGMENT, 16)]
        );
    }
}
