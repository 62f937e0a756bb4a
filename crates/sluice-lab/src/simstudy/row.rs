//! One row per run: the point (figure, series, x), what was negotiated, the link, and what
//! the run measured (response times and their parts, the study's equations 5.3-5.6, losses,
//! retransmissions, simulation cost).

use sluice_sim::experiment::{Outcome, Transport};

use super::plan::{key, SimPoint};
use crate::study::table::{clean, Cells, Row, Value};

/// One run's results.
#[derive(Clone, Debug, PartialEq)]
pub struct SimRun {
    /// `fig5.3`, ...
    pub figure: String,
    /// The line it belongs to.
    pub series: String,
    /// `study` or `today`.
    pub setup: String,
    /// The x value.
    pub x: f64,
    /// `tcp` or `udp`.
    pub transport: String,
    /// The commands, described.
    pub workload: String,
    /// ErrorRecoveryLevel.
    pub erl: u8,
    /// FirstBurstLength.
    pub first_burst: u32,
    /// MaxBurstLength.
    pub max_burst: u32,
    /// MaxRecvDataSegmentLength (both directions the same here).
    pub mrdsl: u32,
    /// ImmediateData.
    pub immediate_data: bool,
    /// InitialR2T.
    pub initial_r2t: bool,
    /// MaxOutstandingR2T.
    pub max_outstanding_r2t: u16,
    /// The command window.
    pub queue_depth: u32,
    /// Link rate, bits per second.
    pub link_bps: u64,
    /// One-way delay, seconds.
    pub delay_s: f64,
    /// Drop-tail queue, packets.
    pub queue_packets: u64,
    /// Bit error rate.
    pub ber: f64,
    /// TransferContext timeout, seconds.
    pub transfer_context_s: f64,
    /// Commands.
    pub commands: u64,
    /// Commands that did not end GOOD.
    pub failed: u64,
    /// Mean response time t4 - t1 of the completed commands, seconds.
    pub response_s: f64,
    /// Mean t2 - t1 (waiting for the command window), seconds.
    pub t21_s: f64,
    /// Mean t3 - t2 (the command's transfer), seconds.
    pub t32_s: f64,
    /// Mean t4 - t3 (the data and the status), seconds.
    pub t43_s: f64,
    /// Mean t5 - t4 over the commands whose status was acknowledged, seconds.
    pub t54_s: Option<f64>,
    /// Observation interval T, seconds.
    pub interval_s: f64,
    /// X_c, commands per second (5.3).
    pub command_throughput: f64,
    /// X_d, bytes per second (5.4).
    pub data_throughput: f64,
    /// U (5.5).
    pub utilisation: f64,
    /// λ, commands per second (5.6).
    pub arrival_rate: f64,
    /// Packets dropped at full queues, both ways.
    pub dropped: u64,
    /// Packets corrupted, both ways.
    pub corrupted: u64,
    /// TCP retransmissions, both senders.
    pub retransmits: u64,
    /// TCP retransmission timeouts, both senders.
    pub rto: u64,
    /// PDUs lost with their datagram (UDP).
    pub pdus_lost: u64,
    /// SCSI Command PDUs sent beyond one per command (iSCSI retries).
    pub command_retries: u64,
    /// Simulator events.
    pub events: u64,
    /// Virtual seconds.
    pub virtual_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// The first failure, if any.
    pub failure: String,
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0u64), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

