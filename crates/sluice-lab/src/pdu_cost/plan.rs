//! The points of `sluice lab pdu-cost` and its presets.

use crate::sweep::{Direction, Point};

/// The experiments, as the report groups them.
pub const SIZES: &str = "sizes";
/// Reads of 512 B to 8 KiB in one 8 KiB PDU each (the paper's Figures 11 and 15).
pub const FIG11: &str = "fig11";
/// Reads of 8 KiB to 64 KiB in 8 KiB PDUs (the paper's Figure 12).
pub const FIG12: &str = "fig12";
/// Reads of every size at a queue depth that keeps the CPUs busy (Figure 17's check).
pub const FIG17: &str = "fig17";

/// One measurement: an experiment's point and how many commands to time.
#[derive(Clone, Debug, PartialEq)]
pub struct PduPoint {
    /// Its experiment.
    pub experiment: &'static str,
    /// Every negotiated key and the initiator's choices.
    pub point: Point,
    /// Commands timed (after a warm-up of a quarter as many).
    pub commands: u64,
}

impl PduPoint {
    /// Identifies the point among a run's rows.
    #[must_use]
    pub fn key(&self) -> String {
        key(
            self.experiment,
            self.point.direction.name(),
            self.point.command_bytes,
            self.pdu_bytes(),
            digest_name(self.point.header_digest, self.point.data_digest),
            self.point.outstanding,
        )
    }

    /// The largest data PDU in the point's direction (its MaxRecvDataSegmentLength).
    #[must_use]
    pub fn pdu_bytes(&self) -> u32 {
        match self.point.direction {
            Direction::Read => self.point.initiator_mrdsl,
            Direction::Write => self.point.target_mrdsl,
        }
    }
}

/// The key of a point or row.
#[must_use]
pub fn key(
    experiment: &str,
    direction: &str,
    command_bytes: u32,
    pdu_bytes: u32,
    digests: &str,
    outstanding: u32,
) -> String {
    format!("{experiment}/{direction}/{command_bytes}/{pdu_bytes}/{digests}/{outstanding}")
}

/// `none`, `header` or `both` (header and data digests).
#[must_use]
pub fn digest_name(header: bool, data: bool) -> &'static str {
    match (header, data) {
        (false, false) => "none",
        (true, false) => "header",
        (false, true) => "data",
        (true, true) => "both",
    }
}

/// A preset.
#[derive(Clone, Debug)]
pub struct PduPlan {
    /// Its name.
    pub name: &'static str,
    /// The points, in run order.
    pub points: Vec<PduPoint>,
}

/// The presets: name and what it runs.
pub const PRESETS: [(&str, &str); 6] = [
    (
        "tiny",
        "seconds: 8 KiB reads and writes, digests off and on (the tests)",
    ),
    (
        "quick",
        "minutes: sizes at 8 KiB, 64 KiB, 1 MiB, Figures 11 and 12, Figure 17's check",
    ),
    (
        "fig11",
        "reads of 512 B to 8 KiB, one 8 KiB PDU each, digests off and on",
    ),
    (
        "fig12",
        "reads of 8 KiB to 64 KiB in 8 KiB PDUs, digests on",
    ),
    (
        "sizes",
        "Data-In and Data-Out of 512 B to 1 MiB, one PDU per command, every digest mode",
    ),
    (
        "full",
        "everything above, and Figure 17's check at every size",
    ),
];

/// A point of `direction` and `bytes` per command in one PDU of its own size, with `digests`
/// (header, data) and `outstanding` commands. Writes send their data unsolicited in one
/// Data-Out PDU (ImmediateData=No, InitialR2T=No), so that a write moves exactly one data
/// PDU like a read; reads end with status in their last Data-In (phase collapse).
#[must_use]
pub fn one_pdu(direction: Direction, bytes: u32, digests: (bool, bool), outstanding: u32) -> Point {
    let pdu = bytes.max(512);
    let mut p = Point {
        direction,
        command_bytes: bytes,
        header_digest: digests.0,
        data_digest: digests.1,
        outstanding,
        immediate_data: false,
        initial_r2t: false,
        ..Point::default()
    }
    .mrdsl(pdu)
    .bursts(pdu.max(8192));
    p.max_burst = p.max_burst.max(bytes);
    p.first_burst = p.max_burst;
    p
}

