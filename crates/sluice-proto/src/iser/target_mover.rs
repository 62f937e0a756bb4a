//! The target's iSER datamover, sans-IO (RFC 7145 section 7.3): between the target's session
//! core, which speaks PDUs as it does over TCP, and an RDMA queue pair. It decides which PDU
//! becomes which RDMA operation and keeps each task's advertised buffers:
//!
//! - a SCSI Command arrives in a Send behind an iSER header whose WSV/RSV advertise the
//!   initiator's write and read buffers; the datamover records them per ITT, with the part of
//!   a write that travels in Sends (its immediate data and, with the F bit clear, the
//!   unsolicited Data-Out up to FirstBurstLength: section 7.3.4);
//! - unsolicited Data-Out (TTT 0xffffffff) arrives in Sends and goes to the core as over TCP;
//!   a Data-Out answering an R2T in a Send is a protocol error (solicited data moves by RDMA
//!   Read only);
//! - a Data-In from the core becomes an RDMA Write into the read buffer at its buffer offset
//!   (section 7.3.5), and a status carried in the Data-In becomes a SCSI Response in a Send
//!   (iSER has no phase collapse: section 7.3.5);
//! - an R2T from the core becomes an RDMA Read of the write buffer (section 7.3.6) at the
//!   Write Base Offset plus the R2T's buffer offset less the unsolicited part (the base
//!   offset addresses the first solicited byte, section 9.2); its data goes back to the core
//!   as the Data-Out PDUs it asked for, held while the task still awaits unsolicited data in
//!   Sends (the RDMA layer does not order the initiator's Sends against its Read Responses;
//!   see `read_order`), and released behind the Send that completes it
//!   ([`TargetDatamover::take_released`]);
//! - a SCSI Response goes in a Send, with Invalidate of the task's STag when negotiated
//!   (section 7.3.5, 7.3.7), and ends the task's bookkeeping;
//! - every other PDU from the core goes in a Send behind an iSER header with no buffer
//!   advertised (section 7.3.1).

use std::collections::{HashMap, VecDeque};

use bytes::{Bytes, BytesMut};

use super::read_order::ReadOrder;
use super::unexpected::TargetUnexpectedWindow;
use super::unsolicited::{solicited_address, unsolicited_len};
use super::{BufferAdvertisement, IserHeader, IserMessage};
use crate::framing::{encode, Digests, Framer};
use crate::pdu::codes::ScsiResponseCode;
use crate::pdu::{DataOut, Pdu, R2t, ScsiResponse};
use crate::seq::{Itt, Lun, SeqNum, Ttt};

/// Tasks a connection may have in flight. A session's CmdSN window bounds the commands an
/// initiator may send; this is the backstop against one that keeps opening tasks without
/// their responses ever going out (aborted tasks, ITTs never reused).
pub const MAX_TASKS: usize = 8192;

/// RDMA Reads waiting for their data, or completed and held behind their task's unsolicited
/// data, at most.
pub const MAX_PENDING_READS: usize = 8192;

/// What the datamover asks of the queue pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetOp {
    /// Send `header` and `pdu` (the PDU encoded without digests right after the header);
    /// with `invalidate`, a Send with Invalidate of the initiator's STag.
    Send {
        /// The iSER header.
        header: IserHeader,
        /// The PDU.
        pdu: Pdu,
        /// The initiator's STag to invalidate on delivery.
        invalidate: Option<u32>,
    },
    /// RDMA Write `data` to the initiator's buffer.
    Write {
        /// The initiator's STag.
        stag: u32,
        /// Address of the first byte.
        va: u64,
        /// The data.
        data: Bytes,
    },
    /// RDMA Read `len` bytes of the initiator's buffer; hand the data to
    /// [`TargetDatamover::handle_read_done`] with `id`.
    Read {
        /// The datamover's identifier of this read.
        id: u64,
        /// The initiator's STag.
        stag: u32,
        /// Address of the first byte.
        va: u64,
        /// Bytes.
        len: u32,
    },
}

