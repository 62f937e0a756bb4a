//! iSER connections (RFC 7145): after its login on the byte stream, each connection's PDUs
//! go through the production datamovers (`sluice_proto::iser`) and `sluice-rdma`'s software
//! queue pairs, whose frames the simulator's pipes carry in virtual time.
//!
//! - The initiator's datamover registers a buffer per task in its protection domain and
//!   advertises it in the iSER header of the command's Send (RSV for read data, WSV for write
//!   data beyond the immediate data).
//! - The target's datamover turns the core's Data-In into RDMA Writes into the advertised read
//!   buffer, its R2Ts into RDMA Reads of the write buffer (whose data goes back to the core as
//!   Data-Out), and the SCSI Response into a Send with Invalidate of the task's STag.
//! - Every other PDU travels in a Send behind an iSER header.
//!
//! The provider refuses any access outside a registered region, without its right or through
//! a stale or invalidated STag, and stops the connection; unless a fault the seed drew
//! explains it, that is a violation ("no data moves outside advertised buffers").

use bytes::BytesMut;
use sluice_proto::iser::{
    encode_send, InitiatorDatamover, InitiatorOut, TargetDatamover, TargetOp,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_proto::text::{DigestKind, OperationalOffer};
use sluice_rdma::{WcOpcode, WcStatus};

use super::env::ScsiEnv;
use super::trace::trace;
use super::World;
use crate::faults::IserFault;
use crate::rdma::{BufferState, RdmaEvent, RdmaSide, TaskBuffers};
use crate::{IserCounts, Transport, Violation};

/// The largest data segment a Send carries: receive buffers are posted for this much (the
/// role of InitiatorRecvDataSegmentLength and TargetRecvDataSegmentLength, RFC 7145 section
/// 6.3; bulk data never travels in Sends).
const MAX_SEND_DATA_SEGMENT: u32 = 16_384;

/// The initiator's end of an iSER connection.
pub(crate) struct InitiatorIser {
    rdma: RdmaSide,
    mover: InitiatorDatamover,
    buffers: BufferState,
    out: InitiatorOut,
}

/// The target's end of an iSER connection.
pub(crate) struct TargetIser {
    rdma: RdmaSide,
    mover: TargetDatamover,
    ops: Vec<TargetOp>,
    /// Batches of frames sent, for the reset schedule.
    batches: u64,
    /// The core closed the connection while work requests still waited for the send queue:
    /// it closes once they are on the wire (its last Send is the Logout Response).
    pub(super) close_when_posted: bool,
}

/// A deliberate datamover bug, for tests that show the sweep catches one.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Sabotage {
    /// None.
    #[default]
    None,
    /// Every RDMA Write lands this many bytes after its address.
    WriteOffset(u64),
}

/// What an iSER session offers differently (RFC 7145 section 6.3): no digests (the RDMA
/// layer protects the data), data segments sized for Sends and ErrorRecoveryLevel 0.
/// ImmediateData, InitialR2T and FirstBurstLength range as over TCP (section 7.3.4:
/// immediate and unsolicited data travel in Sends, the rest by RDMA Read).
pub(crate) fn adapt_offers(target: &mut OperationalOffer, initiator: &mut OperationalOffer) {
    for offer in [&mut *target, &mut *initiator] {
        // ErrorRecoveryLevel 0: the datamovers follow a task's buffers neither through a
        // command retry with the same ITT (level 1, RFC 7143 section 6.2.1: the initiator's
        // datamover registers new buffers and releases the ones the target may still be
        // writing or reading) nor through task reassignment to a new connection (level 2:
        // the buffers were advertised on the connection that failed).
        offer.error_recovery_level = 0;
        offer.header_digest = vec![DigestKind::None];
        offer.data_digest = vec![DigestKind::None];
        offer.max_recv_data_segment_length = offer
            .max_recv_data_segment_length
            .min(MAX_SEND_DATA_SEGMENT);
    }
    // As sluice's target does over iSER: unsolicited data in at most MAX_UNSOLICITED_SENDS
    // Sends of its receive length per command, so that a window of commands with their
    // unsolicited Data-Out fits the receives posted.
    target.first_burst_length = target.first_burst_length.min(
        target
            .max_recv_data_segment_length
            .saturating_mul(sluice_proto::iser::keys::MAX_UNSOLICITED_SENDS),
    );
}

