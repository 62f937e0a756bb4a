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
//! The study's target ran in MEMORYIO mode, which keeps no data; sluice's iSCSI runs are
//! made on a memory LUN that keeps it (the target stores every write: one more copy than
//! the raw RDMA Read makes) and on a null LUN, the study's mode, so that both the
//! transport's share of the ceiling and the store's cost show.
//!
//! [`plan`] lists a preset's runs (alternating the transports and LUNs at each size and
//! repetition, so that a noisy machine biases none of them), [`run`] measures them one
//! [`IserRun`] row at a time, and [`writeup`] draws the figures and writes the report.

pub mod plan;
pub mod row;
pub mod run;
pub mod writeup;

pub use plan::{preset, Direction, IserPlan, IserPoint, Lun, Transport, PRESETS};
pub use row::IserRun;
