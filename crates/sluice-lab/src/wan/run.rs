//! Running a plan: for each point the link's delay set, a target offering the
//! configuration's parameters (through a [`TargetLauncher`]), then the runs: sluice's
//! initiator monitored, a plain socket stream, or libiscsi (through an [`ExternalWriter`]).

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_initiator::{ConnectOptions, IscsiUrl, Session};

use super::config::{Config, Initiator};
use super::decompose;
use super::monitor::{self, Monitor};
use super::pdulog::PduLog;
use super::plan::{Experiment, Plan};
use super::row::{run_key, Negotiated, WanRun};
use super::series;
use super::stream::{run_stream, Sink};
use super::theory;
use crate::link::EmulatedLink;
use crate::progress::Progress;
use crate::runner::{run, Device};
use crate::size_dist::SizeDist;
use crate::study::table::clean;
use crate::sweep::Point;
use crate::workload::{RwMode, Workload};

/// Starts the target side: a sluice target inside the link's namespace, configured so that
/// its offers are `point`'s (`None`: its defaults).
pub trait TargetLauncher {
    /// Makes a target ready and returns its URL (with the LUN).
    fn start(&mut self, point: Option<&Point>) -> Result<IscsiUrl, String>;
    /// Stops it.
    fn stop(&mut self);
}

/// An initiator in another process (libiscsi through qemu-img): writes sequentially to
/// `url` as `config` says for about `warmup` plus `span`; returns the payload bytes and
/// seconds it measured after the warm-up.
pub trait ExternalWriter {
    /// One run.
    fn write(
        &mut self,
        url: &IscsiUrl,
        config: &Config,
        warmup: Duration,
        span: Duration,
    ) -> Result<(u64, f64), String>;
}

/// What the runs need around them.
pub struct Env<'a> {
    /// The link, its delay set per point.
    pub link: &'a mut EmulatedLink,
    /// The target side.
    pub target: &'a mut dyn TargetLauncher,
    /// libiscsi, when the plan has its lines.
    pub libiscsi: Option<&'a mut dyn ExternalWriter>,
    /// The socket streams' sink.
    pub sink: &'a Sink,
    /// Where traced runs' time series go (the output directory).
    pub out: PathBuf,
}

/// What the plan reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A point begins.
    Point {
        /// Its experiment.
        experiment: &'a str,
        /// Its configuration.
        config: &'a Config,
        /// Its RTT, ms.
        rtt_ms: f64,
    },
    /// A run finished.
    Run(&'a WanRun),
    /// A run was already in the output.
    Skipped,
    /// A point could not run; the plan goes on.
    Failed {
        /// Its experiment.
        experiment: &'a str,
        /// Its configuration.
        config: &'a Config,
        /// Its RTT, ms.
        rtt_ms: f64,
        /// Why.
        error: String,
    },
}

/// Runs `plan`, skipping runs whose key is in `done`; `progress` stops it early.
pub fn run_plan(
    plan: &Plan,
    env: &mut Env<'_>,
    rt: &tokio::runtime::Runtime,
    done: &HashSet<String>,
    progress: &Arc<Progress>,
    sink: &mut dyn FnMut(Event<'_>),
) {
    let mut target_for: Option<Option<Point>> = None;
    for (e, c, rtt_ms) in plan.points() {
        if progress.stopped() {
            break;
        }
        sink(Event::Point {
            experiment: e.id,
            config: c,
            rtt_ms,
        });
        let todo: Vec<u32> = (0..plan.runs)
            .filter(|&r| !done.contains(&run_key(e.id, &c.key(), rtt_ms, r)))
            .collect();
        for _ in todo.len()..plan.runs as usize {
            sink(Event::Skipped);
        }
        if todo.is_empty() {
            continue;
        }
        let result = (|| {
            env.link
                .set_spec(plan.link.with_rtt(Duration::from_secs_f64(rtt_ms / 1e3)))
                .map_err(|e| e.to_string())?;
            let url = if c.initiator == Initiator::Socket {
                None
            } else {
                let want = c.params.point(c);
                if target_for.as_ref() != Some(&want) {
                    env.target.stop();
                    target_for = None;
                }
                let url = env.target.start(want.as_ref())?;
                target_for = Some(want);
                Some(url)
            };
            let point = PointRun { plan, e, c, rtt_ms };
            match c.initiator {
                Initiator::Socket => point.socket(env, &todo, progress, sink),
                Initiator::Sluice => {
                    let url = url.ok_or("no target")?;
                    rt.block_on(point.sluice(env, &url, &todo, progress, sink))
                }
                Initiator::Libiscsi => {
                    let url = url.ok_or("no target")?;
                    point.libiscsi(env, &url, &todo, progress, sink)
                }
            }
        })();
        if let Err(error) = result {
            sink(Event::Failed {
                experiment: e.id,
                config: c,
                rtt_ms,
                error,
            });
        }
    }
    env.target.stop();
}

/// Runs `workload` with a progress of its own (a timed run ends by stopping it), stopped
/// early when `user`'s is.
async fn timed_run(
    workload: &Workload,
    device: &Device,
    user: &Arc<Progress>,
) -> Result<crate::report::Report, crate::error::LabError> {
    let mine = Arc::new(Progress::new());
    let (u, m) = (Arc::clone(user), Arc::clone(&mine));
    let relay = tokio::spawn(async move {
        u.wait_stop().await;
        m.stop();
    });
    let r = run(workload, device, mine).await;
    relay.abort();
    r
}

/// One point of the plan.
struct PointRun<'p> {
    plan: &'p Plan,
    e: &'p Experiment,
    c: &'p Config,
    rtt_ms: f64,
}

