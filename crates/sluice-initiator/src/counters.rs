//! Per-session counters: commands, PDUs by opcode, bytes, digest errors and a latency
//! histogram. The driver updates them; [`Session::counters`](crate::Session::counters) hands
//! out a snapshot (the lab reads them).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hdrhistogram::Histogram;
use sluice_proto::pdu::types::opcode;
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::Ttt;

/// Highest latency the histogram records exactly (longer ones are clamped): 60 s in µs.
const LATENCY_MAX_US: u64 = 60_000_000;

/// A snapshot of one session's counters (all since the session was opened).
#[derive(Clone, Debug)]
pub struct SessionCounters {
    /// SCSI commands completed (any status).
    pub commands: u64,
    /// Commands that ended with an error or a non-GOOD status.
    pub commands_failed: u64,
    /// Commands sent again on a new connection after a connection was lost.
    pub commands_retried: u64,
    /// PDUs sent, indexed by opcode (without the I bit; 0..64).
    pub pdus_sent: [u64; 64],
    /// PDUs received, indexed by opcode.
    pub pdus_received: [u64; 64],
    /// Bytes written to the socket (headers, data, padding, digests).
    pub bytes_sent: u64,
    /// Bytes read from the socket.
    pub bytes_received: u64,
    /// Payload bytes of completed reads.
    pub read_bytes: u64,
    /// Payload bytes of completed writes.
    pub write_bytes: u64,
    /// Write data sent as immediate data in SCSI Command PDUs (RFC 7143 section 13.11).
    pub immediate_bytes: u64,
    /// Write data sent in unsolicited Data-Out PDUs (TTT 0xffffffff, section 13.10).
    pub unsolicited_bytes: u64,
    /// Write data sent in Data-Out PDUs answering an R2T (section 11.8).
    pub solicited_bytes: u64,
    /// Header digest mismatches detected.
    pub header_digest_errors: u64,
    /// Data digest mismatches detected.
    pub data_digest_errors: u64,
    /// Sessions reinstated (ErrorRecoveryLevel 0 recovery: a new session replaced a failed
    /// one).
    pub reconnects: u64,
    /// Failed connections replaced by a new one with the same CID (ErrorRecoveryLevel 2).
    pub connection_recoveries: u64,
    /// Commands moved to a new connection with TASK REASSIGN (ErrorRecoveryLevel 2).
    pub reassigned: u64,
    /// Asynchronous Messages received.
    pub async_messages: u64,
    /// Reject PDUs received.
    pub rejects: u64,
    /// Most commands in flight at once.
    pub max_in_flight: u64,
    /// Command latency in microseconds, submission to completion.
    pub latency_us: Histogram<u64>,
}

impl Default for SessionCounters {
    fn default() -> Self {
        Self {
            commands: 0,
            commands_failed: 0,
            commands_retried: 0,
            pdus_sent: [0; 64],
            pdus_received: [0; 64],
            bytes_sent: 0,
            bytes_received: 0,
            read_bytes: 0,
            write_bytes: 0,
            immediate_bytes: 0,
            unsolicited_bytes: 0,
            solicited_bytes: 0,
            header_digest_errors: 0,
            data_digest_errors: 0,
            reconnects: 0,
            connection_recoveries: 0,
            reassigned: 0,
            async_messages: 0,
            rejects: 0,
            max_in_flight: 0,
            // new_with_bounds fails only for low < 1, high < 2 * low or sigfig > 5: not so here.
            latency_us: Histogram::new_with_bounds(1, LATENCY_MAX_US, 3)
                .expect("constant, valid histogram bounds"),
        }
    }
}

impl SessionCounters {
    /// Data-In PDUs received.
    pub fn data_in(&self) -> u64 {
        self.pdus_received[usize::from(opcode::DATA_IN)]
    }

    /// Data-Out PDUs sent.
    pub fn data_out(&self) -> u64 {
        self.pdus_sent[usize::from(opcode::DATA_OUT)]
    }

    /// R2T PDUs received.
    pub fn r2t(&self) -> u64 {
        self.pdus_received[usize::from(opcode::R2T)]
    }

    /// SCSI Command PDUs sent (retries included).
    pub fn scsi_commands_sent(&self) -> u64 {
        self.pdus_sent[usize::from(opcode::SCSI_COMMAND)]
    }

    /// NOP-Out PDUs sent (pings and answers).
    pub fn nop_out(&self) -> u64 {
        self.pdus_sent[usize::from(opcode::NOP_OUT)]
    }

    /// NOP-In PDUs received.
    pub fn nop_in(&self) -> u64 {
        self.pdus_received[usize::from(opcode::NOP_IN)]
    }
}

