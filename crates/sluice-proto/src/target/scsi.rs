//! SCSI commands in a target session: the task table, write data collection with R2Ts, the
//! work handed to the SCSI layer, and turning its result into Data-In and status (RFC 7143
//! sections 4.2.5, 11.3, 11.4, 11.7, 11.8).

use super::{
    ConnId, DataTransfer, ScsiCompletion, ScsiWork, TargetSession, TargetSessionEnv, Ticket,
};
use crate::pdu::codes::{RejectReason, ScsiStatus};
use std::time::Instant;

use crate::pdu::{Cdb, DataIn, DataOut, Pdu, ScsiCommand, ScsiResponse};
use crate::seq::{Itt, Lun, SeqNum};
use crate::task::target_read::{reorder, DataInSequence};
use crate::task::target_write::{TargetWrite, WriteData, WriteProgress};
use crate::task::{
    aborted_command_sense, scsi_response, PeerAction, Residual, TaskError, TttAllocator,
};
use crate::window::Slot;

/// One command in the session's task table.
#[derive(Debug)]
pub(super) struct Task {
    /// The connection it has allegiance to (RFC 7143 section 4.2.4.1).
    pub(super) conn: ConnId,
    pub(super) cmd_sn: SeqNum,
    pub(super) lun: Lun,
    /// Its place in the CmdSN window; `None` for an immediate command.
    pub(super) slot: Option<Slot>,
    /// Tells this task's work apart from an earlier task's with the same ITT.
    pub(super) serial: u64,
    /// Set when the task was ended while its work was running: the result is dropped.
    pub(super) ended: Option<EndedBy>,
    /// SNACK Tag of the last R-Data SNACK accepted for it (0: none), copied into its final
    /// SCSI Response (RFC 7143 sections 11.4.4, 11.16.3).
    pub(super) snack_tag: u32,
    /// When a write waiting for Data-Out hits its sequence reception timeout (section
    /// 7.1.4.1 b); only under ErrorRecoveryLevel 1 and above.
    pub(super) deadline: Option<Instant>,
    /// Sequence reception timeouts in a row without data in between: each doubles the next
    /// wait, so that a slow initiator is not flooded with recovery R2Ts.
    pub(super) timeouts: u8,
    /// When its SCSI Command PDU arrived.
    pub(super) arrived: Instant,
    /// How its task attribute orders it (`super::ordering`).
    pub(super) kind: super::ordering::Kind,
    pub(super) state: TaskState,
}

/// Why a running task was ended early.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(super) enum EndedBy {
    /// The task management function with this id aborted it.
    Tmf(u64),
    /// Its connection is gone (ErrorRecoveryLevel 0: no reassignment).
    ConnectionLost,
    /// Another I_T nexus aborted it (PREEMPT AND ABORT).
    OtherNexus,
}

#[derive(Debug)]
pub(super) enum TaskState {
    /// A write waiting for Data-Out.
    Collecting {
        write: TargetWrite,
        info: CommandInfo,
        /// Write-buffer bytes reserved on the connection.
        reserved: usize,
    },
    /// Handed to the SCSI layer.
    Running {
        write: Option<TargetWrite>,
        info: CommandInfo,
    },
    /// Answered and kept until the initiator acknowledges its status (ErrorRecoveryLevel 1
    /// and above): what a SNACK may ask for again (section 7.1.3: "until either the status
    /// for the completed command is acknowledged or the data in question has been
    /// separately acknowledged").
    /// (Inline, not boxed: `Collecting` makes the enum larger than `Answered` anyway, and a
    /// box would cost an allocation per command at ErrorRecoveryLevel 1 and above.)
    Answered(Answered),
}

