//! SendTargets answers (RFC 7143 section 13.3 and Appendix C).

use std::net::{IpAddr, SocketAddr};

use sluice_proto::text::KeyId;

use crate::config::{Acl, TargetConfig, TargetDef};

/// Which targets a SendTargets request asks about.
#[derive(Debug, Eq, PartialEq)]
pub(crate) enum Query<'a> {
    /// `SendTargets=All` (discovery sessions).
    All,
    /// `SendTargets=<iSCSI name>`.
    Named(&'a str),
    /// `SendTargets=` (empty): the session's own target.
    Current,
}

impl<'a> Query<'a> {
    pub(crate) fn parse(value: &'a str) -> Self {
        match value {
            "All" => Query::All,
            "" => Query::Current,
            name => Query::Named(name),
        }
    }
}

/// The key=value pairs of a SendTargets response.
///
/// In a discovery session `All` lists every target the initiator's ACL admits; in a normal
/// session only the session's own target is reported, whatever was asked (Appendix C: "A target
/// MUST support the SendTargets key on operational sessions and MUST return all path information
/// for the target that the session is connected to"). Each `TargetName` is followed by one
/// `TargetAddress` per portal the initiator can reach, with the tag of its portal group
/// (section 13.8: `domainname[:port],portal-group-tag`), so a multipath initiator finds every
/// path: the portal the connection arrived on stands for wildcard listeners, a portal
/// configured on port 0 is reported with the port its listener got (`listeners`: configured
/// and bound addresses), and IPv6 addresses are bracketed with an explicit port, which
/// open-iscsi's parser needs.
pub(crate) fn send_targets(
    config: &TargetConfig,
    query: &Query<'_>,
    initiator: &str,
    session_target: Option<&str>,
    local: SocketAddr,
    listeners: &[(SocketAddr, SocketAddr)],
) -> Vec<(String, String)> {
    let visible = config
        .targets
        .iter()
        .filter(|t| admits(&t.acl, initiator))
        .filter(|t| match (session_target, query) {
            (Some(own), _) => t.iqn.eq_ignore_ascii_case(own),
            (None, Query::All) => true,
            (None, Query::Named(n)) => t.iqn.eq_ignore_ascii_case(n),
            (None, Query::Current) => false,
        });
    let mut out = Vec::new();
    for target in visible {
        out.push(KeyId::TargetName.pair(target.iqn.clone()));
        for (addr, tag) in portal_addresses(config, local, listeners) {
            out.push(KeyId::TargetAddress.pair(format_address(addr, tag)));
        }
    }
    out
}

/// Whether an ACL lets `initiator` in. iSCSI names compare case-insensitively.
pub(crate) fn admits(acl: &Acl, initiator: &str) -> bool {
    match acl {
        Acl::Open => true,
        Acl::Allow(names) => names.iter().any(|n| n.eq_ignore_ascii_case(initiator)),
    }
}

/// Finds the configured target for a TargetName.
pub(crate) fn find_target<'c>(config: &'c TargetConfig, name: &str) -> Option<&'c TargetDef> {
    config
        .targets
        .iter()
        .find(|t| t.iqn.eq_ignore_ascii_case(name))
}

fn portal_addresses(
    config: &TargetConfig,
    local: SocketAddr,
    listeners: &[(SocketAddr, SocketAddr)],
) -> Vec<(SocketAddr, u16)> {
    let mut out: Vec<(SocketAddr, u16)> = Vec::new();
    let groups = config.effective_portal_groups();
    let portals = groups
        .iter()
        .flat_map(|g| g.portals.iter().map(move |p| (p, g.tag)));
    for (portal, tag) in portals {
        // A listener of the other address family cannot have taken this connection's
        // family, wildcard or not.
        if portal.is_ipv4() != local.is_ipv4() {
            continue;
        }
        // Port 0 in the configuration means "any": the port this portal's listener got, or
        // (a connection handed over without a listener) the one the connection arrived on.
        let port = if portal.port() == 0 {
            listeners
                .iter()
                .find(|(configured, _)| configured == portal)
                .map_or(local.port(), |(_, bound)| bound.port())
        } else {
            portal.port()
        };
        let ip = if portal.ip().is_unspecified() {
            local.ip()
        } else {
            portal.ip()
        };
        let addr = SocketAddr::new(ip, port);
        // No loopback address to an initiator that came in from elsewhere.
        let scope_ok = !addr.ip().is_loopback() || local.ip().is_loopback();
        if scope_ok && !out.iter().any(|(a, _)| *a == addr) {
            out.push((addr, tag));
        }
    }
    if out.is_empty() {
        out.push((local, config.portal_group_of(local)));
    }
    out
}

