//! One side of a connection, sans-IO: a protection domain, a queue pair, the decoder and a
//! fault plan. Drivers feed it received bytes and send what [`Endpoint::poll_transmit`] hands
//! out; tests can connect two endpoints directly.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::access::{Access, VaMode};
use crate::fault::{FaultAction, FaultPlan, FrameKind};
use crate::pd::{Lent, MemoryRegion, ProtectionDomain, RegisterError};
use crate::qp::{PostError, QpConfig, QpState, QueuePair};
use crate::wire::{Decoder, PendingFrame};
use crate::work::{RecvWr, SendWr, WorkCompletion};

/// One encoded frame to send: its header (with the message's fixed part), its payload, and
/// how long to hold it first (fault injection).
#[derive(Debug)]
pub struct Outgoing {
    /// Frame header and fixed part.
    pub head: BytesMut,
    /// The payload, sent right after `head`.
    pub payload: Bytes,
    /// Wait this long before sending.
    pub delay: Option<Duration>,
}

/// One side of a software RDMA connection.
pub struct Endpoint {
    /// The protection domain: the memory this side registered.
    pub pd: ProtectionDomain,
    qp: QueuePair,
    decoder: Decoder,
    faults: FaultPlan,
    /// Request frames a `DeferPastReadResponse` fault holds, in order.
    deferred: VecDeque<Outgoing>,
    /// A Read Response went out: the deferred frames follow it.
    releasing: bool,
    broken: bool,
}

impl Endpoint {
    /// An endpoint with an empty protection domain and one queue pair.
    pub fn new(config: QpConfig) -> Self {
        let qp = QueuePair::new(config);
        Endpoint {
            decoder: Decoder::new(qp.config().max_payload),
            pd: ProtectionDomain::new(),
            qp,
            faults: FaultPlan::default(),
            deferred: VecDeque::new(),
            releasing: false,
            broken: false,
        }
    }

    /// Replaces the fault plan.
    pub fn set_faults(&mut self, plan: FaultPlan) {
        self.faults = plan;
    }

    /// Registers a memory region (subject to the fault plan).
    pub fn register(
        &mut self,
        len: u64,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.registering(|pd| pd.register(len, access, va))
    }

    /// Registers the caller's memory in place (see [`ProtectionDomain::register_vec`]),
    /// under the same fault plan as [`register`](Self::register).
    pub fn register_vec(
        &mut self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.registering(|pd| pd.register_vec(bytes, access, va))
    }

    /// [`ProtectionDomain::register_cleared`], under the fault plan.
    pub fn register_cleared(
        &mut self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.registering(|pd| pd.register_cleared(bytes, access, va))
    }

    /// Registers the caller's immutable buffer for reading (see
    /// [`ProtectionDomain::register_shared`]), under the same fault plan.
    pub fn register_shared(
        &mut self,
        bytes: bytes::Bytes,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.registering(|pd| pd.register_shared(bytes, access, va))
    }

    /// Registers the caller's immutable buffers, in order, as one region for reading (see
    /// [`ProtectionDomain::register_gathered`]), under the same fault plan.
    pub fn register_gathered(
        &mut self,
        chunks: Vec<bytes::Bytes>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.registering(|pd| pd.register_gathered(chunks, access, va))
    }

    /// A registration, unless the fault plan fails it.
    fn registering(
        &mut self,
        register: impl FnOnce(&mut ProtectionDomain) -> Result<MemoryRegion, RegisterError>,
    ) -> Result<MemoryRegion, RegisterError> {
        if self.faults.take_registration_failure() {
            return Err(RegisterError::Injected);
        }
        register(&mut self.pd)
    }

    /// The queue pair's state.
    pub fn state(&self) -> QpState {
        self.qp.state()
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        self.qp.post_send(&mut self.pd, wr)
    }

