//! Command-line definitions for operating a target: the flags of `sluice target` that open
//! its metrics endpoint, control socket and admin API, and `sluice ctl`, which talks to them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::cli::parse_listen;
use crate::size::parse_size;

/// `sluice target` flags for operating it (allowed beside `--config`; they override its
/// `[metrics]` and `[control]` tables).
#[derive(Debug, Args, Clone, Default)]
pub struct OpsArgs {
    /// Serve Prometheus metrics (OpenMetrics text) on http://ADDR/metrics; ADDR defaults to
    /// 127.0.0.1:9490. An address other than loopback needs --metrics-token-file.
    #[arg(long, value_name = "ADDR:PORT", num_args = 0..=1,
          default_missing_value = "127.0.0.1:9490", value_parser = parse_listen)]
    pub metrics: Option<SocketAddr>,
    /// A file holding the bearer token scrapes must present.
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,
    /// Open the control socket `sluice ctl` talks to (default /run/sluice/control.sock),
    /// usable by root and this process's user only.
    #[arg(long, value_name = "PATH", num_args = 0..=1,
          default_missing_value = crate::ops::control::DEFAULT_SOCKET)]
    pub control: Option<PathBuf>,
    /// Let this group's members use the control socket too (a name or a number).
    #[arg(long, value_name = "GROUP")]
    pub control_group: Option<String>,
    /// Serve the HTTP+JSON admin API on ADDR (it always requires --admin-token-file).
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen, requires = "admin_token_file")]
    pub admin_http: Option<SocketAddr>,
    /// A file holding the bearer token the admin API requires.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
}

/// The ids of [`OpsArgs`], which may accompany `--config`.
pub const OPS_ARG_IDS: &[&str] = &[
    "metrics",
    "metrics_token_file",
    "control",
    "control_group",
    "admin_http",
    "admin_token_file",
];

/// Text after `sluice ctl --help`.
pub const CTL_AFTER_HELP: &str = "\
Talks to a running `sluice target` through its control socket (started with --control or a
[control] table), or its HTTP admin API with --http and --token-file. Examples:
  sluice ctl status
  sluice ctl sessions --json
  sluice ctl lun add iqn.2026-11.io.sluice:default --number 1 --memory 2G
  sluice ctl lun resize iqn.2026-11.io.sluice:default 0 4G
  sluice ctl acl remove iqn.2026-11.io.sluice:default iqn.1994-05.com.redhat:old-host
  sluice ctl session close 7
  sluice ctl config save            # over the file the target was started with
  sluice ctl reload                 # read that file again (as SIGHUP does)
See docs/operations.md.";

/// `sluice ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// The control socket.
    #[arg(long, value_name = "PATH", default_value = crate::ops::control::DEFAULT_SOCKET,
          conflicts_with = "http")]
    pub socket: PathBuf,
    /// Use the HTTP admin API at this base URL instead (http://HOST:PORT).
    #[arg(long, value_name = "URL", requires = "token_file")]
    pub http: Option<String>,
    /// The admin API's bearer token, read from this file.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Print what a command reads as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `sluice ctl` commands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Portals, targets, LUs and sessions at a glance.
    Status,
    /// The targets: ACL, CHAP user, LUs, sessions, logins.
    Targets,
    /// The LUs, of every target or of one.
    Luns {
        /// Only this target.
        target: Option<String>,
    },
    /// The addresses the target listens on.
    Portals,
    /// The sessions: initiator, address, negotiated values, counters.
    Sessions {
        /// Only sessions to this target.
        #[arg(long)]
        target: Option<String>,
    },
    /// Close a session.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Add, remove or grow a LU.
    #[command(subcommand)]
    Lun(LunCommand),
    /// Change a target's ACL.
    #[command(subcommand)]
    Acl(AclCommand),
    /// Set or clear CHAP credentials.
    #[command(subcommand)]
    Chap(ChapCommand),
    /// Show or save the configuration in force.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Read the target's configuration file again and apply the difference (as SIGHUP does).
    Reload,
}

/// `sluice ctl session`.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Close every connection of a session at once.
    Close {
        /// The session's id (`sluice ctl sessions`).
        id: u64,
    },
}

