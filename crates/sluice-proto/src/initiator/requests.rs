//! Requests other than SCSI commands: task management (RFC 7143 sections 11.5, 11.6), NOP-Out
//! pings (11.18), text exchanges (11.10, 11.11) and logout (11.14, 11.15); and the recovery
//! of a failed connection at ErrorRecoveryLevel 0.

use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::connection::ConnState;
use super::{CloseReason, Completion, ConnId, Event, Failure, InitiatorSession, RequestId, TaskId};
use crate::login::LOGIN_SEGMENT_MAX;
use crate::pdu::codes::{LogoutReason, LogoutResponseCode, TmfFunction, TmfResponse};
use crate::pdu::{LogoutRequest, NopOut, Pdu, TaskMgmtRequest, TextRequest};
use crate::seq::{Itt, Lun, SeqNum, Ttt};
use crate::text::{encode_pairs, parse_pairs, TextLimits};

/// Most Text Responses one text exchange takes (continuations included).
const MAX_TEXT_RESPONSES: u32 = 1024;

/// A request waiting for its answer, by ITT.
#[derive(Debug)]
pub(super) enum Request {
    TaskMgmt {
        id: RequestId,
        conn: ConnId,
        function: TmfFunction,
        lun: Lun,
        /// The function's CmdSN: task-set functions affect tasks issued before it.
        cmd_sn: SeqNum,
        referenced: Itt,
    },
    Ping {
        /// `None` for keepalive pings (nobody waits for them).
        id: Option<RequestId>,
        conn: ConnId,
        sent: Instant,
    },
    Text {
        id: RequestId,
        conn: ConnId,
        /// Response text received so far (continued responses).
        received: BytesMut,
        /// Responses received so far.
        responses: u32,
    },
    Logout {
        /// `None` when the session logs out on its own (Async logout request).
        id: Option<RequestId>,
        conn: ConnId,
        /// Reason 0 (the session) rather than 1 (this connection).
        session: bool,
    },
    /// An ABORT TASK for a command given up on (its deadline passed): nobody waits for it.
    /// It may also be what fills the command's CmdSN at the target (section 7.11), so under
    /// connection recovery it moves to the replacement connection rather than being lost.
    QuietAbort {
        conn: ConnId,
        referenced: Itt,
        ref_cmd_sn: SeqNum,
        lun: Lun,
    },
    /// A TASK REASSIGN moving command `task` to `conn` (ErrorRecoveryLevel 2).
    Reassign { task: Itt, conn: ConnId },
}

impl Request {
    fn conn(&self) -> ConnId {
        match self {
            Request::TaskMgmt { conn, .. }
            | Request::Ping { conn, .. }
            | Request::Text { conn, .. }
            | Request::Logout { conn, .. }
            | Request::QuietAbort { conn, .. }
            | Request::Reassign { conn, .. } => *conn,
        }
    }
}

/// A NOP-Out ping: a real ITT asks for a NOP-In echoing it (section 11.18.1).
pub(super) fn nop_out(itt: Itt, cmd_sn: SeqNum) -> Pdu {
    Pdu::NopOut(NopOut {
        immediate: true,
        lun: Lun::default(),
        itt,
        ttt: Ttt::RESERVED,
        cmd_sn,
        exp_stat_sn: SeqNum(0),
        data: Bytes::new(),
    })
}