/// What a SNACK (or a reassignment) of an answered command needs.
#[derive(Debug, Default)]
pub(super) struct Answered {
    /// A read's Data-In PDUs as first cut, not started: replayed for a Data SNACK, resumed
    /// and resegmented for an R-Data SNACK.
    pub(super) data_in: Option<DataInSequence>,
    /// The SCSI Response sent after the Data-In (`None` when the status rode in the last
    /// Data-In).
    pub(super) response: Option<ScsiResponse>,
    /// Data-In PDUs sent.
    pub(super) data_in_sent: u32,
    /// The first DataSN not acknowledged by a DataACK (section 11.16.1).
    pub(super) acked_data_sn: u32,
    /// Whether the answer went out: not when the SCSI layer finished while the task's
    /// connection was gone (ErrorRecoveryLevel 2: it goes out when the task is reassigned).
    pub(super) delivered: bool,
    /// `data_in`'s bytes, counted against the session's retention bound while kept.
    pub(super) charge: Option<super::recovery::RetentionCharge>,
}

/// What answering a command needs from its SCSI Command PDU.
#[derive(Clone, Debug)]
pub(super) struct CommandInfo {
    cdb: Cdb,
    lun: Lun,
    edtl: u32,
    read: bool,
    transfer: DataTransfer,
}

impl Task {
    /// Whether the task's work is with the SCSI layer (it cannot be taken back).
    pub(super) fn running(&self) -> bool {
        matches!(self.state, TaskState::Running { .. })
    }

    /// Whether the task was answered and only waits for the acknowledgement of its status.
    pub(super) fn answered(&self) -> bool {
        matches!(self.state, TaskState::Answered(_))
    }

    /// Write-buffer bytes the task holds on its connection.
    pub(super) fn reserved_bytes(&self) -> usize {
        match self.state {
            TaskState::Collecting { reserved, .. } => reserved,
            TaskState::Running { .. } | TaskState::Answered(_) => 0,
        }
    }
}

