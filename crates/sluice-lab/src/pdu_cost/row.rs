//! One row per point: what was run, what was negotiated, and the ticks of every stage in each
//! role, from which the per-PDU costs follow.

use sluice_probe::{Role, Stage, Totals};

use super::plan::{digest_name, key};
use crate::study::table::{Cells, Row, Value};

/// The measured cost of one point.
#[derive(Clone, Debug, PartialEq)]
pub struct PduRun {
    /// Its experiment.
    pub experiment: String,
    /// `read` or `write`.
    pub direction: String,
    /// Bytes per command.
    pub command_bytes: u32,
    /// The negotiated MaxRecvDataSegmentLength of the data's direction.
    pub pdu_bytes: u32,
    /// Header digest negotiated.
    pub header_digest: bool,
    /// Data digest negotiated.
    pub data_digest: bool,
    /// Commands in flight.
    pub outstanding: u32,
    /// Commands timed.
    pub commands: u64,
    /// Data PDUs moved (Data-In for reads, Data-Out for writes), by the initiator's count.
    pub data_pdus: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall-clock seconds of the timed commands.
    pub seconds: f64,
    /// TSC rate, ticks per second.
    pub tsc_hz: f64,
    /// CPU seconds of the target's threads over the timed commands.
    pub target_cpu_seconds: f64,
    /// CPU seconds of the initiator's threads.
    pub initiator_cpu_seconds: f64,
    /// Ticks per stage on the target's threads, in [`Stage::ALL`] order.
    pub target_ticks: [u64; 7],
    /// Ticks per stage on the initiator's threads.
    pub initiator_ticks: [u64; 7],
}

impl PduRun {
    /// The row's key (see [`super::PduPoint::key`]).
    #[must_use]
    pub fn key(&self) -> String {
        key(
            &self.experiment,
            &self.direction,
            self.command_bytes,
            self.pdu_bytes,
            self.digests(),
            self.outstanding,
        )
    }

    /// `none`, `header` or `both`.
    #[must_use]
    pub fn digests(&self) -> &'static str {
        digest_name(self.header_digest, self.data_digest)
    }

    /// Ticks per stage of `role`, from probe totals.
    #[must_use]
    pub fn ticks_of(totals: &Totals, role: Role) -> [u64; 7] {
        Stage::ALL.map(|s| totals.get(role, s).ticks)
    }

    fn ticks(&self, role: Role) -> &[u64; 7] {
        match role {
            Role::Target => &self.target_ticks,
            _ => &self.initiator_ticks,
        }
    }

    /// Ticks of `stage` in `role` per data PDU.
    #[must_use]
    pub fn per_pdu(&self, role: Role, stage: Stage) -> f64 {
        let i = Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0);
        self.ticks(role)[i] as f64 / self.data_pdus.max(1) as f64
    }

    /// Ticks of work (every stage but polling) in `role` per data PDU.
    #[must_use]
    pub fn work_per_pdu(&self, role: Role) -> f64 {
        Stage::ALL
            .iter()
            .filter(|s| **s != Stage::Poll)
            .map(|s| self.per_pdu(role, *s))
            .sum()
    }

    /// The share of `role`'s CPU time the probes account for as work: the rest went to busy
    /// polling, the runtime, locks and wake-ups outside any span. Above 1 when a thread was
    /// preempted inside a span (the TSC counts wall time).
    #[must_use]
    pub fn coverage(&self, role: Role) -> f64 {
        let cpu = match role {
            Role::Target => self.target_cpu_seconds,
            _ => self.initiator_cpu_seconds,
        };
        let work = self.work_per_pdu(role) * self.data_pdus.max(1) as f64;
        if cpu > 0.0 && self.tsc_hz > 0.0 {
            work / (cpu * self.tsc_hz)
        } else {
            0.0
        }
    }

    /// Payload MiB/s.
    #[must_use]
    pub fn mib_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / (1 << 20) as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// A row with every field set, for the CSV header.
    #[must_use]
    pub fn example() -> Self {
        Self {
            experiment: "sizes".into(),
            direction: "read".into(),
            command_bytes: 8192,
            pdu_bytes: 8192,
            header_digest: false,
            data_digest: false,
            outstanding: 1,
            commands: 1,
            data_pdus: 1,
            bytes: 8192,
            seconds: 1.0,
            tsc_hz: 1.0,
            target_cpu_seconds: 0.0,
            initiator_cpu_seconds: 0.0,
            target_ticks: [0; 7],
            initiator_ticks: [0; 7],
        }
    }
}