/// How write data travelled.
enum WriteData {
    Immediate,
    Unsolicited,
    Solicited,
}

/// Shared, lock-protected counters; the driver is the only writer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters(Arc<Mutex<SessionCounters>>);

impl Counters {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SessionCounters> {
        // A panic while holding the lock leaves plain numbers behind: still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn snapshot(&self) -> SessionCounters {
        self.lock().clone()
    }

    /// Counts one PDU sent (`wire_len` bytes framed) and sorts the write data it carries
    /// into immediate, unsolicited and solicited bytes, under one lock.
    pub(crate) fn pdu_sent(&self, pdu: &Pdu, wire_len: usize) {
        let write = match pdu {
            Pdu::ScsiCommand(c) if !c.data.is_empty() => Some((WriteData::Immediate, c.data.len())),
            Pdu::DataOut(d) if d.ttt == Ttt::RESERVED => {
                Some((WriteData::Unsolicited, d.data.len()))
            }
            Pdu::DataOut(d) => Some((WriteData::Solicited, d.data.len())),
            _ => None,
        };
        let mut c = self.lock();
        c.pdus_sent[usize::from(pdu.opcode() & 0x3f)] += 1;
        c.bytes_sent += wire_len as u64;
        if let Some((kind, len)) = write {
            let counter = match kind {
                WriteData::Immediate => &mut c.immediate_bytes,
                WriteData::Unsolicited => &mut c.unsolicited_bytes,
                WriteData::Solicited => &mut c.solicited_bytes,
            };
            *counter += len as u64;
        }
    }

    pub(crate) fn pdu_received(&self, op: u8) {
        self.lock().pdus_received[usize::from(op & 0x3f)] += 1;
    }

    pub(crate) fn bytes_received(&self, n: usize) {
        self.lock().bytes_received += n as u64;
    }

    pub(crate) fn completed(&self, ok: bool, latency: Duration, read: u64, written: u64) {
        let mut c = self.lock();
        c.commands += 1;
        c.commands_failed += u64::from(!ok);
        c.read_bytes += read;
        c.write_bytes += written;
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        c.latency_us.saturating_record(us.clamp(1, LATENCY_MAX_US));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_proto::pdu::DataOut;

    fn data_out(ttt: Ttt, len: usize) -> DataOut {
        DataOut {
            final_bit: true,
            lun: Default::default(),
            itt: Default::default(),
            ttt,
            exp_stat_sn: Default::default(),
            data_sn: 0,
            buffer_offset: 0,
            data: Bytes::from(vec![0; len]),
        }
    }

    #[test]
    fn counts_by_opcode_and_records_latency() {
        let c = Counters::default();
        c.pdu_sent(&Pdu::DataOut(data_out(Ttt(1), 0)), 100);
        c.pdu_sent(&Pdu::DataOut(data_out(Ttt(1), 0)), 100);
        c.pdu_received(opcode::R2T);
        c.completed(true, Duration::from_micros(250), 0, 4096);
        let s = c.snapshot();
        assert_eq!((s.data_out(), s.r2t(), s.bytes_sent), (2, 1, 200));
        assert_eq!(s.latency_us.len(), 1);
        assert!(s.latency_us.value_at_quantile(0.5) >= 249);
        assert_eq!(s.write_bytes, 4096);
    }

    #[test]
    fn write_data_is_sorted_by_how_it_travelled() {
        use sluice_proto::pdu::ScsiCommand;
        let c = Counters::default();
        let cmd = ScsiCommand {
            immediate: false,
            final_bit: false,
            read: false,
            write: true,
            attr: Default::default(),
            lun: Default::default(),
            itt: Default::default(),
            expected_data_transfer_length: 4096,
            cmd_sn: Default::default(),
            exp_stat_sn: Default::default(),
            cdb: sluice_proto::pdu::Cdb::new(&[0x2a; 10]),
            bidi_read_length: None,
            data: Bytes::from(vec![0; 512]),
        };
        c.pdu_sent(&Pdu::ScsiCommand(cmd), 560);
        c.pdu_sent(&Pdu::DataOut(data_out(Ttt::RESERVED, 1024)), 1072);
        c.pdu_sent(&Pdu::DataOut(data_out(Ttt(3), 1024)), 1072);
        c.pdu_sent(&Pdu::DataOut(data_out(Ttt(4), 1024)), 1072);
        let s = c.snapshot();
        assert_eq!(
            (s.immediate_bytes, s.unsolicited_bytes, s.solicited_bytes),
            (512, 1024, 2048)
        );
    }
}