impl InitiatorSession {
    /// Sends a task management function (section 11.5): `referenced` names the task of ABORT
    /// TASK; task-set functions and resets affect the tasks issued before them.
    pub fn task_management(
        &mut self,
        function: TmfFunction,
        lun: Lun,
        referenced: Option<TaskId>,
        now: Instant,
    ) -> RequestId {
        let id = RequestId(self.next_id());
        let _ = now;
        let target_task = referenced.and_then(|r| {
            self.tasks
                .iter()
                .find(|(_, t)| t.queued.id == r)
                .map(|(itt, t)| (*itt, t.cmd_sn, t.conn, t.queued.command.lun))
        });
        if function == TmfFunction::AbortTask {
            if let Some(pos) = referenced.and_then(|r| self.waiting.iter().position(|q| q.id == r))
            {
                // Never sent: it ends here, and there is nothing to ask the target.
                if let Some(q) = self.waiting.remove(pos) {
                    self.completions
                        .push_back(Completion::Command(q.id, Err(Failure::Aborted)));
                }
                self.completions
                    .push_back(Completion::TaskMgmt(id, Ok(TmfResponse::FunctionComplete)));
                return id;
            }
        }
        // ABORT TASK goes on the task's connection; the others on any live one.
        let conn = target_task
            .map(|t| t.2)
            .filter(|c| self.find(*c).is_some_and(|c| c.state != ConnState::Closing))
            .or_else(|| self.live_connections().next());
        let Some(conn) = conn else {
            self.completions
                .push_back(Completion::TaskMgmt(id, Err(Failure::ConnectionLost)));
            return id;
        };
        let itt = self.next_itt();
        let cmd_sn = self.window.immediate();
        let (referenced, ref_cmd_sn, lun) = match target_task {
            Some((itt, sn, _, task_lun)) => (itt, sn, task_lun),
            None => (Itt::RESERVED, cmd_sn, lun),
        };
        let pdu = Pdu::TaskMgmtRequest(TaskMgmtRequest {
            immediate: true,
            function,
            lun,
            itt,
            referenced_task_tag: referenced,
            cmd_sn,
            exp_stat_sn: SeqNum(0),
            ref_cmd_sn,
            exp_data_sn: 0,
        });
        self.queue_request(
            conn,
            itt,
            pdu,
            Request::TaskMgmt {
                id,
                conn,
                function,
                lun,
                cmd_sn,
                referenced,
            },
        );
        id
    }

    /// Sends a NOP-Out ping; completes with the round-trip time.
    pub fn ping(&mut self, now: Instant) -> RequestId {
        let id = RequestId(self.next_id());
        let Some(conn) = self.live_connections().next() else {
            self.completions
                .push_back(Completion::Ping(id, Err(Failure::ConnectionLost)));
            return id;
        };
        let itt = self.next_itt();
        let pdu = nop_out(itt, self.window.immediate());
        self.queue_request(
            conn,
            itt,
            pdu,
            Request::Ping {
                id: Some(id),
                conn,
                sent: now,
            },
        );
        id
    }

    /// Sends a Text Request with these pairs (e.g. `SendTargets=All`); completes with the
    /// answer, fetching a long one with continuation requests (section 11.10).
    pub fn text(&mut self, pairs: &[(String, String)]) -> RequestId {
        let id = RequestId(self.next_id());
        let data = encode_pairs(pairs);
        let conn = self.live_connections().next();
        let Some(conn) = conn.filter(|_| data.len() <= LOGIN_SEGMENT_MAX) else {
            let failure = match conn {
                None => Failure::ConnectionLost,
                Some(_) => Failure::BadText,
            };
            self.completions
                .push_back(Completion::Text(id, Err(failure)));
            return id;
        };
        let itt = self.next_itt();
        let pdu = text_request(itt, self.window.immediate(), Ttt::RESERVED, data);
        self.queue_request(
            conn,
            itt,
            pdu,
            Request::Text {
                id,
                conn,
                received: BytesMut::new(),
                responses: 0,
            },
        );
        id
    }

    /// Logs the session out (reason 0, "close the session"): commands still outstanding
    /// complete with [`Failure::Closed`].
    pub fn logout(&mut self) -> RequestId {
        let id = RequestId(self.next_id());
        self.send_session_logout(Some(id));
        id
    }

    /// Logs out one connection (reason 1, "close the connection"): it takes no new commands,
    /// finishes those it has, then the Logout Request goes out on it; the others go on.
    pub fn logout_connection(&mut self, conn: ConnId) -> RequestId {
        let id = RequestId(self.next_id());
        match self.find_mut(conn) {
            Some(c) if c.state == ConnState::Live => {
                c.state = ConnState::Draining;
                c.logout = Some(Some(id));
                self.send_due_logouts();
            }
            _ => self
                .completions
                .push_back(Completion::Logout(id, Err(Failure::ConnectionLost))),
        }
        id
    }

