//! Checks on a [`TargetConfig`] that its types cannot express.

use std::collections::HashSet;

use sluice_proto::params::IMPLEMENTED_ERROR_RECOVERY_LEVEL;
use sluice_proto::text::KeyId;

use crate::config::{
    Backend, ChapCredentials, ChapOwner, ConfigError, LunRef, SecretRole, TargetConfig, TargetRef,
    MAX_LUN_NUMBER, QUEUE_DEPTH,
};

impl TargetConfig {
    /// Returns the first problem that would stop the target from serving this configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.targets.is_empty() {
            return Err(ConfigError::NoTargets);
        }
        if self.portals.is_empty() {
            return Err(ConfigError::NoPortals);
        }
        if let Some(g) = &self.gateway {
            g.validate()?;
            if !self.portal_groups.is_empty() {
                return Err(ConfigError::Gateway(
                    "a gateway is one portal group, its gateway group: no explicit portal groups",
                ));
            }
        }
        if let Some(name) = &self.tcp_congestion {
            sluice_tcp::check_congestion_control(name)?;
        }
        let mut names = HashSet::new();
        for (index, t) in self.targets.iter().enumerate() {
            let target = || TargetRef {
                index,
                iqn: t.iqn.clone(),
            };
            if !is_iscsi_name(&t.iqn) {
                return Err(ConfigError::BadName(target()));
            }
            if !names.insert(t.iqn.to_ascii_lowercase()) {
                return Err(ConfigError::DuplicateTarget(target()));
            }
            if t.luns.is_empty() {
                return Err(ConfigError::NoLuns(target()));
            }
            let mut numbers = HashSet::new();
            for (index, l) in t.luns.iter().enumerate() {
                let lun = LunRef {
                    index,
                    number: l.number,
                };
                if !numbers.insert(l.number) {
                    return Err(ConfigError::DuplicateLun {
                        target: target(),
                        lun,
                    });
                }
                if l.number > MAX_LUN_NUMBER {
                    return Err(ConfigError::LunNumber {
                        target: target(),
                        lun,
                    });
                }
                if l.block_size != 512 && l.block_size != 4096 {
                    return Err(ConfigError::BlockSize {
                        target: target(),
                        lun,
                        block_size: l.block_size,
                    });
                }
                if l.options.thin && matches!(l.backend, Backend::Null { .. }) {
                    return Err(ConfigError::ThinNull {
                        target: target(),
                        lun,
                    });
                }
                let size = match &l.backend {
                    Backend::Memory { size } | Backend::Null { size } => Some(*size),
                    Backend::File { size, .. } => *size,
                    Backend::Rbd { .. } => None,
                };
                if let Some(size) = size {
                    if size == 0 || size % u64::from(l.block_size) != 0 {
                        return Err(ConfigError::Size {
                            target: target(),
                            lun,
                            size,
                            block_size: l.block_size,
                        });
                    }
                }
            }
            if let Some(chap) = &t.chap {
                check_chap(ChapOwner::Target(target()), chap)?;
            }
        }
        if let Some(chap) = &self.discovery_auth {
            check_chap(ChapOwner::Discovery, chap)?;
        }
        self.check_portal_groups()?;
        self.check_offer()
    }

    fn check_offer(&self) -> Result<(), ConfigError> {
        let o = &self.offer;
        // Every numerical key the target offers, bounded by its entry in the key table.
        let numbers = [
            (
                KeyId::MaxRecvDataSegmentLength,
                u64::from(o.max_recv_data_segment_length),
            ),
            (KeyId::MaxBurstLength, o.max_burst_length.into()),
            (KeyId::FirstBurstLength, o.first_burst_length.into()),
            (KeyId::MaxOutstandingR2T, o.max_outstanding_r2t.into()),
            (KeyId::DefaultTime2Wait, o.default_time2wait.into()),
            (KeyId::DefaultTime2Retain, o.default_time2retain.into()),
            (KeyId::ErrorRecoveryLevel, o.error_recovery_level.into()),
            (KeyId::MaxConnections, o.max_connections.into()),
        ];
        for (key, value) in numbers {
            key.check_number::<u64>(value)?;
        }
        if o.error_recovery_level > IMPLEMENTED_ERROR_RECOVERY_LEVEL {
            return Err(ConfigError::ErrorRecoveryLevel(o.error_recovery_level));
        }
        if !QUEUE_DEPTH.contains(&o.queue_depth) {
            return Err(ConfigError::QueueDepth(o.queue_depth));
        }
        // RFC 7143 section 13.14: "FirstBurstLength MUST NOT exceed MaxBurstLength."
        if o.first_burst_length > o.max_burst_length {
            return Err(ConfigError::FirstBurst(
                o.first_burst_length,
                o.max_burst_length,
            ));
        }
        Ok(())
    }
}

