//! `sluice target`: builds a [`TargetConfig`] from flags or a file, then serves it until SIGINT or
//! SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};
use sluice_proto::text::keys::format_bool;
use sluice_proto::text::KeyId;
use sluice_target::config::{
    AccessState, Acl, Backend, ChapCredentials, DigestPolicy, GatewayConfig, Keepalive, Limits,
    LuOptions, LunDef, OperationalOffer, RbdImage, SanitizeOptions, TargetConfig, TargetDef,
    MAX_LUN_NUMBER,
};

use crate::cli::{Cli, DigestArg, TargetArgs, DEFAULT_PORT};
use crate::config_file::{self, ServiceConfig, DEFAULT_BLOCK_SIZE};
use crate::portals::{alua_state_name, Portal};
use crate::signals;
use crate::size::format_size;

/// The target name used when `--iqn` is not given.
pub const DEFAULT_IQN: &str = "iqn.2026-11.io.sluice:default";

/// The LUN served when no LUN flag is given: 1 GiB of RAM.
pub const DEFAULT_MEMORY_SIZE: u64 = 1 << 30;

/// A LUN flag from the command line, in the order it appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LunFlag {
    /// `--memory SIZE`
    Memory(u64),
    /// `--file PATH [--size SIZE]`
    File(PathBuf, Option<u64>),
    /// `--null SIZE`
    Null(u64),
    /// `--rbd POOL/IMAGE` (the cluster settings come from `--ceph-*`).
    Rbd(RbdImage),
}

/// Collects `--memory`, `--file` (with the `--size` that follows it), `--null` and `--rbd` in argv order,
/// so that LUN numbers follow the order the user typed.
pub fn lun_flags_in_order(m: &ArgMatches) -> anyhow::Result<Vec<LunFlag>> {
    fn indexed<T: Clone + Send + Sync + 'static>(m: &ArgMatches, id: &str) -> Vec<(usize, T)> {
        match (m.indices_of(id), m.get_many::<T>(id)) {
            (Some(i), Some(v)) => i.zip(v.cloned()).collect(),
            _ => Vec::new(),
        }
    }
    let mut luns: Vec<(usize, LunFlag)> = Vec::new();
    luns.extend(
        indexed::<u64>(m, "memory")
            .into_iter()
            .map(|(i, s)| (i, LunFlag::Memory(s))),
    );
    luns.extend(
        indexed::<PathBuf>(m, "file")
            .into_iter()
            .map(|(i, p)| (i, LunFlag::File(p, None))),
    );
    luns.extend(
        indexed::<u64>(m, "null")
            .into_iter()
            .map(|(i, s)| (i, LunFlag::Null(s))),
    );
    luns.extend(
        indexed::<RbdImage>(m, "rbd")
            .into_iter()
            .map(|(i, r)| (i, LunFlag::Rbd(r))),
    );
    luns.sort_by_key(|(i, _)| *i);
    for (size_index, size) in indexed::<u64>(m, "size") {
        let owner = luns
            .iter_mut()
            .rev()
            .find(|(i, l)| *i < size_index && matches!(l, LunFlag::File(..)));
        match owner {
            Some((_, LunFlag::File(_, slot @ None))) => *slot = Some(size),
            Some((_, LunFlag::File(path, Some(_)))) => bail!(
                "--size {}: the --file {} before it already has a --size",
                format_size(size),
                path.display()
            ),
            _ => bail!(
                "--size {} must follow the --file it applies to",
                format_size(size)
            ),
        }
    }
    Ok(luns.into_iter().map(|(_, l)| l).collect())
}

/// The SCSI options flags give every LUN.
fn lu_options(args: &TargetArgs) -> LuOptions {
    LuOptions {
        thin: args.thin,
        soft_threshold_percent: args.soft_threshold,
        sanitize: args.allow_sanitize.then_some(SanitizeOptions {
            overwrite_bytes_per_s: args.sanitize_rate,
        }),
    }
}

/// A flag's digest policy, or the default.
fn digest(d: Option<DigestArg>, default: DigestPolicy) -> DigestPolicy {
    match d {
        None => default,
        Some(DigestArg::Allow) => DigestPolicy::Allow,
        Some(DigestArg::Require) => DigestPolicy::Require,
        Some(DigestArg::Forbid) => DigestPolicy::Forbid,
    }
}

