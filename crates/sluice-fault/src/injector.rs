//! The decision about one PDU: [`FaultInjector::inject`].
//!
//! Every decision comes from the plan, per-kind counters and a ChaCha8 stream seeded from
//! (seed, connection index, direction), never from a clock or the OS, so a run replays exactly
//! from its seed as long as the peers send the same PDUs. Each PDU the rules apply to draws the
//! same seven 64-bit words whatever the plan says, in this order: header corruption and its
//! position, data corruption and its position, bit error and its position, duplication. So a
//! PDU's fate under one rule does not move when another rule's rate changes.
//!
//! The rules are applied in this order: the reset count, drops (a dropped PDU suffers nothing
//! else), `corrupt_header`, `corrupt_data` (only PDUs with a data segment), the bit error rate,
//! duplication. A corruption flips one bit of the frame in place, within the part the digest
//! covers: the BHS and AHS for `corrupt_header`, the data segment for `corrupt_data`, any bit
//! of the frame for the bit error rate. Where no digest covers that part, the PDU is left alone
//! and the skip is counted.

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_proto::framing::Digests;
use sluice_proto::pdu::{Bhs, BHS_LEN};
use smallvec::SmallVec;

use crate::ber::{frame_bits, pdu_error_probability};
use crate::cutter::FrameLayout;
use crate::event::{Cause, FaultAction, FaultCounters, FaultEvent, Part};
use crate::kind::{PduKind, SeqField};
use crate::plan::{Direction, FaultPlan, LoginFaults, Rules};

/// What to do with one frame. Any corruption has already been applied to it.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Decision {
    /// Copies to forward: 0 (dropped), 1, or 2 (duplicated).
    pub copies: u8,
    /// Reset the connection once the copies are forwarded.
    pub reset_after: bool,
    /// What was done, in the order done (at most one per rule).
    pub events: SmallVec<[FaultEvent; 2]>,
}

impl Decision {
    fn pass() -> Decision {
        Decision {
            copies: 1,
            reset_after: false,
            events: SmallVec::new(),
        }
    }

    /// Whether the frame goes on once and untouched, and the connection stays.
    pub fn is_pass(&self) -> bool {
        self.copies == 1 && !self.reset_after && !self.corrupted()
    }

    /// Whether a bit of the frame was flipped.
    pub fn corrupted(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.action, FaultAction::Corrupt { .. }))
    }
}

/// One direction's random stream and counts.
#[derive(Clone, Debug)]
struct Lane {
    rng: ChaCha8Rng,
    /// PDUs of each kind the rules applied to, indexed like [`PduKind::ALL`].
    per_kind: [u64; PduKind::ALL.len()],
    /// PDUs seen, exempt ones included: the next PDU's number.
    seen: u64,
    counters: FaultCounters,
}

/// The fault decisions of one connection, both directions; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct FaultInjector {
    plan: FaultPlan,
    connection: u64,
    lanes: [Lane; 2],
    /// PDUs the rules applied to, both directions: what `reset_every` counts.
    counted: u64,
}

/// The ChaCha8 key of one direction of one connection: the seed, the connection index and the
/// direction, little-endian, in the first 17 bytes; the rest zero.
fn rng(seed: u64, connection: u64, direction: Direction) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&connection.to_le_bytes());
    key[16] = direction.index() as u8;
    ChaCha8Rng::from_seed(key)
}

/// The words one PDU draws, in the order of the module docs.
struct Draws {
    header: u64,
    header_at: u64,
    data: u64,
    data_at: u64,
    ber: u64,
    ber_at: u64,
    duplicate: u64,
}

impl Draws {
    fn next(rng: &mut ChaCha8Rng) -> Draws {
        Draws {
            header: rng.next_u64(),
            header_at: rng.next_u64(),
            data: rng.next_u64(),
            data_at: rng.next_u64(),
            ber: rng.next_u64(),
            ber_at: rng.next_u64(),
            duplicate: rng.next_u64(),
        }
    }
}

