//! `sluice lab wan`: iSCSI writes over an emulated long-distance link, reproducing Oguchi,
//! Higa, Matsubara, Okamawari and Yamaguchi, "Performance Improvement of iSCSI Remote Storage
//! Access through Optimization of Multiple Layers", without patching a kernel.
//!
//! The study found iSCSI sequential writes far below a socket's throughput once the round
//! trip passed a few milliseconds, built kernel monitors for the congestion window and the
//! socket's send queue, decomposed each write into Ta, Tb and Tc, traced the stall to the
//! send-buffer check (`sk_stream_memory_free`) and fixed it by enlarging the socket buffer.
//! Here the link is `crate::link`'s emulator, the monitors are TCP_INFO and the send-queue
//! ioctls sampled every half millisecond ([`monitor`], from `sluice-tcp`), the packet
//! analyser is the initiator's own PDU log placed on the sampled byte stream ([`pdulog`],
//! [`decompose`]).
//!
//! A [`Plan`] (a preset of [`plan`]) lists experiments of [`Config`]s and round-trip times;
//! [`run_plan`] runs them through the link (the CLI starts the targets and libiscsi), one
//! [`WanRun`] row per run, time series for traced experiments ([`series`]); [`analyse`]
//! draws the figures and writes the report ([`figures`], [`writeup`]), against the
//! theoretical line ([`theory`]).
//!
//! Module map: `config`, `plan`, `monitor`, `pdulog`, `decompose`, `stream` (the plain
//! socket), `theory`, `row`, `series`, `run`, `figures`, `writeup`.

pub mod config;
pub mod decompose;
pub mod figures;
pub mod monitor;
pub mod pdulog;
pub mod plan;
pub mod row;
pub mod run;
pub mod series;
pub mod stream;
pub mod theory;
pub mod writeup;

pub use config::{apply_tcp_spec, Config, Initiator, Params};
pub use plan::{preset, Experiment, Kind, Plan, PRESETS};
pub use row::WanRun;
pub use run::{run_plan, Env, Event, ExternalWriter, TargetLauncher};
pub use stream::Sink;
pub use writeup::{analyse, Analysis, Context};
