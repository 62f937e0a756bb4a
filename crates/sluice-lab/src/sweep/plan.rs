//! The experiments of the parameter study and the presets that choose among them.
//!
//! Each experiment varies what one group of the paper's figures varies, around RFC 7143's
//! defaults ([`Point::default`]); a preset names the experiments, their grid density, the
//! bytes per run and the runs per point. The paper's method (Shastry, Klotz and Russell,
//! "Evaluating the effect of iSCSI protocol parameters on performance", section 4.3): 500
//! MiB per run, each point the mean of 10 runs.

use sluice_proto::initiator::Policy;

use super::point::{Direction, Point, SECTOR};

/// How many values each axis takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Density {
    /// Two values an axis: seconds in all (the test command runs it).
    Tiny,
    /// A few values an axis: minutes.
    Quick,
    /// The paper's grids.
    Full,
}

/// A set of points that vary the parameters of one or more figures.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// Short id, the `experiment` column (e.g. `mrdsl-read`).
    pub id: &'static str,
    /// What it varies.
    pub title: &'static str,
    /// The points, in run order.
    pub points: Vec<Point>,
}

/// What a sweep runs.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Preset name (or `grid` for a grid file).
    pub name: String,
    /// The experiments.
    pub experiments: Vec<Experiment>,
    /// Application bytes each run moves.
    pub bytes_per_run: u64,
    /// Runs per point.
    pub runs: u32,
}

impl Plan {
    /// Every (experiment, point) pair.
    pub fn points(&self) -> impl Iterator<Item = (&'static str, &Point)> {
        self.experiments
            .iter()
            .flat_map(|e| e.points.iter().map(move |p| (e.id, p)))
    }

    /// Runs in the whole plan.
    pub fn total_runs(&self) -> u64 {
        self.points().count() as u64 * u64::from(self.runs)
    }
}

/// Every experiment id, in the order `full` runs them.
pub const EXPERIMENTS: [&str; 12] = [
    "mrdsl-read",
    "burst-read",
    "sectors",
    "burst-write",
    "first-burst",
    "write-model",
    "outstanding-r2t",
    "outstanding-commands",
    "digests",
    "order",
    "phase-collapse",
    "lus-connections",
];

/// Presets: name, experiments (empty: all), what they reproduce.
pub const PRESETS: [(&str, &[&str], &str); 16] = [
    (
        "tiny",
        &[],
        "two values an axis, 4 MiB x 2 runs: seconds (the test command)",
    ),
    (
        "quick",
        &[],
        "a few points of every figure, 32 MiB x 3 runs: minutes",
    ),
    (
        "full",
        &[],
        "every grid of the paper, 500 MiB x 10 runs: hours",
    ),
    (
        "fig3",
        &["mrdsl-read"],
        "read throughput vs MaxRecvDataSegmentLength",
    ),
    (
        "fig4",
        &["mrdsl-read"],
        "read throughput vs Data-In PDUs per command, equation (1)",
    ),
    (
        "fig5",
        &["mrdsl-read"],
        "observed and calculated time per MiB, equation (1)",
    ),
    ("fig6", &["sectors"], "throughput vs sectors per command"),
    (
        "fig7",
        &["burst-write"],
        "write throughput vs burst length, one line per MRDSL",
    ),
    (
        "fig8",
        &["burst-write"],
        "write throughput vs R2Ts per command",
    ),
    (
        "fig9",
        &["write-model"],
        "equation (2) over all ImmediateData x InitialR2T",
    ),
    (
        "fig10",
        &["outstanding-r2t"],
        "write throughput vs MaxOutstandingR2T, equation (3)",
    ),
    (
        "table1",
        &["outstanding-r2t"],
        "the MaxOutstandingR2T x MRDSL table, equation (3)",
    ),
    (
        "fig11",
        &["outstanding-commands"],
        "throughput vs outstanding commands per MRDSL",
    ),
    (
        "digests",
        &["digests"],
        "HeaderDigest and DataDigest on and off",
    ),
    (
        "lus-connections",
        &["lus-connections"],
        "LUs, connections and scheduling policy",
    ),
    ("table2", &[], "every row of the paper's Table 2 (as full)"),
];