/// Whether a word drawn uniformly falls below probability `p`: the top 53 bits as a number in
/// \[0, 1), so 0 never fires and 1 always does.
fn fires(word: u64, p: f64) -> bool {
    ((word >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
}

/// A word drawn uniformly, scaled to \[0, n) (multiply-shift, no modulo bias to speak of).
fn below(word: u64, n: u64) -> u64 {
    ((u128::from(word) * u128::from(n)) >> 64) as u64
}

impl FaultInjector {
    /// The injector of connection number `connection` (0 for the first) of a run seeded with
    /// `seed`.
    pub fn new(plan: FaultPlan, seed: u64, connection: u64) -> FaultInjector {
        let lane = |d| Lane {
            rng: rng(seed, connection, d),
            per_kind: [0; PduKind::ALL.len()],
            seen: 0,
            counters: FaultCounters::default(),
        };
        FaultInjector {
            plan,
            connection,
            lanes: [lane(Direction::ToTarget), lane(Direction::ToInitiator)],
            counted: 0,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The connection index.
    pub fn connection(&self) -> u64 {
        self.connection
    }

    /// What one direction saw and did so far.
    pub fn counters(&self, direction: Direction) -> &FaultCounters {
        &self.lanes[direction.index()].counters
    }

    /// Decides the fate of one whole frame going `direction`, exactly as on the wire (BHS,
    /// AHS, header digest, data, padding, data digest) under `digests`, and applies any
    /// corruption to it in place. A frame whose length does not match its header (or shorter
    /// than a BHS) is counted and passed untouched: it was not cut by these rules.
    pub fn inject(&mut self, direction: Direction, frame: &mut [u8], digests: Digests) -> Decision {
        let lane = &mut self.lanes[direction.index()];
        let number = lane.seen;
        lane.seen += 1;
        lane.counters.pdus += 1;
        lane.counters.bytes += frame.len() as u64;
        let Some(&header) = frame.first_chunk::<BHS_LEN>() else {
            return Decision::pass();
        };
        let layout = FrameLayout::of(&header, digests);
        if layout.total != frame.len() {
            return Decision::pass();
        }
        let opcode = Bhs::from_array(&header).opcode();
        let kind = PduKind::from_opcode(opcode);
        if kind.is_some_and(PduKind::is_login) && self.plan.login == LoginFaults::Exempt {
            return Decision::pass();
        }
        let rules: &Rules = match direction {
            Direction::ToTarget => &self.plan.to_target,
            Direction::ToInitiator => &self.plan.to_initiator,
        };
        let event = |action| FaultEvent {
            connection: self.connection,
            direction,
            pdu: number,
            opcode,
            itt: Bhs::from_array(&header).itt(),
            seq: kind.map(|k| {
                let field = SeqField::of(k);
                (field, field.read(&header))
            }),
            action,
        };
        let mut events = SmallVec::new();
        let mut record = |lane: &mut Lane, action: FaultAction| {
            lane.counters.count(&action);
            events.push(event(action));
        };
        let mut copies = 1;

        self.counted += 1;
        let reset = self
            .plan
            .reset_every
            .is_some_and(|n| self.counted % n.get() == 0);
        let draws = Draws::next(&mut lane.rng);

        // Drops: the every-th PDU of the kind, counted per connection and direction.
        let dropped = kind.and_then(|k| {
            let count = &mut lane.per_kind[k as usize];
            *count += 1;
            let n = *count;
            rules
                .drop
                .iter()
                .find(|d| d.kind == k && n % d.every.get() == 0)
        });
        if let Some(rule) = dropped {
            record(lane, FaultAction::Drop { every: rule.every });
            copies = 0;
        } else {
            if fires(draws.header, rules.corrupt_header.get()) {
                let range = layout.header_range();
                let at = below(draws.header_at, frame_bits(range.len()));
                let action = flip(
                    frame,
                    range.start,
                    at,
                    Part::Header,
                    Cause::Rate,
                    digests.header,
                );
                record(lane, action);
            }
            if layout.data_len > 0 && fires(draws.data, rules.corrupt_data.get()) {
                let range = layout.data_range();
                let at = below(draws.data_at, frame_bits(range.len()));
                let action = flip(
                    frame,
                    range.start,
                    at,
                    Part::Data,
                    Cause::Rate,
                    digests.data,
                );
                record(lane, action);
            }
            let bits = frame_bits(frame.len());
            if !rules.ber.is_zero() && fires(draws.ber, pdu_error_probability(rules.ber, bits)) {
                // A uniformly chosen bit of the whole frame: header and data are hit in
                // proportion to their sizes.
                let at = below(draws.ber_at, bits);
                let (part, covered) = if at < frame_bits(layout.head_len) {
                    (Part::Header, digests.header)
                } else {
                    (Part::Data, digests.data)
                };
                record(lane, flip(frame, 0, at, part, Cause::Ber, covered));
            }
            if fires(draws.duplicate, rules.duplicate.get()) {
                record(lane, FaultAction::Duplicate);
                copies = 2;
            }
        }
        if reset {
            record(
                lane,
                FaultAction::Reset {
                    after: self.counted,
                },
            );
        }
        Decision {
            copies,
            reset_after: reset,
            events,
        }
    }
}

/// Flips bit `at` (counted from byte `start`) of `frame` when a digest `covered` it; otherwise
/// leaves the frame alone. Returns what was done.
fn flip(
    frame: &mut [u8],
    start: usize,
    at: u64,
    part: Part,
    cause: Cause,
    covered: bool,
) -> FaultAction {
    if !covered {
        return FaultAction::Skipped { part, cause };
    }
    // `at` is below 8 × the frame's length, so both fit.
    let byte = start + (at / 8) as usize;
    let bit = (at % 8) as u8;
    if let Some(b) = frame.get_mut(byte) {
        *b ^= 1 << bit;
    }
    FaultAction::Corrupt {
        part,
        cause,
        byte,
        bit,
    }
}

#[cfg(test)]
mod tests;
