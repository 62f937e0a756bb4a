//! `sluice lab crc`: the CRC32C measurements of Joglekar, Kounavis and Berry, "A Scalable and
//! High Performance Software iSCSI Implementation", on today's CPU.
//!
//! Two experiments. `speed` (their Figure 14, extended): each algorithm of [`LabCrc`] over
//! buffer sizes from 64 B to 1 MiB, on a warm buffer and on a walk over a set larger than the
//! last-level cache. `copy-crc` (their Figure 16): a payload copied and digested by each
//! [`Method`] of [`super::fused`]. A [`CrcPlan`] lists the points of a preset; [`run`] first
//! checks every algorithm and method against RFC 3720's examples and against each other
//! ([`check`]), then times each point not done yet, one [`CrcRun`] row per point.

use std::collections::HashSet;
use std::time::Duration;

use super::fused::Method;
use super::timing::{buffer_for, test_bytes, time_calls, Cache, Measurement, Spread};
use super::LabCrc;
use crate::study::table::{Cells, Row, Value};
use sluice_digest::Algorithm;

/// The experiments.
pub const SPEED: &str = "speed";
/// See [`SPEED`].
pub const COPY_CRC: &str = "copy-crc";

/// Warm or cold, as a row records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Temperature {
    /// The same buffer every call.
    Warm,
    /// A walk over the plan's cold set.
    Cold,
}

impl Temperature {
    /// The name in rows and plots.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Temperature::Warm => "warm",
            Temperature::Cold => "cold",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        [Temperature::Warm, Temperature::Cold]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

/// One measurement to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CrcPoint {
    /// [`SPEED`] or [`COPY_CRC`].
    pub experiment: &'static str,
    /// The algorithm.
    pub crc: LabCrc,
    /// [`Method::Crc`] for `speed`.
    pub method: Method,
    /// Bytes per call.
    pub size: usize,
    /// Warm or cold.
    pub temperature: Temperature,
}

impl CrcPoint {
    /// Identifies the point among a run's rows (resuming skips the points with a row).
    #[must_use]
    pub fn key(&self) -> String {
        key(
            self.experiment,
            self.crc.name(),
            self.method.name(),
            self.size as u64,
            self.temperature.name(),
        )
    }
}

fn key(experiment: &str, crc: &str, method: &str, size: u64, temperature: &str) -> String {
    format!("{experiment}/{crc}/{method}/{size}/{temperature}")
}

/// A preset: the points and how long to time each.
#[derive(Clone, Debug)]
pub struct CrcPlan {
    /// The preset's name.
    pub name: &'static str,
    /// The points, in run order.
    pub points: Vec<CrcPoint>,
    /// Trials per point (the median is reported, with the spread).
    pub trials: usize,
    /// Least duration of one trial.
    pub trial_time: Duration,
    /// Bytes of the set a cold point walks (well above the last-level cache).
    pub cold_set_bytes: usize,
}

/// The presets: name and what it runs.
pub const PRESETS: [(&str, &str); 6] = [
    (
        "tiny",
        "seconds: every algorithm at 512 B and 8 KiB, copy-CRC at 8 KiB (the tests)",
    ),
    (
        "quick",
        "minutes: every algorithm from 64 B to 1 MiB, copy-CRC at 8 KiB and 1 MiB",
    ),
    (
        "fig14",
        "the paper's Figure 14: every algorithm at read sizes of 512 B to 8 KiB",
    ),
    (
        "fig16",
        "the paper's Figure 16: copy and CRC apart and fused, 8 KiB to 1 MiB",
    ),
    (
        "sizes",
        "every algorithm at every power of two from 64 B to 1 MiB",
    ),
    ("full", "fig14, sizes and fig16 with more and longer trials"),
];

/// The algorithms of the copy-CRC experiment: the paper's two, the instruction, and
/// `crc-fast` (what the product runs on payloads).
const COPY_ALGORITHMS: [LabCrc; 5] = [
    LabCrc::Digest(Algorithm::Sarwate),
    LabCrc::Digest(Algorithm::SlicingBy8),
    LabCrc::Sse42One,
    LabCrc::Sse42Three,
    LabCrc::CrcFast,
];

fn speed_points(sizes: &[usize], temps: &[Temperature]) -> Vec<CrcPoint> {
    let mut out = Vec::new();
    for &temperature in temps {
        for &size in sizes {
            for crc in LabCrc::ALL {
                out.push(CrcPoint {
                    experiment: SPEED,
                    crc,
                    method: Method::Crc,
                    size,
                    temperature,
                });
            }
        }
    }
    out
}