/// Builds the single-target configuration described by flags.
///
/// Defaults: listen on 127.0.0.1:3260, IQN [`DEFAULT_IQN`], one [`DEFAULT_MEMORY_SIZE`] memory
/// LUN, 512-byte blocks, open ACL unless `--allow-initiator` is given, no CHAP.
pub fn config_from_flags(args: &TargetArgs, luns: Vec<LunFlag>) -> anyhow::Result<TargetConfig> {
    let listen = if args.listen.is_empty() {
        vec![Portal {
            addr: SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)),
            tag: None,
        }]
    } else {
        args.listen.clone()
    };
    for (i, p) in listen.iter().enumerate() {
        if listen[..i].iter().any(|q| q.addr == p.addr) {
            bail!("--listen {}: listed twice", p.addr);
        }
    }
    for s in &args.alua_state {
        let tag = |p: &Portal| p.tag.unwrap_or(sluice_target::DEFAULT_PORTAL_GROUP_TAG);
        if !listen.iter().any(|p| tag(p) == s.tag) {
            bail!(
                "--alua-state {}={}: no --listen address is in portal group {} (add ,{} after one)",
                s.tag,
                alua_state_name(s.state),
                s.tag,
                s.tag
            );
        }
    }
    let (portals, portal_groups) = crate::portals::portal_groups(&listen, &args.alua_state);
    let luns = if luns.is_empty() {
        vec![LunFlag::Memory(DEFAULT_MEMORY_SIZE)]
    } else {
        luns
    };
    let block_size = args.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
    let mut defs = Vec::new();
    for (number, lun) in luns.into_iter().enumerate() {
        let number = u16::try_from(number)
            .ok()
            .filter(|n| *n <= MAX_LUN_NUMBER)
            .context("too many LUNs")?;
        let backend = match lun {
            LunFlag::Memory(size) => Backend::Memory { size },
            LunFlag::Null(size) => Backend::Null { size },
            LunFlag::File(path, size) => {
                if size.is_none() && !path.exists() {
                    bail!(
                        "--file {}: no such file; add --size SIZE after it to create it (sparse)",
                        path.display()
                    );
                }
                Backend::File {
                    path,
                    size,
                    direct: false,
                    huge_pages: !args.no_huge_pages,
                }
            }
            LunFlag::Rbd(image) => {
                let image = RbdImage {
                    conf_file: args.ceph_conf.clone(),
                    client_id: args.ceph_id.clone(),
                    keyring: args.ceph_keyring.clone(),
                    ..image
                };
                if let Err(e) = image.check_names() {
                    bail!("--rbd {}: {e}", image.spec());
                }
                Backend::Rbd { image }
            }
        };
        defs.push(LunDef {
            number,
            backend,
            block_size,
            read_only: args.read_only,
            removable: args.removable,
            serial: None,
            options: lu_options(args),
        });
    }
    let acl = if args.allow_initiator.is_empty() {
        Acl::Open
    } else {
        for name in &args.allow_initiator {
            if !sluice_target::is_iscsi_name(name) {
                bail!(
                    "--allow-initiator {name:?}: not an iSCSI name (expected e.g. iqn.1994-05.com.redhat:client1; \
                     see /etc/iscsi/initiatorname.iscsi on the initiator)"
                );
            }
        }
        Acl::Allow(args.allow_initiator.clone())
    };
    let chap = match (&args.chap_user, &args.chap_secret) {
        (Some(user), Some(secret)) => Some(ChapCredentials {
            user: user.clone(),
            secret: secret.clone(),
            mutual: args.mutual_user.clone().zip(args.mutual_secret.clone()),
        }),
        _ => None,
    };
    let offer = OperationalOffer {
        header_digest: digest(
            args.header_digest,
            OperationalOffer::default().header_digest,
        ),
        data_digest: digest(args.data_digest, OperationalOffer::default().data_digest),
        max_connections: args
            .max_connections
            .unwrap_or(OperationalOffer::default().max_connections),
        error_recovery_level: args
            .erl
            .unwrap_or(OperationalOffer::default().error_recovery_level),
        // Over UDP a PDU is lost whole when one of its datagrams is: keep Data-Out small.
        max_recv_data_segment_length: if args.udp {
            sluice_udp::DEFAULT_UDP_MAX_RECV_DATA_SEGMENT
        } else {
            OperationalOffer::default().max_recv_data_segment_length
        },
        ..OperationalOffer::default()
    };
    let mut recovery = sluice_proto::target::RecoveryConfig::default();
    if let Some(secs) = args.sequence_timeout {
        recovery.sequence_timeout = Duration::from_secs_f64(secs);
    }
    let config = TargetConfig {
        portals,
        portal_groups,
        state_dir: args.state_dir.clone(),
        targets: vec![TargetDef {
            iqn: args.iqn.clone().unwrap_or_else(|| DEFAULT_IQN.to_string()),
            alias: None,
            luns: defs,
            acl,
            chap,
        }],
        discovery_auth: None,
        offer,
        limits: Limits::default(),
        keepalive: Some(Keepalive::default()),
        recovery,
        fault_hook: None,
        gateway: args.gateway_group.map(|group| GatewayConfig {
            group,
            groups: args.gateway_groups.clone(),
            non_owner: args
                .gateway_non_owner
                .unwrap_or(AccessState::ActiveNonOptimized),
        }),
        tcp_congestion: args.tcp_congestion.clone(),
    };
    config.validate().context("invalid target flags")?;
    Ok(config)
}

