//! The verbs provider itself (feature `verbs`): libibverbs and librdmacm through sideway.
//!
//! [`device`] enumerates and opens devices; [`memory`] registers regions (the one place of
//! `unsafe`: handing the device an allocation this crate owns); [`queue`] creates a
//! reliable-connected queue pair with a send and a receive completion queue, posts
//! sluice-rdma's work requests and polls completions as sluice-rdma's; [`cm`] connects and
//! listens through RDMA-CM, so that a connection is addressed by IP as iSER's are.

pub mod cm;
pub mod device;
pub mod memory;
pub mod queue;

/// Names a failed sideway call for [`VerbsError::Verbs`](crate::VerbsError::Verbs).
pub(crate) fn failed(
    call: &'static str,
) -> impl FnOnce(&dyn std::fmt::Display) -> crate::VerbsError {
    move |e| crate::VerbsError::Verbs {
        call,
        reason: e.to_string(),
    }
}
