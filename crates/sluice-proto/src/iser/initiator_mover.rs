//! The initiator's iSER datamover, sans-IO (RFC 7145 sections 7.3.2-7.3.7): between the
//! initiator's session core, which speaks PDUs as it does over TCP, and an RDMA queue pair.
//!
//! - A read command gets a registered buffer the target may RDMA-Write; its STag and base
//!   offset go in the iSER header (RSV). When the SCSI Response arrives in a Send, the data
//!   the target placed is handed to the core as Data-In PDUs ahead of the response, so the
//!   core completes the read exactly as over TCP.
//! - A write's immediate data travels in the command's Send and, when the command's F bit is
//!   clear (InitialR2T=No), its unsolicited Data-Out PDUs in Sends of their own right after
//!   it, up to FirstBurstLength (section 7.3.4). The rest, the solicited part, is
//!   registered for the target to RDMA-Read (WSV), the base offset addressing the first
//!   solicited byte (section 9.2). The core only hands out solicited data in answer to R2Ts,
//!   so the datamover asks the core for it with R2Ts of its own (never sent on the wire,
//!   each at most MaxBurstLength) and holds the command (and the unsolicited Data-Out the
//!   core queues behind it) while it collects the Data-Out data, which are slices of the
//!   application's buffer. Once it has all of it, it registers those slices in place as one
//!   gathered region (no zero-filled buffer, no copy) and sends the command with its STag.
//!   The target's R2Ts become RDMA Reads and never reach this side.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use super::target_mover::{decode_one, MoverError};
use super::unexpected::UnexpectedWindow;
use super::unsolicited::unsolicited_len;
use super::{BufferAdvertisement, IserHeader, IserMessage};
use crate::framing::Framer;
use crate::pdu::{DataIn, DataOut, Pdu, R2t, ScsiCommand};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Target transfer tags of the datamover's own R2Ts carry this high bit, so that a Data-Out
/// answering one is told apart from anything else the core sends.
const OWN_TTT: u32 = 0x8000_0000;

/// The memory a datamover registers: the driver's queue pair's protection domain, or a
/// test's fake.
pub trait Regions {
    /// Registers `len` bytes the peer may RDMA-Write: a read command's buffer.
    fn register(&mut self, len: u32) -> Result<BufferAdvertisement, String>;
    /// Registers a write's solicited data, `chunks` one after the other, as one buffer the
    /// peer may RDMA-Read (and not write), its base offset addressing the first byte of the
    /// first chunk. An implementation registers the chunks in place where its memory allows
    /// (the application's buffer, no copy); [`release`](Self::release) deregisters it.
    fn register_gathered(&mut self, chunks: Vec<Bytes>) -> Result<BufferAdvertisement, String>;
    /// The first `len` bytes of a registered buffer, once the peer is done with it (the
    /// task's response arrived; [`release`](Self::release) follows): an implementation may
    /// hand its memory over rather than copy it, and deregister it here.
    fn contents(&mut self, buf: BufferAdvertisement, len: u32) -> Result<Bytes, String>;
    /// Deregisters a buffer.
    fn release(&mut self, buf: BufferAdvertisement);
}

#[derive(Debug)]
struct Task {
    lun: Lun,
    read: Option<(BufferAdvertisement, u32)>,
    /// The write's solicited data, registered once all of it arrived (the command is sent
    /// with its STag then, not before: nothing refers to it while the command is held).
    write: Option<BufferAdvertisement>,
    /// A write command held until the core handed out all its solicited data, and the next
    /// offset to ask for.
    held: Option<(ScsiCommand, u32)>,
    /// The solicited data the core handed out so far, in order: slices of its buffer.
    solicited: Vec<Bytes>,
    /// Bytes in `solicited`.
    collected: u32,
    /// Unsolicited Data-Out the core queued behind a held command, sent right after it.
    held_data: Vec<DataOut>,
    /// Bytes of the write that travel in Sends; the write buffer holds the rest.
    unsolicited: u32,
}