/// Warnings about targets reachable beyond loopback that anyone may log in to.
pub fn exposure_warnings(config: &TargetConfig) -> Vec<String> {
    let exposed: Vec<String> = config
        .portals
        .iter()
        .filter(|p| !p.ip().is_loopback())
        .map(ToString::to_string)
        .collect();
    if exposed.is_empty() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    for t in &config.targets {
        if t.acl == Acl::Open && t.chap.is_none() {
            warnings.push(format!(
                "target {} is reachable on {} with an open ACL and no CHAP: any host that can reach \
                 this port can read and write its LUNs (use --allow-initiator and --chap-user/--chap-secret, \
                 or acl/chap in a config file)",
                t.iqn,
                exposed.join(", ")
            ));
        }
    }
    warnings
}

/// One-line description of a backend for the summary.
fn describe_backend(b: &Backend) -> String {
    match b {
        Backend::Memory { size } => format!("memory {}", format_size(*size)),
        Backend::Null { size } => format!("null {}", format_size(*size)),
        Backend::File {
            path,
            size,
            direct,
            huge_pages: _,
        } => {
            let mut s = format!("file {}", path.display());
            if let Some(size) = size {
                s += &format!(" ({})", format_size(*size));
            }
            if *direct {
                s += " O_DIRECT";
            }
            s
        }
        Backend::Rbd { image } => format!("rbd {} as client.{}", image.spec(), image.client_id()),
    }
}

/// "none", "one-way" or "mutual".
fn describe_chap(c: &Option<ChapCredentials>) -> &'static str {
    match c {
        None => "none",
        Some(c) if c.mutual.is_some() => "mutual",
        Some(_) => "one-way",
    }
}

/// A human-readable summary of a configuration, as printed by `--check-config`.
pub fn summary(config: &TargetConfig) -> String {
    let mut out = String::new();
    let portals: Vec<String> = config.portals.iter().map(ToString::to_string).collect();
    out += &format!("listen: {}\n", portals.join(", "));
    for g in &config.portal_groups {
        let list: Vec<String> = g.portals.iter().map(ToString::to_string).collect();
        out += &format!(
            "portal group {}: {}; ALUA target port group {}, {}\n",
            g.tag,
            list.join(", "),
            g.alua_group,
            alua_state_name(g.alua_state)
        );
    }
    if let Some(dir) = &config.state_dir {
        out += &format!("state directory: {}\n", dir.display());
    }
    if let Some(name) = &config.tcp_congestion {
        out += &format!("TCP congestion control: {name}\n");
    }
    out += &format!(
        "discovery CHAP: {}\n",
        describe_chap(&config.discovery_auth)
    );
    let o = &config.offer;
    out += &format!(
        "session: {} {}, {} {}, {} {}, {} {}, queue depth {}, {} {}, {} {}, {} {}, digests header {:?} / data {:?}\n",
        KeyId::MaxRecvDataSegmentLength,
        o.max_recv_data_segment_length,
        KeyId::MaxBurstLength,
        o.max_burst_length,
        KeyId::FirstBurstLength,
        o.first_burst_length,
        KeyId::MaxConnections,
        o.max_connections,
        o.queue_depth,
        KeyId::ImmediateData,
        format_bool(o.immediate_data),
        KeyId::InitialR2T,
        format_bool(o.initial_r2t),
        KeyId::ErrorRecoveryLevel,
        o.error_recovery_level,
        o.header_digest,
        o.data_digest,
    );
    match &config.keepalive {
        Some(k) => {
            out += &format!(
                "keepalive: every {:?}, timeout {:?}\n",
                k.interval, k.timeout
            )
        }
        None => out += "keepalive: off\n",
    }
    for t in &config.targets {
        let acl = match &t.acl {
            Acl::Open => "open".to_string(),
            Acl::Allow(names) => format!("{} initiator(s)", names.len()),
        };
        out += &format!("target {}", t.iqn);
        if let Some(alias) = &t.alias {
            out += &format!(" ({alias})");
        }
        out += &format!(": acl {acl}, CHAP {}\n", describe_chap(&t.chap));
        for l in &t.luns {
            out += &format!(
                "  LUN {}: {}, {}-byte blocks{}{}{}\n",
                l.number,
                describe_backend(&l.backend),
                l.block_size,
                if l.read_only { ", read-only" } else { "" },
                if l.removable { ", removable" } else { "" },
                describe_options(&l.options),
            );
        }
    }
    out
}

/// ", thin", ", sanitize" (with its rate) as the LUN's options say.
fn describe_options(o: &LuOptions) -> String {
    let mut out = String::new();
    if o.thin {
        out += ", thin";
    }
    if let Some(p) = o.soft_threshold_percent {
        out += &format!(" (soft threshold {p} %)");
    }
    match o.sanitize {
        Some(SanitizeOptions {
            overwrite_bytes_per_s: Some(rate),
        }) => out += &format!(", sanitize at {}/s", format_size(rate)),
        Some(_) => out += ", sanitize",
        None => {}
    }
    out
}

