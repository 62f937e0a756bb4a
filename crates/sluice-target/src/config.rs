//! What a target serves and how: plain values, built by the CLI from flags or a TOML file.
//!
//! Nothing here parses text; `sluice-cli` owns argv and TOML and hands the result over as these
//! types. [`TargetConfig::validate`] checks what the types cannot express.

use std::fmt;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

use sluice_proto::params::IMPLEMENTED_ERROR_RECOVERY_LEVEL;
use sluice_proto::text::{KeyId, KeyValueError};
pub use sluice_scsi::AccessState;
pub use sluice_storage::RbdImage;

pub use sluice_scsi::{LuOptions, SanitizeOptions};

/// The whole target process: portals, targets and global limits.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Addresses to listen on (IPv4 and IPv6). Loopback unless the user asks otherwise.
    pub portals: Vec<SocketAddr>,
    /// How the portals form target portal groups, each with its own TPGT and ALUA state.
    /// Empty: every portal in group 1, active/optimized (see
    /// [`TargetConfig::effective_portal_groups`]). Otherwise every portal is in exactly one
    /// group.
    pub portal_groups: Vec<PortalGroup>,
    /// Where state that must survive a restart is kept: the persistent reservations of LUNs
    /// whose initiators set APTPL (one file per LUN, replaced atomically). `None`: APTPL is
    /// refused (REPORT CAPABILITIES says PTPL_C=0).
    pub state_dir: Option<PathBuf>,
    /// The targets served (at least one).
    pub targets: Vec<TargetDef>,
    /// Authentication required for SendTargets discovery sessions.
    pub discovery_auth: Option<ChapCredentials>,
    /// Operational keys the target offers and accepts.
    pub offer: OperationalOffer,
    /// Resource limits.
    pub limits: Limits,
    /// NOP-In keepalive: interval and how long to wait for the answering NOP-Out.
    pub keepalive: Option<Keepalive>,
    /// Error recovery settings of sessions that negotiate ErrorRecoveryLevel 1 or 2
    /// (DataACK interval, sequence reception timeout, status retention bound).
    pub recovery: sluice_proto::target::RecoveryConfig,
    /// Test hook: faults (corruption, drops, duplicates, resets) applied by the target to
    /// its own connections' PDUs, on send and on receive, from full feature phase on. On an
    /// iSER connection in RDMA mode they apply to the PDUs the core exchanges with the
    /// datamover, except corruption, which no digest there could notice (left alone and
    /// counted as skipped). `None` in production; tests of error recovery set it.
    pub fault_hook: Option<std::sync::Arc<sluice_fault::FaultHook>>,
    /// This process is one of several gateways exporting the same RBD images under the same
    /// target names (see [`GatewayConfig`]); `None`: a stand-alone target.
    pub gateway: Option<GatewayConfig>,
    /// The TCP congestion control algorithm of accepted connections (`cubic`, `bbr`, `reno`,
    /// ...: one of the kernel's available ones, see `sluice_tcp::check_congestion_control`); `None` leaves
    /// the host's default (`net.ipv4.tcp_congestion_control`).
    pub tcp_congestion: Option<String>,
}

/// One gateway of several that export the same RBD images as the same target names and LU
/// identities. Each gateway is one target port group (ALUA, SPC-4 5.15) holding one target
/// port whose relative identifier and TPGT are the group's id; every gateway reports every
/// group. The gateway recorded as the owner in RADOS owns the logical unit (its group
/// active/optimized); the others' groups are in [`non_owner`](Self::non_owner).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct GatewayConfig {
    /// This gateway's target port group, 1..=65535.
    pub group: u16,
    /// Every gateway's group, this one's included (the same list on every gateway).
    pub groups: Vec<u16>,
    /// The state of the groups that do not own a logical unit: active/non-optimized (every
    /// command runs through a non-owner, writes included, without changing the ownership)
    /// or standby (commands that touch the medium are refused with NOT READY).
    pub non_owner: AccessState,
}

