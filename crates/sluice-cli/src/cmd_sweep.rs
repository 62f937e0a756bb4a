//! `sluice lab sweep`: runs a parameter-study plan, spawning a sluice target configured for
//! every point (or against `--target`), and writes CSV, JSON, PNG figures and a report.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use sluice_initiator::IscsiUrl;
use sluice_lab::link::{EmulatedLink, LinkSpec};
use sluice_lab::sweep::{
    analyse, preset, run_key, sweep, writeup, Context, Endpoint, Event, Launcher, Plan, Point,
    RunRecord,
};
use sluice_lab::{process_cpu_seconds, Progress};

use crate::cli::SweepArgs;
use crate::client_common::runtime;
use crate::lab_files::{machine_line, progress_bar, StudyDir};

/// The target name spawned targets serve.
pub(crate) const IQN: &str = "iqn.2026-11.io.sluice:sweep";

/// Size of each spawned RAM LUN (sparse: only what is written takes memory).
const LUN_BYTES: u64 = 1 << 30;

/// `sluice lab sweep`.
pub fn run(args: &SweepArgs) -> Result<()> {
    let mut plan = match &args.grid {
        Some(path) => crate::cmd_sweep_grid::load(path)?,
        None => preset_plan(&args.preset)?,
    };

    if let Some(b) = args.bytes {
        if b == 0 {
            bail!("--bytes must be positive");
        }
        plan.bytes_per_run = b;
    }
    if let Some(r) = args.runs {
        plan.runs = r;
    }
    let (files, mut records) =
        StudyDir::open::<RunRecord>(&args.out, args.resume, args.report_only)?;
    let command = command_line(args);
    let mut failures = Vec::new();
    if !args.report_only {
        let link = match &args.link {
            Some(text) => {
                let spec: LinkSpec = text
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--link {text:?}: {e}"))?;
                Some(EmulatedLink::start(spec)?)
            }
            None => None,
        };
        let mut launcher: Box<dyn Launcher> = match &args.target {
            Some(url) => Box::new(Existing::new(url, args.name.clone())?),
            None => Box::new(Spawned::new(&args.out, link.as_ref())?),
        };
        let done: HashSet<String> = records
            .iter()
            .map(|r| run_key(&r.experiment, &r.point, r.run))
            .collect();
        let mut csv = files.appender(&RunRecord::example())?;
        let bar = progress_bar(plan.total_runs());
        let rt = runtime()?;
        let progress = Arc::new(Progress::new());
        let mut write_error = None;
        rt.block_on(async {
            let p = Arc::clone(&progress);
            let ctrl_c = tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    p.stop();
                }
            });
            sweep(
                &plan,
                launcher.as_mut(),
                &done,
                Arc::clone(&progress),
                &mut |ev| match ev {
                    Event::Point {
                        experiment, point, ..
                    } => bar.set_message(format!("{experiment}: {}", writeup::describe(point))),
                    Event::Run(r) => {
                        bar.inc(1);
                        if let Err(e) = csv.append(r) {
                            write_error.get_or_insert(e);
                            progress.stop();
                        }
                        if !r.mismatch.is_empty() {
                            bar.println(format!(
                                "flagged: {} {}: {}",
                                r.experiment,
                                writeup::describe(&r.point),
                                r.mismatch.join("; ")
                            ));
                        }
                        records.push(r.clone());
                    }
                    Event::Skipped => bar.inc(1),
                    Event::Failed {
                        experiment,
                        point,
                        error,
                    } => {
                        bar.inc(u64::from(plan.runs));
                        bar.println(format!(
                            "failed: {experiment} {}: {error}",
                            writeup::describe(point)
                        ));
                        failures.push((experiment.to_owned(), writeup::describe(point), error));
                    }
                },
            )
            .await;
            ctrl_c.abort();
        });
        files.end_runs(&bar, write_error, progress.stopped(), records.len(), "runs")?;
    }
    let ctx = Context {
        command,
        environment: environment(args),
        failures,
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.clone().into());
    about.insert("bytes_per_run".into(), plan.bytes_per_run.into());
    about.insert("runs_per_point".into(), plan.runs.into());
    files.write_json(about, &records)?;
    let analysis = analyse(&plan, &records, &ctx, &args.out).map_err(anyhow::Error::msg)?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} runs; report {} with {} figures",
        records.len(),
        report.display(),
        analysis.figures.len()
    );
    if !ctx.failures.is_empty() {
        bail!(
            "{} points could not run (listed in the report)",
            ctx.failures.len()
        );
    }
    Ok(())
}

