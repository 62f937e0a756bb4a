//! Running a plan: for each point, a target configured for it (through a [`Launcher`]), one
//! session whose offers force the point's values, and the point's runs, each one row.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_initiator::{ConnectOptions, IscsiUrl, Session};
use sluice_proto::text::DigestKind;

use super::plan::Plan;
use super::point::{Direction, Point};
use super::predict::{per_command, PerCommand};
use super::record::{Measured, Negotiated, RunRecord};
use crate::progress::Progress;
use crate::runner::{run, Device};
use crate::size_dist::SizeDist;
use crate::workload::{RwMode, Workload};

/// Bytes moved before the measured runs of each point.
pub const WARM_UP: u64 = 16 << 20;

/// Where a point's session logs in.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `iscsi://host:port/target-iqn` (the LUN part is ignored).
    pub url: IscsiUrl,
    /// LUN numbers the target offers, at least the point's count.
    pub luns: Vec<u16>,
}

/// Starts and stops the target side of each point.
pub trait Launcher {
    /// What is measured: `sluice` for a spawned target, else the target's name.
    fn implementation(&self) -> String;
    /// Makes a target ready for `point` and says where it listens. A launcher that cannot
    /// configure the target (an existing one) returns it unchanged; the negotiation check
    /// then shows what the target imposed.
    fn start(&mut self, point: &Point) -> Result<Endpoint, String>;
    /// CPU seconds the target process has used so far, when it runs on this machine.
    fn target_cpu_seconds(&self) -> Option<f64>;
    /// Stops what [`Self::start`] started.
    fn stop(&mut self);
}

/// What the sweep reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A point begins (`index` of `total` points).
    Point {
        /// Its experiment.
        experiment: &'a str,
        /// The point.
        point: &'a Point,
        /// Position, from 0.
        index: usize,
        /// Points in the plan.
        total: usize,
    },
    /// A run finished.
    Run(&'a RunRecord),
    /// A run was already in the output (resumed sweep).
    Skipped,
    /// A point could not run (target start, login or a failed run); the sweep goes on.
    Failed {
        /// Its experiment.
        experiment: &'a str,
        /// The point.
        point: &'a Point,
        /// What went wrong.
        error: String,
    },
}

/// The resume key of one run.
pub fn run_key(experiment: &str, point: &Point, run: u32) -> String {
    format!("{experiment}|{}|{run}", point.key())
}

