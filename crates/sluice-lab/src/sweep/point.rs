//! One grid point of the parameter study: every setting a run depends on.

use sluice_proto::initiator::Policy;

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// SCSI READ commands (Data-In).
    Read,
    /// SCSI WRITE commands (immediate data, Data-Out, R2Ts).
    Write,
}

impl Direction {
    /// `read` or `write`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }

    /// The inverse of [`Self::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "read" => Some(Direction::Read),
            "write" => Some(Direction::Write),
            _ => None,
        }
    }
}

/// The settings of one point: the negotiated keys (RFC 7143 section 13) both sides are made
/// to agree on, and the initiator's own choices (queue depth, command size, LUNs,
/// connections and how commands are spread over them).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Point {
    /// Reads or writes.
    pub direction: Direction,
    /// The initiator's MaxRecvDataSegmentLength: the largest Data-In (section 13.12).
    pub initiator_mrdsl: u32,
    /// The target's MaxRecvDataSegmentLength: the largest immediate data and Data-Out.
    pub target_mrdsl: u32,
    /// MaxBurstLength (section 13.13).
    pub max_burst: u32,
    /// FirstBurstLength (section 13.14).
    pub first_burst: u32,
    /// ImmediateData (section 13.11).
    pub immediate_data: bool,
    /// InitialR2T (section 13.10).
    pub initial_r2t: bool,
    /// MaxOutstandingR2T (section 13.17).
    pub max_outstanding_r2t: u16,
    /// DataPDUInOrder (section 13.18).
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (section 13.19).
    pub data_sequence_in_order: bool,
    /// GOOD status in the last Data-In (the target's choice, section 11.7.3).
    pub phase_collapse: bool,
    /// HeaderDigest=CRC32C.
    pub header_digest: bool,
    /// DataDigest=CRC32C.
    pub data_digest: bool,
    /// SCSI commands in flight at once.
    pub outstanding: u32,
    /// Bytes per command (512-byte sectors per command x 512).
    pub command_bytes: u32,
    /// Logical units the commands are spread over.
    pub luns: u16,
    /// TCP connections in the session (MaxConnections, section 13.2).
    pub connections: u16,
    /// How commands are spread over the connections.
    pub policy: Policy,
}

/// The sector size the paper counts "sectors per command" in.
pub const SECTOR: u32 = 512;

impl Default for Point {
    /// RFC 7143's defaults for every negotiated key (section 13), the paper's 1024 sectors
    /// per command, one command at a time, one LUN, one connection.
    fn default() -> Self {
        Self {
            direction: Direction::Read,
            initiator_mrdsl: 8192,
            target_mrdsl: 8192,
            max_burst: 262_144,
            first_burst: 65_536,
            immediate_data: true,
            initial_r2t: true,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            phase_collapse: true,
            header_digest: false,
            data_digest: false,
            outstanding: 1,
            command_bytes: 1024 * SECTOR,
            luns: 1,
            connections: 1,
            policy: Policy::RoundRobin,
        }
    }
}

impl Point {
    /// Both directions' MaxRecvDataSegmentLength set to `n`.
    #[must_use]
    pub fn mrdsl(mut self, n: u32) -> Self {
        self.initiator_mrdsl = n;
        self.target_mrdsl = n;
        self
    }

    /// MaxBurstLength and FirstBurstLength both `n`, as the paper kept them.
    #[must_use]
    pub fn bursts(mut self, n: u32) -> Self {
        self.max_burst = n;
        self.first_burst = n;
        self
    }

    /// Sectors of 512 bytes per command.
    pub fn sectors(&self) -> u32 {
        self.command_bytes / SECTOR
    }

    /// Checks what the protocol and the initiator require of the values.
    pub fn validate(&self) -> Result<(), String> {
        let sizes = [
            ("MaxRecvDataSegmentLength", self.initiator_mrdsl),
            ("MaxRecvDataSegmentLength", self.target_mrdsl),
            ("MaxBurstLength", self.max_burst),
            ("FirstBurstLength", self.first_burst),
        ];
        // RFC 7143 sections 13.12-13.14: 512 to 2^24 - 1.
        for (name, v) in sizes {
            if !(512..=16_777_215).contains(&v) {
                return Err(format!("{name} {v} is outside 512..=16777215"));
            }
        }
        if self.first_burst > self.max_burst {
            return Err(format!(
                "FirstBurstLength {} exceeds MaxBurstLength {} (section 13.14)",
                self.first_burst, self.max_burst
            ));
        }
        if self.command_bytes == 0 || !self.command_bytes.is_multiple_of(SECTOR) {
            return Err(format!(
                "command size {} is not a positive multiple of {SECTOR}",
                self.command_bytes
            ));
        }
        if self.outstanding == 0 || self.luns == 0 || self.connections == 0 {
            return Err("outstanding commands, LUNs and connections must be at least 1".into());
        }
        if self.max_outstanding_r2t == 0 {
            return Err("MaxOutstandingR2T must be at least 1 (section 13.17)".into());
        }
        Ok(())
    }

    /// A stable text naming every value: identifies the point across an interrupted sweep.
    pub fn key(&self) -> String {
        let yn = |b: bool| if b { "y" } else { "n" };
        format!(
            "{} imrdsl={} tmrdsl={} mbl={} fbl={} imm={} ir2t={} mor2t={} pdu_order={} seq_order={} \
             collapse={} hd={} dd={} qd={} cmd={} luns={} conns={} policy={}",
            self.direction.name(),
            self.initiator_mrdsl,
            self.target_mrdsl,
            self.max_burst,
            self.first_burst,
            yn(self.immediate_data),
            yn(self.initial_r2t),
            self.max_outstanding_r2t,
            yn(self.data_pdu_in_order),
            yn(self.data_sequence_in_order),
            yn(self.phase_collapse),
            yn(self.header_digest),
            yn(self.data_digest),
            self.outstanding,
            self.command_bytes,
            self.luns,
            self.connections,
            self.policy.name(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_when_any_value_differs() {
        let a = Point::default();
        let b = Point::default().mrdsl(512);
        let c = Point {
            phase_collapse: false,
            ..Point::default()
        };
        assert_ne!(a.key(), b.key());
        assert_ne!(a.key(), c.key());
        assert_eq!(a.key(), Point::default().key());
    }

    #[test]
    fn validation_names_the_rule() {
        let p = Point {
            first_burst: 1 << 20,
            ..Point::default()
        };
        assert!(p.validate().unwrap_err().contains("13.14"));
        assert!(Point::default().mrdsl(256).validate().is_err());
        assert!(Point::default().validate().is_ok());
    }
}
