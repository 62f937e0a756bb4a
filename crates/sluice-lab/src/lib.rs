//! iSCSI performance lab: the load-generation engine behind `sluice bench`.
//!
//! A [`Workload`] says what to do: the access pattern ([`RwMode`], read share), the command
//! sizes ([`SizeDist`]: one size or a probability mass function such as
//! `8k:0.1,16k:0.2,32k:0.3,64k:0.4`), how many commands each session keeps in flight, when to
//! stop, how commands arrive ([`Arrival`]: closed loop, fixed rate or Poisson), whether to
//! verify data, the byte range ([`Region`]) and optionally an SPC trace to replay
//! ([`TraceRecord`]). [`run`] drives it over one or more [`sluice_initiator::Session`]s with
//! a fixed set of worker tasks (queue depth per session) that reuse their buffers, and
//! returns a [`Report`]: IOPS, bandwidth, latency percentiles from an HDR histogram, PDU
//! counts, CPU time. A shared [`Progress`] gives live numbers while it runs.
//!
//! This crate knows nothing of argv or JSON: `sluice-cli` builds the [`Workload`] and prints
//! the [`Report`].
//!
//! Module map: `size_dist` (command sizes), `arrival` (inter-arrival times), `region`
//! (addresses), `trace` (SPC trace files), `pattern` (verify data), `workload` (the spec),
//! `latency` (histograms), `progress` (live counters), `pdus` (PDU counts), `cpu`
//! (getrusage), `alloc` (allocator policy: freed buffers kept while busy, returned when
//! idle), `worker` (one in-flight slot), `runner` (the run), `report`, `error`;
//! `crc` (the CRC32C algorithms of the fast-path study and their timing); `crc_alias` (the
//! simulation study's CRC and TCP checksum aliasing: Markov model, reduced model, measurement); `pdu_cost` (the fast-path study's per-PDU cost split of
//! sluice's own data path); `study` (what
//! every lab study shares: result rows as CSV, PNG charts); `sweep` (the
//! parameter study: grids, runs, models, plots, report); `link` (an emulated link between
//! network namespaces); `wan` (the WAN write study: monitors, decomposition, plots, report);
//! `udp_vs_tcp` (iSCSI over UDP against TCP on loopback: response time against EDTL, with and
//! without datagram loss, for two TransferContext timeouts); `iser` (the iSER study: iSCSI over
//! TCP against iSER on the software RDMA provider and the provider's raw throughput).

// `unsafe` only in `alloc` (mallopt, malloc_trim), `cpu` (getrusage, sysconf), `link` (TUN
// ioctl, setns, poll/read/write on TUN devices, geteuid), `crc/sse42` (the SSE4.2 `crc32`
// instruction) and `crc/timing` (RDTSC), each block with a SAFETY comment.
#![deny(unsafe_code)]

mod alloc;
mod arrival;
mod cpu;
pub mod crc;
pub mod crc_alias;
mod error;
pub mod iser;
mod lab_target;
mod latency;
pub mod link;
mod loopback;
mod pattern;
pub mod pdu_cost;
mod pdus;
mod progress;
mod region;
mod report;
mod runner;
pub mod simstudy;
mod size_dist;
pub mod study;
pub mod sweep;
mod trace;
pub mod udp_vs_tcp;
pub mod wan;
mod worker;
mod workload;

pub use alloc::{
    is_idle, keep_freed_buffers, return_freed_buffers, return_freed_buffers_when_idle,
    use_one_heap, IDLE_CHECK_INTERVAL, IDLE_SHARE,
};
pub use arrival::{exponential, Arrival};
pub use cpu::{process_cpu_seconds, CpuTime};
pub use error::LabError;
pub use latency::{new_histogram, LatencySummary};
pub use loopback::{congestion_control, LoopbackSource, Source, StreamResult};
pub use pattern::{fill_pattern, first_mismatch};
pub use pdus::PduCounts;
pub use progress::{Progress, ProgressSnapshot};
pub use region::Region;
pub use report::{ConnectionCommands, ConnectionLogout, DirectionStats, Report, VerifyStats};
pub use runner::{run, Device};
pub use size_dist::{parse_byte_size, SizeDist};
pub use trace::{parse_trace, TraceRecord, TRACE_SECTOR};
pub use workload::{RwMode, Workload};