/// A data PDU that iSER moves by RDMA and never in a Send: every Data-In and R2T, and a
/// Data-Out answering an R2T. Unsolicited Data-Out (TTT 0xffffffff) travels in Sends (RFC 7145
/// section 7.3.4).
/// The MaxOutstandingUnexpectedPDUs both sides hold each other to (RFC 7145 section 6.3.4):
/// the key's minimum, 2, in one seed of three, so that pings, task management and the
/// tasks it ends run against a limit the datamovers must hold Sends back for; no limit in
/// the rest.
fn unexpected_limit(seed: u64) -> u32 {
    if seed.is_multiple_of(3) {
        2
    } else {
        0
    }
}

fn is_data_pdu(pdu: &Pdu) -> bool {
    match pdu {
        Pdu::DataIn(_) | Pdu::R2t(_) => true,
        Pdu::DataOut(d) => d.ttt != sluice_proto::seq::Ttt::RESERVED,
        _ => false,
    }
}

impl World {
    fn sabotage_write_offset(&self) -> u64 {
        #[cfg(test)]
        if let Sabotage::WriteOffset(n) = self.sabotage {
            return n;
        }
        0
    }

    /// The target's end of link `i` finished its login: from here on its bytes are RDMA frames.
    pub(super) fn target_to_rdma_mode(
        &mut self,
        i: usize,
        params: &SessionParams,
        erl: u8,
    ) -> Result<(), Violation> {
        let dsl = params.target_max_recv_data_segment_length;
        let plan = self.faults.rdma_plan(self.cfg.seed, i, 1);
        let rdma = RdmaSide::new(dsl, plan)
            .map_err(|e| self.violation(format!("target RDMA setup: {e}")))?;
        // Most seeds' initiators accept Send with Invalidate (RFC 7145 section 5.1.1's
        // private data flag), some do not.
        let send_with_invalidate = !self.cfg.seed.is_multiple_of(4);
        // FirstBurstLength is the session's (leading-only, RFC 7143 section 13.14), which a
        // joining login's outcome carries.
        let first_burst = params.first_burst_length;
        self.links[i].t_iser = Some(Box::new(TargetIser {
            rdma,
            mover: TargetDatamover::new(dsl, dsl, send_with_invalidate, first_burst)
                .with_unexpected_limit(unexpected_limit(self.cfg.seed)),
            ops: Vec::new(),
            batches: 0,
            close_when_posted: false,
        }));
        if self.faults.iser != IserFault::None {
            self.workload.faulty = true;
            if erl == 0 {
                self.workload.lossy = true;
            }
        }
        Ok(())
    }

    /// The initiator's end of link `i` finished its login.
    pub(super) fn initiator_to_rdma_mode(
        &mut self,
        i: usize,
        params: &SessionParams,
    ) -> Result<(), Violation> {
        let dsl = params.initiator_max_recv_data_segment_length;
        // MaxBurstLength and FirstBurstLength are the session's (leading-only, RFC 7143
        // sections 13.13 and 13.14): a connection that joins a session did not negotiate
        // them, and its login's outcome carries the session's.
        let (max_burst, first_burst) = (params.max_burst_length, params.first_burst_length);
        let plan = self.faults.rdma_plan(self.cfg.seed, i, 0);
        let rdma = RdmaSide::new(dsl, plan)
            .map_err(|e| self.violation(format!("initiator RDMA setup: {e}")))?;
        let buffers = BufferState::new(match self.faults.iser {
            IserFault::WrongStag { every } => Some(every),
            _ => None,
        });
        self.links[i].i_iser = Some(Box::new(InitiatorIser {
            rdma,
            mover: InitiatorDatamover::new(dsl, max_burst, first_burst)
                .with_unexpected_limit(unexpected_limit(self.cfg.seed)),
            buffers,
            out: InitiatorOut::default(),
        }));
        Ok(())
    }

