//! Keys, addresses and access rights: the vocabulary shared by memory regions, work requests
//! and the wire.

use std::fmt;
use std::ops::BitOr;

/// A steering tag (RFC 5040 section 2.1): names one memory region of a protection domain to
/// the local side (as an lkey) and to the peer (as an rkey).
///
/// The upper 24 bits index the region, the low 8 bits are a key that changes every time an
/// index is handed out, so a stale STag never names a newer region (the same split InfiniBand
/// hardware uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct STag(pub u32);

impl STag {
    /// The region index part.
    pub fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The key (low 8 bits).
    pub fn key(self) -> u8 {
        self.0.to_be_bytes()[3]
    }

    /// An STag from its index and key. `index` is masked to 24 bits.
    pub fn new(index: u32, key: u8) -> Self {
        STag(((index & 0x00ff_ffff) << 8) | u32::from(key))
    }
}

impl fmt::Display for STag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#010x}", self.0)
    }
}

/// Access rights of a memory region. Local read is always allowed (as in every verbs
/// provider); everything else must be granted at registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Access = Access(0);
    /// The local side may place data here (receive buffers, RDMA Read sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// The peer may RDMA Read from this region.
    pub const REMOTE_READ: Access = Access(2);
    /// The peer may RDMA Write into this region. Requires [`Access::LOCAL_WRITE`], as the
    /// verbs specification requires.
    pub const REMOTE_WRITE: Access = Access(4);

    /// Whether every right of `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// How the peer names addresses in a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaMode {
    /// Zero-based virtual addressing (RFC 7145's ZBVA; RFC 5040 section 2.1): the region's
    /// first byte is address 0.
    ZeroBased,
    /// The region's first byte is this virtual address, as a verbs provider that exposes the
    /// registering process's addresses does.
    Based(u64),
}

/// A run of registered memory named by the local side: the `lkey`, a virtual address in the
/// region's addressing, and a length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// The region's STag.
    pub stag: STag,
    /// The first byte's address, as the region's [`VaMode`] names it.
    pub va: u64,
    /// Bytes.
    pub len: u32,
}

/// A run of the peer's registered memory: its `rkey` and a virtual address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The peer region's STag, as the peer advertised it.
    pub stag: STag,
    /// The first byte's address, in the peer region's addressing.
    pub va: u64,
}
