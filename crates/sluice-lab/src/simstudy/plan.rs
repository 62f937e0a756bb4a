//! The points of each preset: one figure of the study's chapter 5 per preset, with the
//! study's link, TCP and parameters, and (where it means something) today's defaults beside
//! them.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sluice_proto::params::SessionParams;
use sluice_sim::experiment::{Experiment, Io, LinkConfig, TcpConfig, Timeouts, Transport};

use crate::arrival::exponential;
use crate::size_dist::SizeDist;

/// Which parameters a point runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// The study's: its parameters, ns-2's TCP (initial window 2).
    Study,
    /// A sluice initiator against a sluice target with their defaults, and Linux's TCP
    /// (initial window 10).
    Today,
}

impl Setup {
    /// The name in rows and legends.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Setup::Study => "study",
            Setup::Today => "today",
        }
    }
}

/// The commands of a point.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadSpec {
    /// `count` commands of `bytes`, all arriving at time 0 (the command window paces them).
    Burst {
        /// Commands.
        count: u32,
        /// Bytes each.
        bytes: u32,
        /// Writes, or reads.
        write: bool,
    },
    /// Reads and writes in turn, all arriving at time 0.
    Mixed {
        /// Commands.
        count: u32,
        /// Bytes each.
        bytes: u32,
    },
    /// Poisson arrivals with sizes from a pmf (the study's trace generator, its section 4.7).
    Poisson {
        /// Commands.
        count: u32,
        /// Arrivals per second.
        rate: f64,
        /// The pmf, as `SizeDist::parse` reads it.
        sizes: &'static str,
        /// Share of writes.
        write_fraction: f64,
    },
}

impl WorkloadSpec {
    /// The commands, with arrival times.
    #[must_use]
    pub fn commands(&self, seed: u64) -> Vec<Io> {
        match *self {
            WorkloadSpec::Burst {
                count,
                bytes,
                write,
            } => (0..count)
                .map(|_| Io {
                    at_ns: 0,
                    bytes,
                    write,
                })
                .collect(),
            WorkloadSpec::Mixed { count, bytes } => (0..count)
                .map(|n| Io {
                    at_ns: 0,
                    bytes,
                    write: n % 2 == 1,
                })
                .collect(),
            WorkloadSpec::Poisson {
                count,
                rate,
                sizes,
                write_fraction,
            } => {
                let dist = SizeDist::parse(sizes).unwrap_or(SizeDist::Fixed(8192));
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let mut t = 0.0;
                (0..count)
                    .map(|_| {
                        t += exponential(&mut rng, rate);
                        let bytes = dist.sample(&mut rng).div_ceil(512) * 512;
                        Io {
                            at_ns: (t * 1e9) as u64,
                            bytes,
                            write: rand::Rng::gen_bool(&mut rng, write_fraction),
                        }
                    })
                    .collect()
            }
        }
    }

    /// A short description for rows and the report.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            WorkloadSpec::Burst {
                count,
                bytes,
                write,
            } => format!(
                "{count} x {} {bytes} B at t=0",
                if *write { "write" } else { "read" }
            ),
            WorkloadSpec::Mixed { count, bytes } => {
                format!("{count} x {bytes} B reads and writes in turn at t=0")
            }
            WorkloadSpec::Poisson {
                count,
                rate,
                sizes,
                write_fraction,
            } => format!(
                "{count} Poisson arrivals at {rate}/s sizes {sizes} writes {:.0} %",
                write_fraction * 100.0
            ),
        }
    }
}

/// One run.
#[derive(Clone, Debug, PartialEq)]
pub struct SimPoint {
    /// The figure it belongs to (`fig5.3`, ..., `speed`).
    pub figure: &'static str,
    /// Its line in the figure.
    pub series: String,
    /// Study or today.
    pub setup: Setup,
    /// Its x value, in the figure's unit.
    pub x: f64,
    /// The negotiated values.
    pub params: SessionParams,
    /// The command window.
    pub queue_depth: u32,
    /// The link.
    pub link: LinkConfig,
    /// TCP or UDP.
    pub transport: Transport,
    /// Recovery timers.
    pub timeouts: Timeouts,
    /// The commands.
    pub workload: WorkloadSpec,
}

impl SimPoint {
    /// Identifies the point among a run's rows.
    #[must_use]
    pub fn key(&self) -> String {
        key(self.figure, &self.series, self.x)
    }