    /// Bytes that reached the target's end of link `i` in RDMA mode.
    pub(super) fn target_rdma_received(&mut self, i: usize) -> Result<(), Violation> {
        let link = &mut self.links[i];
        if let Some(t) = link.t_iser.as_mut() {
            t.rdma.ep.handle_bytes(&mut link.t.rbuf);
        }
        self.target_rdma_deliver(i).map(|_| ())
    }

    /// Bytes that reached the initiator's end of link `i` in RDMA mode.
    pub(super) fn initiator_rdma_received(&mut self, i: usize) -> Result<(), Violation> {
        let link = &mut self.links[i];
        if let Some(e) = link.i_iser.as_mut() {
            e.rdma.ep.handle_bytes(&mut link.i.rbuf);
        }
        self.initiator_rdma_deliver(i).map(|_| ())
    }

    /// What the target's queue pair completed: received Sends and finished RDMA Reads go to
    /// the session core.
    fn target_rdma_deliver(&mut self, i: usize) -> Result<bool, Violation> {
        let mut moved = false;
        loop {
            let link = &mut self.links[i];
            let (Some(conn), false) = (link.t.conn, link.t.closed) else {
                return Ok(moved);
            };
            let Some(t) = link.t_iser.as_mut() else {
                return Ok(moved);
            };
            let event = match t.rdma.poll() {
                Ok(Some(e)) => e,
                Ok(None) => return Ok(moved),
                Err(e) => return Err(self.violation(format!("target RDMA: {e}"))),
            };
            moved = true;
            let pdus = match event {
                RdmaEvent::Received(msg) => match t.mover.handle_send(&msg) {
                    Ok(pdu) => {
                        // Solicited data the datamover held until this Send completed its
                        // task's unsolicited part follows it (RDMA does not order Sends
                        // against Read Responses; this link happens to, so it is usually
                        // empty).
                        let mut pdus = vec![pdu];
                        pdus.extend(t.mover.take_released());
                        // The initiator's PDU may free room for what the target held back
                        // for its MaxOutstandingUnexpectedPDUs.
                        let mut ops = std::mem::take(&mut t.ops);
                        if let Err(e) = t.mover.release_held(usize::MAX, &mut ops) {
                            return Err(self.violation(format!("target datamover: {e}")));
                        }
                        let offset = self.sabotage_write_offset();
                        self.target_post_ops(i, ops, offset)?;
                        pdus
                    }
                    Err(e) => return Err(self.violation(format!("target datamover: {e}"))),
                },
                RdmaEvent::ReadDone(id, data) => match t.mover.handle_read_done(id, data) {
                    Ok(pdus) => pdus,
                    Err(e) => return Err(self.violation(format!("target datamover: {e}"))),
                },
                RdmaEvent::Failed(op, status) => return self.rdma_failed(i, "target", op, status),
            };
            let at = self.at(self.now);
            if let Some(s) = self.tsession.as_mut() {
                let mut env = ScsiEnv { scsi: &self.scsi };
                for pdu in pdus {
                    s.handle_pdu(conn, pdu, at, &mut env);
                }
            }
        }
    }

