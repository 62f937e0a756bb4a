//! `[metrics]` and `[control]`: how the process is watched and operated (the Prometheus
//! endpoint, the control socket and the HTTP admin API). They belong to the `sluice target`
//! process, not to what it serves, so they are kept apart from the target configuration and
//! are read once at start (a reload reports a change to them without applying it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::values::Listen;

/// Where metrics are served.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct MetricsConfig {
    /// The address of the HTTP endpoint (`/metrics`).
    pub listen: SocketAddr,
    /// A file holding the bearer token scrapes must present; required when `listen` is not
    /// a loopback address.
    pub token_file: Option<PathBuf>,
}

/// How the target is operated.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ControlConfig {
    /// The Unix control socket (`sluice ctl`).
    pub socket: Option<PathBuf>,
    /// A group whose members may use the socket (mode 0660 instead of 0600).
    pub group: Option<String>,
    /// The address of the HTTP+JSON admin API.
    pub http: Option<SocketAddr>,
    /// A file holding the bearer token the admin API requires.
    pub token_file: Option<PathBuf>,
}

/// `[metrics]` and `[control]` of a file.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct ServiceConfig {
    /// `[metrics]`, when present.
    pub metrics: Option<MetricsConfig>,
    /// `[control]`, when present.
    pub control: Option<ControlConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[metrics]`.
pub(super) struct MetricsToml {
    listen: Option<Listen>,
    token_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[control]`.
pub(super) struct ControlToml {
    socket: Option<PathBuf>,
    group: Option<String>,
    http: Option<Listen>,
    token_file: Option<PathBuf>,
}

/// The loopback address metrics are served on by default: port 9490.
pub const DEFAULT_METRICS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9490);

/// Converts the two tables; relative paths are taken relative to `base`.
pub(super) fn convert(
    metrics: Option<&MetricsToml>,
    control: Option<&ControlToml>,
    base: &Path,
) -> ServiceConfig {
    ServiceConfig {
        metrics: metrics.map(|m| MetricsConfig {
            listen: m.listen.map_or(DEFAULT_METRICS, |l| l.0),
            token_file: m.token_file.as_ref().map(|p| base.join(p)),
        }),
        control: control.map(|c| ControlConfig {
            socket: c.socket.as_ref().map(|p| base.join(p)),
            group: c.group.clone(),
            http: c.http.map(|l| l.0),
            token_file: c.token_file.as_ref().map(|p| base.join(p)),
        }),
    }
}
