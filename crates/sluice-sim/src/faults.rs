//! The faults of a run, drawn from its seed and applied with the same injector as
//! `sluice proxy` (`sluice-fault`): deterministic schedules (every Nth PDU of a kind lost,
//! the section 4.8 mechanism of Hussain's iSCSI simulation study), corruption at a rate or
//! from a bit error rate (its equation 4.5: a PDU of `b` bits is hit with probability
//! 1-(1-BER)^b), duplicates and connection resets.
//!
//! What a fault can mean depends on the session. TCP does not lose a PDU: one "goes missing"
//! only when its header fails its digest and the receiver skips it, so drops need
//! HeaderDigest, and the receiver can skip only under ErrorRecoveryLevel 1 and above (below it
//! a header digest error closes the connection). Corruption needs the digest that covers it
//! (the injector leaves uncovered PDUs alone). Duplicates are a proxy's doing and are applied
//! only where recovery can tell a copy from new data (level 1 and above).

use std::num::NonZeroU64;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sluice_fault::{DropEvery, FaultInjector, FaultPlan, PduKind, Rate, Rules};
use sluice_proto::params::SessionParams;

use crate::net::log_uniform;

/// Kinds a deterministic schedule drops.
const DROPPABLE: [PduKind; 8] = [
    PduKind::DataIn,
    PduKind::DataOut,
    PduKind::R2t,
    PduKind::Response,
    PduKind::Command,
    PduKind::NopIn,
    PduKind::TmfResponse,
    PduKind::TextResponse,
];

/// What a seed does to its links.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Faults {
    plan: FaultPlan,
    /// The faults of iSER connections (which carry no iSCSI digests for `plan` to act on).
    pub(crate) iser: IserFault,
    /// A name for summaries.
    pub(crate) mode: &'static str,
}

/// What can go wrong on an iSER connection. A reliable connection does not lose or reorder a
/// message: a message the transport cannot deliver ends the connection (RFC 7145 section
/// 10.1.3: the iSCSI layer is told the connection is lost), and so does an access the peer's
/// memory protection refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum IserFault {
    /// Nothing.
    #[default]
    None,
    /// Every `every`-th request frame (Send, RDMA Write, RDMA Read Request) is lost for good:
    /// the peer sees the gap in message sequence numbers and terminates the connection.
    Lost { every: u64 },
    /// Every `every`-th frame, and all behind it, arrives `ns` later.
    Delayed { every: u64, ns: u64 },
    /// The connection is reset after every `every`-th batch of frames.
    Reset { every: u64 },
    /// The initiator advertises every `every`-th task buffer with a wrong STag: the target's
    /// RDMA Write or Read through it is a remote access error that ends the connection, never
    /// data moved to or from somewhere else (RFC 5040 section 6.4, RFC 7145 section 10.1.3).
    WrongStag { every: u64 },
}

impl Faults {
    /// No faults.
    pub(crate) fn none() -> Self {
        Self {
            plan: FaultPlan::default(),
            iser: IserFault::None,
            mode: "none",
        }
    }

    /// The faults of a seed whose connections are iSER.
    pub(crate) fn random_iser(rng: &mut ChaCha8Rng) -> Self {
        let (iser, mode) = match rng.gen_range(0..10) {
            0..=3 => (IserFault::None, "none"),
            4 | 5 => (
                IserFault::Lost {
                    every: log_uniform(rng, 20, 2000),
                },
                "lost RDMA messages",
            ),
            6 => (
                IserFault::Delayed {
                    every: log_uniform(rng, 2, 200),
                    ns: log_uniform(rng, 10_000, 200_000_000),
                },
                "delayed RDMA messages",
            ),
            7 => (
                IserFault::Reset {
                    every: log_uniform(rng, 10, 1000),
                },
                "resets",
            ),
            _ => (
                IserFault::WrongStag {
                    every: log_uniform(rng, 2, 100),
                },
                "wrong STags",
            ),
        };
        Self {
            plan: FaultPlan::default(),
            iser,
            mode,
        }
    }