    /// What the initiator's queue pair completed: received Sends go through the datamover
    /// (a read's placed data becomes Data-In ahead of its response) to the session core.
    fn initiator_rdma_deliver(&mut self, i: usize) -> Result<bool, Violation> {
        let mut moved = false;
        loop {
            let link = &mut self.links[i];
            let (Some(conn), false) = (link.i.conn, link.i.closed) else {
                return Ok(moved);
            };
            let Some(e) = link.i_iser.as_mut() else {
                return Ok(moved);
            };
            let event = match e.rdma.poll() {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(moved),
                Err(err) => return Err(self.violation(format!("initiator RDMA: {err}"))),
            };
            moved = true;
            match event {
                RdmaEvent::Received(msg) => {
                    let mut bufs = TaskBuffers {
                        side: &mut e.rdma,
                        state: &mut e.buffers,
                    };
                    if let Err(err) = e.mover.handle_send(&msg, &mut bufs, &mut e.out) {
                        return Err(self.violation(format!("initiator datamover: {err}")));
                    }
                    // A response may free room for Sends held back for the target's
                    // MaxOutstandingUnexpectedPDUs.
                    self.initiator_post_sends(i)?;
                }
                RdmaEvent::ReadDone(..) => {
                    return Err(self.violation("an RDMA Read completed at the initiator"))
                }
                RdmaEvent::Failed(op, status) => {
                    return self.rdma_failed(i, "initiator", op, status)
                }
            }
            let Some(e) = self.links[i].i_iser.as_mut() else {
                return Ok(moved);
            };
            let to_core: Vec<Pdu> = e.out.to_core.drain(..).collect();
            let at = self.at(self.now);
            if let Some(s) = self.isession.as_mut() {
                for pdu in to_core {
                    s.handle_pdu(conn, pdu, at);
                }
            }
        }
    }

    /// A work request of link `i` failed: the queue pairs stopped and the connection is lost.
    /// Only a fault the seed drew may explain that: a lost message, or a wrong STag that the
    /// peer's memory protection refused (a remote access error, RFC 5040 section 6.4).
    fn rdma_failed(
        &mut self,
        i: usize,
        side: &str,
        op: WcOpcode,
        status: WcStatus,
    ) -> Result<bool, Violation> {
        let explained = match self.faults.iser {
            IserFault::Lost { .. } => true,
            IserFault::WrongStag { .. } => status == WcStatus::RemoteAccess,
            IserFault::None | IserFault::Delayed { .. } | IserFault::Reset { .. } => false,
        };
        if !explained {
            return Err(self.violation(format!(
                "{side}, connection {}: RDMA {op:?} completed with {status:?}{}",
                self.links[i].cid,
                if status == WcStatus::RemoteAccess {
                    ": a datamover touched memory outside the buffers advertised to it"
                } else {
                    ""
                }
            )));
        }
        if self.cfg.trace {
            eprintln!(
                "{:>12} cid {} {side} RDMA {op:?} failed: {status:?}; the connection is lost",
                self.now, self.links[i].cid
            );
        }
        self.iser_counts.remote_access_errors += u64::from(status == WcStatus::RemoteAccess);
        self.reset_link(i);
        Ok(true)
    }