    pub(super) fn send_session_logout(&mut self, id: Option<RequestId>) {
        self.closing = true;
        let Some(conn) = self.live_connections().next().or_else(|| {
            self.conns
                .iter()
                .find(|c| c.state == ConnState::Draining)
                .map(|c| c.id)
        }) else {
            if self.reinstating {
                // Every connection is closing for session reinstatement: the target still
                // has the session, and the driver is about to log in its replacement. Ending
                // here would leave that new session at the target with nobody to log it out
                // (seeds 589339, 721496, 977824, 568265, 697031): the logout waits for it.
                self.logout_after_reinstatement.push(id);
                return;
            }
            if let Some(id) = id {
                self.completions.push_back(Completion::Logout(id, Ok(())));
            }
            self.end_session();
            return;
        };
        let itt = self.next_itt();
        let pdu = logout_request(itt, self.window.immediate(), LogoutReason::CloseSession, 0);
        self.queue_request(
            conn,
            itt,
            pdu,
            Request::Logout {
                id,
                conn,
                session: true,
            },
        );
    }

    /// Draining connections with nothing outstanding (no command, and no request waiting for
    /// its answer: a logout would end them unanswered) send their Logout Request.
    pub(super) fn send_due_logouts(&mut self) {
        // A keepalive ping does not hold a logout back: the connection's end answers it.
        let busy: Vec<ConnId> = self
            .requests
            .values()
            .filter(|r| !matches!(r, Request::Ping { id: None, .. }))
            .map(Request::conn)
            .collect();
        let due: Vec<(ConnId, u16, Option<RequestId>)> = self
            .conns
            .iter_mut()
            .filter(|c| c.state == ConnState::Draining && c.stats.outstanding == 0)
            .filter(|c| !busy.contains(&c.id))
            .filter_map(|c| c.logout.take().map(|id| (c.id, c.cid, id)))
            .collect();
        for (conn, cid, id) in due {
            let itt = self.next_itt();
            let pdu = logout_request(
                itt,
                self.window.immediate(),
                LogoutReason::CloseConnection,
                cid,
            );
            self.queue_request(
                conn,
                itt,
                pdu,
                Request::Logout {
                    id,
                    conn,
                    session: false,
                },
            );
        }
    }

    pub(super) fn queue_request(&mut self, conn: ConnId, itt: Itt, pdu: Pdu, request: Request) {
        self.track_request(conn, itt, &pdu);
        if let Some(c) = self.find_mut(conn) {
            c.queue(pdu);
        }
        self.requests.insert(itt, request);
    }

    /// A Task Management Function Response (section 11.6). "Function complete" ends the
    /// tasks the function affected that are still outstanding here: the target sends them no
    /// answer (and answered, before this, every one it did not end; section 11.6.2).
    pub(super) fn answer_tmf(&mut self, itt: Itt, response: TmfResponse, now: Instant) {
        if self
            .take_request(itt, |r| matches!(r, Request::QuietAbort { .. }))
            .is_some()
        {
            return;
        }
        if let Some(Request::Reassign { task, .. }) =
            self.take_request(itt, |r| matches!(r, Request::Reassign { .. }))
        {
            self.answer_reassign(task, response, now);
            return;
        }
        let Some(Request::TaskMgmt {
            id,
            function,
            lun,
            cmd_sn,
            referenced,
            ..
        }) = self.take_request(itt, |r| matches!(r, Request::TaskMgmt { .. }))
        else {
            return;
        };
        if response == TmfResponse::FunctionComplete {
            let affected: Vec<Itt> = self
                .tasks
                .iter()
                .filter(|(task_itt, t)| match function {
                    TmfFunction::AbortTask => **task_itt == referenced,
                    TmfFunction::AbortTaskSet
                    | TmfFunction::ClearTaskSet
                    | TmfFunction::LogicalUnitReset => {
                        t.queued.command.lun == lun && t.cmd_sn.lt(cmd_sn)
                    }
                    TmfFunction::TargetWarmReset | TmfFunction::TargetColdReset => {
                        t.cmd_sn.lt(cmd_sn)
                    }
                    _ => false,
                })
                .map(|(itt, _)| *itt)
                .collect();
            for itt in affected {
                self.complete_task(itt, Err(Failure::Aborted), now);
            }
        }
        self.completions
            .push_back(Completion::TaskMgmt(id, Ok(response)));
    }

