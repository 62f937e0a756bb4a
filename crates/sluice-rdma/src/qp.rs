//! The reliable-connected queue pair as a sans-IO state machine: work requests and inbound
//! messages in, outbound messages and work completions out. It owns no memory; every access
//! goes through the [`ProtectionDomain`] the caller passes in.

use std::collections::VecDeque;

use crate::access::Access;
use crate::pd::ProtectionDomain;
use crate::wire::{Message, TerminateCause, MAX_PAYLOAD_BYTES, WIRE_VERSION};
use crate::work::{RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};

/// Limits of one queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// Outbound RDMA Read depth (ORD): RDMA Reads this side has outstanding at once. The
    /// effective depth is the smaller of this and the peer's IRD; further Reads (and every
    /// work request behind them) wait in the send queue.
    pub ord: u16,
    /// Inbound RDMA Read depth (IRD): RDMA Reads this side serves at once. A peer that asks
    /// for more gets a Terminate.
    pub ird: u16,
    /// Largest payload this side accepts and the largest RDMA Read it serves; capped at
    /// [`MAX_PAYLOAD_BYTES`].
    pub max_payload: u32,
    /// Work requests the send queue holds (posted and not yet completed).
    pub send_queue_depth: usize,
    /// Receives the receive queue holds.
    pub recv_queue_depth: usize,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            ord: 16,
            ird: 16,
            max_payload: MAX_PAYLOAD_BYTES,
            send_queue_depth: 1024,
            recv_queue_depth: 1024,
        }
    }
}

/// Where a queue pair is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Waiting for the peer's Connect; work requests queue.
    Connecting,
    /// Ready to send and receive.
    Ready,
    /// Stopped: every work request completes as [`WcStatus::Flushed`].
    Error,
}

/// Why a post was refused outright (nothing was queued, nothing will complete).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    /// The queue holds its configured depth already.
    #[error("the work queue is full")]
    QueueFull,
}

#[derive(Clone, Copy, Debug)]
struct Peer {
    ird: u16,
    max_payload: u32,
}

/// A send work request on the wire, waiting for its Ack or Read Response.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    msn: u32,
    wr: SendWr,
    done: bool,
}

/// Who an error is charged to when the queue pair stops.
enum Blame {
    /// The in-flight request with this MSN.
    InFlight(u32, WcStatus),
    /// The work request at the head of the send queue.
    SendHead(WcStatus),
    /// A receive already taken off the receive queue.
    Recv(RecvWr, WcStatus, u32),
    /// Nothing this side posted: an asynchronous error.
    Async(WcStatus),
}

/// One reliable-connected queue pair with its completion queue.
pub struct QueuePair {
    config: QpConfig,
    state: QpState,
    peer: Option<Peer>,
    /// MSN of the next request this side sends.
    next_msn: u32,
    /// MSN the next request from the peer must carry.
    expected_msn: u32,
    send_queue: VecDeque<SendWr>,
    in_flight: VecDeque<InFlight>,
    reads_outstanding: u16,
    recv_queue: VecDeque<RecvWr>,
    tx: VecDeque<Message>,
    /// Read Responses in `tx`: the inbound reads this side is serving (bounded by IRD).
    responses_queued: u16,
    cq: VecDeque<WorkCompletion>,
}

impl QueuePair {
    /// A queue pair whose first outbound message is its Connect.
    pub fn new(config: QpConfig) -> Self {
        let config = QpConfig {
            max_payload: config.max_payload.min(MAX_PAYLOAD_BYTES),
            ..config
        };
        let mut tx = VecDeque::new();
        tx.push_back(Message::Connect {
            version: WIRE_VERSION,
            ird: config.ird,
            max_payload: config.max_payload,
        });
        QueuePair {
            config,
            state: QpState::Connecting,
            peer: None,
            next_msn: 0,
            expected_msn: 0,
            send_queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            reads_outstanding: 0,
            recv_queue: VecDeque::new(),
            tx,
            responses_queued: 0,
            cq: VecDeque::new(),
        }
    }

