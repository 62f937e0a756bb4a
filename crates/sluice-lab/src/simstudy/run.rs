//! Runs a plan's points, each a deterministic simulation, on a few threads; rows come back
//! as they finish.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use sluice_sim::experiment::run_experiment;

use super::plan::{SimPlan, SimPoint};
use super::row::SimRun;

/// What [`run`] reports.
#[derive(Debug)]
pub enum Event {
    /// A point started.
    Started(SimPoint),
    /// A point finished.
    Done(Box<SimRun>),
    /// A point could not finish (the simulation stopped without completing its commands).
    Error(SimPoint, String),
    /// Skipped: already in the results.
    Skipped(SimPoint),
}

/// Runs every point of `plan` whose key is not in `done`, on `threads` threads, until
/// `stop()` says so.
pub fn run(
    plan: &SimPlan,
    done: &HashSet<String>,
    threads: usize,
    stop: &(dyn Fn() -> bool + Sync),
    on: &mut dyn FnMut(Event),
) {
    let mut todo = Vec::new();
    for p in &plan.points {
        if done.contains(&p.key()) {
            on(Event::Skipped(p.clone()));
        } else {
            todo.push(p.clone());
        }
    }
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            let tx = tx.clone();
            let (todo, next) = (&todo, &next);
            s.spawn(move || loop {
                if stop() {
                    return;
                }
                let Some(p) = todo.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                let _ = tx.send(Event::Started(p.clone()));
                let event = match run_experiment(&p.experiment()) {
                    Ok(out) => Event::Done(Box::new(SimRun::new(p, &out))),
                    Err(e) => Event::Error(p.clone(), e.to_string()),
                };
                if tx.send(event).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for e in rx {
            on(e);
        }
    });
}