    /// The experiment to run.
    #[must_use]
    pub fn experiment(&self) -> Experiment {
        let seed = 0x5eed ^ (self.x.to_bits().rotate_left(7)) ^ self.series.len() as u64;
        Experiment {
            params: self.params,
            queue_depth: self.queue_depth,
            link: self.link,
            transport: self.transport,
            timeouts: self.timeouts,
            workload: self.workload.commands(seed),
            seed,
            time_limit_ns: 4 * 3_600_000_000_000,
        }
    }
}

/// A row's key.
#[must_use]
pub fn key(figure: &str, series: &str, x: f64) -> String {
    format!("{figure}|{series}|{x}")
}

/// A preset: its points.
#[derive(Clone, Debug)]
pub struct SimPlan {
    /// Its name.
    pub name: &'static str,
    /// The runs.
    pub points: Vec<SimPoint>,
}

/// How big a preset's runs are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scale {
    /// Seconds in all (the test command).
    Tiny,
    /// The chapter in minutes.
    Quick,
    /// One figure, in the study's detail.
    Full,
}

/// The presets: name, what it runs. The chapter-6 (CRC aliasing) figures and the
/// comparison with a real UDP transport are separate studies added beside these.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "tiny",
        "every chapter-5 figure at a few points, seconds (the test command runs it)",
    ),
    (
        "quick",
        "every chapter-5 figure and the simulation speed, minutes",
    ),
    (
        "fig5.3",
        "response time against ExpectedDataTransferLength, reads and writes",
    ),
    (
        "fig5.4",
        "utilisation against the drop-tail buffer (100 to 1000 packets)",
    ),
    (
        "fig5.5",
        "utilisation against ExpectedDataTransferLength at 10, 100, 1000 Mb/s",
    ),
    (
        "fig5.7",
        "throughput against the number of commands for one total (Fig. 5.6's sets)",
    ),
    (
        "fig5.8",
        "command throughput against the command window, Poisson arrivals",
    ),
    (
        "fig5.9",
        "throughput against the bit error rate, ErrorRecoveryLevel 0, 1 and 2",
    ),
    (
        "fig5.10",
        "TCP against UDP response times, TransferContext timeout 10 s",
    ),
    (
        "fig5.11",
        "TCP against UDP response times, TransferContext timeout 0.1 s (UDP)",
    ),
    (
        "speed",
        "simulated I/Os per wall-clock second, 4 KiB and 1 MiB",
    ),
    (
        "fig6",
        "chapter 6: CRC and TCP checksum aliasing, modelled and measured on sluice's framer",
    ),
    (
        "udp-sockets",
        "Figs. 5.10 and 5.11 over real loopback sockets: the experimental UDP transport against TCP",
    ),
];

/// The chapter-5 figures in order (each also a preset).
pub const FIGURES: &[&str] = &[
    "fig5.3", "fig5.4", "fig5.5", "fig5.7", "fig5.8", "fig5.9", "fig5.10", "fig5.11",
];

/// The plan of a preset, if it exists.
#[must_use]
pub fn preset(name: &str) -> Option<SimPlan> {
    let (name, _) = PRESETS.iter().find(|p| p.0 == name)?;
    let points = match *name {
        "tiny" => all(Scale::Tiny),
        "quick" => all(Scale::Quick),
        // Only a companion study (see `companions`): no chapter-5 points.
        "fig6" | "udp-sockets" => Vec::new(),
        fig => figure(fig, Scale::Full),
    };
    Some(SimPlan { name, points })
}

fn all(scale: Scale) -> Vec<SimPoint> {
    let mut v: Vec<SimPoint> = FIGURES.iter().flat_map(|f| figure(f, scale)).collect();
    v.extend(figure("speed", scale));
    v
}

/// The study's parameters (its section 5.2 list): MaxRecvDataSegmentLength 1500 bytes,
/// FirstBurstLength and MaxBurstLength 64 KB, unsolicited data on, every R2T at once (the
/// study's target "sends all R2Ts at the same time"), ErrorRecoveryLevel 0.
#[must_use]
pub fn study_params() -> SessionParams {
    SessionParams {
        initial_r2t: false,
        immediate_data: true,
        initiator_max_recv_data_segment_length: 1500,
        target_max_recv_data_segment_length: 1500,
        first_burst_length: 65_536,
        max_burst_length: 65_536,
        max_outstanding_r2t: 65_535,
        ..SessionParams::default()
    }
}

/// A sluice initiator and target with their default offers: 256 KiB data segments, bursts
/// of 16 MiB - 1 KiB, unsolicited data, MaxOutstandingR2T 8.
#[must_use]
pub fn today_params() -> SessionParams {
    SessionParams {
        initial_r2t: false,
        immediate_data: true,
        initiator_max_recv_data_segment_length: 262_144,
        target_max_recv_data_segment_length: 262_144,
        first_burst_length: 16_776_192,
        max_burst_length: 16_776_192,
        max_outstanding_r2t: 8,
        ..SessionParams::default()
    }
}

