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

/// A progress bar on standard error for `total` runs (hidden when it is not a terminal).
pub fn progress_bar(total: u64) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs {elapsed_precise} eta {eta} {msg}")
            .expect("valid template"),
    );
    bar
}
