//! A fault-injecting iSCSI proxy ("toxiproxy for iSCSI"): the tokio driver around
//! `sluice-fault`.
//!
//! [`Proxy::bind`] listens for initiators; each accepted connection gets its own TCP
//! connection to the target, and both directions run through a [`sluice_fault::Relay`]: the
//! byte stream is cut into whole PDUs from their length fields, the login is watched to learn
//! the digests, and every PDU is forwarded whole, faulted as the [`sluice_fault::FaultPlan`]
//! and the seed decide (dropped, corrupted, duplicated, delayed, or followed by a reset of
//! both TCP connections). The proxy decides no protocol rule and verifies nothing: what the
//! endpoints make of the faults is what is under test.
//!
//! Each fault is logged with `tracing` at info level, target `sluice_proxy::fault`, as one
//! line (`conn=0 dir=i->t pdu=data-out n=12 itt=0x00000003 datasn=2 fault=corrupt-data
//! byte=977 bit=4`; skipped corruptions at debug level); [`ProxyHandle`] reads the counters
//! and the fault log while it runs.
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use sluice_fault::{FaultPlan, Rate, Rules};
//! let plan = FaultPlan::symmetric(Rules { corrupt_data: Rate::new(0.01).unwrap(), ..Rules::default() });
//! let proxy = sluice_proxy::Proxy::bind("127.0.0.1:3261".parse().unwrap(), "127.0.0.1:3260".parse().unwrap(), plan, 42).await?;
//! let handle = proxy.handle();
//! let counters = proxy.serve(async { let _ = tokio::signal::ctrl_c().await; }).await;
//! println!("{} PDUs to the target, {} corrupted", counters.to_target.pdus, counters.to_target.corrupt_data);
//! # drop(handle); Ok(()) }
//! ```
//!
//! Module map: `server` (listening, accepting, the handle), `connection` (one initiator
//! connection and its target connection, FIN or RST at the end), `pump` (one direction:
//! reader, delay queue with backpressure, writer), `shared` (the live relays, totals and the
//! fault log).
#![forbid(unsafe_code)]

mod connection;
mod pump;
mod server;
mod shared;

pub use connection::CONNECT_TIMEOUT;
pub use pump::MAX_QUEUED_BYTES;
pub use server::{Proxy, ProxyHandle};
pub use shared::{ProxyCounters, FAULT_LOG_CAPACITY};