    /// A NOP-In answering our ping.
    pub(super) fn answer_ping(&mut self, itt: Itt, now: Instant) {
        if let Some(Request::Ping {
            id: Some(id), sent, ..
        }) = self.take_request(itt, |r| matches!(r, Request::Ping { .. }))
        {
            let rtt = now.saturating_duration_since(sent);
            self.completions.push_back(Completion::Ping(id, Ok(rtt)));
        }
    }

    /// A Text Response: the answer, or part of it (section 11.11).
    pub(super) fn answer_text(&mut self, conn: ConnId, rsp: crate::pdu::TextResponse) {
        let Some(Request::Text {
            received,
            responses,
            ..
        }) = self.requests.get_mut(&rsp.itt)
        else {
            return;
        };
        received.extend_from_slice(&rsp.data);
        *responses += 1;
        // A SendTargets answer may list many targets (the discovery limits), but it ends: a
        // target that keeps answering "more" gets a bounded number of continuations.
        let too_long =
            received.len() > TextLimits::DISCOVERY.max_total_len || *responses > MAX_TEXT_RESPONSES;
        let more = rsp.cont || !rsp.final_bit || rsp.ttt != Ttt::RESERVED;
        if more && !too_long {
            // Section 11.10.4: fetch the rest with an empty request carrying the TTT.
            let pdu = text_request(rsp.itt, self.window.immediate(), rsp.ttt, Bytes::new());
            if let Some(c) = self.find_mut(conn) {
                c.queue(pdu);
            }
            return;
        }
        let Some(Request::Text { id, received, .. }) = self.requests.remove(&rsp.itt) else {
            return;
        };
        let result = if too_long {
            Err(Failure::BadText)
        } else {
            parse_pairs(&received, &TextLimits::DISCOVERY).map_err(|_| Failure::BadText)
        };
        self.completions.push_back(Completion::Text(id, result));
    }

    /// A Logout Response (section 11.15).
    pub(super) fn answer_logout(&mut self, itt: Itt, response: LogoutResponseCode) {
        let Some(Request::Logout { id, conn, session }) =
            self.take_request(itt, |r| matches!(r, Request::Logout { .. }))
        else {
            return;
        };
        if response != LogoutResponseCode::Closed {
            if let Some(id) = id {
                self.completions
                    .push_back(Completion::Logout(id, Err(Failure::Logout(response))));
            }
            if !session {
                if let Some(c) = self.find_mut(conn) {
                    c.state = ConnState::Live;
                }
            }
            return;
        }
        if let Some(id) = id {
            self.completions.push_back(Completion::Logout(id, Ok(())));
        }
        if !session {
            self.close(conn, CloseReason::Logout);
            return;
        }
        if id.is_none() {
            // The target asked for this logout: log in again, and send what was outstanding
            // on the new session.
            self.begin_reinstatement(CloseReason::Logout);
            return;
        }
        self.end_session();
    }

    /// The session logged out: every connection closes, every request ends.
    pub(super) fn end_session(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let itts: Vec<Itt> = self.tasks.keys().copied().collect();
        for itt in itts {
            if let Some(t) = self.tasks.remove(&itt) {
                self.finish_task(t, Err(Failure::Closed));
            }
        }
        while let Some(q) = self.waiting.pop_front() {
            self.completions
                .push_back(Completion::Command(q.id, Err(Failure::Closed)));
        }
        self.fail_requests(|_| true, Failure::Closed);
        let conns: Vec<ConnId> = self.connections().collect();
        for conn in conns {
            self.close(conn, CloseReason::Logout);
        }
        self.events.push_back(Event::Ended);
    }

    /// Marks a connection closing and tells the driver.
    pub(super) fn close(&mut self, conn: ConnId, reason: CloseReason) {
        if let Some(c) = self.find_mut(conn) {
            if c.state != ConnState::Closing {
                c.state = ConnState::Closing;
                c.close_reason = Some(reason);
                self.events.push_back(Event::Close(conn, reason));
            }
        }
    }

