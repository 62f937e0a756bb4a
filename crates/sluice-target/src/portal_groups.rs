//! Target portal groups: which portals share a TPGT, and the SCSI target ports and ALUA target
//! port groups they make of each target.

use std::net::SocketAddr;

use sluice_scsi::{PortGroup, TargetPort, TargetPorts};

use crate::config::{AccessState, ConfigError, GatewayConfig, PortalGroup, TargetConfig};

/// The tag of the portal group of a configuration without [`TargetConfig::portal_groups`].
pub const DEFAULT_PORTAL_GROUP_TAG: u16 = 1;

impl TargetConfig {
    /// The portal groups in force: [`portal_groups`](Self::portal_groups), or when it is
    /// empty one group (tag 1, active/optimized) of every portal.
    pub fn effective_portal_groups(&self) -> Vec<PortalGroup> {
        if !self.portal_groups.is_empty() {
            return self.portal_groups.clone();
        }
        if let Some(g) = &self.gateway {
            // A gateway is one portal group, its own ALUA group; it starts as a non-owner
            // (its coordination makes it the owner once it holds the image's lock).
            return vec![PortalGroup {
                tag: g.group,
                portals: self.portals.clone(),
                alua_group: g.group,
                alua_state: g.non_owner,
            }];
        }
        vec![PortalGroup {
            tag: DEFAULT_PORTAL_GROUP_TAG,
            portals: self.portals.clone(),
            alua_group: DEFAULT_PORTAL_GROUP_TAG,
            alua_state: AccessState::ActiveOptimized,
        }]
    }

    /// The tag of the portal group a connection to `local` arrived through: the group of the
    /// portal with that address, else of a portal on that address with port 0 (the port was
    /// the kernel's choice), else of a wildcard portal of the address family on that port (or
    /// port 0); the first group when none matches.
    pub(crate) fn portal_group_of(&self, local: SocketAddr) -> u16 {
        let groups = self.effective_portal_groups();
        let find = |matches: &dyn Fn(&SocketAddr) -> bool| {
            groups
                .iter()
                .find(|g| g.portals.iter().any(matches))
                .map(|g| g.tag)
        };
        let any_port = |p: &SocketAddr| p.port() == local.port() || p.port() == 0;
        find(&|p| *p == local)
            .or_else(|| find(&|p| p.ip() == local.ip() && p.port() == 0))
            .or_else(|| {
                find(&|p| p.ip().is_unspecified() && p.is_ipv4() == local.is_ipv4() && any_port(p))
            })
            .or(groups.first().map(|g| g.tag))
            .unwrap_or(DEFAULT_PORTAL_GROUP_TAG)
    }

    pub(crate) fn check_portal_groups(&self) -> Result<(), ConfigError> {
        if self.portal_groups.is_empty() {
            return Ok(());
        }
        let mut seen_tags = Vec::new();
        let mut alua: Vec<(u16, AccessState)> = Vec::new();
        let mut members: Vec<SocketAddr> = Vec::new();
        for g in &self.portal_groups {
            if g.tag == 0 {
                return Err(ConfigError::PortalGroupTag);
            }
            if seen_tags.contains(&g.tag) {
                return Err(ConfigError::DuplicatePortalGroup(g.tag));
            }
            seen_tags.push(g.tag);
            if g.portals.is_empty() {
                return Err(ConfigError::EmptyPortalGroup(g.tag));
            }
            for p in &g.portals {
                if members.contains(p) || !self.portals.contains(p) {
                    return Err(ConfigError::PortalGroupMembership(*p));
                }
                members.push(*p);
            }
            match alua.iter().find(|(id, _)| *id == g.alua_group) {
                Some((_, state)) if *state != g.alua_state => {
                    return Err(ConfigError::AluaGroupState(g.alua_group));
                }
                Some(_) => {}
                None => alua.push((g.alua_group, g.alua_state)),
            }
        }
        if let Some(p) = self.portals.iter().find(|p| !members.contains(p)) {
            return Err(ConfigError::PortalGroupMembership(*p));
        }
        Ok(())
    }
}

/// The SCSI target ports of target `iqn`: one per portal group, named `<target>,t,0x<TPGT>`
/// (RFC 7143 section 4.2.7.4, the iSCSI target port name), its relative target port
/// identifier the TPGT, in the group's ALUA target port group.
/// With `gateway`, the other gateways' ports and groups are added: each gateway's port is
/// named and numbered by its group, like this one's.
pub(crate) fn target_ports(
    iqn: &str,
    groups: &[PortalGroup],
    gateway: Option<&GatewayConfig>,
) -> TargetPorts {
    let mut ports = local_target_ports(iqn, groups);
    for g in gateway.map_or(&[][..], |g| &g.groups[..]) {
        if ports.port(*g).is_none() {
            ports.ports.push(TargetPort {
                relative_id: *g,
                name: format!("{iqn},t,0x{g:04x}"),
                group: *g,
            });
        }
        if ports.groups.iter().all(|p| p.id != *g) {
            ports.groups.push(PortGroup {
                id: *g,
                state: gateway.map_or(AccessState::Standby, |c| c.non_owner),
            });
        }
    }
    ports.ports.sort_by_key(|p| p.relative_id);
    ports.groups.sort_by_key(|p| p.id);
    ports
}

