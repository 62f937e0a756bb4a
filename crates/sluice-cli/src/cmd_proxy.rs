//! `sluice proxy`: the flags become a `sluice_fault::FaultPlan`, `sluice_proxy::Proxy` serves
//! until a signal, and the counters are printed as text or JSON.

use std::net::{SocketAddr, ToSocketAddrs};
use std::num::NonZeroU64;
use std::time::Duration;

use anyhow::{anyhow, Context};
use serde::Serialize;
use sluice_fault::{Direction, FaultCounters, FaultPlan, Rules};
use sluice_proxy::{Proxy, ProxyCounters};

use crate::cli::{parse_listen, ProxyArgs, DEFAULT_PORT};
use crate::client_common::print_json;
use crate::signals;

/// `sluice proxy`.
pub fn run(args: &ProxyArgs) -> anyhow::Result<()> {
    let plan = plan(args)?;
    let upstream = resolve(&args.to)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sluice-proxy")
        .build()
        .context("cannot start the async runtime")?;
    let counters = runtime.block_on(async {
        let shutdown = signals::shutdown_signal().context("cannot install signal handlers")?;
        let proxy = Proxy::bind(args.listen, upstream, plan.clone(), args.seed)
            .await
            .with_context(|| format!("iSCSI proxy on {}", args.listen))?;
        let addr = proxy.local_addr().context("the proxy's address")?;
        eprintln!(
            "sluice proxy listening on {addr}, forwarding to {upstream}, seed {} \
             (Ctrl-C or SIGTERM to stop)",
            args.seed
        );
        anyhow::Ok(proxy.serve(shutdown).await)
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    if args.json {
        print_json(&SummaryJson::new(args, upstream, &counters))
    } else {
        print_text(&counters);
        Ok(())
    }
}

/// The plan the flags describe: the same rules both ways, each drop rule in the direction its
/// kind travels.
fn plan(args: &ProxyArgs) -> anyhow::Result<FaultPlan> {
    let mut plan = FaultPlan::symmetric(Rules {
        corrupt_data: args.corrupt_data,
        corrupt_header: args.corrupt_header,
        ber: args.ber,
        drop: args.drop.clone(),
        duplicate: args.duplicate,
        delay: Duration::from_millis(args.delay),
    });
    plan.reset_every = args.reset_every.and_then(NonZeroU64::new);
    plan.check().map_err(|e| anyhow!("{e}"))?;
    Ok(plan)
}

/// `HOST:PORT`, `HOST` (port 3260), or an IP address as `--listen` takes it; a host name is
/// resolved once, here, to its first address.
fn resolve(to: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = parse_listen(to) {
        return Ok(addr);
    }
    let found = if to.contains(':') {
        to.to_socket_addrs()
    } else {
        (to, DEFAULT_PORT).to_socket_addrs()
    };
    found
        .with_context(|| format!("--to {to}: cannot resolve the target's address"))?
        .next()
        .ok_or_else(|| anyhow!("--to {to}: the name has no address"))
}

/// One direction's counters, in words, in the order printed.
fn rows(c: &FaultCounters) -> [(&'static str, u64); 11] {
    [
        ("PDUs", c.pdus),
        ("bytes", c.bytes),
        ("dropped", c.dropped),
        ("duplicated", c.duplicated),
        ("corrupt header", c.corrupt_header),
        ("corrupt data", c.corrupt_data),
        ("bit error, header", c.ber_header),
        ("bit error, data", c.ber_data),
        ("skipped, no header digest", c.skipped_no_header_digest),
        ("skipped, no data digest", c.skipped_no_data_digest),
        ("resets", c.resets),
    ]
}

fn print_text(c: &ProxyCounters) {
    outln!("{:<26} {:>14} {:>14}", "", "i->t", "t->i");
    for ((name, to_target), (_, to_initiator)) in
        rows(&c.to_target).into_iter().zip(rows(&c.to_initiator))
    {
        outln!("{name:<26} {to_target:>14} {to_initiator:>14}");
    }
    outln!(
        "connections {} (target unreachable {}, unframeable {})",
        c.connections,
        c.upstream_failures,
        c.unframeable
    );
}

/// `sluice proxy --json`: what ran and what happened.
#[derive(Serialize)]
struct SummaryJson {
    listen: String,
    upstream: String,
    seed: u64,
    plan: PlanJson,
    connections: u64,
    upstream_failures: u64,
    unframeable: u64,
    events_not_logged: u64,
    to_target: CountersJson,
    to_initiator: CountersJson,
}

/// The flags' plan, as given.
#[derive(Serialize)]
struct PlanJson {
    corrupt_data: f64,
    corrupt_header: f64,
    ber: f64,
    drop: Vec<String>,
    duplicate: f64,
    reset_every: Option<u64>,
    delay_ms: u64,
}

/// One direction.
#[derive(Serialize)]
struct CountersJson {
    pdus: u64,
    bytes: u64,
    dropped: u64,
    duplicated: u64,
    corrupt_header: u64,
    corrupt_data: u64,
    ber_header: u64,
    ber_data: u64,
    skipped_no_header_digest: u64,
    skipped_no_data_digest: u64,
    resets: u64,
}

impl From<&FaultCounters> for CountersJson {
    fn from(c: &FaultCounters) -> Self {
        Self {
            pdus: c.pdus,
            bytes: c.bytes,
            dropped: c.dropped,
            duplicated: c.duplicated,
            corrupt_header: c.corrupt_header,
            corrupt_data: c.corrupt_data,
            ber_header: c.ber_header,
            ber_data: c.ber_data,
            skipped_no_header_digest: c.skipped_no_header_digest,
            skipped_no_data_digest: c.skipped_no_data_digest,
            resets: c.resets,
        }
    }
}

impl SummaryJson {
    fn new(args: &ProxyArgs, upstream: SocketAddr, c: &ProxyCounters) -> Self {
        Self {
            listen: args.listen.to_string(),
            upstream: upstream.to_string(),
            seed: args.seed,
            plan: PlanJson {
                corrupt_data: args.corrupt_data.get(),
                corrupt_header: args.corrupt_header.get(),
                ber: args.ber.get(),
                drop: args.drop.iter().map(ToString::to_string).collect(),
                duplicate: args.duplicate.get(),
                reset_every: args.reset_every,
                delay_ms: args.delay,
            },
            connections: c.connections,
            upstream_failures: c.upstream_failures,
            unframeable: c.unframeable,
            events_not_logged: c.events_not_logged,
            to_target: c.direction(Direction::ToTarget).into(),
            to_initiator: c.direction(Direction::ToInitiator).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(argv: &[&str]) -> ProxyArgs {
        let mut all = vec![
            "sluice",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--to",
            "127.0.0.1",
        ];
        all.extend_from_slice(argv);
        match Cli::try_parse_from(all).expect("valid flags").command {
            Command::Proxy(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn flags_become_a_symmetric_plan() {
        let a = args(&[
            "--corrupt-data",
            "0.5",
            "--drop",
            "response:1",
            "--drop",
            "data-out:10",
            "--reset-every",
            "100",
            "--delay",
            "5",
        ]);
        let p = plan(&a).unwrap();
        assert_eq!(p.to_target.corrupt_data.get(), 0.5);
        assert_eq!(p.to_initiator.corrupt_data.get(), 0.5);
        assert_eq!(p.to_target.drop.len(), 1);
        assert_eq!(p.to_initiator.drop[0].to_string(), "response:1");
        assert_eq!(p.reset_every.map(NonZeroU64::get), Some(100));
        assert_eq!(p.to_initiator.delay, Duration::from_millis(5));
        assert_eq!(resolve("127.0.0.1").unwrap().to_string(), "127.0.0.1:3260");
        assert_eq!(resolve(&a.to).unwrap().port(), DEFAULT_PORT);
    }

    #[test]
    fn a_drop_that_can_never_fire_is_refused() {
        let e = plan(&args(&["--drop", "login-rsp:1"])).unwrap_err();
        assert!(e.to_string().contains("login PDUs are exempt"), "{e}");
    }
}