/// `sluice ctl lun`.
#[derive(Debug, Subcommand)]
pub enum LunCommand {
    /// Add a LU; initiators see REPORTED LUNS DATA HAS CHANGED.
    Add(LunAddArgs),
    /// Remove a LU; initiators see REPORTED LUNS DATA HAS CHANGED.
    Remove {
        /// Target name.
        target: String,
        /// LUN number.
        number: u16,
    },
    /// Grow a LU (data kept); initiators see CAPACITY DATA HAS CHANGED.
    Resize {
        /// Target name.
        target: String,
        /// LUN number.
        number: u16,
        /// New size (e.g. 4G); never smaller than now.
        #[arg(value_parser = size)]
        size: u64,
    },
}

/// `sluice ctl lun add`.
#[derive(Debug, Args)]
pub struct LunAddArgs {
    /// Target name.
    pub target: String,
    /// LUN number (default: one above the highest).
    #[arg(long)]
    pub number: Option<u16>,
    /// A RAM disk of this size.
    #[arg(long, value_name = "SIZE", value_parser = size,
          conflicts_with_all = ["file", "null"])]
    pub memory: Option<u64>,
    /// A file or block device.
    #[arg(long, value_name = "PATH", conflicts_with = "null")]
    pub file: Option<PathBuf>,
    /// Size of the file LUN (creates or grows the file).
    #[arg(long, value_name = "SIZE", value_parser = size, requires = "file")]
    pub size: Option<u64>,
    /// A null LUN (reads zeros, discards writes) of this size.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub null: Option<u64>,
    /// Logical block size: 512 or 4096.
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<u32>,
    /// Refuse writes.
    #[arg(long)]
    pub read_only: bool,
    /// Report a removable medium.
    #[arg(long)]
    pub removable: bool,
    /// Unit serial number (VPD 80h).
    #[arg(long)]
    pub serial: Option<String>,
    /// Open the file with O_DIRECT.
    #[arg(long, requires = "file")]
    pub direct: bool,
    /// Thin-provision it (memory or a regular file): UNMAP gives space back.
    #[arg(long)]
    pub thin: bool,
    /// With --thin: warn initiators when the space allocated passes this percentage.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100), requires = "thin")]
    pub soft_threshold: Option<u8>,
    /// Let initiators SANITIZE it (every block wiped).
    #[arg(long)]
    pub allow_sanitize: bool,
    /// With --allow-sanitize: write at most this many bytes a second while sanitizing.
    #[arg(long, value_name = "SIZE", value_parser = size, requires = "allow_sanitize")]
    pub sanitize_rate: Option<u64>,
}

/// `sluice ctl acl`.
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Let an initiator log in (the ACL must list names already).
    Add {
        /// Target name.
        target: String,
        /// InitiatorName.
        initiator: String,
    },
    /// Take an initiator off the ACL; its sessions to the target are closed.
    Remove {
        /// Target name.
        target: String,
        /// InitiatorName.
        initiator: String,
    },
    /// Replace the ACL with these names.
    Set {
        /// Target name.
        target: String,
        /// InitiatorNames.
        #[arg(required = true)]
        initiators: Vec<String>,
    },
    /// Let any initiator log in.
    Open {
        /// Target name.
        target: String,
    },
}

/// `sluice ctl chap`.
#[derive(Debug, Subcommand)]
pub enum ChapCommand {
    /// Set CHAP credentials; the secrets are read from files (never from the command line).
    Set {
        /// Target name; omit with --discovery.
        #[arg(required_unless_present = "discovery")]
        target: Option<String>,
        /// For discovery sessions.
        #[arg(long, conflicts_with = "target")]
        discovery: bool,
        /// CHAP name initiators send.
        #[arg(long)]
        user: String,
        /// File holding the secret (first line); `-` for standard input.
        #[arg(long, value_name = "FILE")]
        secret_file: PathBuf,
        /// Mutual CHAP: the target's name.
        #[arg(long, requires = "mutual_secret_file")]
        mutual_user: Option<String>,
        /// Mutual CHAP: file holding the target's secret.
        #[arg(long, value_name = "FILE", requires = "mutual_user")]
        mutual_secret_file: Option<PathBuf>,
    },
    /// Turn CHAP off.
    Clear {
        /// Target name; omit with --discovery.
        #[arg(required_unless_present = "discovery")]
        target: Option<String>,
        /// For discovery sessions.
        #[arg(long, conflicts_with = "target")]
        discovery: bool,
    },
}

/// `sluice ctl config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the configuration in force as TOML (`--config` reads it back).
    Show,
    /// Write it to the file the target was started with, or to PATH (mode 0600).
    Save {
        /// Where (default: the target's own configuration file).
        path: Option<PathBuf>,
    },
}

/// `sluice completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// A size flag's parser, re-exported for the definitions above.
pub fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}