    /// The frame faults of one side of iSER connection `link`: frames counted from its
    /// first, the schedule shifted per link and side so that sides and links differ.
    pub(crate) fn rdma_plan(&self, seed: u64, link: usize, side: u64) -> sluice_rdma::FaultPlan {
        use sluice_rdma::{FaultAction, FaultRule, FrameKind};
        let mut plan = sluice_rdma::FaultPlan::default();
        let shift = |every: u64| (seed ^ (link as u64) << 8 ^ side << 16) % every;
        match self.iser {
            IserFault::Lost { every } => {
                let first = shift(every) + every / 2;
                for kind in [FrameKind::Send, FrameKind::Write, FrameKind::ReadRequest] {
                    plan.rules.extend((0..64).map(|k| FaultRule {
                        kind: Some(kind),
                        nth: first + k * every,
                        action: FaultAction::Drop,
                    }));
                }
            }
            IserFault::Delayed { every, ns } => {
                plan.rules.extend((0..256).map(|k| FaultRule {
                    kind: None,
                    nth: shift(every) + k * every,
                    action: FaultAction::Delay(std::time::Duration::from_nanos(ns)),
                }));
            }
            _ => {}
        }
        plan
    }

    /// The faults of a seed.
    pub(crate) fn random(rng: &mut ChaCha8Rng) -> Self {
        let rate = |rng: &mut ChaCha8Rng, lo: f64, hi: f64| {
            let x = rng.gen_range(lo.ln()..=hi.ln()).exp();
            Rate::new(x).unwrap_or(Rate::ZERO)
        };
        let mut rules = Rules::default();
        let mut plan = FaultPlan::default();
        let mode = match rng.gen_range(0..10) {
            0..=3 => "none",
            4 => {
                for _ in 0..rng.gen_range(1..=2) {
                    let kind = DROPPABLE[rng.gen_range(0..DROPPABLE.len())];
                    let every = log_uniform(rng, 2, 60);
                    rules.drop.push(DropEvery {
                        kind,
                        every: NonZeroU64::new(every).unwrap_or(NonZeroU64::MIN),
                    });
                }
                "drops"
            }
            5 => {
                rules.corrupt_data = rate(rng, 1e-3, 0.2);
                "data corruption"
            }
            6 => {
                rules.corrupt_header = rate(rng, 1e-3, 0.05);
                "header corruption"
            }
            7 => {
                // The study's range of bit error rates.
                rules.ber = rate(rng, 1e-7, 1e-5);
                "bit errors"
            }
            8 => {
                rules.duplicate = rate(rng, 1e-2, 0.2);
                "duplicates"
            }
            _ => {
                plan.reset_every = NonZeroU64::new(log_uniform(rng, 40, 3000));
                "resets"
            }
        };
        let reset_every = plan.reset_every;
        let mut plan = FaultPlan::symmetric(rules);
        plan.reset_every = reset_every;
        Self {
            plan,
            iser: IserFault::None,
            mode,
        }
    }

    /// Whether the seed has faults at all.
    pub(crate) fn any(&self) -> bool {
        !self.plan.is_pass_through() || self.iser != IserFault::None
    }

    /// The injector of one connection of a session with these `params` (its digests, and
    /// the session's ErrorRecoveryLevel), seeded from the run's seed and the link's index.
    pub(crate) fn injector(
        &self,
        params: &SessionParams,
        erl: u8,
        seed: u64,
        link: usize,
    ) -> Option<FaultInjector> {
        if !self.any() {
            return None;
        }
        let mut plan = self.plan.clone();
        for rules in [&mut plan.to_target, &mut plan.to_initiator] {
            if erl == 0 || !params.header_digest {
                rules.drop.clear();
            }
            if erl == 0 {
                rules.duplicate = Rate::ZERO;
            }
        }
        (!plan.is_pass_through()).then(|| FaultInjector::new(plan, seed, link as u64))
    }
}