/// What to do with the output of [`InitiatorDatamover::handle_core_pdu`].
#[derive(Debug, Default)]
pub struct InitiatorOut {
    /// Sends to post, in order.
    pub sends: Vec<(IserHeader, Pdu)>,
    /// PDUs to hand back to the core, in order.
    pub to_core: Vec<Pdu>,
}

/// Counts of what the datamover did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InitiatorMoverStats {
    /// Sends posted.
    pub sends: u64,
    /// Sends received.
    pub sends_received: u64,
    /// Read buffers advertised (RSV) and the bytes the target placed in them.
    pub read_buffers: u64,
    /// Bytes placed by the target's RDMA Writes.
    pub placed_bytes: u64,
    /// Write buffers advertised (WSV).
    pub write_buffers: u64,
    /// Bytes the target could RDMA-Read (beyond the immediate and unsolicited data).
    pub readable_bytes: u64,
    /// Write data sent in Sends: immediate data and unsolicited Data-Out.
    pub unsolicited_bytes: u64,
    /// Unsolicited Data-Out PDUs sent (each in a Send of its own).
    pub unsolicited_data_outs: u64,
    /// Sends held back because the target's MaxOutstandingUnexpectedPDUs was reached
    /// (each sent later, once a response freed room).
    pub held_back: u64,
    /// The most unexpected PDUs outstanding at the target at once.
    pub peak_unexpected: u64,
}

/// The initiator's datamover for one connection.
#[derive(Debug)]
pub struct InitiatorDatamover {
    tasks: HashMap<Itt, Task>,
    framer: Framer,
    max_burst: u32,
    first_burst: u32,
    /// StatSN, ExpCmdSN and MaxCmdSN for the datamover's own R2Ts: the last the target
    /// sent, or, before it sent any, a window the core ignores (MaxCmdSN below ExpCmdSN - 1,
    /// RFC 7143 section 4.2.2.1), so that an R2T never moves the core's command window.
    last: (SeqNum, SeqNum, SeqNum),
    /// Unexpected PDUs outstanding at the target, against its declared limit.
    unexpected: UnexpectedWindow,
    /// Sends held back, in order, while the limit is reached (see [`Self::send`]).
    pending: VecDeque<(IserHeader, Pdu)>,
    /// What was done so far.
    pub stats: InitiatorMoverStats,
}

impl InitiatorDatamover {
    /// A datamover that receives Sends with data segments up to `initiator_recv_dsl` and asks
    /// the core for at most `max_burst` bytes per R2T of its own (the negotiated
    /// MaxBurstLength); `first_burst` is the negotiated FirstBurstLength (how much of a write
    /// whose command has the F bit clear travels in Sends).
    pub fn new(initiator_recv_dsl: u32, max_burst: u32, first_burst: u32) -> Self {
        InitiatorDatamover {
            tasks: HashMap::new(),
            framer: Framer::new(initiator_recv_dsl),
            max_burst: max_burst.max(512),
            first_burst,
            last: (SeqNum::new(0), SeqNum::new(2), SeqNum::new(0)),
            unexpected: UnexpectedWindow::default(),
            pending: VecDeque::new(),
            stats: InitiatorMoverStats::default(),
        }
    }

    /// Holds this side to the target's MaxOutstandingUnexpectedPDUs (RFC 7145 section
    /// 6.3.4; 0: no limit).
    pub fn with_unexpected_limit(mut self, limit: u32) -> Self {
        self.unexpected = UnexpectedWindow::new(limit);
        self
    }

    /// Unexpected PDUs outstanding at the target now.
    pub fn unexpected_outstanding(&self) -> usize {
        self.unexpected.outstanding()
    }

    /// Sends held back now.
    pub fn held_back(&self) -> usize {
        self.pending.len()
    }