/// The `iscsi://` URLs (libiscsi, QEMU) of every LUN through every bound address, address by
/// address: with several portals (groups) each LU is listed once per path.
pub fn urls(config: &[TargetDef], bound: &[SocketAddr]) -> Vec<String> {
    bound
        .iter()
        .flat_map(|addr| {
            config.iter().flat_map(move |t| {
                t.luns
                    .iter()
                    .map(move |l| format!("iscsi://{addr}/{}/{}", t.iqn, l.number))
            })
        })
        .collect()
}

/// Arguments that may accompany `--config` and `--check-config` (besides those of
/// [`crate::cli_ops::OpsArgs`]).
const FILE_MODE_ARGS: &[&str] = &[
    "config",
    "check_config",
    "verbose",
    "log_format",
    "udp",
    "udp_datagram",
    "iser",
    "iser_port",
];

/// Refuses target flags next to `--config`/`--check-config`, naming the ones given.
pub fn check_file_mode(matches: &ArgMatches) -> anyhow::Result<()> {
    let mode = if matches.value_source("check_config").is_some() {
        "--check-config"
    } else if matches.value_source("config").is_some() {
        "--config"
    } else {
        return Ok(());
    };
    let command = Cli::command();
    let target = command
        .find_subcommand("target")
        .expect("the target subcommand exists");
    let extra: Vec<String> = target
        .get_arguments()
        .filter(|a| !FILE_MODE_ARGS.contains(&a.get_id().as_str()))
        .filter(|a| !crate::cli_ops::OPS_ARG_IDS.contains(&a.get_id().as_str()))
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    if !extra.is_empty() {
        bail!(
            "{mode} cannot be combined with {}: put those settings in the file instead (see docs/configuration.md)",
            extra.join(", ")
        );
    }
    Ok(())
}

/// Runs `sluice target`.
pub fn run(args: &TargetArgs, matches: &ArgMatches) -> anyhow::Result<()> {
    check_file_mode(matches)?;
    if let Some(path) = &args.check_config {
        let config = config_file::load(path)?;
        outln!("{}: OK", path.display());
        print!("{}", summary(&config));
        for w in exposure_warnings(&config) {
            eprintln!("warning: {w}");
        }
        return Ok(());
    }
    let (config, file_service) = match &args.config {
        Some(path) => config_file::load_all(path)?,
        None => (
            config_from_flags(args, lun_flags_in_order(matches)?)?,
            ServiceConfig::default(),
        ),
    };
    for w in exposure_warnings(&config) {
        eprintln!("warning: {w}");
    }
    let udp = udp_config(args, &config)?;
    let service = Service {
        effective: crate::ops::serve::with_flags(&file_service, &args.ops),
        file: file_service,
        config_path: args.config.clone(),
    };
    let iser = args.iser.then_some(args.iser_port);
    sluice_target::set_busy_poll_always(args.busy_poll);
    // Large payloads reuse freed heap memory instead of faulting in fresh pages per command;
    // the heap goes back to the kernel when the target falls idle.
    sluice_lab::keep_freed_buffers();
    sluice_lab::use_one_heap();
    sluice_lab::return_freed_buffers_when_idle().context("starting the idle trim thread")?;
    serve(config, args.threads, service, udp, iser)
}

/// The UDP transport's settings when `--udp` is given; refused below ErrorRecoveryLevel 1,
/// where nothing would recover a lost datagram.
fn udp_config(
    args: &TargetArgs,
    config: &TargetConfig,
) -> anyhow::Result<Option<sluice_udp::UdpConfig>> {
    if !args.udp {
        return Ok(None);
    }
    if config.offer.error_recovery_level < 1 {
        bail!(
            "--udp needs ErrorRecoveryLevel 1 or 2 (--erl, or error_recovery_level in the file): \
             lost datagrams are recovered by SNACK, recovery R2T and command retry"
        );
    }
    Ok(Some(sluice_udp::UdpConfig {
        max_datagram: args.udp_datagram as usize,
        ..sluice_udp::UdpConfig::default()
    }))
}

/// Binds a UDP socket on the port number of each bound TCP portal and serves iSCSI over UDP
/// there until the target shuts down; prints the `iscsi+udp://` URLs. A port that cannot be
/// bound ends the process: the operator asked for UDP.
fn start_udp(
    target: &std::sync::Arc<sluice_target::Target>,
    targets: &[TargetDef],
    bound: &[SocketAddr],
    udp: sluice_udp::UdpConfig,
) {
    let mut served = Vec::new();
    for addr in bound {
        let socket = std::net::UdpSocket::bind(addr)
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(tokio::net::UdpSocket::from_std);
        match socket {
            Ok(socket) => {
                let t = std::sync::Arc::clone(target);
                tokio::spawn(async move {
                    let stats = t.serve_udp(socket, udp).await;
                    tracing::info!(?stats, "UDP portal closed");
                });
                served.push(*addr);
            }
            Err(e) => {
                eprintln!("error: cannot serve iSCSI over UDP on {addr}: {e}");
                std::process::exit(1);
            }
        }
    }
    let list: Vec<String> = served.iter().map(ToString::to_string).collect();
    eprintln!(
        "EXPERIMENTAL: also serving iSCSI over UDP on {} (only sluice's initiator speaks it)",
        list.join(", ")
    );
    for url in urls(targets, &served) {
        outln!("{}", url.replacen("iscsi://", "iscsi+udp://", 1));
    }
}

