//! PDU counts of a run: the difference of session counters before and after.

use sluice_initiator::SessionCounters;
use sluice_proto::pdu::types::opcode;

/// PDUs and wire bytes moved during a run, summed over sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PduCounts {
    /// SCSI Command PDUs sent.
    pub scsi_command: u64,
    /// SCSI Response PDUs received.
    pub scsi_response: u64,
    /// Data-Out PDUs sent.
    pub data_out: u64,
    /// Data-In PDUs received.
    pub data_in: u64,
    /// R2T PDUs received.
    pub r2t: u64,
    /// NOP-Out PDUs sent.
    pub nop_out: u64,
    /// NOP-In PDUs received.
    pub nop_in: u64,
    /// Every PDU sent.
    pub sent: u64,
    /// Every PDU received.
    pub received: u64,
    /// Bytes written to the sockets.
    pub bytes_sent: u64,
    /// Bytes read from the sockets.
    pub bytes_received: u64,
    /// Commands the initiator completed (any status).
    pub commands: u64,
    /// Write data sent inside SCSI Command PDUs (ImmediateData).
    pub immediate_bytes: u64,
    /// Write data sent in unsolicited Data-Out PDUs.
    pub unsolicited_bytes: u64,
    /// Write data sent in Data-Out PDUs that answered an R2T.
    pub solicited_bytes: u64,
    /// What error recovery did (RFC 7143 section 7).
    pub recovery: RecoveryCounts,
}

/// Error recovery during a run, summed over sessions: all zero when nothing failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCounts {
    /// Header digest errors the initiator detected.
    pub header_digest_errors: u64,
    /// Data digest errors the initiator detected.
    pub data_digest_errors: u64,
    /// Reject PDUs received.
    pub rejects: u64,
    /// SNACK Requests sent (ErrorRecoveryLevel 1 and 2).
    pub snacks: u64,
    /// Commands sent again unchanged, or as new commands after a failure.
    pub commands_retried: u64,
    /// Sessions reinstated (ErrorRecoveryLevel 0).
    pub reconnects: u64,
    /// Connections replaced with the same CID (ErrorRecoveryLevel 2).
    pub connection_recoveries: u64,
    /// Commands moved to a replacement connection with TASK REASSIGN.
    pub reassigned: u64,
}

impl RecoveryCounts {
    /// Whether anything was recovered.
    pub fn any(&self) -> bool {
        *self != Self::default()
    }

    fn add(&mut self, o: &RecoveryCounts) {
        self.header_digest_errors += o.header_digest_errors;
        self.data_digest_errors += o.data_digest_errors;
        self.rejects += o.rejects;
        self.snacks += o.snacks;
        self.commands_retried += o.commands_retried;
        self.reconnects += o.reconnects;
        self.connection_recoveries += o.connection_recoveries;
        self.reassigned += o.reassigned;
    }
}

impl PduCounts {
    /// What happened between two snapshots of one session.
    pub fn delta(before: &SessionCounters, after: &SessionCounters) -> Self {
        let s = |op: u8| after.pdus_sent[usize::from(op)] - before.pdus_sent[usize::from(op)];
        let r =
            |op: u8| after.pdus_received[usize::from(op)] - before.pdus_received[usize::from(op)];
        let sum = |a: &[u64; 64], b: &[u64; 64]| a.iter().sum::<u64>() - b.iter().sum::<u64>();
        Self {
            scsi_command: s(opcode::SCSI_COMMAND),
            scsi_response: r(opcode::SCSI_RESPONSE),
            data_out: s(opcode::DATA_OUT),
            data_in: r(opcode::DATA_IN),
            r2t: r(opcode::R2T),
            nop_out: s(opcode::NOP_OUT),
            nop_in: r(opcode::NOP_IN),
            sent: sum(&after.pdus_sent, &before.pdus_sent),
            received: sum(&after.pdus_received, &before.pdus_received),
            bytes_sent: after.bytes_sent - before.bytes_sent,
            bytes_received: after.bytes_received - before.bytes_received,
            commands: after.commands - before.commands,
            immediate_bytes: after.immediate_bytes - before.immediate_bytes,
            unsolicited_bytes: after.unsolicited_bytes - before.unsolicited_bytes,
            solicited_bytes: after.solicited_bytes - before.solicited_bytes,
            recovery: RecoveryCounts {
                header_digest_errors: after.header_digest_errors - before.header_digest_errors,
                data_digest_errors: after.data_digest_errors - before.data_digest_errors,
                rejects: after.rejects - before.rejects,
                snacks: s(opcode::SNACK_REQUEST),
                commands_retried: after.commands_retried - before.commands_retried,
                reconnects: after.reconnects - before.reconnects,
                connection_recoveries: after.connection_recoveries - before.connection_recoveries,
                reassigned: after.reassigned - before.reassigned,
            },
        }
    }

    /// Adds another session's counts.
    pub fn add(&mut self, o: &PduCounts) {
        self.scsi_command += o.scsi_command;
        self.scsi_response += o.scsi_response;
        self.data_out += o.data_out;
        self.data_in += o.data_in;
        self.r2t += o.r2t;
        self.nop_out += o.nop_out;
        self.nop_in += o.nop_in;
        self.sent += o.sent;
        self.received += o.received;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.commands += o.commands;
        self.immediate_bytes += o.immediate_bytes;
        self.unsolicited_bytes += o.unsolicited_bytes;
        self.solicited_bytes += o.solicited_bytes;
        self.recovery.add(&o.recovery);
    }

    /// `count / commands` (0 when no command completed).
    pub fn per_command(&self, count: u64) -> f64 {
        if self.commands == 0 {
            0.0
        } else {
            count as f64 / self.commands as f64
        }
    }
}