    /// One PDU the core wants sent.
    pub fn handle_core_pdu(
        &mut self,
        pdu: Pdu,
        regions: &mut dyn Regions,
        out: &mut InitiatorOut,
    ) -> Result<(), MoverError> {
        match pdu {
            Pdu::ScsiCommand(cmd) => self.command(cmd, regions, out),
            Pdu::DataOut(d) if d.ttt.0 & OWN_TTT != 0 && d.ttt != Ttt::RESERVED => {
                let next = self.collect(&d)?;
                if d.final_bit {
                    let task = self
                        .tasks
                        .get_mut(&d.itt)
                        .ok_or(MoverError::UnknownTask(d.itt.0))?;
                    let (cmd, _) = task.held.take().ok_or(MoverError::UnknownTask(d.itt.0))?;
                    self.ask_or_send(cmd, next, regions, out)?;
                }
                Ok(())
            }
            Pdu::DataOut(d) if d.ttt == Ttt::RESERVED => {
                // Unsolicited data follows its command on the wire: behind a held command
                // it waits for it.
                match self.tasks.get_mut(&d.itt) {
                    Some(task) if task.held.is_some() => task.held_data.push(d),
                    _ => self.send_unsolicited(d, out),
                }
                Ok(())
            }
            other => {
                self.send(IserHeader::default(), other, out);
                Ok(())
            }
        }
    }

    /// Keeps the data of a Data-Out answering one of the datamover's own R2Ts (a slice of
    /// the core's buffer, not a copy), and returns the offset the R2T asked up to. The
    /// core answers each R2T in order and in full (RFC 7143 section 11.8, with one
    /// R2T outstanding at a time): data out of order, past the R2T's end, or a burst
    /// closed short would leave the target reading the wrong bytes, and fails the
    /// connection instead.
    fn collect(&mut self, d: &DataOut) -> Result<u32, MoverError> {
        let task = self
            .tasks
            .get_mut(&d.itt)
            .ok_or(MoverError::UnknownTask(d.itt.0))?;
        let asked_to = match &task.held {
            Some((_, asked_to)) => *asked_to,
            None => return Err(MoverError::UnknownTask(d.itt.0)),
        };
        let expected = task.unsolicited + task.collected;
        let len = u32::try_from(d.data.len()).unwrap_or(u32::MAX);
        let end = d.buffer_offset.checked_add(len);
        if d.buffer_offset != expected || end.is_none_or(|end| end > asked_to) {
            return Err(MoverError::Malformed(format!(
                "core's Data-Out of {len} bytes at {}: expected the bytes from {expected} up \
                 to {asked_to}",
                d.buffer_offset
            )));
        }
        if d.final_bit && end != Some(asked_to) {
            return Err(MoverError::Malformed(format!(
                "core's Data-Out sequence ends at {} short of {asked_to}",
                expected + len
            )));
        }
        task.collected += len;
        if !d.data.is_empty() {
            task.solicited.push(d.data.clone());
        }
        Ok(asked_to)
    }

    fn send_unsolicited(&mut self, d: DataOut, out: &mut InitiatorOut) {
        self.stats.unsolicited_data_outs += 1;
        self.stats.unsolicited_bytes += d.data.len() as u64;
        self.send(IserHeader::default(), Pdu::DataOut(d), out);
    }

    fn command(
        &mut self,
        cmd: ScsiCommand,
        regions: &mut dyn Regions,
        out: &mut InitiatorOut,
    ) -> Result<(), MoverError> {
        let read_len = if cmd.write {
            cmd.bidi_read_length.unwrap_or(0)
        } else if cmd.read {
            cmd.expected_data_transfer_length
        } else {
            0
        };
        let unsolicited = unsolicited_len(&cmd, self.first_burst);
        let mut task = Task {
            lun: cmd.lun,
            read: None,
            write: None,
            held: None,
            solicited: Vec::new(),
            collected: 0,
            held_data: Vec::new(),
            unsolicited,
        };
        if read_len > 0 {
            let buf = regions.register(read_len).map_err(MoverError::Malformed)?;
            self.stats.read_buffers += 1;
            task.read = Some((buf, read_len));
        }
        if cmd.write {
            self.stats.unsolicited_bytes += cmd.data.len() as u64;
        }
        let itt = cmd.itt;
        // An ITT still on record belongs to a task that ended without a response reaching
        // the datamover (aborted): its buffers go now.
        if let Some(old) = self.tasks.insert(itt, task) {
            release(regions, &old);
        }
        self.ask_or_send(cmd, unsolicited, regions, out)
    }

