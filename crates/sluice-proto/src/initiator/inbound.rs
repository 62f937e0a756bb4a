//! PDUs from the target in full feature phase: sequence numbers first (RFC 7143 sections
//! 4.2.2.1, 4.2.2.2), then the task, request or asynchronous event they belong to.

use std::time::Instant;

use bytes::Bytes;

use super::connection::ConnState;
use super::recovery::Tracked;
use super::task::{Progress, Task};
use super::{CloseReason, Completion, ConnId, Failure, InitiatorSession};
use crate::framing::FrameError;
use crate::pdu::codes::{AsyncEvent, ScsiStatus};
use crate::pdu::{AsyncMessage, DataIn, NopOut, Pdu};
use crate::seq::{Itt, SeqNum, Ttt};
use crate::task::initiator::{Placement, TaskStatus};

impl InitiatorSession {
    /// A PDU received on `conn` at `now`.
    pub fn handle_pdu(&mut self, conn: ConnId, pdu: Pdu, now: Instant) {
        if self
            .find(conn)
            .is_none_or(|c| c.state == ConnState::Closing)
        {
            return;
        }
        self.now = now;
        if self.recovering() {
            if let Tracked::Duplicate = self.track_recovering(conn, &pdu, now) {
                // Section 7.9: a copy of a status already processed is discarded.
                self.after_input(now);
                return;
            }
        } else {
            self.track(conn, &pdu, now);
        }
        if matches!(
            pdu,
            Pdu::ScsiResponse(_)
                | Pdu::TaskMgmtResponse(_)
                | Pdu::TextResponse(_)
                | Pdu::LogoutResponse(_)
        ) || matches!(&pdu, Pdu::DataIn(d) if d.status_present)
        {
            self.fruitless_recoveries = 0;
        }
        match pdu {
            Pdu::ScsiResponse(rsp) => {
                let progress = match self.task_on(conn, rsp.itt, now) {
                    Some(t) => t.handle_response(&rsp),
                    // Not ours (or already ended by task management): ignored.
                    None => Progress::Waiting,
                };
                self.after_task_pdu(rsp.itt, progress, Some(rsp.stat_sn), now);
            }
            Pdu::DataIn(d) => {
                let progress = match self.task_on(conn, d.itt, now) {
                    Some(t) => t.handle_data_in(&d),
                    None => Progress::Waiting,
                };
                let status = d.status_present.then_some(d.stat_sn);
                self.after_task_pdu(d.itt, progress, status, now);
            }
            Pdu::R2t(r2t) => {
                let mut out = Vec::new();
                let progress = match self.task_on(conn, r2t.itt, now) {
                    Some(t) => t.handle_r2t(&r2t, &mut out),
                    None => Progress::Waiting,
                };
                if let Some(c) = self.find_mut(conn) {
                    for pdu in out {
                        c.queue(pdu);
                    }
                }
                self.after_task_pdu(r2t.itt, progress, None, now);
            }
            Pdu::NopIn(nop) => {
                // Section 11.19: a NOP-In with a real TTT asks for a NOP-Out echoing it, with
                // the reserved ITT (section 11.18.1).
                if nop.ttt != Ttt::RESERVED {
                    // The ping data goes back, within what the target can receive: its
                    // MaxRecvDataSegmentLength (section 13.12), which may be below ours.
                    let mut data = nop.data.clone();
                    data.truncate(
                        self.find(conn)
                            .map_or(0, |c| c.params.target_max_recv_data_segment_length)
                            as usize,
                    );
                    let answer = Pdu::NopOut(NopOut {
                        immediate: true,
                        lun: nop.lun,
                        itt: Itt::RESERVED,
                        ttt: nop.ttt,
                        cmd_sn: self.window.immediate(),
                        exp_stat_sn: SeqNum(0),
                        data,
                    });
                    if let Some(c) = self.find_mut(conn) {
                        c.queue(answer);
                    }
                }
                if nop.itt != Itt::RESERVED {
                    self.answer_ping(nop.itt, now);
                }
            }
            Pdu::TaskMgmtResponse(r) => self.answer_tmf(r.itt, r.response, now),
            Pdu::LogoutResponse(r) => self.answer_logout(r.itt, r.response),
            Pdu::TextResponse(t) => self.answer_text(conn, t),
            Pdu::AsyncMessage(m) => self.handle_async(conn, &m),
            Pdu::Reject(r) => {
                self.rejects += 1;
                if !self.handle_reject(conn, &r) {
                    // Section 11.17: the data segment is the rejected PDU's header; its ITT is
                    // at bytes 16..20.
                    if let Some(itt) = r
                        .data
                        .get(16..20)
                        .map(|b| Itt(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
                    {
                        if self.tasks.contains_key(&itt) {
                            self.complete_task(itt, Err(Failure::Rejected(r.reason)), now);
                        } else {
                            self.fail_request(itt, Failure::Rejected(r.reason));
                        }
                    }
                }
            }
            _ => self.fail_connection(
                conn,
                CloseReason::Protocol("an opcode a target may not send in full feature phase"),
            ),
        }
        self.after_input(now);
    }

    /// The framer refused the byte stream of `conn` at `now` (a digest error, an oversized
    /// segment): at ErrorRecoveryLevel 0 the connection is lost; above it, what a digest error
    /// discarded is asked for again and the stream goes on (RFC 7143 section 7.8). Returns
    /// whether the driver goes on reading the stream.
    pub fn handle_frame_error(&mut self, conn: ConnId, error: &FrameError, now: Instant) -> bool {
        self.now = now;
        if self.recovering() && error.can_continue() && self.recover_frame_error(conn, error) {
            self.after_input(now);
            return true;
        }
        self.fail_connection(conn, CloseReason::Protocol("bad PDU from the target"));
        false
    }

    /// A Data-In received in place whose payload failed its data digest: the read takes its
    /// buffer back without the payload, and the PDU counts as lost (asked for again under
    /// recovery). Returns whether the driver goes on reading the stream.
    pub fn handle_placement_failed(
        &mut self,
        conn: ConnId,
        header: &DataIn,
        placement: Placement,
        error: &FrameError,
        now: Instant,
    ) -> bool {
        if let Some(t) = self.tasks.get_mut(&header.itt).filter(|t| t.conn == conn) {
            t.abandon_placement(placement);
        }
        self.handle_frame_error(conn, error, now)
    }

    /// The task `itt` if it belongs to `conn` (allegiance, section 4.2.4.1), marked as heard
    /// from at `now`.
    fn task_on(&mut self, conn: ConnId, itt: Itt, now: Instant) -> Option<&mut Task> {
        let t = self.tasks.get_mut(&itt).filter(|t| t.conn == conn)?;
        t.last_activity = now;
        t.heard = true;
        Some(t)
    }

    /// After a PDU of task `itt` (carrying status `status` if any): what it asks for goes
    /// out, a status that arrived before its data holds ExpStatSN back, a finished task ends.
    fn after_task_pdu(
        &mut self,
        itt: Itt,
        progress: Progress,
        status: Option<SeqNum>,
        now: Instant,
    ) {
        if self.recovering() {
            self.flush_task_snacks(itt);
            if let (Progress::Waiting, Some(sn)) = (&progress, status) {
                self.hold_status_for_data(itt, sn);
            }
        }
        self.progress(itt, progress, now);
    }

    /// Offers the buffer of the read that the Data-In with header `header` (and `len` data
    /// bytes, on `conn`) belongs to, so the driver can receive its payload in place.
    pub fn start_placement(
        &mut self,
        conn: ConnId,
        header: &DataIn,
        len: u32,
    ) -> Option<Placement> {
        let t = self.tasks.get_mut(&header.itt)?;
        if t.conn != conn {
            return None;
        }
        t.start_placement(header, len)
    }

    /// A Data-In whose payload was received into its read's buffer (see
    /// [`Self::start_placement`]): accounted for like any Data-In.
    pub fn handle_placed(
        &mut self,
        conn: ConnId,
        header: &DataIn,
        placement: Placement,
        now: Instant,
    ) {
        if self
            .find(conn)
            .is_none_or(|c| c.state == ConnState::Closing)
        {
            return;
        }
        self.now = now;
        if self.recovering() {
            // Placement is offered only for the next Data-In in order, never a copy.
            let _ = self.track_recovering(conn, &Pdu::DataIn(header.clone()), now);
        } else {
            self.track_numbers(
                conn,
                header.stat_sn,
                header.exp_cmd_sn,
                header.max_cmd_sn,
                header.status_present,
                now,
            );
        }
        let progress = match self.task_on(conn, header.itt, now) {
            Some(t) => t.handle_placed(header, placement),
            None => Progress::Waiting,
        };
        let status = header.status_present.then_some(header.stat_sn);
        self.after_task_pdu(header.itt, progress, status, now);
        self.after_input(now);
    }

    /// Whatever an input may have made possible: waiting commands, due logouts.
    fn after_input(&mut self, now: Instant) {
        self.send_due_logouts();
        self.issue_waiting(now);
    }

    fn progress(&mut self, itt: Itt, progress: Progress, now: Instant) {
        if let Progress::Done(result) = progress {
            self.complete_task(itt, result, now);
        }
    }

    /// Ends a task: its result to the application, its counters to its connection.
    pub(super) fn complete_task(
        &mut self,
        itt: Itt,
        result: Result<(Bytes, TaskStatus), Failure>,
        now: Instant,
    ) {
        let Some(mut t) = self.tasks.remove(&itt) else {
            return;
        };
        self.release_held_status(t.conn, t.held_stat_sn);
        let result = result.map(|(data, status)| t.result(data, status, now));
        self.finish_task(t, result);
    }

    pub(super) fn finish_task(&mut self, t: Task, result: Result<super::CommandResult, Failure>) {
        let ok = matches!(&result, Ok(r) if r.status == ScsiStatus::Good);
        let read = result.as_ref().map_or(0, |r| r.data.len() as u64);
        let written = if ok { t.write_len() } else { 0 };
        if let Some(c) = self.find_mut(t.conn) {
            c.ended(t.bytes(), read, written);
        }
        self.completions
            .push_back(Completion::Command(t.queued.id, result));
    }

    /// An Asynchronous Message (section 11.9).
    fn handle_async(&mut self, conn: ConnId, m: &AsyncMessage) {
        self.async_messages += 1;
        match m.async_event {
            // "The initiator MUST honor this request by issuing a Logout as early as possible":
            // of this connection when others remain, else of the session, which is then
            // reinstated so that its users see no failure.
            AsyncEvent::LogoutRequested => {
                let others = self
                    .conns
                    .iter()
                    .any(|c| c.id != conn && c.state == ConnState::Live);
                if others {
                    if let Some(c) = self.find_mut(conn) {
                        if c.state == ConnState::Live {
                            c.state = ConnState::Draining;
                        }
                    }
                    self.internal_connection_logout(conn);
                } else if !self.closing {
                    self.send_session_logout(None);
                }
            }
            // The target drops the connection named by Parameter1, or all of them.
            AsyncEvent::DropConnection => {
                let named = self
                    .conns
                    .iter()
                    .find(|c| c.cid == m.parameter1)
                    .map(|c| c.id);
                if let Some(named) = named {
                    self.fail_connection(named, CloseReason::DroppedByTarget);
                }
            }
            AsyncEvent::DropAllConnections => {
                let all: Vec<ConnId> = self.connections().collect();
                for c in all {
                    self.fail_connection(c, CloseReason::DroppedByTarget);
                }
            }
            // A SCSI asynchronous event (sense data), a renegotiation request (declined:
            // nothing to renegotiate) or a vendor-specific event.
            _ => {}
        }
    }

    /// The target asked this connection to log out while others remain: it drains, then
    /// logs out (nobody waits for the answer).
    fn internal_connection_logout(&mut self, conn: ConnId) {
        let already = self
            .requests
            .values()
            .any(|r| matches!(r, super::requests::Request::Logout { conn: c, .. } if *c == conn));
        if let Some(c) = self.find_mut(conn) {
            if c.logout.is_none() && !already {
                c.logout = Some(None);
            }
        }
    }

    /// StatSN, ExpCmdSN and MaxCmdSN of a received PDU.
    fn track(&mut self, conn: ConnId, pdu: &Pdu, now: Instant) {
        let (stat_sn, exp, max, advances) = match pdu {
            Pdu::ScsiResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::DataIn(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, p.status_present),
            Pdu::R2t(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, false),
            // A NOP-In with the reserved ITT carries the next StatSN without advancing it.
            Pdu::NopIn(p) => (
                p.stat_sn,
                p.exp_cmd_sn,
                p.max_cmd_sn,
                p.itt != Itt::RESERVED,
            ),
            Pdu::TaskMgmtResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::TextResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::AsyncMessage(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::Reject(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            Pdu::LogoutResponse(p) => (p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn, true),
            _ => {
                if let Some(c) = self.find_mut(conn) {
                    c.received(None, now);
                }
                return;
            }
        };
        self.track_numbers(conn, stat_sn, exp, max, advances, now);
    }

    fn track_numbers(
        &mut self,
        conn: ConnId,
        stat_sn: SeqNum,
        exp: SeqNum,
        max: SeqNum,
        advances: bool,
        now: Instant,
    ) {
        self.window.update(exp, max);
        if let Some(c) = self.find_mut(conn) {
            c.received(advances.then_some(stat_sn), now);
        }
    }
}
