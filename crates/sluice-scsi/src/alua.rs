//! Asymmetric logical unit access (SPC-4 5.15): the access state of each target port group
//! for one logical unit, the per-command check, REPORT TARGET PORT GROUPS and SET TARGET PORT
//! GROUPS (explicit transitions).
//!
//! The states start as the target's configuration says. Reading them costs the command path
//! one atomic load while every group is active (optimized or not): only when some group is
//! standby or unavailable does a command look up its target port's group.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::access::Access;
use crate::field::{be32, put_truncated, u8_at};
use crate::lu::{Cmd, CmdResult};
use crate::ports::{AccessState, TargetPorts};
use crate::sense::{
    invalid_field_in_cdb, invalid_field_in_param, param_list_length_error, SenseData, SenseKey,
};
use crate::unit_attention as ua;

/// STATUS CODE of a group whose state SET TARGET PORT GROUPS altered (SPC-4 table 179).
const STATUS_ALTERED_BY_STPG: u8 = 0x01;
/// STATUS CODE of a group whose state an implicit transition altered (SPC-4 table 179).
const STATUS_ALTERED_IMPLICITLY: u8 = 0x02;

/// Largest SET TARGET PORT GROUPS parameter list accepted: the 4-byte header and one
/// descriptor for each of the 65536 possible groups. A list cannot name more groups than exist,
/// so anything longer is refused before it is read.
pub const MAX_STPG_LIST_BYTES: usize = 4 + 4 * 65_536;

/// Decides SET TARGET PORT GROUPS requests when access states are not this process's alone
/// to set: several gateways exporting one logical unit, whose states follow which of them
/// owns it. It moves the ownership (or refuses) and then sets every gateway's states through
/// [`LogicalUnit::set_access_states`](crate::LogicalUnit::set_access_states).
pub trait AluaController: Send + Sync + std::fmt::Debug {
    /// Makes group `group` `state` (SPC-4 6.44), returning once it took effect here; an
    /// error is the sense the command ends with.
    fn request(&self, group: u16, state: AccessState) -> Result<(), SenseData>;

    /// A command that writes the medium or changes the logical unit arrived through `group`
    /// while it is active/non-optimized: whatever must happen before it runs there (for
    /// example an implicit transition, SPC-4 5.15.2.2), returning when the command may run,
    /// or the sense it ends with.
    fn write_through(&self, group: u16) -> Result<(), SenseData> {
        let _ = group;
        Ok(())
    }

    /// The logical unit was reset through this process (LOGICAL UNIT RESET or a target
    /// reset, SAM-5 6.3): tell the other processes that export it, which reset their part of
    /// it (see [`LogicalUnit::reset_by_peer`](crate::LogicalUnit::reset_by_peer)). Returns
    /// once they were told, so their I_T nexuses have the unit attention before the reset's
    /// response goes out.
    fn logical_unit_reset(&self) {}

    /// A PREEMPT AND ABORT through this process preempted the I_T nexuses of `preempted`
    /// (SPC-4 5.12.11.2.5): tell the other processes that export the logical unit, which
    /// abort those nexuses' tasks there (see
    /// [`ScsiTarget::nexuses_of`](crate::ScsiTarget::nexuses_of)). Returns once they were
    /// told (or did not answer in time), before the command's status goes out.
    fn preempted_and_aborted(&self, preempted: &[crate::parameter_lists::Holder]) {
        let _ = preempted;
    }
}

/// One group's state for this logical unit.
#[derive(Debug)]
struct GroupState {
    id: u16,
    state: AtomicU8,
    status: AtomicU8,
}

/// The access states of every target port group, for one logical unit.
#[derive(Debug, Default)]
pub(crate) struct AluaStates {
    groups: OnceLock<Vec<GroupState>>,
    /// Some group is neither active/optimized nor active/non-optimized.
    restricted: AtomicBool,
    /// Serialises changes (readers use the atomics).
    change: Mutex<()>,
    /// Who decides SET TARGET PORT GROUPS, when not this logical unit alone.
    controller: OnceLock<std::sync::Arc<dyn AluaController>>,
}

impl AluaStates {
    /// Takes the groups and initial states of the target the logical unit is part of (once:
    /// a logical unit belongs to one target).
    pub(crate) fn attach(&self, ports: &TargetPorts) {
        let groups = ports
            .groups
            .iter()
            .map(|g| GroupState {
                id: g.id,
                state: AtomicU8::new(g.state.code()),
                status: AtomicU8::new(0),
            })
            .collect();
        if self.groups.set(groups).is_ok() {
            self.refresh_restricted();
        }
    }

    /// Whether some group is standby or unavailable, or a controller decides (one relaxed
    /// load: the fast path).
    pub(crate) fn restricted(&self) -> bool {
        self.restricted.load(Ordering::Relaxed)
    }