/// Equal when everything is equal and both have the same fault hook (or none). The fields are
/// destructured, so a new field cannot be forgotten here.
impl PartialEq for TargetConfig {
    fn eq(&self, other: &Self) -> bool {
        let TargetConfig {
            portals,
            portal_groups,
            state_dir,
            targets,
            discovery_auth,
            offer,
            limits,
            keepalive,
            recovery,
            fault_hook,
            gateway,
            tcp_congestion,
        } = self;
        let same_hook = match (fault_hook, &other.fault_hook) {
            (None, None) => true,
            (Some(a), Some(b)) => std::sync::Arc::ptr_eq(a, b),
            _ => false,
        };
        *portals == other.portals
            && *portal_groups == other.portal_groups
            && *state_dir == other.state_dir
            && *targets == other.targets
            && *discovery_auth == other.discovery_auth
            && *offer == other.offer
            && *limits == other.limits
            && *keepalive == other.keepalive
            && *recovery == other.recovery
            && *gateway == other.gateway
            && *tcp_congestion == other.tcp_congestion
            && same_hook
    }
}

/// A target portal group (RFC 7143 section 4.1.1): portals that share a Target Portal Group
/// Tag. Every target is reachable through every group, as one SCSI target port per group, so a
/// multipath initiator sees each LU once through each group.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct PortalGroup {
    /// The Target Portal Group Tag, 1..=65535. It is also the relative target port identifier
    /// of each target's port in this group (SPC-4 reserves 0).
    pub tag: u16,
    /// Its listen addresses, each one of [`TargetConfig::portals`].
    pub portals: Vec<SocketAddr>,
    /// The ALUA target port group its target ports belong to (SPC-4 5.15); by default the
    /// tag. Portal groups that share one must give it the same state.
    pub alua_group: u16,
    /// The asymmetric access state the LUs start in through this group.
    pub alua_state: AccessState,
}

impl GatewayConfig {
    /// Checks the group list and the non-owner state.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.group == 0 || self.groups.contains(&0) {
            return Err(ConfigError::Gateway("group 0 is reserved (SPC-4)"));
        }
        if !self.groups.contains(&self.group) {
            return Err(ConfigError::Gateway(
                "its own group is not in the list of groups",
            ));
        }
        let mut sorted = self.groups.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != self.groups.len() {
            return Err(ConfigError::Gateway("a group is listed twice"));
        }
        if !matches!(
            self.non_owner,
            AccessState::Standby | AccessState::ActiveNonOptimized
        ) {
            return Err(ConfigError::Gateway(
                "non-owners are standby or active-non-optimized",
            ));
        }
        Ok(())
    }
}

/// One iSCSI target (an IQN) and its logical units.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TargetDef {
    /// The target's iSCSI name, e.g. `iqn.2026-11.io.sluice:disk0`.
    pub iqn: String,
    /// Optional TargetAlias.
    pub alias: Option<String>,
    /// Logical units, numbered by `LunDef::number`.
    pub luns: Vec<LunDef>,
    /// Who may log in.
    pub acl: Acl,
    /// CHAP required for normal sessions to this target.
    pub chap: Option<ChapCredentials>,
}

/// Who may log in to a target.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Acl {
    /// Any initiator. Only ever the result of an explicit choice (flag or `acl = "open"`).
    Open,
    /// Only these InitiatorNames (compared case-insensitively, RFC 3722 stringprep folds case).
    Allow(Vec<String>),
}

/// CHAP secrets for one direction or both.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ChapCredentials {
    /// The name the initiator sends in CHAP_N.
    pub user: String,
    /// The secret the initiator proves it knows.
    pub secret: String,
    /// For mutual CHAP: the name and secret the target answers with.
    pub mutual: Option<(String, String)>,
}

/// A logical unit: a backend plus the SCSI identity it is exported with.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LunDef {
    /// LUN number (0-based, at most [`MAX_LUN_NUMBER`]).
    pub number: u16,
    /// Where the blocks live.
    pub backend: Backend,
    /// Logical block size: 512 or 4096.
    pub block_size: u32,
    /// Refuse writes (DATA PROTECT).
    pub read_only: bool,
    /// Report a removable medium (INQUIRY RMB=1) that START STOP UNIT can eject and load;
    /// while ejected, medium-access commands fail with NOT READY / MEDIUM NOT PRESENT.
    pub removable: bool,
    /// Unit serial number (VPD 0x80); generated from the target and LUN when absent.
    pub serial: Option<String>,
    /// Thin provisioning (memory and regular-file LUNs only) and SANITIZE.
    pub options: LuOptions,
}

