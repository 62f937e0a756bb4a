//! The measurement: a target served in this process over TCP and UDP per timeout, sluice's
//! initiator at queue depth 1 through a lossy relay where asked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_initiator::{ConnectOptions, Session};
use sluice_target::config::OperationalOffer;
use sluice_udp::relay::LossyRelay;
use sluice_udp::UdpConfig;

use super::plan::{Point, Transport};
use crate::lab_target::{memory_target_config, InProcessTarget};
use crate::{LabError, Progress, RwMode, SizeDist, Workload};

const IQN: &str = "iqn.2026-11.io.sluice:udp-vs-tcp";
/// The LUN: room for the largest command many times over.
const LUN_BYTES: u64 = 64 << 20;
/// Both transports declare this MaxRecvDataSegmentLength both ways, so that the same PDUs
/// cross each (the UDP transport's default: six Ethernet datagrams per full PDU).
const MRDSL: u32 = sluice_udp::DEFAULT_UDP_MAX_RECV_DATA_SEGMENT;

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What was asked.
    pub point: Point,
    /// Commands completed.
    pub ios: u64,
    /// Commands failed.
    pub errors: u64,
    /// Response time, milliseconds: mean, median, 99th percentile, largest.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// SNACKs the initiator sent.
    pub snacks: u64,
    /// Commands the initiator retried.
    pub retried: u64,
    /// Datagrams the relay forwarded and dropped (0 without one).
    pub forwarded: u64,
    /// Datagrams dropped.
    pub dropped: u64,
}

/// A target served in this process over TCP and UDP on one port, its sequence reception
/// timeout set to `timeout`.
fn start_target(timeout: Duration) -> Result<InProcessTarget<SocketAddr>, LabError> {
    let offer = OperationalOffer {
        max_recv_data_segment_length: MRDSL,
        ..OperationalOffer::default()
    };
    let mut config = memory_target_config(IQN, LUN_BYTES, offer);
    config.recovery.sequence_timeout = timeout;
    InProcessTarget::start(
        "udp-vs-tcp-target",
        config,
        "TCP and UDP",
        |target, addrs| {
            let bound = addrs.first().copied()?;
            let socket = std::net::UdpSocket::bind(bound)
                .ok()
                .filter(|s| s.set_nonblocking(true).is_ok())
                .and_then(|s| tokio::net::UdpSocket::from_std(s).ok())?;
            let target = Arc::clone(target);
            tokio::spawn(async move {
                target.serve_udp(socket, UdpConfig::default()).await;
            });
            Some(bound)
        },
    )
}

/// Measures every point, one target per timeout; stops early (keeping what was measured)
/// when `progress` is stopped (checked between points).
pub(super) fn measure_all(
    points: &[Point],
    progress: &Arc<Progress>,
) -> Result<Vec<Row>, LabError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| LabError::Workload(format!("runtime: {e}")))?;
    let mut rows = Vec::new();
    let mut timeouts: Vec<Duration> = points.iter().map(|p| p.timeout).collect();
    timeouts.sort();
    timeouts.dedup();
    for timeout in timeouts {
        let target = start_target(timeout)?;
        for (i, p) in points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.timeout == timeout)
        {
            if progress.stopped() {
                return Ok(rows);
            }
            let row = rt.block_on(measure(p, target.addrs, i as u64))?;
            rows.push(row);
        }
    }
    // Back in the plan's order.
    rows.sort_by_key(|r| points.iter().position(|p| *p == r.point));
    Ok(rows)
}

async fn measure(p: &Point, target: SocketAddr, seed: u64) -> Result<Row, LabError> {
    let relay = match p.transport {
        Transport::Udp if p.loss > 0.0 => Some(
            LossyRelay::start(target, p.loss, seed)
                .await
                .map_err(|e| LabError::Workload(format!("relay: {e}")))?,
        ),
        _ => None,
    };
    let portal = relay.as_ref().map_or(target, LossyRelay::addr).to_string();
    let mut opts = ConnectOptions::default();
    opts.offer.error_recovery_level = 1;
    opts.offer.max_recv_data_segment_length = MRDSL;
    opts.recovery.retry_timeout = p.timeout;
    opts.keepalive_interval = None;
    if p.transport == Transport::Udp {
        opts.use_udp(UdpConfig::default());
    }
    let session = Session::connect(&portal, IQN, opts).await?;
    let device = crate::Device {
        sessions: vec![session.clone()],
        luns: vec![0],
        block_size: 512,
        capacity: LUN_BYTES,
        multipath: None,
    };
    let workload = Workload {
        rw: if p.read { RwMode::Read } else { RwMode::Write },
        sizes: SizeDist::Fixed(p.edtl),
        queue_depth: 1,
        time: Some(p.time_cap),
        count: Some(p.commands),
        seed,
        ..Workload::default()
    };
    // A progress of its own: the runner stops it when the point's time is up, and the
    // caller's must stay running for the next point.
    let report = crate::run(&workload, &device, Arc::new(Progress::new())).await;
    let _ = session.logout().await;
    let report = report?;
    let (forwarded, dropped) = relay.as_ref().map_or((0, 0), LossyRelay::counts);
    let l = &report.latency;
    Ok(Row {
        point: *p,
        ios: report.read.ios + report.write.ios,
        errors: report.errors,
        mean_ms: l.mean_us / 1e3,
        p50_ms: l.p50_us / 1e3,
        p99_ms: l.p99_us / 1e3,
        max_ms: l.max_us / 1e3,
        snacks: report.pdus.recovery.snacks,
        retried: report.pdus.recovery.commands_retried,
        forwarded,
        dropped,
    })
}