    /// The state of group `id` (active/optimized for a group this unit does not know).
    pub(crate) fn state(&self, id: u16) -> AccessState {
        self.find(id)
            .and_then(|g| AccessState::from_code(g.state.load(Ordering::Acquire)))
            .unwrap_or(AccessState::ActiveOptimized)
    }

    /// Sets the states of the groups named (others keep theirs); true if one changed.
    /// `altered_by_stpg` records why in REPORT TARGET PORT GROUPS' STATUS CODE.
    pub(crate) fn set(&self, states: &[(u16, AccessState)], altered_by_stpg: bool) -> bool {
        let _serial = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = false;
        for (id, state) in states {
            let Some(g) = self.find(*id) else {
                continue;
            };
            if g.state.swap(state.code(), Ordering::AcqRel) != state.code() {
                // STATUS CODE: altered by SET TARGET PORT GROUPS, or by an implicit
                // transition (02h, SPC-4 table 179).
                g.status.store(
                    if altered_by_stpg {
                        STATUS_ALTERED_BY_STPG
                    } else {
                        STATUS_ALTERED_IMPLICITLY
                    },
                    Ordering::Relaxed,
                );
                changed = true;
            }
        }
        self.refresh_restricted();
        changed
    }

    /// The controller, if one decides.
    pub(crate) fn controller(&self) -> Option<&std::sync::Arc<dyn AluaController>> {
        self.controller.get()
    }

    /// Hands SET TARGET PORT GROUPS to `controller` (once).
    pub(crate) fn set_controller(&self, controller: std::sync::Arc<dyn AluaController>) {
        let _ = self.controller.set(controller);
        self.refresh_restricted();
    }

    /// Lets a command that changes the logical unit run through `group` in `state`: through an
    /// active/non-optimized group of a controlled unit, the controller moves the ownership
    /// first.
    pub(crate) fn admit_change(&self, group: u16, state: AccessState) -> Result<(), SenseData> {
        match self.controller.get() {
            Some(c) if state == AccessState::ActiveNonOptimized => c.write_through(group),
            _ => Ok(()),
        }
    }

    /// Whether [`admit_change`](Self::admit_change) would ask the controller to move the
    /// ownership (and so may wait for other gateways) for a command through a group in
    /// `state`.
    pub(crate) fn change_moves_ownership(&self, state: AccessState) -> bool {
        self.controller.get().is_some() && state == AccessState::ActiveNonOptimized
    }

    fn find(&self, id: u16) -> Option<&GroupState> {
        self.groups.get()?.iter().find(|g| g.id == id)
    }

    fn refresh_restricted(&self) {
        let controlled = self.controller.get().is_some();
        let any = controlled
            || self.groups.get().is_some_and(|gs| {
                gs.iter().any(|g| {
                    AccessState::from_code(g.state.load(Ordering::Acquire))
                        .is_some_and(|s| !s.is_active())
                })
            });
        self.restricted.store(any, Ordering::Release);
    }
}

/// The per-command check (SPC-4 5.15.2.4.4 and 5.15.2.4.5) for a command arriving through a
/// group in `state`.
pub(crate) fn check(state: AccessState, access: Access) -> Result<(), SenseData> {
    match state {
        AccessState::ActiveOptimized | AccessState::ActiveNonOptimized => Ok(()),
        // LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE.
        AccessState::Standby if !access.standby => {
            Err(SenseData::new(SenseKey::NOT_READY, 0x04, 0x0B))
        }
        // LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE.
        AccessState::Unavailable if !access.unavailable => {
            Err(SenseData::new(SenseKey::NOT_READY, 0x04, 0x0C))
        }
        _ => Ok(()),
    }
}