/// Why the datamover stops the connection (RFC 7145 section 10.1.3: an iSER protocol error
/// terminates the connection).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MoverError {
    /// A Send that is not an iSER header followed by one iSCSI PDU.
    #[error("malformed iSER Send: {0}")]
    Malformed(String),
    /// A command that moves data without advertising the buffer for it.
    #[error("task {itt:#x}: {what} buffer not advertised")]
    NoBuffer {
        /// The task.
        itt: u32,
        /// "read" or "write".
        what: &'static str,
    },
    /// The core sent data for a task the datamover does not know.
    #[error("task {0:#x} unknown to the datamover")]
    UnknownTask(u32),
    /// Too many tasks, RDMA Reads or task management functions in flight.
    #[error("more than {0} tasks, RDMA Reads or task management functions in flight")]
    TooMany(usize),
    /// An address that wraps.
    #[error("task {0:#x}: buffer offset wraps the address space")]
    Wraps(u32),
    /// An RDMA Read the datamover never asked for completed.
    #[error("unknown RDMA Read {0}")]
    UnknownRead(u64),
    /// A Data-Out with a target transfer tag in a Send: solicited data is fetched by RDMA
    /// Read, only unsolicited Data-Out travels in Sends (RFC 7145 section 7.3.4).
    #[error("task {0:#x}: solicited Data-Out in a Send")]
    SolicitedDataOut(u32),
    /// An R2T for data the command's Sends carried (before the first solicited byte).
    #[error("task {itt:#x}: R2T at offset {offset} inside the {unsolicited} unsolicited bytes")]
    InsideUnsolicited {
        /// The task.
        itt: u32,
        /// The R2T's buffer offset.
        offset: u32,
        /// Bytes of the write that travelled in Sends.
        unsolicited: u32,
    },
}

#[derive(Clone, Copy, Debug)]
struct Task {
    read: Option<BufferAdvertisement>,
    write: Option<BufferAdvertisement>,
    /// Bytes of the write that travel in Sends; the write buffer starts after them.
    unsolicited: u32,
}

#[derive(Clone, Copy, Debug)]
struct PendingRead {
    itt: Itt,
    ttt: Ttt,
    lun: Lun,
    offset: u32,
}

/// Counts of what the datamover did, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MoverStats {
    /// Sends posted.
    pub sends: u64,
    /// Sends received.
    pub sends_received: u64,
    /// RDMA Writes posted (each in place of one Data-In PDU).
    pub rdma_writes: u64,
    /// Bytes they carried.
    pub rdma_write_bytes: u64,
    /// RDMA Reads posted (each in place of one R2T and its Data-Out PDUs).
    pub rdma_reads: u64,
    /// Bytes they fetched.
    pub rdma_read_bytes: u64,
    /// Write data that arrived in Sends: immediate data and unsolicited Data-Out.
    pub unsolicited_bytes: u64,
    /// Unsolicited Data-Out PDUs received (each in a Send of its own).
    pub unsolicited_data_outs: u64,
}

/// The target's datamover for one connection.
#[derive(Debug)]
pub struct TargetDatamover {
    tasks: HashMap<Itt, Task>,
    reads: HashMap<u64, PendingRead>,
    next_read: u64,
    /// The core's MaxRecvDataSegmentLength: Data-Out handed to it is cut to this.
    core_max_recv: u32,
    send_with_invalidate: bool,
    /// The negotiated FirstBurstLength: with a command's F bit clear, the unsolicited part.
    first_burst: u32,
    framer: Framer,
    last_exp_stat_sn: SeqNum,
    /// Unexpected PDUs outstanding at the initiator, against its declared limit.
    unexpected: TargetUnexpectedWindow,
    /// PDUs from the core held back, in order, while that limit is reached.
    pending: VecDeque<Pdu>,
    /// The StatSN after the last status sent, for a held NOP-In sent late.
    next_stat_sn: Option<SeqNum>,
    /// Data-Out from RDMA Reads held behind their task's unsolicited data.
    order: ReadOrder,
    /// RDMA Read completions that were held so (each came before the last of its task's
    /// unsolicited Sends).
    reads_reordered: u64,
    /// What was done so far.
    pub stats: MoverStats,
}

