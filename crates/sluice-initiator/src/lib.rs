//! The sluice iSCSI initiator: a tokio driver around the sans-IO core in `sluice-proto`.
//!
//! - Connect with an `iscsi://[user[%password]@]host[:port]/target-iqn/lun` URL
//!   ([`IscsiUrl`], libiscsi's form) or a portal and a target name, plus [`ConnectOptions`]
//!   (digests, one-way or mutual CHAP with MD5/SHA-1/SHA-256/SHA3-256, initiator name and
//!   any RFC 7143 operational key). Login redirects are followed.
//! - [`discover`]: SendTargets discovery.
//! - [`Session`]: a cloneable async handle; any number of tasks may run commands at once
//!   ([`Session::execute`] takes any CDB; helpers build READ/WRITE(16), INQUIRY, VPD, READ
//!   CAPACITY, REPORT LUNS, SYNCHRONIZE CACHE). The driver keeps commands within the target's
//!   CmdSN window, sends immediate and unsolicited data, answers R2Ts, reassembles Data-In,
//!   answers NOP-Ins, pings when idle, handles Async Messages, Task Management and Logout, and
//!   after a lost connection logs in again and retries (ErrorRecoveryLevel 0), within bounds.
//! - [`SessionCounters`]: commands, PDUs by opcode, bytes, digest errors and a latency
//!   histogram per session; [`CommandStats`]: the PDUs of one command.
//! - [`blocking`]: the same API for code without an async runtime.
//! - [`multipath::Multipath`]: one LU through several portals, ALUA-aware, failing over
//!   between paths without resending a command the caller has seen complete.
//!
//! ```no_run
//! use sluice_initiator::{Command, IscsiUrl, Session};
//! # async fn f() -> Result<(), sluice_initiator::Error> {
//! let url = IscsiUrl::parse("iscsi://chapuser%chapsecret12@127.0.0.1:3260/iqn.2026-11.io.sluice:default/0")?;
//! let s = Session::connect_url(&url).await?;
//! // 32 reads in flight at once.
//! let reads = (0..32u64).map(|i| {
//!     let s = s.clone();
//!     async move { s.execute(Command::read(0, &sluice_scsi::cdb::read16(i * 8, 8, false), 4096)).await }
//! });
//! for r in futures_join_all(reads).await { r?.check()?; }
//! println!("Data-In PDUs: {}", s.counters().data_in());
//! # Ok(()) }
//! # async fn futures_join_all<F: std::future::Future>(v: impl Iterator<Item = F>) -> Vec<F::Output> {
//! #     let mut out = Vec::new(); for f in v { out.push(f.await); } out }
//! ```
//!
//! Module map: `url` (URL grammar), `options`, `error`, `transport` (socket + framer),
//! `send_queue` (vectored, copy-free sends of data segments),
//! `login` (login driver, redirects), `discovery` (SendTargets), `driver` + `inbound` +
//! `tasks` + `placement` (the full-feature driver), `session` (the handle), `scsi` (data-in decoders),
//! `counters`, `blocking`, `multipath` (path selection and retry policy sans-IO in
//! `multipath/policy.rs`, VPD and REPORT TARGET PORT GROUPS decoding, the failover driver).

#![forbid(unsafe_code)]

pub mod blocking;
mod command;
mod counters;
mod discovery;
mod driver;
mod error;
pub mod iser;
mod login;
pub mod multipath;
mod options;
mod placement;
pub mod scsi;
mod send_queue;
mod session;
mod supervisor;
mod transport;
pub mod url;

pub use command::{Command, CommandOutcome, CommandStats, DataDirection};
pub use counters::SessionCounters;
pub use discovery::{discover, parse_send_targets, DiscoveredTarget};
pub use error::{Error, ScsiFailure};
pub use options::{Chap, ConnectOptions, Direction, PduTrace, SocketHook, DEFAULT_INITIATOR_NAME};
pub use scsi::{Capacity, StandardInquiry};
pub use session::{InFlight, Session, UNIT_ATTENTION_RETRIES};
pub use sluice_proto::initiator::{ConnectionStats, Policy, TaskId};
pub use sluice_tcp::{BufferPolicy, SocketOptions};
pub use url::{is_iscsi_url, IscsiUrl};

pub use sluice_proto::params::SessionParams;
pub use sluice_proto::pdu::codes::{
    RejectReason, ScsiResponseCode, ScsiStatus, TmfFunction, TmfResponse,
};
pub use sluice_proto::task::Residual;