fn copy_points(crcs: &[LabCrc], sizes: &[usize], temps: &[Temperature]) -> Vec<CrcPoint> {
    let mut out = Vec::new();
    for &temperature in temps {
        for &size in sizes {
            for &crc in crcs {
                for method in Method::ALL {
                    // The copy alone does not depend on the algorithm: once per size.
                    if method == Method::Copy && crc != crcs[0] {
                        continue;
                    }
                    out.push(CrcPoint {
                        experiment: COPY_CRC,
                        crc,
                        method,
                        size,
                        temperature,
                    });
                }
            }
        }
    }
    out
}

/// The preset called `name`.
#[must_use]
pub fn preset(name: &str) -> Option<CrcPlan> {
    use Temperature::{Cold, Warm};
    let both = [Warm, Cold];
    let fig14: Vec<usize> = (1..=16).map(|k| k * 512).collect();
    // 48 B: a Basic Header Segment, what every header digest covers.
    let powers: Vec<usize> = [48].into_iter().chain((6..=20).map(|k| 1 << k)).collect();
    let quick_sizes = [
        48,
        64,
        128,
        256,
        1024,
        4096,
        8192,
        16384,
        65536,
        262_144,
        1 << 20,
    ];
    let fig16 = [8192, 65536, 1 << 20];
    let plan = |name, points, trials, ms| CrcPlan {
        name,
        points,
        trials,
        trial_time: Duration::from_millis(ms),
        cold_set_bytes: 256 << 20,
    };
    Some(match name {
        "tiny" => CrcPlan {
            cold_set_bytes: 8 << 20,
            ..plan(
                "tiny",
                [
                    speed_points(&[512, 8192], &both),
                    copy_points(&COPY_ALGORITHMS, &[8192], &[Warm]),
                ]
                .concat(),
                3,
                2,
            )
        },
        "quick" => plan(
            "quick",
            [
                speed_points(&quick_sizes, &both),
                copy_points(&COPY_ALGORITHMS, &[8192, 1 << 20], &both),
            ]
            .concat(),
            5,
            10,
        ),
        "fig14" => plan("fig14", speed_points(&fig14, &both), 7, 20),
        "fig16" => plan("fig16", copy_points(&COPY_ALGORITHMS, &fig16, &both), 7, 20),
        "sizes" => plan("sizes", speed_points(&powers, &both), 7, 20),
        "full" => {
            let mut sizes: Vec<usize> = fig14.iter().chain(&powers).copied().collect();
            sizes.sort_unstable();
            sizes.dedup();
            plan(
                "full",
                [
                    speed_points(&sizes, &both),
                    copy_points(&COPY_ALGORITHMS, &fig16, &both),
                ]
                .concat(),
                11,
                50,
            )
        }
        _ => return None,
    })
}

/// One point's measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct CrcRun {
    /// [`SPEED`] or [`COPY_CRC`].
    pub experiment: String,
    /// The algorithm's name.
    pub crc: String,
    /// The method's name ([`Method::Crc`] for `speed`).
    pub method: String,
    /// Bytes per call.
    pub size: u64,
    /// `warm` or `cold`.
    pub temperature: String,
    /// Bytes walked (the size itself when warm).
    pub set_bytes: u64,
    /// Trials.
    pub trials: u32,
    /// Calls per trial.
    pub calls_per_trial: u64,
    /// Nanoseconds per call: median, lowest, highest trial.
    pub ns: Spread,
    /// TSC ticks per byte, where the CPU has a TSC.
    pub tsc_per_byte: Option<Spread>,
}

impl CrcRun {
    /// Median throughput in GB/s (10^9 bytes per second).
    #[must_use]
    pub fn gb_per_s(&self) -> f64 {
        self.size as f64 / self.ns.median
    }

    /// The key of its point (see [`CrcPoint::key`]).
    #[must_use]
    pub fn key(&self) -> String {
        key(
            &self.experiment,
            &self.crc,
            &self.method,
            self.size,
            &self.temperature,
        )
    }

    fn new(p: &CrcPoint, plan: &CrcPlan, set_bytes: usize, m: Measurement) -> Self {
        Self {
            experiment: p.experiment.to_owned(),
            crc: p.crc.name().to_owned(),
            method: p.method.name().to_owned(),
            size: p.size as u64,
            temperature: p.temperature.name().to_owned(),
            set_bytes: set_bytes as u64,
            trials: plan.trials as u32,
            calls_per_trial: m.calls_per_trial,
            ns: m.ns_per_call,
            tsc_per_byte: m.ticks_per_byte,
        }
    }

