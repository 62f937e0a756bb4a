//! The experiments of each figure and the presets.
//!
//! The study ran 4 MB sequential writes over Gigabit Ethernet with jumbo frames (its Table 2:
//! MTU 9000) and a network emulator adding 0 to 50 ms of round trip. Its figures:
//! 5 and 6, socket throughput per congestion control over 1000 s and 30 s; 7, iSCSI writes
//! against RTT with the basic optimisations and the theoretical line; 10, the write
//! decomposed (Ta, Tb, Tc) against RTT; 11-19, packets, congestion window and send queue
//! against time at 20 and 32 ms; 23-25, the same after the socket-buffer fix.

use std::time::Duration;

use sluice_tcp::{BufferPolicy, DEFAULT_SEND_BUFFER_CEILING};

use super::config::{Config, Initiator, Params};
use crate::link::LinkSpec;

/// What an experiment's figure shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Throughput against RTT, one line per configuration, with the theory (Figs. 5-7, 23).
    Throughput,
    /// Ta, Tb and Tc against RTT (Fig. 10).
    Decomposition,
    /// Time series of every run kept: packets with PDU marks, cwnd, send queue (Figs. 11-19,
    /// 24, 25).
    Trace,
}

/// One figure's runs.
#[derive(Clone, Debug)]
pub struct Experiment {
    /// `fig7`, ...
    pub id: &'static str,
    /// What it reproduces.
    pub title: &'static str,
    /// How it is drawn.
    pub kind: Kind,
    /// One line each.
    pub configs: Vec<Config>,
    /// Round trips the link adds, ms.
    pub rtts_ms: Vec<f64>,
    /// Unrecorded time before each measurement (slow start, buffers growing); zero keeps
    /// the connection's beginning in the measurement, as the study's Figs. 5 and 6 do.
    pub warmup: Duration,
    /// Measured time per run.
    pub seconds: Duration,
}

impl Experiment {
    /// Whether its runs keep their time series (samples and PDU times).
    pub fn traced(&self) -> bool {
        self.kind != Kind::Throughput
    }
}

/// A preset.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Its name.
    pub name: String,
    /// The link every experiment runs on (its delay set per point).
    pub link: LinkSpec,
    /// The experiments.
    pub experiments: Vec<Experiment>,
    /// Runs per point.
    pub runs: u32,
}

impl Plan {
    /// Every (experiment, configuration, RTT) in run order.
    pub fn points(&self) -> impl Iterator<Item = (&Experiment, &Config, f64)> + '_ {
        self.experiments.iter().flat_map(|e| {
            e.configs
                .iter()
                .flat_map(move |c| e.rtts_ms.iter().map(move |&r| (e, c, r)))
        })
    }

    /// Runs in the plan.
    pub fn total_runs(&self) -> u64 {
        self.points().count() as u64 * u64::from(self.runs)
    }

    /// Seconds the plan takes at least (warm-ups and measurements, not logins).
    pub fn seconds(&self) -> f64 {
        self.points()
            .map(|(e, _, _)| (e.warmup + e.seconds).as_secs_f64() * f64::from(self.runs))
            .sum()
    }

    /// Adds libiscsi (qemu-img) to the throughput figures: one line per distinct workload
    /// (parameters, command size, queue depth) of their sluice lines, its socket its own.
    pub fn with_libiscsi(mut self) -> Self {
        for e in self
            .experiments
            .iter_mut()
            .filter(|e| e.kind == Kind::Throughput)
        {
            let mut extra: Vec<Config> = Vec::new();
            for c in e
                .configs
                .iter()
                .filter(|c| c.initiator == Initiator::Sluice)
            {
                let mut l = c.clone().by(Initiator::Libiscsi);
                l.tcp = sluice_tcp::SocketOptions {
                    send_buffer: BufferPolicy::Kernel,
                    ..sluice_tcp::SocketOptions::default()
                };
                l.label = format!(
                    "libiscsi {} {} MiB QD{}",
                    c.params.name(),
                    c.block_bytes / MIB,
                    c.queue_depth
                );
                if !extra.iter().any(|x| x.key() == l.key()) {
                    extra.push(l);
                }
            }
            e.configs.extend(extra);
        }
        self
    }

    /// Every configuration valid.
    pub fn validate(&self) -> Result<(), String> {
        for (_, c, _) in self.points() {
            c.validate()?;
        }
        Ok(())
    }
}