/// Commands per point: about `budget` bytes, at least `min` and at most 50,000.
fn commands(bytes: u32, budget: u64, min: u64) -> u64 {
    (budget / u64::from(bytes)).clamp(min, 50_000)
}

const DIGEST_MODES: [(bool, bool); 3] = [(false, false), (true, false), (true, true)];

fn sizes_points(sizes: &[u32], modes: &[(bool, bool)], budget: u64) -> Vec<PduPoint> {
    let mut out = Vec::new();
    for direction in [Direction::Read, Direction::Write] {
        for &d in modes {
            for &s in sizes {
                out.push(PduPoint {
                    experiment: SIZES,
                    point: one_pdu(direction, s, d, 1),
                    commands: commands(s, budget, 400),
                });
            }
        }
    }
    out
}

fn fig11_points(budget: u64) -> Vec<PduPoint> {
    let mut out = Vec::new();
    for d in [(false, false), (true, true)] {
        for s in [512, 1024, 2048, 4096, 8192] {
            out.push(PduPoint {
                experiment: FIG11,
                point: one_pdu(Direction::Read, s, d, 1).mrdsl(8192),
                commands: commands(s, budget, 1000),
            });
        }
    }
    out
}

fn fig12_points(budget: u64) -> Vec<PduPoint> {
    [8192, 16384, 32768, 65536]
        .into_iter()
        .map(|s| {
            let mut point = one_pdu(Direction::Read, s, (true, true), 1).mrdsl(8192);
            point = point.bursts(s.max(8192));
            PduPoint {
                experiment: FIG12,
                point,
                commands: commands(s, budget, 1000),
            }
        })
        .collect()
}

fn fig17_points(sizes: &[u32], budget: u64) -> Vec<PduPoint> {
    let mut out = Vec::new();
    for d in [(false, false), (true, true)] {
        for &s in sizes {
            out.push(PduPoint {
                experiment: FIG17,
                point: one_pdu(Direction::Read, s, d, 8),
                commands: commands(s, budget, 2000),
            });
        }
    }
    out
}

/// The preset called `name`.
#[must_use]
pub fn preset(name: &str) -> Option<PduPlan> {
    let all_sizes = [512, 2048, 8192, 32768, 65536, 262_144, 1 << 20];
    let points = match name {
        "tiny" => {
            let mut p = sizes_points(&[8192], &[(false, false), (true, true)], 0);
            for x in &mut p {
                x.commands = 200;
            }
            p
        }
        "quick" => [
            sizes_points(&[8192, 65536, 1 << 20], &DIGEST_MODES, 32 << 20),
            fig11_points(4 << 20),
            fig12_points(16 << 20),
            fig17_points(&[4096, 65536, 1 << 20], 64 << 20),
        ]
        .concat(),
        "fig11" => fig11_points(16 << 20),
        "fig12" => fig12_points(64 << 20),
        "sizes" => sizes_points(&all_sizes, &DIGEST_MODES, 128 << 20),
        "full" => [
            sizes_points(&all_sizes, &DIGEST_MODES, 128 << 20),
            fig11_points(16 << 20),
            fig12_points(64 << 20),
            fig17_points(&all_sizes, 256 << 20),
        ]
        .concat(),
        _ => return None,
    };
    let name = PRESETS.iter().find(|p| p.0 == name)?.0;
    Some(PduPlan { name, points })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn presets_have_distinct_valid_points() {
        for (name, _) in PRESETS {
            let plan = preset(name).unwrap();
            assert!(!plan.points.is_empty(), "{name}");
            let keys: HashSet<String> = plan.points.iter().map(PduPoint::key).collect();
            assert_eq!(keys.len(), plan.points.len(), "{name}");
            for p in &plan.points {
                p.point
                    .validate()
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", p.key()));
            }
        }
        assert!(preset("nope").is_none());
    }

    #[test]
    fn one_pdu_points_move_one_data_pdu_per_command() {
        for direction in [Direction::Read, Direction::Write] {
            for bytes in [512, 8192, 1 << 20] {
                let p = one_pdu(direction, bytes, (true, true), 1);
                let per = crate::sweep::predict::per_command(&p);
                let data = match direction {
                    Direction::Read => per.data_in,
                    Direction::Write => per.data_out,
                };
                assert_eq!(data, 1.0, "{direction:?} {bytes}");
            }
        }
    }
}
