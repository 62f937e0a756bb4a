//! The outcome of a run.

use std::time::Duration;

use crate::cpu::CpuTime;
use crate::latency::LatencySummary;
use crate::pdus::PduCounts;

/// Reads or writes of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DirectionStats {
    /// Commands completed with GOOD status.
    pub ios: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Their latencies.
    pub latency: LatencySummary,
}

/// Data verification results.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// Write + read-back pairs compared.
    pub checked: u64,
    /// Bytes compared.
    pub bytes: u64,
    /// Read-backs that differed from what was written.
    pub errors: u64,
    /// The first difference, described.
    pub first_error: Option<String>,
    /// Acknowledged writes (the last to each place) read back once more after the run.
    pub final_checked: u64,
    /// Of those, the ones whose data was not there: acknowledged writes lost.
    pub final_errors: u64,
    /// The first of them, described.
    pub final_first_error: Option<String>,
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// From the first command to the last completion.
    pub elapsed: Duration,
    /// Sessions used.
    pub sessions: usize,
    /// Commands in flight per session.
    pub queue_depth: usize,
    /// Reads.
    pub read: DirectionStats,
    /// Writes.
    pub write: DirectionStats,
    /// Latency of every command.
    pub latency: LatencySummary,
    /// Commands that failed (transport error or non-GOOD status).
    pub errors: u64,
    /// Commands sent again after the target answered BUSY or TASK SET FULL (it could not
    /// take them then); not failures unless the retries ran out.
    pub busy_retries: u64,
    /// The first failure, described.
    pub first_error: Option<String>,
    /// Verification results, with `--verify`.
    pub verify: Option<VerifyStats>,
    /// PDUs during the run.
    pub pdus: PduCounts,
    /// CPU time of this process during the run.
    pub cpu: CpuTime,
    /// Trace records replayed, for a trace run.
    pub trace_records: Option<u64>,
    /// Commands completed GOOD per connection of each session (MC/S), with the LUNs they
    /// addressed: how the session's policy spread them.
    pub connections: Vec<ConnectionCommands>,
    /// Connections logged out during the run.
    pub logouts: Vec<ConnectionLogout>,
    /// What the first session's leading login negotiated (RFC 7143 section 13).
    pub negotiated: Option<sluice_proto::params::SessionParams>,
    /// A multipath run: each path's state and counters at the end.
    pub paths: Vec<sluice_initiator::multipath::PathStats>,
    /// A multipath run: for each failover, from the path found failed to the next command
    /// completed on another path.
    pub failover_times: Vec<Duration>,
    /// A multipath run: the longest time between two command completions (how long I/O
    /// stood still around a failover).
    pub longest_pause: Option<Duration>,
}

/// What one connection of a session carried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnectionCommands {
    /// Index of the session.
    pub session: usize,
    /// The connection's CID.
    pub cid: u16,
    /// Commands completed GOOD.
    pub commands: u64,
    /// The same, by LUN.
    pub by_lun: Vec<(u16, u64)>,
}

/// A connection logged out while the run went on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionLogout {
    /// Index of the session.
    pub session: usize,
    /// The connection's CID.
    pub cid: u16,
    /// When, from the start of the run.
    pub at: Duration,
    /// How the logout ended.
    pub result: Result<(), String>,
}

impl Report {
    /// Commands completed.
    pub fn ios(&self) -> u64 {
        self.read.ios + self.write.ios
    }

    /// Payload bytes moved.
    pub fn bytes(&self) -> u64 {
        self.read.bytes + self.write.bytes
    }

    /// Commands per second.
    pub fn iops(&self) -> f64 {
        per_second(self.ios() as f64, self.elapsed)
    }

    /// Payload MiB (2^20 bytes) per second.
    pub fn mib_per_s(&self) -> f64 {
        per_second(self.bytes() as f64 / 1048576.0, self.elapsed)
    }

    /// Payload MB (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> f64 {
        per_second(self.bytes() as f64 / 1e6, self.elapsed)
    }

    /// CPU microseconds (user + system) per command.
    pub fn cpu_us_per_io(&self) -> f64 {
        if self.ios() == 0 {
            0.0
        } else {
            self.cpu.total().as_secs_f64() * 1e6 / self.ios() as f64
        }
    }
}

fn per_second(x: f64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        x / s
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = Report {
            elapsed: Duration::from_secs(2),
            read: DirectionStats {
                ios: 1000,
                bytes: 4 << 20,
                ..Default::default()
            },
            write: DirectionStats {
                ios: 1000,
                bytes: 4 << 20,
                ..Default::default()
            },
            cpu: CpuTime {
                user: Duration::from_millis(150),
                system: Duration::from_millis(50),
            },
            ..Default::default()
        };
        assert_eq!(r.iops(), 1000.0);
        assert_eq!(r.mib_per_s(), 4.0);
        assert!((r.mb_per_s() - 4.194304).abs() < 1e-9);
        assert!((r.cpu_us_per_io() - 100.0).abs() < 1e-9);
        assert_eq!(Report::default().iops(), 0.0);
    }
}
