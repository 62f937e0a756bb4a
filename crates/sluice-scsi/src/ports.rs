//! Target ports, target port groups and the identity of each I_T nexus: what the transport
//! tells this crate about who is connected where, as typed values.
//!
//! A SCSI target device is reached through one or more target ports (for iSCSI: one per
//! target portal group, named `<target>,t,0x<TPGT>`), each with a RELATIVE TARGET PORT
//! IDENTIFIER and a member of one target port group, the unit of asymmetric logical unit
//! access (ALUA, SPC-4 5.15). An I_T nexus is an initiator port talking through one target
//! port; persistent reservations remember it by exactly that pair ([`NexusIdentity`]),
//! because it outlives the transport's sessions (SPC-4 5.12.1).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::transport_id::TransportId;
use crate::NexusId;

/// A target port group's asymmetric access state (SPC-4 5.15.2.4; the four this device
/// server supports: it never reports transitioning, logical block dependent or offline).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum AccessState {
    /// Active/optimized: every command, at full performance.
    ActiveOptimized,
    /// Active/non-optimized: every command, possibly slower (a path to prefer less).
    ActiveNonOptimized,
    /// Standby: only the commands SPC-4 5.15.2.4.4 lists; others fail with NOT READY,
    /// LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE.
    Standby,
    /// Unavailable: only the commands SPC-4 5.15.2.4.5 lists; others fail with NOT READY,
    /// LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE.
    Unavailable,
}

impl AccessState {
    /// The ASYMMETRIC ACCESS STATE code (SPC-4 table 178).
    pub fn code(self) -> u8 {
        match self {
            AccessState::ActiveOptimized => 0x0,
            AccessState::ActiveNonOptimized => 0x1,
            AccessState::Standby => 0x2,
            AccessState::Unavailable => 0x3,
        }
    }

    /// The state with this code, if it is one of the four supported.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0x0 => AccessState::ActiveOptimized,
            0x1 => AccessState::ActiveNonOptimized,
            0x2 => AccessState::Standby,
            0x3 => AccessState::Unavailable,
            _ => return None,
        })
    }

    /// Whether every command may run in this state.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            AccessState::ActiveOptimized | AccessState::ActiveNonOptimized
        )
    }
}

/// One target port.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TargetPort {
    /// RELATIVE TARGET PORT IDENTIFIER, unique within the device, 1..=65535 (0 is reserved,
    /// SPC-4 7.8.6.5).
    pub relative_id: u16,
    /// The target port's SCSI name (for iSCSI `<target name>,t,0x<TPGT>`), reported in VPD
    /// page 83h; empty for none.
    pub name: String,
    /// The TARGET PORT GROUP it belongs to.
    pub group: u16,
}

/// One target port group and the asymmetric access state its ports start in.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct PortGroup {
    /// TARGET PORT GROUP identifier.
    pub id: u16,
    /// Initial state of every logical unit through this group.
    pub state: AccessState,
}

/// The ports a SCSI target device is reached through.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TargetPorts {
    /// The SCSI target device name (for iSCSI the target's iSCSI name), reported in VPD page
    /// 83h; empty for none.
    pub device_name: String,
    /// Every target port (at least one).
    pub ports: Vec<TargetPort>,
    /// Every target port group a port names (at least one).
    pub groups: Vec<PortGroup>,
}

impl TargetPorts {
    /// One port (relative identifier 1) in one active/optimized group (1), unnamed.
    pub fn single() -> Self {
        Self {
            device_name: String::new(),
            ports: vec![TargetPort {
                relative_id: 1,
                name: String::new(),
                group: 1,
            }],
            groups: vec![PortGroup {
                id: 1,
                state: AccessState::ActiveOptimized,
            }],
        }
    }

    /// The port with this relative identifier.
    pub fn port(&self, relative_id: u16) -> Option<&TargetPort> {
        self.ports.iter().find(|p| p.relative_id == relative_id)
    }

    /// The position of a group in [`groups`](Self::groups).
    pub fn group_index(&self, id: u16) -> Option<usize> {
        self.groups.iter().position(|g| g.id == id)
    }