    /// Posts a receive.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        self.qp.post_recv(wr)
    }

    /// The next work completion.
    pub fn poll_completion(&mut self) -> Option<WorkCompletion> {
        self.qp.poll_completion()
    }

    /// Decodes and handles every whole message at the front of `buf`. Undecodable bytes stop
    /// the queue pair (the peer gets a Terminate) and everything after them is ignored.
    pub fn handle_bytes(&mut self, buf: &mut BytesMut) {
        // No payload reaches u32::MAX bytes (the decoder's limit is far below): none is
        // left to be read apart.
        let none = self.handle_bytes_until_large(buf, u32::MAX);
        debug_assert!(none.is_none());
    }

    /// As [`handle_bytes`](Self::handle_bytes), but stops at a frame whose payload is at
    /// least `min_payload` bytes and has not all arrived: its header is taken off `buf` and
    /// returned, for the driver to read the payload into a buffer of its own and hand it to
    /// [`handle_payload`](Self::handle_payload). (Judged before `buf` is grown for it, so
    /// the reader's buffer stays small.)
    pub fn handle_bytes_until_large(
        &mut self,
        buf: &mut BytesMut,
        min_payload: u32,
    ) -> Option<PendingFrame> {
        while !self.broken {
            let decoded = match self.decoder.take_large_head(buf, min_payload) {
                Ok(Some(frame)) => return Some(frame),
                // Its header is in, its fixed part not yet: wait for more without growing
                // `buf` for the payload.
                Ok(None) if self.decoder.awaits_large(buf, min_payload) => return None,
                Ok(None) => self.decoder.decode(buf),
                Err(e) => Err(e),
            };
            match decoded {
                Ok(Some(msg)) => self.qp.handle_message(&mut self.pd, msg),
                Ok(None) => return None,
                Err(_) => {
                    self.broken = true;
                    self.qp.handle_wire_error();
                }
            }
        }
        buf.clear();
        None
    }

    /// The payload of the frame [`handle_bytes_until_large`](Self::handle_bytes_until_large)
    /// returned, as the driver read it.
    pub fn handle_payload(&mut self, frame: PendingFrame, payload: Bytes) {
        if self.broken {
            return;
        }
        match self.decoder.finish(frame, payload) {
            Ok(msg) => self.qp.handle_message(&mut self.pd, msg),
            Err(_) => {
                self.broken = true;
                self.qp.handle_wire_error();
            }
        }
    }

    /// For an RDMA Write the queue pair takes next, whose payload falls inside a writable
    /// region of its own memory without filling it whole (one 512 KiB burst of a larger
    /// read buffer, say): the region's memory, lent for the driver to read the payload
    /// straight into (RFC 5040 section 4.2's direct placement), after the checks the
    /// placement would get (STag, rights, bounds: section 6.4). `None` means the payload is
    /// read into a buffer of its own and handed to [`handle_payload`](Self::handle_payload).
    pub(crate) fn lend_for(&mut self, frame: &PendingFrame) -> Option<Lent> {
        let (msn, stag, va) = frame.tagged_write()?;
        if self.broken || !self.qp.expects_write(msn) {
            return None;
        }
        let len = u64::from(frame.payload_len());
        self.pd.lend(stag, va, len, Access::REMOTE_WRITE)
    }

    /// The frame [`lend_for`](Self::lend_for) lent memory for, its payload read in.
    pub(crate) fn handle_lent_payload(&mut self, frame: PendingFrame, lent: Lent) {
        let placed = self.pd.give_back(lent);
        if let Some((msn, _, _)) = frame.tagged_write() {
            self.qp.handle_placed_write(msn, placed);
        }
    }

    /// Memory lent by [`lend_for`](Self::lend_for) whose payload never arrived.
    pub(crate) fn return_lent(&mut self, lent: Lent) {
        self.pd.give_back(lent);
    }

    /// The byte stream closed or failed.
    pub fn handle_transport_lost(&mut self) {
        self.qp.handle_transport_lost();
    }

    /// Whether frames wait to be sent.
    pub fn wants_transmit(&self) -> bool {
        self.qp.wants_transmit() || (self.releasing && !self.deferred.is_empty())
    }

    /// The next frame to send, after the fault plan had its say.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        if self.releasing {
            if let Some(out) = self.deferred.pop_front() {
                return Some(out);
            }
            self.releasing = false;
        }
        loop {
            let msg = self.qp.poll_transmit()?;
            let kind = FrameKind::of(&msg);
            let mut head = BytesMut::new();
            msg.encode_head(&mut head);
            let mut out = Outgoing {
                head,
                payload: match msg {
                    crate::wire::Message::Send { payload, .. }
                    | crate::wire::Message::Write { payload, .. }
                    | crate::wire::Message::ReadResponse { payload, .. } => payload,
                    _ => Bytes::new(),
                },
                delay: None,
            };
            let actions = self.faults.on_frame(kind);
            let mut dropped = false;
            let mut defer = false;
            for action in actions {
                match action {
                    FaultAction::Drop => dropped = true,
                    FaultAction::Delay(d) => out.delay = Some(d),
                    FaultAction::Corrupt { offset, xor } => corrupt(&mut out, offset, xor),
                    FaultAction::DeferPastReadResponse => defer = true,
                }
            }
            if dropped {
                continue;
            }
            // The request stream stays in order behind a deferred frame.
            if defer || (!self.deferred.is_empty() && kind.is_request()) {
                self.deferred.push_back(out);
                continue;
            }
            if kind == FrameKind::ReadResponse && !self.deferred.is_empty() {
                self.releasing = true;
            }
            return Some(out);
        }
    }
}

fn corrupt(out: &mut Outgoing, offset: usize, xor: u8) {
    if let Some(b) = out.head.get_mut(offset) {
        *b ^= xor;
    } else if let Some(i) = offset.checked_sub(out.head.len()) {
        if i < out.payload.len() {
            let mut p = BytesMut::from(&out.payload[..]);
            p[i] ^= xor;
            out.payload = p.freeze();
        }
    }
}