impl SimRun {
    /// The row of `point`'s run.
    #[must_use]
    pub fn new(point: &SimPoint, out: &Outcome) -> Self {
        let p = point.params;
        let done: Vec<_> = out
            .commands
            .iter()
            .filter(|c| c.failure.is_none())
            .collect();
        let span = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / 1e9),
            _ => None,
        };
        let acked: Vec<f64> = done.iter().filter_map(|c| span(c.t4, c.t5)).collect();
        let tcp = [out.initiator_tcp, out.target_tcp];
        Self {
            figure: point.figure.to_owned(),
            series: point.series.clone(),
            setup: point.setup.name().to_owned(),
            x: point.x,
            transport: match point.transport {
                Transport::Tcp(_) => "tcp",
                Transport::Udp => "udp",
            }
            .to_owned(),
            workload: point.workload.describe(),
            erl: p.error_recovery_level,
            first_burst: p.first_burst_length,
            max_burst: p.max_burst_length,
            mrdsl: p.target_max_recv_data_segment_length,
            immediate_data: p.immediate_data,
            initial_r2t: p.initial_r2t,
            max_outstanding_r2t: p.max_outstanding_r2t,
            queue_depth: point.queue_depth,
            link_bps: point.link.bits_per_sec,
            delay_s: point.link.delay_ns as f64 / 1e9,
            queue_packets: point.link.queue_packets as u64,
            ber: point.link.ber,
            transfer_context_s: point.timeouts.transfer_context.as_secs_f64(),
            commands: out.commands.len() as u64,
            failed: out.failures() as u64,
            response_s: mean(done.iter().filter_map(|c| span(Some(c.t1), c.t4))),
            t21_s: mean(done.iter().filter_map(|c| span(Some(c.t1), c.t2))),
            t32_s: mean(done.iter().filter_map(|c| span(c.t2, c.t3))),
            t43_s: mean(done.iter().filter_map(|c| span(c.t3, c.t4))),
            t54_s: (!acked.is_empty()).then(|| mean(acked.iter().copied())),
            interval_s: out.metrics.interval_s,
            command_throughput: out.metrics.command_throughput,
            data_throughput: out.metrics.data_throughput,
            utilisation: out.metrics.utilisation,
            arrival_rate: out.metrics.arrival_rate,
            dropped: out.up.dropped + out.down.dropped,
            corrupted: out.up.corrupted + out.down.corrupted,
            retransmits: tcp.iter().map(|t| t.retransmits).sum(),
            rto: tcp.iter().map(|t| t.timeouts).sum(),
            pdus_lost: out.pdus_lost,
            command_retries: out
                .commands
                .iter()
                .map(|c| u64::from(c.attempts.saturating_sub(1)))
                .sum(),
            events: out.events,
            virtual_s: out.virtual_ns as f64 / 1e9,
            wall_s: out.wall.as_secs_f64(),
            failure: out
                .commands
                .iter()
                .find_map(|c| c.failure.clone())
                .map(|f| clean(&f))
                .unwrap_or_default(),
        }
    }

    /// The row's key (see [`SimPoint::key`]).
    #[must_use]
    pub fn key(&self) -> String {
        key(&self.figure, &self.series, self.x)
    }

    /// Simulated commands per wall-clock second.
    #[must_use]
    pub fn ios_per_wall_second(&self) -> f64 {
        self.commands as f64 / self.wall_s.max(1e-9)
    }

    /// A row with every column, for the CSV header.
    #[must_use]
    pub fn example() -> Self {
        Self {
            figure: String::new(),
            series: String::new(),
            setup: String::new(),
            x: 0.0,
            transport: String::new(),
            workload: String::new(),
            erl: 0,
            first_burst: 0,
            max_burst: 0,
            mrdsl: 0,
            immediate_data: false,
            initial_r2t: false,
            max_outstanding_r2t: 0,
            queue_depth: 0,
            link_bps: 0,
            delay_s: 0.0,
            queue_packets: 0,
            ber: 0.0,
            transfer_context_s: 0.0,
            commands: 0,
            failed: 0,
            response_s: 0.0,
            t21_s: 0.0,
            t32_s: 0.0,
            t43_s: 0.0,
            t54_s: None,
            interval_s: 0.0,
            command_throughput: 0.0,
            data_throughput: 0.0,
            utilisation: 0.0,
            arrival_rate: 0.0,
            dropped: 0,
            corrupted: 0,
            retransmits: 0,
            rto: 0,
            pdus_lost: 0,
            command_retries: 0,
            events: 0,
            virtual_s: 0.0,
            wall_s: 0.0,
            failure: String::new(),
        }
    }
}