impl TargetSession {
    pub(super) fn handle_scsi_command(
        &mut self,
        conn: ConnId,
        cmd: ScsiCommand,
        slot: Option<Slot>,
        env: &mut dyn TargetSessionEnv,
    ) {
        let depth = self.config.queue_depth;
        if let Some(c) = self.find_mut(conn) {
            c.peer_waits = initiator_waits(c.stat_sn_after_queue(), cmd.exp_stat_sn, depth);
        }
        if self.tasks.get(&cmd.itt).is_some_and(Task::answered) {
            // An answered task kept for recovery: the initiator reuses a tag only once the
            // task is over for it, so its status was received (section 11.2.1.8).
            self.tasks.remove(&cmd.itt);
        }
        if self.tasks.contains_key(&cmd.itt) {
            // RFC 7143 section 11.2.1.8: an ITT is unique among the session's tasks.
            self.reject_pdu(conn, RejectReason::TaskInProgress, &Pdu::ScsiCommand(cmd));
            self.release_slot(slot);
            return;
        }
        if slot.is_none() && self.immediate_tasks() >= self.max_immediate_tasks() {
            // Immediate commands are not bounded by the window: bound them here (section
            // 11.17.1, reason "too many immediate commands").
            self.reject_pdu(
                conn,
                RejectReason::ImmediateCommandReject,
                &Pdu::ScsiCommand(cmd),
            );
            return;
        }
        if self.covered_by_pending_tmf(cmd.lun, cmd.cmd_sn) {
            // A task-set function issued after this command is waiting for it: it is
            // aborted on arrival, unanswered (section 11.6.2).
            self.remember_aborted(cmd.itt);
            self.release_slot(slot);
            return;
        }
        let info = CommandInfo {
            cdb: cmd.cdb.clone(),
            lun: cmd.lun,
            edtl: cmd.expected_data_transfer_length,
            read: cmd.read,
            transfer: env.transfer(cmd.lun, &cmd.cdb),
        };
        let serial = self.next_serial();
        let mut task = Task {
            conn,
            cmd_sn: cmd.cmd_sn,
            lun: cmd.lun,
            slot,
            serial,
            ended: None,
            snack_tag: 0,
            deadline: None,
            timeouts: 0,
            arrived: self.now,
            kind: super::ordering::Kind::of(cmd.attr),
            state: TaskState::Running { write: None, info },
        };
        self.ordering.arrived(task.kind);
        if !cmd.write {
            self.run(cmd.itt, task, WriteData::default());
            return;
        }
        let TaskState::Running { info, .. } = &task.state else {
            return;
        };
        let wanted = match info.transfer {
            DataTransfer::ToDevice(n) => u32::try_from(n).unwrap_or(u32::MAX),
            // A CDB that moves no data out (or reads) sent with the W bit: take the data the
            // initiator announced and discard it, so the stream stays in step.
            _ => info.edtl,
        };
        let collect = wanted.min(info.edtl);
        // A write that waits for data after its command PDU holds what arrives until it runs,
        // unless the SCSI layer will not read it: then it holds, and reserves, nothing.
        let keeps = TargetWrite::completes_with_command(&cmd, collect)
            || env.keeps_data_out(cmd.lun, &cmd.cdb);
        let reserve = if keeps { collect as usize } else { 0 };
        let limit = self.config.max_write_bytes_per_connection;
        let Some(c) = self.find_mut(conn) else {
            self.release_slot(task.slot.take());
            return;
        };
        if c.write_bytes + reserve > limit {
            // Bounded buffering: too much write data in flight on this connection. TASK SET
            // FULL tells the initiator to retry later (SAM-5 5.3).
            let rsp = scsi_response(cmd.itt, ScsiStatus::TaskSetFull, Residual::None, 0, &[]);
            c.queue(Pdu::ScsiResponse(rsp));
            self.release_slot(task.slot.take());
            return;
        }
        let params = c.params;
        match TargetWrite::new(&cmd, &params, wanted, &mut self.ttts) {
            Ok((mut write, progress)) => {
                if !keeps {
                    write.discard_data();
                }
                if let Some(c) = self.find_mut(conn) {
                    c.write_bytes += reserve;
                }
                let TaskState::Running { info, .. } = task.state else {
                    return;
                };
                task.state = TaskState::Collecting {
                    write,
                    info,
                    reserved: reserve,
                };
                self.tasks.insert(cmd.itt, task);
                self.write_progress(cmd.itt, progress);
            }
            Err(e) => {
                self.task_error(conn, task.slot.take(), e, Pdu::ScsiCommand(cmd));
            }
        }
    }

