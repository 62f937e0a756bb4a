//! The iSCSI target: a tokio driver around the sans-IO core.
//!
//! `sluice-proto` decides the protocol, `sluice-scsi` executes commands, `sluice-storage` holds
//! the blocks; this crate owns the sockets, the tasks and the session table, and connects them.
//! [`run`] serves a [`config::TargetConfig`] until a shutdown future completes.
//!
//! Module map: `server` (listeners, accept, shutdown), `connection` (one TCP connection: read
//! loop and login phase), `ffp` (full feature phase: ordering, SCSI commands and their data,
//! NOP, keepalive), `scsi_exec` (command results to Data-In/Response), `tmf` (task
//! management), `text` (Text and Logout), `discovery` (SendTargets), `sessions` (TSIH,
//! reinstatement), `login_env` (configuration as login policy), `outbox` (the writer task),
//! `context` (shared state and LUN construction).

#![forbid(unsafe_code)]

pub mod config;
mod connection;
mod context;
mod discovery;
mod ffp;
mod login_env;
mod outbox;
mod scsi_exec;
mod server;
mod sessions;
mod text;
mod tmf;
mod validate;

pub use server::{run, run_on, Target};
pub use validate::is_iscsi_name;
