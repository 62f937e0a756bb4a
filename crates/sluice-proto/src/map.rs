//! The hash map the state machines keep their tasks in.
//!
//! A fixed hash function rather than std's per-process random SipHash key, so that iterating a
//! table (the tasks a task management function ends, say) goes in the same order in every run:
//! a simulation replays from its seed alone. With the key fixed, SipHash's resistance to chosen
//! collisions is gone anyway, so the tables use rustc's Fx hash: a multiply per integer key
//! instead of a SipHash round per lookup, on every command's path. Peer-chosen keys (ITTs,
//! CmdSNs) could be picked to collide, but every such table is bounded by the command window's
//! depth (and the statuses kept for retransmission), so a collision costs at most a scan of
//! that many entries.

use rustc_hash::FxBuildHasher;

/// A `HashMap` with a fixed hash function (see the module docs).
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, FxBuildHasher>;