impl Row for SimRun {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        use Value::{Bool, Float, Text, UInt};
        vec![
            ("figure", Text(self.figure.clone())),
            ("series", Text(clean(&self.series))),
            ("setup", Text(self.setup.clone())),
            ("x", Float(self.x)),
            ("transport", Text(self.transport.clone())),
            ("workload", Text(clean(&self.workload))),
            ("erl", UInt(u64::from(self.erl))),
            ("first_burst", UInt(u64::from(self.first_burst))),
            ("max_burst", UInt(u64::from(self.max_burst))),
            ("mrdsl", UInt(u64::from(self.mrdsl))),
            ("immediate_data", Bool(self.immediate_data)),
            ("initial_r2t", Bool(self.initial_r2t)),
            (
                "max_outstanding_r2t",
                UInt(u64::from(self.max_outstanding_r2t)),
            ),
            ("queue_depth", UInt(u64::from(self.queue_depth))),
            ("link_bps", UInt(self.link_bps)),
            ("delay_s", Float(self.delay_s)),
            ("queue_packets", UInt(self.queue_packets)),
            ("ber", Float(self.ber)),
            ("transfer_context_s", Float(self.transfer_context_s)),
            ("commands", UInt(self.commands)),
            ("failed", UInt(self.failed)),
            ("response_s", Float(self.response_s)),
            ("t21_s", Float(self.t21_s)),
            ("t32_s", Float(self.t32_s)),
            ("t43_s", Float(self.t43_s)),
            ("t54_s", self.t54_s.map_or(Value::Missing, Float)),
            ("interval_s", Float(self.interval_s)),
            ("command_throughput", Float(self.command_throughput)),
            ("data_throughput", Float(self.data_throughput)),
            ("utilisation", Float(self.utilisation)),
            ("arrival_rate", Float(self.arrival_rate)),
            ("dropped", UInt(self.dropped)),
            ("corrupted", UInt(self.corrupted)),
            ("retransmits", UInt(self.retransmits)),
            ("rto", UInt(self.rto)),
            ("pdus_lost", UInt(self.pdus_lost)),
            ("command_retries", UInt(self.command_retries)),
            ("events", UInt(self.events)),
            ("virtual_s", Float(self.virtual_s)),
            ("wall_s", Float(self.wall_s)),
            ("failure", Text(self.failure.clone())),
        ]
    }

    fn from_cells(c: &Cells<'_>) -> Result<Self, String> {
        Ok(Self {
            figure: c.text("figure")?.to_owned(),
            series: c.text("series")?.to_owned(),
            setup: c.text("setup")?.to_owned(),
            x: c.float("x")?,
            transport: c.text("transport")?.to_owned(),
            workload: c.text("workload")?.to_owned(),
            erl: c.small("erl")?,
            first_burst: c.small("first_burst")?,
            max_burst: c.small("max_burst")?,
            mrdsl: c.small("mrdsl")?,
            immediate_data: c.flag("immediate_data")?,
            initial_r2t: c.flag("initial_r2t")?,
            max_outstanding_r2t: c.small("max_outstanding_r2t")?,
            queue_depth: c.small("queue_depth")?,
            link_bps: c.uint("link_bps")?,
            delay_s: c.float("delay_s")?,
            queue_packets: c.uint("queue_packets")?,
            ber: c.float("ber")?,
            transfer_context_s: c.float("transfer_context_s")?,
            commands: c.uint("commands")?,
            failed: c.uint("failed")?,
            response_s: c.float("response_s")?,
            t21_s: c.float("t21_s")?,
            t32_s: c.float("t32_s")?,
            t43_s: c.float("t43_s")?,
            t54_s: c.optional_float("t54_s")?,
            interval_s: c.float("interval_s")?,
            command_throughput: c.float("command_throughput")?,
            data_throughput: c.float("data_throughput")?,
            utilisation: c.float("utilisation")?,
            arrival_rate: c.float("arrival_rate")?,
            dropped: c.uint("dropped")?,
            corrupted: c.uint("corrupted")?,
            retransmits: c.uint("retransmits")?,
            rto: c.uint("rto")?,
            pdus_lost: c.uint("pdus_lost")?,
            command_retries: c.uint("command_retries")?,
            events: c.uint("events")?,
            virtual_s: c.float("virtual_s")?,
            wall_s: c.float("wall_s")?,
            failure: c.text("failure")?.to_owned(),
        })
    }
}
