//! The sans-IO iSCSI protocol core (RFC 7143).
//!
//! This crate decides everything about the protocol and performs no I/O: it never touches a
//! socket, a file or the clock. Callers hand it bytes, typed PDUs and the current time (`now`),
//! and it hands back PDUs, bytes to send, events and deadlines. The tokio drivers in
//! `sluice-target` and `sluice-initiator` are thin loops around it.
//!
//! Module map:
//! - [`seq`]: serial-number arithmetic (RFC 1982) and the identifier newtypes (ITT, TTT, ISID,
//!   TSIH, LUN).
//! - [`params`]: the negotiated operational parameters as typed values.
//! - [`pdu`]: every PDU of RFC 7143 section 11: zero-copy header view plus typed values, parse and
//!   emit.
//! - [`framing`]: the incremental framer (whole PDUs from any split of the byte stream, digest
//!   checks, bounded buffering) and the encoder for sending.
//! - [`text`]: the `key=value` text codec, the table of every key and the table-driven
//!   negotiator of operational parameters.
//! - [`login`]: the sans-IO login state machines, target side and initiator side.
//! - [`chap`]: CHAP authentication (RFC 1994, RFC 7143 section 12.1.3), one-way and mutual.
//! - [`datagram`]: PDUs in UDP datagrams (the experimental UDP transport): segmentation to
//!   the path MTU and bounded reassembly.
//! - [`window`]: the command window: CmdSN ordering on the target, CmdSN allocation on the
//!   initiator (RFC 7143 section 4.2.2.1).
//! - [`task`]: per-task data transfer: R2T issuance and Data-Out collection, Data-In
//!   segmentation, initiator-side Data-Out planning and Data-In reassembly.
//! - [`keepalive`]: the NOP ping timer, reporting deadlines (`poll_timeout`) and taking `now`.
//! - [`initiator`]: the initiator's full feature phase: an [`initiator::InitiatorSession`]
//!   with its connections (CmdSN numbering, commands spread by a policy, task management,
//!   pings, text, logout, ErrorRecoveryLevel 0 recovery).
//! - [`iser`]: iSER's wire formats (RFC 7145): the iSER header of every RDMA Send, the
//!   iWARP Hello and HelloReply, and the RDMA-CM private data header.
//! - [`target`]: the target's full feature phase: a [`target::TargetSession`] with its
//!   connections (command ordering across them, SCSI tasks, task management, text, logout,
//!   keepalive), and the session table that binds logins to sessions.
#![forbid(unsafe_code)]

pub mod chap;
pub mod datagram;
pub mod framing;
pub mod initiator;
pub mod iser;
pub mod keepalive;
pub mod login;
mod map;
pub mod params;
pub mod pdu;
pub mod seq;
pub mod target;
pub mod task;
pub mod text;
pub mod timer;
pub mod window;

#[cfg(test)]
mod pair_tests;
