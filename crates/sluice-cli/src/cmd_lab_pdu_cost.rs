//! `sluice lab pdu-cost`: the per-PDU cost split of sluice's data path (sluice-lab
//! `pdu_cost`), with a sluice target served in this process for each point, on threads of its
//! own so that the probes and the CPU time tell the two roles apart.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use sluice_initiator::IscsiUrl;
use sluice_lab::crc::timing::tsc_hz;
use sluice_lab::pdu_cost::run::{INITIATOR_THREADS, TARGET_THREADS};
use sluice_lab::pdu_cost::writeup::{analyse, PduContext};
use sluice_lab::pdu_cost::{self, Event, PduRun};
use sluice_lab::sweep::{Endpoint, Launcher, Point};
use sluice_lab::Progress;
use sluice_probe::Role;

use crate::cli::PduCostArgs;
use crate::cmd_sweep::{target_toml, IQN};
use crate::lab_files::{cache_line, machine_line, progress_bar, StudyDir};

/// `sluice lab pdu-cost`.
pub fn run(args: &PduCostArgs) -> Result<()> {
    if !sluice_probe::ENABLED && !args.report_only {
        bail!(
            "this sluice was built without cost probes; build it with \
             `cargo build --release -p sluice-cli --features cost-probes`"
        );
    }
    let plan = pdu_cost::preset(&args.preset).with_context(|| {
        let names: Vec<&str> = pdu_cost::PRESETS.iter().map(|p| p.0).collect();
        format!(
            "unknown preset {:?}; presets: {}",
            args.preset,
            names.join(", ")
        )
    })?;
    let (files, mut rows) = StudyDir::open::<PduRun>(&args.out, args.resume, args.report_only)?;
    let hz = tsc_hz(Duration::from_millis(200)).unwrap_or(1e9);
    let mut failures = Vec::new();
    if !args.report_only {
        let done: HashSet<String> = rows.iter().map(PduRun::key).collect();
        let mut csv = files.appender(&PduRun::example())?;
        let bar = progress_bar(plan.points.len() as u64);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name(INITIATOR_THREADS)
            .on_thread_start(|| {
                sluice_probe::set_role(Role::Initiator);
                pin(INITIATOR_CPU);
            })
            .build()
            .context("cannot start the async runtime")?;
        let progress = Arc::new(Progress::new());
        let mut write_error = None;
        let mut launcher = InProcess::default();
        rt.block_on(async {
            let p = Arc::clone(&progress);
            let ctrl_c = tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    p.stop();
                }
            });
            pdu_cost::run(
                &plan,
                &mut launcher,
                &done,
                hz,
                Arc::clone(&progress),
                &mut |e| match e {
                    Event::Point(p) => bar.set_message(p.key()),
                    Event::Done(r) => {
                        bar.inc(1);
                        if let Err(e) = csv.append(&r) {
                            write_error.get_or_insert(e);
                            progress.stop();
                        }
                        rows.push(r);
                    }
                    Event::Skipped(_) => bar.inc(1),
                    Event::Failed { point, error } => {
                        bar.inc(1);
                        bar.println(format!("failed: {}: {error}", point.key()));
                        failures.push(format!("{}: {error}", point.key()));
                    }
                },
            )
            .await;
            ctrl_c.abort();
        });
        launcher.stop();
        files.end_runs(&bar, write_error, progress.stopped(), rows.len(), "points")?;
    }
    let mut machine = vec![machine_line()];
    let caches = cache_line();
    if !caches.is_empty() {
        machine.push(format!("Caches (CPU 0): {caches}."));
    }
    machine.push(format!(
        "TSC: {:.3} GHz, measured against the monotonic clock.",
        hz / 1e9
    ));
    machine.push(format!(
        "TCP congestion control: {}; the target's threads pinned to CPU {TARGET_CPU}, the \
         initiator's to CPU {INITIATOR_CPU} (when there are two).",
        sluice_lab::congestion_control().unwrap_or_else(|_| "unknown".into())
    ));
    let ctx = PduContext {
        command: format!(
            "cargo build --release -p sluice-cli --features cost-probes\n\
             target/release/sluice lab pdu-cost --preset {} --out {}{}",
            args.preset,
            args.out.display(),
            if args.resume { " --resume" } else { "" }
        ),
        machine,
        preset: plan.name.to_owned(),
        failures: failures.clone(),
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.into());
    about.insert("tsc_hz".into(), hz.into());
    about.insert("machine".into(), ctx.machine.clone().into());
    about.insert("failures".into(), failures.clone().into());
    files.write_json(about, &rows)?;
    let analysis = analyse(&rows, &ctx, files.dir()).map_err(anyhow::Error::msg)?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} points; report {} with {} figures",
        rows.len(),
        report.display(),
        analysis.figures.len()
    );
    if !failures.is_empty() {
        bail!(
            "{} points could not be measured (listed in the report)",
            failures.len()
        );
    }
    Ok(())
}

/// The CPUs the two roles are pinned to (when the machine has two): a span's TSC interval is
/// wall time, so a thread preempted inside one (by the other role, on a shared CPU) would
/// count the other's work as its own.
const TARGET_CPU: usize = 0;
/// See [`TARGET_CPU`].
const INITIATOR_CPU: usize = 1;

/// Keeps this thread on `cpu`, if the machine has it (best effort: nothing otherwise).
fn pin(cpu: usize) {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) <= cpu {
        return;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// A sluice target in this process, on a runtime thread of its own named
/// [`TARGET_THREADS`], restarted for every point with that point's configuration.
#[derive(Default)]
struct InProcess {
    running: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
}

impl Launcher for InProcess {
    fn implementation(&self) -> String {
        "sluice".into()
    }

    fn start(&mut self, point: &Point) -> Result<Endpoint, String> {
        self.stop();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?
            .port();
        let toml = target_toml(point, "127.0.0.1", port);
        let (config, _) = crate::config_file::parse_all(&toml, Path::new("pdu-cost.toml"))
            .map_err(|e| format!("target configuration: {e}"))?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr, String>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(TARGET_THREADS.into())
            .spawn(move || {
                sluice_probe::set_role(Role::Target);
                pin(TARGET_CPU);
                // One worker thread, so the target's work stays on one thread as a
                // single-connection session's does in `sluice target` on a small machine.
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .thread_name(TARGET_THREADS)
                    .on_thread_start(|| {
                        sluice_probe::set_role(Role::Target);
                        pin(TARGET_CPU);
                    })
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let tx = ready_tx.clone();
                let served = rt.block_on(sluice_target::run(
                    config,
                    move |addrs: &[SocketAddr]| {
                        let _ = tx.send(addrs.first().copied().ok_or_else(|| "no portal".into()));
                    },
                    async {
                        let _ = stop_rx.await;
                    },
                ));
                if let Err(e) = served {
                    let _ = ready_tx.send(Err(e.to_string()));
                }
            })
            .map_err(|e| format!("starting the target thread: {e}"))?;
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the target did not start".to_owned())??;
        self.running = Some((stop_tx, thread));
        let url = IscsiUrl::parse(&format!("iscsi://{addr}/{IQN}/0")).map_err(|e| e.to_string())?;
        Ok(Endpoint {
            url,
            luns: (0..point.luns).collect(),
        })
    }

    fn target_cpu_seconds(&self) -> Option<f64> {
        Some(sluice_lab::pdu_cost::thread_cpu_seconds(TARGET_THREADS))
    }

    fn stop(&mut self) {
        if let Some((stop, thread)) = self.running.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
    }
}
