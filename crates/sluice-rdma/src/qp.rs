//! The reliable-connected queue pair as a sans-IO state machine: work requests and inbound
//! messages in, outbound messages and work completions out. It owns no memory; every access
//! goes through the [`ProtectionDomain`] the caller passes in.

use std::collections::VecDeque;

use crate::pd::ProtectionDomain;
use crate::wire::{Message, TerminateCause, MAX_PAYLOAD_BYTES, WIRE_VERSION};
use crate::work::{RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};

mod requester;
mod responder;

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
                if self.accept_msn(msn) {
                    self.handle_write(pd, msn, stag, va, payload);
                }
            }
            (QpState::Ready, Message::ReadRequest { msn, stag, va, len }) => {
                if self.accept_msn(msn) {
                    self.handle_read_request(pd, msn, stag, va, len);
                }
            }
            (QpState::Ready, Message::ReadResponse { msn, payload }) => {
                self.handle_read_response(pd, msn, payload);
            }
            (QpState::Ready, Message::Ack { msn }) => self.handle_ack(pd, msn),
            // A second Connect, a wrong version, or requests before the Connect.
            _ => self.protocol_error(),
        }
    }

    fn protocol_error(&mut self) {
        self.enter_error(
            Some((None, TerminateCause::Protocol)),
            Blame::Async(WcStatus::Protocol),
        );
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
