//! Shared by the initiator subcommands: login options from flags and URL, the runtime, the
//! LUN a URL names, and JSON/text output.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_initiator::{Capacity, ConnectOptions, IscsiUrl, Session};
use sluice_proto::text::DigestKind;

use crate::client_args::{ConnArgs, DigestOffer};

/// Options for a URL (its user%secret and query) overridden by the flags.
pub fn options(url: &IscsiUrl, args: &ConnArgs) -> Result<ConnectOptions> {
    let mut o = ConnectOptions::from_url(url)?;
    if let Some(n) = &args.initiator_name {
        o.initiator_name = n.clone();
    }
    let digest = |d: DigestOffer| match d {
        DigestOffer::None => vec![DigestKind::None],
        DigestOffer::Crc32c => vec![DigestKind::Crc32c],
        DigestOffer::Prefer => vec![DigestKind::Crc32c, DigestKind::None],
    };
    if let Some(d) = args.header_digest {
        o.offer.header_digest = digest(d);
    }
    if let Some(d) = args.data_digest {
        o.offer.data_digest = digest(d);
    }
    if let (Some(u), Some(s)) = (&args.chap_user, &args.chap_secret) {
        o.set_chap(u, s);
    }
    if let (Some(u), Some(s)) = (&args.target_user, &args.target_secret) {
        o.set_mutual_chap(u, s)?;
    }
    if let Some(level) = args.erl {
        o.apply("ErrorRecoveryLevel", &level.to_string())?;
    }
    if let Some(secs) = args.retry_timeout {
        o.recovery.retry_timeout = std::time::Duration::from_secs_f64(secs);
    }
    o.recovery.command_timeout = (args.command_timeout > 0.0)
        .then(|| std::time::Duration::from_secs_f64(args.command_timeout));
    for kv in &args.opts {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("-O {kv:?}: use KEY=VALUE");
        };
        o.apply(k, v)?;
    }
    Ok(o)
}

/// A URL that must name a target and a LUN.
pub fn lun_url(text: &str) -> Result<(IscsiUrl, u16)> {
    let url = IscsiUrl::parse(text)?;
    let lun = match (&url.target, url.lun) {
        (Some(_), Some(lun)) => lun,
        _ => {
            bail!("{url}: the URL must name a target and a LUN: iscsi://host[:port]/target-iqn/lun (or iser://, or iscsi+udp://, experimental)")
        }
    };
    Ok((url, lun))
}

/// A multi-threaded runtime for one command.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the I/O runtime")
}

/// Logs in to the URL's target.
pub async fn connect(url: &IscsiUrl, args: &ConnArgs) -> Result<Session> {
    let opts = options(url, args)?;
    Ok(Session::connect_url_with(url, opts).await?)
}

/// Prints `value` as pretty JSON on stdout. A reader that went away (`| head`) is not an
/// error: the output is simply not wanted any more.
pub fn print_json<T: Serialize>(value: &T) -> Result<()> {
    use std::io::Write;
    let text = serde_json::to_string_pretty(value)?;
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Capacity as JSON.
#[derive(Serialize)]
pub struct CapacityJson {
    /// Blocks.
    pub blocks: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// Bytes.
    pub bytes: u64,
    /// Thin provisioning (LBPME).
    pub thin_provisioned: bool,
}

impl From<Capacity> for CapacityJson {
    fn from(c: Capacity) -> Self {
        Self {
            blocks: c.blocks(),
            block_size: c.block_size,
            bytes: c.bytes(),
            thin_provisioned: c.thin_provisioned,
        }
    }
}

/// `1.5G`-style size.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
