//! clap definitions of the initiator subcommands (`discover`, `ls`, `inq`, `readcap`, `read`,
//! `write`, `dd`; `bench` takes its flags from `cmd_bench`). They are added to the command
//! line next to `sluice target` in `main.rs`.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::size::parse_size;

/// The initiator subcommands.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// SendTargets discovery: list the targets a portal offers.
    Discover(DiscoverArgs),
    /// List targets, LUNs and capacities (like iscsi-ls).
    Ls(LsArgs),
    /// Standard INQUIRY and VPD pages of a LUN, decoded.
    Inq(InqArgs),
    /// READ CAPACITY of a LUN.
    Readcap(UrlArgs),
    /// Read bytes from a LUN to a file or stdout.
    Read(ReadArgs),
    /// Write a file or a byte pattern to a LUN.
    Write(WriteArgs),
    /// Copy LUN to file, file to LUN or LUN to LUN, with a progress bar and a SHA-256.
    Dd(DdArgs),
    /// Copy a LUN to another LUN of the same target with EXTENDED COPY: the target moves
    /// the data, none of it crosses the network.
    Xcopy(XcopyArgs),
    /// Load generator: IOPS, bandwidth and latency percentiles of a LUN (fio-like), or replay
    /// an SPC trace.
    Bench(crate::cmd_bench::BenchArgs),
    /// Run a script of initiator commands (connect, login, read, write, verify, tmf, expect,
    /// ...) line by line, for protocol experiments and reproducible bug reports. Exits 1
    /// when an expectation fails, 2 on any other error; both name the script line.
    #[command(after_help = crate::script::AFTER_HELP)]
    Script(crate::script::ScriptArgs),
}

