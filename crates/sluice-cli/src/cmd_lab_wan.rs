//! `sluice lab wan`: the WAN write study (sluice-lab `wan`) through an emulated link: the
//! link started and measured, a sluice target spawned inside its namespace for each set of
//! iSCSI parameters, libiscsi through `qemu-img bench` when asked, and CSV, JSON, PNG
//! figures and a Markdown report written.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use sluice_initiator::IscsiUrl;
use sluice_lab::link::{EmulatedLink, LinkAccuracy, LinkSpec};
use sluice_lab::sweep::Point;
use sluice_lab::wan::{
    analyse, apply_tcp_spec, preset, run_plan, Config, Context, Env, Event, ExternalWriter,
    Initiator, Plan, Sink, TargetLauncher, WanRun, PRESETS,
};
use sluice_lab::Progress;

use crate::cli::WanArgs;
use crate::client_common::runtime;
use crate::cmd_sweep::{target_toml, IQN};
use crate::lab_files::{machine_line, progress_bar, StudyDir};

/// Size of the spawned target's RAM LUN (sparse: only what is written takes memory).
const LUN_BYTES: u64 = 1 << 30;
/// The rate probe of the link's accuracy check, at the plan's first RTT.
const RATE_PROBE: Duration = Duration::from_millis(500);

/// `sluice lab wan`.
pub fn run(args: &WanArgs) -> Result<()> {
    let plan = plan(args)?;
    let (files, mut rows) = StudyDir::open::<WanRun>(&args.out, args.resume, args.report_only)?;
    let mut failures = Vec::new();
    let accuracy;
    let load_before = load_average();
    if !args.report_only {
        let mut link = EmulatedLink::start(plan.link).context(
            "sluice lab wan runs the target in a network namespace behind an emulated link",
        )?;
        accuracy = measure_link(&mut link, &plan)?;
        let sink = Sink::start(&link)?;
        let mut target = SpawnedTarget::new(&args.out, &link)?;
        let mut qemu = QemuImg;
        let libiscsi: Option<&mut dyn ExternalWriter> =
            if args.libiscsi { Some(&mut qemu) } else { None };
        let done: HashSet<String> = rows.iter().map(WanRun::key).collect();
        let mut csv = files.appender(&WanRun::example())?;
        let bar = progress_bar(plan.total_runs());
        let rt = runtime()?;
        let progress = Arc::new(Progress::new());
        let p = Arc::clone(&progress);
        let ctrl_c = rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                p.stop();
            }
        });
        let mut write_error = None;
        let mut env = Env {
            link: &mut link,
            target: &mut target,
            libiscsi,
            sink: &sink,
            out: args.out.clone(),
        };
        run_plan(&plan, &mut env, &rt, &done, &progress, &mut |ev| match ev {
            Event::Point {
                experiment,
                config,
                rtt_ms,
            } => bar.set_message(format!("{experiment}: {} at {rtt_ms} ms", config.label)),
            Event::Run(r) => {
                bar.inc(1);
                if let Err(e) = csv.append(r) {
                    write_error.get_or_insert(e);
                    progress.stop();
                }
                rows.push(r.clone());
            }
            Event::Skipped => bar.inc(1),
            Event::Failed {
                experiment,
                config,
                rtt_ms,
                error,
            } => {
                bar.inc(u64::from(plan.runs));
                let what = format!("{experiment}: {} at {rtt_ms} ms", config.label);
                bar.println(format!("failed: {what}: {error}"));
                failures.push((what, error));
            }
        });
        ctrl_c.abort();
        files.end_runs(&bar, write_error, progress.stopped(), rows.len(), "runs")?;
    } else {
        accuracy = read_accuracy(files.dir());
    }
    // Redrawn from an earlier run: the machine and load it ran on, not today's.
    let environment = if args.report_only {
        read_environment(files.dir()).unwrap_or_else(|| environment(&load_before))
    } else {
        environment(&load_before)
    };
    let ctx = Context {
        command: command_line(args),
        environment,
        accuracy,
        failures,
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.clone().into());
    about.insert("link".into(), plan.link.to_string().into());
    about.insert("runs_per_point".into(), plan.runs.into());
    about.insert("environment".into(), ctx.environment.clone().into());
    about.insert(
        "link_accuracy".into(),
        serde_json::Value::Array(ctx.accuracy.iter().map(accuracy_json).collect()),
    );
    files.write_json(about, &rows)?;
    let analysis = analyse(&plan, &rows, &ctx, files.dir()).map_err(anyhow::Error::msg)?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} runs; report {} with {} figures",
        rows.len(),
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

