//! One row per run: the point, what the login actually negotiated, what was measured, what
//! RFC 7143 predicted; written and read back as CSV (resuming a sweep reads its own file).

use sluice_proto::initiator::Policy;
use sluice_proto::params::SessionParams;

use super::point::{Direction, Point};
use super::predict::PerCommand;
pub use crate::study::table::Value;
use crate::study::table::{self, clean, Cells, Row};

/// What the leading login negotiated, in the point's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    /// The initiator's MaxRecvDataSegmentLength (what the target may send).
    pub initiator_mrdsl: u32,
    /// The target's MaxRecvDataSegmentLength.
    pub target_mrdsl: u32,
    /// MaxBurstLength.
    pub max_burst: u32,
    /// FirstBurstLength.
    pub first_burst: u32,
    /// ImmediateData.
    pub immediate_data: bool,
    /// InitialR2T.
    pub initial_r2t: bool,
    /// MaxOutstandingR2T.
    pub max_outstanding_r2t: u16,
    /// DataPDUInOrder.
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder.
    pub data_sequence_in_order: bool,
    /// HeaderDigest=CRC32C.
    pub header_digest: bool,
    /// DataDigest=CRC32C.
    pub data_digest: bool,
    /// Connections the session actually opened.
    pub connections: u16,
}

impl Negotiated {
    /// From a session's parameters and its number of connections.
    pub fn new(p: &SessionParams, connections: u16) -> Self {
        Self {
            initiator_mrdsl: p.initiator_max_recv_data_segment_length,
            target_mrdsl: p.target_max_recv_data_segment_length,
            max_burst: p.max_burst_length,
            first_burst: p.first_burst_length,
            immediate_data: p.immediate_data,
            initial_r2t: p.initial_r2t,
            max_outstanding_r2t: p.max_outstanding_r2t,
            data_pdu_in_order: p.data_pdu_in_order,
            data_sequence_in_order: p.data_sequence_in_order,
            header_digest: p.header_digest,
            data_digest: p.data_digest,
            connections,
        }
    }

    /// The keys whose negotiated value differs from the point's, as `Key=got (wanted W)`.
    /// FirstBurstLength does not count when no unsolicited data can flow (ImmediateData=No
    /// and InitialR2T=Yes), nor write-only keys for reads.
    pub fn differences(&self, p: &Point) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |name: &str, got: String, want: String| {
            if got != want {
                out.push(format!("{name}={got} (wanted {want})"));
            }
        };
        let write = p.direction == Direction::Write;
        check(
            "MaxRecvDataSegmentLength(initiator)",
            self.initiator_mrdsl.to_string(),
            p.initiator_mrdsl.to_string(),
        );
        if write {
            check(
                "MaxRecvDataSegmentLength(target)",
                self.target_mrdsl.to_string(),
                p.target_mrdsl.to_string(),
            );
        }
        check(
            "MaxBurstLength",
            self.max_burst.to_string(),
            p.max_burst.to_string(),
        );
        if write {
            if p.immediate_data || !p.initial_r2t {
                check(
                    "FirstBurstLength",
                    self.first_burst.to_string(),
                    p.first_burst.to_string(),
                );
            }
            check(
                "ImmediateData",
                self.immediate_data.to_string(),
                p.immediate_data.to_string(),
            );
            check(
                "InitialR2T",
                self.initial_r2t.to_string(),
                p.initial_r2t.to_string(),
            );
            check(
                "MaxOutstandingR2T",
                self.max_outstanding_r2t.to_string(),
                p.max_outstanding_r2t.to_string(),
            );
        }
        check(
            "DataPDUInOrder",
            self.data_pdu_in_order.to_string(),
            p.data_pdu_in_order.to_string(),
        );
        check(
            "DataSequenceInOrder",
            self.data_sequence_in_order.to_string(),
            p.data_sequence_in_order.to_string(),
        );
        check(
            "HeaderDigest",
            self.header_digest.to_string(),
            p.header_digest.to_string(),
        );
        check(
            "DataDigest",
            self.data_digest.to_string(),
            p.data_digest.to_string(),
        );
        check(
            "connections",
            self.connections.to_string(),
            p.connections.to_string(),
        );
        out
    }
}