/// A preset's plan, or an error listing the presets.
fn preset_plan(name: &str) -> Result<Plan> {
    preset(name).with_context(|| {
        let names: Vec<&str> = sluice_lab::sweep::PRESETS.iter().map(|p| p.0).collect();
        format!("unknown preset {name:?}; presets: {}", names.join(", "))
    })
}

/// The command as typed, for the report.
fn command_line(args: &SweepArgs) -> String {
    let mut s = String::from("sluice lab sweep");
    if let Some(t) = &args.target {
        let _ = write!(s, " --target {t}");
    }
    if let Some(n) = &args.name {
        let _ = write!(s, " --name {n}");
    }
    match &args.grid {
        Some(g) => {
            let _ = write!(s, " --grid {}", g.display());
        }
        None => {
            let _ = write!(s, " --preset {}", args.preset);
        }
    }
    let _ = write!(s, " --out {}", args.out.display());
    if let Some(b) = args.bytes {
        let _ = write!(s, " --bytes {b}");
    }
    if let Some(r) = args.runs {
        let _ = write!(s, " --runs {r}");
    }
    if let Some(l) = &args.link {
        let _ = write!(s, " --link {l}");
    }
    s
}

/// Machine and link, one line each.
fn environment(args: &SweepArgs) -> Vec<String> {
    let cc = sluice_lab::congestion_control().unwrap_or_else(|_| "unknown".into());
    vec![
        machine_line(),
        match &args.target {
            Some(url) => format!("Target: {url} (initiator-side offers only)."),
            None => "Target: a sluice target spawned for every point with a 1 GiB sparse RAM \
                     LUN per LU, configured to the point's values; initiator: sluice's, in \
                     this process."
                .into(),
        },
        match &args.link {
            Some(l) => format!(
                "Link: emulated `{}` between two network namespaces (TUN devices and a \
                 user-space forwarder; TCP congestion control {cc}); both ends and the \
                 forwarder share the machine's CPUs.",
                l.parse::<LinkSpec>().map_or(l.clone(), |s| s.to_string())
            ),
            None => format!(
                "Link: loopback (TCP congestion control {cc}); both ends share the machine's CPUs."
            ),
        },
    ]
}

/// A sluice target started for each point.
struct Spawned {
    exe: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
    /// With an emulated link: the namespace the target runs in and its address.
    netns: Option<(String, String)>,
}

impl Spawned {
    fn new(out: &Path, link: Option<&EmulatedLink>) -> Result<Self> {
        let exe = std::env::current_exe().context("locating the sluice binary")?;
        let dir = out.join("target");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            exe,
            dir,
            child: None,
            netns: link.map(|l| (l.netns().to_owned(), l.target_addr())),
        })
    }
}

/// The target configuration that makes the target's side of the negotiation offer exactly
/// `p`'s values (RFC 7143 section 13: each side's offer bounds the result).
pub(crate) fn target_toml(p: &Point, host: &str, port: u16) -> String {
    let digest = |on: bool| if on { "require" } else { "forbid" };
    let mut s = format!(
        "listen = [\"{host}:{port}\"]\n\n[session]\n\
         max_recv_data_segment_length = {}\nmax_burst_length = {}\nfirst_burst_length = {}\n\
         immediate_data = {}\ninitial_r2t = {}\nmax_outstanding_r2t = {}\n\
         data_pdu_in_order = {}\ndata_sequence_in_order = {}\nheader_digest = \"{}\"\n\
         data_digest = \"{}\"\nqueue_depth = {}\nmax_connections = {}\nphase_collapse = {}\n\n\
         [keepalive]\nenabled = false\n\n[[target]]\niqn = \"{IQN}\"\nacl = \"open\"\n",
        p.target_mrdsl,
        p.max_burst,
        p.first_burst,
        p.immediate_data,
        p.initial_r2t,
        p.max_outstanding_r2t,
        p.data_pdu_in_order,
        p.data_sequence_in_order,
        digest(p.header_digest),
        digest(p.data_digest),
        (p.outstanding * 2).max(128),
        p.connections.max(1),
        p.phase_collapse,
    );
    for lun in 0..p.luns {
        let _ = write!(
            s,
            "\n[[target.lun]]\nnumber = {lun}\nbackend = \"memory\"\nsize = {LUN_BYTES}\n"
        );
    }
    s
}

