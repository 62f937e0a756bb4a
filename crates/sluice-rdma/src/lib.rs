//! A software RDMA provider: verbs semantics a datamover (iSER, RFC 7145) can be written
//! against, over any reliable byte stream, in safe Rust, in user space, with no kernel module
//! and no RDMA device.
//!
//! # Model
//!
//! - A [`ProtectionDomain`] holds memory regions. [`ProtectionDomain::register`] allocates a
//!   region and returns its [`MemoryRegion`]: an [`STag`] (the lkey and rkey), a base address
//!   as the peer names it (any base, or zero-based virtual addressing, RFC 7145's ZBVA:
//!   [`VaMode`]) and a length, with [`Access`] rights (local write, remote read, remote
//!   write; local read is always allowed). [`ProtectionDomain::register_vec`] and
//!   [`ProtectionDomain::register_shared`] register the caller's memory in place instead (a
//!   shared, immutable buffer only without write rights), as real registration pins the
//!   consumer's buffer; the checks are the same. Regions are deregistered (or taken back
//!   with [`ProtectionDomain::take`]) or invalidated (a local invalidate work request, or a
//!   peer's Send with Invalidate).
//! - A [`QueuePair`] (reliable connected) takes send work requests ([`SendWr`]: Send, Send
//!   with Invalidate, RDMA Write, RDMA Read, local invalidate) and receives ([`RecvWr`]), and
//!   returns [`WorkCompletion`]s (opcode, status, byte count, `wr_id`) in its completion queue:
//!   send work requests complete in posting order, receives in arrival order.
//! - [`Endpoint`] is one side, sans-IO: protection domain, queue pair, decoder and fault plan;
//!   bytes in, frames out. [`SoftRdma`] drives an endpoint over any `AsyncRead + AsyncWrite`
//!   with tokio, with polled ([`SoftRdma::poll_cq`]) and awaitable
//!   ([`SoftRdma::next_completion`]) completions.
//!
//! # Enforcement
//!
//! Every access, local or remote, goes through [`ProtectionDomain::check`], as hardware's
//! memory translation and protection tables do (RFC 5040 section 6.4, RFC 5042 section 5):
//!
//! - An RDMA Write or Read through an unknown, stale, deregistered or invalidated STag, into
//!   a region that lacks the right (remote write, remote read), or touching any byte outside
//!   `[base, base + len)` is never performed. The responder's queue pair goes to the error
//!   state, reports a [`WcOpcode::AsyncError`] completion with [`WcStatus::RemoteAccess`] and
//!   sends a Terminate naming the request; the requester completes that work request with
//!   [`WcStatus::RemoteAccess`] and goes to the error state too. Everything outstanding on
//!   either side then completes [`WcStatus::Flushed`].
//! - A Send with Invalidate whose STag is not valid at the receiver is the same remote access
//!   error (RFC 5040 section 6.10); nothing is delivered.
//! - A bad local STag (a Send or Write source, a Read sink, a receive buffer) completes that
//!   work request with [`WcStatus::LocalProtection`] and stops the queue pair.
//! - A Send with no receive posted is final, not retried (as with an RNR retry count of zero,
//!   and as iWARP does): the requester's Send completes with [`WcStatus::ReceiverNotReady`],
//!   the responder reports [`WcStatus::ReceiveQueueEmpty`]; both queue pairs stop. A Send
//!   longer than the receive buffer completes the receive with [`WcStatus::LocalLength`] and
//!   the Send with [`WcStatus::RemoteInvalidRequest`].
//! - RDMA Read depth: a requester keeps at most min(its ORD, the peer's IRD) Reads
//!   outstanding (later work requests wait behind them in order); a responder that is asked
//!   for more than its IRD, or for more bytes than its payload limit, terminates the
//!   connection with [`WcStatus::RemoteInvalidRequest`] on both sides.
//! - Every length and count from the wire is bounded before it is trusted: frame bodies and
//!   read lengths by the payload limit ([`wire::MAX_PAYLOAD_BYTES`] at most) before any body
//!   byte is buffered, addresses with checked arithmetic, sequence numbers and Acks against
//!   what was sent.
//!
//! # Wire protocol
//!
//! Two endpoints exchange frames on a reliable, ordered byte stream (the role DDP and MPA
//! play under RDMAP on TCP, RFC 5041 and RFC 5044, much simplified: the stream is trusted
//! to deliver in order, so there is no marker, no CRC and no segmentation). All integers are
//! big-endian.
//!
//! ```text
//! frame   = opcode:u8  reserved:u8[3]=0  body_len:u32  body[body_len]
//! 0x01 Connect          version:u8=1 reserved:u8=0 ird:u16 max_payload:u32
//! 0x02 Send             msn:u32 payload
//! 0x03 Send w/ Inval.   msn:u32 stag:u32 payload
//! 0x04 RDMA Write       msn:u32 stag:u32 va:u64 payload
//! 0x05 RDMA Read Req.   msn:u32 stag:u32 va:u64 len:u32
//! 0x06 RDMA Read Resp.  msn:u32 payload
//! 0x07 Ack              msn:u32
//! 0x08 Terminate        msn:u32 has_msn:u8(0|1) cause:u8 reserved:u16=0
//! ```
//!
//! Each side first sends a Connect with its IRD and the largest payload it accepts (the role
//! of RDMA-CM's private data and responder resources). Requests (Send, Send with Invalidate,
//! RDMA Write, RDMA Read Request) carry a message sequence number (MSN) that starts at 0 and
//! increases by one per request; the responder refuses any other. The responder answers an
//! RDMA Read Request with an RDMA Read Response carrying its MSN and exactly the requested
//! length, and acknowledges placed Sends and Writes with a cumulative Ack (iWARP completes a
//! Write once the stream took it; this provider waits for the Ack so that a remote access
//! error completes the very work request that caused it, as InfiniBand's reliable connection
//! does). A Terminate stops the connection; its causes: 1 remote access, 2 receiver not
//! ready, 3 length, 4 invalid request, 5 remote operation, 6 protocol. The decoder
//! ([`wire::Decoder`]) refuses unknown opcodes and causes, non-zero reserved bytes, bodies
//! that do not fit their opcode and payloads over the limit.
//!
//! # Placement
//!
//! A NIC places tagged data straight into the registered buffer. Here the kernel's copy out of
//! the socket is the one copy a payload takes: a payload of 64 KiB or more that has not all
//! arrived is read from the stream into a pooled buffer of its own
//! ([`Endpoint::handle_bytes_until_large`]), and an RDMA Write or Read Response that fills its
//! region whole makes that buffer the region's contents ([`ProtectionDomain::place`]; the
//! region's own memory waits, and a later store copies the contents into it first). The owner
//! takes the data back without a copy ([`ProtectionDomain::take_contents`]); smaller or
//! partial placements are copied in.
//!
//! # Fault injection
//!
//! A [`FaultPlan`] drops, corrupts or delays chosen outbound frames and fails chosen
//! registrations, for tests of what sits above.
//!
//! # Throughput
//!
//! [`bench::loopback`] measures raw RDMA Write and Read throughput over loopback TCP: the
//! ceiling of an iSER datamover on this provider.
#![forbid(unsafe_code)]

pub mod access;
pub mod bench;
pub mod driver;
pub mod endpoint;
pub mod fault;
pub mod pd;
pub mod pool;
pub mod qp;
pub mod staging;
pub mod wire;
pub mod work;

pub use access::{Access, RemoteAddr, STag, Sge, VaMode};
pub use driver::SoftRdma;
pub use endpoint::{Endpoint, Outgoing};
pub use fault::{FaultAction, FaultPlan, FaultRule, FrameKind};
pub use pd::{AccessError, Contents, MemoryRegion, ProtectionDomain, RegisterError};
pub use pool::BufferPool;
pub use qp::{PostError, QpConfig, QpState, QueuePair};
pub use staging::{RecvRing, StageError, Stager};
pub use work::{RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};

#[cfg(test)]
mod tests;