    /// Asks the core for the write data from `next` on with an R2T of the datamover's own,
    /// or, with all of it collected, registers it and sends the command.
    fn ask_or_send(
        &mut self,
        cmd: ScsiCommand,
        next: u32,
        regions: &mut dyn Regions,
        out: &mut InitiatorOut,
    ) -> Result<(), MoverError> {
        let edtl = cmd.expected_data_transfer_length;
        let Some(task) = self.tasks.get_mut(&cmd.itt) else {
            return Ok(());
        };
        if cmd.write && next < edtl {
            let len = (edtl - next).min(self.max_burst);
            // R2TSNs count from 0 (RFC 7143 section 11.8.5) from the first byte after the
            // unsolicited data, which may be a whole MaxBurstLength.
            let r2t_sn = next.saturating_sub(task.unsolicited) / self.max_burst;
            let (stat_sn, exp_cmd_sn, max_cmd_sn) = self.last;
            out.to_core.push(Pdu::R2t(R2t {
                lun: task.lun,
                itt: cmd.itt,
                ttt: Ttt(OWN_TTT | r2t_sn),
                stat_sn,
                exp_cmd_sn,
                max_cmd_sn,
                r2t_sn,
                buffer_offset: next,
                desired_data_transfer_length: len,
            }));
            task.held = Some((cmd, next + len));
            return Ok(());
        }
        if cmd.write && edtl > task.unsolicited {
            // Section 9.2: the buffer holds the solicited data only; its base offset is
            // that of the first solicited byte. The data is registered where it is.
            let solicited = std::mem::take(&mut task.solicited);
            let buf = regions
                .register_gathered(solicited)
                .map_err(MoverError::Malformed)?;
            task.write = Some(buf);
            self.stats.write_buffers += 1;
            self.stats.readable_bytes += u64::from(edtl - task.unsolicited);
        }
        let header = IserHeader {
            write: task.write,
            read: task.read.map(|(b, _)| b),
        };
        let held_data = std::mem::take(&mut task.held_data);
        self.send(header, Pdu::ScsiCommand(cmd), out);
        for d in held_data {
            self.send_unsolicited(d, out);
        }
        Ok(())
    }

    /// Sends a PDU, or holds it back while the target's limit of unexpected PDUs is reached
    /// (RFC 7145 section 6.3.4: the limit is the receive buffers the target keeps beyond
    /// what iSCSI's own flow control bounds; holding back, not failing, is the sender's
    /// part). Only unexpected PDUs wait for room, in the order the core sent them; an
    /// expected PDU goes at once unless a PDU of its own task is held (a command's
    /// unsolicited Data-Out stays behind the command). Holding a non-immediate command
    /// behind a held request would stall the target, which takes commands in CmdSN order
    /// and answers a TMF only once the commands before it arrived; a NOP-Out echoing the
    /// target's ping must never wait, as the target may hold its own Sends until it comes.
    fn send(&mut self, header: IserHeader, pdu: Pdu, out: &mut InitiatorOut) {
        if self.must_wait(&pdu, self.pending.iter().map(|(_, p)| p)) {
            self.stats.held_back += 1;
            self.pending.push_back((header, pdu));
            return;
        }
        self.post(header, pdu, out);
    }