fn local_target_ports(iqn: &str, groups: &[PortalGroup]) -> TargetPorts {
    let mut alua: Vec<PortGroup> = Vec::new();
    for g in groups {
        if !alua.iter().any(|a| a.id == g.alua_group) {
            alua.push(PortGroup {
                id: g.alua_group,
                state: g.alua_state,
            });
        }
    }
    TargetPorts {
        device_name: iqn.to_string(),
        ports: groups
            .iter()
            .map(|g| TargetPort {
                relative_id: g.tag,
                name: format!("{iqn},t,0x{:04x}", g.tag),
                group: g.alua_group,
            })
            .collect(),
        groups: alua,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(portals: &[&str], groups: Vec<PortalGroup>) -> TargetConfig {
        let mut c = crate::discovery::tests::config();
        c.portals = portals.iter().map(|p| p.parse().unwrap()).collect();
        c.portal_groups = groups;
        c
    }

    fn group(tag: u16, portals: &[&str], state: AccessState) -> PortalGroup {
        PortalGroup {
            tag,
            portals: portals.iter().map(|p| p.parse().unwrap()).collect(),
            alua_group: tag,
            alua_state: state,
        }
    }

    #[test]
    fn default_is_one_active_group_of_every_portal() {
        let c = config(&["127.0.0.1:3260", "127.0.0.2:3260"], vec![]);
        let g = c.effective_portal_groups();
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].tag, 1);
        assert_eq!(g[0].portals.len(), 2);
        assert!(c.check_portal_groups().is_ok());
        let ports = target_ports("iqn.2026-11.t:a", &g, None);
        assert_eq!(ports.ports[0].name, "iqn.2026-11.t:a,t,0x0001");
        assert_eq!(ports.groups[0].state, AccessState::ActiveOptimized);
    }

    #[test]
    fn groups_and_their_ports() {
        use AccessState::*;
        let c = config(
            &["127.0.0.1:3260", "127.0.0.1:3261", "0.0.0.0:3262"],
            vec![
                group(1, &["127.0.0.1:3260"], ActiveOptimized),
                group(2, &["127.0.0.1:3261", "0.0.0.0:3262"], Standby),
            ],
        );
        assert!(c.check_portal_groups().is_ok());
        assert_eq!(c.portal_group_of("127.0.0.1:3260".parse().unwrap()), 1);
        assert_eq!(c.portal_group_of("127.0.0.1:3261".parse().unwrap()), 2);
        assert_eq!(
            c.portal_group_of("10.0.0.9:3262".parse().unwrap()),
            2,
            "wildcard"
        );
        assert_eq!(
            c.portal_group_of("10.0.0.9:9999".parse().unwrap()),
            1,
            "unknown"
        );
        // Port 0: the kernel chose the port.
        let c0 = config(
            &["127.0.0.1:0", "127.0.0.2:0"],
            vec![
                group(1, &["127.0.0.1:0"], ActiveOptimized),
                group(2, &["127.0.0.2:0"], ActiveOptimized),
            ],
        );
        assert_eq!(c0.portal_group_of("127.0.0.2:41234".parse().unwrap()), 2);
        assert_eq!(c0.portal_group_of("127.0.0.1:41235".parse().unwrap()), 1);
        let ports = target_ports("iqn.2026-11.t:a", &c.portal_groups, None);
        assert_eq!(ports.ports.len(), 2);
        assert_eq!(ports.ports[1].relative_id, 2);
        assert_eq!(ports.groups[1].state, Standby);
    }

    #[test]
    fn refused_layouts() {
        use AccessState::*;
        let a = "127.0.0.1:3260";
        let b = "127.0.0.1:3261";
        let cases = [
            (
                vec![group(0, &[a, b], ActiveOptimized)],
                ConfigError::PortalGroupTag,
            ),
            (
                vec![
                    group(1, &[a], ActiveOptimized),
                    group(1, &[b], ActiveOptimized),
                ],
                ConfigError::DuplicatePortalGroup(1),
            ),
            (
                vec![
                    group(1, &[a, b], ActiveOptimized),
                    group(2, &[], ActiveOptimized),
                ],
                ConfigError::EmptyPortalGroup(2),
            ),
            (
                vec![group(1, &[a], ActiveOptimized)],
                ConfigError::PortalGroupMembership(b.parse().unwrap()),
            ),
            (
                vec![
                    group(1, &[a, b], ActiveOptimized),
                    group(2, &[b], ActiveOptimized),
                ],
                ConfigError::PortalGroupMembership(b.parse().unwrap()),
            ),
            (
                vec![group(1, &[a, b, "127.0.0.9:1"], ActiveOptimized)],
                ConfigError::PortalGroupMembership("127.0.0.9:1".parse().unwrap()),
            ),
        ];
        for (groups, want) in cases {
            assert_eq!(config(&[a, b], groups).check_portal_groups(), Err(want));
        }
        let mut shared = vec![group(1, &[a], ActiveOptimized), group(2, &[b], Standby)];
        shared[1].alua_group = 1;
        assert_eq!(
            config(&[a, b], shared).check_portal_groups(),
            Err(ConfigError::AluaGroupState(1))
        );
    }
}
