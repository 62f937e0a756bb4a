//! The measurement: a target served in this process over TCP and UDP per timeout, sluice's
//! initiator at queue depth 1 through a lossy relay where asked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_initiator::{ConnectOptions, Session};
use sluice_target::config::{Acl, Backend, LunDef, OperationalOffer, TargetConfig, TargetDef};
use sluice_udp::relay::LossyRelay;
use sluice_udp::UdpConfig;

use super::plan::{Point, Transport};
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

/// A target served on its own runtime thread over TCP and UDP on one port; stopped on drop.
struct LabTarget {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LabTarget {
    fn start(timeout: Duration) -> Result<LabTarget, LabError> {
        let mut config = config();
        config.recovery.sequence_timeout = timeout;
        let target = Arc::new(
            sluice_target::Target::new(config)
                .map_err(|e| LabError::Workload(format!("target: {e}")))?,
        );
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("udp-vs-tcp-target".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let udp_target = Arc::clone(&target);
                    let on_listening = move |addrs: &[SocketAddr]| {
                        let bound = addrs.first().copied();
                        let udp = bound.and_then(|a| std::net::UdpSocket::bind(a).ok());
                        let udp = udp
                            .filter(|s| s.set_nonblocking(true).is_ok())
                            .and_then(|s| tokio::net::UdpSocket::from_std(s).ok());
                        if let Some(socket) = udp {
                            tokio::spawn(async move {
                                udp_target.serve_udp(socket, UdpConfig::default()).await;
                            });
                            let _ = addr_tx.send(bound);
                        } else {
                            let _ = addr_tx.send(None);
                        }
                    };
                    let _ = target
                        .serve(Vec::new(), on_listening, async {
                            let _ = stop_rx.await;
                        })
                        .await;
                });
            })
            .map_err(|e| LabError::Workload(format!("target thread: {e}")))?;
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .flatten()
            .ok_or_else(|| LabError::Workload("the target did not listen on TCP and UDP".into()))?;
        Ok(LabTarget {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl Drop for LabTarget {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config() -> TargetConfig {
    TargetConfig {
        portals: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
        portal_groups: Vec::new(),
        state_dir: None,
        targets: vec![TargetDef {
            iqn: IQN.into(),
            alias: None,
            luns: vec![LunDef {
                number: 0,
                backend: Backend::Memory { size: LUN_BYTES },
                block_size: 512,
                read_only: false,
                serial: None,
                removable: false,
                options: Default::default(),
            }],
            acl: Acl::Open,
            chap: None,
        }],
        discovery_auth: None,
        offer: OperationalOffer {
            max_recv_data_segment_length: MRDSL,
            ..OperationalOffer::default()
        },
        limits: sluice_target::config::Limits {
            shutdown_grace: Duration::from_millis(200),
            ..Default::default()
        },
        keepalive: None,
        recovery: Default::default(),
        fault_hook: None,
        gateway: None,
    }
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
        let target = LabTarget::start(timeout)?;
        for (i, p) in points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.timeout == timeout)
        {
            if progress.stopped() {
                return Ok(rows);
            }
            let row = rt.block_on(measure(p, target.addr, i as u64))?;
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
