//! Work requests a consumer posts and the work completions it gets back.

use crate::access::{RemoteAddr, STag, Sge};

/// A work request for the send queue. Each one completes exactly once, in posting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendWr {
    /// A Send of `sge`'s bytes into the peer's next posted receive; with `invalidate`, a Send
    /// with Invalidate that also invalidates that STag of the peer's (RFC 5040 section 5.3).
    Send {
        /// The consumer's identifier, returned in the completion.
        wr_id: u64,
        /// The bytes to send.
        sge: Sge,
        /// The peer's STag to invalidate on delivery.
        invalidate: Option<STag>,
    },
    /// An RDMA Write of `sge`'s bytes to `remote`.
    Write {
        /// The consumer's identifier.
        wr_id: u64,
        /// The bytes to write.
        sge: Sge,
        /// Where, in the peer's memory.
        remote: RemoteAddr,
    },
    /// An RDMA Read of `sge.len` bytes from `remote` into `sge` (which needs local write).
    Read {
        /// The consumer's identifier.
        wr_id: u64,
        /// Where the data lands.
        sge: Sge,
        /// Where it comes from, in the peer's memory.
        remote: RemoteAddr,
    },
    /// Invalidates one of this side's own STags, in order with the send queue and fenced:
    /// it runs only after every earlier work request has completed (the region may be an
    /// earlier RDMA Read's sink).
    LocalInvalidate {
        /// The consumer's identifier.
        wr_id: u64,
        /// The STag to invalidate.
        stag: STag,
    },
}

impl SendWr {
    /// The consumer's identifier.
    pub fn wr_id(&self) -> u64 {
        match *self {
            SendWr::Send { wr_id, .. }
            | SendWr::Write { wr_id, .. }
            | SendWr::Read { wr_id, .. }
            | SendWr::LocalInvalidate { wr_id, .. } => wr_id,
        }
    }

    pub(crate) fn opcode(&self) -> WcOpcode {
        match self {
            SendWr::Send { .. } => WcOpcode::Send,
            SendWr::Write { .. } => WcOpcode::RdmaWrite,
            SendWr::Read { .. } => WcOpcode::RdmaRead,
            SendWr::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
        }
    }
}

/// A receive buffer for one inbound Send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// The consumer's identifier.
    pub wr_id: u64,
    /// Where the Send's bytes land (needs local write).
    pub sge: Sge,
}

/// What a completion completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A posted Send (with or without Invalidate).
    Send,
    /// A posted RDMA Write.
    RdmaWrite,
    /// A posted RDMA Read.
    RdmaRead,
    /// A posted local invalidate.
    LocalInvalidate,
    /// A posted receive.
    Recv,
    /// An error the peer caused that consumed no work request of this side (a bad RDMA Write
    /// or Read aimed at it, a Send that found no receive, undecodable traffic, a lost
    /// connection). iWARP reports these as affiliated asynchronous errors (RFC 5040 section
    /// 7); this provider delivers them through the completion queue, `wr_id` 0, so a consumer
    /// that only polls still sees why its queue pair stopped.
    AsyncError,
}

/// How a work request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// A local buffer was too small (a Send longer than the receive buffer, a payload above
    /// the peer's limit).
    LocalLength,
    /// A local STag was unknown, invalidated, lacked local write, or the range left its region.
    LocalProtection,
    /// The peer refused an access to its memory: unknown or invalidated STag, missing right,
    /// or a range outside the region.
    RemoteAccess,
    /// The peer refused the request itself (a Send longer than its receive buffer, more
    /// RDMA Reads than it serves).
    RemoteInvalidRequest,
    /// The peer failed locally while serving the request.
    RemoteOperation,
    /// The peer had no receive posted for a Send. This provider does not retry: receiver
    /// not ready is final, as with an RNR retry count of zero.
    ReceiverNotReady,
    /// This side had no receive posted when a Send arrived (the responder's side of
    /// [`WcStatus::ReceiverNotReady`]).
    ReceiveQueueEmpty,
    /// The work request never ran: the queue pair was (or went) into the error state.
    Flushed,
    /// Undecodable or out-of-sequence traffic on the connection.
    Protocol,
    /// The byte stream underneath closed or failed.
    TransportLost,
}

/// One entry of a completion queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's identifier (0 for [`WcOpcode::AsyncError`]).
    pub wr_id: u64,
    /// What completed.
    pub opcode: WcOpcode,
    /// How.
    pub status: WcStatus,
    /// Bytes moved: received for a receive, read for an RDMA Read, sent for a Send or Write.
    pub byte_len: u32,
    /// For a receive of a Send with Invalidate: the STag of this side that it invalidated.
    pub invalidated: Option<STag>,
}

impl WorkCompletion {
    pub(crate) fn new(wr_id: u64, opcode: WcOpcode, status: WcStatus, byte_len: u32) -> Self {
        WorkCompletion {
            wr_id,
            opcode,
            status,
            byte_len,
            invalidated: None,
        }
    }
}
