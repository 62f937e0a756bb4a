//! Per-PDU times from the initiator: every PDU it queues on its (one) connection, with its
//! place in the TCP byte stream, and every PDU it receives. With the monitor's samples of
//! how far the stream has been sent, a queued PDU's place says when it went on the wire.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::BytesMut;
use sluice_initiator::{Direction, PduTrace};
use sluice_proto::pdu::{opcode, Pdu};

/// The PDUs the study's plots mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PduKind {
    /// A SCSI Command (WRITE, with any immediate data).
    Command,
    /// SCSI Data-Out.
    DataOut,
    /// Ready To Transfer.
    R2t,
    /// SCSI Response (the status).
    Response,
    /// Anything else (login, NOP, logout...).
    Other,
}

impl PduKind {
    fn of(pdu: &Pdu) -> Self {
        match pdu.opcode() {
            opcode::SCSI_COMMAND => PduKind::Command,
            opcode::DATA_OUT => PduKind::DataOut,
            opcode::R2T => PduKind::R2t,
            opcode::SCSI_RESPONSE => PduKind::Response,
            _ => PduKind::Other,
        }
    }
}

/// One PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduEvent {
    /// Microseconds since the log's epoch: when the initiator queued or received it.
    pub t_us: u64,
    /// Queued by the initiator (else received).
    pub sent: bool,
    /// What it is.
    pub kind: PduKind,
    /// Its Initiator Task Tag.
    pub itt: u32,
    /// For a sent PDU, the stream offset of its first byte (the first byte after the SYN is
    /// 0); 0 for received ones.
    pub offset: u64,
    /// Its bytes on the wire (header, data, padding, digests).
    pub wire_len: u32,
}

impl PduEvent {
    /// The stream offset just past it.
    pub fn end(&self) -> u64 {
        self.offset + u64::from(self.wire_len)
    }
}

/// Collects [`PduEvent`]s from an initiator's PDU trace hook.
#[derive(Debug)]
pub struct PduLog {
    epoch: Instant,
    inner: Mutex<Inner>,
    /// Header and data digests in force (after login; login PDUs carry none).
    digests: [AtomicBool; 2],
}

#[derive(Debug, Default)]
struct Inner {
    events: Vec<PduEvent>,
    /// Bytes queued so far on the connection.
    offset: u64,
    scratch: BytesMut,
}

impl PduLog {
    /// An empty log timing events from `epoch`.
    pub fn new(epoch: Instant) -> Arc<Self> {
        Arc::new(Self {
            epoch,
            inner: Mutex::new(Inner::default()),
            digests: [AtomicBool::new(false), AtomicBool::new(false)],
        })
    }

    /// The hook to put in `ConnectOptions::trace` (a session of one connection: the offsets
    /// of several connections' streams would mix).
    pub fn hook(self: &Arc<Self>) -> PduTrace {
        let log = Arc::clone(self);
        Arc::new(move |dir, pdu| log.record(dir, pdu))
    }

    /// The digests negotiated at login, in force for every PDU after it.
    pub fn set_digests(&self, header: bool, data: bool) {
        self.digests[0].store(header, Ordering::Relaxed);
        self.digests[1].store(data, Ordering::Relaxed);
    }

    /// The events since the last call.
    pub fn take(&self) -> Vec<PduEvent> {
        std::mem::take(&mut self.lock().events)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, dir: Direction, pdu: &Pdu) {
        let t_us = self.epoch.elapsed().as_micros() as u64;
        let mut inner = self.lock();
        let (sent, offset, wire_len) = match dir {
            Direction::Sent => {
                let len = wire_len(
                    pdu,
                    self.digests[0].load(Ordering::Relaxed),
                    self.digests[1].load(Ordering::Relaxed),
                    &mut inner.scratch,
                );
                let at = inner.offset;
                inner.offset += len;
                (true, at, len)
            }
            Direction::Received => (false, 0, 0),
        };
        inner.events.push(PduEvent {
            t_us,
            sent,
            kind: PduKind::of(pdu),
            itt: pdu.itt().0,
            offset,
            wire_len: u32::try_from(wire_len).unwrap_or(u32::MAX),
        });
    }
}

/// A PDU's bytes on the wire (RFC 7143 section 11.2: header with AHS, its digest, the data
/// segment padded to four bytes, its digest when there is data).
fn wire_len(pdu: &Pdu, header_digest: bool, data_digest: bool, scratch: &mut BytesMut) -> u64 {
    scratch.clear();
    pdu.emit_header(scratch);
    let data = pdu.wire_data().len();
    let mut n = scratch.len() + data + sluice_proto::framing::pad_len(data);
    if header_digest {
        n += 4;
    }
    if data_digest && data > 0 {
        n += 4;
    }
    n as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use sluice_proto::framing::{encode, Digests};
    use sluice_proto::pdu::DataOut;
    use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};

    fn data_out(len: usize) -> Pdu {
        Pdu::DataOut(DataOut {
            final_bit: true,
            lun: Lun(0),
            itt: Itt(7),
            ttt: Ttt::RESERVED,
            exp_stat_sn: SeqNum(1),
            data_sn: 0,
            buffer_offset: 0,
            data: Bytes::from(vec![1u8; len]),
        })
    }

    #[test]
    fn wire_lengths_match_the_encoder() {
        let mut scratch = BytesMut::new();
        for len in [0, 1, 2, 3, 4, 4097, 1 << 20] {
            let pdu = data_out(len);
            for (header, data) in [(false, false), (true, false), (true, true)] {
                let mut out = BytesMut::new();
                encode(&pdu, Digests { header, data }, &mut out);
                assert_eq!(
                    wire_len(&pdu, header, data, &mut scratch),
                    out.len() as u64,
                    "{len} {header} {data}"
                );
            }
        }
    }

    #[test]
    fn sent_pdus_get_consecutive_offsets() {
        let log = PduLog::new(Instant::now());
        let hook = log.hook();
        hook(Direction::Sent, &data_out(10));
        hook(Direction::Received, &data_out(0));
        log.set_digests(true, false);
        hook(Direction::Sent, &data_out(100));
        let ev = log.take();
        assert_eq!(ev.len(), 3);
        assert_eq!((ev[0].offset, ev[0].wire_len), (0, 48 + 12));
        assert!(!ev[1].sent);
        assert_eq!((ev[2].offset, ev[2].wire_len), (60, 48 + 4 + 100));
        assert_eq!(ev[2].kind, PduKind::DataOut);
        assert_eq!(ev[2].itt, 7);
        assert!(log.take().is_empty());
    }
}
