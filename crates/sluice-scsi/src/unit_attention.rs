//! Unit attention conditions, queued per I_T nexus (SAM-5 5.14, SPC-4 5.14).
//!
//! A logical unit keeps one queue per I_T nexus it has seen. The first command a nexus sends
//! registers it with POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (29h/00h) pending. A 29h
//! condition supersedes everything queued before it (SAM-5 reports the reset, not what the
//! reset wiped out); other conditions queue behind it, without duplicates, at most
//! [`MAX_PENDING`] deep (the oldest extra ones are dropped).

use std::collections::{HashMap, VecDeque};

use crate::NexusId;

/// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED.
pub(crate) const POWER_ON_RESET: (u8, u8) = (0x29, 0x00);
/// POWER ON OCCURRED (after a TARGET COLD RESET).
pub(crate) const POWER_ON: (u8, u8) = (0x29, 0x01);
/// BUS DEVICE RESET FUNCTION OCCURRED (after a LOGICAL UNIT or TARGET WARM RESET).
pub(crate) const BUS_DEVICE_RESET: (u8, u8) = (0x29, 0x03);
/// NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED (a removable medium was loaded).
pub(crate) const MEDIUM_MAY_HAVE_CHANGED: (u8, u8) = (0x28, 0x00);
/// MODE PARAMETERS CHANGED.
pub(crate) const MODE_PARAMETERS_CHANGED: (u8, u8) = (0x2A, 0x01);
/// CAPACITY DATA HAS CHANGED.
pub(crate) const CAPACITY_CHANGED: (u8, u8) = (0x2A, 0x09);
/// THIN PROVISIONING SOFT THRESHOLD REACHED (SBC-4 4.7.3.7).
pub(crate) const SOFT_THRESHOLD_REACHED: (u8, u8) = (0x38, 0x07);
/// REPORTED LUNS DATA HAS CHANGED.
pub(crate) const REPORTED_LUNS_CHANGED: (u8, u8) = (0x3F, 0x0E);
/// RESERVATIONS PREEMPTED (SPC-4 5.12.11.2.6: CLEAR).
pub(crate) const RESERVATIONS_PREEMPTED: (u8, u8) = (0x2A, 0x03);
/// RESERVATIONS RELEASED (SPC-4 5.12.11.2.2: a registrants-only or all-registrants
/// reservation released, or a reservation's type changed by PREEMPT).
pub(crate) const RESERVATIONS_RELEASED: (u8, u8) = (0x2A, 0x04);
/// REGISTRATIONS PREEMPTED (SPC-4 5.12.11.2.4: PREEMPT and PREEMPT AND ABORT).
pub(crate) const REGISTRATIONS_PREEMPTED: (u8, u8) = (0x2A, 0x05);
/// ASYMMETRIC ACCESS STATE CHANGED (SPC-4 5.15.2.3).
pub(crate) const ASYMMETRIC_ACCESS_STATE_CHANGED: (u8, u8) = (0x2A, 0x06);
/// COMMANDS CLEARED BY ISCSI PROTOCOL EVENT (SPC-4 table F.2; RFC 7143 section 11.14.5).
pub(crate) const COMMANDS_CLEARED_BY_ISCSI: (u8, u8) = (0x47, 0x7F);

/// Most conditions kept per nexus.
pub(crate) const MAX_PENDING: usize = 8;

/// Pending unit attentions for every I_T nexus a logical unit knows.
#[derive(Debug, Default)]
pub(crate) struct UnitAttentions {
    pending: HashMap<NexusId, VecDeque<(u8, u8)>>,
}

impl UnitAttentions {
    /// Registers `nexus` on its first command, with 29h/00h pending. Returns whether it was new.
    pub(crate) fn register(&mut self, nexus: NexusId) -> bool {
        if self.pending.contains_key(&nexus) {
            return false;
        }
        self.pending.insert(nexus, VecDeque::from([POWER_ON_RESET]));
        true
    }

    /// Removes and returns the condition to report next to `nexus`.
    pub(crate) fn take(&mut self, nexus: NexusId) -> Option<(u8, u8)> {
        self.pending.get_mut(&nexus)?.pop_front()
    }

    /// Removes a pending condition without reporting it (e.g. REPORT LUNS clears 3Fh/0Eh).
    pub(crate) fn clear(&mut self, nexus: NexusId, code: (u8, u8)) {
        if let Some(q) = self.pending.get_mut(&nexus) {
            q.retain(|c| *c != code);
        }
    }

    /// Queues `code` for every known nexus except `except`.
    pub(crate) fn establish_others(&mut self, except: Option<NexusId>, code: (u8, u8)) {
        for (n, q) in &mut self.pending {
            if Some(*n) != except {
                push(q, code);
            }
        }
    }

    /// Queues `code` for `nexus` alone (if it has sent a command: a nexus first seen later
    /// starts with its power-on condition, which supersedes this one anyway).
    pub(crate) fn establish(&mut self, nexus: NexusId, code: (u8, u8)) {
        if let Some(q) = self.pending.get_mut(&nexus) {
            push(q, code);
        }
    }

    /// Forgets `nexus` (its session ended); a later command under the same id starts afresh.
    pub(crate) fn forget(&mut self, nexus: NexusId) {
        self.pending.remove(&nexus);
    }
}

fn push(q: &mut VecDeque<(u8, u8)>, code: (u8, u8)) {
    if code.0 == 0x29 {
        q.clear();
    }
    if q.contains(&code) {
        return;
    }
    q.push_back(code);
    while q.len() > MAX_PENDING {
        q.remove(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_command_sees_power_on_then_nothing() {
        let mut u = UnitAttentions::default();
        assert!(u.register(1));
        assert!(!u.register(1));
        assert_eq!(u.take(1), Some(POWER_ON_RESET));
        assert_eq!(u.take(1), None);
        assert_eq!(u.take(99), None);
    }

    #[test]
    fn reset_supersedes_and_others_queue_without_duplicates() {
        let mut u = UnitAttentions::default();
        u.register(1);
        u.register(2);
        u.take(1);
        u.take(2);
        u.establish_others(Some(1), MODE_PARAMETERS_CHANGED);
        u.establish_others(Some(1), MODE_PARAMETERS_CHANGED);
        assert_eq!(u.take(1), None);
        assert_eq!(u.take(2), Some(MODE_PARAMETERS_CHANGED));
        assert_eq!(u.take(2), None);
        u.establish_others(Some(1), CAPACITY_CHANGED);
        u.establish_others(None, BUS_DEVICE_RESET);
        assert_eq!(u.take(2), Some(BUS_DEVICE_RESET));
        assert_eq!(u.take(2), None);
        assert_eq!(u.take(1), Some(BUS_DEVICE_RESET));
    }

    #[test]
    fn bounded_and_forgettable() {
        let mut u = UnitAttentions::default();
        u.register(1);
        for i in 0..20 {
            u.establish_others(None, (0x2A, i));
        }
        assert_eq!(u.take(1), Some(POWER_ON_RESET));
        let mut n = 0;
        while u.take(1).is_some() {
            n += 1;
        }
        assert_eq!(n, MAX_PENDING - 1);
        u.establish_others(None, REPORTED_LUNS_CHANGED);
        u.clear(1, REPORTED_LUNS_CHANGED);
        assert_eq!(u.take(1), None);
        u.forget(1);
        assert!(u.register(1));
        assert_eq!(u.take(1), Some(POWER_ON_RESET));
    }
}