    /// The transport of `conn` is gone (after an [`Event::Close`], or lost).
    ///
    /// Below ErrorRecoveryLevel 2 a connection that fails with commands on it costs the
    /// session: it is reinstated ([`Event::Reinstate`]), as it is when no connection is left.
    /// The target ends the connection's tasks only once it sees the failure, and until then it
    /// may still take in what was on the way (a write's Data-Out, say) and run them; a command
    /// issued again meanwhile on another connection could run first and be overwritten by
    /// its stale original, or a newer write by it. Nothing at these levels tells the
    /// initiator when the target has let go of them (RFC 7143 section 7.14: short of
    /// connection recovery or a logout of the connection, it is session recovery, and section
    /// 6.3.5: reinstatement ends the old session's tasks before the new one runs any). A
    /// connection with nothing on it just goes.
    pub fn handle_connection_closed(&mut self, conn: ConnId, now: Instant) {
        let Some(pos) = self.conns.iter().position(|c| c.id == conn) else {
            return;
        };
        let gone = self.conns.remove(pos);
        if let Some(Some(id)) = gone.logout {
            // Its logout was still waiting for its commands.
            self.completions
                .push_back(Completion::Logout(id, Err(Failure::ConnectionLost)));
        }
        // A logout sent on it is done: the target closes the connection after it (section
        // 11.15), and under error recovery its answer may have been the PDU that was lost.
        let logged_out: Vec<Itt> = self
            .requests
            .iter()
            .filter(|(_, r)| matches!(r, Request::Logout { conn: c, .. } if *c == conn))
            .map(|(itt, _)| *itt)
            .collect();
        for itt in logged_out {
            match self.requests.remove(&itt) {
                // This side closed it to reinstate the session, not the target after the
                // logout: the session goes on at the target under a new login, so its logout
                // goes out there.
                Some(Request::Logout {
                    id, session: true, ..
                }) if self.reinstating && gone.close_reason == Some(CloseReason::Reinstate) => {
                    self.logout_after_reinstatement.push(id);
                }
                Some(Request::Logout { id: Some(id), .. }) => {
                    self.completions.push_back(Completion::Logout(id, Ok(())));
                }
                _ => {}
            }
        }
        if self.recovers_connections() && !self.reinstating && !self.ended && !self.closing {
            self.keep_plugs_of(conn);
        }
        let exp = self.window.exp_cmd_sn();
        let lost_plug = self.requests.values().any(|r| {
            matches!(r, Request::QuietAbort { conn: c, ref_cmd_sn, .. }
                if *c == conn && !ref_cmd_sn.lt(exp))
        });
        self.fail_requests(|r| r.conn() == conn, Failure::ConnectionLost);
        if self.reinstating || self.ended {
            // Being replaced, or logged out: nothing to recover.
            return;
        }
        if self.recovers_connections()
            && !self.closing
            && gone.close_reason != Some(CloseReason::Logout)
        {
            // ErrorRecoveryLevel 2: its commands wait for a connection that replaces it.
            self.keep_for_reassignment(conn, gone.cid);
            return;
        }
        if self.closing {
            // The session is logging out (after its answer the target closes every
            // connection, so another one may well go first). It is over once the connection
            // carrying the logout is gone too.
            let logout_pending = self
                .requests
                .values()
                .any(|r| matches!(r, Request::Logout { session: true, .. }));
            if !logout_pending || self.conns.is_empty() {
                self.end_session();
            }
            return;
        }
        // Its commands, acknowledged or not, may still run at the target (see above), so
        // none may be issued again before the target has ended them. An ABORT TASK that was
        // to plug the CmdSN of a command given up on (section 7.11) went with it, so the hole
        // stays and holds every later command back: the same remedy.
        let had_tasks = self.tasks.values().any(|t| t.conn == conn) || lost_plug;
        let live_left = self.conns.iter().any(|c| c.state != ConnState::Closing);
        if had_tasks || !live_left {
            self.begin_reinstatement(CloseReason::Reinstate);
            return;
        }
        self.issue_waiting(now);
    }

    /// Session recovery: close every connection and ask the driver for a new session.
    pub(super) fn begin_reinstatement(&mut self, reason: CloseReason) {
        if self.reinstating {
            return;
        }
        self.reinstating = true;
        self.closing = false;
        let conns: Vec<ConnId> = self.connections().collect();
        for conn in conns {
            self.close(conn, reason);
        }
        self.events.push_back(Event::Reinstate);
    }

