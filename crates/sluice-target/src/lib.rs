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
//! `context` (shared state and LUN construction), `faults` (the fault test hook). Operating
//! a running target: `change` (applying a new configuration: [`Target::apply`]), `admin`
//! (the operator's changes and [`Target::status`]), `status` (what it reports), `metrics`
//! (the counters connections keep), `swap_device` (a LUN's device, swapped when it grows),
//! `capacity_watch` (LUs resized outside sluice, such as RBD images).

#![forbid(unsafe_code)]

mod admin;
mod capacity_watch;
mod change;
pub mod config;
mod connection;
mod context;
mod device_io;
mod discovery;
mod faults;
mod ffp;
mod gateway;
mod iser;
mod login_env;
mod long_running;
mod metrics;
mod outbox;
mod peer_gone;
mod portal_groups;
mod server;
mod sessions;
pub mod status;
mod swap_device;
mod validate;

pub use change::{ChangeError, ChangeReport};
pub use connection::set_busy_poll_always;
pub use iser::{IserCounters, IserServeOptions, DEFAULT_ISER_PORT, TARGET_RECV_DSL};
pub use outbox::{sendfile_bytes, set_sendfile};
pub use portal_groups::DEFAULT_PORTAL_GROUP_TAG;
pub use server::{run, run_on, Target};
pub use validate::is_iscsi_name;