impl TargetDatamover {
    /// A datamover whose Sends carry data segments of up to `target_recv_dsl` bytes, feeding
    /// Data-Out of up to `core_max_recv` bytes to the core; `send_with_invalidate` when the
    /// initiator accepts Send with Invalidate; `first_burst` is the session's negotiated
    /// FirstBurstLength (how much of a write whose command has the F bit clear travels in
    /// Sends).
    pub fn new(
        target_recv_dsl: u32,
        core_max_recv: u32,
        send_with_invalidate: bool,
        first_burst: u32,
    ) -> Self {
        TargetDatamover {
            tasks: HashMap::new(),
            reads: HashMap::new(),
            next_read: 1,
            core_max_recv: core_max_recv.max(512),
            send_with_invalidate,
            first_burst,
            framer: Framer::new(target_recv_dsl),
            last_exp_stat_sn: SeqNum::new(0),
            unexpected: TargetUnexpectedWindow::default(),
            pending: VecDeque::new(),
            next_stat_sn: None,
            order: ReadOrder::default(),
            reads_reordered: 0,
            stats: MoverStats::default(),
        }
    }

    /// Holds this side to the initiator's MaxOutstandingUnexpectedPDUs (RFC 7145 section
    /// 6.3.4; 0: no limit).
    pub fn with_unexpected_limit(mut self, limit: u32) -> Self {
        self.unexpected = TargetUnexpectedWindow::new(limit);
        self
    }

    /// PDUs from the core held back now (the driver takes no more from the core while any
    /// are, and calls [`Self::release_held`] as Sends arrive).
    pub fn held_back(&self) -> usize {
        self.pending.len()
    }

    /// Moves up to `max` held-back PDUs that may now go (a Send from the initiator freed
    /// room); how many went.
    pub fn release_held(
        &mut self,
        max: usize,
        out: &mut Vec<TargetOp>,
    ) -> Result<usize, MoverError> {
        if self.pending.is_empty() {
            return Ok(0);
        }
        let held = std::mem::take(&mut self.pending);
        let mut kept = VecDeque::new();
        let mut moved = 0;
        for mut pdu in held {
            if moved >= max || self.must_wait(&pdu, kept.iter()) {
                kept.push_back(pdu);
                continue;
            }
            // A NOP-In does not advance StatSN but carries the next one (RFC 7143 section
            // 11.19.1); responses may have gone past it while it was held.
            if let (Pdu::NopIn(n), Some(next)) = (&mut pdu, self.next_stat_sn) {
                if n.itt == Itt::RESERVED {
                    n.stat_sn = next;
                }
            }
            self.unexpected.sent(&pdu);
            self.move_pdu(pdu, out)?;
            moved += 1;
        }
        self.pending = kept;
        Ok(moved)
    }

