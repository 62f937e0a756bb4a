//! `sluice lab simstudy`: the simulation study's chapter-5 figures on sluice's protocol code
//! in virtual time (sluice-lab `simstudy`), written as CSV, JSON, PNG figures and a Markdown
//! report.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use sluice_lab::simstudy::writeup::{analyse, SimContext};
use sluice_lab::simstudy::{self, Event, SimRun};
use sluice_lab::{crc_alias, udp_vs_tcp, Progress};

use crate::cli::SimstudyArgs;
use crate::lab_files::{interrupt_flag, machine_line, progress_bar, spinner, StudyDir};

/// `sluice lab simstudy`.
pub fn run(args: &SimstudyArgs) -> Result<()> {
    let plan = simstudy::preset(&args.preset).with_context(|| {
        let names: Vec<&str> = simstudy::PRESETS.iter().map(|p| p.0).collect();
        format!(
            "unknown preset {:?}; presets: {}",
            args.preset,
            names.join(", ")
        )
    })?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(2)
    });
    let (files, mut rows) = StudyDir::open::<SimRun>(&args.out, args.resume, args.report_only)?;
    let mut errors = Vec::new();
    let started = std::time::Instant::now();
    let stop = interrupt_flag();
    if !args.report_only {
        let done: HashSet<String> = rows.iter().map(SimRun::key).collect();
        let mut csv = files.appender(&SimRun::example())?;
        let bar = progress_bar(plan.points.len() as u64);
        let mut write_error = None;
        simstudy::run(
            &plan,
            &done,
            threads,
            &|| stop.load(Ordering::Relaxed),
            &mut |e| match e {
                Event::Started(p) => {
                    bar.set_message(format!("{} {} x={}", p.figure, p.series, p.x))
                }
                Event::Done(r) => {
                    bar.inc(1);
                    if let Err(e) = csv.append(&*r) {
                        write_error.get_or_insert(e);
                        stop.store(true, Ordering::Relaxed);
                    }
                    rows.push(*r);
                }
                Event::Error(p, why) => {
                    bar.inc(1);
                    errors.push(format!("{} {} x = {}: {why}", p.figure, p.series, p.x));
                }
                Event::Skipped(_) => bar.inc(1),
            },
        );
        files.end_runs(
            &bar,
            write_error,
            stop.load(Ordering::Relaxed),
            rows.len(),
            "runs",
        )?;
    }
    // Rows in plan order, so that the report reads the same however the threads finished.
    let order: Vec<String> = plan.points.iter().map(simstudy::SimPoint::key).collect();
    rows.sort_by_key(|r| {
        order
            .iter()
            .position(|k| *k == r.key())
            .unwrap_or(usize::MAX)
    });
    let machine = vec![
        machine_line(),
        format!(
            "{threads} simulation(s) at once; this run took {:.0} s of wall-clock time.",
            started.elapsed().as_secs_f64()
        ),
    ];
    let extra_sections = if stop.load(Ordering::Relaxed) {
        Vec::new()
    } else {
        companion_sections(plan.name, files.dir(), args)?
    };
    let ctx = SimContext {
        command: command_line(args),
        machine,
        preset: plan.name.to_owned(),
        errors,
        extra_sections,
    };
    let mut about = serde_json::Map::new();
    about.insert("preset".into(), plan.name.into());
    about.insert("machine".into(), ctx.machine.clone().into());
    about.insert("errors".into(), ctx.errors.clone().into());
    files.write_json(about, &rows)?;
    let analysis = analyse(&rows, &ctx, files.dir()).map_err(anyhow::Error::msg)?;
    let fits: Vec<serde_json::Value> = analysis
        .fits
        .iter()
        .map(|(name, f)| {
            serde_json::json!({
                "series": name, "n": f.n, "k": f.k, "k_low": f.k_low, "k_high": f.k_high,
                "alpha": f.alpha, "alpha_ci95": f.alpha_ci, "r_squared": f.r_squared,
            })
        })
        .collect();
    std::fs::write(
        files.dir().join("fits.json"),
        serde_json::to_string_pretty(&fits)?,
    )
    .context("writing fits.json")?;
    let report = files.write_report(&analysis.report)?;
    eprintln!(
        "{} runs ({} did not finish); report {} with {} figures",
        rows.len(),
        ctx.errors.len(),
        report.display(),
        analysis.figures.len()
    );
    if !ctx.errors.is_empty() {
        for e in &ctx.errors {
            eprintln!("  {e}");
        }
    }
    Ok(())
}

/// The report sections of the preset's companion studies (the chapter-6 aliasing study, UDP
/// against TCP over real sockets).
fn companion_sections(preset: &str, dir: &Path, args: &SimstudyArgs) -> Result<Vec<String>> {
    let companions = simstudy::companions(preset);
    let mut sections = Vec::new();
    if let Some(scale) = companions.crc_alias {
        let section = companion(
            dir,
            args,
            crc_alias::MARKDOWN_FILE,
            "chapter 6 (CRC aliasing)",
            |bar| {
                crc_alias::run(scale, dir, &|line| bar.set_message(line.to_owned()))
                    .map(|r| r.markdown)
                    .map_err(|e| e.to_string())
            },
        )?;
        sections.extend(section);
    }
    if let Some(scale) = companions.udp_sockets {
        let section = companion(
            dir,
            args,
            udp_vs_tcp::MARKDOWN_FILE,
            "UDP against TCP over real sockets",
            |bar| {
                bar.set_message("Figs. 5.10 and 5.11 over real sockets (UDP against TCP)");
                udp_vs_tcp::run_udp_vs_tcp(scale, dir, Arc::new(Progress::new()))
                    .map(|r| r.markdown)
                    .map_err(|e| e.to_string())
            },
        )?;
        sections.extend(section);
    }
    Ok(sections)
}

/// One companion's section: run now, or read back when resuming or redrawing, since a
/// companion writes its Markdown file (`done`) last and so marks itself complete.
fn companion(
    dir: &Path,
    args: &SimstudyArgs,
    done: &str,
    what: &str,
    run: impl FnOnce(&indicatif::ProgressBar) -> std::result::Result<String, String>,
) -> Result<Option<String>> {
    let done = dir.join(done);
    if (args.resume || args.report_only) && done.exists() {
        let text = std::fs::read_to_string(&done)
            .with_context(|| format!("reading {}", done.display()))?;
        return Ok(Some(text));
    }
    if args.report_only {
        eprintln!(
            "{} is missing: the report has no section for {what}; run without --report-only",
            done.display()
        );
        return Ok(None);
    }
    let bar = spinner();
    let section = run(&bar).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    bar.finish_and_clear();
    Ok(Some(section))
}

fn command_line(args: &SimstudyArgs) -> String {
    format!(
        "sluice lab simstudy --preset {} --out {}{}",
        args.preset,
        args.out.display(),
        if args.resume { " --resume" } else { "" }
    )
}
