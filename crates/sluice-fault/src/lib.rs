//! Seeded, replayable fault injection for iSCSI byte streams (RFC 7143), without I/O.
//!
//! One fault model serves every place that injects faults: the `sluice proxy` between real
//! peers, and anything else that holds whole PDU frames (a simulated link, a driver's test
//! hook). This crate performs no I/O and reads no clock; randomness comes from a ChaCha8
//! stream seeded from (seed, connection index, direction), so a run replays from its seed.
//!
//! Module map:
//! - [`plan`]: the [`FaultPlan`]: per-direction [`Rules`] (data and header corruption rates,
//!   a bit error rate, every-n-th drops by [`PduKind`], duplication, delay), connection resets,
//!   and whether login PDUs are exempt ([`LoginFaults`], exempt by default).
//! - [`kind`]: [`PduKind`], the opcodes by short parseable names, and the sequence number
//!   ([`SeqField`]) an event quotes for each.
//! - [`injector`]: [`FaultInjector`], the decision about one encoded frame ([`Decision`]),
//!   corruption applied in place.
//! - [`event`]: [`FaultEvent`], what was done to which PDU (printed as one greppable line),
//!   and [`FaultCounters`].
//! - [`ber`]: from a bit error rate to the probability that one PDU is hit.
//! - [`cutter`]: [`FrameCutter`], PDU boundaries in a byte stream from the length fields
//!   alone, bounded.
//! - [`digests`]: [`DigestTracker`], the digests a watched login negotiated.
//! - [`relay`]: [`Relay`], the three above joined for one proxied connection.
//! - [`hook`]: [`DriverFaults`], the injector and cutter inside a target or initiator
//!   driver (a test hook: faults on send and on receive of the driver's own connection).
#![forbid(unsafe_code)]

pub mod ber;
pub mod cutter;
pub mod digests;
pub mod event;
pub mod hook;
pub mod injector;
pub mod kind;
pub mod plan;
pub mod relay;

pub use cutter::{CutError, FrameCutter, FrameLayout};
pub use digests::{DigestTracker, TrackError};
pub use event::{Cause, FaultAction, FaultCounters, FaultEvent, Part};
pub use hook::{DriverFaults, FaultHook};
pub use injector::{Decision, FaultInjector};
pub use kind::{PduKind, Sender, SeqField, UnknownKind};
pub use plan::{Direction, DropEvery, FaultPlan, LoginFaults, PlanError, Rate, Rules};
pub use relay::{Relay, RelayError, Relayed};
pub use sluice_proto::framing::Digests;
