//! The hash map the state machines keep their tasks in.
//!
//! A fixed hash key rather than std's per-process random one, so that iterating a table (the
//! tasks a task management function ends, say) goes in the same order in every run: a
//! simulation replays from its seed alone. Peer-chosen keys (ITTs, CmdSNs) could be picked to
//! collide under a fixed key, but every such table is bounded by the command window's depth,
//! so a collision costs at most a scan of that many entries.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;

/// A `HashMap` with a fixed hash key (see the module docs).
pub(crate) type Map<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<DefaultHasher>>;
