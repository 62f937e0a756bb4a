//! The output directory every `sluice lab` study writes: `results.csv` appended one row per
//! run as it finishes (so that `--resume` continues an interrupted run), `results.json` (the
//! same rows and what the run was), PNG figures and `report.md`; and the progress bar.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sluice_lab::study::table::{self, Row, Value};

/// A study's output directory.
pub struct StudyDir {
    dir: PathBuf,
    csv: PathBuf,
}

impl StudyDir {
    /// Opens `out` (creating it) and reads the rows of an earlier run in it. Earlier results
    /// are kept only when asked for (`resume`, or `report_only` which runs nothing); without
    /// either, an earlier run is an error rather than something silently mixed in.
    pub fn open<R: Row>(out: &Path, resume: bool, report_only: bool) -> Result<(Self, Vec<R>)> {
        fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let csv = out.join("results.csv");
        if report_only && !csv.exists() {
            bail!("--report-only: {} does not exist", csv.display());
        }
        let rows = if csv.exists() {
            if !resume && !report_only {
                bail!(
                    "{} holds an earlier run: pass --resume to continue it, or choose another --out",
                    csv.display()
                );
            }
            let text =
                fs::read_to_string(&csv).with_context(|| format!("reading {}", csv.display()))?;
            table::parse_csv(&text).map_err(|e| anyhow::anyhow!("{}: {e}", csv.display()))?
        } else {
            Vec::new()
        };
        Ok((
            Self {
                dir: out.to_owned(),
                csv,
            },
            rows,
        ))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Ends a study's run loop: clears its progress bar, fails with the error that stopped
    /// writing results if there was one, and when the run was interrupted says how many
    /// `what` (runs, points, measurements) are kept and how to continue.
    pub fn end_runs(
        &self,
        bar: &ProgressBar,
        write_error: Option<anyhow::Error>,
        interrupted: bool,
        kept: usize,
        what: &str,
    ) -> Result<()> {
        bar.finish_and_clear();
        if let Some(e) = write_error {
            return Err(e);
        }
        if interrupted {
            eprintln!(
                "interrupted: {kept} {what} kept in {}; continue with --resume",
                self.csv.display()
            );
        }
        Ok(())
    }

    /// `results.csv`, opened for appending rows like `example` (its header written first if
    /// the file is new).
    pub fn appender<R: Row>(&self, example: &R) -> Result<Appender> {
        if !self.csv.exists() {
            fs::write(&self.csv, format!("{}\n", table::csv_header(example)))
                .with_context(|| format!("writing {}", self.csv.display()))?;
        }
        let file = fs::OpenOptions::new()
            .append(true)
            .open(&self.csv)
            .with_context(|| format!("opening {}", self.csv.display()))?;
        Ok(Appender {
            file,
            path: self.csv.clone(),
        })
    }

    /// `results.json`: `about` (what was run) with the rows under `"runs"`.
    pub fn write_json<R: Row>(
        &self,
        mut about: serde_json::Map<String, serde_json::Value>,
        rows: &[R],
    ) -> Result<()> {
        let rows: Vec<serde_json::Value> = rows.iter().map(json_row).collect();
        about.insert("runs".into(), serde_json::Value::Array(rows));
        let path = self.dir.join("results.json");
        fs::write(
            &path,
            serde_json::to_string_pretty(&serde_json::Value::Object(about))?,
        )
        .with_context(|| format!("writing {}", path.display()))
    }

    /// `report.md`; returns its path.
    pub fn write_report(&self, text: &str) -> Result<PathBuf> {
        let path = self.dir.join("report.md");
        fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// `results.csv` open for appending, one row per finished run.
pub struct Appender {
    file: fs::File,
    path: PathBuf,
}

impl Appender {
    /// Appends `row`.
    pub fn append<R: Row>(&mut self, row: &R) -> Result<()> {
        writeln!(self.file, "{}", table::csv_row(row))
            .with_context(|| format!("appending to {}", self.path.display()))
    }
}

/// One row as a JSON object with the CSV's columns.
pub fn json_row<R: Row>(row: &R) -> serde_json::Value {
    let map: serde_json::Map<String, serde_json::Value> = row
        .fields()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), json_value(v)))
        .collect();
    serde_json::Value::Object(map)
}

fn json_value(v: Value) -> serde_json::Value {
    match v {
        Value::Text(s) => serde_json::Value::String(s),
        Value::UInt(n) => n.into(),
        Value::Float(x) => serde_json::Number::from_f64(x)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Value::Bool(b) => b.into(),
        Value::Missing => serde_json::Value::Null,
    }
}

/// The machine in one line: CPU model, logical CPUs, kernel.
pub fn machine_line() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!("Machine: {cpu}, {cores} logical CPUs, Linux {kernel}.")
}

/// CPU 0's caches as "L1d 32K, L2 512K, L3 32768K" (from sysfs; empty where unknown).
pub fn cache_line() -> String {
    let base = Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut caches = Vec::new();
    for i in 0..8 {
        let dir = base.join(format!("index{i}"));
        let read = |f: &str| fs::read_to_string(dir.join(f)).map(|s| s.trim().to_owned());
        let (Ok(level), Ok(kind), Ok(size)) = (read("level"), read("type"), read("size")) else {
            break;
        };
        if kind == "Instruction" {
            continue;
        }
        let d = if kind == "Data" { "d" } else { "" };
        caches.push(format!("L{level}{d} {size}"));
    }
    caches.join(", ")
}

/// Set by the first Ctrl-C (SIGINT): a study stops after the run in progress, keeping what it
/// has for `--resume`.
pub fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let set = std::sync::Arc::clone(&flag);
    std::thread::spawn(move || {
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    set.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
    });
    flag
}

/// A progress line for work whose length is not known ahead: a spinner, the time spent
/// and the latest message.
pub fn spinner() -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}").expect("valid template"),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// A progress bar on standard error for `total` runs (hidden when it is not a terminal).
pub fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {elapsed_precise} eta {eta} {msg}")
            .expect("valid template"),
    );
    bar
}