/// Listens for iSER on `port` of each bound TCP portal's address and serves it until the
/// target shuts down; prints the `iser://` URLs. A port that cannot be bound ends the
/// process: the operator asked for iSER.
fn start_iser(
    target: &std::sync::Arc<sluice_target::Target>,
    targets: &[TargetDef],
    bound: &[SocketAddr],
    port: u16,
) {
    let mut served = Vec::new();
    for addr in bound {
        let at = SocketAddr::new(addr.ip(), port);
        let listener = std::net::TcpListener::bind(at)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std);
        match listener {
            Ok(listener) => {
                let bound_at = listener.local_addr().unwrap_or(at);
                let t = std::sync::Arc::clone(target);
                tokio::spawn(async move {
                    t.serve_iser(listener, sluice_target::IserServeOptions::default())
                        .await;
                });
                served.push(bound_at);
            }
            Err(e) => {
                eprintln!("error: cannot serve iSER on {at}: {e}");
                std::process::exit(1);
            }
        }
    }
    let list: Vec<String> = served.iter().map(ToString::to_string).collect();
    eprintln!(
        "also serving iSER on {} (software RDMA provider over TCP)",
        list.join(", ")
    );
    for url in urls(targets, &served) {
        outln!("{}", url.replacen("iscsi://", "iser://", 1));
    }
}

/// How the process is operated: `[metrics]`/`[control]` as the file has them, and with the
/// flags applied.
struct Service {
    file: ServiceConfig,
    effective: ServiceConfig,
    config_path: Option<PathBuf>,
}