    /// A connection failed (keepalive, protocol, dropped by the target): the driver closes
    /// it and reports [`Self::handle_connection_closed`].
    pub(super) fn fail_connection(&mut self, conn: ConnId, reason: CloseReason) {
        self.close(conn, reason);
    }

    /// Tasks matching `pred` go back to the waiting queue (oldest first), unless they were
    /// sent as often as allowed.
    pub(super) fn requeue_tasks(&mut self, pred: impl Fn(&super::task::Task) -> bool) {
        let mut moved: Vec<super::task::Task> = Vec::new();
        let itts: Vec<Itt> = self
            .tasks
            .iter()
            .filter(|(_, t)| pred(t))
            .map(|(itt, _)| *itt)
            .collect();
        for itt in itts {
            if let Some(t) = self.tasks.remove(&itt) {
                moved.push(t);
            }
        }
        moved.sort_by(|a, b| {
            b.cmd_sn
                .serial_cmp(a.cmd_sn)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        for t in moved {
            if let Some(c) = self.find_mut(t.conn) {
                c.ended(t.bytes(), 0, 0);
            }
            if t.queued.attempts > self.config.max_retries {
                self.completions.push_back(Completion::Command(
                    t.queued.id,
                    Err(Failure::TooManyRetries),
                ));
            } else {
                self.retried += 1;
                self.waiting.push_front(t.queued);
            }
        }
    }

    /// The connections are about to be forgotten (reinstatement, giving up): logouts of
    /// draining connections still waiting for their commands end with `failure`, as a
    /// connection closed under them would end them.
    pub(super) fn fail_waiting_logouts(&mut self, failure: Failure) {
        for c in &mut self.conns {
            if let Some(Some(id)) = c.logout.take() {
                self.completions
                    .push_back(Completion::Logout(id, Err(failure)));
            }
        }
    }

    /// Requests matching `pred` end with `failure` (keepalive pings silently).
    pub(super) fn fail_requests(&mut self, pred: impl Fn(&Request) -> bool, failure: Failure) {
        let itts: Vec<Itt> = self
            .requests
            .iter()
            .filter(|(_, r)| pred(r))
            .map(|(itt, _)| *itt)
            .collect();
        for itt in itts {
            self.fail_request(itt, failure);
        }
    }

    /// The request with this ITT ends with `failure` (a keepalive ping silently).
    pub(super) fn fail_request(&mut self, itt: Itt, failure: Failure) {
        let Some(r) = self.requests.remove(&itt) else {
            return;
        };
        let completion = match r {
            Request::TaskMgmt { id, .. } => Completion::TaskMgmt(id, Err(failure)),
            Request::Ping { id: Some(id), .. } => Completion::Ping(id, Err(failure)),
            Request::Text { id, .. } => Completion::Text(id, Err(failure)),
            Request::Logout { id: Some(id), .. } => Completion::Logout(id, Err(failure)),
            Request::Ping { id: None, .. }
            | Request::Logout { id: None, .. }
            | Request::QuietAbort { .. } => return,
            // The command stays; what happens to it follows from its connection.
            Request::Reassign { task, .. } => {
                if let Some(t) = self.tasks.get_mut(&task) {
                    t.reassigning = false;
                }
                return;
            }
        };
        self.completions.push_back(completion);
    }

    /// Removes the request with this ITT if it is of the expected kind.
    fn take_request(&mut self, itt: Itt, kind: impl Fn(&Request) -> bool) -> Option<Request> {
        if self.requests.get(&itt).is_some_and(kind) {
            self.requests.remove(&itt)
        } else {
            None
        }
    }
}

fn text_request(itt: Itt, cmd_sn: SeqNum, ttt: Ttt, data: Bytes) -> Pdu {
    Pdu::TextRequest(TextRequest {
        immediate: true,
        final_bit: true,
        cont: false,
        lun: Lun::default(),
        itt,
        ttt,
        cmd_sn,
        exp_stat_sn: SeqNum(0),
        data,
    })
}

fn logout_request(itt: Itt, cmd_sn: SeqNum, reason: LogoutReason, cid: u16) -> Pdu {
    Pdu::LogoutRequest(LogoutRequest {
        immediate: true,
        reason,
        itt,
        cid,
        cmd_sn,
        exp_stat_sn: SeqNum(0),
    })
}
