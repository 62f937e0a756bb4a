//! One row of `sluice lab iser`: what was asked, what the login negotiated, what moved and
//! what it cost.

use super::plan::{key, Direction, IserPoint, Lun, Transport};
use crate::study::table::{Cells, Row, Value};

/// One measured run.
#[derive(Clone, Debug, PartialEq)]
pub struct IserRun {
    /// What was asked.
    pub point: IserPoint,
    /// Commands (RDMA operations) in flight.
    pub queue_depth: u32,
    /// Negotiated MaxRecvDataSegmentLength in the run's data direction (0 for raw runs); in
    /// RDMA mode the iSER key that replaces it, Initiator- or TargetRecvDataSegmentLength,
    /// which bounds only Sends (data moved by RDMA is not cut to it).
    pub mrdsl: u32,
    /// Negotiated MaxBurstLength (0 for raw runs).
    pub max_burst: u32,
    /// Negotiated InitialR2T.
    pub initial_r2t: bool,
    /// Negotiated ImmediateData.
    pub immediate_data: bool,
    /// The connection ran in RDMA mode (the target counted an iSER connection).
    pub rdma_mode: bool,
    /// Commands (raw: RDMA operations) completed.
    pub commands: u64,
    /// Commands failed.
    pub errors: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// CPU seconds this process (both ends) used during the run.
    pub cpu_seconds: f64,
    /// Data-In PDUs the initiator's session core handled (over iSER they never cross the
    /// wire: each became part of an RDMA Write).
    pub data_in_pdus: u64,
    /// Data-Out PDUs the session core produced (over iSER: none, the target RDMA-Reads).
    pub data_out_pdus: u64,
    /// R2T PDUs the session core handled.
    pub r2t_pdus: u64,
    /// Commands of the whole session, warm-up included: what the target's counts below cover.
    pub session_commands: u64,
    /// RDMA Writes the target posted (read data placed in the initiator's buffers).
    pub rdma_writes: u64,
    /// RDMA Reads the target posted (write data fetched from the initiator's buffers).
    pub rdma_reads: u64,
    /// iSER Sends the target posted and received (control PDUs).
    pub sends: u64,
}

impl IserRun {
    /// Identifies the run (see [`IserPoint::key`]).
    #[must_use]
    pub fn key(&self) -> String {
        self.point.key()
    }

    /// Payload throughput, Mbit/s.
    #[must_use]
    pub fn mbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.seconds.max(1e-9) / 1e6
    }

    /// CPU nanoseconds per payload byte, both ends together.
    #[must_use]
    pub fn cpu_ns_per_byte(&self) -> f64 {
        self.cpu_seconds * 1e9 / (self.bytes.max(1) as f64)
    }

    /// A row with every column, for the CSV header.
    #[must_use]
    pub fn example() -> Self {
        IserRun {
            point: IserPoint {
                transport: Transport::Tcp,
                lun: Some(Lun::Memory),
                direction: Direction::Read,
                transfer_bytes: 0,
                rep: 0,
            },
            queue_depth: 0,
            mrdsl: 0,
            max_burst: 0,
            initial_r2t: false,
            immediate_data: false,
            rdma_mode: false,
            commands: 0,
            errors: 0,
            bytes: 0,
            seconds: 0.0,
            cpu_seconds: 0.0,
            data_in_pdus: 0,
            data_out_pdus: 0,
            r2t_pdus: 0,
            session_commands: 0,
            rdma_writes: 0,
            rdma_reads: 0,
            sends: 0,
        }
    }
}