    /// A row with every field set, for the CSV header.
    #[must_use]
    pub fn example() -> Self {
        Self {
            experiment: SPEED.into(),
            crc: "crc-fast".into(),
            method: "crc".into(),
            size: 8192,
            temperature: "warm".into(),
            set_bytes: 8192,
            trials: 1,
            calls_per_trial: 1,
            ns: Spread {
                median: 1.0,
                min: 1.0,
                max: 1.0,
            },
            tsc_per_byte: None,
        }
    }
}

impl Row for CrcRun {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        use Value::{Float, Text, UInt};
        let tsc = |f: fn(&Spread) -> f64| {
            self.tsc_per_byte
                .as_ref()
                .map_or(Value::Missing, |s| Float(f(s)))
        };
        vec![
            ("experiment", Text(self.experiment.clone())),
            ("algorithm", Text(self.crc.clone())),
            ("method", Text(self.method.clone())),
            ("size", UInt(self.size)),
            ("cache", Text(self.temperature.clone())),
            ("set_bytes", UInt(self.set_bytes)),
            ("trials", UInt(self.trials.into())),
            ("calls_per_trial", UInt(self.calls_per_trial)),
            ("ns_per_call", Float(self.ns.median)),
            ("ns_per_call_min", Float(self.ns.min)),
            ("ns_per_call_max", Float(self.ns.max)),
            ("tsc_per_byte", tsc(|s| s.median)),
            ("tsc_per_byte_min", tsc(|s| s.min)),
            ("tsc_per_byte_max", tsc(|s| s.max)),
            ("gb_per_s", Float(self.gb_per_s())),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        let temperature = c.text("cache")?;
        Temperature::from_name(temperature).ok_or("cache is neither warm nor cold")?;
        let tsc = match (
            c.optional_float("tsc_per_byte")?,
            c.optional_float("tsc_per_byte_min")?,
            c.optional_float("tsc_per_byte_max")?,
        ) {
            (Some(median), Some(min), Some(max)) => Some(Spread { median, min, max }),
            _ => None,
        };
        Ok(Self {
            experiment: c.text("experiment")?.to_owned(),
            crc: c.text("algorithm")?.to_owned(),
            method: c.text("method")?.to_owned(),
            size: c.uint("size")?,
            temperature: temperature.to_owned(),
            set_bytes: c.uint("set_bytes")?,
            trials: c.small("trials")?,
            calls_per_trial: c.uint("calls_per_trial")?,
            ns: Spread {
                median: c.float("ns_per_call")?,
                min: c.float("ns_per_call_min")?,
                max: c.float("ns_per_call_max")?,
            },
            tsc_per_byte: tsc,
        })
    }
}

/// What [`check`] found: one line per algorithm and method, and whether all passed.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// One line per check.
    pub lines: Vec<String>,
    /// Every check passed.
    pub passed: bool,
}

/// Checks every available algorithm against the five examples of RFC 3720 appendix B.4 and
/// against `crc-fast` on buffers of many lengths and alignments, and every method's copy and
/// digest, before anything is timed (a fast wrong CRC is worth nothing).
#[must_use]
pub fn check() -> CheckReport {
    let vectors = sluice_digest::vectors::rfc3720_b4();
    // Room for the longest length at every offset.
    let data = test_bytes(70_004);
    let lengths: Vec<usize> = (0..=64)
        .chain([
            255, 511, 1023, 3071, 3072, 3073, 4096, 8191, 9216, 65_536, 70_000,
        ])
        .collect();
    let oracle = LabCrc::CrcFast;
    let mut report = CheckReport {
        lines: Vec::new(),
        passed: true,
    };
    for crc in LabCrc::ALL {
        if !crc.available() {
            report
                .lines
                .push(format!("{crc}: not available on this CPU"));
            continue;
        }
        let vectors_ok = vectors
            .iter()
            .filter(|v| crc.checksum(&v.input).map(sluice_digest::to_wire) == Some(v.wire))
            .count();
        let mut disagreements = 0;
        for &len in &lengths {
            for offset in [0, 1, 3] {
                let buf = &data[offset..offset + len];
                if crc.checksum(buf) != oracle.checksum(buf) {
                    disagreements += 1;
                }
            }
        }
        let mut methods_ok = true;
        for m in Method::ALL.into_iter().filter(|m| m.supports(crc)) {
            let src = &data[1..1 + 3 * super::fused::BLOCK + 77];
            let mut dst = vec![0u8; src.len()];
            let got = m.run(crc, &mut dst, src);
            let digest_ok =
                m == Method::Copy || got == crc.update(sluice_digest::INITIAL_STATE, src);
            let copy_ok = m == Method::Crc || dst == src;
            methods_ok &= digest_ok && copy_ok;
        }
        let ok = vectors_ok == vectors.len() && disagreements == 0 && methods_ok;
        report.passed &= ok;
        report.lines.push(format!(
            "{crc}: {vectors_ok} of {} RFC 3720 B.4 examples, {} of {} buffers agree with crc-fast, \
             copy methods {}: {}",
            vectors.len(),
            3 * lengths.len() - disagreements,
            3 * lengths.len(),
            if methods_ok { "correct" } else { "WRONG" },
            if ok { "ok" } else { "FAILED" }
        ));
    }
    report
}