/// The plan of a preset, or `None` for an unknown name.
pub fn preset(name: &str) -> Option<Plan> {
    let (_, ids, _) = PRESETS.iter().find(|(n, _, _)| *n == name)?;
    let (density, bytes, runs) = match name {
        "tiny" => (Density::Tiny, 4 << 20, 2),
        "quick" => (Density::Quick, 32 << 20, 3),
        _ => (Density::Full, 500 << 20, 10),
    };
    let ids: Vec<&str> = if ids.is_empty() {
        EXPERIMENTS.to_vec()
    } else {
        ids.to_vec()
    };
    Some(Plan {
        name: name.to_owned(),
        experiments: ids
            .iter()
            .filter_map(|id| experiment(id, density))
            .collect(),
        bytes_per_run: bytes,
        runs,
    })
}

/// Picks values of an axis by density.
fn pick<T: Copy>(d: Density, tiny: &[T], quick: &[T], full: &[T]) -> Vec<T> {
    match d {
        Density::Tiny => tiny.to_vec(),
        Density::Quick => quick.to_vec(),
        Density::Full => full.to_vec(),
    }
}

const K: u32 = 1024;
/// The paper's MRDSL and burst axis: 512 bytes to 128 KiB.
const SIZES: [u32; 9] = [512, K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K];

fn write() -> Point {
    Point {
        direction: Direction::Write,
        ..Point::default()
    }
}