    /// Whether `pdu` must wait behind `held` (the PDUs held before it).
    fn must_wait<'a>(&self, pdu: &Pdu, mut held: impl Iterator<Item = &'a Pdu>) -> bool {
        if UnexpectedWindow::counts(pdu) {
            !self.unexpected.has_room() || held.any(UnexpectedWindow::counts)
        } else {
            let itt = pdu.itt();
            itt != Itt::RESERVED && held.any(|p| p.itt() == itt)
        }
    }

    fn post(&mut self, header: IserHeader, pdu: Pdu, out: &mut InitiatorOut) {
        self.unexpected.sent(&pdu);
        self.stats.peak_unexpected = self
            .stats
            .peak_unexpected
            .max(self.unexpected.outstanding() as u64);
        self.stats.sends += 1;
        out.sends.push((header, pdu));
    }

    /// Sends what was held back, as far as the limit now allows.
    fn release_pending(&mut self, out: &mut InitiatorOut) {
        if self.pending.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.pending);
        let mut kept: VecDeque<(IserHeader, Pdu)> = VecDeque::new();
        for (header, pdu) in held {
            if self.must_wait(&pdu, kept.iter().map(|(_, p)| p)) {
                kept.push_back((header, pdu));
            } else {
                self.post(header, pdu, out);
            }
        }
        self.pending = kept;
    }

    /// One received Send: the PDUs for the core (a read's data as Data-In ahead of its
    /// SCSI Response).
    pub fn handle_send(
        &mut self,
        msg: &[u8],
        regions: &mut dyn Regions,
        out: &mut InitiatorOut,
    ) -> Result<(), MoverError> {
        self.stats.sends_received += 1;
        let rest = match IserMessage::parse(msg) {
            Ok((IserMessage::Control(_), rest)) => rest,
            Ok((other, _)) => {
                return Err(MoverError::Malformed(format!(
                    "{} in full feature phase",
                    other.opcode()
                )))
            }
            Err(e) => return Err(MoverError::Malformed(e.to_string())),
        };
        let mut pdu = decode_one(&mut self.framer, rest)?;
        match &mut pdu {
            Pdu::ScsiResponse(rsp) => {
                self.last = (rsp.stat_sn.next(), rsp.exp_cmd_sn, rsp.max_cmd_sn);
                if let Some(task) = self.tasks.remove(&rsp.itt) {
                    if let Some((buf, len)) = task.read {
                        let placed = if rsp.underflow {
                            len.saturating_sub(rsp.residual)
                        } else {
                            len
                        };
                        let data = regions
                            .contents(buf, placed)
                            .map_err(MoverError::Malformed)?;
                        self.stats.placed_bytes += u64::from(placed);
                        // The core counts the Data-In it got against ExpDataSN (RFC 7143
                        // section 11.4.8); over iSER none crossed the wire (RFC 7145 section
                        // 7.3.5), and the ones the core gets are this datamover's.
                        rsp.exp_data_sn = self.data_in(rsp.itt, task.lun, rsp, data, out);
                    }
                    release(regions, &task);
                }
            }
            Pdu::NopIn(n) => self.last = (n.stat_sn, n.exp_cmd_sn, n.max_cmd_sn),
            Pdu::R2t(_) | Pdu::DataIn(_) => {
                return Err(MoverError::Malformed(
                    "R2T or Data-In in a Send: iSER moves data by RDMA".into(),
                ))
            }
            _ => {}
        }
        self.unexpected.received(&pdu);
        self.release_pending(out);
        out.to_core.push(pdu);
        Ok(())
    }

    /// The read's data as one Data-In PDU (none for no data), returning how many: the
    /// target placed it all in one buffer, which the core then completes the read with,
    /// without reassembling it. Data-In sized as over TCP (MaxRecvDataSegmentLength, the F
    /// bit every MaxBurstLength) made the core copy every byte into a buffer of its own, for
    /// PDUs that never existed on the wire.
    fn data_in(
        &self,
        itt: Itt,
        lun: Lun,
        rsp: &crate::pdu::ScsiResponse,
        data: Bytes,
        out: &mut InitiatorOut,
    ) -> u32 {
        if data.is_empty() {
            return 0;
        }
        out.to_core.push(Pdu::DataIn(DataIn {
            final_bit: true,
            ack: false,
            overflow: false,
            underflow: false,
            status_present: false,
            status: crate::pdu::codes::ScsiStatus::Good,
            lun,
            itt,
            ttt: Ttt::RESERVED,
            stat_sn: SeqNum::new(0),
            exp_cmd_sn: rsp.exp_cmd_sn,
            max_cmd_sn: rsp.max_cmd_sn,
            data_sn: 0,
            buffer_offset: 0,
            residual: 0,
            data,
        }));
        1
    }

    /// Releases every buffer (the connection ended).
    pub fn release_all(&mut self, regions: &mut dyn Regions) {
        for (_, task) in self.tasks.drain() {
            release(regions, &task);
        }
    }
}

fn release(regions: &mut dyn Regions, task: &Task) {
    if let Some((b, _)) = task.read {
        regions.release(b);
    }
    if let Some(b) = task.write {
        regions.release(b);
    }
}
