//! `sluice lab simstudy`: chapter 5 of Sajid Hussain, *Performance Evaluation of iSCSI for
//! IP Storage and Transport Protocols* (PhD dissertation, University of Manitoba, 2004),
//! reproduced on sluice's production protocol code in virtual time.
//!
//! The study simulated iSCSI in ns-2 with its own model of the protocol; here each point is
//! a [`sluice_sim::experiment`] run: the real initiator and target session cores, framer and
//! SCSI layer over a memory LU, joined by a modelled link (bandwidth, propagation delay,
//! drop-tail queue, bit errors) carrying a TCP model or UDP datagrams. [`plan`] lists each
//! preset's points (one preset per figure 5.3-5.11, `quick`, `tiny`, `speed`), [`run()`] runs
//! them on a few threads, [`row::SimRun`] is one CSV/JSON row per run, [`fit`] fits the
//! study's T(S) = k S^α, and [`writeup`] draws the figures and writes the report.
//!
//! Other halves of the same study (the chapter-6 CRC aliasing model, iSCSI over a real UDP
//! socket) are separate modules; [`companions()`] says which of them a preset runs, and
//! their sections join this report through [`writeup::SimContext::extra_sections`].

pub mod companions;
pub mod fit;
pub mod plan;
pub mod row;
pub mod run;
pub mod writeup;

pub use companions::{companions, Companions};
pub use plan::{preset, SimPlan, SimPoint, FIGURES, PRESETS};
pub use row::SimRun;
pub use run::{run, Event};