impl Launcher for Spawned {
    fn implementation(&self) -> String {
        "sluice".into()
    }

    fn start(&mut self, point: &Point) -> Result<Endpoint, String> {
        self.stop();
        let (host, port) = match &self.netns {
            // The link's namespace is the target's alone: the standard port is free.
            Some((_, addr)) => (addr.clone(), 3260),
            None => {
                // A free port: bind to 0, read it, let it go (the target binds it next).
                let port = TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map_err(|e| format!("finding a free port: {e}"))?
                    .port();
                ("127.0.0.1".to_owned(), port)
            }
        };
        let config = self.dir.join("target.toml");
        fs::write(&config, target_toml(point, &host, port))
            .map_err(|e| format!("writing {}: {e}", config.display()))?;
        let log = fs::File::create(self.dir.join("target.log"))
            .map_err(|e| format!("creating the target log: {e}"))?;
        let mut cmd = match &self.netns {
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        let child = cmd
            .arg("target")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.exe.display()))?;
        self.child = Some(child);
        let addr = format!("{host}:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(&addr).is_ok() {
                break;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = fs::read_to_string(self.dir.join("target.log")).unwrap_or_default();
                return Err(format!("the target exited ({status}): {}", log.trim()));
            }
            if Instant::now() > deadline {
                return Err(format!("the target did not listen on {addr} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let url = IscsiUrl::parse(&format!("iscsi://{addr}/{IQN}/0")).map_err(|e| e.to_string())?;
        Ok(Endpoint {
            url,
            luns: (0..point.luns).collect(),
        })
    }

    fn target_cpu_seconds(&self) -> Option<f64> {
        process_cpu_seconds(self.child.as_ref()?.id())
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A target that runs already (tgtd, istgt, another sluice).
struct Existing {
    url: IscsiUrl,
    name: String,
}

impl Existing {
    fn new(url: &str, name: Option<String>) -> Result<Self> {
        let url = IscsiUrl::parse(url)?;
        if url.target.is_none() {
            bail!("{url}: --target must name a target: iscsi://host[:port]/target-iqn/lun");
        }
        let name = name.unwrap_or_else(|| format!("{}:{}", url.host, url.port));
        Ok(Self { url, name })
    }
}

impl Launcher for Existing {
    fn implementation(&self) -> String {
        self.name.clone()
    }

    fn start(&mut self, point: &Point) -> Result<Endpoint, String> {
        if point.luns > 1 {
            return Err(format!(
                "{} LUs: with --target only the URL's LUN is used",
                point.luns
            ));
        }
        Ok(Endpoint {
            url: self.url.clone(),
            luns: vec![self.url.lun.unwrap_or(0)],
        })
    }

    fn target_cpu_seconds(&self) -> Option<f64> {
        None
    }

    fn stop(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_config_offers_the_points_values() {
        let p = Point {
            header_digest: true,
            luns: 2,
            phase_collapse: false,
            ..Point::default().mrdsl(4096).bursts(16384)
        };
        let text = target_toml(&p, "127.0.0.1", 3999);
        for line in [
            "listen = [\"127.0.0.1:3999\"]",
            "max_recv_data_segment_length = 4096",
            "max_burst_length = 16384",
            "first_burst_length = 16384",
            "header_digest = \"require\"",
            "data_digest = \"forbid\"",
            "phase_collapse = false",
            "number = 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
