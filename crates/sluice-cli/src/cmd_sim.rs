//! `sluice lab sim`: many seeds of the deterministic simulator, on every CPU, with a progress
//! bar and a summary; or one seed, traced.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use sluice_sim::{FaultChoice, IserCounts, SimConfig, Summary, Transport, Violation};

use crate::cli::{SimArgs, SimTransport};
use crate::client_common::print_json;

/// Violations listed in full (the rest are counted).
const SHOWN: usize = 10;

/// Totals over the seeds that passed.
#[derive(Default, Serialize)]
struct Totals {
    seeds: u64,
    commands: u64,
    reads: u64,
    writes: u64,
    aborted: u64,
    unit_attentions: u64,
    task_set_full: u64,
    task_management: u64,
    pings: u64,
    texts: u64,
    connection_logouts: u64,
    pdus: u64,
    bytes: u64,
    events: u64,
    virtual_seconds: f64,
    /// Seeds by number of connections (index 0 = 1 connection).
    by_connections: [u64; 4],
    /// Seeds that negotiated each value.
    header_digest: u64,
    data_digest: u64,
    immediate_data: u64,
    initial_r2t: u64,
    data_pdu_in_order_no: u64,
    data_sequence_in_order_no: u64,
    /// Seeds by negotiated ErrorRecoveryLevel (0, 1, 2).
    by_error_recovery_level: [u64; 3],
    /// Seeds by the faults they drew.
    by_faults: std::collections::BTreeMap<&'static str, u64>,
    /// Connections lost to faults.
    lost_connections: u64,
    /// Commands and requests ended with a defined error by faults (below level 2).
    lost_to_faults: u64,
    /// Commands and requests that timed out under faults.
    timed_out_by_faults: u64,
    /// What the RDMA connections did (iSER runs).
    iser: IserTotals,
}

/// [`IserCounts`] summed over seeds.
#[derive(Default, Serialize)]
struct IserTotals {
    sends: u64,
    send_invalidates: u64,
    rdma_writes: u64,
    rdma_write_bytes: u64,
    rdma_reads: u64,
    rdma_read_bytes: u64,
    data_pdus_in_sends: u64,
    unsolicited_data_outs: u64,
    wrong_stags: u64,
    remote_access_errors: u64,
    held_back: u64,
}

impl IserTotals {
    fn add(&mut self, c: &IserCounts) {
        self.sends += c.sends;
        self.send_invalidates += c.send_invalidates;
        self.rdma_writes += c.rdma_writes;
        self.rdma_write_bytes += c.rdma_write_bytes;
        self.rdma_reads += c.rdma_reads;
        self.rdma_read_bytes += c.rdma_read_bytes;
        self.data_pdus_in_sends += c.data_pdus_in_sends;
        self.unsolicited_data_outs += c.unsolicited_data_outs;
        self.wrong_stags += c.wrong_stags;
        self.remote_access_errors += c.remote_access_errors;
        self.held_back += c.held_back;
    }
}

impl Totals {
    fn add(&mut self, s: &Summary) {
        let c = &s.counts;
        self.seeds += 1;
        self.commands += s.commands;
        self.reads += c.reads;
        self.writes += c.writes;
        self.aborted += c.aborted;
        self.unit_attentions += c.unit_attentions;
        self.task_set_full += c.task_set_full;
        self.task_management += c.tmfs;
        self.pings += c.pings;
        self.texts += c.texts;
        self.connection_logouts += c.logouts;
        self.pdus += s.pdus;
        self.bytes += s.bytes;
        self.events += s.events;
        self.virtual_seconds += s.virtual_ns as f64 / 1e9;
        let i = usize::from(s.connections.clamp(1, 4) - 1);
        self.by_connections[i] += 1;
        let p = &s.params;
        self.header_digest += u64::from(p.header_digest);
        self.data_digest += u64::from(p.data_digest);
        self.immediate_data += u64::from(p.immediate_data);
        self.initial_r2t += u64::from(p.initial_r2t);
        self.data_pdu_in_order_no += u64::from(!p.data_pdu_in_order);
        self.data_sequence_in_order_no += u64::from(!p.data_sequence_in_order);
        self.by_error_recovery_level[usize::from(p.error_recovery_level.min(2))] += 1;
        *self.by_faults.entry(s.faults).or_default() += 1;
        self.lost_connections += s.lost_connections;
        self.lost_to_faults += c.lost_to_faults;
        self.timed_out_by_faults += c.timed_out_by_faults;
        self.iser.add(&s.iser);
    }
}

