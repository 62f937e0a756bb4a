//! Configured experiments: the production initiator and target session cores, the framer
//! and the SCSI layer over a memory LU, joined by a modelled network, run in virtual time
//! with fixed negotiated values and a given workload, and measured per command.
//!
//! Unlike the seed-driven checker ([`crate::run`]) nothing here is drawn at random except the
//! bit errors (from [`Experiment::seed`]): the parameters are those of the login the
//! experiment names, the workload is a list of commands with arrival times, and the network
//! is one link of a given bandwidth, propagation delay, drop-tail queue and bit error rate,
//! carrying either a TCP model ([`tcp`]) or datagrams, one iSCSI PDU each, fragmented to
//! the path MTU (iSCSI over UDP as Hussain's *Performance Evaluation of iSCSI for IP Storage
//! and Transport Protocols* simulated it). A corrupted packet is discarded by the receiver's
//! checksum: under TCP it becomes a retransmission, under UDP the PDU is lost and the
//! session's error recovery (ErrorRecoveryLevel 1: SNACK, recovery R2T, command retry) has
//! to find and repair it.
//!
//! Each command is timed at the events of the study's Fig. 5.1 (see [`CommandTiming`]), and
//! a run reports the study's equations 5.3 to 5.6 ([`Metrics`]).

mod link;
pub mod tcp;
mod world;

use std::time::Duration;

use sluice_proto::params::SessionParams;

pub use link::{LinkConfig, LinkStats};
pub use tcp::{TcpConfig, TcpStats};

/// What carries the PDUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The TCP model, one connection.
    Tcp(TcpConfig),
    /// Datagrams: one PDU per UDP datagram, fragmented to the path MTU; a datagram with a
    /// lost or corrupted fragment is lost whole.
    Udp,
}

/// One SCSI command of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    /// When the application hands it to the initiator (t1), in virtual nanoseconds.
    pub at_ns: u64,
    /// ExpectedDataTransferLength, a multiple of 512.
    pub bytes: u32,
    /// WRITE(16) if true, READ(16) if false.
    pub write: bool,
}

/// Timers of the two session cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// The study's TransferContext timeout: how long a command or a write's expected
    /// Data-Out may see no progress before recovery acts (the initiator's retry timeout and
    /// the target's sequence timeout; used at ErrorRecoveryLevel 1 and 2).
    pub transfer_context: Duration,
    /// How long a command may take in all before it fails (and is aborted).
    pub command: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            transfer_context: Duration::from_secs(1),
            command: Duration::from_secs(600),
        }
    }
}

/// One configured run.
#[derive(Clone, Debug, PartialEq)]
pub struct Experiment {
    /// The negotiated values both sides run with (as a login would have left them).
    pub params: SessionParams,
    /// The target's command window (MaxCmdSN - ExpCmdSN + 1 when idle).
    pub queue_depth: u32,
    /// Both directions of the link.
    pub link: LinkConfig,
    /// TCP or UDP.
    pub transport: Transport,
    /// Recovery timers.
    pub timeouts: Timeouts,
    /// The commands, in order of arrival.
    pub workload: Vec<Io>,
    /// Seeds the bit errors.
    pub seed: u64,
    /// Virtual time after which the run gives up.
    pub time_limit_ns: u64,
}

impl Experiment {
    /// An experiment with the study's link and TCP and the given parameters and workload.
    pub fn new(params: SessionParams, queue_depth: u32, workload: Vec<Io>) -> Self {
        Self {
            params,
            queue_depth,
            link: LinkConfig::study(),
            transport: Transport::Tcp(TcpConfig::study()),
            timeouts: Timeouts::default(),
            workload,
            seed: 1,
            time_limit_ns: 7_200_000_000_000,
        }
    }
}

/// One command's timeline (the study's Fig. 5.1), in virtual nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandTiming {
    /// The command.
    pub io: Io,
    /// t1: the application handed it to the initiator.
    pub t1: u64,
    /// t2: its SCSI Command PDU left the initiator's session (after waiting for the window).
    pub t2: Option<u64>,
    /// t3: the target's session received it.
    pub t3: Option<u64>,
    /// t4: the initiator completed it (its status arrived).
    pub t4: Option<u64>,
    /// t5: the target received the acknowledgement of its status (an ExpStatSN past it, on
    /// a later PDU); none for the last commands, which nothing follows.
    pub t5: Option<u64>,
    /// How it ended: `None` if GOOD, else why not.
    pub failure: Option<String>,
    /// Times its SCSI Command PDU was sent.
    pub attempts: u32,
}

impl CommandTiming {
    /// t4 - t1, the response time, if it completed.
    pub fn response_ns(&self) -> Option<u64> {
        self.t4.map(|t4| t4 - self.t1)
    }
}

/// The study's equations 5.3 to 5.6 over the observation interval T (first arrival to last
/// completion).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Metrics {
    /// T, seconds.
    pub interval_s: f64,
    /// X_c = C / T, commands completed per second (5.3).
    pub command_throughput: f64,
    /// X_d = L / T, payload bytes of completed commands per second (5.4).
    pub data_throughput: f64,
    /// U = X_d / BW (5.5).
    pub utilisation: f64,
    /// λ = A / T, commands arriving per second (5.6).
    pub arrival_rate: f64,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Per command, in workload order.
    pub commands: Vec<CommandTiming>,
    /// Equations 5.3 to 5.6.
    pub metrics: Metrics,
    /// Initiator to target.
    pub up: LinkStats,
    /// Target to initiator.
    pub down: LinkStats,
    /// The initiator's TCP sender (zero under UDP).
    pub initiator_tcp: TcpStats,
    /// The target's TCP sender (zero under UDP).
    pub target_tcp: TcpStats,
    /// PDUs sent, both ways.
    pub pdus: u64,
    /// PDUs lost with their datagram (UDP).
    pub pdus_lost: u64,
    /// Virtual time at the end.
    pub virtual_ns: u64,
    /// Events processed.
    pub events: u64,
    /// Wall-clock time the run took.
    pub wall: Duration,
}

impl Outcome {
    /// Commands that did not end GOOD.
    pub fn failures(&self) -> usize {
        self.commands.iter().filter(|c| c.failure.is_some()).count()
    }
}

/// Why a run could not finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExperimentError(pub String);

impl std::fmt::Display for ExperimentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExperimentError {}

/// Runs one experiment to the completion of its last command.
pub fn run_experiment(exp: &Experiment) -> Result<Outcome, ExperimentError> {
    world::ExpWorld::new(exp)?.run()
}

#[cfg(test)]
mod tests;
