//! Fault injection for tests: drop, corrupt, delay or reorder chosen outbound messages, and
//! fail registrations. A plan is plain data; the endpoint consults it for every frame it emits.

use std::time::Duration;

use crate::wire::Message;

/// The kind of a message, for choosing which one a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// Connect.
    Connect,
    /// Send and Send with Invalidate.
    Send,
    /// RDMA Write.
    Write,
    /// RDMA Read Request.
    ReadRequest,
    /// RDMA Read Response.
    ReadResponse,
    /// Ack.
    Ack,
    /// Terminate.
    Terminate,
}

impl FrameKind {
    /// Whether the frame belongs to the sender's ordered request stream (it carries a message
    /// sequence number the receiver checks in order).
    pub fn is_request(self) -> bool {
        matches!(
            self,
            FrameKind::Send | FrameKind::Write | FrameKind::ReadRequest
        )
    }

    /// The kind of `msg`.
    pub fn of(msg: &Message) -> Self {
        match msg {
            Message::Connect { .. } => FrameKind::Connect,
            Message::Send { .. } => FrameKind::Send,
            Message::Write { .. } => FrameKind::Write,
            Message::ReadRequest { .. } => FrameKind::ReadRequest,
            Message::ReadResponse { .. } => FrameKind::ReadResponse,
            Message::Ack { .. } => FrameKind::Ack,
            Message::Terminate { .. } => FrameKind::Terminate,
        }
    }
}

/// What happens to a chosen frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// The frame is never sent.
    Drop,
    /// The byte at `offset` of the encoded frame (header first, then payload) is XORed with
    /// `xor` (an offset past the end hits nothing).
    Corrupt {
        /// Byte offset in the frame.
        offset: usize,
        /// Bits to flip.
        xor: u8,
    },
    /// The frame (and so every frame after it) is sent this much later.
    Delay(Duration),
    /// The frame, and every request frame after it (Send, RDMA Write, RDMA Read Request: one
    /// ordered stream), waits until this endpoint sends its next RDMA Read Response, and goes
    /// right after it; Read Responses and Acks pass meanwhile. Real RDMA orders a side's
    /// requests and its responses each in its own stream, not one against the other, so a
    /// peer may see read data before Sends posted earlier; the software provider's single
    /// byte stream never shows that without this fault. Nothing goes until the peer reads.
    DeferPastReadResponse,
}

/// One rule: the `nth` (0-based) outbound frame of `kind` (of any kind when `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// Which kind of frame is counted; `None` counts every frame.
    pub kind: Option<FrameKind>,
    /// Which one of them.
    pub nth: u64,
    /// What happens to it.
    pub action: FaultAction,
}

/// The faults to inject into one endpoint.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// Frame rules.
    pub rules: Vec<FaultRule>,
    /// The next this many registrations fail with `RegisterError::Injected`.
    pub fail_registrations: u32,
    sent_total: u64,
    sent_by_kind: [u64; 7],
}

impl FaultPlan {
    /// A plan with one frame rule.
    pub fn rule(kind: Option<FrameKind>, nth: u64, action: FaultAction) -> Self {
        FaultPlan {
            rules: vec![FaultRule { kind, nth, action }],
            ..Self::default()
        }
    }

    /// A plan that fails the next `n` registrations.
    pub fn failing_registrations(n: u32) -> Self {
        FaultPlan {
            fail_registrations: n,
            ..Self::default()
        }
    }

    /// The actions for the next outbound frame, which is of `kind`; counts it.
    pub(crate) fn on_frame(&mut self, kind: FrameKind) -> Vec<FaultAction> {
        let k = kind as usize;
        let (total, of_kind) = (self.sent_total, self.sent_by_kind[k]);
        self.sent_total += 1;
        self.sent_by_kind[k] += 1;
        self.rules
            .iter()
            .filter(|r| match r.kind {
                None => r.nth == total,
                Some(want) => want == kind && r.nth == of_kind,
            })
            .map(|r| r.action)
            .collect()
    }

    /// Whether the next registration fails; counts it.
    pub(crate) fn take_registration_failure(&mut self) -> bool {
        if self.fail_registrations > 0 {
            self.fail_registrations -= 1;
            true
        } else {
            false
        }
    }
}
