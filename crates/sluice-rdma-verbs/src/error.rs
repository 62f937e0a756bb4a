//! What the verbs provider fails with, each error saying what to do about it.

use sluice_rdma::STag;

/// Anything the verbs provider can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// libibverbs found no RDMA device (no RNIC, no rxe or siw link).
    #[error("no RDMA device; see docs/iser.md for rxe (soft-RoCE: `rdma link add rxe0 type rxe netdev eth0`)")]
    NoDevice,
    /// No device has the name asked for.
    #[error("no RDMA device named {name:?} (devices: {available})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names there are, comma-separated.
        available: String,
    },
    /// A call into libibverbs or librdmacm failed.
    #[error("{call}: {reason}")]
    Verbs {
        /// What was called.
        call: &'static str,
        /// Its error, as the library reported it.
        reason: String,
    },
    /// Remote write without local write, which verbs forbid.
    #[error("remote write access requires local write access")]
    InvalidAccess,
    /// Write access asked for a region of data that does not change (a gathered region).
    #[error("a gathered region is read-only: write access refused")]
    ReadOnly,
    /// A work request names an STag (lkey) no region of this provider has.
    #[error("STag {0} names no region registered with this provider")]
    UnknownStag(STag),
    /// A work request's range leaves its region.
    #[error("{len} bytes at {va:#x} leave the region of STag {stag}")]
    OutOfRegion {
        /// The region's STag.
        stag: STag,
        /// The first address.
        va: u64,
        /// Bytes.
        len: u32,
    },
    /// A receive buffer or RDMA Read sink in a region without local write.
    #[error("STag {0}: a buffer the device writes into needs local write access")]
    NoLocalWrite(STag),
    /// A region cannot be deregistered while work requests are in flight: the device may
    /// still be reading or writing it.
    #[error("STag {0}: work requests are in flight; deregister after their completions")]
    Busy(STag),
    /// A work request the sideway API this provider is built on cannot post.
    #[error("{0} is not available through this verbs provider")]
    Unsupported(&'static str),
    /// RDMA-CM private data longer than the connection manager carries.
    #[error("{len} bytes of private data; RDMA-CM carries at most {max} here")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A connection event other than the one waited for.
    #[error("RDMA-CM: expected {expected}, got {got}")]
    UnexpectedEvent {
        /// The event waited for.
        expected: &'static str,
        /// What came instead.
        got: String,
    },
}