fn format_address(addr: SocketAddr, tag: u16) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("{ip}:{},{tag}", addr.port()),
        IpAddr::V6(ip) => format!("[{ip}]:{},{tag}", addr.port()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::{
        AccessState, Backend, Keepalive, Limits, LunDef, OperationalOffer, PortalGroup,
    };

    pub(crate) fn config() -> TargetConfig {
        let lun = LunDef::new(0, Backend::Memory { size: 1 << 20 }, 512);
        let target = |iqn: &str, acl| TargetDef {
            iqn: iqn.into(),
            alias: None,
            luns: vec![lun.clone()],
            acl,
            chap: None,
        };
        TargetConfig {
            portals: vec![
                "0.0.0.0:3260".parse().unwrap(),
                "[::1]:3261".parse().unwrap(),
            ],
            targets: vec![
                target("iqn.2026-11.t:open", Acl::Open),
                target(
                    "iqn.2026-11.t:closed",
                    Acl::Allow(vec!["iqn.2026-11.i:ok".into()]),
                ),
            ],
            portal_groups: Vec::new(),
            state_dir: None,
            discovery_auth: None,
            offer: OperationalOffer::default(),
            limits: Limits::default(),
            keepalive: Some(Keepalive::default()),
            recovery: Default::default(),
            fault_hook: None,
            gateway: None,
            tcp_congestion: None,
        }
    }

    #[test]
    fn discovery_lists_admitted_targets_with_reachable_portals() {
        let local = "10.1.2.3:3260".parse().unwrap();
        let pairs = send_targets(
            &config(),
            &Query::All,
            "iqn.2026-11.i:other",
            None,
            local,
            &[],
        );
        assert_eq!(
            pairs,
            vec![
                ("TargetName".into(), "iqn.2026-11.t:open".into()),
                ("TargetAddress".into(), "10.1.2.3:3260,1".into()),
            ]
        );
        let pairs = send_targets(&config(), &Query::All, "IQN.2026-11.I:OK", None, local, &[]);
        assert_eq!(pairs.len(), 4);
    }

    #[test]
    fn ipv6_addresses_are_bracketed_with_a_port() {
        let local = "[::1]:3261".parse().unwrap();
        let pairs = send_targets(
            &config(),
            &Query::Named("iqn.2026-11.t:open"),
            "x",
            None,
            local,
            &[],
        );
        assert_eq!(pairs[1].1, "[::1]:3261,1");
    }

    #[test]
    fn port_zero_portals_report_the_port_in_use() {
        let mut c = config();
        c.portals = vec!["127.0.0.1:0".parse().unwrap()];
        let local = "127.0.0.1:40123".parse().unwrap();
        let pairs = send_targets(&c, &Query::All, "x", None, local, &[]);
        assert_eq!(pairs[1].1, "127.0.0.1:40123,1");
    }

    #[test]
    fn port_zero_portals_report_their_own_listeners_port() {
        let mut c = config();
        let (a, b) = (
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.2:0".parse().unwrap(),
        );
        c.portals = vec![a, b];
        c.portal_groups = vec![
            PortalGroup {
                tag: 1,
                portals: vec![a],
                alua_group: 1,
                alua_state: AccessState::ActiveOptimized,
            },
            PortalGroup {
                tag: 2,
                portals: vec![b],
                alua_group: 2,
                alua_state: AccessState::ActiveOptimized,
            },
        ];
        let listeners = [
            (a, "127.0.0.1:37257".parse().unwrap()),
            (b, "127.0.0.2:45211".parse().unwrap()),
        ];
        // Asked through the second portal, the first is still reported with its own port.
        let local = "127.0.0.2:45211".parse().unwrap();
        let pairs = send_targets(&c, &Query::All, "x", None, local, &listeners);
        assert_eq!(
            pairs[1..],
            [
                ("TargetAddress".into(), "127.0.0.1:37257,1".into()),
                ("TargetAddress".into(), "127.0.0.2:45211,2".into()),
            ]
        );
    }

    #[test]
    fn every_portal_is_listed_with_its_group_tag() {
        let mut c = config();
        c.portals = vec![
            "127.0.0.1:3260".parse().unwrap(),
            "127.0.0.1:3261".parse().unwrap(),
        ];
        c.portal_groups = vec![
            PortalGroup {
                tag: 1,
                portals: vec![c.portals[0]],
                alua_group: 1,
                alua_state: AccessState::ActiveOptimized,
            },
            PortalGroup {
                tag: 7,
                portals: vec![c.portals[1]],
                alua_group: 7,
                alua_state: AccessState::ActiveNonOptimized,
            },
        ];
        let local = "127.0.0.1:3261".parse().unwrap();
        let pairs = send_targets(&c, &Query::All, "x", Some("iqn.2026-11.t:open"), local, &[]);
        assert_eq!(
            pairs,
            vec![
                ("TargetName".into(), "iqn.2026-11.t:open".into()),
                ("TargetAddress".into(), "127.0.0.1:3260,1".into()),
                ("TargetAddress".into(), "127.0.0.1:3261,7".into()),
            ]
        );
    }

    #[test]
    fn normal_sessions_see_only_their_target() {
        let local = "127.0.0.1:3260".parse().unwrap();
        let pairs = send_targets(
            &config(),
            &Query::All,
            "x",
            Some("iqn.2026-11.t:open"),
            local,
            &[],
        );
        assert_eq!(pairs[0].1, "iqn.2026-11.t:open");
        assert_eq!(pairs.len(), 2);
    }
}
