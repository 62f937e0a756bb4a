//! Receiving large Data-In payloads straight into the read's buffer, as libiscsi does.
//!
//! Without this, a Data-In payload is read into the connection's receive buffer and then
//! copied into the read's reassembly buffer; for a 1 MiB read (four 256 KiB PDUs) that copy
//! was a quarter of the driver's time. When the receive buffer ends inside a Data-In whose
//! header is in, whose read is in order (DataPDUInOrder and DataSequenceInOrder) and whose
//! payload still has at least [`PLACE_MIN_BYTES`] to come, the driver takes the header off,
//! moves the payload bytes already received to the read's buffer, reads the rest of the
//! payload from the socket directly after them, digests it there (when DataDigest is on) and
//! lets the task account for the PDU. The read that completes a payload may also fetch the
//! padding, digest and next header (`PLACEMENT_OVERRUN` bytes past the payload, moved to the
//! receive buffer), so a stream of large Data-In PDUs costs no read per header. When that read
//! did not get the next header, the read that does asks for one header only
//! ([`HEADER_READ_BYTES`]), so that the next payload is not pulled into the receive buffer. Everything that decides (bounds, DataSN, offsets, status
//! bits, digests) is sluice-proto's: `Framer::peek_data_in`, `SegmentReceiver` and
//! `InitiatorRead::{start_placement, handle_placed}`.

use bytes::{Buf, Bytes, BytesMut};
use sluice_proto::framing::{FrameError, SegmentReceiver};
use sluice_proto::pdu::{opcode, DataIn, Pdu};
use sluice_proto::seq::Itt;
use sluice_proto::task::initiator::Placement;

use crate::driver::Driver;
use crate::error::Error;

/// Place a payload only when at least this much of it is still to come: below that one more
/// read into the receive buffer and a copy cost less than a separate read.
pub(crate) const PLACE_MIN_BYTES: usize = 16 * 1024;

/// How much one read asks for while large Data-In PDUs follow each other: the trailer of the
/// previous PDU (padding and data digest, at most 7 bytes) and the next header (BHS and header
/// digest, 52 bytes). Asking for more would pull the next payload into the receive buffer,
/// from where it has to be copied; libiscsi likewise reads each header on its own.
pub(crate) const HEADER_READ_BYTES: usize = 64;

/// A Data-In whose payload is being received into its read's buffer.
pub(crate) struct Placing {
    itt: Itt,
    header: DataIn,
    rx: SegmentReceiver,
    placement: Placement,
}

impl Placing {
    /// Whether the next socket read goes into the read's buffer (not the receive buffer).
    pub(crate) fn wants_data(&self) -> bool {
        self.rx.data_left() > 0
    }

    /// Where the next socket read goes: the rest of the payload and, past it, room for the
    /// next PDU's header (saves a read per PDU while Data-In streams in).
    pub(crate) fn spare(&mut self) -> bytes::buf::Limit<&mut bytes::BytesMut> {
        self.placement.spare_with_overrun()
    }

    /// The socket appended `n` bytes to the placement: what went past the payload belongs
    /// to the receive buffer `rbuf` (empty while a payload is placed: the payload ended it);
    /// the payload bytes are digested where they landed.
    pub(crate) fn landed(&mut self, n: usize, rbuf: &mut BytesMut) {
        let payload = n - self.placement.split_overrun(rbuf).min(n);
        let landed = self.placement.landed();
        let start = landed.len().saturating_sub(payload);
        self.rx.handle_data(&landed[start..]);
    }
}

impl Driver {
    /// Handles what the receive buffer holds: whole PDUs, the end of a placed Data-In, and
    /// the start of the next placement. An error ends the connection.
    pub(crate) fn handle_received(&mut self) -> Result<Option<crate::driver::Exit>, Error> {
        loop {
            if let Some(p) = &mut self.conn.placing {
                if p.wants_data() {
                    return Ok(None);
                }
                match p.rx.finish(&mut self.conn.rbuf) {
                    Ok(false) => return Ok(None),
                    Ok(true) => self.handle_placed()?,
                    Err(e) => {
                        self.conn.placing = None;
                        if let FrameError::DataDigest { .. } = e {
                            self.counters.lock().data_digest_errors += 1;
                        }
                        return Err(Error::Frame(e));
                    }
                }
                continue;
            }
            let before = self.conn.rbuf.len();
            match self.conn.decode()? {
                Some(pdu) => {
                    if before - self.conn.rbuf.len() > HEADER_READ_BYTES {
                        // PDUs with data of their own: back to reading in large chunks.
                        self.conn.header_reads = false;
                    }
                    if let Some(exit) = self.handle_pdu(pdu)? {
                        return Ok(Some(exit));
                    }
                }
                None => {
                    if !self.start_placement()? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Starts receiving the payload of the partial Data-In at the front of the receive buffer
    /// in place, if it qualifies; returns whether it did.
    fn start_placement(&mut self) -> Result<bool, Error> {
        let conn = &mut self.conn;
        let partial = match conn.framer.peek_data_in(&conn.rbuf) {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(false),
            // `decode` returned these for the same bytes already; kept for completeness.
            Err(e) => return Err(Error::Frame(e)),
        };
        let already = partial.data_in(&conn.rbuf);
        if partial.data_len() - already < PLACE_MIN_BYTES {
            return Ok(false);
        }
        let itt = partial.pdu().itt;
        let Some(task) = self.tasks.get_mut(&itt) else {
            return Ok(false);
        };
        // The framer bounded the length by our MaxRecvDataSegmentLength (< 2^24).
        let len = partial.data_len() as u32;
        let Some(mut placement) = task.start_placement(partial.pdu(), len) else {
            return Ok(false);
        };
        let (header, mut rx) = partial.start(&mut conn.rbuf);
        let moved = placement.append(&conn.rbuf[..already]);
        rx.handle_data(placement.landed());
        conn.rbuf.advance(moved);
        conn.header_reads = true;
        conn.placing = Some(Placing {
            itt,
            header,
            rx,
            placement,
        });
        Ok(true)
    }

    /// A placed Data-In is complete and its digest checked: account for it like any PDU.
    fn handle_placed(&mut self) -> Result<(), Error> {
        let Some(Placing {
            itt,
            header,
            placement,
            ..
        }) = self.conn.placing.take()
        else {
            return Ok(());
        };
        self.counters.pdu_received(opcode::DATA_IN);
        if self.conn.traced() || tracing::enabled!(tracing::Level::TRACE) {
            // Observers see the whole PDU, payload included (copied only for them).
            let pdu = Pdu::DataIn(DataIn {
                data: Bytes::copy_from_slice(placement.landed()),
                ..header.clone()
            });
            self.conn.trace_received(&pdu);
        }
        self.track_data_in(&header);
        let progress = match self.tasks.get_mut(&itt) {
            Some(t) => t.handle_placed(&header, placement),
            // The task cannot go away while its buffer is lent out; be safe anyway.
            None => return Ok(()),
        };
        self.progress(itt, progress);
        Ok(())
    }
}
