//! The presets of `sluice lab iser`: which transfer sizes, directions and transports, how
//! many repetitions and how long each run.

use std::time::Duration;

/// How the data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Plain iSCSI over TCP (Data-In, R2T and Data-Out PDUs on the byte stream).
    Tcp,
    /// iSER (RFC 7145) on the software RDMA provider.
    Iser,
    /// The provider's own RDMA Writes or Reads, no iSCSI: the ceiling.
    Raw,
}

impl Transport {
    /// Every transport.
    pub const ALL: [Transport; 3] = [Transport::Tcp, Transport::Raw, Transport::Iser];

    /// The name in rows and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Iser => "iser",
            Transport::Raw => "rdma-raw",
        }
    }

    /// The transport called `s`.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// SCSI READ or WRITE (for [`Transport::Raw`]: RDMA Write, as iSER carries read data, or
/// RDMA Read, as it fetches write data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// READ (10/16); raw: RDMA Write.
    Read,
    /// WRITE (10/16); raw: RDMA Read.
    Write,
}

impl Direction {
    /// The name in rows and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }

    /// The direction called `s`.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        [Direction::Read, Direction::Write]
            .into_iter()
            .find(|d| d.name() == s)
    }
}

/// The LUN an iSCSI run reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lun {
    /// A memory LUN that keeps what is written: the target stores every write's data.
    Memory,
    /// A LUN that discards writes and reads zeros: the study's MEMORYIO mode, in which the
    /// target "reads into and writes from a primary memory buffer, with no attempt made to
    /// retain the data", so that what is measured is the transport and not the store.
    Null,
}

impl Lun {
    /// Both, in run order.
    pub const ALL: [Lun; 2] = [Lun::Memory, Lun::Null];

    /// The name in rows and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Lun::Memory => "memory",
            Lun::Null => "null",
        }
    }

    /// The LUN called `s`.
    #[must_use]
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == s)
    }

    /// Its number on the study's target.
    #[must_use]
    pub fn number(self) -> u16 {
        match self {
            Lun::Memory => 0,
            Lun::Null => 1,
        }
    }
}

/// One run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IserPoint {
    /// How the data moves.
    pub transport: Transport,
    /// The LUN ([`None`] for [`Transport::Raw`], which has none).
    pub lun: Option<Lun>,
    /// Which way.
    pub direction: Direction,
    /// Bytes per SCSI command (per RDMA operation for [`Transport::Raw`]).
    pub transfer_bytes: u32,
    /// Repetition, from 0.
    pub rep: u32,
}

impl IserPoint {
    /// Identifies the run among a run's rows (resuming skips the runs with a row).
    #[must_use]
    pub fn key(&self) -> String {
        key(
            self.transport.name(),
            self.lun,
            self.direction.name(),
            self.transfer_bytes,
            self.rep,
        )
    }
}

/// The memory LUN's runs keep the keys they had before there was a choice of LUN, so that
/// older results still resume.
pub(crate) fn key(
    transport: &str,
    lun: Option<Lun>,
    direction: &str,
    bytes: u32,
    rep: u32,
) -> String {
    match lun {
        Some(Lun::Null) => format!("{transport}+null/{direction}/{bytes}/{rep}"),
        Some(Lun::Memory) | None => format!("{transport}/{direction}/{bytes}/{rep}"),
    }
}

/// A preset.
#[derive(Clone, Debug)]
pub struct IserPlan {
    /// Its name.
    pub name: &'static str,
    /// The runs, in order.
    pub points: Vec<IserPoint>,
    /// Commands (RDMA operations) in flight.
    pub queue_depth: usize,
    /// How long each iSCSI run lasts.
    pub run_time: Duration,
}

