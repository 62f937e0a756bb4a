//! The command line: clap definitions only; turning them into a configuration is `cmd_target`'s job.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU64;
use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use sluice_fault::{DropEvery, PduKind, Rate};
use sluice_proto::text::{KeyId, KeyValueError};
use sluice_target::config::RbdImage;

use crate::size::parse_size;

/// The IANA-registered iSCSI port.
pub const DEFAULT_PORT: u16 = 3260;

/// `sluice`: a user-space iSCSI target and initiator.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output: -v for debug, -vv for trace (RUST_LOG overrides both).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve disks over iSCSI. With no arguments: a 1 GiB RAM disk on 127.0.0.1:3260.
    #[command(after_help = TARGET_AFTER_HELP)]
    Target(Box<TargetArgs>),
    /// Performance experiments that need no iSCSI peer.
    #[command(subcommand)]
    Lab(LabCommand),
    /// Forward iSCSI connections to a target, injecting faults (corruption, drops,
    /// duplicates, resets, delay) decided by a seed, so that a run replays.
    #[command(after_help = PROXY_AFTER_HELP)]
    Proxy(ProxyArgs),
    /// Look at and change a running target: LUs, ACLs, CHAP, sessions, its configuration.
    #[command(after_help = crate::cli_ops::CTL_AFTER_HELP)]
    Ctl(crate::cli_ops::CtlArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(crate::cli_ops::CompletionsArgs),
    /// Print the manual page (roff), generated from this command line.
    Man,
}

/// Text after `sluice proxy --help`.
const PROXY_AFTER_HELP: &str = "\
Put the proxy between any initiator and any target; initiators connect to --listen. Each
accepted connection gets its own connection to --to, and every PDU is forwarded whole or
faulted. Login PDUs are never faulted. Corruption flips one bit and is applied only where the
negotiated CRC32C digest covers it (header or data); elsewhere it is skipped and counted,
since no receiver could notice it. Each fault is logged on standard error as one line; the
counters are printed at exit (Ctrl-C or SIGTERM). Kinds for --drop: command, response,
data-out, data-in, r2t, nop-out, nop-in, tmf-req, tmf-rsp, text-req, text-rsp, logout-req,
logout-rsp, snack, reject, async. Examples:
  sluice proxy --listen 127.0.0.1:3261 --to 127.0.0.1:3260 --corrupt-data 0.01 --seed 7
  sluice proxy --listen 127.0.0.1:3261 --to 127.0.0.1:3260 --drop data-out:10 --json
  sluice proxy --listen 127.0.0.1:3261 --to 127.0.0.1:3260 --reset-every 1000 --delay 5
See docs/proxy.md.";

/// `sluice proxy`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address initiators connect to; port 0 picks a free one (printed on start).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// The target: HOST:PORT, or HOST for port 3260.
    #[arg(long, value_name = "HOST:PORT")]
    pub to: String,
    /// Probability that a PDU carrying data has one data bit flipped (when DataDigest=CRC32C).
    #[arg(long, value_name = "RATE", value_parser = rate_arg, default_value = "0")]
    pub corrupt_data: Rate,
    /// Probability that a PDU has one header bit flipped (when HeaderDigest=CRC32C).
    #[arg(long, value_name = "RATE", value_parser = rate_arg, default_value = "0")]
    pub corrupt_header: Rate,
    /// Bit error rate: a PDU of B bytes is hit with probability 1-(1-BER)^(8B), at a random bit.
    #[arg(long, value_name = "BER", value_parser = rate_arg, default_value = "0")]
    pub ber: Rate,
    /// Drop every N-th PDU of KIND, per connection (repeatable), e.g. data-out:10.
    #[arg(long = "drop", value_name = "KIND:N", value_parser = drop_arg)]
    pub drop: Vec<DropEvery>,
    /// Probability that a PDU is sent twice.
    #[arg(long, value_name = "RATE", value_parser = rate_arg, default_value = "0")]
    pub duplicate: Rate,
    /// Reset the connection (both sides, TCP RST) after every N PDUs, both directions counted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub reset_every: Option<u64>,
    /// Delay every PDU by this many milliseconds, in each direction.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub delay: u64,
    /// Seed of every random decision: the same seed and traffic give the same faults.
    #[arg(long, value_name = "S", default_value_t = 0)]
    pub seed: u64,
    /// Print the counters at exit as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// `sluice lab` experiments.
