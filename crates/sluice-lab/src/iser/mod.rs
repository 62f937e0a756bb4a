//! `sluice lab iser`: Burns and Russell, "Implementation and Evaluation of iSCSI over RDMA",
//! redone with sluice's target and initiator and the software RDMA provider.
//!
//! The study measured iSER-assisted iSCSI against plain iSCSI over TCP across transfer sizes
//! (its Figures 2 to 4: reads and writes, kernel and user space) and found user-space iSER
//! writes reaching 94 % of 10GigE's payload limit. Here both transports run between the same
//! two endpoints in this process over loopback: plain iSCSI over TCP, iSER on the software
//! provider (which itself runs over a loopback TCP connection), and the provider's raw RDMA
//! Write and Read throughput (`sluice_rdma::bench::loopback`) as the ceiling iSER can reach.
//!
//! [`plan`] lists a preset's runs (alternating the three transports at each size and
//! repetition, so that a noisy machine biases none of them), [`run`] measures them one
//! [`IserRun`] row at a time, and [`writeup`] draws the figures and writes the report.

pub mod plan;
pub mod row;
pub mod run;
pub mod writeup;

pub use plan::{preset, Direction, IserPlan, IserPoint, Transport, PRESETS};
pub use row::IserRun;
