//! iSCSI over UDP (experimental; interoperates only with sluice).
//!
//! RFC 7143 carries iSCSI over TCP. Sajid Hussain's dissertation "Performance Evaluation of
//! iSCSI for IP Storage and Transport Protocols" (University of Manitoba, 2004) evaluates it
//! over UDP, each PDU in its own datagrams and losses recovered by iSCSI's error recovery.
//! This crate runs that over real sockets for sluice's drivers, which stay byte-stream
//! drivers: an *association* (one initiator address and port talking to one target address
//! and port) joins a datagram socket to a byte stream that carries whole PDUs only.
//!
//! - Outbound, the stream's bytes are cut into PDUs by their length fields
//!   (`sluice_fault::FrameCutter`, with the digests the association watched login negotiate)
//!   and each PDU is sent as datagrams by `sluice_proto::datagram::Segmenter`.
//! - Inbound, datagrams are reassembled by `sluice_proto::datagram::Reassembler` and only whole
//!   PDUs are written to the stream, so a lost datagram becomes a missing PDU, never a torn
//!   stream, and the sans-IO cores recover it at ErrorRecoveryLevel 1 (SNACK, recovery R2T,
//!   command and request retry): RFC 7143 section 7.1-7.4. At ErrorRecoveryLevel 0 nothing
//!   would recover it short of the command timeout and session reinstatement, so sluice's
//!   initiator offers at least 1 over UDP and refuses a session that settles on 0.
//! - Login has no such recovery: login and text PDUs are requests and answers taken in turn,
//!   so [`arq`] resends a request whose answer did not come (the initiator's timer) and
//!   answers a repeated request from the answer it kept (the target), stop-and-wait.
//!
//! [`listener`] is the target's side (one UDP socket, an association per peer), [`bridge`]
//! the initiator's (a connected UDP socket, and a loopback TCP connection to the unchanged
//! TCP driver), [`relay`] a lossy relay for tests and the lab.
#![forbid(unsafe_code)]

pub mod arq;
pub mod association;
pub mod bridge;
pub mod listener;
pub mod relay;

use std::time::Duration;

use sluice_proto::datagram::{ReassemblyLimits, ETHERNET_DATAGRAM_LEN};
use sluice_proto::framing::{max_frame_len, Digests};

/// Settings of an association, the same at both ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UdpConfig {
    /// Largest datagram sent (the path MTU less IP and UDP headers).
    pub max_datagram: usize,
    /// Bounds on reassembly: the longest PDU accepted, partial PDUs, bytes, and how long a
    /// partial PDU waits for its missing segments.
    pub reassembly: ReassemblyLimits,
    /// How long the initiator waits for a login or text answer before sending its request
    /// again.
    pub login_retransmit: Duration,
    /// Most resends of one login or text request.
    pub login_retries: u32,
    /// Receive and send buffer asked of each socket (the kernel may cap it).
    pub socket_buffer_bytes: usize,
    /// Datagrams queued for one association before more are dropped (the target's
    /// dispatcher never waits for a slow association).
    pub inbound_queue: usize,
    /// Bytes of datagrams queued for one association before more are dropped.
    pub inbound_queue_bytes: usize,
}

/// The MaxRecvDataSegmentLength sluice declares over UDP unless told otherwise: a PDU is lost
/// whole when one of its datagrams is, so it should span few (8 KiB: six Ethernet datagrams).
pub const DEFAULT_UDP_MAX_RECV_DATA_SEGMENT: u32 = 8192;

/// The largest MaxRecvDataSegmentLength an association reassembles by default.
pub const MAX_UDP_DATA_SEGMENT: u32 = 1 << 20;

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            max_datagram: ETHERNET_DATAGRAM_LEN,
            reassembly: ReassemblyLimits {
                max_pdu_len: max_frame_len(
                    MAX_UDP_DATA_SEGMENT,
                    Digests {
                        header: true,
                        data: true,
                    },
                ),
                max_partial: 64,
                // Eight of the largest PDUs per association.
                max_buffered_bytes: 8 << 20,
                // The datagrams of one PDU leave back to back.
                partial_timeout: Duration::from_millis(200),
            },
            login_retransmit: Duration::from_millis(250),
            login_retries: 20,
            socket_buffer_bytes: 4 << 20,
            inbound_queue: 4096,
            // A 1 MiB write's datagrams twice over.
            inbound_queue_bytes: 4 << 20,
        }
    }
}

/// Asks for larger socket buffers: a loopback burst of a large read's datagrams otherwise
/// overflows the default receive buffer (about 200 KiB). As root the kernel's ceiling
/// (`net.core.rmem_max`) is passed over; otherwise the request is capped by it.
pub(crate) fn size_buffers(socket: &tokio::net::UdpSocket, bytes: usize) {
    use rustix::net::sockopt;
    if sockopt::set_socket_recv_buffer_size_force(socket, bytes).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(socket, bytes);
    }
    if sockopt::set_socket_send_buffer_size_force(socket, bytes).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(socket, bytes);
    }
}
