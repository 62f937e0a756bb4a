//! The iSCSI target: a tokio driver around the sans-IO core.
//!
//! `sluice-proto` decides the protocol, `sluice-scsi` executes commands, `sluice-storage` holds
//! the blocks; this crate owns the sockets, the tasks and the session table, and connects them.

pub mod config;
mod validate;

pub use validate::is_iscsi_name;
mod server;

pub use server::run;
