//! `sluice lab crc`: the fast-path study's CRC32C measurements (sluice-lab `crc::study`),
//! written as CSV, JSON, PNG figures and a Markdown report.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use sluice_lab::crc::study::{self, CrcRun, Event};
use sluice_lab::crc::timing::tsc_hz;
use sluice_lab::crc::writeup::{analyse, CrcContext};

use crate::cli::CrcArgs;
use crate::lab_files::{cache_line, interrupt_flag, machine_line, progress_bar, StudyDir};

/// `sluice lab crc`.
pub fn run(args: &CrcArgs) -> Result<()> {
    let plan = study::preset(&args.preset).with_context(|| {
        let names: Vec<&str> = study::PRESETS.iter().map(|p| p.0).collect();
        format!(
            "unknown preset {:?}; presets: {}",
            args.preset,
            names.join(", ")
        )
    })?;
    // A fast wrong CRC is worth nothing: nothing is timed unless every check passes.
    let checks = study::check();
    if !checks.passed {
        for l in &checks.lines {
            eprintln!("{l}");
        }
        bail!("a CRC32C implementation failed its checks; nothing was timed");
    }
    let (files, mut rows) = StudyDir::open::<CrcRun>(&args.out, args.resume, args.report_only)?;
    let tsc = tsc_hz(Duration::from_millis(200));
    if !args.report_only {
        let done: HashSet<String> = rows.iter().map(CrcRun::key).collect();
        let mut csv = files.appender(&CrcRun::example())?;
        let bar = progress_bar(plan.points.len() as u64);
        let stop = interrupt_flag();
        let mut write_error = None;
        study::run(
            &plan,
            &done,
            &|| stop.load(Ordering::Relaxed),
            &mut |e| match e {
                Event::Point(p) => bar.set_message(format!(
                    "{} {} {} {} B {}",
                    p.experiment,
                    p.crc,
                    p.method,
                    p.size,
                    p.temperature.name()
                )),
                Event::Done(r) => {
                    bar.inc(1);
                    if let Err(e) = csv.append(&r) {
                        write_error.get_or_insert(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                    rows.push(r);
                }
                Event::Skipped(_) => bar.inc(1),
            },
        );
        files.end_runs(
            &bar,
            write_error,
            stop.load(Ordering::Relaxed),
            rows.len(),
            "measurements",
        )?;
    }
    let mut machine = vec![machine_line()];
    let caches = cache_line();
    if !caches.is_empty() {
        machine.push(format!("Caches (CPU 0): {caches}."));
    }
    machine.push(match tsc {
        Some(hz) => format!(
            "TSC: {:.3} GHz, measured against the monotonic clock.",
            hz / 1e9
        ),
        None => "No time-stamp counter: costs are in nanoseconds.".into(),
    });
    machine.push(format!(
        "Trials per measurement: {}, each at least {} ms; a cold measurement walks {} MiB.",
        plan.trials,
        plan.trial_time.as_millis(),
        plan.cold_set_bytes >> 20
    ));
    let ctx = CrcContext {
        command: command_line(args),
        machine,
        checks: checks.lines,
        preset: plan.name.to_owned(),
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.into());
    about.insert("tsc_hz".into(), tsc.into());
    about.insert("machine".into(), ctx.machine.clone().into());
    about.insert("checks".into(), ctx.checks.clone().into());
    files.write_json(about, &rows)?;
    let analysis = analyse(&rows, &ctx, files.dir()).map_err(anyhow::Error::msg)?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} measurements; report {} with {} figures",
        rows.len(),
        report.display(),
        analysis.figures.len()
    );
    Ok(())
}

fn command_line(args: &CrcArgs) -> String {
    format!(
        "sluice lab crc --preset {} --out {}{}",
        args.preset,
        args.out.display(),
        if args.resume { " --resume" } else { "" }
    )
}
