//! `sluice bench`: a fio-like load generator on the initiator library. This file holds the
//! flags and the run (sessions, runtime, live progress, Ctrl-C); the engine is `sluice-lab`
//! and the report's text and JSON forms are in [`crate::bench_output`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_initiator::multipath::{Multipath, MultipathOptions};
use sluice_initiator::{ConnectOptions, IscsiUrl, Policy, Session};
use sluice_lab::{parse_trace, Arrival, Device, Progress, RwMode, SizeDist, Workload};

use crate::bench_output;
use crate::client_args::ConnArgs;
use crate::client_common::{lun_url, options};
use crate::size::{parse_duration, parse_size};

/// Text after `sluice bench --help`.
const BENCH_AFTER_HELP: &str = "\
Examples:
  sluice bench iscsi://127.0.0.1/iqn.2026-11.io.sluice:default/0 --rw randread --bs 4k --qd 32 --time 10s
  sluice bench URL --rw read --bs 1M --qd 8
  sluice bench URL --rw randrw --mix 70 --bs 8k:0.1,16k:0.2,32k:0.3,64k:0.4 --rate 2000 --poisson
  sluice bench URL --rw randwrite --verify --count 10000 --json
  sluice bench URL --trace Financial1.spc --speed 10
  sluice bench iscsi://10.0.0.1/iqn.2026-11.io.sluice:default/0 --paths 10.0.0.2:3260 --verify --time 60s

A trace is SPC format, one record per line: ASU,LBA,SIZE,OPCODE,TIMESTAMP[,...] with the LBA
in 512-byte sectors, SIZE in bytes, OPCODE R or W and TIMESTAMP in seconds. Every ASU goes to
the URL's LUN; addresses wrap into --offset/--size.";

/// The access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RwArg {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Random reads and writes (--mix percent reads).
    Randrw,
}

/// A connection policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyArg {
    /// Each command on the next connection in turn.
    RoundRobin,
    /// Each LUN bound to one connection.
    LuAffinity,
    /// The connection with the fewest commands outstanding.
    LeastCommands,
    /// The connection with the fewest bytes outstanding.
    LeastBytes,
}

impl PolicyArg {
    fn policy(self) -> Policy {
        match self {
            PolicyArg::RoundRobin => Policy::RoundRobin,
            PolicyArg::LuAffinity => Policy::LuAffinity,
            PolicyArg::LeastCommands => Policy::LeastCommands,
            PolicyArg::LeastBytes => Policy::LeastBytes,
        }
    }
}

