//! Cost probes: where the CPU goes on sluice's data path, stage by stage.
//!
//! Joglekar, Kounavis and Berry ("A Scalable and High Performance Software iSCSI
//! Implementation") split an iSCSI PDU's cost into protocol processing, CRC and copies by
//! reading the time-stamp counter around each. `sluice lab pdu-cost` does the same on the
//! product's own code: the drivers, the digest and the storage backends open a [`span`] around
//! each [`Stage`], and in a build with the `enabled` feature every span adds its TSC ticks to
//! its stage, *exclusive* of the spans opened inside it (a framer's decode minus the CRC it
//! called), per [`Role`] (the thread's, set with [`set_role`]). Without the feature a span is
//! a zero-sized value and every function here is an empty inline one: the product pays
//! nothing.
//!
//! The spans do not feed anything back: no code path reads them, so they change no decision
//! (the protocol core's replay-from-a-seed invariant holds with them on).
#![cfg_attr(not(feature = "enabled"), forbid(unsafe_code))]

/// A stage of the data path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Socket system calls (the kernel's copy and TCP work included).
    Syscall,
    /// Cutting the byte stream into PDUs and writing headers (digests excluded).
    Framing,
    /// CRC32C of headers and data.
    Crc,
    /// Copies of payload bytes in user space.
    Copy,
    /// The session state machines and the driver around them.
    Protocol,
    /// SCSI command emulation (copies to and from the LU excluded).
    Scsi,
    /// Asking an empty (or full) socket: waiting, not work; kept apart from the costs.
    Poll,
}

impl Stage {
    /// Every stage, in report order.
    pub const ALL: [Stage; 7] = [
        Stage::Syscall,
        Stage::Framing,
        Stage::Crc,
        Stage::Copy,
        Stage::Protocol,
        Stage::Scsi,
        Stage::Poll,
    ];

    /// The name in tables and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Stage::Syscall => "syscall",
            Stage::Framing => "framing",
            Stage::Crc => "crc",
            Stage::Copy => "copy",
            Stage::Protocol => "protocol",
            Stage::Scsi => "scsi",
            Stage::Poll => "poll",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Whose thread a span runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Not set: counted apart.
    Other,
    /// A target thread.
    Target,
    /// An initiator thread.
    Initiator,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 3] = [Role::Other, Role::Target, Role::Initiator];

    fn index(self) -> usize {
        self as usize
    }
}

/// Ticks and span counts of one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTotal {
    /// TSC ticks spent in the stage (exclusive of nested spans).
    pub ticks: u64,
    /// Spans closed.
    pub spans: u64,
}

/// Totals per role and stage since the last [`reset`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    by: [[StageTotal; 7]; 3],
}

impl Totals {
    /// The total of `stage` on `role`'s threads.
    #[must_use]
    pub fn get(&self, role: Role, stage: Stage) -> StageTotal {
        self.by[role.index()][stage.index()]
    }

    /// All ticks of `role` spent working (every stage but [`Stage::Poll`]).
    #[must_use]
    pub fn ticks(&self, role: Role) -> u64 {
        Stage::ALL
            .iter()
            .filter(|s| **s != Stage::Poll)
            .map(|s| self.get(role, *s).ticks)
            .sum()
    }
}

/// Whether the probes are compiled in.
pub const ENABLED: bool = cfg!(feature = "enabled");

#[cfg(feature = "enabled")]
mod on;
#[cfg(feature = "enabled")]
pub use on::{reset, set_role, snapshot, span, Span};

#[cfg(feature = "io")]
mod io;
#[cfg(feature = "io")]
pub use io::ProbedIo;

#[cfg(not(feature = "enabled"))]
mod off {
    use super::{Role, Stage, Totals};

    /// An open span; it closes when dropped. (Probes are compiled out: it does nothing.)
    #[derive(Debug)]
    pub struct Span;

    impl Span {
        /// Counts the span under `stage` instead (compiled out: nothing).
        #[inline(always)]
        pub fn relabel(&mut self, _stage: Stage) {}

        /// Closes the span here rather than at the end of its scope (compiled out: nothing).
        #[inline(always)]
        pub fn close(self) {}
    }

    /// Opens a span of `stage` (compiled out: nothing).
    #[inline(always)]
    #[must_use]
    pub fn span(_stage: Stage) -> Span {
        Span
    }

    /// Sets this thread's role (compiled out: nothing).
    #[inline(always)]
    pub fn set_role(_role: Role) {}

    /// The totals (compiled out: all zero).
    #[must_use]
    pub fn snapshot() -> Totals {
        Totals::default()
    }

    /// Zeroes the totals (compiled out: nothing).
    pub fn reset() {}
}
#[cfg(not(feature = "enabled"))]
pub use off::{reset, set_role, snapshot, span, Span};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_count_exclusive_ticks_per_role_when_enabled() {
        reset();
        set_role(Role::Target);
        {
            let _outer = span(Stage::Framing);
            let _inner = span(Stage::Crc);
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        let t = snapshot();
        if ENABLED {
            assert_eq!(t.get(Role::Target, Stage::Framing).spans, 1);
            assert_eq!(t.get(Role::Target, Stage::Crc).spans, 1);
            assert!(t.get(Role::Target, Stage::Crc).ticks > 0);
            assert_eq!(t.get(Role::Initiator, Stage::Crc), StageTotal::default());
            assert_eq!(
                t.ticks(Role::Target),
                t.get(Role::Target, Stage::Framing).ticks + t.get(Role::Target, Stage::Crc).ticks
            );
        } else {
            assert_eq!(t, Totals::default());
            assert_eq!(std::mem::size_of::<Span>(), 0);
        }
    }
}