/// The presets: name and what it is.
pub const PRESETS: [(&str, &str); 10] = [
    (
        "tiny",
        "seconds, at 100 Mbit/s: every kind of run and figure (the test suite's)",
    ),
    ("quick", "every figure on a reduced grid, under 15 minutes"),
    (
        "fig5",
        "socket throughput per congestion control, 120 s per point (the study: 1000 s)",
    ),
    (
        "fig6",
        "socket throughput per congestion control over the first 30 s",
    ),
    (
        "fig7",
        "iSCSI writes against RTT: RFC and study parameters, kernel buffers, a socket",
    ),
    ("fig10", "the write decomposed into Ta, Tb, Tc against RTT"),
    (
        "fig14",
        "time series at 20 and 32 ms: packets, cwnd, send queue (Figs. 11-19, 24, 25)",
    ),
    (
        "fig23",
        "after the fix: fixed and grown send buffers, sluice's defaults, theory",
    ),
    ("cc", "iSCSI writes per congestion control"),
    (
        "full",
        "every figure on the study's grid and durations (hours)",
    ),
];

const MIB: u32 = 1 << 20;
/// The study's write: 4 MB (here 4 MiB).
const STUDY_BLOCK: u32 = 4 * MIB;
/// A write larger than the send buffer the kernel's autotuning grows to (4 MiB by default,
/// `net.ipv4.tcp_wmem`): where the study's stall shows on today's kernels.
const BIG_BLOCK: u32 = 8 * MIB;
/// The fixed buffer "after the fix": 32 MiB holds 1 Gbit/s for 250 ms.
const FIXED_SNDBUF: usize = 32 << 20;
/// Congestion controls a stock Linux offers (the study's Reno, BIC, Westwood and H-TCP are
/// modules this machine may lack; CUBIC is BIC's successor).
const CCS: [&str; 3] = ["reno", "cubic", "bbr"];

/// The Gigabit link with jumbo frames, as the study's Table 2, and an 8 MiB tail-drop queue
/// each way: the bandwidth-delay product of the study's longest path (6.25 MB at 50 ms) with
/// room for a whole 4 MiB write, so that the queue drops packets only when a sender overruns
/// the path (as a loss-based congestion control does once a cycle), the way the study's
/// bottleneck, its initiator's own NIC with 3000 jumbo frames of transmit queue, held them.
pub fn study_link() -> LinkSpec {
    let mut l = LinkSpec {
        mtu: 9000,
        ..LinkSpec::default()
    };
    l.forward.queue_bytes = 8 << 20;
    l.backward.queue_bytes = 8 << 20;
    l
}

fn rtts(v: &[f64]) -> Vec<f64> {
    v.to_vec()
}

fn socket_cc(
    id: &'static str,
    title: &'static str,
    r: &[f64],
    warmup: u64,
    secs: u64,
) -> Experiment {
    Experiment {
        id,
        title,
        kind: Kind::Throughput,
        configs: CCS
            .iter()
            .map(|cc| Config::socket(&format!("socket {cc}")).cc(cc))
            .collect(),
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(warmup),
        seconds: Duration::from_secs(secs),
    }
}

fn fig7(r: &[f64], secs: f64) -> Experiment {
    Experiment {
        id: "fig7",
        title: "iSCSI sequential writes against RTT, kernel buffers (the study's Fig. 7)",
        kind: Kind::Throughput,
        configs: vec![
            Config::iscsi("RFC parameters", Params::Rfc, STUDY_BLOCK),
            Config::iscsi("study parameters", Params::Study, STUDY_BLOCK),
            Config::iscsi("study bursts", Params::StudyBurst, STUDY_BLOCK),
            Config::socket("socket"),
        ],
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs_f64(secs),
    }
}

fn fig10(r: &[f64], blocks: &[u32], secs: f64) -> Experiment {
    Experiment {
        id: "fig10",
        title: "One write decomposed: Ta, Tb, Tc against RTT (the study's Fig. 10)",
        kind: Kind::Decomposition,
        configs: blocks
            .iter()
            .map(|&b| Config::iscsi(&format!("{} MiB writes", b / MIB), Params::StudyBurst, b))
            .collect(),
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs_f64(secs),
    }
}

