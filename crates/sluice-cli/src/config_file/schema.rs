//! The schema: one struct per table of the file, as serde reads it (keys documented in
//! docs/configuration.md). Every table denies unknown keys.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::service::{ControlToml, MetricsToml};
use super::values::{
    AclToml, AluaStateToml, BackendKind, DigestToml, Dur, PortalToml, ProvisioningKind, Size,
};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// The whole file (keys documented in docs/configuration.md).
pub(super) struct FileToml {
    pub(super) listen: Option<Spanned<Vec<Spanned<PortalToml>>>>,
    pub(super) state_dir: Option<Spanned<PathBuf>>,
    #[serde(default, rename = "portal_group")]
    pub(super) portal_groups: Vec<Spanned<PortalGroupToml>>,
    pub(super) discovery: Option<DiscoveryToml>,
    pub(super) session: Option<Spanned<SessionToml>>,
    pub(super) keepalive: Option<KeepaliveToml>,
    pub(super) recovery: Option<RecoveryToml>,
    pub(super) limits: Option<LimitsToml>,
    pub(super) metrics: Option<MetricsToml>,
    pub(super) control: Option<ControlToml>,
    pub(super) gateway: Option<Spanned<GatewayToml>>,
    pub(super) tcp_congestion: Option<Spanned<String>>,
    #[serde(default, rename = "target")]
    pub(super) targets: Vec<Spanned<TargetToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[portal_group]]`: the ALUA settings of the portals whose `listen` entry ends in
/// `,TAG`.
pub(super) struct PortalGroupToml {
    pub(super) tag: Spanned<i64>,
    pub(super) alua_state: Option<AluaStateToml>,
    pub(super) alua_group: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[gateway]`: this process is one of several gateways exporting the same RBD images.
pub(super) struct GatewayToml {
    pub(super) group: Spanned<i64>,
    pub(super) groups: Vec<Spanned<i64>>,
    pub(super) non_owner: Option<AluaStateToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[discovery]`.
pub(super) struct DiscoveryToml {
    pub(super) chap: Option<Spanned<ChapToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// A CHAP table, inline or `[target.chap]`.
pub(super) struct ChapToml {
    pub(super) user: Spanned<String>,
    pub(super) secret: Spanned<String>,
    pub(super) mutual_user: Option<Spanned<String>>,
    pub(super) mutual_secret: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[session]`: operational keys (keys documented in docs/configuration.md).
pub(super) struct SessionToml {
    pub(super) max_recv_data_segment_length: Option<Spanned<Size>>,
    pub(super) max_burst_length: Option<Spanned<Size>>,
    pub(super) first_burst_length: Option<Spanned<Size>>,
    pub(super) immediate_data: Option<bool>,
    pub(super) initial_r2t: Option<bool>,
    pub(super) max_outstanding_r2t: Option<Spanned<u64>>,
    pub(super) data_pdu_in_order: Option<bool>,
    pub(super) data_sequence_in_order: Option<bool>,
    pub(super) header_digest: Option<DigestToml>,
    pub(super) data_digest: Option<DigestToml>,
    pub(super) default_time2wait: Option<Spanned<Dur>>,
    pub(super) default_time2retain: Option<Spanned<Dur>>,
    pub(super) error_recovery_level: Option<Spanned<u64>>,
    pub(super) queue_depth: Option<Spanned<i64>>,
    pub(super) max_connections: Option<Spanned<u64>>,
    pub(super) phase_collapse: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[keepalive]`.
pub(super) struct KeepaliveToml {
    pub(super) enabled: Option<bool>,
    pub(super) interval: Option<Spanned<Dur>>,
    pub(super) timeout: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[recovery]`: error recovery of sessions that negotiate ErrorRecoveryLevel 1 or 2.
pub(super) struct RecoveryToml {
    pub(super) data_ack_every: Option<Spanned<i64>>,
    pub(super) sequence_timeout: Option<Spanned<Dur>>,
    pub(super) max_retained_statuses: Option<Spanned<i64>>,
    pub(super) max_retained_bytes: Option<Spanned<Size>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[limits]`.
pub(super) struct LimitsToml {
    pub(super) max_sessions: Option<Spanned<i64>>,
    pub(super) max_connections: Option<Spanned<i64>>,
    pub(super) max_outstanding_bytes_per_connection: Option<Spanned<Size>>,
    pub(super) login_timeout: Option<Spanned<Dur>>,
    pub(super) shutdown_grace: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[target]]`.
pub(super) struct TargetToml {
    pub(super) iqn: Spanned<String>,
    pub(super) alias: Option<Spanned<String>>,
    pub(super) acl: Option<Spanned<AclToml>>,
    pub(super) chap: Option<Spanned<ChapToml>>,
    #[serde(default, rename = "lun")]
    pub(super) luns: Vec<Spanned<LunToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[target.lun]]`.
pub(super) struct LunToml {
    pub(super) number: Option<Spanned<i64>>,
    pub(super) backend: Spanned<BackendKind>,
    pub(super) size: Option<Spanned<Size>>,
    pub(super) path: Option<Spanned<PathBuf>>,
    pub(super) direct: Option<Spanned<bool>>,
    pub(super) huge_pages: Option<Spanned<bool>>,
    pub(super) image: Option<Spanned<String>>,
    pub(super) ceph_conf: Option<Spanned<PathBuf>>,
    pub(super) ceph_id: Option<Spanned<String>>,
    pub(super) ceph_keyring: Option<Spanned<PathBuf>>,
    pub(super) block_size: Option<Spanned<i64>>,
    pub(super) read_only: Option<bool>,
    pub(super) removable: Option<bool>,
    pub(super) serial: Option<Spanned<String>>,
    pub(super) provisioning: Option<Spanned<ProvisioningKind>>,
    pub(super) soft_threshold: Option<Spanned<i64>>,
    pub(super) sanitize: Option<bool>,
    pub(super) sanitize_rate: Option<Spanned<Size>>,
}