impl LunDef {
    /// LUN `number` on `backend` with `block_size`-byte blocks: writable, not removable, its
    /// serial generated, default options (what a LUN is unless configured otherwise).
    pub fn new(number: u16, backend: Backend, block_size: u32) -> Self {
        Self {
            number,
            backend,
            block_size,
            read_only: false,
            removable: false,
            serial: None,
            options: LuOptions::default(),
        }
    }
}

/// The storage behind a LUN.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum Backend {
    /// RAM, sparse, lost on exit.
    Memory {
        /// Size in bytes.
        size: u64,
    },
    /// A regular file (created sparse when missing and a size is given) or a block device.
    File {
        /// Path of the file or device.
        path: PathBuf,
        /// Size in bytes when the file must be created or grown.
        size: Option<u64>,
        /// Open with O_DIRECT.
        direct: bool,
        /// Back a mapped tmpfs file with 2 MiB pages (see `sluice_storage::FileOptions`).
        huge_pages: bool,
    },
    /// Discards writes, reads zeros: for protocol benchmarks.
    Null {
        /// Size in bytes.
        size: u64,
    },
    /// An image of a Ceph cluster, through librbd; its size is the image's. Serving one needs
    /// a build with the `rbd` feature; other builds refuse to open it, saying so.
    Rbd {
        /// The pool, the image and how to reach the cluster.
        image: RbdImage,
    },
}

/// The operational keys the target offers (RFC 7143 section 13), and per-session queue depth.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct OperationalOffer {
    /// MaxRecvDataSegmentLength the target declares (what it can receive per PDU).
    pub max_recv_data_segment_length: u32,
    /// MaxBurstLength the target accepts at most.
    pub max_burst_length: u32,
    /// FirstBurstLength the target accepts at most.
    pub first_burst_length: u32,
    /// ImmediateData the target allows.
    pub immediate_data: bool,
    /// InitialR2T the target wants.
    pub initial_r2t: bool,
    /// MaxOutstandingR2T the target accepts at most.
    pub max_outstanding_r2t: u16,
    /// DataPDUInOrder the target wants.
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder the target wants.
    pub data_sequence_in_order: bool,
    /// Allow HeaderDigest=CRC32C.
    pub header_digest: DigestPolicy,
    /// Allow DataDigest=CRC32C.
    pub data_digest: DigestPolicy,
    /// DefaultTime2Wait (seconds).
    pub default_time2wait: u16,
    /// DefaultTime2Retain (seconds).
    pub default_time2retain: u16,
    /// Highest ErrorRecoveryLevel accepted.
    pub error_recovery_level: u8,
    /// Commands a session may have outstanding (sets MaxCmdSN - ExpCmdSN + 1).
    pub queue_depth: u32,
    /// MaxConnections the target accepts at most per session (RFC 7143 section 13.2).
    pub max_connections: u16,
    /// Whether GOOD status of a read rides in its last Data-In (phase collapse, RFC 7143
    /// section 11.7.3) rather than in a separate SCSI Response. Not negotiated.
    pub phase_collapse: bool,
}

/// The values [`OperationalOffer::queue_depth`] may take: at least one command, at most 2^16
/// (far inside the 2^31 window that serial arithmetic on CmdSN allows, RFC 7143 section
/// 4.2.2.1).
pub const QUEUE_DEPTH: RangeInclusive<u32> = 1..=65_536;

/// How the target answers a digest offer.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum DigestPolicy {
    /// Accept CRC32C or None, whichever the initiator prefers.
    Allow,
    /// Insist on CRC32C.
    Require,
    /// Refuse CRC32C.
    Forbid,
}

