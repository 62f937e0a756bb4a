//! Where things are in the file, for errors found after conversion by
//! [`TargetConfig::validate`].

use std::ops::Range;

use sluice_proto::text::KeyId;
use sluice_target::config::{ConfigError, TargetConfig};

use super::error::{at, Located};

#[derive(Debug, Default)]
/// Positions of the values that [`TargetConfig::validate`] may complain about.
pub(super) struct Spans {
    pub(super) listen: Option<Range<usize>>,
    pub(super) session: Option<Range<usize>>,
    /// Operational keys of `[session]` and the spans of their values.
    pub(super) keys: Vec<(KeyId, Range<usize>)>,
    pub(super) queue_depth: Option<Range<usize>>,
    pub(super) discovery_chap: Option<ChapSpans>,
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

/// Finds where in the file a [`ConfigError`] comes from, and phrases it for a file's reader.
pub(super) fn locate_validation_error(
    config: &TargetConfig,
    spans: &Spans,
    e: &ConfigError,
) -> Located {
    let start = 0..0;
    let target_idx = |iqn: &str| config.targets.iter().position(|t| t.iqn == iqn);
    let target = |iqn: &str| target_idx(iqn).and_then(|i| spans.targets.get(i));
    let lun = |iqn: &str, n: u16, last: bool| {
        let i = target_idx(iqn)?;
        let mut matching = config.targets[i]
            .luns
            .iter()
            .zip(&spans.targets[i].luns)
            .filter(|(l, _)| l.number == n)
            .map(|(_, s)| s);
        if last {
            matching.next_back()
        } else {
            matching.next()
        }
    };
    let chap = |owner: &str| -> Option<ChapSpans> {
        if owner.starts_with("discovery") {
            spans.discovery_chap.clone()
        } else {
            let iqn = owner.strip_suffix(" (mutual)").unwrap_or(owner);
            target(iqn).and_then(|t| t.chap.clone())
        }
    };
    let message = e.to_string();
    let span = match e {
        ConfigError::NoTargets => {
            return at(start, "no targets configured: add a [[target]] table with an iqn, an acl and a [[target.lun]]");
        }
        ConfigError::NoPortals => spans.listen.clone().unwrap_or(start),
        ConfigError::NoLuns(iqn) => {
            return at(
                target(iqn).map_or(start, |t| t.iqn.clone()),
                format!("{message}: add a [[target.lun]] table after this target"),
            );
        }
        ConfigError::DuplicateTarget(iqn) => {
            let lower = iqn.to_ascii_lowercase();
            let second = config
                .targets
                .iter()
                .enumerate()
                .filter(|(_, t)| t.iqn.to_ascii_lowercase() == lower)
                .nth(1)
                .map(|(i, _)| i);
            second
                .and_then(|i| spans.targets.get(i))
                .map_or(start, |t| t.iqn.clone())
        }
        ConfigError::BadName(iqn) => {
            return at(
                target(iqn).map_or(start, |t| t.iqn.clone()),
                format!("{message}; for example iqn.2026-11.com.example:disk1"),
            );
        }
        ConfigError::DuplicateLun(iqn, n) => {
            lun(iqn, *n, true).map_or(start, LunSpans::number_or_table)
        }
        ConfigError::LunNumber(iqn, n) => {
            lun(iqn, *n, false).map_or(start, LunSpans::number_or_table)
        }
        ConfigError::BlockSize(iqn, n, _) => lun(iqn, *n, false)
            .and_then(|l| l.block_size.clone())
            .unwrap_or(start),
        ConfigError::Size(iqn, n, _, _) => lun(iqn, *n, false)
            .map(|l| {
                l.size
                    .clone()
                    .or(l.block_size.clone())
                    .unwrap_or(l.table.clone())
            })
            .unwrap_or(start),
        ConfigError::Key(e) => spans
            .keys
            .iter()
            .find(|(k, _)| *k == e.key())
            .map(|(_, s)| s.clone())
            .or(spans.session.clone())
            .unwrap_or(start),
        ConfigError::QueueDepth(_) => spans
            .queue_depth
            .clone()
            .or(spans.session.clone())
            .unwrap_or(start),
        ConfigError::FirstBurst(..) => spans
            .keys
            .iter()
            .find(|(k, _)| *k == KeyId::FirstBurstLength)
            .or(spans.keys.iter().find(|(k, _)| *k == KeyId::MaxBurstLength))
            .map(|(_, s)| s.clone())
            .or(spans.session.clone())
            .unwrap_or(start),
        ConfigError::ChapSecret(owner) => {
            let c = chap(owner);
            if owner.ends_with(" (mutual)") {
                c.and_then(|c| c.mutual_secret).unwrap_or(start)
            } else {
                c.map_or(start, |c| c.secret)
            }
        }
        ConfigError::ChapSameSecret(owner) => {
            chap(owner).and_then(|c| c.mutual_secret).unwrap_or(start)
        }
        #[allow(unreachable_patterns)]
        _ => start,
    };
    at(span, message)
}