/// What [`run`] reports as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A point is about to be timed.
    Point(&'a CrcPoint),
    /// A point was timed.
    Done(CrcRun),
    /// A point was done before (resume) or cannot run on this CPU.
    Skipped(&'a CrcPoint),
}

/// Times every point of `plan` whose key is not in `done`, calling `on` as it goes; stops
/// early when `stop` says so (an interrupted run resumes from its rows).
pub fn run(
    plan: &CrcPlan,
    done: &HashSet<String>,
    stop: &dyn Fn() -> bool,
    on: &mut dyn FnMut(Event<'_>),
) {
    // One cold set for every cold point, filled once.
    let needs_cold = plan
        .points
        .iter()
        .any(|p| p.temperature == Temperature::Cold && !done.contains(&p.key()));
    let cold = if needs_cold {
        buffer_for(
            1,
            Cache::Cold {
                set_bytes: plan.cold_set_bytes,
            },
        )
    } else {
        Vec::new()
    };
    for p in &plan.points {
        if stop() {
            return;
        }
        if done.contains(&p.key()) || !p.method.supports(p.crc) {
            on(Event::Skipped(p));
            continue;
        }
        on(Event::Point(p));
        let warm;
        let src: &[u8] = match p.temperature {
            Temperature::Warm => {
                warm = test_bytes(p.size);
                &warm
            }
            Temperature::Cold => &cold,
        };
        // The destination of a copy: one buffer, reused (a SCSI buffer the payload goes to).
        let mut dst = vec![0u8; p.size];
        let size = p.size;
        let slots = src.len() / size.max(1);
        let (crc, method) = (p.crc, p.method);
        let m = time_calls(size, slots, plan.trials, plan.trial_time, |slot| {
            let at = slot * size;
            method
                .run(crc, &mut dst, std::hint::black_box(&src[at..at + size]))
                .unwrap_or(0)
        });
        if let Some(m) = m {
            let set = match p.temperature {
                Temperature::Warm => size,
                Temperature::Cold => src.len(),
            };
            on(Event::Done(CrcRun::new(p, plan, set, m)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::table::{csv_header, csv_row, parse_csv};

    #[test]
    fn presets_exist_and_points_are_distinct() {
        for (name, _) in PRESETS {
            let plan = preset(name).unwrap();
            let keys: HashSet<String> = plan.points.iter().map(CrcPoint::key).collect();
            assert_eq!(keys.len(), plan.points.len(), "{name}");
            assert!(!plan.points.is_empty());
        }
        assert!(preset("nope").is_none());
    }

    #[test]
    fn every_algorithm_and_method_passes_the_checks() {
        let r = check();
        assert!(r.passed, "{:#?}", r.lines);
        assert_eq!(r.lines.len(), LabCrc::ALL.len());
    }

    #[test]
    fn a_run_times_what_is_not_done_and_rows_round_trip() {
        let mut plan = preset("tiny").unwrap();
        plan.points
            .retain(|p| p.size == 8192 && p.temperature == Temperature::Warm);
        plan.trials = 1;
        plan.trial_time = Duration::from_micros(100);
        let first = plan.points[0].key();
        let done: HashSet<String> = [first.clone()].into();
        let mut rows = Vec::new();
        let mut skipped = 0;
        run(&plan, &done, &|| false, &mut |e| match e {
            Event::Done(r) => rows.push(r),
            Event::Skipped(_) => skipped += 1,
            Event::Point(_) => {}
        });
        assert!(
            rows.iter().all(|r| r.key() != first),
            "the done point is not run again"
        );
        assert_eq!(rows.len() + skipped, plan.points.len());
        let text = format!(
            "{}\n{}\n",
            csv_header(&CrcRun::example()),
            rows.iter().map(csv_row).collect::<Vec<_>>().join("\n")
        );
        let back: Vec<CrcRun> = parse_csv(&text).unwrap();
        assert_eq!(back, rows);
        assert!(rows.iter().all(|r| r.gb_per_s() > 0.0));
    }
}
