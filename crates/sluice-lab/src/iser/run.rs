//! Running an iSER plan: one target in this process serving iSCSI over TCP and iSER on the
//! software provider from one memory LUN, sluice's initiator against each, and the
//! provider's raw loopback benchmark, run by run.
//!
//! CPU is the whole process's (getrusage): the target, the initiator and, for iSER and raw
//! runs, both ends of the provider all run here, so a run's CPU per byte is what the host
//! spent to move a byte from one end to the other.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_initiator::{ConnectOptions, Session};
use sluice_rdma::bench::{loopback, BenchOp};
use sluice_target::config::OperationalOffer;

use super::plan::{Direction, IserPlan, IserPoint, Transport};
use super::row::IserRun;
use crate::lab_target::{memory_target_config, InProcessTarget};
use crate::{CpuTime, LabError, Progress, RwMode, SizeDist, Workload};

const IQN: &str = "iqn.2026-11.io.sluice:lab-iser";
/// The memory LUN: room for a full queue of the largest transfer, several times over.
const LUN_BYTES: u64 = 256 << 20;
/// The study's negotiated values (its section 3): 512 KiB for MaxRecvDataSegmentLength,
/// MaxBurstLength and both iSER RecvDataSegmentLengths, InitialR2T=Yes, ImmediateData=No.
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

/// The study's target: TCP and iSER on the software provider, from one memory LUN.
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
    let config = memory_target_config(IQN, LUN_BYTES, offer);
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
            Transport::Raw => rt.block_on(measure_raw(p, plan)),
            Transport::Tcp | Transport::Iser => rt.block_on(measure_iscsi(p, plan, &target)),
        };
        match measured {
            Ok(row) => sink(Event::Done(row)),
            Err(error) => sink(Event::Failed { point: p, error }),
        }
    }
    Ok(())
}

/// Writes the whole LUN once, over TCP, before anything is measured. A memory LUN commits
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
    let device = crate::Device {
        sessions: vec![session.clone()],
        luns: vec![0],
        block_size: 512,
        capacity: LUN_BYTES,
        multipath: None,
    };
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

/// The provider alone: the operation iSER maps the SCSI direction to (reads become RDMA
/// Writes into the initiator, writes RDMA Reads from it), in operations of the transfer size.
async fn measure_raw(p: &IserPoint, plan: &IserPlan) -> Result<IserRun, String> {
    let op = match p.direction {
        Direction::Read => BenchOp::Write,
        Direction::Write => BenchOp::Read,
    };
    let size = u64::from(p.transfer_bytes);
    let chunk = plan.raw_bytes.max(size * plan.queue_depth as u64 * 8);
    // Rounds of `chunk` bytes until the run has lasted as long as an iSCSI run, so that the
    // ceiling is measured over as long a stretch as what it bounds.
    let (mut bytes, mut elapsed) = (0u64, Duration::ZERO);
    let before = CpuTime::now();
    while elapsed < plan.run_time {
        let report = loopback(op, chunk, p.transfer_bytes, plan.queue_depth)
            .await
            .map_err(|e| format!("raw RDMA {op:?}: {e}"))?;
        bytes += report.bytes;
        elapsed += report.elapsed;
    }
    let cpu = CpuTime::now().since(&before).total().as_secs_f64();
    let ops = bytes / size;
    let mut row = IserRun::example();
    row.point = *p;
    row.queue_depth = plan.queue_depth as u32;
    row.rdma_mode = true;
    row.commands = ops;
    row.session_commands = ops;
    row.bytes = bytes;
    row.seconds = elapsed.as_secs_f64();
    row.cpu_seconds = cpu;
    match op {
        BenchOp::Write => row.rdma_writes = ops,
        BenchOp::Read => row.rdma_reads = ops,
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
        let device = crate::Device {
            sessions: vec![session.clone()],
            luns: vec![0],
            block_size: 512,
            capacity: LUN_BYTES,
            multipath: None,
        };
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