    /// The configuration, with `max_payload` capped.
    pub fn config(&self) -> &QpConfig {
        &self.config
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Posts a send work request. Errors in it (a bad local STag, a payload too long) are
    /// reported by its completion, as hardware does; only a full queue is refused here.
    pub fn post_send(&mut self, pd: &mut ProtectionDomain, wr: SendWr) -> Result<(), PostError> {
        if self.state == QpState::Error {
            self.cq.push_back(WorkCompletion::new(
                wr.wr_id(),
                wr.opcode(),
                WcStatus::Flushed,
                0,
            ));
            return Ok(());
        }
        if self.send_queue.len() + self.in_flight.len() >= self.config.send_queue_depth {
            return Err(PostError::QueueFull);
        }
        self.send_queue.push_back(wr);
        self.pump(pd);
        Ok(())
    }

    /// Posts a receive buffer for one inbound Send. Its STag is checked when a Send uses it.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.state == QpState::Error {
            self.cq.push_back(WorkCompletion::new(
                wr.wr_id,
                WcOpcode::Recv,
                WcStatus::Flushed,
                0,
            ));
            return Ok(());
        }
        if self.recv_queue.len() >= self.config.recv_queue_depth {
            return Err(PostError::QueueFull);
        }
        self.recv_queue.push_back(wr);
        Ok(())
    }

    /// The next work completion, oldest first.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.cq.pop_front()
    }

    /// The next message to put on the wire.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        let msg = self.tx.pop_front()?;
        if matches!(msg, Message::ReadResponse { .. }) {
            self.responses_queued = self.responses_queued.saturating_sub(1);
        }
        Some(msg)
    }

    /// Whether messages wait in [`poll_transmit`](Self::poll_transmit).
    pub fn wants_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The byte stream delivered undecodable bytes: stop, and tell the peer why.
    pub fn handle_wire_error(&mut self) {
        if self.state == QpState::Error {
            return;
        }
        self.enter_error(
            Some((None, TerminateCause::Protocol)),
            Blame::Async(WcStatus::Protocol),
        );
    }

    /// The byte stream closed or failed.
    pub fn handle_transport_lost(&mut self) {
        if self.state == QpState::Error {
            return;
        }
        self.enter_error(None, Blame::Async(WcStatus::TransportLost));
    }

    /// Takes one message from the peer.
    pub fn handle_message(&mut self, pd: &mut ProtectionDomain, msg: Message) {
        match (self.state, msg) {
            (QpState::Error, _) => {}
            (_, Message::Terminate { msn, cause }) => self.handle_terminate(msn, cause),
            (
                QpState::Connecting,
                Message::Connect {
                    version,
                    ird,
                    max_payload,
                },
            ) if version == WIRE_VERSION => {
                self.peer = Some(Peer {
                    ird,
                    max_payload: max_payload.min(MAX_PAYLOAD_BYTES),
                });
                self.state = QpState::Ready;
                self.pump(pd);
            }
            (
                QpState::Ready,
                Message::Send {
                    msn,
                    invalidate,
                    payload,
                },
            ) => {
                if self.accept_msn(msn) {
                    self.handle_send(pd, msn, invalidate, &payload);
                }
            }
            (
                QpState::Ready,
                Message::Write {
                    msn,
                    stag,
                    va,
                    payload,
                },
            ) => {
                if !self.accept_msn(msn) {
                    return;
                }
                // RFC 5040 section 5.1 / 6.4: a tagged buffer is only placed after its STag,
                // rights and bounds are validated; a failure is a remote access error.
                match pd.write(stag, va, &payload, Access::REMOTE_WRITE) {
                    Ok(()) => self.ack(msn),
                    Err(_) => self.remote_access_error(msn),
                }
            }
            (QpState::Ready, Message::ReadRequest { msn, stag, va, len }) => {
                if !self.accept_msn(msn) {
                    return;
                }
                if self.responses_queued >= self.config.ird || len > self.config.max_payload {
                    self.enter_error(
                        Some((Some(msn), TerminateCause::InvalidRequest)),
                        Blame::Async(WcStatus::RemoteInvalidRequest),
                    );
                    return;
                }
                match pd.read(stag, va, u64::from(len), Access::REMOTE_READ) {
                    Ok(data) => {
                        self.responses_queued += 1;
                        self.tx.push_back(Message::ReadResponse {
                            msn,
                            payload: data.into(),
                        });
                    }
                    Err(_) => self.remote_access_error(msn),
                }
            }
            (QpState::Ready, Message::ReadResponse { msn, payload }) => {
                self.handle_read_response(pd, msn, &payload);
            }
            (QpState::Ready, Message::Ack { msn }) => self.handle_ack(pd, msn),
            // A second Connect, a wrong version, or requests before the Connect.
            _ => self.protocol_error(),
        }
    }

    fn handle_send(
        &mut self,
        pd: &mut ProtectionDomain,
        msn: u32,
        invalidate: Option<crate::access::STag>,
        payload: &[u8],
    ) {
        let Some(recv) = self.recv_queue.front().copied() else {
            // No retry: receiver not ready is final for both sides (see `WcStatus`).
            self.enter_error(
                Some((Some(msn), TerminateCause::ReceiverNotReady)),
                Blame::Async(WcStatus::ReceiveQueueEmpty),
            );
            return;
        };
        let len = payload.len() as u32;
        if len > recv.sge.len {
            self.recv_queue.pop_front();
            self.enter_error(
                Some((Some(msn), TerminateCause::Length)),
                Blame::Recv(recv, WcStatus::LocalLength, len),
            );
            return;
        }
        // RFC 5040 section 6.10: the STag of a Send with Invalidate must be valid in this
        // side's protection domain; otherwise nothing is delivered.
        if let Some(stag) = invalidate {
            if !pd.describe(stag).is_some_and(|(_, valid)| valid) {
                self.remote_access_error(msn);
                return;
            }
        }
        self.recv_queue.pop_front();
        let sge = recv.sge;
        if pd
            .write(sge.stag, sge.va, payload, Access::LOCAL_WRITE)
            .is_err()
        {
            self.enter_error(
                Some((Some(msn), TerminateCause::RemoteOperation)),
                Blame::Recv(recv, WcStatus::LocalProtection, 0),
            );
            return;
        }
        let mut wc = WorkCompletion::new(recv.wr_id, WcOpcode::Recv, WcStatus::Success, len);
        if let Some(stag) = invalidate {
            // Checked valid above.
            let _ = pd.invalidate(stag);
            wc.invalidated = Some(stag);
        }
        self.cq.push_back(wc);
        self.ack(msn);
    }

    fn handle_read_response(&mut self, pd: &mut ProtectionDomain, msn: u32, payload: &[u8]) {
        let Some(entry) = self
            .in_flight
            .iter_mut()
            .find(|e| e.msn == msn && !e.done && matches!(e.wr, SendWr::Read { .. }))
        else {
            self.protocol_error();
            return;
        };
        let SendWr::Read { sge, .. } = entry.wr else {
            return;
        };
        if payload.len() as u64 != u64::from(sge.len) {
            self.protocol_error();
            return;
        }
        // The sink was checked at post time; it may have been invalidated since.
        if pd
            .write(sge.stag, sge.va, payload, Access::LOCAL_WRITE)
            .is_err()
        {
            self.enter_error(
                Some((None, TerminateCause::RemoteOperation)),
                Blame::InFlight(msn, WcStatus::LocalProtection),
            );
            return;
        }
        entry.done = true;
        self.reads_outstanding = self.reads_outstanding.saturating_sub(1);
        self.complete_in_order();
        self.pump(pd);
    }

    fn handle_ack(&mut self, pd: &mut ProtectionDomain, msn: u32) {
        // Serial arithmetic: an Ack may only cover MSNs already sent.
        if (msn.wrapping_sub(self.next_msn) as i32) >= 0 {
            self.protocol_error();
            return;
        }
        for entry in &mut self.in_flight {
            if (msn.wrapping_sub(entry.msn) as i32) < 0 {
                break;
            }
            match entry.wr {
                // The responder answers a Read before it acknowledges anything after it.
                SendWr::Read { .. } if !entry.done => {
                    self.protocol_error();
                    return;
                }
                _ => entry.done = true,
            }
        }
        self.complete_in_order();
        self.pump(pd);
    }

    fn handle_terminate(&mut self, msn: Option<u32>, cause: TerminateCause) {
        let status = match cause {
            TerminateCause::RemoteAccess => WcStatus::RemoteAccess,
            TerminateCause::ReceiverNotReady => WcStatus::ReceiverNotReady,
            TerminateCause::Length | TerminateCause::InvalidRequest => {
                WcStatus::RemoteInvalidRequest
            }
            TerminateCause::RemoteOperation => WcStatus::RemoteOperation,
            TerminateCause::Protocol => WcStatus::Protocol,
        };
        let blame = match msn {
            Some(m) if self.in_flight.iter().any(|e| e.msn == m && !e.done) => {
                Blame::InFlight(m, status)
            }
            _ => Blame::Async(status),
        };
        self.enter_error(None, blame);
    }

    /// Moves work requests from the send queue onto the wire, in order, while the peer's
    /// IRD and this side's ORD allow.
    fn pump(&mut self, pd: &mut ProtectionDomain) {
        while self.state == QpState::Ready {
            let Some(peer) = self.peer else { return };
            let Some(wr) = self.send_queue.front().copied() else {
                return;
            };
            let msn = self.next_msn;
            let message = match wr {
                SendWr::LocalInvalidate { stag, .. } => {
                    // An implicit fence: the region may be an RDMA Read sink or a Send source
                    // of an earlier work request, so it is invalidated only once every earlier
                    // one has finished.
                    if self.in_flight.iter().any(|e| !e.done) {
                        return;
                    }
                    if pd.invalidate(stag).is_err() {
                        self.fail_head(WcStatus::LocalProtection);
                        return;
                    }
                    self.send_queue.pop_front();
                    self.in_flight.push_back(InFlight {
                        msn,
                        wr,
                        done: true,
                    });
                    self.complete_in_order();
                    continue;
                }
                SendWr::Send {
                    sge, invalidate, ..
                } => {
                    let Some(payload) = self.gather(pd, sge, peer) else {
                        return;
                    };
                    Message::Send {
                        msn,
                        invalidate,
                        payload: payload.into(),
                    }
                }
                SendWr::Write { sge, remote, .. } => {
                    let Some(payload) = self.gather(pd, sge, peer) else {
                        return;
                    };
                    Message::Write {
                        msn,
                        stag: remote.stag,
                        va: remote.va,
                        payload: payload.into(),
                    }
                }
                SendWr::Read { sge, remote, .. } => {
                    if self.reads_outstanding >= self.config.ord.min(peer.ird) {
                        return;
                    }
                    if sge.len > peer.max_payload {
                        self.fail_head(WcStatus::LocalLength);
                        return;
                    }
                    if pd
                        .check(sge.stag, sge.va, u64::from(sge.len), Access::LOCAL_WRITE)
                        .is_err()
                    {
                        self.fail_head(WcStatus::LocalProtection);
                        return;
                    }
                    self.reads_outstanding += 1;
                    Message::ReadRequest {
                        msn,
                        stag: remote.stag,
                        va: remote.va,
                        len: sge.len,
                    }
                }
            };
            self.send_queue.pop_front();
            self.next_msn = msn.wrapping_add(1);
            self.in_flight.push_back(InFlight {
                msn,
                wr,
                done: false,
            });
            self.tx.push_back(message);
        }
    }

    /// The bytes of a Send or Write, or `None` after failing the work request.
    fn gather(
        &mut self,
        pd: &ProtectionDomain,
        sge: crate::access::Sge,
        peer: Peer,
    ) -> Option<Vec<u8>> {
        if sge.len > peer.max_payload {
            self.fail_head(WcStatus::LocalLength);
            return None;
        }
        match pd.read(sge.stag, sge.va, u64::from(sge.len), Access::NONE) {
            Ok(data) => Some(data),
            Err(_) => {
                self.fail_head(WcStatus::LocalProtection);
                None
            }
        }
    }

    fn fail_head(&mut self, status: WcStatus) {
        self.enter_error(
            Some((None, TerminateCause::RemoteOperation)),
            Blame::SendHead(status),
        );
    }

    fn accept_msn(&mut self, msn: u32) -> bool {
        if msn != self.expected_msn {
            self.protocol_error();
            return false;
        }
        self.expected_msn = msn.wrapping_add(1);
        true
    }

    fn ack(&mut self, msn: u32) {
        // Coalesce with an Ack not yet sent; order with Read Responses is kept.
        if let Some(Message::Ack { msn: last }) = self.tx.back_mut() {
            *last = msn;
        } else {
            self.tx.push_back(Message::Ack { msn });
        }
    }

    fn remote_access_error(&mut self, msn: u32) {
        self.enter_error(
            Some((Some(msn), TerminateCause::RemoteAccess)),
            Blame::Async(WcStatus::RemoteAccess),
        );
    }

    fn protocol_error(&mut self) {
        self.enter_error(
            Some((None, TerminateCause::Protocol)),
            Blame::Async(WcStatus::Protocol),
        );
    }

    fn complete_in_order(&mut self) {
        while self.in_flight.front().is_some_and(|e| e.done) {
            if let Some(e) = self.in_flight.pop_front() {
                self.cq.push_back(self.success(e.wr));
            }
        }
    }

    fn success(&self, wr: SendWr) -> WorkCompletion {
        let len = match wr {
            SendWr::Send { sge, .. } | SendWr::Write { sge, .. } | SendWr::Read { sge, .. } => {
                sge.len
            }
            SendWr::LocalInvalidate { .. } => 0,
        };
        WorkCompletion::new(wr.wr_id(), wr.opcode(), WcStatus::Success, len)
    }

    /// Stops the queue pair: the blamed work request (or an asynchronous error) completes with
    /// its status, every other outstanding one in order — finished ones as finished, the rest
    /// flushed — then every posted receive is flushed. `terminate` tells the peer.
    fn enter_error(&mut self, terminate: Option<(Option<u32>, TerminateCause)>, blame: Blame) {
        self.state = QpState::Error;
        self.tx.clear();
        self.responses_queued = 0;
        if let Some((msn, cause)) = terminate {
            self.tx.push_back(Message::Terminate { msn, cause });
        }
        match blame {
            Blame::Async(status) => {
                self.cq
                    .push_back(WorkCompletion::new(0, WcOpcode::AsyncError, status, 0));
            }
            Blame::Recv(recv, status, len) => {
                self.cq
                    .push_back(WorkCompletion::new(recv.wr_id, WcOpcode::Recv, status, len));
            }
            Blame::InFlight(..) | Blame::SendHead(_) => {}
        }
        for e in std::mem::take(&mut self.in_flight) {
            let wc = match blame {
                Blame::InFlight(msn, status) if e.msn == msn && !e.done => {
                    WorkCompletion::new(e.wr.wr_id(), e.wr.opcode(), status, 0)
                }
                _ if e.done => self.success(e.wr),
                _ => WorkCompletion::new(e.wr.wr_id(), e.wr.opcode(), WcStatus::Flushed, 0),
            };
            self.cq.push_back(wc);
        }
        for (i, wr) in std::mem::take(&mut self.send_queue).into_iter().enumerate() {
            let status = match blame {
                Blame::SendHead(status) if i == 0 => status,
                _ => WcStatus::Flushed,
            };
            self.cq
                .push_back(WorkCompletion::new(wr.wr_id(), wr.opcode(), status, 0));
        }
        for recv in std::mem::take(&mut self.recv_queue) {
            self.cq.push_back(WorkCompletion::new(
                recv.wr_id,
                WcOpcode::Recv,
                WcStatus::Flushed,
                0,
            ));
        }
        self.reads_outstanding = 0;
    }
}