/// RFC 7143's defaults (section 13): InitialR2T=Yes, 8 KiB segments, 64 KiB first burst,
/// 256 KiB bursts, one R2T at a time.
#[must_use]
pub fn rfc_params() -> SessionParams {
    SessionParams::default()
}

fn params_of(setup: Setup) -> SessionParams {
    match setup {
        Setup::Study => study_params(),
        Setup::Today => today_params(),
    }
}

fn tcp_of(setup: Setup) -> Transport {
    Transport::Tcp(match setup {
        Setup::Study => TcpConfig::study(),
        Setup::Today => TcpConfig::today(),
    })
}

struct Base {
    figure: &'static str,
    link: LinkConfig,
    timeouts: Timeouts,
}

impl Base {
    #[allow(clippy::too_many_arguments)]
    fn point(
        &self,
        series: impl Into<String>,
        setup: Setup,
        x: f64,
        params: SessionParams,
        queue_depth: u32,
        transport: Transport,
        workload: WorkloadSpec,
    ) -> SimPoint {
        SimPoint {
            figure: self.figure,
            series: series.into(),
            setup,
            x,
            params,
            queue_depth,
            link: self.link,
            transport,
            timeouts: self.timeouts,
            workload,
        }
    }
}

const KIB: u32 = 1024;
const MIB: u32 = 1 << 20;

fn pick<T: Copy>(scale: Scale, tiny: &[T], quick: &[T], full: &[T]) -> Vec<T> {
    match scale {
        Scale::Tiny => tiny.to_vec(),
        Scale::Quick => quick.to_vec(),
        Scale::Full => full.to_vec(),
    }
}

/// Sizes in KiB on a log scale from 1 KiB to `top`, plus the FirstBurstLength edge and the
/// 750 KB queue-capacity edge of the study's link.
fn edtl_kib(scale: Scale) -> Vec<u32> {
    match scale {
        Scale::Tiny => vec![32, 64, 65, 256],
        Scale::Quick => vec![
            1, 4, 16, 32, 48, 64, 65, 80, 128, 256, 512, 640, 768, 1024, 2048, 4096,
        ],
        Scale::Full => {
            let mut v = vec![
                1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 63, 64, 65, 66, 72, 80, 96,
            ];
            v.extend([
                112, 128, 129, 160, 192, 256, 384, 512, 576, 640, 704, 736, 768, 800,
            ]);
            v.extend([896, 1024, 1536, 2048, 3072, 4096, 6144, 8192]);
            v
        }
    }
}

