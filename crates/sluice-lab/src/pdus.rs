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