    /// Whether `pdu` must wait behind `held` (the PDUs held before it): an unexpected PDU
    /// while the initiator's limit is reached or behind another held one; any other PDU
    /// only behind a held Asynchronous Message, whose StatSN comes before its own. Responses
    /// never wait behind a held ping: the initiator may be waiting on them to free its own
    /// limit.
    fn must_wait<'a>(&self, pdu: &Pdu, mut held: impl Iterator<Item = &'a Pdu>) -> bool {
        if TargetUnexpectedWindow::counts(pdu) {
            !self.unexpected.may_send(pdu) || held.any(TargetUnexpectedWindow::counts)
        } else {
            held.any(|p| matches!(p, Pdu::AsyncMessage(_)))
        }
    }

    /// Tasks with buffers on record.
    pub fn tasks_in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// Data-Out PDUs from RDMA Reads held now behind their task's unsolicited data.
    pub fn data_outs_held(&self) -> usize {
        self.order.pdus_held()
    }

    /// RDMA Read completions held or released and not yet taken.
    #[cfg(test)]
    pub(crate) fn reads_held(&self) -> usize {
        self.order.reads_held()
    }

    /// RDMA Read completions held so far because they came before the last of their task's
    /// unsolicited Sends.
    pub fn reads_reordered(&self) -> u64 {
        self.reads_reordered
    }

    /// The Data-Out PDUs the last [`Self::handle_send`] released (made from RDMA Reads that
    /// completed before the Send that finished their task's unsolicited data), in the order
    /// the core takes them. The driver hands them to the core right after the PDU that
    /// `handle_send` returned; until taken they count against
    /// the bound of RDMA Reads in flight (`MAX_PENDING_READS`).
    pub fn take_released(&mut self) -> Vec<Pdu> {
        self.order.take_released()
    }

    /// One received Send: the PDU it carries, for the core. When it completes a task's
    /// unsolicited data, Data-Out held for that task follow it: see [`Self::take_released`].
    pub fn handle_send(&mut self, msg: &[u8]) -> Result<Pdu, MoverError> {
        self.stats.sends_received += 1;
        let (header, rest) = match IserMessage::parse(msg) {
            Ok((IserMessage::Control(h), rest)) => (h, rest),
            Ok((other, _)) => {
                return Err(MoverError::Malformed(format!(
                    "{} in full feature phase",
                    other.opcode()
                )))
            }
            Err(e) => return Err(MoverError::Malformed(e.to_string())),
        };
        let pdu = decode_one(&mut self.framer, rest)?;
        self.unexpected.received(&pdu);
        if let Pdu::DataOut(d) = &pdu {
            // RFC 7145 section 7.3.4: only unsolicited Data-Out travels in Sends; its amount
            // (at most FirstBurstLength) is the core's to check, as over TCP.
            if d.ttt != Ttt::RESERVED {
                return Err(MoverError::SolicitedDataOut(d.itt.0));
            }
            self.stats.unsolicited_data_outs += 1;
            self.stats.unsolicited_bytes += d.data.len() as u64;
            self.order.unsolicited(d);
        }
        if let Pdu::TaskMgmtRequest(req) = &pdu {
            if !self.order.tmf_request(req) {
                return Err(MoverError::TooMany(super::read_order::MAX_TMFS));
            }
        }
        if let Pdu::ScsiCommand(cmd) = &pdu {
            self.last_exp_stat_sn = cmd.exp_stat_sn;
            if cmd.write {
                self.stats.unsolicited_bytes += cmd.data.len() as u64;
            }
            let read_len = if cmd.write {
                cmd.bidi_read_length.unwrap_or(0)
            } else if cmd.read {
                cmd.expected_data_transfer_length
            } else {
                0
            };
            if read_len > 0 && header.read.is_none() {
                return Err(MoverError::NoBuffer {
                    itt: cmd.itt.0,
                    what: "read",
                });
            }
            // RFC 7145 section 7.3.4: data beyond the immediate and unsolicited data is
            // RDMA-Read from the buffer WSV advertises.
            let unsolicited = unsolicited_len(cmd, self.first_burst);
            let solicited = cmd.write && cmd.expected_data_transfer_length > unsolicited;
            if solicited && header.write.is_none() {
                return Err(MoverError::NoBuffer {
                    itt: cmd.itt.0,
                    what: "write",
                });
            }
            if header.read.is_some() || header.write.is_some() {
                if self.tasks.len() >= MAX_TASKS && !self.tasks.contains_key(&cmd.itt) {
                    return Err(MoverError::TooMany(MAX_TASKS));
                }
                self.tasks.insert(
                    cmd.itt,
                    Task {
                        read: header.read,
                        write: header.write,
                        unsolicited,
                    },
                );
                let immediate = u32::try_from(cmd.data.len()).unwrap_or(u32::MAX);
                self.order
                    .command(cmd.itt, cmd.lun, cmd.cmd_sn, unsolicited, immediate);
            } else {
                // No RDMA Read will serve this task; a reused ITT drops what it held.
                self.order.end_task(cmd.itt);
            }
        }
        Ok(pdu)
    }

    /// One PDU the core wants sent: the operations that carry it, or none yet while the
    /// initiator's limit of unexpected PDUs is reached (RFC 7145 section 6.3.4: the sender
    /// holds back; see `must_wait` for what waits behind what).
    pub fn handle_core_pdu(&mut self, pdu: Pdu, out: &mut Vec<TargetOp>) -> Result<(), MoverError> {
        if self.must_wait(&pdu, self.pending.iter()) {
            self.pending.push_back(pdu);
            return Ok(());
        }
        self.unexpected.sent(&pdu);
        self.move_pdu(pdu, out)
    }

    fn move_pdu(&mut self, pdu: Pdu, out: &mut Vec<TargetOp>) -> Result<(), MoverError> {
        if let Some(sn) = advancing_stat_sn(&pdu) {
            self.next_stat_sn = Some(sn.next());
        }
        match &pdu {
            Pdu::TaskMgmtResponse(r) => self.order.tmf_response(r.itt, r.response),
            Pdu::LogoutResponse(_) => self.order.logout(),
            _ => {}
        }
        match pdu {
            Pdu::DataIn(d) => {
                let task = self
                    .tasks
                    .get(&d.itt)
                    .copied()
                    .ok_or(MoverError::UnknownTask(d.itt.0))?;
                let adv = task.read.ok_or(MoverError::NoBuffer {
                    itt: d.itt.0,
                    what: "read",
                })?;
                let va = adv
                    .base_offset
                    .checked_add(u64::from(d.buffer_offset))
                    .ok_or(MoverError::Wraps(d.itt.0))?;
                if !d.data.is_empty() {
                    self.stats.rdma_writes += 1;
                    self.stats.rdma_write_bytes += d.data.len() as u64;
                    out.push(TargetOp::Write {
                        stag: adv.stag,
                        va,
                        data: d.data.clone(),
                    });
                }
                if d.status_present {
                    // RFC 7145 section 7.3.5: the status goes in a SCSI Response, never in
                    // the last Data-In.
                    let rsp = ScsiResponse {
                        bidi_overflow: false,
                        bidi_underflow: false,
                        overflow: d.overflow,
                        underflow: d.underflow,
                        response: ScsiResponseCode::Completed,
                        status: d.status,
                        itt: d.itt,
                        snack_tag: 0,
                        stat_sn: d.stat_sn,
                        exp_cmd_sn: d.exp_cmd_sn,
                        max_cmd_sn: d.max_cmd_sn,
                        exp_data_sn: d.data_sn.wrapping_add(1),
                        bidi_residual: 0,
                        residual: d.residual,
                        data: Bytes::new(),
                    };
                    self.respond(rsp, out);
                }
            }
            Pdu::R2t(r2t) => self.handle_r2t(&r2t, out)?,
            Pdu::ScsiResponse(rsp) => self.respond(rsp, out),
            other => self.send(IserHeader::default(), other, None, out),
        }
        Ok(())
    }

    fn handle_r2t(&mut self, r2t: &R2t, out: &mut Vec<TargetOp>) -> Result<(), MoverError> {
        let task = self
            .tasks
            .get(&r2t.itt)
            .copied()
            .ok_or(MoverError::UnknownTask(r2t.itt.0))?;
        let adv = task.write.ok_or(MoverError::NoBuffer {
            itt: r2t.itt.0,
            what: "write",
        })?;
        if self.reads.len() + self.order.reads_held() >= MAX_PENDING_READS {
            return Err(MoverError::TooMany(MAX_PENDING_READS));
        }
        if r2t.buffer_offset < task.unsolicited {
            return Err(MoverError::InsideUnsolicited {
                itt: r2t.itt.0,
                offset: r2t.buffer_offset,
                unsolicited: task.unsolicited,
            });
        }
        let va = solicited_address(adv.base_offset, task.unsolicited, r2t.buffer_offset)
            .ok_or(MoverError::Wraps(r2t.itt.0))?;
        let id = self.next_read;
        self.next_read += 1;
        self.reads.insert(
            id,
            PendingRead {
                itt: r2t.itt,
                ttt: r2t.ttt,
                lun: r2t.lun,
                offset: r2t.buffer_offset,
            },
        );
        self.stats.rdma_reads += 1;
        self.stats.rdma_read_bytes += u64::from(r2t.desired_data_transfer_length);
        out.push(TargetOp::Read {
            id,
            stag: adv.stag,
            va,
            len: r2t.desired_data_transfer_length,
        });
        Ok(())
    }

    /// An RDMA Read completed with `data`: the Data-Out PDUs that answer its R2T, cut to the
    /// core's MaxRecvDataSegmentLength, the last with the F bit. None yet while the task
    /// still awaits unsolicited data in Sends: the core takes a task's data in offset order
    /// (DataPDUInOrder and DataSequenceInOrder, RFC 7143 sections 13.18 and 13.19), and the
    /// PDUs follow the Send that completes it ([`Self::take_released`]).
    pub fn handle_read_done(&mut self, id: u64, data: Bytes) -> Result<Vec<Pdu>, MoverError> {
        let read = self.reads.remove(&id).ok_or(MoverError::UnknownRead(id))?;
        let chunk = self.core_max_recv as usize;
        let n = data.len().div_ceil(chunk).max(1);
        let mut pdus = Vec::with_capacity(n);
        for i in 0..n {
            let start = i * chunk;
            let end = (start + chunk).min(data.len());
            pdus.push(Pdu::DataOut(DataOut {
                final_bit: i + 1 == n,
                lun: read.lun,
                itt: read.itt,
                ttt: read.ttt,
                exp_stat_sn: self.last_exp_stat_sn,
                data_sn: u32::try_from(i).unwrap_or(u32::MAX),
                buffer_offset: read
                    .offset
                    .wrapping_add(u32::try_from(start).unwrap_or(u32::MAX)),
                data: data.slice(start..end),
            }));
        }
        let pdus = self.order.read_done(read.itt, pdus);
        if pdus.is_empty() {
            self.reads_reordered += 1;
        }
        Ok(pdus)
    }

    fn respond(&mut self, rsp: ScsiResponse, out: &mut Vec<TargetOp>) {
        let task = self.tasks.remove(&rsp.itt);
        self.order.end_task(rsp.itt);
        let invalidate = if self.send_with_invalidate {
            task.and_then(|t| t.read.or(t.write)).map(|a| a.stag)
        } else {
            None
        };
        self.send(
            IserHeader::default(),
            Pdu::ScsiResponse(rsp),
            invalidate,
            out,
        );
    }

    fn send(
        &mut self,
        header: IserHeader,
        pdu: Pdu,
        invalidate: Option<u32>,
        out: &mut Vec<TargetOp>,
    ) {
        self.stats.sends += 1;
        out.push(TargetOp::Send {
            header,
            pdu,
            invalidate,
        });
    }
}

