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
use sluice_proto::task::initiator::Placement;

use std::time::Instant;

use sluice_proto::initiator::{ConnId, InitiatorSession};

use crate::counters::Counters;
use crate::error::Error;
use crate::transport::Transport;

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

/// Handles what the receive buffer holds: whole PDUs, the end of a placed Data-In, and the
/// start of the next placement. An error ends the connection.
pub(crate) fn handle_received(
    core: &mut InitiatorSession,
    conn: ConnId,
    t: &mut Transport,
    counters: &Counters,
) -> Result<(), Error> {
    loop {
        if let Some(p) = &mut t.placing {
            if p.wants_data() {
                return Ok(());
            }
            match p.rx.finish(&mut t.rbuf) {
                Ok(false) => return Ok(()),
                Ok(true) => handle_placed(core, conn, t, counters),
                Err(e) => {
                    let Some(Placing {
                        header, placement, ..
                    }) = t.placing.take()
                    else {
                        return Err(Error::Frame(e));
                    };
                    if let FrameError::DataDigest { .. } = e {
                        counters.lock().data_digest_errors += 1;
                    }
                    if !core.handle_placement_failed(conn, &header, placement, &e, Instant::now()) {
                        return Err(Error::Frame(e));
                    }
                }
            }
            continue;
        }
        let before = t.rbuf.len();
        let decoded = match t.decode() {
            Ok(d) => d,
            Err(Error::Frame(e)) => {
                // Under error recovery a digest error costs the PDU, not the connection.
                if core.handle_frame_error(conn, &e, Instant::now()) {
                    continue;
                }
                return Err(Error::Frame(e));
            }
            Err(e) => return Err(e),
        };
        match decoded {
            Some(pdu) => {
                if before - t.rbuf.len() > HEADER_READ_BYTES {
                    // PDUs with data of their own: back to reading in large chunks.
                    t.header_reads = false;
                }
                core.handle_pdu(conn, pdu, Instant::now());
            }
            None => {
                if !start_placement(core, conn, t)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Starts receiving the payload of the partial Data-In at the front of the receive buffer in
/// place, if it qualifies; returns whether it did.
fn start_placement(
    core: &mut InitiatorSession,
    conn: ConnId,
    t: &mut Transport,
) -> Result<bool, Error> {
    if t.faults.is_some() {
        // The fault test hook sees whole frames only: nothing is placed under it.
        return Ok(false);
    }
    let partial = match t.framer.peek_data_in(&t.rbuf) {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(false),
        // `decode` returned these for the same bytes already; kept for completeness.
        Err(e) => return Err(Error::Frame(e)),
    };
    let already = partial.data_in(&t.rbuf);
    if partial.data_len() - already < PLACE_MIN_BYTES {
        return Ok(false);
    }
    // The framer bounded the length by our MaxRecvDataSegmentLength (< 2^24).
    let len = partial.data_len() as u32;
    let Some(mut placement) = core.start_placement(conn, partial.pdu(), len) else {
        return Ok(false);
    };
    let (header, mut rx) = partial.start(&mut t.rbuf);
    let moved = placement.append(&t.rbuf[..already]);
    rx.handle_data(placement.landed());
    t.rbuf.advance(moved);
    t.header_reads = true;
    t.placing = Some(Placing {
        header,
        rx,
        placement,
    });
    Ok(true)
}

/// A placed Data-In is complete and its digest checked: account for it like any PDU.
fn handle_placed(
    core: &mut InitiatorSession,
    conn: ConnId,
    t: &mut Transport,
    counters: &Counters,
) {
    let Some(Placing {
        header, placement, ..
    }) = t.placing.take()
    else {
        return;
    };
    counters.pdu_received(opcode::DATA_IN);
    if t.traced() || tracing::enabled!(tracing::Level::TRACE) {
        // Observers see the whole PDU, payload included (copied only for them).
        let pdu = Pdu::DataIn(DataIn {
            data: Bytes::copy_from_slice(placement.landed()),
            ..header.clone()
        });
        t.trace_received(&pdu);
    }
    core.handle_placed(conn, &header, placement, Instant::now());
}
