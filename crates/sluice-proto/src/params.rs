//! The operational parameters a login settles (RFC 7143 section 13), as typed values.
//!
//! Negotiation (`text`/`login`) produces these; framing and task bookkeeping consume them. The
//! defaults are the RFC's defaults, which apply to any key that was not negotiated.

/// Negotiated (or default) operational parameters of one connection and its session.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct SessionParams {
    /// HeaderDigest=CRC32C (section 13.1).
    pub header_digest: bool,
    /// DataDigest=CRC32C (section 13.1).
    pub data_digest: bool,
    /// MaxConnections (section 13.2), 1..=65535, default 1.
    pub max_connections: u16,
    /// InitialR2T (section 13.10), default Yes.
    pub initial_r2t: bool,
    /// ImmediateData (section 13.11), default Yes.
    pub immediate_data: bool,
    /// MaxRecvDataSegmentLength the initiator declared: the most the target may put in one
    /// PDU it sends (section 13.12), default 8192.
    pub initiator_max_recv_data_segment_length: u32,
    /// MaxRecvDataSegmentLength the target declared: the most the initiator may put in one PDU
    /// it sends, default 8192.
    pub target_max_recv_data_segment_length: u32,
    /// MaxBurstLength (section 13.13), default 262144.
    pub max_burst_length: u32,
    /// FirstBurstLength (section 13.14), default 65536; never above MaxBurstLength.
    pub first_burst_length: u32,
    /// DefaultTime2Wait in seconds (section 13.15), default 2.
    pub default_time2wait: u16,
    /// DefaultTime2Retain in seconds (section 13.16), default 20.
    pub default_time2retain: u16,
    /// MaxOutstandingR2T (section 13.17), default 1.
    pub max_outstanding_r2t: u16,
    /// DataPDUInOrder (section 13.18), default Yes.
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (section 13.19), default Yes.
    pub data_sequence_in_order: bool,
    /// ErrorRecoveryLevel (section 13.20), default 0.
    pub error_recovery_level: u8,
    /// Not a key: set when the connection runs in RDMA mode (iSER), where the Data-Out
    /// answering an R2T never travels in PDUs (the target fetches it with RDMA Reads, RFC 7145
    /// section 7.3), so the target's MaxRecvDataSegmentLength (there TargetRecvDataSegmentLength,
    /// which bounds only immediate and unsolicited data) does not cut it: the initiator core
    /// hands each solicited sequence to the datamover as one Data-Out. A connection's own.
    pub solicited_data_by_rdma: bool,
}

impl Default for SessionParams {
    fn default() -> Self {
        Self {
            header_digest: false,
            data_digest: false,
            max_connections: 1,
            initial_r2t: true,
            immediate_data: true,
            initiator_max_recv_data_segment_length: 8192,
            target_max_recv_data_segment_length: 8192,
            max_burst_length: 262_144,
            first_burst_length: 65_536,
            default_time2wait: 2,
            default_time2retain: 20,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: 0,
            solicited_data_by_rdma: false,
        }
    }
}

impl SessionParams {
    /// The parameters of a connection that joins a session whose parameters are `session`,
    /// from `self`, what the connection's own login settled. Only the connection-only keys
    /// are the connection's (RFC 7143 section 13, "CO": HeaderDigest, DataDigest and each
    /// side's MaxRecvDataSegmentLength); every other key here is session-wide and
    /// leading-only ("LO": MaxConnections, InitialR2T, ImmediateData, MaxBurstLength,
    /// FirstBurstLength, DefaultTime2Wait, DefaultTime2Retain, MaxOutstandingR2T,
    /// DataPDUInOrder, DataSequenceInOrder, ErrorRecoveryLevel), negotiated on the leading
    /// connection only, so a joining login's own negotiation leaves them at their defaults
    /// and the session's values are the ones that hold.
    pub fn joined(self, session: &SessionParams) -> SessionParams {
        SessionParams {
            header_digest: self.header_digest,
            data_digest: self.data_digest,
            initiator_max_recv_data_segment_length: self.initiator_max_recv_data_segment_length,
            target_max_recv_data_segment_length: self.target_max_recv_data_segment_length,
            solicited_data_by_rdma: self.solicited_data_by_rdma,
            ..*session
        }
    }
}

/// The highest ErrorRecoveryLevel (RFC 7143 section 13.20) the session cores implement.
///
/// Both roles implement every level the key allows: level 1 (SNACK, DataACK, recovery R2T,
/// command retry: RFC 7143 sections 7.1 to 7.8) and level 2 (connection recovery, with TASK
/// REASSIGN moving a failed connection's tasks to its replacement: sections 6.2 and 7.2).
/// Configuration above it is refused rather than negotiated and then not honoured.
pub const IMPLEMENTED_ERROR_RECOVERY_LEVEL: u8 = 2;

/// Whether a session carries SCSI traffic or only SendTargets (section 13.21).
#[derive(Clone, Copy, Debug, Eq, PartialEq, Default)]
pub enum SessionType {
    /// SessionType=Normal.
    #[default]
    Normal,
    /// SessionType=Discovery.
    Discovery,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A joining connection keeps its connection-only keys and takes every leading-only one
    /// from its session, whatever defaults its own negotiation left.
    #[test]
    fn a_joined_connection_has_its_sessions_leading_only_keys() {
        let session = SessionParams {
            header_digest: false,
            data_digest: false,
            max_connections: 4,
            initial_r2t: false,
            immediate_data: false,
            initiator_max_recv_data_segment_length: 65536,
            target_max_recv_data_segment_length: 65536,
            max_burst_length: 1_048_576,
            first_burst_length: 32768,
            default_time2wait: 7,
            default_time2retain: 9,
            max_outstanding_r2t: 4,
            data_pdu_in_order: false,
            data_sequence_in_order: false,
            error_recovery_level: 2,
            solicited_data_by_rdma: false,
        };
        let own = SessionParams {
            header_digest: true,
            data_digest: true,
            initiator_max_recv_data_segment_length: 4096,
            target_max_recv_data_segment_length: 16384,
            solicited_data_by_rdma: true,
            ..SessionParams::default()
        };
        assert_eq!(
            own.joined(&session),
            SessionParams {
                header_digest: true,
                data_digest: true,
                initiator_max_recv_data_segment_length: 4096,
                target_max_recv_data_segment_length: 16384,
                solicited_data_by_rdma: true,
                ..session
            }
        );
    }
}
