//! `sluice lab pdu-cost`: where the CPU goes per PDU on sluice's own data path, in both roles,
//! redoing the per-PDU cost split of Joglekar, Kounavis and Berry, "A Scalable and High
//! Performance Software iSCSI Implementation" (their Figures 11, 12, 15 and 17) on the product
//! instead of a sandbox.
//!
//! A build with the `cost-probes` feature (see `sluice-probe`) times each stage of the data
//! path with the TSC: socket calls, framing, CRC, user-space copies, the session cores, the
//! SCSI layer. A [`plan::PduPlan`] lists points (a [`crate::sweep::Point`]: direction, command
//! size, PDU size, digests, queue depth); [`run::run`] starts a target for each (in this
//! process, through a [`crate::sweep::Launcher`], its threads tagged as the target's), logs in
//! a session whose offers force the point, and records one [`row::PduRun`] per point: the
//! ticks of every stage in each role, the data PDUs moved, the threads' CPU time (the probes'
//! coverage) and the throughput. [`writeup`] draws the figures and writes the report.

pub mod plan;
pub mod row;
pub mod run;
pub mod writeup;

pub use plan::{preset, PduPlan, PduPoint, PRESETS};
pub use row::PduRun;
pub use run::{run, thread_cpu_seconds, Event};