/// One experiment at a density.
pub fn experiment(id: &str, d: Density) -> Option<Experiment> {
    let (id, title, points): (&'static str, &'static str, Vec<Point>) = match id {
        // Section 5.1: MaxBurstLength 128 KiB, MRDSL 512 B to 128 KiB.
        "mrdsl-read" => (
            "mrdsl-read",
            "read: MaxRecvDataSegmentLength (Fig. 3-5)",
            pick(
                d,
                &[512, 8 * K],
                &[512, 2 * K, 8 * K, 32 * K, 128 * K],
                &SIZES,
            )
            .into_iter()
            .map(|m| Point::default().mrdsl(m).bursts(128 * K))
            .collect(),
        ),
        // Section 2.2: MaxBurstLength "no impact on read performance".
        "burst-read" => (
            "burst-read",
            "read: MaxBurstLength (Table 2)",
            pick(
                d,
                &[8 * K, 64 * K],
                &[8 * K, 32 * K, 128 * K, 512 * K],
                &[8 * K, 16 * K, 32 * K, 64 * K, 128 * K, 256 * K, 512 * K],
            )
            .into_iter()
            .map(|b| Point::default().bursts(b))
            .collect(),
        ),
        // Section 5.2: bursts and PDU size equal to the command size.
        "sectors" => (
            "sectors",
            "sectors per command (Fig. 6)",
            pick(
                d,
                &[64, 1024],
                &[64, 256, 1024, 4096],
                &[64, 128, 256, 512, 1024, 2048, 4096],
            )
            .into_iter()
            .flat_map(|s| {
                let size = s * SECTOR;
                let base = |dir| Point {
                    direction: dir,
                    command_bytes: size,
                    immediate_data: true,
                    initial_r2t: false,
                    ..Point::default().mrdsl(size).bursts(size)
                };
                [base(Direction::Read), base(Direction::Write)]
            })
            .collect(),
        ),
        // Section 6.1: FirstBurstLength = MaxBurstLength, ImmediateData=Yes, InitialR2T=No.
        "burst-write" => (
            "burst-write",
            "write: burst length per MRDSL (Fig. 7, 8)",
            grid2(
                &pick(d, &[8 * K], &[512, 8 * K, 128 * K], &SIZES),
                &pick(d, &[4 * K, 64 * K], &[512, 4 * K, 32 * K, 128 * K], &SIZES),
                |m, b| Point {
                    immediate_data: true,
                    initial_r2t: false,
                    ..write().mrdsl(m).bursts(b)
                },
            ),
        ),
        // Table 2's FirstBurstLength row.
        "first-burst" => (
            "first-burst",
            "write: FirstBurstLength (Table 2)",
            pick(
                d,
                &[8 * K, 256 * K],
                &[8 * K, 64 * K, 256 * K],
                &[8 * K, 16 * K, 32 * K, 64 * K, 128 * K, 256 * K],
            )
            .into_iter()
            .map(|f| Point {
                immediate_data: true,
                initial_r2t: false,
                first_burst: f,
                ..write()
            })
            .collect(),
        ),
        // Section 6.2: equation (2) from all four ImmediateData x InitialR2T combinations.
        "write-model" => {
            let combos = [(true, false), (true, true), (false, false), (false, true)];
            let combos = pick(d, &combos[..2], &combos, &combos);
            let mrdsls = pick(d, &[K], &[K, 8 * K], &[K, 4 * K, 16 * K]);
            let bursts = pick(
                d,
                &[4 * K, 64 * K],
                &[2 * K, 16 * K, 128 * K],
                &[K, 4 * K, 16 * K, 64 * K, 128 * K],
            );
            let mut points = Vec::new();
            for &(imm, ir2t) in &combos {
                for &m in &mrdsls {
                    for &b in &bursts {
                        points.push(Point {
                            immediate_data: imm,
                            initial_r2t: ir2t,
                            ..write().mrdsl(m).bursts(b.max(m))
                        });
                    }
                }
            }
            points.dedup();
            (
                "write-model",
                "write: ImmediateData x InitialR2T x bursts (Fig. 9, equation 2)",
                points,
            )
        }
        // Section 6.3: InitialR2T=Yes, ImmediateData=No, bursts = MRDSL.
        "outstanding-r2t" => (
            "outstanding-r2t",
            "write: MaxOutstandingR2T x MRDSL (Fig. 10, Table 1, equation 3)",
            grid2(
                &pick(d, &[4 * K], &[512, 2 * K, 8 * K, 32 * K], &SIZES),
                &pick(
                    d,
                    &[1, 4],
                    &[1, 2, 4, 8, 16, 32, 64],
                    &[1, 2, 4, 8, 16, 32, 64, 128, 256],
                ),
                |m, r| Point {
                    immediate_data: false,
                    initial_r2t: true,
                    max_outstanding_r2t: r as u16,
                    ..write().mrdsl(m).bursts(m)
                },
            ),
        ),
        // Section 6.4: bursts = MRDSL, MaxOutstandingR2T 1; reads too for Table 2.
        "outstanding-commands" => {
            let mrdsls = pick(
                d,
                &[8 * K],
                &[512, 4 * K, 64 * K],
                &[512, K, 4 * K, 16 * K, 64 * K, 128 * K],
            );
            let depths = pick(d, &[1, 8], &[1, 4, 16, 64], &[1, 2, 4, 8, 16, 32, 64]);
            let mut points = grid2(&mrdsls, &depths, |m, q| Point {
                outstanding: q,
                ..write().mrdsl(m).bursts(m)
            });
            points.extend(depths.iter().map(|&q| Point {
                outstanding: q,
                ..Point::default()
            }));
            (
                "outstanding-commands",
                "outstanding commands per MRDSL (Fig. 11)",
                points,
            )
        }
        "digests" => {
            let modes = [(false, false), (true, false), (false, true), (true, true)];
            let mrdsls = pick(d, &[8 * K], &[8 * K, 256 * K], &[8 * K, 64 * K, 256 * K]);
            let mut points = Vec::new();
            for dir in [Direction::Read, Direction::Write] {
                for &m in &mrdsls {
                    for &(hd, dd) in &modes {
                        points.push(Point {
                            direction: dir,
                            header_digest: hd,
                            data_digest: dd,
                            immediate_data: true,
                            initial_r2t: false,
                            ..Point::default().mrdsl(m).bursts(256 * K)
                        });
                    }
                }
            }
            ("digests", "HeaderDigest and DataDigest (Table 2)", points)
        }
        "order" => {
            let mut points = Vec::new();
            for dir in [Direction::Read, Direction::Write] {
                for pdu in [true, false] {
                    for seq in [true, false] {
                        points.push(Point {
                            direction: dir,
                            data_pdu_in_order: pdu,
                            data_sequence_in_order: seq,
                            max_outstanding_r2t: 4,
                            ..Point::default().bursts(64 * K)
                        });
                    }
                }
            }
            (
                "order",
                "DataPDUInOrder and DataSequenceInOrder (Table 2)",
                points,
            )
        }
        "phase-collapse" => (
            "phase-collapse",
            "read: status in the last Data-In or a separate response (Table 2)",
            grid2(
                &pick(
                    d,
                    &[4 * K],
                    &[4 * K, 64 * K, 512 * K],
                    &[4 * K, 16 * K, 64 * K, 512 * K],
                ),
                &[1, 0],
                |size, collapse| Point {
                    phase_collapse: collapse == 1,
                    command_bytes: size,
                    ..Point::default()
                },
            ),
        ),
        "lus-connections" => {
            let counts = pick(d, &[1, 2], &[1, 2, 4], &[1, 2, 4]);
            let mut points = Vec::new();
            for dir in [Direction::Read, Direction::Write] {
                for &luns in &counts {
                    for &conns in &counts {
                        let policies: &[Policy] = if conns == 1 {
                            &[Policy::RoundRobin]
                        } else {
                            &[Policy::RoundRobin, Policy::LuAffinity]
                        };
                        for &policy in policies {
                            points.push(Point {
                                direction: dir,
                                luns,
                                connections: conns,
                                policy,
                                outstanding: 8,
                                immediate_data: true,
                                initial_r2t: false,
                                ..Point::default()
                            });
                        }
                    }
                }
            }
            (
                "lus-connections",
                "LUs, connections and scheduling policy (Table 2)",
                points,
            )
        }
        _ => return None,
    };
    Some(Experiment { id, title, points })
}