    /// Target PDUs of link `i` through its datamover to its queue pair, then completions and
    /// frames.
    pub(super) fn target_rdma_transmit(
        &mut self,
        i: usize,
        conn: sluice_proto::target::ConnId,
    ) -> Result<bool, Violation> {
        let mut moved = false;
        let offset = self.sabotage_write_offset();
        while let Some(pdu) = self.tsession.as_mut().and_then(|s| s.poll_transmit(conn)) {
            moved = true;
            self.pdus += 1;
            trace(self.cfg.trace, self.now, self.links[i].cid, "T->I", &pdu);
            let link = &mut self.links[i];
            if let Err(e) =
                link.mon
                    .target_sent(&pdu, self.t_config.queue_depth, &mut self.session_mon)
            {
                let e = format!("target, connection {}: {e}", link.cid);
                return Err(self.violation(e));
            }
            let Some(t) = link.t_iser.as_mut() else {
                return Ok(moved);
            };
            let mut ops = std::mem::take(&mut t.ops);
            if let Err(e) = t.mover.handle_core_pdu(pdu, &mut ops) {
                return Err(self.violation(format!("target datamover: {e}")));
            }
            self.target_post_ops(i, ops, offset)?;
        }
        moved |= self.target_rdma_deliver(i)?;
        self.flush_rdma(i);
        let link = &mut self.links[i];
        if let Some(t) = link.t_iser.as_mut() {
            if t.close_when_posted && !t.rdma.backlogged() {
                t.close_when_posted = false;
                link.down.close();
                self.target_closed(i);
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Posts the work requests the target's datamover asked for on link `i`.
    fn target_post_ops(
        &mut self,
        i: usize,
        mut ops: Vec<TargetOp>,
        offset: u64,
    ) -> Result<(), Violation> {
        let link = &mut self.links[i];
        let Some(t) = link.t_iser.as_mut() else {
            return Ok(());
        };
        {
            for op in ops.drain(..) {
                let posted = match op {
                    TargetOp::Send {
                        header,
                        pdu,
                        invalidate,
                    } => {
                        if is_data_pdu(&pdu) {
                            self.iser_counts.data_pdus_in_sends += 1;
                            return Err(self.violation(format!(
                                "target: a {:?} in a Send: iSER moves data by RDMA",
                                pdu.opcode()
                            )));
                        }
                        let mut buf = BytesMut::new();
                        encode_send(&header, &pdu, &mut buf);
                        t.rdma.send(&buf, invalidate)
                    }
                    TargetOp::Write { stag, va, data } => {
                        if self.cfg.trace {
                            eprintln!(
                                "{:>12} cid {} T->I RDMA Write stag {stag:#x} va {va:#x} len {}",
                                self.now,
                                link.cid,
                                data.len()
                            );
                        }
                        t.rdma.write(&data, stag, va.wrapping_add(offset))
                    }
                    TargetOp::Read { id, stag, va, len } => {
                        if self.cfg.trace {
                            eprintln!(
                                "{:>12} cid {} T->I RDMA Read stag {stag:#x} va {va:#x} len {len}",
                                self.now, link.cid
                            );
                        }
                        t.rdma.read(len, stag, va, id)
                    }
                };
                // A queue pair that already stopped refuses work: its failure is on its way.
                if let Err(e) = posted {
                    if !t.rdma.failed() {
                        return Err(self.violation(format!("target RDMA post: {e}")));
                    }
                }
            }
            t.ops = ops;
        }
        Ok(())
    }

    /// Whether the target's end of link `i` must wait for its queued work requests before it
    /// closes (and now does).
    pub(super) fn target_close_waits(&mut self, i: usize) -> bool {
        match self.links[i].t_iser.as_mut() {
            Some(t) if t.rdma.backlogged() => {
                t.close_when_posted = true;
                true
            }
            _ => false,
        }
    }

    /// Initiator PDUs of link `i` through its datamover to its queue pair (and the
    /// datamover's own R2Ts back to the core), then completions and frames.
    pub(super) fn initiator_rdma_transmit(
        &mut self,
        i: usize,
        conn: sluice_proto::initiator::ConnId,
    ) -> Result<bool, Violation> {
        let mut moved = false;
        let at = self.at(self.now);
        while let Some(pdu) = self.isession.as_mut().and_then(|s| s.poll_transmit(conn)) {
            moved = true;
            self.pdus += 1;
            trace(self.cfg.trace, self.now, self.links[i].cid, "I->T", &pdu);
            let link = &mut self.links[i];
            if let Err(e) = link.mon.initiator_sent(&pdu, &mut self.session_mon) {
                let e = format!("initiator, connection {}: {e}", link.cid);
                return Err(self.violation(e));
            }
            let Some(e) = link.i_iser.as_mut() else {
                return Ok(moved);
            };
            let mut bufs = TaskBuffers {
                side: &mut e.rdma,
                state: &mut e.buffers,
            };
            if let Err(err) = e.mover.handle_core_pdu(pdu, &mut bufs, &mut e.out) {
                return Err(self.violation(format!("initiator datamover: {err}")));
            }
            self.initiator_post_sends(i)?;
            let Some(e) = self.links[i].i_iser.as_mut() else {
                return Ok(moved);
            };
            let to_core: Vec<Pdu> = e.out.to_core.drain(..).collect();
            if let Some(s) = self.isession.as_mut() {
                for pdu in to_core {
                    s.handle_pdu(conn, pdu, at);
                }
            }
        }
        moved |= self.initiator_rdma_deliver(i)?;
        self.flush_rdma(i);
        Ok(moved)
    }

    /// Posts the Sends the initiator's datamover has ready on link `i`.
    fn initiator_post_sends(&mut self, i: usize) -> Result<(), Violation> {
        let Some(e) = self.links[i].i_iser.as_mut() else {
            return Ok(());
        };
        let sends: Vec<_> = e.out.sends.drain(..).collect();
        for (header, pdu) in sends {
            if is_data_pdu(&pdu) {
                self.iser_counts.data_pdus_in_sends += 1;
                return Err(self.violation(format!(
                    "initiator: a {:?} in a Send: iSER moves data by RDMA",
                    pdu.opcode()
                )));
            }
            if matches!(pdu, Pdu::DataOut(_)) {
                self.iser_counts.unsolicited_data_outs += 1;
            }
            let mut buf = BytesMut::new();
            encode_send(&header, &pdu, &mut buf);
            let Some(e) = self.links[i].i_iser.as_mut() else {
                return Ok(());
            };
            if let Err(err) = e.rdma.send(&buf, None) {
                if !e.rdma.failed() {
                    return Err(self.violation(format!("initiator RDMA post: {err}")));
                }
            }
        }
        Ok(())
    }

    /// The frames both queue pairs of link `i` have for the pipes; the reset schedule.
    fn flush_rdma(&mut self, i: usize) {
        let now = self.now;
        let link = &mut self.links[i];
        let mut batches = 0;
        if let (Some(t), false) = (link.t_iser.as_mut(), link.t.closed) {
            let (bytes, delay) = t.rdma.transmit();
            if !bytes.is_empty() {
                let delay = delay.map_or(0, |d| d.as_nanos() as u64);
                link.down.send(now + delay, bytes, &mut self.rng);
                t.batches += 1;
                batches = t.batches;
            }
        }
        if let (Some(e), false) = (link.i_iser.as_mut(), link.i.closed) {
            let (bytes, delay) = e.rdma.transmit();
            if !bytes.is_empty() {
                let delay = delay.map_or(0, |d| d.as_nanos() as u64);
                link.up.send(now + delay, bytes, &mut self.rng);
            }
        }
        if let IserFault::Reset { every } = self.faults.iser {
            if batches > 0 && batches.is_multiple_of(every) {
                if self.cfg.trace {
                    eprintln!("{now:>12} cid {} FAULT connection reset", link.cid);
                }
                self.reset_link(i);
            }
        }
    }

    /// What every iSER connection did.
    pub(super) fn iser_totals(&self) -> IserCounts {
        let mut c = self.iser_counts;
        for link in &self.links {
            if let Some(t) = &link.t_iser {
                let r = t.rdma.counts;
                c.sends += r.sends;
                c.send_invalidates += r.send_invalidates;
                c.rdma_writes += r.writes;
                c.rdma_write_bytes += r.write_bytes;
                c.rdma_reads += r.reads;
                c.rdma_read_bytes += r.read_bytes;
            }
            if let Some(e) = &link.i_iser {
                c.sends += e.rdma.counts.sends;
                c.wrong_stags += e.buffers.wrong_advertised;
                c.held_back += e.mover.stats.held_back;
            }
        }
        c
    }

    /// The counters of a finished run: data moved by RDMA, never in PDUs, and every byte the
    /// initiator's core got as read data was carried by an RDMA Write.
    pub(super) fn check_iser_counts(&self, c: &IserCounts) -> Result<(), Violation> {
        if self.cfg.transport != Transport::Iser {
            return Ok(());
        }
        if c.data_pdus_in_sends != 0 {
            return Err(self.violation("Data-In, Data-Out or R2T PDUs travelled in Sends"));
        }
        let placed: u64 = self
            .links
            .iter()
            .filter_map(|l| l.i_iser.as_ref())
            .map(|e| e.mover.stats.placed_bytes)
            .sum();
        if placed > c.rdma_write_bytes {
            return Err(self.violation(format!(
                "the initiator's core got {placed} bytes of read data, RDMA Writes carried {}",
                c.rdma_write_bytes
            )));
        }
        let c_reads = self.workload.counts.reads;
        if c_reads > 0 && c.rdma_writes == 0 && !self.workload.faulty {
            return Err(self.violation(format!("{c_reads} reads and not one RDMA Write")));
        }
        Ok(())
    }
}