#[derive(Serialize)]
struct ViolationJson {
    seed: u64,
    at_seconds: f64,
    what: String,
    replay: String,
}

#[derive(Serialize)]
struct SimJson {
    first: u64,
    seeds: u64,
    connections: Option<u16>,
    ops: Option<u32>,
    transport: &'static str,
    wall_seconds: f64,
    passed: Totals,
    violations: Vec<ViolationJson>,
}

/// `sluice lab sim`.
pub fn run(args: &SimArgs) -> Result<()> {
    if let Some(seed) = args.seed {
        return run_one(args, seed);
    }
    if args.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let bar = progress_bar(args.seeds, args.json);
    let next = AtomicU64::new(args.first);
    let end = args.first.saturating_add(args.seeds);
    let totals = Mutex::new(Totals::default());
    let violations: Mutex<Vec<Violation>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= end {
                    break;
                }
                let cfg = SimConfig {
                    seed,
                    connections: args.connections,
                    ops: args.ops,
                    trace: false,
                    faults: fault_choice(args),
                    transport: transport(args),
                };
                match sluice_sim::run(cfg) {
                    Ok(s) => totals.lock().unwrap_or_else(|p| p.into_inner()).add(&s),
                    Err(v) => {
                        bar.println(format!("VIOLATION {v}"));
                        violations.lock().unwrap_or_else(|p| p.into_inner()).push(v);
                    }
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let totals = totals.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut violations = violations.into_inner().unwrap_or_else(|p| p.into_inner());
    violations.sort_by_key(|v| v.seed);
    if args.json {
        print_json(&SimJson {
            first: args.first,
            seeds: args.seeds,
            connections: args.connections,
            ops: args.ops,
            transport: transport(args).name(),
            wall_seconds: wall,
            passed: totals,
            violations: violations
                .iter()
                .map(|v| ViolationJson {
                    seed: v.seed,
                    at_seconds: v.at_ns as f64 / 1e9,
                    what: v.what.clone(),
                    replay: v.replay_command(),
                })
                .collect(),
        })?;
    } else {
        print_summary(args, &totals, &violations, wall);
    }
    if !violations.is_empty() {
        bail!(
            "{} of {} seeds broke an invariant; replay one with: {}",
            violations.len(),
            args.seeds,
            violations[0].replay_command()
        );
    }
    Ok(())
}

/// One seed, its PDUs on standard error when asked.
fn run_one(args: &SimArgs, seed: u64) -> Result<()> {
    let cfg = SimConfig {
        seed,
        connections: args.connections,
        ops: args.ops,
        trace: args.trace,
        faults: fault_choice(args),
        transport: transport(args),
    };
    match sluice_sim::run(cfg) {
        Ok(s) => {
            if args.json {
                let mut totals = Totals::default();
                totals.add(&s);
                print_json(&totals)?;
            } else {
                outln!(
                    "seed {seed}: ok: {} connection(s), {}, queue depth {}, {} commands ({} reads, {} writes, {} aborted), {} task management, {} PDUs, {:.3} s virtual",
                    s.connections,
                    s.policy.name(),
                    s.queue_depth,
                    s.commands,
                    s.counts.reads,
                    s.counts.writes,
                    s.counts.aborted,
                    s.counts.tmfs,
                    s.pdus,
                    s.virtual_ns as f64 / 1e9
                );
                outln!("negotiated: {:?}", s.params);
                outln!(
                    "faults: {}; connections lost {}; commands and requests ended by faults {}",
                    s.faults,
                    s.lost_connections,
                    s.counts.lost_to_faults
                );
                if s.transport == Transport::Iser {
                    let mut i = IserTotals::default();
                    i.add(&s.iser);
                    print_iser(&i);
                }
            }
            Ok(())
        }
        Err(v) => bail!("{v}"),
    }
}

fn fault_choice(args: &SimArgs) -> FaultChoice {
    if args.no_faults {
        FaultChoice::Off
    } else {
        FaultChoice::FromSeed
    }
}

fn transport(args: &SimArgs) -> Transport {
    match args.transport {
        SimTransport::Tcp => Transport::Tcp,
        SimTransport::Iser => Transport::Iser,
    }
}

fn progress_bar(seeds: u64, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::new(seeds);
    if quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} seeds, {per_sec}, eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
    }
    bar
}