/// `sluice bench`.
#[derive(Debug, Args)]
#[command(after_help = BENCH_AFTER_HELP)]
pub struct BenchArgs {
    /// iscsi://[user[%secret]@]host[:port]/target-iqn/lun
    pub url: String,
    /// Access pattern.
    #[arg(long, value_enum, default_value_t = RwArg::Randread)]
    pub rw: RwArg,
    /// Percent of reads for --rw randrw.
    #[arg(long, value_name = "PERCENT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,
    /// Command size (4k, 1M) or a distribution SIZE:P,... (8k:0.1,16k:0.2,32k:0.3,64k:0.4).
    #[arg(long, value_name = "SIZE|PMF", default_value = "4k")]
    pub bs: String,
    /// Commands in flight per session.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qd: u32,
    /// Sessions, each with --qd commands in flight.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub sessions: u32,
    /// Connections per session (MC/S): MaxConnections is offered this high, and the session
    /// opens as many as the target accepts (a target that answers 1 runs on one, and the
    /// report says so).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub connections: u16,
    /// How a session spreads commands over its connections.
    #[arg(long, value_enum, default_value_t = PolicyArg::RoundRobin)]
    pub policy: PolicyArg,
    /// LUNs to spread each session's commands over (default: the URL's LUN), e.g. 0,1,2,3;
    /// with --policy lu-affinity each LUN's commands go to one connection.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub luns: Vec<u16>,
    /// Log out the last connection of each session after this long (30s, 500ms), while the
    /// others finish the run.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub logout_connection_after: Option<Duration>,
    /// Run time (30s, 1m, 500ms). Default 10s unless --count or --trace is given.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub time: Option<Duration>,
    /// Stop after this many I/Os (whichever of --time and --count comes first).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Open loop: issue this many commands per second in total (evenly spaced).
    #[arg(long, value_name = "IOPS")]
    pub rate: Option<f64>,
    /// With --rate: Poisson arrivals (exponential inter-arrival times) instead of even spacing.
    #[arg(long, requires = "rate")]
    pub poisson: bool,
    /// Write a pattern, read it back and compare (each worker owns a stripe of the range).
    #[arg(long, conflicts_with = "trace")]
    pub verify: bool,
    /// First byte of the range to use.
    #[arg(long, value_parser = size_arg, default_value = "0")]
    pub offset: u64,
    /// Bytes of the range to use (default: the rest of the LUN).
    #[arg(long, value_parser = size_arg)]
    pub size: Option<u64>,
    /// Replay an SPC trace file instead of generating I/Os.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "bs"])]
    pub trace: Option<PathBuf>,
    /// Trace replay speed: 1 as recorded, 10 ten times faster, 0 as fast as --qd allows.
    #[arg(long, value_name = "X", default_value_t = 1.0, requires = "trace")]
    pub speed: f64,
    /// Runtime threads: 0 runs everything on this thread (usually fastest on a small box).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Seed of the random generators (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// No live progress line.
    #[arg(long)]
    pub quiet: bool,
    /// Multipath: more portals of the same target and LUN (HOST:PORT, comma-separated),
    /// used beside the URL's. Each path is its own session; commands go to the paths whose
    /// ALUA state is active/optimized (else active/non-optimized), and when a path fails
    /// they move to the others. The report shows each path's counters.
    #[arg(long, value_name = "HOST:PORT,...", value_delimiter = ',',
          conflicts_with_all = ["sessions", "luns", "logout_connection_after"])]
    pub paths: Vec<String>,
    /// Multipath: also use every portal SendTargets at the URL's portal lists for the
    /// target (its TargetAddress values).
    #[arg(long, conflicts_with_all = ["sessions", "luns", "logout_connection_after"])]
    pub discover_paths: bool,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// `sluice bench URL [flags]`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let workload = workload(args)?;
    sluice_lab::keep_freed_buffers();
    let rt = if args.threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()
    }
    .context("starting the I/O runtime")?;
    let (report, iser, transport) = rt.block_on(bench(args, &workload))?;
    if args.conn.json {
        bench_output::print_json(&workload, &report, transport, iser.as_ref())?;
    } else {
        bench_output::print_text(&workload, &report);
        if let Some(iser) = &iser {
            bench_output::print_iser(&report, iser);
        }
    }
    if let Some(v) = &report.verify {
        if v.final_errors > 0 {
            bail!(
                "{} of {} acknowledged writes were not there after the run: {}",
                v.final_errors,
                v.final_checked,
                v.final_first_error.as_deref().unwrap_or("")
            );
        }
        if v.errors > 0 {
            bail!(
                "{} of {} read-backs differed: {}",
                v.errors,
                v.checked,
                v.first_error.as_deref().unwrap_or("")
            );
        }
    }
    if report.errors > 0 {
        bail!(
            "{} commands failed; the first: {}",
            report.errors,
            report.first_error.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// The workload the flags describe.
fn workload(args: &BenchArgs) -> Result<Workload> {
    let trace = match &args.trace {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let t = parse_trace(&text).with_context(|| p.display().to_string())?;
            if t.is_empty() {
                bail!("{}: no trace records", p.display());
            }
            Some(Arc::from(t))
        }
        None => None,
    };
    if !(args.speed.is_finite() && args.speed >= 0.0) {
        bail!("--speed {} must be 0 or more", args.speed);
    }
    let arrival = match args.rate {
        None => Arrival::Closed,
        Some(r) if !(r.is_finite() && r > 0.0) => bail!("--rate {r} must be positive"),
        Some(rate) if args.poisson => Arrival::Poisson { rate },
        Some(rate) => Arrival::Fixed { rate },
    };
    let time = match (args.time, args.count, &trace) {
        (None, None, None) => Some(Duration::from_secs(10)),
        (t, _, _) => t,
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    Ok(Workload {
        rw: match args.rw {
            RwArg::Read => RwMode::Read,
            RwArg::Write => RwMode::Write,
            RwArg::Randread => RwMode::RandRead,
            RwArg::Randwrite => RwMode::RandWrite,
            RwArg::Randrw => RwMode::RandRw,
        },
        read_percent: args.mix,
        sizes: SizeDist::parse(&args.bs)?,
        queue_depth: args.qd as usize,
        time,
        count: args.count,
        arrival,
        verify: args.verify,
        offset: args.offset,
        size: args.size,
        trace,
        speed: args.speed,
        seed,
        logout_connection_after: args.logout_connection_after,
    })
}

/// Logs in, runs the workload with a live progress line, logs out.
async fn bench(
    args: &BenchArgs,
    workload: &Workload,
) -> Result<(
    sluice_lab::Report,
    Option<sluice_proto::iser::InitiatorMoverStats>,
    &'static str,
)> {
    let (url, lun) = lun_url(&args.url)?;
    let luns = if args.luns.is_empty() {
        vec![lun]
    } else {
        args.luns.clone()
    };
    let mut opts = options(&url, &args.conn)?;
    opts.connections = args.connections;
    opts.policy = args.policy.policy();
    if !args.paths.is_empty() || args.discover_paths {
        if opts.iser.is_some() || opts.udp.is_some() {
            bail!("--paths and --discover-paths take iscsi:// URLs only (multipath runs over TCP)");
        }
        let device = multipath_device(args, &url, lun, opts).await?;
        return Ok((run_device(args, workload, device).await?, None, "tcp"));
    }
    let mut sessions = Vec::new();
    for i in 0..args.sessions {
        let s = Session::connect_url_with(&url, opts.clone())
            .await
            .with_context(|| format!("session {} to {url}", i + 1))?;
        let open = s.connections().len();
        if open < usize::from(args.connections) {
            eprintln!(
                "sluice bench: session {}: the target accepted MaxConnections={}: running on {open} connection(s) of the {} asked for",
                i + 1,
                s.params().max_connections,
                args.connections
            );
        }
        // Clear the power-on UNIT ATTENTION every new I_T nexus sees before measuring.
        for &l in &luns {
            s.test_unit_ready(l)
                .await
                .with_context(|| format!("TEST UNIT READY of LUN {l} on {url}"))?;
        }
        sessions.push(s);
    }
    let mut capacity = u64::MAX;
    let mut block_size = 0;
    for &l in &luns {
        let cap = sessions[0]
            .read_capacity(l)
            .await
            .with_context(|| format!("READ CAPACITY of LUN {l} on {url}"))?;
        if block_size != 0 && cap.block_size != block_size {
            bail!(
                "--luns: LUN {l} has {}-byte blocks, the others {block_size}",
                cap.block_size
            );
        }
        block_size = cap.block_size;
        capacity = capacity.min(cap.bytes());
    }
    let device = Device {
        sessions,
        luns,
        block_size,
        capacity,
        multipath: None,
    };
    let report = run_device(args, workload, device).await?;
    let iser = opts.iser.is_some().then(|| opts.iser_stats.snapshot());
    // An iser:// session the target refused (with iser_fallback=tcp) ran over TCP: no Send
    // ever crossed an RDMA connection.
    let transport = match (&iser, opts.udp) {
        (Some(s), _) if s.sends > 0 => "iser",
        (None, Some(_)) => "udp",
        _ => "tcp",
    };
    Ok((report, iser, transport))
}

/// Logs in through the URL's portal, the `--paths` portals and, with `--discover-paths`,
/// those SendTargets lists, as one multipath device.
async fn multipath_device(
    args: &BenchArgs,
    url: &IscsiUrl,
    lun: u16,
    opts: ConnectOptions,
) -> Result<Device> {
    let target = url.target.clone().context("the URL names no target")?;
    let mut portals = vec![url.portal()];
    if args.discover_paths {
        let found = Multipath::discover_portals(&url.portal(), &target, &opts)
            .await
            .with_context(|| format!("SendTargets at {}", url.portal()))?;
        portals.extend(found);
    }
    portals.extend(args.paths.iter().map(|p| p.trim().to_owned()));
    let mut unique: Vec<String> = Vec::new();
    for p in portals {
        if !unique.contains(&p) {
            unique.push(p);
        }
    }
    let mp = Multipath::connect(&unique, &target, lun, MultipathOptions::for_paths(opts))
        .await
        .with_context(|| format!("multipath to {target} through {}", unique.join(", ")))?;
    let cap = mp
        .read_capacity()
        .await
        .with_context(|| format!("READ CAPACITY of LUN {lun} of {target}"))?;
    Ok(Device {
        sessions: Vec::new(),
        luns: vec![lun],
        block_size: cap.block_size,
        capacity: cap.bytes(),
        multipath: Some(mp),
    })
}

/// Runs the workload on the device with a live progress line, then logs out.
async fn run_device(
    args: &BenchArgs,
    workload: &Workload,
    device: Device,
) -> Result<sluice_lab::Report> {
    let progress = Arc::new(Progress::new());
    let live = (!args.quiet).then(|| spawn_progress(Arc::clone(&progress)));
    let ctrl_c = {
        let p = Arc::clone(&progress);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                p.stop();
            }
        })
    };
    let result = sluice_lab::run(workload, &device, Arc::clone(&progress)).await;
    ctrl_c.abort();
    if let Some((bar, task)) = live {
        task.abort();
        bar.finish_and_clear();
    }
    for s in &device.sessions {
        let _ = s.logout().await;
    }
    if let Some(m) = &device.multipath {
        m.close().await;
    }
    Ok(result?)
}

/// A progress line on stderr (only when it is a terminal), refreshed every second with the
/// last second's IOPS, MiB/s and mean latency.
fn spawn_progress(p: Arc<Progress>) -> (ProgressBar, tokio::task::JoinHandle<()>) {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("valid template"),
    );
    let b = bar.clone();
    let task = tokio::spawn(async move {
        let mut last = p.snapshot();
        let mut at = Instant::now();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = p.snapshot();
            let dt = at.elapsed().as_secs_f64().max(1e-9);
            let ios = now.ios - last.ios;
            let lat = if ios > 0 {
                (now.latency_ns - last.latency_ns) as f64 / ios as f64 / 1000.0
            } else {
                0.0
            };
            b.set_message(format!(
                "{:.0} IOPS  {:.1} MiB/s  lat {:.0} us  errors {}",
                ios as f64 / dt,
                (now.bytes - last.bytes) as f64 / dt / 1048576.0,
                lat,
                now.errors
            ));
            b.tick();
            last = now;
            at = Instant::now();
        }
    });
    (bar, task)
}
