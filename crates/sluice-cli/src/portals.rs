//! Listen addresses with their portal group tags (`ADDR:PORT[,TPGT]`, the form SendTargets
//! reports them in, RFC 7143 section 13.8) and the portal groups they make, shared by the
//! flags and the configuration file.

use std::fmt;
use std::net::SocketAddr;

use sluice_target::config::{AccessState, PortalGroup};
use sluice_target::DEFAULT_PORTAL_GROUP_TAG;

use crate::cli::parse_listen;

/// One listen address and, if given, the tag of its portal group.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Portal {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Its Target Portal Group Tag; `None` is group 1.
    pub tag: Option<u16>,
}

impl fmt::Display for Portal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tag {
            Some(tag) => write!(f, "{},{tag}", self.addr),
            None => self.addr.fmt(f),
        }
    }
}

/// Parses `ADDR:PORT`, `[V6]:PORT` or a bare address (port 3260), optionally followed by
/// `,TPGT` (1 to 65535).
pub fn parse_portal(s: &str) -> Result<Portal, String> {
    let (addr, tag) = match s.rsplit_once(',') {
        Some((addr, tag)) => {
            let tag = tag
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|t| *t > 0)
                .ok_or_else(|| {
                    format!("invalid portal group tag in {s:?}: use ADDR:PORT,TPGT with TPGT 1 to 65535")
                })?;
            (addr, Some(tag))
        }
        None => (s, None),
    };
    Ok(Portal {
        addr: parse_listen(addr.trim())?,
        tag,
    })
}

/// The ALUA settings of one portal group.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct AluaSetting {
    /// The portal group.
    pub tag: u16,
    /// Its ALUA target port group (default: the tag).
    pub alua_group: Option<u16>,
    /// Its initial access state.
    pub state: AccessState,
}

/// The names of the access states in flags and files.
pub const ALUA_STATES: &str = "active-optimized, active-non-optimized, standby or unavailable";

/// Parses an access state name.
pub fn parse_alua_state(s: &str) -> Result<AccessState, String> {
    Ok(match s {
        "active-optimized" => AccessState::ActiveOptimized,
        "active-non-optimized" => AccessState::ActiveNonOptimized,
        "standby" => AccessState::Standby,
        "unavailable" => AccessState::Unavailable,
        _ => return Err(format!("unknown ALUA state {s:?}: use {ALUA_STATES}")),
    })
}

/// The name [`parse_alua_state`] reads.
pub fn alua_state_name(s: AccessState) -> &'static str {
    match s {
        AccessState::ActiveOptimized => "active-optimized",
        AccessState::ActiveNonOptimized => "active-non-optimized",
        AccessState::Standby => "standby",
        AccessState::Unavailable => "unavailable",
    }
}

/// The listen addresses and the portal groups they form. With no tag and no ALUA setting,
/// the group list is empty (every portal in group 1, active/optimized). `settings` name only
/// tags some portal has (callers check).
pub fn portal_groups(
    portals: &[Portal],
    settings: &[AluaSetting],
) -> (Vec<SocketAddr>, Vec<PortalGroup>) {
    let addrs: Vec<SocketAddr> = portals.iter().map(|p| p.addr).collect();
    if settings.is_empty() && portals.iter().all(|p| p.tag.is_none()) {
        return (addrs, Vec::new());
    }
    let mut groups: Vec<PortalGroup> = Vec::new();
    for p in portals {
        let tag = p.tag.unwrap_or(DEFAULT_PORTAL_GROUP_TAG);
        match groups.iter_mut().find(|g| g.tag == tag) {
            Some(g) => g.portals.push(p.addr),
            None => {
                let setting = settings.iter().find(|s| s.tag == tag);
                groups.push(PortalGroup {
                    tag,
                    portals: vec![p.addr],
                    alua_group: setting.and_then(|s| s.alua_group).unwrap_or(tag),
                    alua_state: setting.map_or(AccessState::ActiveOptimized, |s| s.state),
                });
            }
        }
    }
    groups.sort_by_key(|g| g.tag);
    (addrs, groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portals_with_and_without_tags() {
        let p = parse_portal("127.0.0.1:3261,2").unwrap();
        assert_eq!(p.addr, "127.0.0.1:3261".parse().unwrap());
        assert_eq!(p.tag, Some(2));
        assert_eq!(p.to_string(), "127.0.0.1:3261,2");
        let p = parse_portal("[::1]:3260").unwrap();
        assert_eq!(p.tag, None);
        assert_eq!(parse_portal("10.0.0.1,7").unwrap().addr.port(), 3260);
        for bad in [
            "127.0.0.1:3260,0",
            "127.0.0.1:3260,x",
            "127.0.0.1:3260,70000",
            "host,1",
        ] {
            assert!(parse_portal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn groups_from_tags_and_settings() {
        let portals = [
            parse_portal("127.0.0.1:3260").unwrap(),
            parse_portal("127.0.0.1:3261,2").unwrap(),
            parse_portal("127.0.0.2:3261,2").unwrap(),
        ];
        let (addrs, groups) = portal_groups(
            &portals,
            &[AluaSetting {
                tag: 2,
                alua_group: Some(20),
                state: AccessState::Standby,
            }],
        );
        assert_eq!(addrs.len(), 3);
        assert_eq!(groups.len(), 2);
        assert_eq!((groups[0].tag, groups[0].portals.len()), (1, 1));
        assert_eq!(groups[0].alua_state, AccessState::ActiveOptimized);
        assert_eq!((groups[1].tag, groups[1].portals.len()), (2, 2));
        assert_eq!(
            (groups[1].alua_group, groups[1].alua_state),
            (20, AccessState::Standby)
        );
        let (_, none) = portal_groups(&portals[..1], &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn state_names_round_trip() {
        for s in [
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized,
            AccessState::Standby,
            AccessState::Unavailable,
        ] {
            assert_eq!(parse_alua_state(alua_state_name(s)), Ok(s));
        }
        assert!(parse_alua_state("offline").is_err());
    }
}