/// What one run measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Measured {
    /// Application bytes moved.
    pub bytes: u64,
    /// Commands completed.
    pub commands: u64,
    /// From the first command to the last status.
    pub seconds: f64,
    /// CPU seconds the target process used during the run, when it runs here.
    pub target_cpu_seconds: Option<f64>,
    /// CPU seconds the initiator (this process) used during the run.
    pub initiator_cpu_seconds: f64,
    /// Commands that failed.
    pub errors: u64,
    /// PDUs and write data per command, from the initiator's counters.
    pub per_command: PerCommand,
}

impl Measured {
    /// Throughput in MiB/s (the paper's MB/s: 2^20 bytes).
    pub fn mib_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / f64::from(1u32 << 20) / self.seconds
        } else {
            0.0
        }
    }

    /// Milliseconds per MiB: the paper's t in equations (1) and (2).
    pub fn ms_per_mib(&self) -> f64 {
        let r = self.mib_per_s();
        if r > 0.0 {
            1000.0 / r
        } else {
            f64::INFINITY
        }
    }
}

/// One run of one point.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// The experiment (figure group) it belongs to.
    pub experiment: String,
    /// Which target: `sluice` when spawned, else what `--target` named.
    pub implementation: String,
    /// The grid's values.
    pub point: Point,
    /// Index of the run at this point (0-based).
    pub run: u32,
    /// What the login negotiated.
    pub negotiated: Negotiated,
    /// What was measured.
    pub measured: Measured,
    /// What RFC 7143 predicts per command.
    pub predicted: PerCommand,
    /// Negotiated values that differ from the grid (empty: none); such a run is flagged and
    /// kept out of plots and fits.
    pub mismatch: Vec<String>,
}

impl RunRecord {
    /// Where the initiator's counts differ from the prediction (empty: they agree). Counts
    /// are compared per command to within half a PDU / byte.
    pub fn pdu_differences(&self) -> Vec<String> {
        let m = &self.measured.per_command;
        let p = &self.predicted;
        let pairs = [
            ("data_in", m.data_in, p.data_in),
            ("data_out", m.data_out, p.data_out),
            ("r2t", m.r2t, p.r2t),
            ("responses", m.responses, p.responses),
            ("immediate_bytes", m.immediate_bytes, p.immediate_bytes),
            (
                "unsolicited_bytes",
                m.unsolicited_bytes,
                p.unsolicited_bytes,
            ),
            ("solicited_bytes", m.solicited_bytes, p.solicited_bytes),
        ];
        pairs
            .iter()
            .filter(|(_, got, want)| (got - want).abs() > 0.5)
            .map(|(n, got, want)| format!("{n} {got:.2}/command (RFC 7143 predicts {want})"))
            .collect()
    }

    /// Whether the run may be plotted and fitted: negotiated as the grid asked, no failed
    /// command, and something moved.
    pub fn usable(&self) -> bool {
        self.mismatch.is_empty() && self.measured.errors == 0 && self.measured.seconds > 0.0
    }

    /// The CSV header line.
    pub fn csv_header() -> String {
        table::csv_header(&RunRecord::example())
    }

    /// This run as one CSV line.
    pub fn csv_row(&self) -> String {
        table::csv_row(self)
    }

    /// Reads a CSV file written by [`Self::csv_header`] and [`Self::csv_row`].
    pub fn parse_csv(text: &str) -> Result<Vec<RunRecord>, String> {
        table::parse_csv(text)
    }

    /// A record with every field set, for the header and tests.
    pub fn example() -> RunRecord {
        RunRecord {
            experiment: "example".into(),
            implementation: "sluice".into(),
            point: Point::default(),
            run: 0,
            negotiated: Negotiated::default(),
            measured: Measured::default(),
            predicted: PerCommand::default(),
            mismatch: Vec::new(),
        }
    }
}