/// Column names of the per-stage ticks.
const TARGET_COLUMNS: [&str; 7] = [
    "target_syscall",
    "target_framing",
    "target_crc",
    "target_copy",
    "target_protocol",
    "target_scsi",
    "target_poll",
];
const INITIATOR_COLUMNS: [&str; 7] = [
    "initiator_syscall",
    "initiator_framing",
    "initiator_crc",
    "initiator_copy",
    "initiator_protocol",
    "initiator_scsi",
    "initiator_poll",
];

impl Row for PduRun {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        use Value::{Bool, Float, Text, UInt};
        let mut f = vec![
            ("experiment", Text(self.experiment.clone())),
            ("direction", Text(self.direction.clone())),
            ("command_bytes", UInt(self.command_bytes.into())),
            ("pdu_bytes", UInt(self.pdu_bytes.into())),
            ("header_digest", Bool(self.header_digest)),
            ("data_digest", Bool(self.data_digest)),
            ("outstanding", UInt(self.outstanding.into())),
            ("commands", UInt(self.commands)),
            ("data_pdus", UInt(self.data_pdus)),
            ("bytes", UInt(self.bytes)),
            ("seconds", Float(self.seconds)),
            ("mib_per_s", Float(self.mib_per_s())),
            ("tsc_hz", Float(self.tsc_hz)),
            ("target_cpu_seconds", Float(self.target_cpu_seconds)),
            ("initiator_cpu_seconds", Float(self.initiator_cpu_seconds)),
        ];
        for (name, t) in TARGET_COLUMNS.iter().zip(self.target_ticks) {
            f.push((name, UInt(t)));
        }
        for (name, t) in INITIATOR_COLUMNS.iter().zip(self.initiator_ticks) {
            f.push((name, UInt(t)));
        }
        f.push((
            "target_work_per_pdu",
            Float(self.work_per_pdu(Role::Target)),
        ));
        f.push((
            "initiator_work_per_pdu",
            Float(self.work_per_pdu(Role::Initiator)),
        ));
        f
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        let ticks = |cols: &[&str; 7]| -> Result<[u64; 7], String> {
            let mut out = [0; 7];
            for (o, name) in out.iter_mut().zip(cols) {
                *o = c.uint(name)?;
            }
            Ok(out)
        };
        Ok(Self {
            experiment: c.text("experiment")?.to_owned(),
            direction: c.text("direction")?.to_owned(),
            command_bytes: c.small("command_bytes")?,
            pdu_bytes: c.small("pdu_bytes")?,
            header_digest: c.flag("header_digest")?,
            data_digest: c.flag("data_digest")?,
            outstanding: c.small("outstanding")?,
            commands: c.uint("commands")?,
            data_pdus: c.uint("data_pdus")?,
            bytes: c.uint("bytes")?,
            seconds: c.float("seconds")?,
            tsc_hz: c.float("tsc_hz")?,
            target_cpu_seconds: c.float("target_cpu_seconds")?,
            initiator_cpu_seconds: c.float("initiator_cpu_seconds")?,
            target_ticks: ticks(&TARGET_COLUMNS)?,
            initiator_ticks: ticks(&INITIATOR_COLUMNS)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::table::{csv_header, csv_row, parse_csv};

    #[test]
    fn rows_round_trip_and_costs_follow_from_ticks() {
        let mut r = PduRun::example();
        r.data_pdus = 10;
        r.target_ticks = [100, 200, 300, 0, 400, 500, 9999];
        r.initiator_ticks = [10, 20, 30, 40, 50, 0, 0];
        r.target_cpu_seconds = 0.000_001;
        r.tsc_hz = 1e9;
        let text = format!("{}\n{}\n", csv_header(&r), csv_row(&r));
        let back: Vec<PduRun> = parse_csv(&text).unwrap();
        assert_eq!(back, vec![r.clone()]);
        assert_eq!(r.per_pdu(Role::Target, Stage::Crc), 30.0);
        assert_eq!(r.work_per_pdu(Role::Target), 150.0, "polling is not work");
        assert!((r.coverage(Role::Target) - 1.5).abs() < 1e-9);
    }
}
