//! What to do to a connection's PDUs: the [`FaultPlan`], as typed values that cannot hold an
//! invalid rate or count. Reading flags or files into a plan is the caller's business.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use crate::kind::{PduKind, Sender};

/// Which way a PDU travels.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Initiator to target (`i->t`).
    ToTarget,
    /// Target to initiator (`t->i`).
    ToInitiator,
}

impl Direction {
    /// Both directions, initiator to target first.
    pub const BOTH: [Direction; 2] = [Direction::ToTarget, Direction::ToInitiator];

    /// `i->t` or `t->i`, as log lines print it.
    pub const fn arrow(self) -> &'static str {
        match self {
            Direction::ToTarget => "i->t",
            Direction::ToInitiator => "t->i",
        }
    }

    /// The end whose PDUs travel this way.
    pub const fn sender(self) -> Sender {
        match self {
            Direction::ToTarget => Sender::Initiator,
            Direction::ToInitiator => Sender::Target,
        }
    }

    /// 0 for [`Direction::ToTarget`], 1 for [`Direction::ToInitiator`]: an index into per-direction arrays.
    pub const fn index(self) -> usize {
        match self {
            Direction::ToTarget => 0,
            Direction::ToInitiator => 1,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.arrow())
    }
}

/// A probability in \[0, 1\]: a per-PDU fault rate, or a bit error rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Rate(f64);

impl Rate {
    /// Never.
    pub const ZERO: Rate = Rate(0.0);
    /// Always.
    pub const ONE: Rate = Rate(1.0);

    /// `p` as a rate; refuses NaN and values outside \[0, 1\].
    pub fn new(p: f64) -> Result<Rate, PlanError> {
        if (0.0..=1.0).contains(&p) {
            Ok(Rate(p))
        } else {
            Err(PlanError::RateOutOfRange(p))
        }
    }

    /// The probability.
    pub const fn get(self) -> f64 {
        self.0
    }

    /// Whether the rate is zero (the fault is off).
    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Drop every `every`-th PDU of `kind` (the `every`-th, the 2×`every`-th, ...), counted per
/// connection and direction. This is the deterministic error model of the simulation study
/// this crate follows (Hussain, section 4.8): "if the error rate of data-out PDUs is 0.1 then
/// every tenth data-out PDU will be in error".
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct DropEvery {
    /// The kind of PDU counted and dropped.
    pub kind: PduKind,
    /// The period: 1 drops every PDU of the kind.
    pub every: NonZeroU64,
}

impl fmt::Display for DropEvery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.every)
    }
}

/// The faults applied to the PDUs of one direction.
///
/// Corruption flips one bit. It is applied only where a CRC32C digest covers the bits hit
/// (RFC 7143 section 13.1), because elsewhere the receiver could not notice it and would take
/// damaged data for good: such PDUs are left alone and counted as skipped instead.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// Probability that a PDU with a data segment has one bit of its data flipped (when
    /// DataDigest=CRC32C is in force).
    pub corrupt_data: Rate,
    /// Probability that a PDU has one bit of its BHS or AHS flipped (when HeaderDigest=CRC32C
    /// is in force).
    pub corrupt_header: Rate,
    /// Bit error rate of the link: a PDU of `b` bytes on the wire is hit with probability
    /// 1-(1-ber)^(8b), at a uniformly chosen bit, so header and data are hit in proportion
    /// to their sizes (see [`crate::ber`]).
    pub ber: Rate,
    /// Deterministic drops by kind.
    pub drop: Vec<DropEvery>,
    /// Probability that a PDU is sent twice.
    pub duplicate: Rate,
    /// Added one-way delay. The plan only carries it; the driver that moves the bytes applies it.
    pub delay: Duration,
}

impl Rules {
    /// Whether these rules flip bits (data or header corruption, or a bit error rate).
    pub fn corrupts(&self) -> bool {
        !(self.corrupt_data.is_zero() && self.corrupt_header.is_zero() && self.ber.is_zero())
    }

    /// Whether these rules change nothing (no fault and no delay).
    pub fn is_pass_through(&self) -> bool {
        self.corrupt_data.is_zero()
            && self.corrupt_header.is_zero()
            && self.ber.is_zero()
            && self.drop.is_empty()
            && self.duplicate.is_zero()
            && self.delay.is_zero()
    }
}

/// Whether login PDUs may be faulted.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub enum LoginFaults {
    /// Login Requests and Responses pass untouched and uncounted by the rules: faults start in
    /// the full feature phase, so that every session can log in and the faults land on the
    /// traffic under test. The default.
    #[default]
    Exempt,
    /// Login PDUs are subject to the rules like any other. Digests are never in force during
    /// login (RFC 7143 section 13.1: they apply from the full feature phase), so only drops
    /// and duplicates can hit them.
    Included,
}

/// The faults of a run: rules for each direction, connection resets, and whether login is
/// exempt.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultPlan {
    /// Initiator to target.
    pub to_target: Rules,
    /// Target to initiator.
    pub to_initiator: Rules,
    /// Reset the connection after every N PDUs, both directions counted together (PDUs
    /// exempt from the rules do not count).
    pub reset_every: Option<NonZeroU64>,
    /// Whether login PDUs are exempt.
    pub login: LoginFaults,
}