impl Row for RunRecord {
    /// Every column, in order, with its value.
    fn fields(&self) -> Vec<(&'static str, Value)> {
        use Value::{Bool, Float, Text, UInt};
        let p = &self.point;
        let n = &self.negotiated;
        let m = &self.measured;
        let mc = &m.per_command;
        let pc = &self.predicted;
        vec![
            ("experiment", Text(self.experiment.clone())),
            ("implementation", Text(self.implementation.clone())),
            ("run", UInt(self.run.into())),
            ("direction", Text(p.direction.name().into())),
            ("initiator_mrdsl", UInt(p.initiator_mrdsl.into())),
            ("target_mrdsl", UInt(p.target_mrdsl.into())),
            ("max_burst", UInt(p.max_burst.into())),
            ("first_burst", UInt(p.first_burst.into())),
            ("immediate_data", Bool(p.immediate_data)),
            ("initial_r2t", Bool(p.initial_r2t)),
            ("max_outstanding_r2t", UInt(p.max_outstanding_r2t.into())),
            ("data_pdu_in_order", Bool(p.data_pdu_in_order)),
            ("data_sequence_in_order", Bool(p.data_sequence_in_order)),
            ("phase_collapse", Bool(p.phase_collapse)),
            ("header_digest", Bool(p.header_digest)),
            ("data_digest", Bool(p.data_digest)),
            ("outstanding", UInt(p.outstanding.into())),
            ("command_bytes", UInt(p.command_bytes.into())),
            ("luns", UInt(p.luns.into())),
            ("connections", UInt(p.connections.into())),
            ("policy", Text(p.policy.name().into())),
            ("neg_initiator_mrdsl", UInt(n.initiator_mrdsl.into())),
            ("neg_target_mrdsl", UInt(n.target_mrdsl.into())),
            ("neg_max_burst", UInt(n.max_burst.into())),
            ("neg_first_burst", UInt(n.first_burst.into())),
            ("neg_immediate_data", Bool(n.immediate_data)),
            ("neg_initial_r2t", Bool(n.initial_r2t)),
            (
                "neg_max_outstanding_r2t",
                UInt(n.max_outstanding_r2t.into()),
            ),
            ("neg_data_pdu_in_order", Bool(n.data_pdu_in_order)),
            ("neg_data_sequence_in_order", Bool(n.data_sequence_in_order)),
            ("neg_header_digest", Bool(n.header_digest)),
            ("neg_data_digest", Bool(n.data_digest)),
            ("neg_connections", UInt(n.connections.into())),
            ("bytes", UInt(m.bytes)),
            ("commands", UInt(m.commands)),
            ("seconds", Float(m.seconds)),
            ("mib_per_s", Float(m.mib_per_s())),
            ("ms_per_mib", Float(m.ms_per_mib())),
            (
                "target_cpu_seconds",
                m.target_cpu_seconds.map_or(Value::Missing, Float),
            ),
            ("initiator_cpu_seconds", Float(m.initiator_cpu_seconds)),
            ("errors", UInt(m.errors)),
            ("data_in_per_command", Float(mc.data_in)),
            ("data_out_per_command", Float(mc.data_out)),
            ("r2t_per_command", Float(mc.r2t)),
            ("responses_per_command", Float(mc.responses)),
            ("immediate_bytes_per_command", Float(mc.immediate_bytes)),
            ("unsolicited_bytes_per_command", Float(mc.unsolicited_bytes)),
            ("solicited_bytes_per_command", Float(mc.solicited_bytes)),
            ("predicted_data_in", Float(pc.data_in)),
            ("predicted_data_out", Float(pc.data_out)),
            ("predicted_r2t", Float(pc.r2t)),
            ("predicted_responses", Float(pc.responses)),
            ("predicted_immediate_bytes", Float(pc.immediate_bytes)),
            ("predicted_unsolicited_bytes", Float(pc.unsolicited_bytes)),
            ("predicted_solicited_bytes", Float(pc.solicited_bytes)),
            ("pdu_check", Text(clean(&self.pdu_differences().join("; ")))),
            ("mismatch", Text(clean(&self.mismatch.join("; ")))),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<RunRecord, String> {
        let point = Point {
            direction: Direction::from_name(c.text("direction")?)
                .ok_or("direction is neither read nor write")?,
            initiator_mrdsl: c.small("initiator_mrdsl")?,
            target_mrdsl: c.small("target_mrdsl")?,
            max_burst: c.small("max_burst")?,
            first_burst: c.small("first_burst")?,
            immediate_data: c.flag("immediate_data")?,
            initial_r2t: c.flag("initial_r2t")?,
            max_outstanding_r2t: c.small("max_outstanding_r2t")?,
            data_pdu_in_order: c.flag("data_pdu_in_order")?,
            data_sequence_in_order: c.flag("data_sequence_in_order")?,
            phase_collapse: c.flag("phase_collapse")?,
            header_digest: c.flag("header_digest")?,
            data_digest: c.flag("data_digest")?,
            outstanding: c.small("outstanding")?,
            command_bytes: c.small("command_bytes")?,
            luns: c.small("luns")?,
            connections: c.small("connections")?,
            policy: Policy::from_name(c.text("policy")?).ok_or("unknown policy")?,
        };
        Ok(RunRecord {
            experiment: c.text("experiment")?.to_owned(),
            implementation: c.text("implementation")?.to_owned(),
            run: c.small("run")?,
            point,
            negotiated: Negotiated {
                initiator_mrdsl: c.small("neg_initiator_mrdsl")?,
                target_mrdsl: c.small("neg_target_mrdsl")?,
                max_burst: c.small("neg_max_burst")?,
                first_burst: c.small("neg_first_burst")?,
                immediate_data: c.flag("neg_immediate_data")?,
                initial_r2t: c.flag("neg_initial_r2t")?,
                max_outstanding_r2t: c.small("neg_max_outstanding_r2t")?,
                data_pdu_in_order: c.flag("neg_data_pdu_in_order")?,
                data_sequence_in_order: c.flag("neg_data_sequence_in_order")?,
                header_digest: c.flag("neg_header_digest")?,
                data_digest: c.flag("neg_data_digest")?,
                connections: c.small("neg_connections")?,
            },
            measured: Measured {
                bytes: c.uint("bytes")?,
                commands: c.uint("commands")?,
                seconds: c.float("seconds")?,
                target_cpu_seconds: c.optional_float("target_cpu_seconds")?,
                initiator_cpu_seconds: c.float("initiator_cpu_seconds")?,
                errors: c.uint("errors")?,
                per_command: PerCommand {
                    data_in: c.float("data_in_per_command")?,
                    data_out: c.float("data_out_per_command")?,
                    r2t: c.float("r2t_per_command")?,
                    responses: c.float("responses_per_command")?,
                    immediate_bytes: c.float("immediate_bytes_per_command")?,
                    unsolicited_bytes: c.float("unsolicited_bytes_per_command")?,
                    solicited_bytes: c.float("solicited_bytes_per_command")?,
                },
            },
            predicted: PerCommand {
                data_in: c.float("predicted_data_in")?,
                data_out: c.float("predicted_data_out")?,
                r2t: c.float("predicted_r2t")?,
                responses: c.float("predicted_responses")?,
                immediate_bytes: c.float("predicted_immediate_bytes")?,
                unsolicited_bytes: c.float("predicted_unsolicited_bytes")?,
                solicited_bytes: c.float("predicted_solicited_bytes")?,
            },
            mismatch: c.list("mismatch")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips() {
        let mut r = RunRecord::example();
        r.point.direction = Direction::Write;
        r.point.policy = Policy::LuAffinity;
        r.measured.seconds = 0.125;
        r.measured.bytes = 1 << 20;
        r.measured.target_cpu_seconds = Some(0.5);
        r.measured.per_command.data_in = 3.5;
        r.mismatch = vec!["MaxBurstLength=512 (wanted 1024)".into(), "x, y".into()];
        let text = format!("{}\n{}\n", RunRecord::csv_header(), r.csv_row());
        let back = RunRecord::parse_csv(&text).unwrap();
        assert_eq!(back.len(), 1);
        let mut want = r.clone();
        want.mismatch[1] = "x  y".into();
        assert_eq!(back[0], want);
        assert_eq!(back[0].measured.mib_per_s(), 8.0);
    }

    #[test]
    fn a_short_row_is_an_error() {
        let text = format!("{}\nread,1,2\n", RunRecord::csv_header());
        assert!(RunRecord::parse_csv(&text).unwrap_err().contains("row 2"));
    }

    #[test]
    fn differences_name_the_key_and_both_values() {
        let p = Point::default().bursts(4096);
        let mut n = Negotiated {
            initiator_mrdsl: 8192,
            target_mrdsl: 8192,
            max_burst: 4096,
            first_burst: 4096,
            immediate_data: true,
            initial_r2t: true,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            header_digest: false,
            data_digest: false,
            connections: 1,
        };
        assert!(n.differences(&p).is_empty());
        n.max_burst = 2048;
        assert_eq!(
            n.differences(&p),
            vec!["MaxBurstLength=2048 (wanted 4096)".to_string()]
        );
    }
}