/// Runs the target until a signal, then returns its result.
///
/// Without `threads`: one multi-threaded (work-stealing) runtime. With `threads = N`: N
/// single-threaded runtimes on their own OS threads serve the connections (each connection
/// stays on one), and a small current-thread runtime on the calling thread accepts them and
/// handles signals.
fn serve(
    config: TargetConfig,
    threads: Option<u16>,
    service: Service,
    udp: Option<sluice_udp::UdpConfig>,
    iser: Option<u16>,
) -> anyhow::Result<()> {
    let mut workers = Vec::new();
    let mut worker_threads = Vec::new();
    let (stop_workers, _) = tokio::sync::watch::channel(false);
    for i in 0..threads.unwrap_or(0) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start a worker runtime")?;
        workers.push(rt.handle().clone());
        let mut stop = stop_workers.subscribe();
        let thread = std::thread::Builder::new()
            .name(format!("sluice-worker-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    let _ = stop.changed().await;
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .context("cannot start a worker thread")?;
        worker_threads.push(thread);
    }
    let runtime = if threads.is_some() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .thread_name("sluice-target")
    .build()
    .context("cannot start the async runtime")?;
    let portals: Vec<String> = config.portals.iter().map(ToString::to_string).collect();
    let targets = config.targets.clone();
    let result = runtime.block_on(async move {
        let shutdown = signals::shutdown_signal().context("cannot install signal handlers")?;
        let target = std::sync::Arc::new(
            sluice_target::Target::new(config)
                .with_context(|| format!("iSCSI target on {}", portals.join(", ")))?,
        );
        let operator = std::sync::Arc::new(crate::ops::operator::Operator::new(
            std::sync::Arc::clone(&target),
            service.config_path,
            service.file,
        ));
        let ops = crate::ops::serve::start(&service.effective, &operator).await?;
        let udp_target = std::sync::Arc::clone(&target);
        let served = target
            .serve(
                workers,
                move |bound| {
                    announce(&targets, bound);
                    if let Some(udp) = udp {
                        start_udp(&udp_target, &targets, bound, udp);
                    }
                    if let Some(port) = iser {
                        start_iser(&udp_target, &targets, bound, port);
                    }
                    crate::ops::service::ready("serving");
                },
                shutdown,
            )
            .await
            .with_context(|| format!("iSCSI target on {}", portals.join(", ")));
        crate::ops::service::stopping();
        drop(ops);
        served
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    let _ = stop_workers.send(true);
    for t in worker_threads {
        let _ = t.join();
    }
    result?;
    tracing::info!("target stopped");
    Ok(())
}

/// Prints the URLs on stdout (one per line, for scripts) and how to stop on stderr.
fn announce(targets: &[TargetDef], bound: &[SocketAddr]) {
    let list: Vec<String> = bound.iter().map(ToString::to_string).collect();
    eprintln!(
        "sluice target listening on {} (Ctrl-C or SIGTERM to stop)",
        list.join(", ")
    );
    if bound.first().is_some_and(|a| a.ip().is_unspecified()) {
        eprintln!(
            "note: {} means every interface: initiators use one of this host's addresses instead",
            bound[0].ip()
        );
    }
    for url in urls(targets, bound) {
        outln!("{url}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use clap::FromArgMatches;
    use sluice_proto::text::KeyValueError;
    use sluice_target::config::{ChapOwner, ConfigError, SecretRole, TargetRef};

    fn parse(argv: &[&str]) -> anyhow::Result<TargetConfig> {
        let mut full = vec!["sluice", "target"];
        full.extend_from_slice(argv);
        let matches = Cli::command().try_get_matches_from(full)?;
        let cli = Cli::from_arg_matches(&matches)?;
        let Command::Target(args) = cli.command else {
            unreachable!("argv starts with the target subcommand")
        };
        let sub = matches.subcommand_matches("target").unwrap();
        check_file_mode(sub)?;
        config_from_flags(&args, lun_flags_in_order(sub)?)
    }

    #[test]
    fn no_arguments_means_one_memory_lun_on_loopback() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.portals, vec!["127.0.0.1:3260".parse().unwrap()]);
        assert_eq!(c.targets.len(), 1);
        let t = &c.targets[0];
        assert_eq!(t.iqn, DEFAULT_IQN);
        assert_eq!(t.acl, Acl::Open);
        assert_eq!(t.chap, None);
        assert_eq!(t.luns.len(), 1);
        assert_eq!(t.luns[0].number, 0);
        assert_eq!(t.luns[0].backend, Backend::Memory { size: 1 << 30 });
        assert_eq!(t.luns[0].block_size, 512);
        assert!(exposure_warnings(&c).is_empty());
        assert_eq!(
            urls(&c.targets, &c.portals),
            ["iscsi://127.0.0.1:3260/iqn.2026-11.io.sluice:default/0"]
        );
    }

    #[test]
    fn tcp_congestion_flag_is_checked_against_the_host() {
        assert_eq!(parse(&[]).unwrap().tcp_congestion, None);
        let c = parse(&["--tcp-congestion", "reno"]).unwrap();
        assert_eq!(c.tcp_congestion.as_deref(), Some("reno"));
        assert!(summary(&c).contains("TCP congestion control: reno\n"));
        let e = parse(&["--tcp-congestion", "no-such-cc"]).unwrap_err();
        assert!(
            matches!(
                e.downcast_ref::<ConfigError>(),
                Some(ConfigError::TcpCongestion(_))
            ),
            "{e:#}"
        );
        assert!(
            format!("{e:#}").contains("\"no-such-cc\" is not available on this host"),
            "{e:#}"
        );
    }

    #[test]
    fn summary_names_the_keys() {
        let c = parse(&[]).unwrap();
        let text = summary(&c);
        assert!(
            text.contains(
                "session: MaxRecvDataSegmentLength 262144, MaxBurstLength 16776192, \
                 FirstBurstLength 16776192, MaxConnections 8, queue depth 128, ImmediateData Yes, \
                 InitialR2T No, ErrorRecoveryLevel 2, digests header Allow / data Allow\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn luns_follow_argv_order() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        let b = dir.path().join("b.img");
        std::fs::write(&b, []).unwrap();
        let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
        let c = parse(&[
            "--null", "1T", "--file", a_s, "--size", "2G", "--memory", "512M", "--file", b_s,
            "--memory", "1G",
        ])
        .unwrap();
        let backends: Vec<_> = c.targets[0]
            .luns
            .iter()
            .map(|l| (l.number, l.backend.clone()))
            .collect();
        assert_eq!(
            backends,
            [
                (0, Backend::Null { size: 1 << 40 }),
                (
                    1,
                    Backend::File {
                        path: a.clone(),
                        size: Some(2 << 30),
                        direct: false,
                        huge_pages: true
                    }
                ),
                (2, Backend::Memory { size: 512 << 20 }),
                (
                    3,
                    Backend::File {
                        path: b.clone(),
                        size: None,
                        direct: false,
                        huge_pages: true
                    }
                ),
                (4, Backend::Memory { size: 1 << 30 }),
            ]
        );
    }

    #[test]
    fn rbd_luns_take_the_ceph_flags() {
        let c = parse(&[
            "--memory",
            "1G",
            "--rbd",
            "rbd/a",
            "--ceph-conf",
            "/etc/ceph/x.conf",
            "--ceph-id",
            "sluice",
            "--rbd",
            "pool2/b",
            "--ceph-keyring",
            "/k",
        ])
        .unwrap();
        let luns = &c.targets[0].luns;
        assert_eq!(luns.len(), 3);
        let expected = |pool: &str, image: &str| Backend::Rbd {
            image: RbdImage {
                pool: pool.into(),
                image: image.into(),
                conf_file: Some("/etc/ceph/x.conf".into()),
                client_id: Some("sluice".into()),
                keyring: Some("/k".into()),
            },
        };
        assert_eq!(luns[1].backend, expected("rbd", "a"));
        assert_eq!(luns[2].backend, expected("pool2", "b"));
        assert!(
            summary(&c).contains("rbd pool2/b as client.sluice"),
            "{}",
            summary(&c)
        );

        let e = parse(&["--rbd", "just-an-image"]).unwrap_err();
        assert!(format!("{e:#}").contains("is not POOL/IMAGE"), "{e:#}");
        let e = parse(&["--rbd", "rbd/a", "--ceph-id", "client.admin"]).unwrap_err();
        assert!(format!("{e:#}").contains("the ID of client.ID"), "{e:#}");
        // The cluster flags mean nothing without an --rbd LUN.
        assert!(parse(&["--ceph-id", "sluice"]).is_err());
    }

    #[test]
    fn size_belongs_to_the_file_before_it() {
        let e = parse(&["--memory", "1G", "--size", "1G", "--file", "x.img"]).unwrap_err();
        assert!(e.to_string().contains("must follow the --file"), "{e}");
        let e = parse(&["--file", "x.img", "--size", "1G", "--size", "2G"]).unwrap_err();
        assert!(e.to_string().contains("already has a --size"), "{e}");
        let e = parse(&["--file", "/nonexistent-sluice/x.img"]).unwrap_err();
        assert!(e.to_string().contains("add --size"), "{e}");
    }

    #[test]
    fn flags_map_to_config() {
        let c = parse(&[
            "--listen",
            "[::1]:3261",
            "--listen",
            "0.0.0.0",
            "--iqn",
            "iqn.2026-11.com.example:x",
            "--block-size",
            "4096",
            "--read-only",
            "--removable",
            "--allow-initiator",
            "iqn.1994-05.com.redhat:a",
            "iqn.1991-05.com.microsoft:b",
            "--chap-user",
            "u",
            "--chap-secret",
            "0123456789ab",
            "--mutual-user",
            "t",
            "--mutual-secret",
            "ba9876543210",
            "--header-digest",
            "require",
            "--data-digest",
            "forbid",
            "--memory",
            "1G",
        ])
        .unwrap();
        assert_eq!(c.portals.len(), 2);
        assert_eq!(c.portals[1].to_string(), "0.0.0.0:3260");
        let t = &c.targets[0];
        assert_eq!(t.iqn, "iqn.2026-11.com.example:x");
        assert_eq!(
            t.acl,
            Acl::Allow(vec![
                "iqn.1994-05.com.redhat:a".into(),
                "iqn.1991-05.com.microsoft:b".into()
            ])
        );
        let chap = t.chap.as_ref().unwrap();
        assert_eq!(chap.mutual, Some(("t".into(), "ba9876543210".into())));
        assert!(t.luns[0].read_only);
        assert!(t.luns[0].removable);
        assert_eq!(t.luns[0].options, LuOptions::default());
        assert_eq!(t.luns[0].block_size, 4096);
        assert_eq!(c.offer.header_digest, DigestPolicy::Require);
        assert_eq!(c.offer.data_digest, DigestPolicy::Forbid);
        // Protected by ACL and CHAP: no warning although 0.0.0.0 is not loopback.
        assert!(exposure_warnings(&c).is_empty());
    }

    #[test]
    fn portal_group_flags() {
        let c = parse(&[
            "--listen",
            "127.0.0.1:3260",
            "--listen",
            "127.0.0.2:3260,2",
            "--alua-state",
            "2=active-non-optimized",
            "--state-dir",
            "/var/lib/sluice",
        ])
        .unwrap();
        assert_eq!(c.portals.len(), 2);
        let tags: Vec<u16> = c.portal_groups.iter().map(|g| g.tag).collect();
        assert_eq!(tags, [1, 2]);
        assert_eq!(
            c.portal_groups[1].alua_state,
            sluice_target::config::AccessState::ActiveNonOptimized
        );
        assert_eq!(c.state_dir, Some(PathBuf::from("/var/lib/sluice")));
        let text = summary(&c);
        assert!(
            text.contains(
                "portal group 2: 127.0.0.2:3260; ALUA target port group 2, active-non-optimized"
            ) && text.contains("state directory: /var/lib/sluice"),
            "{text}"
        );
        assert!(parse(&[]).unwrap().portal_groups.is_empty());
        let e = parse(&["--listen", "127.0.0.1:3260", "--alua-state", "2=standby"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no --listen address is in portal group 2"),
            "{e}"
        );
        let e = parse(&["--listen", "127.0.0.1:3260", "--listen", "127.0.0.1:3260,2"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("listed twice"), "{e}");
        assert!(parse(&["--alua-state", "1=offline"]).is_err());
        assert!(parse(&["--listen", "127.0.0.1:3260,0"]).is_err());
    }

    #[test]
    fn max_connections_flag_is_bounded_by_the_key_table() {
        assert_eq!(parse(&[]).unwrap().offer.max_connections, 8);
        let c = parse(&["--max-connections", "4"]).unwrap();
        assert_eq!(c.offer.max_connections, 4);
        assert_eq!(
            parse(&["--max-connections", "65535"])
                .unwrap()
                .offer
                .max_connections,
            65_535
        );
        for (value, refused) in [
            (
                "0",
                KeyValueError::OutOfRange {
                    key: KeyId::MaxConnections,
                    value: 0,
                },
            ),
            (
                "65536",
                KeyValueError::OutOfRange {
                    key: KeyId::MaxConnections,
                    value: 65_536,
                },
            ),
            (
                "many",
                KeyValueError::Syntax {
                    key: KeyId::MaxConnections,
                    value: "many".into(),
                },
            ),
        ] {
            let e = parse(&["--max-connections", value]).unwrap_err();
            let found = e.chain().find_map(|c| c.downcast_ref::<KeyValueError>());
            assert_eq!(found, Some(&refused), "{e:#}");
        }
        let e = parse(&["--max-connections", "0"]).unwrap_err().to_string();
        assert!(
            e.contains("--max-connections")
                && e.contains("MaxConnections = 0 is outside 1..=65535 (RFC 7143 section 13.2)"),
            "{e}"
        );
        let e = parse(&["--config", "x.toml", "--max-connections", "2"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cannot be combined with --max-connections"),
            "{e}"
        );
    }

    #[test]
    fn erl_flag_sets_the_highest_level_accepted() {
        use sluice_proto::params::IMPLEMENTED_ERROR_RECOVERY_LEVEL;
        assert_eq!(
            parse(&[]).unwrap().offer.error_recovery_level,
            IMPLEMENTED_ERROR_RECOVERY_LEVEL
        );
        assert_eq!(
            parse(&["--erl", "0"]).unwrap().offer.error_recovery_level,
            0
        );
        let e = parse(&["--erl", "3"]).unwrap_err().to_string();
        assert!(e.contains("ErrorRecoveryLevel = 3 is outside 0..=2"), "{e}");
        assert_eq!(
            parse(&["--erl", "1"]).unwrap().offer.error_recovery_level,
            1
        );
    }

    #[test]
    fn open_target_beyond_loopback_warns() {
        let c = parse(&["--listen", "0.0.0.0:3260", "--open-acl"]).unwrap();
        let w = exposure_warnings(&c);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("0.0.0.0:3260") && w[0].contains("open ACL"),
            "{w:?}"
        );
        let c = parse(&["--listen", "[::1]:3260"]).unwrap();
        assert!(exposure_warnings(&c).is_empty());
        assert_eq!(
            urls(&c.targets, &c.portals),
            ["iscsi://[::1]:3260/iqn.2026-11.io.sluice:default/0"]
        );
    }

    #[test]
    fn bad_flags_are_refused() {
        assert!(parse(&["--memory", "lots"])
            .unwrap_err()
            .to_string()
            .contains("invalid size"));
        assert!(parse(&["--block-size", "1024"]).is_err());
        assert!(parse(&["--chap-user", "u"]).is_err());
        assert!(parse(&["--mutual-user", "t", "--mutual-secret", "0123456789ab"]).is_err());
        assert!(parse(&[
            "--open-acl",
            "--allow-initiator",
            "iqn.1994-05.com.redhat:a"
        ])
        .is_err());
        let e = parse(&["--config", "x.toml", "--memory", "1G", "--read-only"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--config cannot be combined with --memory, --read-only"),
            "{e}"
        );
        let e = parse(&["-v", "--check-config", "x.toml", "--listen", "0.0.0.0"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--check-config cannot be combined with --listen:"),
            "{e}"
        );
        assert!(parse(&["--config", "x.toml", "--check-config", "y.toml"]).is_err());
        let e = parse(&["--allow-initiator", "client1"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an iSCSI name"), "{e}");
        let invalid = |argv: &[&str]| {
            let e = parse(argv).unwrap_err();
            e.chain()
                .find_map(|c| c.downcast_ref::<ConfigError>())
                .cloned()
                .unwrap_or_else(|| panic!("not a ConfigError: {e:#}"))
        };
        assert!(matches!(
            invalid(&["--chap-user", "u", "--chap-secret", "short"]),
            ConfigError::ChapSecret {
                owner: ChapOwner::Target(_),
                secret: SecretRole::Initiator
            }
        ));
        assert!(matches!(
            invalid(&["--iqn", "disk0"]),
            ConfigError::BadName(TargetRef { index: 0, .. })
        ));
    }
}