impl FaultPlan {
    /// A plan applying `rules` to both directions. A drop rule goes only to the direction
    /// that carries its kind.
    pub fn symmetric(rules: Rules) -> FaultPlan {
        let mut plan = FaultPlan {
            to_target: rules.clone(),
            to_initiator: rules,
            ..FaultPlan::default()
        };
        for dir in Direction::BOTH {
            plan.rules_mut(dir)
                .drop
                .retain(|d| d.kind.sender() == dir.sender());
        }
        plan
    }

    /// The rules of one direction.
    pub fn rules(&self, dir: Direction) -> &Rules {
        match dir {
            Direction::ToTarget => &self.to_target,
            Direction::ToInitiator => &self.to_initiator,
        }
    }

    /// The rules of one direction, to change.
    pub fn rules_mut(&mut self, dir: Direction) -> &mut Rules {
        match dir {
            Direction::ToTarget => &mut self.to_target,
            Direction::ToInitiator => &mut self.to_initiator,
        }
    }

    /// Whether the plan flips bits in either direction (see [`Rules::corrupts`]).
    pub fn corrupts(&self) -> bool {
        Direction::BOTH.iter().any(|d| self.rules(*d).corrupts())
    }

    /// Whether the plan changes nothing.
    pub fn is_pass_through(&self) -> bool {
        self.reset_every.is_none()
            && Direction::BOTH
                .iter()
                .all(|d| self.rules(*d).is_pass_through())
    }

    /// Refuses rules that can never fire: a drop of a kind the direction does not carry, or
    /// of a login kind while login is exempt.
    pub fn check(&self) -> Result<(), PlanError> {
        for dir in Direction::BOTH {
            for d in &self.rules(dir).drop {
                if d.kind.sender() != dir.sender() {
                    return Err(PlanError::WrongDirection { rule: *d, dir });
                }
                if d.kind.is_login() && self.login == LoginFaults::Exempt {
                    return Err(PlanError::LoginExempt(*d));
                }
            }
        }
        Ok(())
    }
}

/// A value a plan cannot hold, or a rule that can never fire.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// A rate outside \[0, 1\] (or NaN).
    #[error("rate {0} is not a probability: use a number from 0 to 1")]
    RateOutOfRange(f64),
    /// A drop rule in a direction that never carries its kind.
    #[error("drop rule {rule} can never fire {dir}: {} PDUs are sent by the {}", rule.kind, match rule.kind.sender() { Sender::Initiator => "initiator", Sender::Target => "target" })]
    WrongDirection {
        /// The rule.
        rule: DropEvery,
        /// The direction it was put in.
        dir: Direction,
    },
    /// A drop rule naming a login PDU while login is exempt.
    #[error("drop rule {0} can never fire: login PDUs are exempt from faults")]
    LoginExempt(DropEvery),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(kind: PduKind, n: u64) -> DropEvery {
        DropEvery {
            kind,
            every: NonZeroU64::new(n).unwrap(),
        }
    }

    #[test]
    fn rates_are_probabilities() {
        assert_eq!(Rate::new(0.0), Ok(Rate::ZERO));
        assert_eq!(Rate::new(1.0), Ok(Rate::ONE));
        assert!(Rate::new(0.25).is_ok());
        for bad in [-0.1, 1.000_001, f64::NAN, f64::INFINITY] {
            let e = Rate::new(bad).unwrap_err();
            assert!(e.to_string().contains("from 0 to 1"), "{e}");
        }
    }

    #[test]
    fn symmetric_plans_put_each_drop_where_its_kind_travels() {
        let plan = FaultPlan::symmetric(Rules {
            drop: vec![every(PduKind::Response, 1), every(PduKind::DataOut, 10)],
            ..Rules::default()
        });
        assert_eq!(plan.to_target.drop, vec![every(PduKind::DataOut, 10)]);
        assert_eq!(plan.to_initiator.drop, vec![every(PduKind::Response, 1)]);
        assert_eq!(plan.check(), Ok(()));
    }

    #[test]
    fn rules_that_cannot_fire_are_refused() {
        let mut plan = FaultPlan::default();
        assert!(plan.is_pass_through());
        plan.to_target.drop.push(every(PduKind::Response, 2));
        let e = plan.check().unwrap_err();
        assert!(matches!(e, PlanError::WrongDirection { .. }), "{e}");
        assert!(e.to_string().contains("sent by the target"), "{e}");

        plan.to_target.drop = vec![every(PduKind::LoginRequest, 1)];
        assert!(matches!(plan.check(), Err(PlanError::LoginExempt(_))));
        plan.login = LoginFaults::Included;
        assert_eq!(plan.check(), Ok(()));
        assert!(!plan.is_pass_through());
    }

    #[test]
    fn directions_print_as_arrows() {
        assert_eq!(Direction::ToTarget.to_string(), "i->t");
        assert_eq!(Direction::ToInitiator.to_string(), "t->i");
        assert_eq!(every(PduKind::DataOut, 10).to_string(), "data-out:10");
    }
}