/// The preset with the command line's changes.
fn plan(args: &WanArgs) -> Result<Plan> {
    let mut plan = preset(&args.preset).with_context(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
        format!(
            "unknown preset {:?}; presets: {}",
            args.preset,
            names.join(", ")
        )
    })?;
    if let Some(text) = &args.link {
        // The preset's link, then the command line's keys over it.
        plan.link = format!("{},{text}", plan.link)
            .parse::<LinkSpec>()
            .map_err(|e| anyhow::anyhow!("--link {text:?}: {e}"))?;
    }
    if let Some(r) = args.runs {
        if r == 0 {
            bail!("--runs must be at least 1");
        }
        plan.runs = r;
    }
    if let Some(s) = args.seconds {
        if !(s > 0.0 && s.is_finite()) {
            bail!("--seconds must be positive");
        }
        for e in &mut plan.experiments {
            e.seconds = Duration::from_secs_f64(s);
        }
    }
    if let Some(rtts) = &args.rtts {
        if rtts.is_empty() || rtts.iter().any(|r| !(0.0..=10_000.0).contains(r)) {
            bail!("--rtts: round-trip times from 0 to 10000 ms");
        }
        for e in &mut plan.experiments {
            e.rtts_ms = rtts.clone();
        }
    }
    for e in &mut plan.experiments {
        for c in &mut e.configs {
            if let Some(t) = &args.tcp {
                apply_tcp_spec(&mut c.tcp, t).map_err(|e| anyhow::anyhow!("--tcp: {e}"))?;
            }
            if c.initiator == Initiator::Socket {
                continue;
            }
            if let Some(q) = args.qd {
                c.queue_depth = q;
            }
            if let Some(b) = args.block {
                c.block_bytes = u32::try_from(b).context("--block is too large")?;
            }
            if let Some(n) = args.connections {
                c.connections = n;
            }
        }
    }
    if args.libiscsi {
        plan = plan.with_libiscsi();
    }
    plan.validate().map_err(anyhow::Error::msg)?;
    Ok(plan)
}

/// The link measured at every RTT of the plan (the rate at the first only).
fn measure_link(link: &mut EmulatedLink, plan: &Plan) -> Result<Vec<LinkAccuracy>> {
    let mut rtts: Vec<f64> = plan.points().map(|(_, _, r)| r).collect();
    rtts.sort_by(f64::total_cmp);
    rtts.dedup();
    let mut out = Vec::new();
    for (i, rtt) in rtts.iter().enumerate() {
        link.set_spec(plan.link.with_rtt(Duration::from_secs_f64(rtt / 1e3)))?;
        let probe = if i == 0 { RATE_PROBE } else { Duration::ZERO };
        out.push(link.measure_accuracy(probe)?);
    }
    Ok(out)
}

fn accuracy_json(a: &LinkAccuracy) -> serde_json::Value {
    serde_json::json!({
        "link": a.spec.to_string(),
        "rtt_probes_answered": a.rtt.answered,
        "rtt_probes_sent": a.rtt.sent,
        "rtt_min_us": a.rtt.min_us,
        "rtt_median_us": a.rtt.median_us,
        "rtt_p99_us": a.rtt.p99_us,
        "forward_rate_bps": a.forward_rate_bps,
        "lateness_forward_p50_us": a.forward_lateness.p50_us,
        "lateness_forward_p99_us": a.forward_lateness.p99_us,
        "lateness_forward_max_us": a.forward_lateness.max_us,
        "lateness_forward_mean_us": a.forward_lateness.mean_us,
        "lateness_forward_packets": a.forward_lateness.packets,
    })
}