fn check_chap(owner: ChapOwner, chap: &ChapCredentials) -> Result<(), ConfigError> {
    let ok = |s: &str| (12..=255).contains(&s.len());
    if !ok(&chap.secret) {
        return Err(ConfigError::ChapSecret {
            owner,
            secret: SecretRole::Initiator,
        });
    }
    if let Some((_, mutual)) = &chap.mutual {
        if !ok(mutual) {
            return Err(ConfigError::ChapSecret {
                owner,
                secret: SecretRole::Mutual,
            });
        }
        if mutual == &chap.secret {
            return Err(ConfigError::ChapSameSecret(owner));
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
    use sluice_proto::text::KeyValueError;

    use super::*;
    use crate::config::{Acl, Keepalive, Limits, LunDef, OperationalOffer, TargetDef};

    fn config(offer: OperationalOffer) -> TargetConfig {
        TargetConfig {
            portals: vec!["127.0.0.1:3260".parse().unwrap()],
            portal_groups: Vec::new(),
            state_dir: None,
            targets: vec![TargetDef {
                iqn: "iqn.2026-11.io.sluice:a".into(),
                alias: None,
                luns: vec![LunDef::new(0, Backend::Memory { size: 1 << 20 }, 512)],
                acl: Acl::Open,
                chap: None,
            }],
            discovery_auth: None,
            offer,
            limits: Limits::default(),
            keepalive: Some(Keepalive::default()),
            recovery: Default::default(),
            fault_hook: None,
            gateway: None,
            tcp_congestion: None,
        }
    }

    #[test]
    fn offered_keys_are_bounded_by_the_key_table() {
        assert_eq!(config(OperationalOffer::default()).validate(), Ok(()));
        let d = OperationalOffer::default();
        let cases = [
            (
                OperationalOffer {
                    max_recv_data_segment_length: 100,
                    ..d
                },
                KeyId::MaxRecvDataSegmentLength,
                100,
            ),
            (
                OperationalOffer {
                    max_burst_length: 16_777_216,
                    ..d
                },
                KeyId::MaxBurstLength,
                16_777_216,
            ),
            (
                OperationalOffer {
                    first_burst_length: 511,
                    ..d
                },
                KeyId::FirstBurstLength,
                511,
            ),
            (
                OperationalOffer {
                    max_outstanding_r2t: 0,
                    ..d
                },
                KeyId::MaxOutstandingR2T,
                0,
            ),
            (
                OperationalOffer {
                    default_time2wait: 3601,
                    ..d
                },
                KeyId::DefaultTime2Wait,
                3601,
            ),
            (
                OperationalOffer {
                    default_time2retain: 3601,
                    ..d
                },
                KeyId::DefaultTime2Retain,
                3601,
            ),
            (
                OperationalOffer {
                    error_recovery_level: 3,
                    ..d
                },
                KeyId::ErrorRecoveryLevel,
                3,
            ),
            (
                OperationalOffer {
                    max_connections: 0,
                    ..d
                },
                KeyId::MaxConnections,
                0,
            ),
        ];
        for (offer, key, value) in cases {
            assert_eq!(
                config(offer).validate(),
                Err(ConfigError::Key(KeyValueError::OutOfRange { key, value })),
                "{key}"
            );
        }
        let e = config(OperationalOffer {
            max_recv_data_segment_length: 100,
            ..d
        })
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "MaxRecvDataSegmentLength = 100 is outside 512..=16777215 (RFC 7143 section 13.12)"
        );
        let most = OperationalOffer {
            max_connections: 65_535,
            ..d
        };
        assert_eq!(config(most).validate(), Ok(()));
        // Every level of the key's range is implemented, so every one is accepted; a level
        // above the implemented one would be refused by name, not clamped.
        assert_eq!(IMPLEMENTED_ERROR_RECOVERY_LEVEL, 2);
        assert_eq!(
            ConfigError::ErrorRecoveryLevel(3).to_string(),
            "ErrorRecoveryLevel = 3: sluice implements levels 0 to 2 only"
        );
        for level in 0..=IMPLEMENTED_ERROR_RECOVERY_LEVEL {
            let offer = OperationalOffer {
                error_recovery_level: level,
                ..d
            };
            assert_eq!(config(offer).validate(), Ok(()));
        }
    }

    #[test]
    fn queue_depth_and_first_burst() {
        let d = OperationalOffer::default();
        assert_eq!(
            config(OperationalOffer {
                queue_depth: 0,
                ..d
            })
            .validate(),
            Err(ConfigError::QueueDepth(0))
        );
        assert_eq!(
            config(OperationalOffer {
                queue_depth: 65_537,
                ..d
            })
            .validate()
            .unwrap_err()
            .to_string(),
            "queue_depth = 65537 is outside 1..=65536"
        );
        assert_eq!(
            config(OperationalOffer {
                first_burst_length: 65_536,
                max_burst_length: 8192,
                ..d
            })
            .validate(),
            Err(ConfigError::FirstBurst(65_536, 8192))
        );
    }

    #[test]
    fn errors_say_which_target_lun_and_secret() {
        let mut c = config(OperationalOffer::default());
        let mut second = c.targets[0].clone();
        second.iqn = "IQN.2026-11.io.sluice:A".into();
        c.targets.push(second);
        let t1 = TargetRef {
            index: 1,
            iqn: "IQN.2026-11.io.sluice:A".into(),
        };
        assert_eq!(c.validate(), Err(ConfigError::DuplicateTarget(t1.clone())));
        c.targets[1].iqn = "iqn.2026-11.io.sluice:b".into();
        let t1 = TargetRef {
            index: 1,
            iqn: "iqn.2026-11.io.sluice:b".into(),
        };
        let lun = c.targets[1].luns[0].clone();
        c.targets[1].luns.push(LunDef {
            number: 5,
            ..lun.clone()
        });
        c.targets[1].luns.push(lun);
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::DuplicateLun {
                target: t1.clone(),
                lun: LunRef {
                    index: 2,
                    number: 0
                }
            }
        );
        assert_eq!(
            e.to_string(),
            "target iqn.2026-11.io.sluice:b: LUN 0 is defined twice"
        );
        c.targets[1].luns[2].number = 16_384;
        assert_eq!(
            c.validate(),
            Err(ConfigError::LunNumber {
                target: t1.clone(),
                lun: LunRef {
                    index: 2,
                    number: 16_384
                }
            })
        );
        c.targets[1].luns.pop();
        c.targets[1].chap = Some(ChapCredentials {
            user: "u".into(),
            secret: "0123456789ab".into(),
            mutual: Some(("t".into(), "short".into())),
        });
        let e = c.validate().unwrap_err();
        assert_eq!(
            e,
            ConfigError::ChapSecret {
                owner: ChapOwner::Target(t1.clone()),
                secret: SecretRole::Mutual
            }
        );
        assert_eq!(
            e.to_string(),
            "CHAP secret for iqn.2026-11.io.sluice:b (mutual) must be 12 to 255 characters \
             (Windows and open-iscsi refuse shorter)"
        );
        c.targets[1].chap = None;
        c.discovery_auth = Some(ChapCredentials {
            user: "d".into(),
            secret: "0123456789ab".into(),
            mutual: Some(("t".into(), "0123456789ab".into())),
        });
        assert_eq!(
            c.validate(),
            Err(ConfigError::ChapSameSecret(ChapOwner::Discovery))
        );
    }

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