#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Where the CPU goes per PDU on sluice's own data path, both roles, stage by stage (the
    /// fast-path study's Figures 11, 12, 15 and 17); needs a build with `--features cost-probes`.
    #[command(name = "pdu-cost", after_help = PDU_COST_AFTER_HELP)]
    PduCost(PduCostArgs),
    /// The fast-path study's CRC32C measurements (Joglekar, Kounavis and Berry): every
    /// algorithm in cycles per byte and GB/s from 64 B to 1 MiB, warm and cold, and copy with
    /// CRC apart and fused.
    #[command(after_help = CRC_AFTER_HELP)]
    Crc(CrcArgs),
    /// The iSER study (Burns and Russell): iSCSI over TCP against iSER on the software RDMA
    /// provider over the same loopback link, throughput and CPU per byte from 4 KiB to
    /// 16 MiB, reads and writes, with the provider's raw RDMA Write/Read as the ceiling.
    #[command(after_help = ISER_AFTER_HELP)]
    Iser(IserArgs),
    /// What one loopback TCP stream moves when fed from a LUN file: a cache-hot buffer
    /// (iperf3's pattern), the whole file (a target's sequential reads) and sendfile.
    #[command(after_help = LOOPBACK_AFTER_HELP)]
    Loopback(LoopbackArgs),
    /// The initiator and target session cores, login, framing and the SCSI layer, run against
    /// each other in virtual time over simulated links, one seed per run, with the protocol's
    /// invariants checked after every event.
    #[command(after_help = SIM_AFTER_HELP)]
    Sim(SimArgs),
    /// The iSCSI simulation study (Hussain), chapter 5: sluice's initiator and target session
    /// cores in virtual time over a modelled link (drop-tail queue, bit errors, a TCP model or
    /// UDP datagrams); response time and its decomposition, T(S)=kS^alpha, command window,
    /// BER and TCP-against-UDP figures.
    #[command(name = "simstudy", after_help = SIMSTUDY_AFTER_HELP)]
    Simstudy(SimstudyArgs),
    /// The iSCSI parameter study (Shastry, Klotz and Russell): every negotiated parameter
    /// swept, the paper's figures, equations (1)-(3) and Table 2 checked on this machine.
    #[command(after_help = SWEEP_AFTER_HELP)]
    Sweep(SweepArgs),
    /// The WAN write study (Oguchi et al.): iSCSI writes through an emulated long link, RTT
    /// sweeps, congestion control and socket buffers, TCP_INFO and send-queue monitors, the
    /// write decomposed, the study's figures and sluice's defaults against the theory.
    #[command(after_help = WAN_AFTER_HELP)]
    Wan(WanArgs),
}