/// How to log in: everything but the URL.
#[derive(Debug, Args, Clone)]
pub struct ConnArgs {
    /// InitiatorName (default iqn.2026-11.io.sluice:initiator).
    #[arg(long, value_name = "IQN")]
    pub initiator_name: Option<String>,
    /// HeaderDigest to offer.
    #[arg(long, value_enum, value_name = "DIGEST")]
    pub header_digest: Option<DigestOffer>,
    /// DataDigest to offer.
    #[arg(long, value_enum, value_name = "DIGEST")]
    pub data_digest: Option<DigestOffer>,
    /// CHAP user (or user%secret@ in the URL).
    #[arg(long, value_name = "USER", requires = "chap_secret")]
    pub chap_user: Option<String>,
    /// CHAP secret.
    #[arg(long, value_name = "SECRET", env = "SLUICE_CHAP_SECRET")]
    pub chap_secret: Option<String>,
    /// Mutual CHAP: the name the target must answer with.
    #[arg(long, value_name = "USER", requires = "target_secret")]
    pub target_user: Option<String>,
    /// Mutual CHAP: the target's secret.
    #[arg(long, value_name = "SECRET", env = "SLUICE_TARGET_SECRET")]
    pub target_secret: Option<String>,
    /// ErrorRecoveryLevel to offer (RFC 7143 section 13.20): 0 (the default, as open-iscsi
    /// and libiscsi) recovers from any error by a new session; 1 adds recovery within a
    /// connection (SNACK, recovery R2T, command retry); 2 adds connection recovery (a failed
    /// connection is replaced and its commands moved with TASK REASSIGN). The session runs at
    /// the lower of this and what the target accepts.
    #[arg(long, value_name = "LEVEL", value_parser = clap::value_parser!(u8).range(0..=2))]
    pub erl: Option<u8>,
    /// ErrorRecoveryLevel 1 and 2: seconds a command may go without progress before it is
    /// retried or its missing data asked for again (the retry period). Default 1.
    #[arg(long, value_name = "SECONDS", value_parser = parse_positive_seconds)]
    pub retry_timeout: Option<f64>,
    /// Seconds a command may take before it is aborted and fails (0: no deadline).
    #[arg(long, value_name = "SECONDS", default_value_t = 120.0, value_parser = parse_seconds)]
    pub command_timeout: f64,
    /// Any operational key or URL option, e.g. -O InitialR2T=No -O MaxBurstLength=65536.
    #[arg(short = 'O', long = "opt", value_name = "KEY=VALUE")]
    pub opts: Vec<String>,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A digest choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DigestOffer {
    /// No digest.
    None,
    /// CRC32C only.
    Crc32c,
    /// CRC32C preferred, None accepted.
    Prefer,
}

/// `sluice discover`.
#[derive(Debug, Args)]
pub struct DiscoverArgs {
    /// HOST[:PORT] or an iscsi:// URL.
    pub portal: String,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// An iscsi:// URL (one target) or HOST[:PORT] (every target found by discovery).
    pub url: String,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Commands that take one LUN URL.
#[derive(Debug, Args)]
pub struct UrlArgs {
    /// iscsi://[user[%secret]@]host[:port]/target-iqn/lun
    pub url: String,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice inq`.
#[derive(Debug, Args)]
pub struct InqArgs {
    /// iscsi://[user[%secret]@]host[:port]/target-iqn/lun
    pub url: String,
    /// Only this VPD page (e.g. 0x83); default: standard data and every supported page.
    #[arg(long, value_name = "PAGE", value_parser = parse_page)]
    pub page: Option<u8>,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// iscsi://[user[%secret]@]host[:port]/target-iqn/lun
    pub url: String,
    /// Byte offset (suffixes K, M, G, ...).
    #[arg(long, value_parser = size_arg, default_value = "0")]
    pub offset: u64,
    /// Bytes to read.
    #[arg(long, value_parser = size_arg)]
    pub length: u64,
    /// Output file (default: stdout, or a JSON summary with --json).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice write`.
#[derive(Debug, Args)]
pub struct WriteArgs {
    /// iscsi://[user[%secret]@]host[:port]/target-iqn/lun
    pub url: String,
    /// Byte offset, a multiple of the block size.
    #[arg(long, value_parser = size_arg, default_value = "0")]
    pub offset: u64,
    /// Bytes to write (default: the input file's size), a multiple of the block size.
    #[arg(long, value_parser = size_arg, required_unless_present = "input")]
    pub length: Option<u64>,
    /// Input file.
    #[arg(
        short,
        long,
        value_name = "FILE",
        conflicts_with = "pattern",
        required_unless_present = "pattern"
    )]
    pub input: Option<PathBuf>,
    /// Fill with this byte (0-255 or 0xNN).
    #[arg(long, value_name = "BYTE", value_parser = parse_byte)]
    pub pattern: Option<u8>,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice dd`.
#[derive(Debug, Args)]
pub struct DdArgs {
    /// Source: an iscsi:// URL or a file.
    #[arg(long = "if", value_name = "URL|FILE")]
    pub input: String,
    /// Destination: an iscsi:// URL or a file (created or truncated).
    #[arg(long = "of", value_name = "URL|FILE")]
    pub output: String,
    /// Bytes per command.
    #[arg(long, value_parser = size_arg, default_value = "1M")]
    pub bs: u64,
    /// Bytes to copy (default: the whole source).
    #[arg(long, value_parser = size_arg)]
    pub length: Option<u64>,
    /// Commands in flight.
    #[arg(long, default_value_t = 8)]
    pub queue_depth: usize,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `sluice xcopy`.
#[derive(Debug, Args, Clone)]
pub struct XcopyArgs {
    /// Source LUN: iscsi://host[:port]/target-iqn/lun.
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// Destination LUN of the same target.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Bytes to copy from the start of each LUN (default: the whole source).
    #[arg(long, value_parser = size_arg)]
    pub length: Option<u64>,
    /// Login options.
    #[command(flatten)]
    pub conn: ConnArgs,
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse_byte(s: &str) -> Result<u8, String> {
    parse_number(s)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not a byte (0-255 or 0x00-0xff)"))
}

fn parse_page(s: &str) -> Result<u8, String> {
    parse_number(s)
        .and_then(|n| u8::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not a VPD page code (e.g. 0x83)"))
}

/// A non-negative, finite number of seconds.
fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds")),
    }
}

/// A positive number of seconds.
pub fn parse_positive_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?}: expected seconds above 0 (e.g. 0.1)")),
    }
}
