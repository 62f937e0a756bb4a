//! The iSCSI target: a tokio driver around the sans-IO core.
//!
//! `sluice-proto` decides the protocol, `sluice-scsi` executes commands, `sluice-storage` holds
//! the blocks; this crate owns the sockets, the tasks and the session table, and connects them.
//! [`run`] serves a [`config::TargetConfig`] until a shutdown future completes.
//!
//! Module map: `server` (listeners, accept, shutdown), `connection` (one TCP connection: read
//! loop, login phase, joining its session), `ffp` (full feature phase: the loop around the
//! sans-IO `sluice_proto::target::TargetSession`, running SCSI work), `discovery`
//! (SendTargets answers), `sessions` (the shared session cores and the session table),
//! `login_env` (configuration as login policy), `outbox` (PDUs to vectored writes),
//! `context` (shared state and LUN construction), `faults` (the fault test hook).

#![forbid(unsafe_code)]

pub mod config;
mod connection;
mod context;
mod discovery;
mod faults;
mod ffp;
mod login_env;
mod outbox;
mod server;
mod sessions;
mod validate;

pub use server::{run, run_on, Target};
pub use validate::is_iscsi_name;
