//! Where things are in the file, for errors found after conversion by
//! [`TargetConfig::validate`](sluice_target::config::TargetConfig::validate).

use std::ops::Range;

use sluice_proto::text::KeyId;
use sluice_target::config::{ChapOwner, ConfigError, LunRef, SecretRole, TargetRef};

#[derive(Debug, Default)]
/// Positions of the values that
/// [`TargetConfig::validate`](sluice_target::config::TargetConfig::validate) may complain about.
pub(super) struct Spans {
    pub(super) listen: Option<Range<usize>>,
    pub(super) session: Option<Range<usize>>,
    /// Operational keys of `[session]` and the spans of their values.
    pub(super) keys: Vec<(KeyId, Range<usize>)>,
    pub(super) queue_depth: Option<Range<usize>>,
    pub(super) discovery_chap: Option<ChapSpans>,
    /// The `[gateway]` table.
    pub(super) gateway: Option<Range<usize>>,
    /// The value of `tcp_congestion`.
    pub(super) tcp_congestion: Option<Range<usize>>,
    /// Parallel to `TargetConfig::targets`.
    pub(super) targets: Vec<TargetSpans>,
}

#[derive(Debug, Clone)]
/// Positions in a CHAP table.
pub(super) struct ChapSpans {
    pub(super) secret: Range<usize>,
    pub(super) mutual_secret: Option<Range<usize>>,
}

#[derive(Debug)]
pub(super) struct TargetSpans {
    pub(super) iqn: Range<usize>,
    pub(super) chap: Option<ChapSpans>,
    /// Parallel to `TargetDef::luns`.
    pub(super) luns: Vec<LunSpans>,
}

#[derive(Debug)]
pub(super) struct LunSpans {
    pub(super) table: Range<usize>,
    pub(super) number: Option<Range<usize>>,
    pub(super) size: Option<Range<usize>>,
    pub(super) block_size: Option<Range<usize>>,
    pub(super) path: Option<Range<usize>>,
}

impl LunSpans {
    pub(super) fn number_or_table(&self) -> Range<usize> {
        self.number.clone().unwrap_or_else(|| self.table.clone())
    }
}

/// Finds where in the file a [`ConfigError`] comes from.
pub(super) fn locate_validation_error(spans: &Spans, e: &ConfigError) -> Range<usize> {
    let target = |t: &TargetRef| spans.targets.get(t.index);
    let lun = |t: &TargetRef, l: &LunRef| target(t).and_then(|t| t.luns.get(l.index));
    let chap = |owner: &ChapOwner| match owner {
        ChapOwner::Discovery => spans.discovery_chap.as_ref(),
        ChapOwner::Target(t) => target(t).and_then(|t| t.chap.as_ref()),
    };
    let key = |k: KeyId| spans.keys.iter().find(|(id, _)| *id == k).map(|(_, s)| s);
    match e {
        ConfigError::NoTargets => None,
        ConfigError::NoPortals
        | ConfigError::PortalGroupTag
        | ConfigError::DuplicatePortalGroup(_)
        | ConfigError::EmptyPortalGroup(_)
        | ConfigError::PortalGroupMembership(_)
        | ConfigError::AluaGroupState(_) => spans.listen.clone(),
        ConfigError::NoLuns(t) | ConfigError::DuplicateTarget(t) | ConfigError::BadName(t) => {
            target(t).map(|t| t.iqn.clone())
        }
        ConfigError::DuplicateLun { target, lun: l }
        | ConfigError::LunNumber { target, lun: l } => {
            lun(target, l).map(LunSpans::number_or_table)
        }
        ConfigError::BlockSize { target, lun: l, .. } => {
            lun(target, l).and_then(|l| l.block_size.clone())
        }
        ConfigError::ThinNull { target, lun: l } => lun(target, l).map(|l| l.table.clone()),
        ConfigError::Size { target, lun: l, .. } => lun(target, l).map(|l| {
            l.size
                .clone()
                .or(l.block_size.clone())
                .unwrap_or(l.table.clone())
        }),
        ConfigError::Key(e) => key(e.key()).or(spans.session.as_ref()).cloned(),
        ConfigError::ErrorRecoveryLevel(_) => key(KeyId::ErrorRecoveryLevel)
            .or(spans.session.as_ref())
            .cloned(),
        ConfigError::QueueDepth(_) => spans
            .queue_depth
            .as_ref()
            .or(spans.session.as_ref())
            .cloned(),
        ConfigError::FirstBurst(..) => key(KeyId::FirstBurstLength)
            .or(key(KeyId::MaxBurstLength))
            .or(spans.session.as_ref())
            .cloned(),
        ConfigError::ChapSecret { owner, secret } => match secret {
            SecretRole::Initiator => chap(owner).map(|c| c.secret.clone()),
            SecretRole::Mutual => chap(owner).and_then(|c| c.mutual_secret.clone()),
        },
        ConfigError::ChapSameSecret(owner) => chap(owner).and_then(|c| c.mutual_secret.clone()),
        ConfigError::Gateway(_) => spans.gateway.clone(),
        ConfigError::TcpCongestion(_) => spans.tcp_congestion.clone(),
        // A check added to TargetConfig::validate later: the start of the file.
        _ => None,
    }
    .unwrap_or(0..0)
}
