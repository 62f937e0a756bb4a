//! Checks on a [`TargetConfig`] that its types cannot express.

use std::collections::HashSet;

use crate::config::{Backend, ChapCredentials, ConfigError, TargetConfig};

impl TargetConfig {
    /// Returns the first problem that would stop the target from serving this configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.targets.is_empty() {
            return Err(ConfigError::NoTargets);
        }
        if self.portals.is_empty() {
            return Err(ConfigError::NoPortals);
        }
        let mut names = HashSet::new();
        for t in &self.targets {
            if !is_iscsi_name(&t.iqn) {
                return Err(ConfigError::BadName(t.iqn.clone()));
            }
            if !names.insert(t.iqn.to_ascii_lowercase()) {
                return Err(ConfigError::DuplicateTarget(t.iqn.clone()));
            }
            if t.luns.is_empty() {
                return Err(ConfigError::NoLuns(t.iqn.clone()));
            }
            let mut numbers = HashSet::new();
            for l in &t.luns {
                if !numbers.insert(l.number) {
                    return Err(ConfigError::DuplicateLun(t.iqn.clone(), l.number));
                }
                if l.number > 16383 {
                    return Err(ConfigError::LunNumber(t.iqn.clone(), l.number));
                }
                if l.block_size != 512 && l.block_size != 4096 {
                    return Err(ConfigError::BlockSize(
                        t.iqn.clone(),
                        l.number,
                        l.block_size,
                    ));
                }
                let size = match &l.backend {
                    Backend::Memory { size } | Backend::Null { size } => Some(*size),
                    Backend::File { size, .. } => *size,
                };
                if let Some(size) = size {
                    if size == 0 || size % u64::from(l.block_size) != 0 {
                        return Err(ConfigError::Size(
                            t.iqn.clone(),
                            l.number,
                            size,
                            l.block_size,
                        ));
                    }
                }
            }
            if let Some(chap) = &t.chap {
                check_chap(&t.iqn, chap)?;
            }
        }
        if let Some(chap) = &self.discovery_auth {
            check_chap("discovery", chap)?;
        }
        self.check_offer()
    }

    fn check_offer(&self) -> Result<(), ConfigError> {
        let o = &self.offer;
        range(
            "MaxRecvDataSegmentLength",
            o.max_recv_data_segment_length.into(),
            512,
            16_777_215,
        )?;
        range("MaxBurstLength", o.max_burst_length.into(), 512, 16_777_215)?;
        range(
            "FirstBurstLength",
            o.first_burst_length.into(),
            512,
            16_777_215,
        )?;
        range("MaxOutstandingR2T", o.max_outstanding_r2t.into(), 1, 65_535)?;
        range("DefaultTime2Wait", o.default_time2wait.into(), 0, 3600)?;
        range("DefaultTime2Retain", o.default_time2retain.into(), 0, 3600)?;
        range("ErrorRecoveryLevel", o.error_recovery_level.into(), 0, 2)?;
        range("queue_depth", o.queue_depth.into(), 1, 65_536)?;
        range("MaxConnections", o.max_connections.into(), 1, 65_535)?;
        if o.first_burst_length > o.max_burst_length {
            return Err(ConfigError::FirstBurst(
                o.first_burst_length,
                o.max_burst_length,
            ));
        }
        Ok(())
    }
}

fn range(key: &'static str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::KeyRange {
            key,
            value,
            min,
            max,
        })
    }
}

fn check_chap(owner: &str, chap: &ChapCredentials) -> Result<(), ConfigError> {
    let ok = |s: &str| (12..=255).contains(&s.len());
    if !ok(&chap.secret) {
        return Err(ConfigError::ChapSecret(owner.to_string()));
    }
    if let Some((_, mutual)) = &chap.mutual {
        if !ok(mutual) {
            return Err(ConfigError::ChapSecret(format!("{owner} (mutual)")));
        }
        if mutual == &chap.secret {
            return Err(ConfigError::ChapSameSecret(owner.to_string()));
        }
    }
    Ok(())
}

/// iSCSI names per RFC 7143 section 4.2.7: `iqn.yyyy-mm.reversed.domain[:anything]`,
/// `eui.` + 16 hex digits, or `naa.` + 16 or 32 hex digits; at most 223 bytes.
pub fn is_iscsi_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 223 {
        return false;
    }
    let lower = name.to_ascii_lowercase();
    let hex = |s: &str, lens: &[usize]| {
        lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_hexdigit())
    };
    if let Some(rest) = lower.strip_prefix("eui.") {
        return hex(rest, &[16]);
    }
    if let Some(rest) = lower.strip_prefix("naa.") {
        return hex(rest, &[16, 32]);
    }
    let Some(rest) = lower.strip_prefix("iqn.") else {
        return false;
    };
    let date = rest.get(..7).unwrap_or("");
    let date_ok = date.len() == 7
        && date.as_bytes()[4] == b'-'
        && date[..4].bytes().all(|b| b.is_ascii_digit())
        && date[5..].bytes().all(|b| b.is_ascii_digit());
    let tail_ok = rest[date.len()..].starts_with('.') && rest.len() > 8;
    let chars_ok = lower
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    date_ok && tail_ok && chars_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_iscsi_name("iqn.2026-11.io.sluice:disk0"));
        assert!(is_iscsi_name(
            "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test"
        ));
        assert!(is_iscsi_name("eui.02004567A425678D"));
        assert!(is_iscsi_name("naa.52004567BA64678D"));
        assert!(!is_iscsi_name("iqn.26-11.io.sluice"));
        assert!(!is_iscsi_name("iqn.2026-11"));
        assert!(!is_iscsi_name("disk0"));
        assert!(!is_iscsi_name("iqn.2026-11.io.sluice:disk 0"));
        assert!(!is_iscsi_name("eui.0200"));
    }
}