    pub(super) fn handle_data_out(&mut self, conn: ConnId, d: DataOut) {
        if !self.tasks.contains_key(&d.itt) {
            // Its command may be waiting in the window for an earlier CmdSN (sent on another
            // connection): the data waits with it, up to FirstBurstLength.
            let first_burst = self.params.first_burst_length;
            let len = d.data.len() as u32;
            let held = self.window.held_commands_mut().find(|(_, h)| {
                h.conn == conn && matches!(&h.pdu, Pdu::ScsiCommand(c) if c.itt == d.itt)
            });
            if let Some((_, h)) = held {
                let copy = h.data_out.iter().any(|o| {
                    o.ttt == d.ttt && o.data_sn == d.data_sn && o.buffer_offset == d.buffer_offset
                });
                if copy {
                    // A retried command's unsolicited data, sent again with it (RFC 7143
                    // section 7.2.1): the first copy waits already.
                    return;
                }
                if h.data_out_bytes.saturating_add(len) <= first_burst {
                    h.data_out_bytes += len;
                    h.data_out.push(d);
                } else {
                    // More unsolicited data than FirstBurstLength allows (section 13.14).
                    self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::DataOut(d));
                }
                return;
            }
        }
        let Some(task) = self.tasks.get_mut(&d.itt) else {
            if !self.recently_aborted.contains(&d.itt) {
                // Data for no task of this session (RFC 7143 section 11.17.1: the ITT is an
                // invalid PDU field). Data for a task ended by task management may still be
                // in flight and is dropped quietly.
                self.reject_pdu(conn, RejectReason::InvalidPduField, &Pdu::DataOut(d));
            }
            return;
        };
        if task.conn != conn {
            // Section 4.2.4.1: all PDUs of a task travel on the connection it was issued on.
            self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::DataOut(d));
            return;
        }
        let TaskState::Collecting { write, .. } = &mut task.state else {
            if self.params.error_recovery_level > 0 {
                // A late copy of data already received (the initiator answered an R2T that a
                // recovery R2T superseded, or sent a command again): nothing lost.
                return;
            }
            // All its data had arrived: this is more than it asked for.
            self.reject_pdu(conn, RejectReason::ProtocolError, &Pdu::DataOut(d));
            return;
        };
        task.timeouts = 0;
        match write.handle_data_out(&d, &mut self.ttts) {
            Ok(progress) => self.write_progress(d.itt, progress),
            Err(e) => {
                let Some(task) = self.tasks.remove(&d.itt) else {
                    return;
                };
                self.unreserve(&task);
                self.task_error(conn, task.slot, e, Pdu::DataOut(d));
            }
        }
    }

    pub(super) fn write_progress(&mut self, itt: Itt, progress: WriteProgress) {
        self.rearm_sequence_timer(itt);
        match progress {
            WriteProgress::NeedR2ts(r2ts) => {
                let Some(conn) = self.tasks.get(&itt).map(|t| t.conn) else {
                    return;
                };
                for r2t in r2ts {
                    self.queue_to(conn, Pdu::R2t(r2t));
                }
            }
            WriteProgress::Waiting => {}
            WriteProgress::CrcError => {
                let Some(task) = self.tasks.remove(&itt) else {
                    return;
                };
                self.unreserve(&task);
                // Section 11.4.7.2: ABORTED COMMAND, PROTOCOL SERVICE CRC ERROR (47h/05h).
                let sense = aborted_command_sense(0x47, 0x05);
                self.finish_command(task.conn, itt, ScsiStatus::CheckCondition, &sense);
                self.release_slot(task.slot);
            }
            WriteProgress::Complete(data) => {
                let Some(mut task) = self.tasks.remove(&itt) else {
                    return;
                };
                self.unreserve(&task);
                let TaskState::Collecting { write, info, .. } = task.state else {
                    return;
                };
                task.state = TaskState::Running {
                    write: Some(write),
                    info,
                };
                self.run(itt, task, data);
            }
        }
    }

    /// Hands a task to the SCSI layer.
    fn run(&mut self, itt: Itt, task: Task, data_out: WriteData) {
        let TaskState::Running { info, write } = &task.state else {
            return;
        };
        // Built in its queue's slot (not moved there): this is every command's path.
        let queue = if self.may_start(&task) {
            &mut self.work
        } else {
            self.ordering.held_mut()
        };
        queue.push_back(ScsiWork {
            ticket: Ticket {
                itt,
                serial: task.serial,
            },
            conn: task.conn,
            lun: task.lun,
            cdb: info.cdb.clone(),
            data_out,
            data_in_len: if info.read { info.edtl } else { 0 },
            arrived: task.arrived,
            data_out_len: if write.is_some() { info.edtl } else { 0 },
        });
        self.tasks.insert(itt, task);
    }

    /// The SCSI layer finished a task: its Data-In and status go to its connection.
    pub(super) fn complete_task(&mut self, ticket: Ticket, done: ScsiCompletion) {
        if self.params.error_recovery_level > 0 {
            self.complete_retained_task(ticket, done);
            return;
        }
        if self
            .tasks
            .get(&ticket.itt)
            .is_none_or(|t| t.serial != ticket.serial || !t.running())
        {
            return;
        }
        let Some(task) = self.tasks.remove(&ticket.itt) else {
            return;
        };
        let Task {
            conn,
            slot,
            ended,
            snack_tag,
            state,
            ..
        } = task;
        self.release_slot(slot);
        if ended.is_some() {
            return;
        }
        let TaskState::Running { write, info } = state else {
            return;
        };
        self.answer(conn, ticket.itt, write, &info, done, snack_tag);
    }

    /// [`complete_task`](Self::complete_task) at ErrorRecoveryLevel 1 and above: the answered
    /// task stays in the table, changed in place, until its status is acknowledged (see
    /// `TaskState::Answered`); a task ended while it ran leaves.
    fn complete_retained_task(&mut self, ticket: Ticket, done: ScsiCompletion) {
        let Some(task) = self
            .tasks
            .get_mut(&ticket.itt)
            .filter(|t| t.serial == ticket.serial && t.running())
        else {
            return;
        };
        let slot = task.slot.take();
        if task.ended.is_some() {
            self.tasks.remove(&ticket.itt);
            self.release_slot(slot);
            return;
        }
        let (conn, snack_tag) = (task.conn, task.snack_tag);
        let placeholder = TaskState::Answered(Answered::default());
        let TaskState::Running { write, info } = std::mem::replace(&mut task.state, placeholder)
        else {
            return;
        };
        let mut answered = self.answer(conn, ticket.itt, write, &info, done, snack_tag);
        // Charged to its connection while live (an orphan's tasks hold nothing shut).
        let counter = self.find(conn).map(|c| &c.retained_bytes);
        answered.charge = answered
            .data_in
            .as_ref()
            .filter(|seq| seq.data_len() > 0)
            .zip(counter)
            .map(|(seq, counter)| super::recovery::RetentionCharge::new(seq.data_len(), counter));
        // The window place goes back (or is held back) with the answer's bytes counted.
        self.release_slot(slot);
        if let Some(task) = self.tasks.get_mut(&ticket.itt) {
            task.deadline = None;
            task.timeouts = 0;
            task.state = TaskState::Answered(answered);
        }
    }

    /// Data-In and SCSI Response for a finished command, with the residuals of section
    /// 11.4.5.1.
    fn answer(
        &mut self,
        conn: ConnId,
        itt: Itt,
        write: Option<TargetWrite>,
        info: &CommandInfo,
        done: ScsiCompletion,
        snack_tag: u32,
    ) -> Answered {
        let mut answered = Answered {
            data_in: None,
            response: None,
            data_in_sent: 0,
            acked_data_sn: 0,
            delivered: self
                .find(conn)
                .is_some_and(|c| c.state == super::connection::ConnState::Live),
            charge: None,
        };
        // An orphaned task (its connection failed, ErrorRecoveryLevel 2) is answered with its
        // old connection's parameters and kept for reassignment.
        let Some(params) = self.conn_params(conn) else {
            return answered;
        };
        let tagged = |mut rsp: ScsiResponse| {
            rsp.snack_tag = snack_tag;
            rsp
        };
        if let Some(write) = write {
            // Writes: the residual compares what the CDB wanted with the EDTL, which the write
            // task already knows; ExpDataSN is 0 (no Data-In).
            let rsp = tagged(write.response(done.status, &done.sense));
            self.queue_to(conn, Pdu::ScsiResponse(rsp.clone()));
            answered.response = Some(rsp);
            return answered;
        }
        if info.read {
            let mut seq = DataInSequence::new(itt, done.data, info.edtl, done.status, &params);
            if !self.phase_collapse {
                seq = seq.without_phase_collapse();
            }
            if snack_tag != 0 {
                // An R-Data SNACK came while the command ran: its status goes in a SCSI
                // Response carrying the SNACK Tag (section 11.16.3).
                seq = seq.resume(0, &params).unwrap_or(seq);
            } else if let Some(every) = self.config.recovery.data_ack_every {
                if params.error_recovery_level > 0 {
                    // Section 11.7.2: positive acknowledgement asked for with the A bit.
                    let ttt = self.ttts.allocate();
                    seq = seq.with_data_ack(every, ttt, info.lun);
                }
            }
            if params.error_recovery_level > 0 {
                answered.data_in = Some(seq.clone());
            }
            if params.error_recovery_level == 0
                && !(params.data_pdu_in_order && params.data_sequence_in_order)
            {
                // Sections 13.18, 13.19: the initiator allowed any order, and it gets one.
                let pdus: Vec<DataIn> = seq.by_ref().collect();
                for pdu in reorder(
                    pdus,
                    params.data_pdu_in_order,
                    params.data_sequence_in_order,
                ) {
                    self.queue_to(conn, Pdu::DataIn(pdu));
                }
            } else {
                for pdu in &mut seq {
                    self.queue_to(conn, Pdu::DataIn(pdu));
                }
            }
            // What an orphaned task "sent" went nowhere: a reassignment sends it all.
            answered.data_in_sent = if answered.delivered {
                seq.data_in_count()
            } else {
                0
            };
            if seq.needs_response() {
                let rsp = tagged(seq.response(&done.sense));
                self.queue_to(conn, Pdu::ScsiResponse(rsp.clone()));
                answered.response = Some(rsp);
            }
            return answered;
        }
        // No data phase on the wire. If the CDB wanted data, the shortfall is an overflow
        // (e.g. WRITE with EDTL 0: residual = the CDB's transfer length).
        let residual = match info.transfer {
            DataTransfer::ToDevice(n) | DataTransfer::FromDevice(n)
                if done.status == ScsiStatus::Good =>
            {
                Residual::from_lengths(info.edtl, u32::try_from(n).unwrap_or(u32::MAX))
            }
            _ => Residual::None,
        };
        let rsp = tagged(scsi_response(itt, done.status, residual, 0, &done.sense));
        self.queue_to(conn, Pdu::ScsiResponse(rsp.clone()));
        answered.response = Some(rsp);
        answered
    }

    /// A data-transfer rule was broken: do what the rule says (RFC 7143 sections 7, 11.4.7.2).
    /// The task is already out of the table; `pdu` is the offending PDU.
    fn task_error(&mut self, conn: ConnId, slot: Option<Slot>, e: TaskError, pdu: Pdu) {
        let itt = pdu.itt();
        match e.action() {
            PeerAction::Reject(reason) => {
                // The command is over: answer it too, so the initiator does not wait forever.
                let sense = aborted_command_sense(0x0c, 0x0d);
                self.finish_command(conn, itt, ScsiStatus::CheckCondition, &sense);
                self.reject_pdu(conn, reason, &pdu);
            }
            PeerAction::CheckCondition { asc, ascq } => {
                let sense = aborted_command_sense(asc, ascq);
                self.finish_command(conn, itt, ScsiStatus::CheckCondition, &sense);
            }
            PeerAction::Close => {
                self.close_connection(conn, super::CloseReason::Protocol("data sequence error"));
            }
        }
        self.release_slot(slot);
    }

    /// Ends a command early with a status (no data).
    fn finish_command(&mut self, conn: ConnId, itt: Itt, status: ScsiStatus, sense: &[u8]) {
        let rsp = scsi_response(itt, status, Residual::None, 0, sense);
        self.queue_to(conn, Pdu::ScsiResponse(rsp));
    }

    /// Ends every task of a connection that is gone: unanswered, their slots given back.
    pub(super) fn end_tasks_of(&mut self, conn: ConnId) {
        let itts: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.conn == conn)
            .map(|(itt, _)| *itt)
            .collect();
        for itt in itts {
            self.end_task(itt, EndedBy::ConnectionLost);
        }
    }

    /// Ends a task without an answer: one still collecting data goes at once (its slot and
    /// buffer given back); one the SCSI layer is running is marked, and goes when its result
    /// comes back.
    pub(super) fn end_task(&mut self, itt: Itt, by: EndedBy) {
        let Some(task) = self.tasks.get_mut(&itt) else {
            return;
        };
        if matches!(by, EndedBy::Tmf(_)) && task.ended.is_none() {
            self.stats.tasks_aborted += 1;
        }
        if task.running() {
            task.ended.get_or_insert(by);
            return;
        }
        if let Some(task) = self.tasks.remove(&itt) {
            self.unreserve(&task);
            self.release_slot(task.slot);
        }
    }

    /// Whether the result of `ticket`'s work is no longer wanted: its task was ended while
    /// the SCSI layer ran it (by task management, another I_T nexus's PREEMPT AND ABORT or a
    /// lost connection), or is gone. A driver
    /// may then stop a long-running command early; it still hands its result back with
    /// [`TargetSession::handle_completion`], which drops it.
    #[must_use]
    pub fn work_abandoned(&self, ticket: Ticket) -> bool {
        self.tasks
            .get(&ticket.itt)
            .is_none_or(|t| t.serial != ticket.serial || t.ended.is_some())
    }

    /// A task whose work was handed out but never taken by the driver: it ends here, its
    /// slot given back.
    pub(super) fn drop_unstarted(&mut self, ticket: Ticket) {
        if self
            .tasks
            .get(&ticket.itt)
            .is_some_and(|t| t.serial == ticket.serial && t.running())
        {
            if let Some(task) = self.tasks.remove(&ticket.itt) {
                self.release_slot(task.slot);
            }
        }
    }

    /// Gives back a collecting write's reservation on its connection.
    fn unreserve(&mut self, task: &Task) {
        let bytes = task.reserved_bytes();
        if let Some(c) = self.find_mut(task.conn) {
            c.write_bytes = c.write_bytes.saturating_sub(bytes);
        }
    }

    fn immediate_tasks(&self) -> usize {
        self.tasks
            .values()
            .filter(|t| t.slot.is_none() && !t.answered())
            .count()
    }

    /// Immediate tasks in progress at once; more are rejected.
    fn max_immediate_tasks(&self) -> usize {
        self.config.queue_depth.clamp(16, 1024) as usize
    }

    fn next_serial(&mut self) -> u64 {
        let s = self.next_serial;
        self.next_serial += 1;
        s
    }
}