fn print_summary(args: &SimArgs, t: &Totals, violations: &[Violation], wall: f64) {
    outln!(
        "sluice lab sim: seeds {}..{} ({}), {} passed, {} violation(s), {:.1} s ({:.0} seeds/s)",
        args.first,
        args.first.saturating_add(args.seeds),
        args.seeds,
        t.seeds,
        violations.len(),
        wall,
        args.seeds as f64 / wall.max(1e-9)
    );
    outln!(
        "  commands {} (reads {}, writes {}, aborted {}, unit attentions {}, task set full {}), task management {}, pings {}, text {}, connection logouts {}",
        t.commands,
        t.reads,
        t.writes,
        t.aborted,
        t.unit_attentions,
        t.task_set_full,
        t.task_management,
        t.pings,
        t.texts,
        t.connection_logouts
    );
    outln!(
        "  PDUs {}, {:.1} MB on the links, {} events, {:.1} s of virtual time",
        t.pdus,
        t.bytes as f64 / 1e6,
        t.events,
        t.virtual_seconds
    );
    outln!(
        "  sessions with 1/2/3/4 connections: {}/{}/{}/{}",
        t.by_connections[0],
        t.by_connections[1],
        t.by_connections[2],
        t.by_connections[3]
    );
    outln!(
        "  negotiated: HeaderDigest=CRC32C {}, DataDigest=CRC32C {}, ImmediateData=Yes {}, InitialR2T=Yes {}, DataPDUInOrder=No {}, DataSequenceInOrder=No {}",
        t.header_digest,
        t.data_digest,
        t.immediate_data,
        t.initial_r2t,
        t.data_pdu_in_order_no,
        t.data_sequence_in_order_no
    );
    outln!(
        "  ErrorRecoveryLevel 0/1/2: {}/{}/{}; faults: {}; connections lost to faults {}, commands and requests ended by them {}, timed out under them {}",
        t.by_error_recovery_level[0],
        t.by_error_recovery_level[1],
        t.by_error_recovery_level[2],
        t.by_faults
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        t.lost_connections,
        t.lost_to_faults,
        t.timed_out_by_faults
    );
    if args.transport == SimTransport::Iser {
        print_iser(&t.iser);
    }
    for v in violations.iter().take(SHOWN) {
        outln!("  VIOLATION {v}");
    }
    if violations.len() > SHOWN {
        outln!("  ... and {} more", violations.len() - SHOWN);
    }
}

fn print_iser(i: &IserTotals) {
    outln!(
        "  iSER: Sends {} (with Invalidate {}), RDMA Writes {} ({:.1} MB) in place of Data-In, RDMA Reads {} ({:.1} MB) in place of R2T and Data-Out, unsolicited Data-Out in Sends {}, other data PDUs in Sends {}; wrong STags advertised {}, remote access errors {}; Sends held back for MaxOutstandingUnexpectedPDUs {}",
        i.sends,
        i.send_invalidates,
        i.rdma_writes,
        i.rdma_write_bytes as f64 / 1e6,
        i.rdma_reads,
        i.rdma_read_bytes as f64 / 1e6,
        i.unsolicited_data_outs,
        i.data_pdus_in_sends,
        i.wrong_stags,
        i.remote_access_errors,
        i.held_back
    );
}