impl Default for OperationalOffer {
    fn default() -> Self {
        Self {
            max_recv_data_segment_length: 262_144,
            // Writes up to 16 MiB - 1 KiB may come unsolicited and be solicited in one R2T:
            // on a long path each R2T round trip is the cost (`sluice lab wan`). Both are
            // minimums of the two offers (RFC 7143 sections 13.13, 13.14), so initiators that
            // offer less (open-iscsi 256 KiB of first burst, libiscsi 256 KiB) get what they
            // asked for; the write data buffered per connection stays bounded by
            // `Limits::max_outstanding_bytes_per_connection` whatever the bursts.
            max_burst_length: 16_776_192,
            first_burst_length: 16_776_192,
            immediate_data: true,
            initial_r2t: false,
            max_outstanding_r2t: 8,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            header_digest: DigestPolicy::Allow,
            data_digest: DigestPolicy::Allow,
            default_time2wait: 2,
            default_time2retain: 20,
            error_recovery_level: IMPLEMENTED_ERROR_RECOVERY_LEVEL,
            queue_depth: 128,
            max_connections: 8,
            phase_collapse: true,
        }
    }
}

/// Bounds on what initiators can make the target hold.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Limits {
    /// Sessions across all targets.
    pub max_sessions: usize,
    /// TCP connections, logged in or not.
    pub max_connections: usize,
    /// Bytes of write data a connection may have buffered for commands in flight.
    pub max_outstanding_bytes_per_connection: usize,
    /// A login that has not reached full feature phase by then is dropped.
    pub login_timeout: Duration,
    /// How long shutdown waits for in-flight commands and logouts.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sessions: 1024,
            max_connections: 4096,
            max_outstanding_bytes_per_connection: 64 << 20,
            login_timeout: Duration::from_secs(15),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// NOP-In keepalive settings.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Keepalive {
    /// Idle time before the target pings.
    pub interval: Duration,
    /// How long the initiator has to answer before the connection is dropped.
    pub timeout: Duration,
}

impl Default for Keepalive {
    fn default() -> Self {
        Self {
            // Tolerant values: busy initiators answer pings late, and LIO raised its own
            // defaults to 15 s / 30 s after open-iscsi could not answer within 5 s under heavy
            // reads and dropped connections (Linux commit cf0eb28d3ba6, "iscsi-target: Bump
            // defaults for nopin_timeout + nopin_response_timeout values").
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(30),
        }
    }
}

/// The highest LUN number a target serves: LUNs from 256 up are addressed with the flat space
/// addressing method (SAM-5), whose 14-bit field holds at most 16383.
pub const MAX_LUN_NUMBER: u16 = 16_383;