/// Whether an initiator that sent a command carrying `exp_stat_sn` had seen every status up to
/// our next StatSN `stat_sn`, i.e. waits for answers rather than pipelining.
///
/// The difference counts statuses sent that it had not seen. More than `queue_depth` (the
/// most it can have outstanding) means it does not track ExpStatSN at all (libiscsi 1.19 stops
/// updating it once StatSN passes 2^31): nothing is known then, and the answer is `true`.
fn initiator_waits(stat_sn: SeqNum, exp_stat_sn: SeqNum, queue_depth: u32) -> bool {
    let unseen = stat_sn.0.wrapping_sub(exp_stat_sn.0);
    unseen == 0 || unseen > queue_depth
}

#[cfg(test)]
mod initiator_waits_tests {
    use super::*;

    #[test]
    fn only_an_initiator_that_saw_every_status_waits() {
        assert!(initiator_waits(SeqNum(100), SeqNum(100), 128));
        assert!(!initiator_waits(SeqNum(101), SeqNum(100), 128));
        assert!(!initiator_waits(SeqNum(228), SeqNum(100), 128));
    }

    #[test]
    fn counts_across_the_wrap() {
        assert!(initiator_waits(SeqNum(3), SeqNum(3), 128));
        assert!(!initiator_waits(SeqNum(2), SeqNum(u32::MAX - 4), 128));
    }

    #[test]
    fn an_initiator_that_does_not_track_exp_stat_sn_is_not_judged() {
        // libiscsi 1.19 past 2^31: ExpStatSN stuck at 1.
        assert!(initiator_waits(SeqNum(0x9000_0000), SeqNum(1), 128));
        // ExpStatSN ahead of StatSN (a confused initiator): also unknown.
        assert!(initiator_waits(SeqNum(100), SeqNum(105), 128));
    }
}
