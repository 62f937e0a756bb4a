//! Which connection of a session carries the next command.
//!
//! The parameter study of Shastry, Klotz and Russell ("Performance Evaluation of iSCSI
//! Parameters") compared binding each logical unit to one connection with spreading commands
//! over all of them; the other two policies balance by load.

use crate::map::Map;

use super::connection::{ConnState, Connection};
use super::ConnId;
use crate::seq::Lun;

/// How commands are spread over the connections of a session.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub enum Policy {
    /// Each command on the next connection in turn.
    #[default]
    RoundRobin,
    /// Each LUN bound to one connection (LUNs spread evenly); all its commands go there.
    LuAffinity,
    /// The connection with the fewest commands outstanding.
    LeastCommands,
    /// The connection with the fewest bytes outstanding.
    LeastBytes,
}

impl Policy {
    /// Every policy, in the order above.
    pub const ALL: [Policy; 4] = [
        Policy::RoundRobin,
        Policy::LuAffinity,
        Policy::LeastCommands,
        Policy::LeastBytes,
    ];

    /// The name used on command lines and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LuAffinity => "lu-affinity",
            Policy::LeastCommands => "least-commands",
            Policy::LeastBytes => "least-bytes",
        }
    }

    /// The policy with this [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The policies' memory: the round-robin cursor and the LUN bindings.
#[derive(Debug, Default)]
pub(super) struct State {
    next: usize,
    bound: Map<Lun, ConnId>,
}

impl State {
    /// The index in `conns` of the connection for a command on `lun`, or `None` when no
    /// connection takes commands.
    pub(super) fn choose(
        &mut self,
        policy: Policy,
        conns: &[Connection],
        lun: Lun,
    ) -> Option<usize> {
        let live = |c: &&Connection| c.state == ConnState::Live;
        if !conns.iter().any(|c| c.state == ConnState::Live) {
            return None;
        }
        match policy {
            Policy::RoundRobin => {
                for step in 0..conns.len() {
                    let i = (self.next + step) % conns.len();
                    if conns[i].state == ConnState::Live {
                        self.next = i + 1;
                        return Some(i);
                    }
                }
                None
            }
            Policy::LuAffinity => {
                if let Some(i) = self
                    .bound
                    .get(&lun)
                    .and_then(|id| conns.iter().position(|c| c.id == *id))
                    .filter(|&i| conns[i].state == ConnState::Live)
                {
                    return Some(i);
                }
                // Bind the LUN to the live connection with the fewest LUNs bound.
                let (i, c) = conns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| live(c))
                    .min_by_key(|(_, c)| {
                        (self.bound.values().filter(|id| **id == c.id).count(), c.cid)
                    })?;
                self.bound.insert(lun, c.id);
                Some(i)
            }
            Policy::LeastCommands => conns
                .iter()
                .enumerate()
                .filter(|(_, c)| live(c))
                .min_by_key(|(_, c)| (c.stats.outstanding, c.stats.commands))
                .map(|(i, _)| i),
            Policy::LeastBytes => conns
                .iter()
                .enumerate()
                .filter(|(_, c)| live(c))
                .min_by_key(|(_, c)| (c.outstanding_bytes, c.stats.commands))
                .map(|(i, _)| i),
        }
    }
}