/// Text after `sluice lab wan --help`.
const WAN_AFTER_HELP: &str = "\
Needs root: the target runs in a network namespace behind an emulated link (TUN devices and a
user-space forwarder). Presets: tiny (seconds, 100 Mbit/s), quick (under 15 minutes), fig5
(socket throughput per congestion control, 120 s per point), fig6 (the first 30 s), fig7
(iSCSI writes against RTT: RFC and study parameters, kernel buffers, a socket), fig10 (Ta, Tb,
Tc against RTT), fig14 (time series at 20, 32 and 50 ms: Figs. 11-19, 24, 25), fig23 (after the
fix: fixed and grown send buffers, sluice's defaults), cc (iSCSI per congestion control), full
(the study's grid and durations, hours). The link is 1 Gbit/s with jumbo frames and an 8 MiB
queue each way unless --link changes it (keys as `sluice lab sweep --link`: rate, queue, mtu,
jitter, loss, fwd.KEY, back.KEY; the delay is set per point). The output directory gets
results.csv and results.json (one row per run: settings, what was negotiated, throughput
beside the theoretical line, TCP_INFO's limited-by times, cwnd, send buffer, the write
decomposition), traces/ (samples and PDU times of traced runs), PNG figures and report.md;
--resume continues. Examples:
  sluice lab wan --preset quick --out wan-quick
  sluice lab wan --preset fig23 --link rate=500mbit --out fig23-500m
  sluice lab wan --preset fig7 --libiscsi --out fig7";

/// `sluice lab wan`.
#[derive(Debug, Args)]
pub struct WanArgs {
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Output directory.
    #[arg(long, default_value = "wan")]
    pub out: PathBuf,
    /// Continue a run in --out: runs already in its results.csv are not made again.
    #[arg(long)]
    pub resume: bool,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
    /// Change the preset's link (rate, queue, MTU, jitter, loss, per direction with fwd. or
    /// back.), e.g. `rate=500mbit` when the forwarder cannot carry 1 Gbit/s.
    #[arg(long, value_name = "SPEC")]
    pub link: Option<String>,
    /// Runs per point.
    #[arg(long)]
    pub runs: Option<u32>,
    /// Seconds measured per run, instead of the preset's.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Round-trip times to run (ms, comma-separated), instead of each experiment's.
    #[arg(long, value_delimiter = ',', value_name = "MS,...")]
    pub rtts: Option<Vec<f64>>,
    /// TCP settings of every sluice and socket line, over the preset's: cc=reno|cubic|bbr,
    /// sndbuf=kernel|grow|SIZE, rcvbuf=kernel|SIZE, lowat=none|SIZE, nodelay=on|off.
    #[arg(long, value_name = "SPEC")]
    pub tcp: Option<String>,
    /// Commands in flight on every iSCSI line.
    #[arg(long)]
    pub qd: Option<u32>,
    /// Bytes per command on every iSCSI line (e.g. 512K to 8M).
    #[arg(long, value_parser = size_arg)]
    pub block: Option<u64>,
    /// TCP connections per session on every sluice line (MC/S).
    #[arg(long)]
    pub connections: Option<u16>,
    /// Add libiscsi's initiator (`qemu-img bench -w`) beside sluice's on the throughput
    /// figures.
    #[arg(long)]
    pub libiscsi: bool,
}

/// Text after `sluice lab pdu-cost --help`.
const PDU_COST_AFTER_HELP: &str = "\
Needs a sluice built with cost probes (they cost nothing when compiled out):
  cargo build --release -p sluice-cli --features cost-probes
A target runs in this process for every point, on its own threads, over loopback TCP; the
probes split each role's CPU time into socket calls, framing, CRC32C, copies, the session
cores and the SCSI layer, per data PDU. Presets: tiny (seconds), quick (minutes), fig11
(reads of 512 B to 8 KiB in one 8 KiB PDU), fig12 (reads of 8 to 64 KiB in 8 KiB PDUs),
sizes (Data-In and Data-Out of 512 B to 1 MiB, every digest mode), full. Output as for
sluice lab crc; --resume continues. Example:
  sluice lab pdu-cost --preset quick --out pdu-quick";

/// `sluice lab pdu-cost`.
#[derive(Debug, Args)]
pub struct PduCostArgs {
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Output directory.
    #[arg(long, default_value = "pdu-cost")]
    pub out: PathBuf,
    /// Continue a run in --out: points already in its results.csv are not measured again.
    #[arg(long)]
    pub resume: bool,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
}

/// Text after `sluice lab simstudy --help`.
const SIMSTUDY_AFTER_HELP: &str = "\
Every point runs sluice's own session cores, framer and SCSI layer in virtual time (no root,
no network). Presets: tiny (seconds), quick (every chapter-5 figure and the simulation speed,
minutes), fig5.3 fig5.4 fig5.5 fig5.7 fig5.8 fig5.9 fig5.10 fig5.11 (one figure each, in
more detail), speed (simulated I/Os per wall-clock second), fig6 (chapter 6: CRC and TCP
checksum aliasing, modelled and measured on sluice's framer), udp-sockets (Figs. 5.10 and
5.11 over real loopback sockets: the experimental UDP transport against TCP, with datagram
loss from a seeded relay); tiny and quick run those two as well, at their scale. The output
directory gets
results.csv and results.json (one row per run: negotiated values, link, response time and
its t1..t5 parts, the study's equations 5.3-5.6, drops, retransmissions), one PNG per figure
and report.md; --resume continues an interrupted run. Examples:
  sluice lab simstudy --preset quick --out simstudy-quick
  sluice lab simstudy --preset fig5.3 --out fig5.3 --threads 1";

/// `sluice lab simstudy`.
#[derive(Debug, Args)]
pub struct SimstudyArgs {
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Output directory.
    #[arg(long, default_value = "simstudy")]
    pub out: PathBuf,
    /// Continue a run in --out: points already in its results.csv are not run again.
    #[arg(long)]
    pub resume: bool,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
    /// Simulations run at once (default: the CPUs, at most 2).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Text after `sluice lab crc --help`.
const CRC_AFTER_HELP: &str = "\
Presets: tiny (seconds), quick (about a minute), fig14 (the paper's Figure 14: 512 B to 8 KiB),
fig16 (copy and CRC apart and fused: 8 KiB, 64 KiB, 1 MiB), sizes (48 B to 1 MiB), full.
Algorithms: bitwise (the long division), sarwate, slicing-by-4/8/16, sse4.2 (the crc32
instruction, one chain), sse4.2-x3 (three interleaved chains), crc-fast (folded carry-less
multiply), sluice (what its data path runs: sse4.2 up to 64 bytes, crc-fast above). Every algorithm is checked against RFC 3720 B.4 and
against the others before anything is timed. The output directory gets results.csv and
results.json (one row per measurement: medians and spread of the trials, TSC cycles per byte,
GB/s), PNG figures and report.md; --resume continues an interrupted run. Examples:
  sluice lab crc --preset quick --out crc-quick
  sluice lab crc --preset fig16 --out fig16";

/// Text after `sluice lab iser --help`.
const ISER_AFTER_HELP: &str = "\
Presets: tiny (seconds), quick (a few minutes: 4 KiB to 16 MiB in powers of four, both
directions), fig2 (reads), fig3 (writes), fig4 (large writes, the study's 94 % claim), full.
At every size and repetition the runs go in turn (TCP and iSER on a memory LUN that keeps
the data, raw RDMA, then iSER and TCP on a null LUN that keeps nothing, the study's MEMORYIO
mode) so that a noisy machine biases none of them. The output directory gets results.csv and results.json
(one row per run: the negotiated values, commands, bytes, seconds, CPU seconds, PDU and RDMA
operation counts), PNG figures and report.md; --resume continues an interrupted run. Examples:
  sluice lab iser --preset quick --out iser-quick
  sluice lab iser --preset fig4 --out fig4 --resume";

/// `sluice lab iser`.
#[derive(Debug, Args)]
pub struct IserArgs {
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Output directory.
    #[arg(long, default_value = "iser")]
    pub out: PathBuf,
    /// Continue a run in --out: runs already in its results.csv are not made again.
    #[arg(long)]
    pub resume: bool,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
}

/// `sluice lab crc`.
#[derive(Debug, Args)]
pub struct CrcArgs {
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Output directory.
    #[arg(long, default_value = "crc")]
    pub out: PathBuf,
    /// Continue a run in --out: measurements already in its results.csv are not made again.
    #[arg(long)]
    pub resume: bool,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
}

/// Text after `sluice lab sweep --help`.
const SWEEP_AFTER_HELP: &str = "\
Presets: tiny (seconds), quick (minutes), full (hours: the paper's grids, 500 MiB x 10 runs),
fig3 fig4 fig5 fig6 fig7 fig8 fig9 fig10 table1 fig11 digests lus-connections table2.
The output directory gets results.csv and results.json (one row per run: the grid's values,
what the login negotiated, PDU counts per command beside RFC 7143's prediction, bytes,
seconds, CPU time), one PNG per figure and report.md. An interrupted sweep continues with
--resume. Examples:
  sluice lab sweep --preset quick --out sweep-quick
  sluice lab sweep --preset fig10 --out fig10 --resume
  sluice lab sweep --preset quick --link gige --out sweep-gige    # as root
  sluice lab sweep --target iscsi://127.0.0.1:3261/iqn.2001-04.com.example:tgt/1 \\
      --name tgtd --preset fig3 --out tgtd-fig3";

/// `sluice lab sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Start a sluice target configured for every point (the default).
    #[arg(long, conflicts_with = "target")]
    pub spawn: bool,
    /// Run against this existing target (initiator offers only) instead of spawning a sluice
    /// target configured for every point.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// With --target: the name results are filed under (default: the URL's host and port).
    #[arg(long, requires = "target")]
    pub name: Option<String>,
    /// What to run (see below).
    #[arg(long, default_value = "quick")]
    pub preset: String,
    /// Run the experiments of this TOML grid file instead of a preset (every combination of
    /// the values each `[[experiment]]` lists; see docs/lab/parameter-study/README.md).
    #[arg(long, value_name = "FILE", conflicts_with = "preset")]
    pub grid: Option<PathBuf>,
    /// Output directory.
    #[arg(long, default_value = "sweep")]
    pub out: PathBuf,
    /// Continue a sweep in --out: runs already in its results.csv are not run again.
    #[arg(long)]
    pub resume: bool,
    /// Bytes each run moves (overrides the preset; K, M, G suffixes).
    #[arg(long, value_parser = parse_size)]
    pub bytes: Option<u64>,
    /// Runs per point (overrides the preset).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub runs: Option<u32>,
    /// Only redraw the figures and the report from --out's results.csv.
    #[arg(long)]
    pub report_only: bool,
    /// Run through an emulated link instead of loopback: `gige` (1 Gbit/s, the paper's
    /// link) or KEY=VALUE pairs `rate=1gbit,delay=5ms,queue=1M,mtu=1500`. The spawned target
    /// runs in a network namespace behind TUN devices and a user-space forwarder (needs
    /// root). Not with --target.
    #[arg(long, value_name = "SPEC", conflicts_with = "target")]
    pub link: Option<String>,
}

/// Text after `sluice lab sim --help`.
const SIM_AFTER_HELP: &str = "\
Each seed chooses everything: both sides' offers of every operational key (so the negotiated
values wander over their ranges, digests on and off), 1 to 4 connections and the policy that
spreads commands over them, link latency, bandwidth and segment sizes, the SCSI layer's service
time, and a workload of reads, writes, task management, pings, text and the logout of one
connection. A failing seed prints the command that replays it. Examples:
  sluice lab sim --seeds 10000
  sluice lab sim --seed 1234 --trace      # one seed, every PDU on standard error";

/// `sluice lab sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Seeds to run, from --first on.
    #[arg(long, default_value_t = 1000, conflicts_with = "seed")]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    pub first: u64,
    /// Run this one seed (a replay).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Connections per session (1 to 4); by default each seed chooses.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=4))]
    pub connections: Option<u16>,
    /// Operations per run; by default each seed chooses (30 to 120).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub ops: Option<u32>,
    /// Print every PDU to standard error (with --seed).
    #[arg(long, requires = "seed")]
    pub trace: bool,
    /// Run without the faults each seed otherwise draws (PDUs lost, corrupted or sent twice,
    /// connections reset).
    #[arg(long)]
    pub no_faults: bool,
    /// What carries the PDUs: `tcp`, or `iser` (RFC 7145: the production datamovers over the
    /// software RDMA provider's queue pairs, Data-In as RDMA Writes, R2T/Data-Out as RDMA
    /// Reads; faults are then lost or delayed RDMA messages, resets and wrong STags).
    #[arg(long, value_enum, default_value_t = SimTransport::Tcp)]
    pub transport: SimTransport,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `sluice lab sim --transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SimTransport {
    /// iSCSI over TCP.
    Tcp,
    /// iSER over the software RDMA provider.
    Iser,
}

/// Text after `sluice lab loopback --help`.
const LOOPBACK_AFTER_HELP: &str = "\
The file is mapped as `sluice target --file` maps a LUN (fully allocated on tmpfs, huge pages
collapsed first). Sources alternate within each round; medians are printed, and cold/hot is
the share of a cache-hot stream that a plain sender copying a LUN larger than the caches into
the socket keeps on this machine. Example:
  fallocate -l 1G /dev/shm/lun && sluice lab loopback --file /dev/shm/lun --rounds 5";

/// `sluice lab loopback`.
#[derive(Debug, Args)]
pub struct LoopbackArgs {
    /// LUN file to send from: fully allocated on tmpfs or ramfs.
    #[arg(long)]
    pub file: PathBuf,
    /// Seconds per stream.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Rounds; each runs every source once, in turn.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Bytes per send (K, M suffixes).
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub chunk: u64,
    /// Sources to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SourceArg::Hot, SourceArg::Cold, SourceArg::Sendfile])]
    pub sources: Vec<SourceArg>,
    /// Longest wait, in seconds, for the file's huge pages before measuring.
    #[arg(long, default_value_t = 120.0)]
    pub huge_page_wait: f64,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A `sluice lab loopback` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceArg {
    /// One chunk, resent (cache-hot, like iperf3 -l).
    Hot,
    /// Consecutive chunks over the whole file, written.
    Cold,
    /// Consecutive chunks over the whole file, through sendfile.
    Sendfile,
}

/// Text after `sluice target --help`.
const TARGET_AFTER_HELP: &str = "\
LUNs are numbered from 0 in the order their flags appear:
  sluice target --memory 1G --file disk.img --size 20G --null 1T
serves LUN 0 (RAM), LUN 1 (disk.img, created sparse at 20 GiB if missing) and LUN 2 (null).

Listening beyond loopback is an explicit choice (--listen 0.0.0.0:3260); protect it with
--allow-initiator and/or --chap-user/--chap-secret. For several targets, discovery CHAP and
tuning, use --config FILE (see docs/configuration.md); --check-config FILE validates one.";

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// How the target answers a HeaderDigest/DataDigest offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DigestArg {
    /// Accept CRC32C or None, as the initiator prefers.
    Allow,
    /// Insist on CRC32C (initiators offering only None fail to log in).
    Require,
    /// Never use CRC32C.
    Forbid,
}

/// `sluice target`: flags for a single target, or a configuration file.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Address to listen on (repeatable). Port defaults to 3260; IPv6 as [::1]:3260. A
    /// `,TPGT` suffix puts it in that target portal group (default 1): each group is a
    /// separate path (target port) to every LU, for multipath initiators.
    /// Default: 127.0.0.1:3260.
    #[arg(long, value_name = "ADDR:PORT[,TPGT]", value_parser = crate::portals::parse_portal)]
    pub listen: Vec<crate::portals::Portal>,

    /// The ALUA access state LUs start in through a portal group (repeatable): TPGT=STATE,
    /// STATE one of active-optimized (the default), active-non-optimized, standby,
    /// unavailable.
    #[arg(long, value_name = "TPGT=STATE", value_parser = alua_arg)]
    pub alua_state: Vec<crate::portals::AluaSetting>,

    /// Keep persistent reservations made with APTPL=1 in this directory, so they survive a
    /// restart (one file per LUN, replaced atomically). Without it APTPL=1 is refused.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Target name. Default: iqn.2026-11.io.sluice:default.
    #[arg(long, value_name = "IQN")]
    pub iqn: Option<String>,

    /// Add a RAM-backed LUN of this size (repeatable), e.g. 1G, 512M, 1.5T.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub memory: Vec<u64>,

    /// Add a LUN backed by a file or block device (repeatable).
    #[arg(long, value_name = "PATH")]
    pub file: Vec<PathBuf>,

    /// Size for the --file just before it: a missing file is created sparse with this size,
    /// a smaller one is grown.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, requires = "file")]
    pub size: Vec<u64>,

    /// Add a LUN that discards writes and reads zeros (repeatable): for benchmarks.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub null: Vec<u64>,

    /// Add a LUN backed by a Ceph RBD image (repeatable), as POOL/IMAGE; its size is the
    /// image's. Needs a build with the `rbd` feature. The cluster is reached as --ceph-id
    /// with --ceph-conf and --ceph-keyring.
    #[arg(long, value_name = "POOL/IMAGE", value_parser = rbd_arg)]
    pub rbd: Vec<RbdImage>,

    /// Ceph configuration file for the --rbd LUNs. Default: what the ceph tool reads
    /// ($CEPH_CONF, /etc/ceph/ceph.conf).
    #[arg(long, value_name = "FILE", requires = "rbd")]
    pub ceph_conf: Option<PathBuf>,

    /// Ceph client id (the ID of client.ID) for the --rbd LUNs. Default: admin.
    #[arg(long, value_name = "ID", requires = "rbd")]
    pub ceph_id: Option<String>,

    /// Keyring with the client's key for the --rbd LUNs. Default: the configuration's.
    #[arg(long, value_name = "FILE", requires = "rbd")]
    pub ceph_keyring: Option<PathBuf>,

    /// Run as one of several gateways exporting the same --rbd images under the same target
    /// name: this gateway's ALUA target port group (also its TPGT and relative target port).
    /// The gateway recorded as the owner of an image's LU (in RADOS) is active/optimized for
    /// it, the others active/non-optimized; when the owner stops answering, another
    /// blocklists its client (fencing it) and takes over.
    /// Needs --gateway-groups. See docs/ceph.md.
    #[arg(long, value_name = "ID", requires_all = ["rbd", "gateway_groups"], value_parser = clap::value_parser!(u16).range(1..))]
    pub gateway_group: Option<u16>,

    /// Every gateway's group, this one's included, the same on every gateway, e.g. 1,2.
    #[arg(
        long,
        value_name = "ID,ID,...",
        value_delimiter = ',',
        requires = "gateway_group"
    )]
    pub gateway_groups: Vec<u16>,

    /// The ALUA state of the gateways that do not own an LU: active-non-optimized (the
    /// default: a command that writes through a non-owner first moves the ownership to it)
    /// or standby (such commands are refused with NOT READY).
    #[arg(long, value_name = "STATE", requires = "gateway_group", value_parser = crate::portals::parse_alua_state)]
    pub gateway_non_owner: Option<sluice_target::config::AccessState>,

    /// Logical block size of every LUN. Default: 512 (what ESXi and Windows expect).
    #[arg(long, value_name = "BYTES", value_parser = block_size_arg)]
    pub block_size: Option<u32>,

    /// Serve connections on N single-threaded runtimes, one OS thread each, every connection
    /// pinned to one of them (round robin). Without it: one work-stealing runtime with a
    /// thread per core. See docs/performance.md, "Threading model".
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// Spin on each connection's socket before every wait for the initiator, not only when it
    /// waits for each answer (queue depth 1): for a target given cores of its own, where a
    /// spin takes the CPU from no one. See docs/performance.md, "Busy polling".
    #[arg(long, requires = "threads")]
    pub busy_poll: bool,

    /// TCP congestion control of accepted connections, e.g. cubic, bbr or reno: one listed in
    /// /proc/sys/net/ipv4/tcp_available_congestion_control (root may pick any of them, others
    /// only those in tcp_allowed_congestion_control). It decides how Data-In is sent, so it
    /// matters for reads. Default: the host's (net.ipv4.tcp_congestion_control). See
    /// docs/performance.md, "Congestion control".
    #[arg(long, value_name = "NAME")]
    pub tcp_congestion: Option<String>,

    /// Leave --file LUNs on tmpfs with 4 KiB pages. By default a background thread asks the
    /// kernel to back a fully allocated tmpfs LUN file with 2 MiB pages (MADV_COLLAPSE; the
    /// contents never change, the pages stay huge after exit). See docs/configuration.md.
    #[arg(long)]
    pub no_huge_pages: bool,

    /// Export every LUN read-only (writes fail with DATA PROTECT).
    #[arg(long)]
    pub read_only: bool,

    /// Export every LUN as a removable medium (START STOP UNIT can eject and load it).
    #[arg(long)]
    pub removable: bool,

    /// Thin-provision every LUN (memory, regular files, RBD images): UNMAP and WRITE SAME with
    /// UNMAP give space back (a file gets holes punched, an image discards), GET LBA STATUS
    /// reports it. See docs/configuration.md.
    #[arg(long)]
    pub thin: bool,

    /// With --thin: the soft threshold, in percent of each LUN's capacity; when the space
    /// allocated to a LUN grows past it, initiators get a unit attention (THIN PROVISIONING
    /// SOFT THRESHOLD REACHED).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100), requires = "thin")]
    pub soft_threshold: Option<u8>,

    /// Let initiators SANITIZE the LUNs (OVERWRITE; BLOCK ERASE on thin LUNs): every block is
    /// wiped. Off by default.
    #[arg(long)]
    pub allow_sanitize: bool,

    /// With --allow-sanitize: write at most this many bytes a second while sanitizing (e.g.
    /// 200M), leaving bandwidth to other LUNs on the same disk.
    #[arg(long, value_name = "SIZE", value_parser = size_arg, requires = "allow_sanitize")]
    pub sanitize_rate: Option<u64>,

    /// Serve the targets described in this TOML file (cannot be combined with other target flags).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Validate this TOML file, print a summary and exit (0 when valid).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub check_config: Option<PathBuf>,

    /// Let any initiator log in (the default on loopback; say it explicitly elsewhere).
    #[arg(long, conflicts_with = "allow_initiator")]
    pub open_acl: bool,

    /// Only let these initiator names log in (repeatable, or several after one flag).
    #[arg(long, value_name = "IQN", num_args = 1..)]
    pub allow_initiator: Vec<String>,

    /// Require CHAP: the user name the initiator sends.
    #[arg(long, value_name = "USER", requires = "chap_secret")]
    pub chap_user: Option<String>,

    /// Require CHAP: the initiator's secret (12 to 255 characters; Windows accepts at most 16).
    #[arg(long, value_name = "SECRET", requires = "chap_user")]
    pub chap_secret: Option<String>,

    /// Mutual CHAP: the user name the target answers with.
    #[arg(long, value_name = "USER", requires_all = ["mutual_secret", "chap_user"])]
    pub mutual_user: Option<String>,

    /// Mutual CHAP: the target's secret (must differ from --chap-secret).
    #[arg(long, value_name = "SECRET", requires = "mutual_user")]
    pub mutual_secret: Option<String>,

    /// HeaderDigest policy. Default: allow.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub header_digest: Option<DigestArg>,

    /// DataDigest policy. Default: allow.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub data_digest: Option<DigestArg>,

    /// Connections an initiator may have in one session (MC/S, RFC 7143 section 13.2).
    /// Default: 8.
    #[arg(long, value_name = "N", value_parser = key_number::<u16>(KeyId::MaxConnections))]
    pub max_connections: Option<u16>,

    /// Highest ErrorRecoveryLevel accepted (RFC 7143 section 13.20); a session runs at the
    /// lower of this and the initiator's offer. Default: the highest implemented.
    #[arg(long, value_name = "LEVEL", value_parser = key_number::<u8>(KeyId::ErrorRecoveryLevel))]
    pub erl: Option<u8>,

    /// ErrorRecoveryLevel 1 and 2: seconds a write waits for the Data-Out it expects before
    /// asking again with a recovery R2T (the sequence reception timeout of RFC 7143 section
    /// 7.1.4.1). Default 1.
    #[arg(long, value_name = "SECONDS", value_parser = crate::client_args::parse_positive_seconds)]
    pub sequence_timeout: Option<f64>,

    /// EXPERIMENTAL: also serve iSCSI over UDP, on the same port numbers as the TCP portals
    /// (iscsi+udp:// URLs; only sluice's initiator speaks it). Lost datagrams are recovered
    /// by ErrorRecoveryLevel 1, so --erl 0 is refused; with flags, MaxRecvDataSegmentLength
    /// is declared as 8192 so that a lost datagram costs a small PDU. See
    /// docs/udp-transport.md.
    #[arg(long)]
    pub udp: bool,

    /// With --udp: the largest datagram sent, in bytes (the path MTU less the IP and UDP
    /// headers: 1472 on Ethernet).
    #[arg(long, value_name = "BYTES", default_value_t = 1472, requires = "udp",
          value_parser = clap::value_parser!(u32).range(512..=65507))]
    pub udp_datagram: u32,

    /// Also serve iSER (RFC 7145, iser:// URLs) over sluice's software RDMA provider, on
    /// --iser-port of each TCP portal's address. Connections log in as iSCSI over TCP and
    /// switch to RDMA mode after the final Login Response; one that does not ask for
    /// RDMAExtensions stays plain iSCSI. See docs/iser.md.
    #[arg(long)]
    pub iser: bool,

    /// With --iser: the TCP port the software RDMA provider listens on. iSER over an RNIC
    /// uses 3260 in the RDMA-CM port space beside iSCSI's TCP 3260; the software provider
    /// runs over TCP itself, so it takes the next port.
    #[arg(long, value_name = "PORT", default_value_t = sluice_target::DEFAULT_ISER_PORT, requires = "iser")]
    pub iser_port: u16,

    /// Metrics, control socket and admin API.
    #[command(flatten)]
    pub ops: crate::cli_ops::OpsArgs,
}

/// clap value parser for `TPGT=STATE`.
fn alua_arg(s: &str) -> Result<crate::portals::AluaSetting, String> {
    let (tag, state) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: use TPGT=STATE, e.g. 2=standby"))?;
    let tag = tag
        .parse::<u16>()
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(|| format!("{s:?}: the portal group tag is 1 to 65535"))?;
    Ok(crate::portals::AluaSetting {
        tag,
        alua_group: None,
        state: crate::portals::parse_alua_state(state)?,
    })
}

/// Parses `ADDR:PORT`, `[V6]:PORT`, or a bare address (port 3260).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, DEFAULT_PORT))
        .map_err(|_| {
            format!(
                "invalid listen address {s:?}: use ADDR:PORT, e.g. 127.0.0.1:3260, 0.0.0.0:3260 or [::1]:3260"
            )
        })
}

/// clap value parser for a numerical operational key: the value's syntax and range come from
/// the key table.
fn key_number<T>(key: KeyId) -> impl Fn(&str) -> Result<T, KeyValueError> + Clone + Send + Sync
where
    T: TryFrom<u64> + Clone + Send + Sync + 'static,
{
    move |s| key.parse_number(s)
}

/// clap value parser for a probability: a number from 0 to 1.
fn rate_arg(s: &str) -> Result<Rate, String> {
    let p: f64 = s
        .parse()
        .map_err(|_| format!("invalid rate {s:?}: use a number from 0 to 1, e.g. 0.01 or 1e-6"))?;
    Rate::new(p).map_err(|e| e.to_string())
}

/// clap value parser for `--drop KIND:N`.
fn drop_arg(s: &str) -> Result<DropEvery, String> {
    let Some((kind, every)) = s.split_once(':') else {
        return Err(format!(
            "invalid drop rule {s:?}: use KIND:N, e.g. data-out:10, with KIND one of {}",
            PduKind::names()
        ));
    };
    let kind: PduKind = kind
        .parse()
        .map_err(|e: sluice_fault::UnknownKind| e.to_string())?;
    let every = every
        .parse::<NonZeroU64>()
        .map_err(|_| format!("invalid drop rule {s:?}: N must be a whole number from 1 up"))?;
    Ok(DropEvery { kind, every })
}

/// clap value parser for sizes.
fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// clap value parser for `--rbd`: POOL/IMAGE.
fn rbd_arg(s: &str) -> Result<RbdImage, String> {
    RbdImage::parse(s)
}

/// clap value parser for `--block-size`: 512 or 4096 (also `4K`).
fn block_size_arg(s: &str) -> Result<u32, String> {
    match s {
        "512" => Ok(512),
        "4096" | "4K" | "4k" => Ok(4096),
        _ => Err(format!("block size {s:?}: use 512 or 4096")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("127.0.0.1:3261").unwrap().to_string(),
            "127.0.0.1:3261"
        );
        assert_eq!(parse_listen("0.0.0.0").unwrap().to_string(), "0.0.0.0:3260");
        assert_eq!(
            parse_listen("[::1]:3262").unwrap().to_string(),
            "[::1]:3262"
        );
        assert_eq!(parse_listen("::1").unwrap().to_string(), "[::1]:3260");
        assert_eq!(parse_listen("[::]").unwrap().to_string(), "[::]:3260");
        assert!(parse_listen("localhost:3260").is_err());
    }

    #[test]
    fn proxy_rates_and_drop_rules() {
        assert_eq!(rate_arg("0.25").unwrap().get(), 0.25);
        assert_eq!(rate_arg("1e-6").unwrap().get(), 1e-6);
        assert!(rate_arg("1.5").unwrap_err().contains("from 0 to 1"));
        assert!(rate_arg("often").unwrap_err().contains("from 0 to 1"));
        let d = drop_arg("data-out:10").unwrap();
        assert_eq!((d.kind, d.every.get()), (PduKind::DataOut, 10));
        let e = drop_arg("datain:3").unwrap_err();
        assert!(
            e.contains("unknown PDU kind") && e.contains("data-in"),
            "{e}"
        );
        assert!(drop_arg("r2t").unwrap_err().contains("KIND:N"));
        assert!(drop_arg("r2t:0").unwrap_err().contains("from 1 up"));
    }
}
