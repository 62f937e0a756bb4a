//! `sluice lab iser`: the iSER study (sluice-lab `iser`), written as CSV, JSON, PNG figures
//! and a Markdown report.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use anyhow::{Context as _, Result};
use sluice_lab::iser::run::{self, Event};
use sluice_lab::iser::writeup::{analyse, IserContext};
use sluice_lab::iser::{preset, IserRun, PRESETS};

use crate::cli::IserArgs;
use crate::lab_files::{interrupt_flag, machine_line, progress_bar, StudyDir};

/// `sluice lab iser`.
pub fn run(args: &IserArgs) -> Result<()> {
    let plan = preset(&args.preset).with_context(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
        format!(
            "unknown preset {:?}; presets: {}",
            args.preset,
            names.join(", ")
        )
    })?;
    let (files, mut rows) = StudyDir::open::<IserRun>(&args.out, args.resume, args.report_only)?;
    // The run's target and initiator share this process: its heap behaves as
    // `sluice target`'s does.
    sluice_lab::keep_freed_buffers();
    sluice_lab::use_one_heap();
    let mut failures = 0usize;
    if !args.report_only {
        let done: HashSet<String> = rows.iter().map(IserRun::key).collect();
        let mut csv = files.appender(&IserRun::example())?;
        let bar = progress_bar(plan.points.len() as u64);
        let stop = interrupt_flag();
        let mut write_error = None;
        let ran = run::run(
            &plan,
            &done,
            &|| stop.load(Ordering::Relaxed),
            &mut |e| match e {
                Event::Point(p) => bar.set_message(format!(
                    "{} {} {} B #{}",
                    p.transport.name(),
                    p.direction.name(),
                    p.transfer_bytes,
                    p.rep + 1
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
                Event::Failed { point, error } => {
                    bar.inc(1);
                    failures += 1;
                    bar.suspend(|| eprintln!("{}: {error}", point.key()));
                }
            },
        );
        files.end_runs(
            &bar,
            write_error,
            stop.load(Ordering::Relaxed),
            rows.len(),
            "runs",
        )?;
        ran.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let ctx = IserContext {
        command: command_line(args),
        machine: vec![
            machine_line(),
            format!(
                "The memory LUN is written whole once before the first run; the null LUN keeps \
                 nothing (the study's MEMORYIO mode). Each iSCSI run lasts {:.1} s after a \
                 warm-up of a fifth of that. A raw run measures the provider as long in each of \
                 up to three shapes, in two rounds each, alternating: whole transfers, as many at \
                 a time as commands in flight, the operations iSER makes of them (one per burst \
                 of at most MaxBurstLength, as many at a time as iSER has them), and those with \
                 twice as many in flight; the fastest shape is the ceiling (its operations in \
                 flight are its row's queue depth). Its responding end has a runtime thread of \
                 its own, as the target has.",
                plan.run_time.as_secs_f64(),
            ),
        ],
        preset: plan.name.to_owned(),
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.into());
    about.insert("queue_depth".into(), plan.queue_depth.into());
    about.insert("machine".into(), ctx.machine.clone().into());
    files.write_json(about, &rows)?;
    let analysis = analyse(&rows, &ctx, files.dir()).map_err(anyhow::Error::msg)?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} runs; report {} with {} figures",
        rows.len(),
        report.display(),
        analysis.figures.len()
    );
    if failures > 0 {
        anyhow::bail!("{failures} runs failed (see above); the others are kept");
    }
    Ok(())
}

fn command_line(args: &IserArgs) -> String {
    format!(
        "sluice lab iser --preset {} --out {}{}",
        args.preset,
        args.out.display(),
        if args.resume { " --resume" } else { "" }
    )
}