fn fig14(r: &[f64], secs: f64) -> Experiment {
    Experiment {
        id: "fig14",
        title: "Packets, congestion window and send queue against time (Figs. 11-19, 24, 25)",
        kind: Kind::Trace,
        configs: vec![
            Config::iscsi(
                "8 MiB writes / kernel buffers",
                Params::StudyBurst,
                BIG_BLOCK,
            ),
            Config::iscsi("8 MiB writes / grown buffer", Params::StudyBurst, BIG_BLOCK)
                .send_buffer(grown()),
            Config::socket("socket"),
        ],
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs_f64(secs),
    }
}

fn grown() -> BufferPolicy {
    BufferPolicy::Grow {
        ceiling: DEFAULT_SEND_BUFFER_CEILING,
    }
}

fn fig23(r: &[f64], secs: f64) -> Experiment {
    Experiment {
        id: "fig23",
        title: "Send buffers against RTT: the study's fix (its Fig. 23), and sluice's defaults",
        kind: Kind::Throughput,
        configs: vec![
            Config::iscsi(
                "4 MiB writes / kernel buffers",
                Params::StudyBurst,
                STUDY_BLOCK,
            ),
            Config::iscsi(
                "8 MiB writes / kernel buffers",
                Params::StudyBurst,
                BIG_BLOCK,
            ),
            Config::iscsi("8 MiB writes / fixed buffer", Params::StudyBurst, BIG_BLOCK)
                .send_buffer(BufferPolicy::Fixed(FIXED_SNDBUF)),
            Config::iscsi("8 MiB writes / grown buffer", Params::StudyBurst, BIG_BLOCK)
                .send_buffer(grown()),
            Config::iscsi("sluice defaults QD1", Params::Defaults, STUDY_BLOCK)
                .send_buffer(grown()),
            Config::iscsi("sluice defaults QD8", Params::Defaults, MIB)
                .send_buffer(grown())
                .qd(8),
            Config::iscsi(
                "sluice defaults QD8 / kernel buffers",
                Params::Defaults,
                MIB,
            )
            .qd(8),
        ],
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs_f64(secs),
    }
}

fn cc_iscsi(r: &[f64], secs: f64) -> Experiment {
    Experiment {
        id: "cc",
        title: "iSCSI writes per congestion control (the study: about the same for all)",
        kind: Kind::Throughput,
        configs: CCS
            .iter()
            .map(|cc| Config::iscsi(&format!("iSCSI {cc}"), Params::StudyBurst, STUDY_BLOCK).cc(cc))
            .collect(),
        rtts_ms: rtts(r),
        warmup: Duration::from_secs(2),
        seconds: Duration::from_secs_f64(secs),
    }
}