impl PointRun<'_> {
    /// A row with the configuration filled in.
    fn row(&self, run: u32) -> WanRun {
        let link = &self.plan.link;
        let goodput = link
            .forward
            .rate_bps
            .map(|r| theory::goodput(r as f64, link.mtu));
        let theory = goodput.map_or(0.0, |g| match self.c.initiator {
            Initiator::Socket => g,
            _ => theory::write_line(
                g,
                self.rtt_ms / 1e3,
                u64::from(self.c.block_bytes),
                self.c.queue_depth,
            ),
        });
        WanRun {
            experiment: self.e.id.into(),
            config: clean(&self.c.label),
            config_key: self.c.key(),
            initiator: self.c.initiator.name().into(),
            params: if self.c.initiator == Initiator::Socket {
                "-".into()
            } else {
                self.c.params.name().into()
            },
            cc: self.c.cc_name().into(),
            sndbuf_policy: self.c.tcp.send_buffer.name(),
            queue_depth: self.c.queue_depth,
            block_bytes: self.c.block_bytes,
            connections: self.c.connections,
            rtt_ms: self.rtt_ms,
            rate_bps: link.forward.rate_bps.unwrap_or(0),
            mtu: link.mtu,
            run,
            negotiated: None,
            bytes: 0,
            seconds: 0.0,
            theory_mib_s: theory / f64::from(1 << 20),
            tcp: None,
            decomposition: None,
            link_dropped: 0,
            link_lost: 0,
            lateness_p99_us: 0,
            errors: 0,
        }
    }

    /// Link counters before a run, to take the run's share after it.
    fn link_mark(env: &Env<'_>) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        env.link.forward.take_lateness();
        (
            env.link.forward.dropped.load(Relaxed) + env.link.backward.dropped.load(Relaxed),
            env.link.forward.lost.load(Relaxed) + env.link.backward.lost.load(Relaxed),
        )
    }

    fn link_done(env: &Env<'_>, mark: (u64, u64), row: &mut WanRun) {
        let now = Self::link_mark(env);
        row.link_dropped = now.0 - mark.0;
        row.link_lost = now.1 - mark.1;
    }

    fn keep_series(
        &self,
        env: &Env<'_>,
        run: u32,
        s: &[monitor::Sample],
        p: &[super::pdulog::PduEvent],
    ) -> Result<(), String> {
        // Only the time-series figures read them back (a decomposition is made in memory).
        if self.e.kind != super::plan::Kind::Trace {
            return Ok(());
        }
        let (sp, pp) = series::paths(&env.out, self.e.id, &self.c.label, self.rtt_ms, run);
        series::write(&sp, &pp, s, p).map_err(|e| format!("writing {}: {e}", sp.display()))
    }

    fn socket(
        &self,
        env: &mut Env<'_>,
        todo: &[u32],
        progress: &Arc<Progress>,
        sink: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), String> {
        for &r in todo {
            let mark = Self::link_mark(env);
            let stop = || progress.stopped();
            let res = run_stream(
                env.sink.addr(),
                &self.c.tcp,
                self.c.block_bytes as usize,
                self.e.warmup,
                self.e.seconds,
                &stop,
            )
            .map_err(|e| format!("socket stream: {e}"))?;
            if progress.stopped() {
                return Ok(());
            }
            let mut row = self.row(r);
            row.bytes = res.bytes;
            row.seconds = res.seconds;
            row.tcp = monitor::summarize(&res.samples);
            row.lateness_p99_us = env.link.forward.take_lateness().p99_us;
            Self::link_done(env, mark, &mut row);
            self.keep_series(env, r, &res.samples, &[])?;
            sink(Event::Run(&row));
        }
        Ok(())
    }

    fn libiscsi(
        &self,
        env: &mut Env<'_>,
        url: &IscsiUrl,
        todo: &[u32],
        progress: &Arc<Progress>,
        sink: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), String> {
        for &r in todo {
            let mark = Self::link_mark(env);
            let writer = env
                .libiscsi
                .as_deref_mut()
                .ok_or("libiscsi lines need qemu-img (pass --libiscsi)")?;
            let (bytes, seconds) = writer.write(url, self.c, self.e.warmup, self.e.seconds)?;
            if progress.stopped() {
                return Ok(());
            }
            let mut row = self.row(r);
            row.bytes = bytes;
            row.seconds = seconds;
            row.lateness_p99_us = env.link.forward.take_lateness().p99_us;
            Self::link_done(env, mark, &mut row);
            sink(Event::Run(&row));
        }
        Ok(())
    }

    async fn sluice(
        &self,
        env: &mut Env<'_>,
        url: &IscsiUrl,
        todo: &[u32],
        progress: &Arc<Progress>,
        sink: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), String> {
        let c = self.c;
        let epoch = Instant::now();
        let mut opts = match c.params.point(c) {
            Some(p) => crate::sweep::run::offers(url, &p)?,
            None => {
                let mut o = ConnectOptions::from_url(url).map_err(|e| e.to_string())?;
                o.connections = c.connections;
                o
            }
        };
        opts.keepalive_interval = None;
        opts.tcp = c.tcp.clone();
        let fds: Arc<Mutex<Vec<OwnedFd>>> = Arc::default();
        let keep = Arc::clone(&fds);
        opts.socket_hook = Some(Arc::new(move |s: &tokio::net::TcpStream| {
            if let Ok(fd) = s.as_fd().try_clone_to_owned() {
                keep.lock().unwrap_or_else(|p| p.into_inner()).push(fd);
            }
        }));
        // PDU offsets are those of one connection's stream.
        let log = (self.e.traced() && c.connections == 1).then(|| PduLog::new(epoch));
        if let Some(l) = &log {
            opts.trace = Some(l.hook());
        }
        let session = Session::connect_url_with(url, opts)
            .await
            .map_err(|e| format!("login: {e}"))?;
        let params = session.params();
        if let Some(l) = &log {
            l.set_digests(params.header_digest, params.data_digest);
        }
        let first = fds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .next();
        let monitor = first.map(|fd| Monitor::start(fd, epoch));
        let result = async {
            let lun = url.lun.unwrap_or(0);
            // Clears the power-on unit attention of the new I_T nexus.
            let _ = session.test_unit_ready(lun).await;
            let cap = session
                .read_capacity(lun)
                .await
                .map_err(|e| format!("READ CAPACITY: {e}"))?;
            let negotiated = Negotiated {
                immediate_data: params.immediate_data,
                initial_r2t: params.initial_r2t,
                first_burst: params.first_burst_length,
                max_burst: params.max_burst_length,
                target_mrdsl: params.target_max_recv_data_segment_length,
                max_outstanding_r2t: params.max_outstanding_r2t,
            };
            let block = u64::from(c.block_bytes);
            let region = cap.bytes() - cap.bytes() % block;
            if region == 0 {
                return Err(format!(
                    "the LUN ({} bytes) is smaller than one write",
                    cap.bytes()
                ));
            }
            let workload = Workload {
                rw: RwMode::Write,
                sizes: SizeDist::Fixed(c.block_bytes),
                queue_depth: c.queue_depth as usize,
                time: Some(self.e.seconds),
                count: None,
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
            if !self.e.warmup.is_zero() {
                let warm = Workload {
                    time: Some(self.e.warmup),
                    ..workload.clone()
                };
                timed_run(&warm, &device, progress)
                    .await
                    .map_err(|e| format!("warm-up: {e}"))?;
            }
            for &r in todo {
                if progress.stopped() {
                    break;
                }
                let mark = Self::link_mark(env);
                if let Some(m) = &monitor {
                    m.take();
                }
                if let Some(l) = &log {
                    l.take();
                }
                let report = timed_run(&workload, &device, progress)
                    .await
                    .map_err(|e| e.to_string())?;
                if progress.stopped() {
                    // An interrupted run is not a measurement: it runs again on resume.
                    break;
                }
                // The monitor's last samples trail the run by up to a period.
                tokio::time::sleep(monitor::PERIOD * 2).await;
                let samples = monitor.as_ref().map(Monitor::take).unwrap_or_default();
                let pdus = log.as_ref().map(|l| l.take()).unwrap_or_default();
                let mut row = self.row(r);
                row.negotiated = Some(negotiated);
                row.bytes = report.write.bytes;
                row.seconds = report.elapsed.as_secs_f64();
                row.errors = report.errors;
                row.tcp = monitor::summarize(&samples);
                if c.queue_depth == 1 && !pdus.is_empty() {
                    row.decomposition = decompose::mean(&decompose::decompose(&pdus, &samples));
                }
                row.lateness_p99_us = env.link.forward.take_lateness().p99_us;
                Self::link_done(env, mark, &mut row);
                self.keep_series(env, r, &samples, &pdus)?;
                sink(Event::Run(&row));
            }
            Ok(())
        }
        .await;
        drop(monitor);
        let _ = session.logout().await;
        result
    }
}
