//! Running a pdu-cost plan: for each point a target (through a [`Launcher`]), a session whose
//! offers force the point, a warm-up, then the timed commands with the probes zeroed before
//! and read after.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_initiator::Session;
use sluice_probe::Role;

use super::plan::{PduPlan, PduPoint};
use super::row::PduRun;
use crate::progress::Progress;
use crate::runner::{run as run_workload, Device};
use crate::size_dist::SizeDist;
use crate::sweep::run::offers;
use crate::sweep::{Direction, Launcher};
use crate::workload::{RwMode, Workload};

/// Thread-name prefixes the caller gives the target's and the initiator's threads, so that
/// their CPU time can be told apart ([`thread_cpu_seconds`]).
pub const TARGET_THREADS: &str = "sl-target";
/// See [`TARGET_THREADS`].
pub const INITIATOR_THREADS: &str = "sl-initiator";

/// What [`run`] reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A point begins.
    Point(&'a PduPoint),
    /// A point was measured.
    Done(PduRun),
    /// A point was in the output already (resume).
    Skipped(&'a PduPoint),
    /// A point could not be measured; the run goes on.
    Failed {
        /// The point.
        point: &'a PduPoint,
        /// Why.
        error: String,
    },
}

/// CPU seconds so far of this process's threads whose name starts with `prefix`
/// (/proc/self/task/*/schedstat; a thread that ended takes its time with it).
#[must_use]
pub fn thread_cpu_seconds(prefix: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ns: u64 = 0;
    for task in dir.flatten() {
        let path = task.path();
        let named = std::fs::read_to_string(path.join("comm"))
            .is_ok_and(|c| c.trim_end().starts_with(prefix));
        if !named {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(path.join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    ns as f64 / 1e9
}

/// Measures every point of `plan` whose key is not in `done`, reporting to `sink`; stops early
/// when `progress` is stopped. `tsc_hz` is recorded in each row. Must run inside a tokio
/// runtime whose threads are named [`INITIATOR_THREADS`] and carry [`Role::Initiator`], with
/// the launcher's targets on threads named [`TARGET_THREADS`] carrying [`Role::Target`].
pub async fn run(
    plan: &PduPlan,
    launcher: &mut dyn Launcher,
    done: &HashSet<String>,
    tsc_hz: f64,
    progress: Arc<Progress>,
    sink: &mut dyn FnMut(Event<'_>),
) {
    for p in &plan.points {
        if progress.stopped() {
            return;
        }
        if done.contains(&p.key()) {
            sink(Event::Skipped(p));
            continue;
        }
        sink(Event::Point(p));
        let result = measure(p, launcher, tsc_hz, &progress).await;
        launcher.stop();
        match result {
            Ok(Some(row)) => sink(Event::Done(row)),
            // Interrupted: not a measurement; it runs again on resume.
            Ok(None) => return,
            Err(error) => sink(Event::Failed { point: p, error }),
        }
    }
}

async fn measure(
    p: &PduPoint,
    launcher: &mut dyn Launcher,
    tsc_hz: f64,
    progress: &Arc<Progress>,
) -> Result<Option<PduRun>, String> {
    let point = &p.point;
    point.validate()?;
    let endpoint = launcher.start(point)?;
    let lun = *endpoint.luns.first().ok_or("the target offers no LUN")?;
    let session = Session::connect_url_with(&endpoint.url, offers(&endpoint.url, point)?)
        .await
        .map_err(|e| format!("login: {e}"))?;
    let result = async {
        // The first clears the power-on unit attention of the new I_T nexus.
        let _ = session.test_unit_ready(lun).await;
        let cap = session
            .read_capacity(lun)
            .await
            .map_err(|e| format!("READ CAPACITY: {e}"))?;
        let params = session.params();
        let negotiated = (
            match point.direction {
                Direction::Read => params.initiator_max_recv_data_segment_length,
                Direction::Write => params.target_max_recv_data_segment_length,
            },
            params.header_digest,
            params.data_digest,
        );
        let wanted = (p.pdu_bytes(), point.header_digest, point.data_digest);
        if negotiated != wanted {
            return Err(format!(
                "negotiated (PDU bytes, header digest, data digest) {negotiated:?}, wanted {wanted:?}"
            ));
        }
        let bytes = u64::from(point.command_bytes);
        let region = cap.bytes() - cap.bytes() % bytes;
        if region == 0 {
            return Err(format!("the LUN is smaller than one command of {bytes} bytes"));
        }
        let workload = Workload {
            rw: match point.direction {
                Direction::Read => RwMode::Read,
                Direction::Write => RwMode::Write,
            },
            sizes: SizeDist::Fixed(point.command_bytes),
            queue_depth: point.outstanding as usize,
            time: None,
            count: Some(p.commands),
            size: Some(region),
            ..Workload::default()
        };
        let device = Device {
            sessions: vec![session.clone()],
            luns: vec![lun],
            block_size: cap.block_size,
            capacity: cap.bytes(),
            multipath: None,
        };
        let warm = Workload {
            count: Some((p.commands / 4).max(50)),
            ..workload.clone()
        };
        run_workload(&warm, &device, Arc::clone(progress))
            .await
            .map_err(|e| format!("warm-up: {e}"))?;
        sluice_probe::reset();
        let cpu = || {
            (
                thread_cpu_seconds(TARGET_THREADS),
                thread_cpu_seconds(INITIATOR_THREADS),
            )
        };
        let before = cpu();
        let report = run_workload(&workload, &device, Arc::clone(progress))
            .await
            .map_err(|e| e.to_string())?;
        let after = cpu();
        let totals = sluice_probe::snapshot();
        if progress.stopped() {
            return Ok(None);
        }
        if report.errors > 0 {
            return Err(format!(
                "{} commands failed: {}",
                report.errors,
                report.first_error.unwrap_or_default()
            ));
        }
        let data_pdus = match point.direction {
            Direction::Read => report.pdus.data_in,
            Direction::Write => report.pdus.data_out,
        };
        Ok(Some(PduRun {
            experiment: p.experiment.to_owned(),
            direction: point.direction.name().to_owned(),
            command_bytes: point.command_bytes,
            pdu_bytes: negotiated.0,
            header_digest: negotiated.1,
            data_digest: negotiated.2,
            outstanding: point.outstanding,
            commands: report.ios(),
            data_pdus,
            bytes: report.bytes(),
            seconds: report.elapsed.as_secs_f64(),
            tsc_hz,
            target_cpu_seconds: after.0 - before.0,
            initiator_cpu_seconds: after.1 - before.1,
            target_ticks: PduRun::ticks_of(&totals, Role::Target),
            initiator_ticks: PduRun::ticks_of(&totals, Role::Initiator),
        }))
    }
    .await;
    let _ = session.logout().await;
    result
}