/// The preset `name`.
pub fn preset(name: &str) -> Option<Plan> {
    let link = study_link();
    let full_rtts = [
        0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0,
    ];
    let experiments = match name {
        "tiny" => {
            let r = [2.0, 20.0];
            let mut f7 = fig7(&r, 1.0);
            f7.configs = vec![
                Config::iscsi("study bursts / kernel buffers", Params::StudyBurst, MIB),
                Config::iscsi("sluice defaults", Params::Defaults, MIB).send_buffer(
                    BufferPolicy::Grow {
                        ceiling: DEFAULT_SEND_BUFFER_CEILING,
                    },
                ),
                Config::socket("socket"),
            ];
            f7.warmup = Duration::from_millis(300);
            let mut f10 = fig10(&r, &[MIB], 1.0);
            f10.warmup = Duration::from_millis(300);
            let mut f14 = fig14(&[20.0], 1.0);
            f14.configs = vec![
                Config::iscsi("iSCSI kernel buffers", Params::StudyBurst, MIB),
                Config::socket("socket"),
            ];
            f14.warmup = Duration::from_millis(300);
            let mut plan = Plan {
                name: name.into(),
                link: LinkSpec {
                    mtu: 9000,
                    ..LinkSpec::default()
                },
                experiments: vec![f7, f10, f14],
                runs: 1,
            };
            for p in [&mut plan.link.forward, &mut plan.link.backward] {
                p.rate_bps = Some(100_000_000);
                p.queue_bytes = 512 << 10;
            }
            return Some(plan);
        }
        "quick" => {
            let r = [0.0, 10.0, 30.0, 50.0];
            vec![
                socket_cc(
                    "fig5",
                    "Socket throughput per congestion control, 10 s after 5 s (Figs. 5-6)",
                    &[0.0, 20.0, 50.0],
                    5,
                    10,
                ),
                fig7(&r, 5.0),
                fig10(&r, &[STUDY_BLOCK, BIG_BLOCK], 5.0),
                fig14(&[20.0, 50.0], 3.0),
                fig23(&r, 5.0),
                cc_iscsi(&[50.0], 5.0),
            ]
        }
        "fig5" => vec![socket_cc(
            "fig5",
            "Socket throughput per congestion control, 120 s (the study's Fig. 5: 1000 s)",
            &[0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
            0,
            120,
        )],
        "fig6" => vec![socket_cc(
            "fig6",
            "Socket throughput per congestion control, the first 30 s (the study's Fig. 6)",
            &[0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
            0,
            30,
        )],
        "fig7" => vec![fig7(&full_rtts, 10.0)],
        "fig10" => vec![fig10(&full_rtts, &[2 * MIB, STUDY_BLOCK, BIG_BLOCK], 10.0)],
        "fig14" => vec![fig14(&[20.0, 32.0, 50.0], 5.0)],
        "fig23" => vec![fig23(&full_rtts, 10.0)],
        "cc" => vec![cc_iscsi(&[10.0, 20.0, 30.0, 50.0], 10.0)],
        "full" => vec![
            socket_cc(
                "fig5",
                "Socket throughput per congestion control, 1000 s (the study's Fig. 5)",
                &[0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
                0,
                1000,
            ),
            socket_cc(
                "fig6",
                "Socket throughput per congestion control, the first 30 s (the study's Fig. 6)",
                &[0.0, 10.0, 20.0, 30.0, 40.0, 50.0],
                0,
                30,
            ),
            fig7(&full_rtts, 30.0),
            fig10(&full_rtts, &[2 * MIB, STUDY_BLOCK, BIG_BLOCK], 30.0),
            fig14(&[20.0, 32.0, 50.0], 10.0),
            fig23(&full_rtts, 30.0),
            cc_iscsi(&[10.0, 20.0, 30.0, 40.0, 50.0], 30.0),
        ],
        _ => return None,
    };
    Some(Plan {
        name: name.into(),
        link,
        experiments,
        runs: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_named() {
        for (name, _) in PRESETS {
            let p = preset(name).unwrap_or_else(|| panic!("{name}"));
            p.validate().unwrap();
            assert!(p.total_runs() > 0, "{name}");
            // Keys are unique within an experiment, or resuming would skip runs.
            for e in &p.experiments {
                let mut keys: Vec<String> = e.configs.iter().map(Config::key).collect();
                keys.sort();
                keys.dedup();
                assert_eq!(keys.len(), e.configs.len(), "{name} {}", e.id);
                assert!(e.configs.iter().all(|c| !c.label.contains(',')), "{name}");
            }
        }
        assert!(preset("fig99").is_none());
    }

    #[test]
    fn the_quick_preset_fits_in_a_quarter_hour() {
        let p = preset("quick").unwrap();
        // Logins, target starts and the link's accuracy probes add about a second a point.
        let total = p.seconds() + p.points().count() as f64;
        assert!(total < 13.0 * 60.0, "{total} s");
        assert!(preset("tiny").unwrap().seconds() < 20.0);
    }

    #[test]
    fn libiscsi_lines_join_the_throughput_figures() {
        let p = preset("fig7").unwrap().with_libiscsi();
        let e = &p.experiments[0];
        assert_eq!(
            e.configs
                .iter()
                .filter(|c| c.initiator == Initiator::Libiscsi)
                .count(),
            3
        );
        assert!(e
            .configs
            .iter()
            .any(|c| c.label == "libiscsi rfc 4 MiB QD1"));
        // Lines that differ only in sluice's socket buffers are one libiscsi line.
        let p = preset("fig23").unwrap().with_libiscsi();
        let libiscsi = p.experiments[0]
            .configs
            .iter()
            .filter(|c| c.initiator == Initiator::Libiscsi)
            .count();
        assert_eq!(libiscsi, 4);
    }
}