/// Encodes an iSER Send: the header, then the PDU without digests (RFC 7145 section 7.3.1:
/// iSER carries no digests).
pub fn encode_send(header: &IserHeader, pdu: &Pdu, out: &mut BytesMut) {
    out.extend_from_slice(&IserMessage::Control(*header).emit());
    encode(pdu, Digests::NONE, out);
}

/// Decodes the one PDU of a Send's payload (after its iSER header).
pub(crate) fn decode_one(framer: &mut Framer, bytes: &[u8]) -> Result<Pdu, MoverError> {
    let mut buf = BytesMut::from(bytes);
    match framer.decode(&mut buf) {
        Ok(Some(pdu)) if buf.is_empty() => Ok(pdu),
        Ok(Some(_)) => Err(MoverError::Malformed("bytes after the PDU".into())),
        Ok(None) => Err(MoverError::Malformed("truncated PDU".into())),
        Err(e) => Err(MoverError::Malformed(e.to_string())),
    }
}

/// The StatSN of a PDU that advances it (RFC 7143 section 4.2.2.2).
fn advancing_stat_sn(pdu: &Pdu) -> Option<SeqNum> {
    match pdu {
        Pdu::ScsiResponse(p) => Some(p.stat_sn),
        Pdu::DataIn(p) if p.status_present => Some(p.stat_sn),
        Pdu::TaskMgmtResponse(p) => Some(p.stat_sn),
        Pdu::TextResponse(p) => Some(p.stat_sn),
        Pdu::LogoutResponse(p) => Some(p.stat_sn),
        Pdu::AsyncMessage(p) => Some(p.stat_sn),
        Pdu::Reject(p) => Some(p.stat_sn),
        Pdu::NopIn(p) if p.itt != Itt::RESERVED => Some(p.stat_sn),
        _ => None,
    }
}