/// The presets: name and what it runs.
pub const PRESETS: [(&str, &str); 6] = [
    (
        "tiny",
        "seconds: 64 KiB and 1 MiB, both directions, one short run each (the test suite)",
    ),
    (
        "quick",
        "minutes: 4 KiB to 16 MiB in powers of four, both directions, 3 repetitions of 1.5 s",
    ),
    (
        "fig2",
        "the paper's Figure 2: reads, 4 KiB to 16 MiB in powers of two, 3 repetitions of 2 s",
    ),
    (
        "fig3",
        "the paper's Figure 3: writes, 4 KiB to 16 MiB in powers of two, 3 repetitions of 2 s",
    ),
    (
        "fig4",
        "the paper's Figure 4 (its 94 % claim): writes of 1 to 16 MiB, 5 repetitions of 3 s",
    ),
    (
        "full",
        "both directions, 4 KiB to 16 MiB in powers of two, 5 repetitions of 3 s",
    ),
];

/// The runs: for each direction, size and repetition, every transport in turn, the iSCSI
/// ones on the memory LUN and then on the null LUN, so that each repetition's raw run sits
/// between the runs it bounds.
fn points(directions: &[Direction], sizes: &[u32], reps: u32) -> Vec<IserPoint> {
    let mut out = Vec::new();
    for &direction in directions {
        for &transfer_bytes in sizes {
            for rep in 0..reps {
                let mut push = |transport, lun| {
                    out.push(IserPoint {
                        transport,
                        lun,
                        direction,
                        transfer_bytes,
                        rep,
                    });
                };
                push(Transport::Tcp, Some(Lun::Memory));
                push(Transport::Iser, Some(Lun::Memory));
                push(Transport::Raw, None);
                push(Transport::Iser, Some(Lun::Null));
                push(Transport::Tcp, Some(Lun::Null));
            }
        }
    }
    out
}

/// The preset called `name`.
#[must_use]
pub fn preset(name: &str) -> Option<IserPlan> {
    use Direction::{Read, Write};
    let powers_of_two: Vec<u32> = (12..=24).map(|k| 1 << k).collect();
    let powers_of_four: Vec<u32> = (6..=12).map(|k| 1 << (2 * k)).collect();
    let large: Vec<u32> = (20..=24).map(|k| 1 << k).collect();
    let plan = |name, points, secs: f64| IserPlan {
        name,
        points,
        queue_depth: 4,
        run_time: Duration::from_secs_f64(secs),
    };
    Some(match name {
        "tiny" => plan("tiny", points(&[Read, Write], &[64 << 10, 1 << 20], 1), 0.3),
        "quick" => plan("quick", points(&[Read, Write], &powers_of_four, 3), 1.5),
        "fig2" => plan("fig2", points(&[Read], &powers_of_two, 3), 2.0),
        "fig3" => plan("fig3", points(&[Write], &powers_of_two, 3), 2.0),
        "fig4" => plan("fig4", points(&[Write], &large, 5), 3.0),
        "full" => plan("full", points(&[Read, Write], &powers_of_two, 5), 3.0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_alternates_the_transports_and_has_unique_keys() {
        for (name, _) in PRESETS {
            let plan = preset(name).unwrap();
            assert_eq!(plan.name, name);
            assert_eq!(plan.points.len() % 5, 0, "{name}");
            for group in plan.points.chunks(5) {
                let t: Vec<(Transport, Option<Lun>)> =
                    group.iter().map(|p| (p.transport, p.lun)).collect();
                assert_eq!(
                    t,
                    [
                        (Transport::Tcp, Some(Lun::Memory)),
                        (Transport::Iser, Some(Lun::Memory)),
                        (Transport::Raw, None),
                        (Transport::Iser, Some(Lun::Null)),
                        (Transport::Tcp, Some(Lun::Null)),
                    ],
                    "{name}"
                );
                assert!(group
                    .iter()
                    .all(|p| p.transfer_bytes == group[0].transfer_bytes
                        && p.rep == group[0].rep
                        && p.direction == group[0].direction));
            }
            let mut keys: Vec<String> = plan.points.iter().map(IserPoint::key).collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), plan.points.len(), "{name}");
        }
        assert!(preset("nope").is_none());
    }

    #[test]
    fn the_figure_presets_span_4_kib_to_16_mib() {
        let sizes: Vec<u32> = preset("fig2")
            .unwrap()
            .points
            .iter()
            .map(|p| p.transfer_bytes)
            .collect();
        assert_eq!(sizes.iter().min(), Some(&4096));
        assert_eq!(sizes.iter().max(), Some(&(16 << 20)));
    }
}