/// Runs `plan`, skipping the runs whose [`run_key`] is in `done`, reporting each step to
/// `sink`; `progress` stops it early when stopped. Must run inside a tokio runtime.
pub async fn sweep(
    plan: &Plan,
    launcher: &mut dyn Launcher,
    done: &HashSet<String>,
    progress: Arc<Progress>,
    sink: &mut dyn FnMut(Event<'_>),
) {
    let total = plan.points().count();
    for (index, (experiment, point)) in plan.points().enumerate() {
        if progress.stopped() {
            return;
        }
        sink(Event::Point {
            experiment,
            point,
            index,
            total,
        });
        let todo: Vec<u32> = (0..plan.runs)
            .filter(|&r| !done.contains(&run_key(experiment, point, r)))
            .collect();
        for _ in todo.len()..plan.runs as usize {
            sink(Event::Skipped);
        }
        if todo.is_empty() {
            continue;
        }
        let result = run_point(plan, experiment, point, &todo, launcher, &progress, sink).await;
        launcher.stop();
        if let Err(error) = result {
            sink(Event::Failed {
                experiment,
                point,
                error,
            });
        }
    }
}

/// The runs `todo` of one point.
async fn run_point(
    plan: &Plan,
    experiment: &str,
    point: &Point,
    todo: &[u32],
    launcher: &mut dyn Launcher,
    progress: &Arc<Progress>,
    sink: &mut dyn FnMut(Event<'_>),
) -> Result<(), String> {
    point.validate()?;
    let endpoint = launcher.start(point)?;
    let luns: Vec<u16> = endpoint
        .luns
        .iter()
        .copied()
        .take(usize::from(point.luns))
        .collect();
    if luns.len() < usize::from(point.luns) {
        return Err(format!(
            "the target offers {} LUNs, the point needs {}",
            endpoint.luns.len(),
            point.luns
        ));
    }
    let opts = offers(&endpoint.url, point)?;
    let session = Session::connect_url_with(&endpoint.url, opts)
        .await
        .map_err(|e| format!("login: {e}"))?;
    let result = async {
        let mut capacity = u64::MAX;
        let mut block_size = 0;
        for &l in &luns {
            // Clears the power-on unit attention of the new I_T nexus.
            let _ = session.test_unit_ready(l).await;
            session
                .test_unit_ready(l)
                .await
                .map_err(|e| format!("TEST UNIT READY of LUN {l}: {e}"))?;
            let cap = session
                .read_capacity(l)
                .await
                .map_err(|e| format!("READ CAPACITY of LUN {l}: {e}"))?;
            block_size = cap.block_size;
            capacity = capacity.min(cap.bytes());
        }
        let params = session.params();
        let negotiated = Negotiated::new(&params, session.connections().len() as u16);
        let mismatch = negotiated.differences(point);
        let commands = plan.bytes_per_run.div_ceil(u64::from(point.command_bytes));
        let region = capacity - capacity % u64::from(point.command_bytes);
        if region == 0 {
            return Err(format!(
                "LUN capacity {capacity} is below one command of {} bytes",
                point.command_bytes
            ));
        }
        let workload = Workload {
            rw: match point.direction {
                Direction::Read => RwMode::Read,
                Direction::Write => RwMode::Write,
            },
            sizes: SizeDist::Fixed(point.command_bytes),
            queue_depth: point.outstanding as usize,
            time: None,
            count: Some(commands),
            size: Some(region),
            ..Workload::default()
        };
        let device = Device {
            sessions: vec![session.clone()],
            luns: luns.clone(),
            block_size,
            capacity,
            multipath: None,
        };
        // One unrecorded pass first (up to WARM_UP bytes): TCP's window, the target's
        // buffers and the RAM LUN's pages settle before anything is measured.
        let warm = Workload {
            count: Some(commands.min(WARM_UP.div_ceil(u64::from(point.command_bytes)))),
            ..workload.clone()
        };
        run(&warm, &device, Arc::clone(progress))
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
        for &run_index in todo {
            if progress.stopped() {
                break;
            }
            let cpu_before = launcher.target_cpu_seconds();
            let report = run(&workload, &device, Arc::clone(progress))
                .await
                .map_err(|e| e.to_string())?;
            let cpu_after = launcher.target_cpu_seconds();
            if progress.stopped() {
                // An interrupted run is not a measurement: it is run again on resume.
                break;
            }
            let pdus = &report.pdus;
            let per = |n: u64| pdus.per_command(n);
            let record = RunRecord {
                experiment: experiment.to_owned(),
                implementation: launcher.implementation(),
                point: point.clone(),
                run: run_index,
                negotiated,
                measured: Measured {
                    bytes: report.read.bytes + report.write.bytes,
                    commands: pdus.commands,
                    seconds: report.elapsed.as_secs_f64(),
                    target_cpu_seconds: cpu_before.zip(cpu_after).map(|(a, b)| b - a),
                    initiator_cpu_seconds: report.cpu.total().as_secs_f64(),
                    errors: report.errors,
                    per_command: PerCommand {
                        data_in: per(pdus.data_in),
                        data_out: per(pdus.data_out),
                        r2t: per(pdus.r2t),
                        responses: per(pdus.scsi_response),
                        immediate_bytes: per(pdus.immediate_bytes),
                        unsolicited_bytes: per(pdus.unsolicited_bytes),
                        solicited_bytes: per(pdus.solicited_bytes),
                    },
                },
                predicted: per_command(point),
                mismatch: mismatch.clone(),
            };
            sink(Event::Run(&record));
        }
        Ok(())
    }
    .await;
    let _ = session.logout().await;
    result
}

/// Login options whose offers force `point`'s values (RFC 7143 section 13: the target can
/// only lower the numerical ones and must agree to the boolean ones we ask for).
pub(crate) fn offers(url: &IscsiUrl, p: &Point) -> Result<ConnectOptions, String> {
    let mut o = ConnectOptions::from_url(url).map_err(|e| e.to_string())?;
    let yn = |b: bool| if b { "Yes" } else { "No" };
    let keys = [
        ("MaxRecvDataSegmentLength", p.initiator_mrdsl.to_string()),
        ("MaxBurstLength", p.max_burst.to_string()),
        ("FirstBurstLength", p.first_burst.to_string()),
        ("ImmediateData", yn(p.immediate_data).to_owned()),
        ("InitialR2T", yn(p.initial_r2t).to_owned()),
        ("MaxOutstandingR2T", p.max_outstanding_r2t.to_string()),
        ("DataPDUInOrder", yn(p.data_pdu_in_order).to_owned()),
        (
            "DataSequenceInOrder",
            yn(p.data_sequence_in_order).to_owned(),
        ),
    ];
    for (k, v) in keys {
        o.apply(k, &v).map_err(|e| format!("{k}={v}: {e}"))?;
    }
    let digest = |on: bool| {
        vec![if on {
            DigestKind::Crc32c
        } else {
            DigestKind::None
        }]
    };
    o.offer.header_digest = digest(p.header_digest);
    o.offer.data_digest = digest(p.data_digest);
    o.connections = p.connections;
    o.policy = p.policy;
    // No pings during a measurement.
    o.keepalive_interval = None;
    Ok(o)
}
