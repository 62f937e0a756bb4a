//! Operating `sluice target`: the Prometheus endpoint ([`metrics`], [`process`]), the control
//! socket ([`control`]) and HTTP admin API ([`http`], [`token`]) speaking [`protocol`], what
//! they do ([`operator`], which reports as [`report`]), and life under systemd
//! ([`service`]). docs/operations.md is the operator's guide.

pub mod control;
pub mod http;
pub mod metrics;
pub mod operator;
pub mod process;
pub mod protocol;
pub mod report;
pub mod serve;
pub mod service;
pub mod token;