impl Row for IserRun {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let u = Value::UInt;
        vec![
            ("transport", Value::Text(self.point.transport.name().into())),
            (
                "lun",
                Value::Text(self.point.lun.map_or("", Lun::name).into()),
            ),
            ("direction", Value::Text(self.point.direction.name().into())),
            ("transfer_bytes", u(self.point.transfer_bytes.into())),
            ("rep", u(self.point.rep.into())),
            ("queue_depth", u(self.queue_depth.into())),
            ("mrdsl", u(self.mrdsl.into())),
            ("max_burst", u(self.max_burst.into())),
            ("initial_r2t", Value::Bool(self.initial_r2t)),
            ("immediate_data", Value::Bool(self.immediate_data)),
            ("rdma_mode", Value::Bool(self.rdma_mode)),
            ("commands", u(self.commands)),
            ("errors", u(self.errors)),
            ("bytes", u(self.bytes)),
            ("seconds", Value::Float(self.seconds)),
            ("mbit_per_s", Value::Float(self.mbit_per_s())),
            ("cpu_seconds", Value::Float(self.cpu_seconds)),
            ("cpu_ns_per_byte", Value::Float(self.cpu_ns_per_byte())),
            ("data_in_pdus", u(self.data_in_pdus)),
            ("data_out_pdus", u(self.data_out_pdus)),
            ("r2t_pdus", u(self.r2t_pdus)),
            ("session_commands", u(self.session_commands)),
            ("rdma_writes", u(self.rdma_writes)),
            ("rdma_reads", u(self.rdma_reads)),
            ("sends", u(self.sends)),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        let transport = c.text("transport")?;
        let direction = c.text("direction")?;
        let lun = match c.text("lun")? {
            "" => None,
            name => Some(Lun::from_name(name).ok_or_else(|| format!("unknown LUN {name}"))?),
        };
        Ok(IserRun {
            point: IserPoint {
                transport: Transport::from_name(transport)
                    .ok_or_else(|| format!("unknown transport {transport}"))?,
                lun,
                direction: Direction::from_name(direction)
                    .ok_or_else(|| format!("unknown direction {direction}"))?,
                transfer_bytes: c.small("transfer_bytes")?,
                rep: c.small("rep")?,
            },
            queue_depth: c.small("queue_depth")?,
            mrdsl: c.small("mrdsl")?,
            max_burst: c.small("max_burst")?,
            initial_r2t: c.flag("initial_r2t")?,
            immediate_data: c.flag("immediate_data")?,
            rdma_mode: c.flag("rdma_mode")?,
            commands: c.uint("commands")?,
            errors: c.uint("errors")?,
            bytes: c.uint("bytes")?,
            seconds: c.float("seconds")?,
            cpu_seconds: c.float("cpu_seconds")?,
            data_in_pdus: c.uint("data_in_pdus")?,
            data_out_pdus: c.uint("data_out_pdus")?,
            r2t_pdus: c.uint("r2t_pdus")?,
            session_commands: c.uint("session_commands")?,
            rdma_writes: c.uint("rdma_writes")?,
            rdma_reads: c.uint("rdma_reads")?,
            sends: c.uint("sends")?,
        })
    }
}

/// The key of a row read back (for resume).
#[must_use]
pub fn row_key(r: &IserRun) -> String {
    key(
        r.point.transport.name(),
        r.point.lun,
        r.point.direction.name(),
        r.point.transfer_bytes,
        r.point.rep,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::table::{csv_header, csv_row, parse_csv};

    #[test]
    fn a_row_survives_the_csv() {
        let mut r = IserRun::example();
        r.point.transport = Transport::Iser;
        r.point.lun = Some(Lun::Null);
        r.point.direction = Direction::Write;
        r.point.transfer_bytes = 1 << 20;
        r.rdma_mode = true;
        r.bytes = 10 << 20;
        r.seconds = 0.5;
        r.cpu_seconds = 0.25;
        r.rdma_reads = 10;
        let text = format!("{}\n{}\n", csv_header(&r), csv_row(&r));
        let back: Vec<IserRun> = parse_csv(&text).unwrap();
        assert_eq!(back, vec![r.clone()]);
        assert_eq!(row_key(&back[0]), r.key());
        assert!((r.mbit_per_s() - 167.772_16).abs() < 1e-3);
        assert_eq!(r.key(), "iser+null/write/1048576/0");
        // A raw run has no LUN: an empty cell, read back as none.
        r.point.transport = Transport::Raw;
        r.point.lun = None;
        let text = format!("{}\n{}\n", csv_header(&r), csv_row(&r));
        let back: Vec<IserRun> = parse_csv(&text).unwrap();
        assert_eq!(back, vec![r.clone()]);
        assert_eq!(row_key(&back[0]), "rdma-raw/write/1048576/0");
    }
}