fn figure(fig: &'static str, scale: Scale) -> Vec<SimPoint> {
    let study_link = LinkConfig::study();
    let mut base = Base {
        figure: fig,
        link: study_link,
        timeouts: Timeouts::default(),
    };
    let mut v = Vec::new();
    match fig {
        "fig5.3" => {
            // One command at a time on an idle link, as the study's Fig. 5.2 setup.
            let sets = [
                ("study", Setup::Study, study_params()),
                ("RFC defaults", Setup::Study, rfc_params()),
                ("today", Setup::Today, today_params()),
            ];
            for (name, setup, params) in sets {
                for write in [true, false] {
                    if scale == Scale::Tiny && name == "RFC defaults" {
                        continue;
                    }
                    for kib in edtl_kib(scale) {
                        let series = format!("{name} {}", if write { "write" } else { "read" });
                        v.push(base.point(
                            series,
                            setup,
                            f64::from(kib),
                            params,
                            1,
                            tcp_of(setup),
                            WorkloadSpec::Burst {
                                count: 1,
                                bytes: kib * KIB,
                                write,
                            },
                        ));
                    }
                }
            }
        }
        "fig5.4" => {
            let buffers = pick(
                scale,
                &[100, 1000],
                &[100, 200, 300, 400, 500, 600, 800, 1000],
                &[
                    100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 700, 800, 900, 1000,
                ],
            );
            let count = if scale == Scale::Tiny { 4 } else { 8 };
            for setup in [Setup::Study, Setup::Today] {
                for &b in &buffers {
                    base.link.queue_packets = b;
                    v.push(base.point(
                        setup.name(),
                        setup,
                        b as f64,
                        params_of(setup),
                        8,
                        tcp_of(setup),
                        WorkloadSpec::Burst {
                            count,
                            bytes: 2 * MIB,
                            write: true,
                        },
                    ));
                }
            }
        }
        "fig5.5" => {
            let sizes = pick(
                scale,
                &[4, 256],
                &[1, 4, 16, 64, 256, 1024, 4096],
                &[
                    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                ],
            );
            let rates: &[u64] = if scale == Scale::Tiny {
                &[10, 1000]
            } else {
                &[10, 100, 1000]
            };
            for setup in [Setup::Study, Setup::Today] {
                if scale == Scale::Tiny && setup == Setup::Today {
                    continue;
                }
                for &mbps in rates {
                    base.link.bits_per_sec = mbps * 1_000_000;
                    for &kib in &sizes {
                        v.push(base.point(
                            format!("{} {mbps} Mb/s", setup.name()),
                            setup,
                            f64::from(kib),
                            params_of(setup),
                            1,
                            tcp_of(setup),
                            WorkloadSpec::Burst {
                                count: 8,
                                bytes: kib * KIB,
                                write: true,
                            },
                        ));
                    }
                }
            }
        }
        "fig5.7" => {
            // Fig. 5.6's sets: the same total split into 1 to 64 commands. The study moved
            // 80 MB; 32 MiB here, the largest single command sluice's SCSI layer accepts
            // (its Block Limits VPD MAXIMUM TRANSFER LENGTH).
            let counts = pick(
                scale,
                &[1, 8, 16],
                &[1, 2, 4, 8, 16, 32, 64],
                &[1, 2, 4, 8, 12, 16, 24, 32, 48, 64],
            );
            let total = if scale == Scale::Tiny {
                4 * MIB
            } else {
                32 * MIB
            };
            for (setup, window) in [(Setup::Study, 8), (Setup::Study, 128), (Setup::Today, 8)] {
                for &n in &counts {
                    v.push(base.point(
                        format!("{} window {window}", setup.name()),
                        setup,
                        f64::from(n),
                        params_of(setup),
                        window,
                        tcp_of(setup),
                        WorkloadSpec::Burst {
                            count: n,
                            // Whole blocks: the total is split as evenly as blocks allow.
                            bytes: total / n / 512 * 512,
                            write: true,
                        },
                    ));
                }
            }
        }
        "fig5.8" => {
            let windows = pick(
                scale,
                &[1, 8, 32],
                &[1, 2, 4, 8, 16, 24, 32, 48, 64],
                &[1, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128],
            );
            let count = match scale {
                Scale::Tiny => 100,
                Scale::Quick => 1000,
                Scale::Full => 5000,
            };
            for setup in [Setup::Study, Setup::Today] {
                for &w in &windows {
                    v.push(base.point(
                        setup.name(),
                        setup,
                        f64::from(w),
                        params_of(setup),
                        w,
                        tcp_of(setup),
                        WorkloadSpec::Poisson {
                            count,
                            rate: 1000.0,
                            sizes: "8k:0.1,16k:0.2,32k:0.3,64k:0.4",
                            write_fraction: 0.5,
                        },
                    ));
                }
            }
        }
        "fig5.9" => {
            let bers = pick(
                scale,
                &[1e-9, 1e-6],
                &[1e-9, 1e-8, 1e-7, 1e-6, 3e-6, 1e-5],
                &[
                    1e-10, 1e-9, 3e-9, 1e-8, 3e-8, 1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 2e-5,
                ],
            );
            let count = if scale == Scale::Tiny { 8 } else { 32 };
            let work = WorkloadSpec::Mixed {
                count,
                bytes: 256 * KIB,
            };
            for (transport, erl, ctx) in [
                ("TCP", 0u8, 1.0),
                ("TCP", 1, 1.0),
                ("TCP", 2, 1.0),
                ("UDP", 1, 0.1),
                ("UDP", 2, 0.1),
            ] {
                if scale == Scale::Tiny && erl == 2 {
                    continue;
                }
                for &ber in &bers {
                    base.link.ber = ber;
                    base.timeouts = Timeouts {
                        transfer_context: Duration::from_secs_f64(ctx),
                        command: Duration::from_secs(600),
                    };
                    let params = SessionParams {
                        error_recovery_level: erl,
                        ..study_params()
                    };
                    let t = if transport == "TCP" {
                        tcp_of(Setup::Study)
                    } else {
                        Transport::Udp
                    };
                    v.push(base.point(
                        format!("{transport} ERL {erl}"),
                        Setup::Study,
                        ber,
                        params,
                        8,
                        t,
                        work.clone(),
                    ));
                }
            }
        }
        "fig5.10" | "fig5.11" => {
            // Section 5.4: 100 Mb/s, 10 ms, 1000-packet queues, 944-byte data segments, 64 KB
            // bursts; no bit errors (only the queues lose packets). ErrorRecoveryLevel 1, so
            // that iSCSI recovers what UDP loses.
            base.link.bits_per_sec = 100_000_000;
            base.link.queue_packets = 1000;
            let params = SessionParams {
                initiator_max_recv_data_segment_length: 944,
                target_max_recv_data_segment_length: 944,
                error_recovery_level: 1,
                ..study_params()
            };
            let kb: Vec<u32> = if fig == "fig5.10" {
                pick(
                    scale,
                    &[10, 1000, 2000],
                    &[1, 10, 100, 1000, 2000, 4000, 8000, 10000, 20000],
                    &[
                        1, 10, 100, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                        20000, 30000,
                    ],
                )
            } else {
                pick(
                    scale,
                    &[1000, 4000],
                    &[1000, 2000, 4000, 6000, 8000, 10000],
                    &[
                        1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
                        10500, 10600,
                    ],
                )
            };
            let udp_timeout = if fig == "fig5.10" { 10.0 } else { 0.1 };
            for (name, transport, ctx) in [
                ("TCP", tcp_of(Setup::Study), 1.0),
                ("UDP", Transport::Udp, udp_timeout),
            ] {
                base.timeouts = Timeouts {
                    transfer_context: Duration::from_secs_f64(ctx),
                    command: Duration::from_secs(1200),
                };
                for &k in &kb {
                    // The study's KB: 1000 bytes, rounded up to whole blocks.
                    let bytes = (k * 1000).div_ceil(512) * 512;
                    v.push(base.point(
                        format!("{name} write (TransferContext {ctx} s)"),
                        Setup::Study,
                        f64::from(k),
                        params,
                        1,
                        transport,
                        WorkloadSpec::Burst {
                            count: 1,
                            bytes,
                            write: true,
                        },
                    ));
                }
            }
        }
        "speed" => {
            // One connection, a fast short link (a loopback stand-in), queue depth 16: how
            // many simulated I/Os one wall-clock second buys.
            base.link = LinkConfig {
                bits_per_sec: 10_000_000_000,
                delay_ns: 10_000,
                queue_packets: 100_000,
                ber: 0.0,
                mtu: 65_536,
            };
            let tcp = Transport::Tcp(TcpConfig {
                mss: 65_483,
                header_bytes: 52,
                ..TcpConfig::today()
            });
            let n = |small: bool| match (scale, small) {
                (Scale::Tiny, true) => 500,
                (Scale::Tiny, false) => 20,
                (_, true) => 20_000,
                (_, false) => 1000,
            };
            for write in [false, true] {
                for (bytes, count) in [(4 * KIB, n(true)), (MIB, n(false))] {
                    v.push(base.point(
                        if write { "write" } else { "read" },
                        Setup::Today,
                        f64::from(bytes / KIB),
                        today_params(),
                        16,
                        tcp,
                        WorkloadSpec::Burst {
                            count,
                            bytes,
                            write,
                        },
                    ));
                }
            }
        }
        _ => {}
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_points_with_distinct_keys() {
        for (name, _) in PRESETS {
            let plan = preset(name).unwrap();
            let companion_only = super::super::companions::companions(name).runs_only_companions;
            assert_eq!(plan.points.is_empty(), companion_only, "{name}");
            for p in &plan.points {
                let work = p.workload.commands(1);
                assert!(
                    work.iter().all(|io| io.bytes > 0 && io.bytes % 512 == 0),
                    "{name}: {} {} {}",
                    p.figure,
                    p.series,
                    p.x
                );
            }
            // Keys are read back from CSV cells, which cannot hold commas.
            assert!(
                plan.points.iter().all(|p| !p.series.contains(',')),
                "{name}"
            );
            let mut keys: Vec<String> = plan.points.iter().map(SimPoint::key).collect();
            let n = keys.len();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), n, "{name} repeats a key");
        }
        assert!(preset("fig6.2").is_none());
    }

    #[test]
    fn poisson_workloads_arrive_at_their_rate_with_block_sizes() {
        let w = WorkloadSpec::Poisson {
            count: 4000,
            rate: 1000.0,
            sizes: "8k:0.1,16k:0.2,32k:0.3,64k:0.4",
            write_fraction: 0.5,
        };
        let c = w.commands(9);
        let span = c.last().unwrap().at_ns as f64 / 1e9;
        assert!((span - 4.0).abs() < 0.3, "{span}");
        assert!(c.iter().all(|io| io.bytes % 512 == 0));
        assert!(c.windows(2).all(|p| p[0].at_ns <= p[1].at_ns));
    }
}