/// REPORT TARGET PORT GROUPS (MAINTENANCE IN / 0Ah, SPC-4 6.36).
pub(crate) fn report_target_port_groups(cmd: &mut Cmd<'_>) -> CmdResult {
    let format = u8_at(cmd.cdb, 1) >> 5;
    if format > 1 {
        return Err(invalid_field_in_cdb(1, Some(7)));
    }
    let alloc = be32(cmd.cdb, 6) as usize;
    let ports = &cmd.fabric.ports;
    let alua = cmd.lu.alua();
    let mut d = vec![0u8; 4];
    if format == 1 {
        // Extended header: FORMAT TYPE 001b, IMPLICIT TRANSITION TIME 0 (transitions are
        // immediate).
        d.extend_from_slice(&[0x10, 0, 0, 0]);
    }
    for g in &ports.groups {
        let members: Vec<u16> = ports
            .ports
            .iter()
            .filter(|p| p.group == g.id)
            .map(|p| p.relative_id)
            .collect();
        let status = alua
            .find(g.id)
            .map_or(0, |s| s.status.load(Ordering::Relaxed));
        d.push(alua.state(g.id).code());
        // U_SUP, S_SUP, AN_SUP, AO_SUP: the four states this device server supports.
        d.push(0x0F);
        d.extend_from_slice(&g.id.to_be_bytes());
        d.push(0);
        d.push(status);
        d.push(0);
        // TARGET PORT COUNT: at most 255 are listed (SPC-4 gives the field one byte).
        let count = members.len().min(255);
        d.push(count as u8);
        for rel in members.iter().take(count) {
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(&rel.to_be_bytes());
        }
    }
    // RETURN DATA LENGTH: the bytes after the (4- or 8-byte) header's length field.
    let len = (d.len() - 4) as u32;
    d[..4].copy_from_slice(&len.to_be_bytes());
    put_truncated(cmd.data_in, &d, alloc);
    Ok(())
}

/// One SET TARGET PORT GROUPS descriptor: the state asked for a group.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct StpgDescriptor {
    /// ASYMMETRIC ACCESS STATE asked for.
    pub state: AccessState,
    /// TARGET PORT GROUP.
    pub group: u16,
    /// Offset of the descriptor in the parameter list.
    pub offset: usize,
}

/// Parses a SET TARGET PORT GROUPS parameter list (SPC-4 6.44): a 4-byte reserved header,
/// then 4-byte descriptors. Every length is bounded by `list` (itself at most
/// [`MAX_STPG_LIST_BYTES`]); states other than the four supported are refused.
pub fn parse_set_target_port_groups(list: &[u8]) -> Result<Vec<StpgDescriptor>, SenseData> {
    if list.len() > MAX_STPG_LIST_BYTES || list.len() < 4 || !list.len().is_multiple_of(4) {
        return Err(param_list_length_error());
    }
    let mut out = Vec::with_capacity((list.len() - 4) / 4);
    for (i, d) in list[4..].chunks_exact(4).enumerate() {
        let offset = 4 + 4 * i;
        if d[0] & 0xF0 != 0 || d[1] != 0 {
            return Err(invalid_field_in_param(offset as u16, None));
        }
        let state = AccessState::from_code(d[0] & 0x0F)
            .ok_or_else(|| invalid_field_in_param(offset as u16, Some(3)))?;
        out.push(StpgDescriptor {
            state,
            group: u16::from_be_bytes([d[2], d[3]]),
            offset,
        });
    }
    Ok(out)
}

/// SET TARGET PORT GROUPS (MAINTENANCE OUT / 0Ah, SPC-4 6.44): all descriptors are checked
/// before any state changes. A changed state raises ASYMMETRIC ACCESS STATE CHANGED for every
/// other I_T nexus of the logical unit (SPC-4 5.15.2.3).
pub(crate) fn set_target_port_groups(cmd: &mut Cmd<'_>) -> CmdResult {
    let pll = be32(cmd.cdb, 6) as usize;
    if pll == 0 {
        return Ok(());
    }
    if pll > MAX_STPG_LIST_BYTES {
        return Err(param_list_length_error());
    }
    let list = cmd.data_out.contiguous(pll);
    if list.len() < pll {
        return Err(param_list_length_error());
    }
    let descriptors = parse_set_target_port_groups(&list)?;
    let ports = &cmd.fabric.ports;
    let mut seen: Vec<u16> = Vec::with_capacity(descriptors.len().min(ports.groups.len()));
    for d in &descriptors {
        // SPC-4 6.44: a group named twice, or one that does not exist, is an invalid field.
        if ports.group_index(d.group).is_none() || seen.contains(&d.group) {
            return Err(invalid_field_in_param(d.offset as u16 + 2, Some(7)));
        }
        seen.push(d.group);
    }
    let alua = cmd.lu.alua();
    if let Some(controller) = alua.controller.get() {
        // Active/optimized first: the group asked to take over does so before the others
        // are asked to step down.
        let mut ordered = descriptors.clone();
        ordered.sort_by_key(|d| d.state != AccessState::ActiveOptimized);
        for d in &ordered {
            controller.request(d.group, d.state)?;
        }
        return Ok(());
    }
    let states: Vec<(u16, AccessState)> = descriptors.iter().map(|d| (d.group, d.state)).collect();
    let changed = alua.set(&states, true);
    if changed {
        cmd.lu
            .state()
            .ua
            .establish_others(Some(cmd.nexus), ua::ASYMMETRIC_ACCESS_STATE_CHANGED);
    }
    Ok(())
}

#[cfg(test)]
#[path = "alua_tests.rs"]
mod tests;