/// A configuration the types allow but the target cannot serve. Each error says which part of
/// the configuration it concerns by position and name, so that a caller can point at it.
#[derive(Clone, Debug, thiserror::Error, Eq, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Nothing to serve.
    #[error("no targets configured")]
    NoTargets,
    /// No address to listen on.
    #[error("no portals (listen addresses) configured")]
    NoPortals,
    /// A gateway configuration that cannot be served: its group missing from (or repeated in)
    /// the list of groups, a group 0, a non-owner state other than standby or
    /// active/non-optimized, or explicit portal groups besides.
    #[error("gateway: {0}")]
    Gateway(&'static str),
    /// A TCP congestion control algorithm this host does not offer.
    #[error(transparent)]
    TcpCongestion(#[from] sluice_tcp::CongestionError),
    /// A target without LUNs.
    #[error("target {0}: no LUNs")]
    NoLuns(TargetRef),
    /// A target with the name of an earlier one (compared case-insensitively); this is the
    /// later one.
    #[error("target {0} is defined twice")]
    DuplicateTarget(TargetRef),
    /// Bad IQN/EUI/NAA name.
    #[error("target name {:?} is not a valid iSCSI name (iqn., eui. or naa.)", .0.iqn)]
    BadName(TargetRef),
    /// A LUN with the number of an earlier LUN of the same target; this is the later one.
    #[error("target {target}: {lun} is defined twice")]
    DuplicateLun {
        /// The target.
        target: TargetRef,
        /// The later LUN.
        lun: LunRef,
    },
    /// LUN number above [`MAX_LUN_NUMBER`].
    #[error("target {target}: {lun} is above {max}", max = MAX_LUN_NUMBER)]
    LunNumber {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// Unsupported block size.
    #[error("target {target}: {lun}: block size {block_size} (use 512 or 4096)")]
    BlockSize {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The block size given.
        block_size: u32,
    },
    /// Size not a positive multiple of the block size.
    #[error(
        "target {target}: {lun}: size {size} is not a positive multiple of the block size {block_size}"
    )]
    Size {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The size given, in bytes.
        size: u64,
        /// The LUN's block size.
        block_size: u32,
    },
    /// Thin provisioning asked for on a null LUN, which stores nothing to deallocate.
    #[error("target {target}: {lun}: a null LUN stores nothing, so it cannot be thin-provisioned")]
    ThinNull {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// An operational key outside its range in the key table (RFC 7143 section 13).
    #[error(transparent)]
    Key(#[from] KeyValueError),
    /// An ErrorRecoveryLevel the session cores do not implement.
    #[error(
        "{key} = {0}: sluice implements levels 0 to {max} only",
        key = KeyId::ErrorRecoveryLevel,
        max = IMPLEMENTED_ERROR_RECOVERY_LEVEL
    )]
    ErrorRecoveryLevel(u8),
    /// A queue depth outside [`QUEUE_DEPTH`].
    #[error("queue_depth = {0} is outside {min}..={max}", min = QUEUE_DEPTH.start(), max = QUEUE_DEPTH.end())]
    QueueDepth(u32),
    /// FirstBurstLength above MaxBurstLength (RFC 7143 section 13.14).
    #[error("{first} {0} exceeds {max} {1}", first = KeyId::FirstBurstLength, max = KeyId::MaxBurstLength)]
    FirstBurst(u32, u32),
    /// CHAP secret length outside what initiators accept.
    #[error(
        "CHAP secret for {owner}{} must be 12 to 255 characters (Windows and open-iscsi refuse shorter)",
        match .secret { SecretRole::Initiator => "", SecretRole::Mutual => " (mutual)" }
    )]
    ChapSecret {
        /// Whose CHAP settings.
        owner: ChapOwner,
        /// Which of the two secrets.
        secret: SecretRole,
    },
    /// Mutual secret equal to the initiator's secret.
    #[error(
        "CHAP for {0}: the mutual secret must differ from the initiator's (RFC 7143 section 9.2.1)"
    )]
    ChapSameSecret(ChapOwner),
    /// A portal group tag of 0 (SPC-4 reserves relative target port identifier 0).
    #[error("portal group tag 0: use 1 to 65535")]
    PortalGroupTag,
    /// Two portal groups with the same tag.
    #[error("portal group {0} is defined twice")]
    DuplicatePortalGroup(u16),
    /// A portal group without portals.
    #[error("portal group {0} has no portal")]
    EmptyPortalGroup(u16),
    /// A portal listened on that no portal group has, or a group's portal not listened on,
    /// or a portal in two groups.
    #[error("portal {0} must be in exactly one portal group, and listened on")]
    PortalGroupMembership(SocketAddr),
    /// Portal groups sharing an ALUA target port group with different states.
    #[error("portal groups of ALUA target port group {0} give it different states")]
    AluaGroupState(u16),
}

/// Which target of [`TargetConfig::targets`] an error concerns; shown as its name.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TargetRef {
    /// Its position in [`TargetConfig::targets`].
    pub index: usize,
    /// Its name, as configured.
    pub iqn: String,
}

impl fmt::Display for TargetRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.iqn)
    }
}

/// Which LUN of a target an error concerns; shown as `LUN <number>`.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct LunRef {
    /// Its position in [`TargetDef::luns`].
    pub index: usize,
    /// Its LUN number.
    pub number: u16,
}

impl fmt::Display for LunRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LUN {}", self.number)
    }
}

/// Whose CHAP settings an error concerns.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum ChapOwner {
    /// [`TargetConfig::discovery_auth`].
    Discovery,
    /// A target's [`TargetDef::chap`].
    Target(TargetRef),
}

impl fmt::Display for ChapOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChapOwner::Discovery => f.write_str("discovery"),
            ChapOwner::Target(t) => t.fmt(f),
        }
    }
}

/// One of the two CHAP secrets of [`ChapCredentials`].
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum SecretRole {
    /// [`ChapCredentials::secret`]: the one the initiator proves it knows.
    Initiator,
    /// The secret of [`ChapCredentials::mutual`]: the one the target proves it knows.
    Mutual,
}