    /// Fills what a hand-made value may lack: a port without a group gets the group, an empty
    /// port list the single default port.
    fn completed(mut self) -> Self {
        if self.ports.is_empty() {
            self.ports = Self::single().ports;
        }
        for p in &self.ports {
            if self.group_index(p.group).is_none() {
                self.groups.push(PortGroup {
                    id: p.group,
                    state: AccessState::ActiveOptimized,
                });
            }
        }
        self
    }
}

impl Default for TargetPorts {
    fn default() -> Self {
        Self::single()
    }
}

/// Who is at the two ends of an I_T nexus.
#[derive(Clone, Debug, Eq, PartialEq, Hash)]
pub struct NexusIdentity {
    /// The initiator port (a [`TransportId::IscsiPort`] for iSCSI sessions).
    pub initiator: TransportId,
    /// The RELATIVE TARGET PORT IDENTIFIER of the target port it came through.
    pub target_port: u16,
}

/// The target's ports and the identities of the I_T nexuses the transport described: shared
/// by every logical unit of the target.
#[derive(Debug)]
pub(crate) struct Fabric {
    pub(crate) ports: TargetPorts,
    identities: RwLock<HashMap<NexusId, Arc<NexusIdentity>>>,
}

impl Fabric {
    pub(crate) fn new(ports: TargetPorts) -> Self {
        Self {
            ports: ports.completed(),
            identities: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn attach(&self, nexus: NexusId, identity: NexusIdentity) {
        self.write().insert(nexus, Arc::new(identity));
    }

    pub(crate) fn detach(&self, nexus: NexusId) {
        self.write().remove(&nexus);
    }

    /// The identity of `nexus`. One the transport never described (a caller that does not use
    /// persistent reservations or ports: tests, the simulator) gets a name of its own, unique
    /// per id, on the first port.
    pub(crate) fn identity(&self, nexus: NexusId) -> Arc<NexusIdentity> {
        if let Some(id) = self.read().get(&nexus) {
            return Arc::clone(id);
        }
        Arc::new(NexusIdentity {
            initiator: TransportId::iscsi_port(&format!("unnamed.nexus.{nexus}"), [0; 6]),
            target_port: self.ports.ports.first().map_or(1, |p| p.relative_id),
        })
    }

    /// Every described nexus whose identity satisfies `pred`.
    pub(crate) fn nexuses_where(&self, pred: impl Fn(&NexusIdentity) -> bool) -> Vec<NexusId> {
        let mut v: Vec<NexusId> = self
            .read()
            .iter()
            .filter(|(_, id)| pred(id))
            .map(|(n, _)| *n)
            .collect();
        v.sort_unstable();
        v
    }

    /// The target port `nexus` came through (the first port for an undescribed nexus).
    pub(crate) fn port_of(&self, nexus: NexusId) -> Option<&TargetPort> {
        let rel = self.identity(nexus).target_port;
        self.ports.port(rel)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<NexusId, Arc<NexusIdentity>>> {
        self.identities.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<NexusId, Arc<NexusIdentity>>> {
        self.identities.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for s in [
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized,
            AccessState::Standby,
            AccessState::Unavailable,
        ] {
            assert_eq!(AccessState::from_code(s.code()), Some(s));
        }
        assert_eq!(AccessState::from_code(0xE), None);
        assert!(AccessState::ActiveNonOptimized.is_active());
        assert!(!AccessState::Standby.is_active());
    }

    #[test]
    fn fabric_describes_and_forgets_nexuses() {
        let mut ports = TargetPorts::single();
        ports.ports.push(TargetPort {
            relative_id: 2,
            name: "t,t,0x0002".into(),
            group: 7,
        });
        let f = Fabric::new(ports);
        assert_eq!(f.ports.group_index(7), Some(1), "missing group added");
        let id = NexusIdentity {
            initiator: TransportId::iscsi_port("iqn.a:b", [1; 6]),
            target_port: 2,
        };
        f.attach(5, id.clone());
        assert_eq!(*f.identity(5), id);
        assert_eq!(f.port_of(5).map(|p| p.group), Some(7));
        assert_eq!(f.nexuses_where(|i| i.target_port == 2), vec![5]);
        f.detach(5);
        assert_ne!(*f.identity(5), id);
        assert_ne!(f.identity(5), f.identity(6), "anonymous ids differ");
        assert_eq!(f.port_of(6).map(|p| p.relative_id), Some(1));
    }
}