/// An earlier run's results.json.
fn read_results_json(dir: &Path) -> Option<serde_json::Value> {
    let text = fs::read_to_string(dir.join("results.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// The environment an earlier run stored in results.json (for --report-only).
fn read_environment(dir: &Path) -> Option<Vec<String>> {
    let json = read_results_json(dir)?;
    json["environment"]
        .as_array()?
        .iter()
        .map(|l| l.as_str().map(str::to_owned))
        .collect()
}

/// The accuracy an earlier run stored in results.json (for --report-only).
fn read_accuracy(dir: &Path) -> Vec<LinkAccuracy> {
    let Some(json) = read_results_json(dir) else {
        return Vec::new();
    };
    let Some(list) = json["link_accuracy"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|a| {
            let spec: LinkSpec = a["link"].as_str()?.parse().ok()?;
            Some(LinkAccuracy {
                spec,
                rtt: sluice_lab::link::RttProbe {
                    answered: a["rtt_probes_answered"].as_u64()? as usize,
                    sent: a["rtt_probes_sent"].as_u64()? as usize,
                    min_us: a["rtt_min_us"].as_f64()?,
                    median_us: a["rtt_median_us"].as_f64()?,
                    p99_us: a["rtt_p99_us"].as_f64()?,
                },
                forward_rate_bps: a["forward_rate_bps"].as_f64(),
                forward_lateness: sluice_lab::link::Lateness {
                    packets: a["lateness_forward_packets"].as_u64()?,
                    mean_us: a["lateness_forward_mean_us"].as_f64()?,
                    p50_us: a["lateness_forward_p50_us"].as_u64()?,
                    p99_us: a["lateness_forward_p99_us"].as_u64()?,
                    max_us: a["lateness_forward_max_us"].as_u64()?,
                },
                backward_lateness: sluice_lab::link::Lateness::default(),
            })
        })
        .collect()
}

fn command_line(args: &WanArgs) -> String {
    let mut s = format!(
        "sluice lab wan --preset {} --out {}",
        args.preset,
        args.out.display()
    );
    if let Some(l) = &args.link {
        let _ = write!(s, " --link {l}");
    }
    if let Some(r) = args.runs {
        let _ = write!(s, " --runs {r}");
    }
    if let Some(x) = args.seconds {
        let _ = write!(s, " --seconds {x}");
    }
    if let Some(r) = &args.rtts {
        let list: Vec<String> = r.iter().map(f64::to_string).collect();
        let _ = write!(s, " --rtts {}", list.join(","));
    }
    if let Some(t) = &args.tcp {
        let _ = write!(s, " --tcp {t}");
    }
    if let Some(q) = args.qd {
        let _ = write!(s, " --qd {q}");
    }
    if let Some(b) = args.block {
        let _ = write!(s, " --block {b}");
    }
    if let Some(n) = args.connections {
        let _ = write!(s, " --connections {n}");
    }
    if args.libiscsi {
        s.push_str(" --libiscsi");
    }
    s
}

fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn sysctl(name: &str) -> String {
    fs::read_to_string(format!("/proc/sys/{}", name.replace('.', "/")))
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn environment(load_before: &str) -> Vec<String> {
    let cc = sluice_lab::congestion_control().unwrap_or_else(|_| "unknown".into());
    vec![
        machine_line(),
        format!(
            "Load average (1, 5, 15 min) at the start: {load_before}; at the end: {}. Both ends \
             of the link, its forwarder and everything else on the machine share its CPUs.",
            load_average()
        ),
        format!(
            "TCP: default congestion control {cc}; net.ipv4.tcp_wmem {}; net.ipv4.tcp_rmem {}; \
             net.core.wmem_max {}; net.core.rmem_max {}.",
            sysctl("net.ipv4.tcp_wmem"),
            sysctl("net.ipv4.tcp_rmem"),
            sysctl("net.core.wmem_max"),
            sysctl("net.core.rmem_max"),
        ),
        "Target: a sluice target per set of iSCSI parameters, inside the link's namespace, a \
         1 GiB sparse RAM LUN; initiator: sluice's, in this process, monitored every 0.5 ms."
            .into(),
    ]
}

/// A sluice target inside the link's namespace.
struct SpawnedTarget {
    exe: PathBuf,
    dir: PathBuf,
    netns: String,
    host: String,
    child: Option<Child>,
}

impl SpawnedTarget {
    fn new(out: &Path, link: &EmulatedLink) -> Result<Self> {
        let exe = std::env::current_exe().context("locating the sluice binary")?;
        let dir = out.join("target");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self {
            exe,
            dir,
            netns: link.netns().to_owned(),
            host: link.target_addr(),
            child: None,
        })
    }
}

/// A target with its own defaults: nothing in `[session]`.
fn default_toml(host: &str, port: u16) -> String {
    format!(
        "listen = [\"{host}:{port}\"]\n\n[keepalive]\nenabled = false\n\n[[target]]\n\
         iqn = \"{IQN}\"\nacl = \"open\"\n\n[[target.lun]]\nnumber = 0\nbackend = \"memory\"\n\
         size = {LUN_BYTES}\n"
    )
}

impl TargetLauncher for SpawnedTarget {
    fn start(&mut self, point: Option<&Point>) -> Result<IscsiUrl, String> {
        // The namespace is the target's alone: the standard port is free.
        let port = 3260;
        let url = IscsiUrl::parse(&format!("iscsi://{}:{port}/{IQN}/0", self.host))
            .map_err(|e| e.to_string())?;
        if self.child.is_some() {
            return Ok(url);
        }
        let config = self.dir.join("target.toml");
        let text = match point {
            Some(p) => target_toml(
                &Point {
                    luns: 1,
                    ..p.clone()
                },
                &self.host,
                port,
            ),
            None => default_toml(&self.host, port),
        };
        fs::write(&config, text).map_err(|e| format!("writing {}: {e}", config.display()))?;
        let log = fs::File::create(self.dir.join("target.log"))
            .map_err(|e| format!("creating the target log: {e}"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.netns])
            .arg(&self.exe)
            .arg("target")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.exe.display()))?;
        self.child = Some(child);
        let addr = format!("{}:{port}", self.host);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if TcpStream::connect(&addr).is_ok() {
                return Ok(url);
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let log = fs::read_to_string(self.dir.join("target.log")).unwrap_or_default();
                return Err(format!("the target exited ({status}): {}", log.trim()));
            }
            if Instant::now() > deadline {
                return Err(format!("the target did not listen on {addr} within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SpawnedTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

/// libiscsi's initiator, through `qemu-img bench -w` (Debian: qemu-utils and
/// qemu-block-extra).
struct QemuImg;

impl QemuImg {
    /// One `qemu-img bench` of `count` writes; the seconds it reports.
    fn bench(url: &IscsiUrl, config: &Config, count: u64) -> Result<f64, String> {
        let out = Command::new("qemu-img")
            .args(["bench", "-w", "-f", "raw", "-t", "none", "-n"])
            .arg("-c")
            .arg(count.to_string())
            .arg("-d")
            .arg(config.queue_depth.to_string())
            .arg("-s")
            .arg(config.block_bytes.to_string())
            .arg(url.to_string())
            .output()
            .map_err(|e| {
                format!("running qemu-img: {e} (apt-get install qemu-utils qemu-block-extra)")
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "qemu-img bench failed: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        // "Run completed in 3.456 seconds."
        text.lines()
            .find_map(|l| {
                l.strip_prefix("Run completed in ")?
                    .strip_suffix(" seconds.")?
                    .parse::<f64>()
                    .ok()
            })
            .ok_or_else(|| format!("qemu-img bench said: {}", text.trim()))
    }
}

impl ExternalWriter for QemuImg {
    fn write(
        &mut self,
        url: &IscsiUrl,
        config: &Config,
        warmup: Duration,
        span: Duration,
    ) -> Result<(u64, f64), String> {
        let block = u64::from(config.block_bytes);
        let qd = u64::from(config.queue_depth);
        // A short first run measures the rate, so that the measured run lasts about `span`
        // (qemu-img bench counts writes, not seconds); it is also the warm-up.
        let probe = (warmup.as_secs_f64().max(0.5) * 20e6 / block as f64).ceil() as u64;
        let probe = probe.max(qd).max(2);
        let t = Self::bench(url, config, probe)?;
        let rate = probe as f64 * block as f64 / t.max(1e-6);
        let count = ((rate * span.as_secs_f64() / block as f64).ceil() as u64).max(qd);
        let secs = Self::bench(url, config, count)?;
        Ok((count * block, secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_overrides_apply_over_the_preset() {
        let args = WanArgs {
            preset: "quick".into(),
            out: "x".into(),
            resume: false,
            report_only: false,
            link: Some("rate=500mbit,queue=2M".into()),
            runs: Some(2),
            seconds: Some(3.0),
            rtts: Some(vec![0.0, 50.0]),
            tcp: Some("cc=reno,sndbuf=16M".into()),
            qd: Some(4),
            block: Some(2 << 20),
            connections: None,
            libiscsi: false,
        };
        let p = plan(&args).unwrap();
        assert_eq!(p.link.forward.rate_bps, Some(500_000_000));
        assert_eq!(p.link.backward.queue_bytes, 2 << 20);
        assert_eq!(p.link.mtu, 9000, "the preset's MTU stays");
        assert_eq!(p.runs, 2);
        for e in &p.experiments {
            assert_eq!(e.seconds, Duration::from_secs(3));
            assert_eq!(e.rtts_ms, [0.0, 50.0]);
        }
        for (_, c, _) in p.points() {
            assert_eq!(c.cc_name(), "reno");
            if c.initiator != Initiator::Socket {
                assert_eq!((c.queue_depth, c.block_bytes), (4, 2 << 20));
            }
        }
        let bad = WanArgs {
            link: Some("rate=fast".into()),
            ..args
        };
        assert!(plan(&bad).unwrap_err().to_string().contains("--link"));
    }
}