/// Every combination of `a` and `b` (a-major).
fn grid2(a: &[u32], b: &[u32], f: impl Fn(u32, u32) -> Point) -> Vec<Point> {
    a.iter()
        .flat_map(|&x| b.iter().map(move |&y| (x, y)))
        .map(|(x, y)| f(x, y))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_valid_points() {
        for (name, _, _) in PRESETS {
            let plan = preset(name).unwrap();
            assert!(!plan.experiments.is_empty(), "{name}");
            for (e, p) in plan.points() {
                assert!(p.validate().is_ok(), "{name} {e} {}", p.key());
            }
        }
        assert!(preset("fig99").is_none());
    }

    #[test]
    fn full_has_the_papers_grids() {
        let plan = preset("full").unwrap();
        let count = |id: &str| plan.points().filter(|(e, _)| *e == id).count();
        assert_eq!(count("mrdsl-read"), 9);
        assert_eq!(count("burst-write"), 81);
        assert_eq!(count("outstanding-r2t"), 81);
        assert_eq!((plan.bytes_per_run, plan.runs), (500 << 20, 10));
    }

    #[test]
    fn points_of_an_experiment_are_distinct() {
        for d in [Density::Tiny, Density::Quick, Density::Full] {
            for id in EXPERIMENTS {
                let e = experiment(id, d).unwrap();
                let mut keys: Vec<String> = e.points.iter().map(Point::key).collect();
                keys.sort();
                let n = keys.len();
                keys.dedup();
                assert_eq!(keys.len(), n, "{id} {d:?}");
            }
        }
    }
}
