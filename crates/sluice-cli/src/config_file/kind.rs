//! What can be wrong in a configuration file, one variant per kind of problem. Each variant
//! says which target, LUN or key it concerns by typed fields; the words are only in
//! [`Display`](fmt::Display).

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use sluice_proto::text::{KeyId, KeyValueError};
use sluice_target::config::{ChapOwner, ConfigError, LunRef, SecretRole, TargetRef};

use super::values::BackendKind;

/// What is wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// What the TOML reader refused, in the file's vocabulary: the syntax, an unknown key, a
    /// missing one, or a value of the wrong type or syntax (sizes, durations, addresses, ACLs).
    Syntax(String),
    /// `listen = []`.
    NoListen,
    /// An address listed twice in `listen`.
    ListenTwice(SocketAddr),
    /// A `[[portal_group]]` whose tag no `listen` address has.
    PortalGroupWithoutPortal(u16),
    /// Two `[[portal_group]]` tables with the same tag.
    PortalGroupTwice(u16),
    /// An operational key of `[session]` refused by the key table.
    Key(KeyValueError),
    /// A fraction of a second for a key the RFC counts in whole seconds.
    WholeSeconds(KeyId),
    /// An integer outside what the key allows.
    OutOfRange {
        /// The key.
        key: FileKey,
        /// The value given (or, for a LUN without `number`, counted).
        value: i64,
        /// Smallest allowed.
        min: i64,
        /// Largest allowed.
        max: i64,
    },
    /// Zero for a key that must be above zero.
    Zero(FileKey),
    /// An empty CHAP user name.
    EmptyChapUser {
        /// Whose CHAP table.
        owner: ChapOwner,
        /// `user` (the initiator's) or `mutual_user`.
        role: SecretRole,
    },
    /// `mutual_user` without `mutual_secret` (`given` is the user) or the other way round.
    HalfMutualChap {
        /// Whose CHAP table.
        owner: ChapOwner,
        /// Which of the two keys is there.
        given: FileKey,
    },
    /// A target without `acl`.
    NoAcl(TargetRef),
    /// `acl = []`.
    EmptyAcl(TargetRef),
    /// An ACL entry that is not an iSCSI name.
    BadInitiatorName {
        /// The target.
        target: TargetRef,
        /// The entry.
        name: String,
    },
    /// An alias that is too long or not printable.
    BadAlias(TargetRef),
    /// A key of one backend's LUNs on a LUN of another backend.
    NotForBackend {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The key (`path`, `direct`, `huge_pages` of file LUNs; `image`, `ceph_conf`,
        /// `ceph_id`, `ceph_keyring` of RBD LUNs).
        key: FileKey,
        /// The backend the key belongs to.
        only: BackendKind,
        /// The LUN's backend.
        backend: BackendKind,
    },
    /// `size` on an RBD LUN, whose size is its image's.
    RbdSize {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// An RBD LUN without `image`.
    NoImage {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// An `image` that is not POOL/IMAGE, or a `ceph_id` that is not a client id.
    BadRbd {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// What is wrong.
        message: String,
    },
    /// A memory or null LUN without `size`.
    NoSize {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// Its backend.
        backend: BackendKind,
    },
    /// A file LUN without `path`.
    NoPath {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// A serial number that is empty, too long or not printable ASCII.
    BadSerial {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// The directory of a file LUN does not exist.
    NoDirectory {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The directory.
        dir: PathBuf,
    },
    /// The path of a file LUN is a directory.
    PathIsDirectory {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The path.
        path: PathBuf,
    },
    /// `soft_threshold` on a LUN that is not thin.
    ThresholdNeedsThin {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// `sanitize_rate` on a LUN without `sanitize = true`, or a rate of zero.
    SanitizeRate {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
    },
    /// A file LUN without `size` whose file does not exist.
    NoFile {
        /// The target.
        target: TargetRef,
        /// The LUN.
        lun: LunRef,
        /// The path.
        path: PathBuf,
    },
    /// A problem found by `TargetConfig::validate`.
    Invalid(ConfigError),
}

/// A key of the file that is not an RFC 7143 operational key, named in errors about its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKey {
    /// `[session] queue_depth`.
    QueueDepth,
    /// `[keepalive] interval`.
    KeepaliveInterval,
    /// `[keepalive] timeout`.
    KeepaliveTimeout,
    /// `[recovery] data_ack_every`.
    DataAckEvery,
    /// `[recovery] sequence_timeout`.
    SequenceTimeout,
    /// `[recovery] max_retained_statuses`.
    MaxRetainedStatuses,
    /// `[recovery] max_retained_bytes`.
    MaxRetainedBytes,
    /// `[limits] max_sessions`.
    MaxSessions,
    /// `[limits] max_connections`.
    MaxTcpConnections,
    /// `[limits] max_outstanding_bytes_per_connection`.
    MaxOutstandingBytes,
    /// `[limits] login_timeout`.
    LoginTimeout,
    /// `mutual_user` of a CHAP table.
    MutualUser,
    /// `mutual_secret` of a CHAP table.
    MutualSecret,
    /// `[[target.lun]] number`.
    LunNumber,
    /// The number of a `[[target.lun]]` without `number`: the previous one's plus one.
    CountedLunNumber,
    /// `[[target.lun]] block_size`.
    BlockSize,
    /// `[[target.lun]] path`.
    Path,
    /// `[[target.lun]] direct`.
    Direct,
    /// `[[target.lun]] huge_pages`.
    HugePages,
    /// `[[target.lun]] soft_threshold`.
    SoftThreshold,
    /// `[[target.lun]] image`.
    Image,
    /// `[[target.lun]] ceph_conf`.
    CephConf,
    /// `[[target.lun]] ceph_id`.
    CephId,
    /// `[[target.lun]] ceph_keyring`.
    CephKeyring,
    /// `[[portal_group]] tag`.
    PortalGroupTag,
    /// `[[portal_group]] alua_group`.
    AluaGroup,
    /// `[gateway] group` or an entry of `[gateway] groups`.
    GatewayGroup,
}

impl fmt::Display for FileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKey::QueueDepth => "queue_depth",
            FileKey::KeepaliveInterval => "keepalive interval",
            FileKey::KeepaliveTimeout => "keepalive timeout",
            FileKey::DataAckEvery => "data_ack_every",
            FileKey::SequenceTimeout => "sequence_timeout",
            FileKey::MaxRetainedStatuses => "max_retained_statuses",
            FileKey::MaxRetainedBytes => "max_retained_bytes",
            FileKey::MaxSessions => "max_sessions",
            FileKey::MaxTcpConnections => "max_connections",
            FileKey::MaxOutstandingBytes => "max_outstanding_bytes_per_connection",
            FileKey::LoginTimeout => "login_timeout",
            FileKey::MutualUser => "mutual_user",
            FileKey::MutualSecret => "mutual_secret",
            FileKey::LunNumber => "number",
            FileKey::CountedLunNumber => "number (counted from the previous LUN)",
            FileKey::BlockSize => "block_size",
            FileKey::Path => "path",
            FileKey::Direct => "direct",
            FileKey::HugePages => "huge_pages",
            FileKey::SoftThreshold => "soft_threshold",
            FileKey::Image => "image",
            FileKey::CephConf => "ceph_conf",
            FileKey::CephId => "ceph_id",
            FileKey::CephKeyring => "ceph_keyring",
            FileKey::PortalGroupTag => "portal_group tag",
            FileKey::AluaGroup => "alua_group",
            FileKey::GatewayGroup => "gateway group",
        })
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Syntax(message) => f.write_str(message),
            ErrorKind::NoListen => f.write_str(
                "listen = [] leaves nothing to connect to: list at least one address, e.g. \
                 \"127.0.0.1:3260\"",
            ),
            ErrorKind::ListenTwice(addr) => write!(f, "{addr} is listed twice"),
            ErrorKind::PortalGroupWithoutPortal(tag) => write!(
                f,
                "portal group {tag} has no listen address: add \",{tag}\" after one, e.g. \
                 listen = [\"127.0.0.1:3260,{tag}\"]"
            ),
            ErrorKind::PortalGroupTwice(tag) => {
                write!(f, "[[portal_group]] with tag {tag} is defined twice")
            }
            ErrorKind::Key(e) => e.fmt(f),
            ErrorKind::WholeSeconds(key) => write!(
                f,
                "{key} is a whole number of seconds (RFC 7143 section {})",
                key.def().section
            ),
            ErrorKind::OutOfRange {
                key,
                value,
                min,
                max,
            } => write!(f, "{key} = {value} is outside {min}..={max}"),
            ErrorKind::Zero(FileKey::KeepaliveInterval) => f.write_str(
                "keepalive interval must be above zero (use enabled = false to turn pings off)",
            ),
            ErrorKind::Zero(key) => write!(f, "{key} must be above zero"),
            ErrorKind::EmptyChapUser { owner, role } => {
                let key = match role {
                    SecretRole::Initiator => "user",
                    SecretRole::Mutual => "mutual_user",
                };
                write!(f, "{owner}: CHAP {key} must not be empty")
            }
            ErrorKind::HalfMutualChap { owner, given } => {
                let missing = match given {
                    FileKey::MutualUser => FileKey::MutualSecret,
                    _ => FileKey::MutualUser,
                };
                write!(f, "{owner}: {given} needs {missing} as well")
            }
            ErrorKind::NoAcl(target) => write!(
                f,
                "target {target} has no `acl` key: choose who may log in, either \
                 acl = [\"iqn.1994-05.com.redhat:client1\", ...] or acl = \"open\" \
                 (any initiator; protect it with chap or keep it on loopback)"
            ),
            ErrorKind::EmptyAcl(_) => {
                f.write_str("acl = [] admits nobody: list initiator names, or write acl = \"open\"")
            }
            ErrorKind::BadInitiatorName { name, .. } => write!(
                f,
                "{name:?} is not a valid initiator name (iqn.YYYY-MM.reversed.domain[:id], \
                 eui.<16 hex> or naa.<16|32 hex>)"
            ),
            ErrorKind::BadAlias(_) => {
                f.write_str("alias must be at most 255 bytes of printable text")
            }
            ErrorKind::ThresholdNeedsThin { .. } => {
                f.write_str("soft_threshold only applies with provisioning = \"thin\"")
            }
            ErrorKind::SanitizeRate { .. } => f.write_str(
                "sanitize_rate (bytes per second, above zero) only applies with sanitize = true",
            ),
            ErrorKind::NotForBackend {
                key, only, backend, ..
            } => write!(
                f,
                "`{key}` only applies to backend = \"{only}\", not \"{backend}\""
            ),
            ErrorKind::RbdSize { lun, .. } => write!(
                f,
                "{lun}: an rbd LUN is as large as its image: drop `size` (resize the image \
                 with `rbd resize`)"
            ),
            ErrorKind::NoImage { lun, .. } => write!(
                f,
                "{lun}: backend = \"rbd\" needs an `image`, e.g. image = \"rbd/disk1\""
            ),
            ErrorKind::BadRbd { lun, message, .. } => write!(f, "{lun}: {message}"),
            ErrorKind::NoSize { lun, backend, .. } => write!(
                f,
                "{lun}: backend = \"{backend}\" needs a `size`, e.g. size = \"1G\""
            ),
            ErrorKind::NoPath { lun, .. } => {
                write!(f, "{lun}: backend = \"file\" needs a `path`")
            }
            ErrorKind::BadSerial { .. } => {
                f.write_str("serial must be 1 to 64 printable ASCII characters without spaces")
            }
            ErrorKind::NoDirectory { lun, dir, .. } => {
                write!(f, "{lun}: directory {} does not exist", dir.display())
            }
            ErrorKind::PathIsDirectory { lun, path, .. } => {
                write!(f, "{lun}: {} is a directory", path.display())
            }
            ErrorKind::NoFile { lun, path, .. } => write!(
                f,
                "{lun}: {} does not exist; add `size` to create it (sparse)",
                path.display()
            ),
            ErrorKind::Invalid(e) => match e {
                ConfigError::NoTargets => f.write_str(
                    "no targets configured: add a [[target]] table with an iqn, an acl and a \
                     [[target.lun]]",
                ),
                ConfigError::NoLuns(_) => {
                    write!(f, "{e}: add a [[target.lun]] table after this target")
                }
                ConfigError::BadName(_) => {
                    write!(f, "{e}; for example iqn.2026-11.com.example:disk1")
                }
                _ => e.fmt(f),
            },
        }
    }
}
