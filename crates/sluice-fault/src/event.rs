//! What the injector did, as values: one [`FaultEvent`] per fault (or skipped fault), and
//! [`FaultCounters`] per direction.
//!
//! An event prints as one line of `key=value` words, the same for every run of a seed, so
//! that logs can be grepped and two runs compared with `diff`:
//! `conn=0 dir=i->t pdu=data-out itt=0x00000012 datasn=3 fault=corrupt-data byte=1234 bit=5`.

use std::fmt;
use std::num::NonZeroU64;

use sluice_proto::seq::Itt;

use crate::kind::{PduKind, SeqField};
use crate::plan::Direction;

/// The part of a frame a corruption hit, which names the digest that detects it.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum Part {
    /// BHS, AHS or header digest: found by HeaderDigest=CRC32C.
    Header,
    /// Data segment, padding or data digest: found by DataDigest=CRC32C.
    Data,
}

impl Part {
    /// `header` or `data`.
    pub const fn name(self) -> &'static str {
        match self {
            Part::Header => "header",
            Part::Data => "data",
        }
    }
}

/// Which rule decided a corruption.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum Cause {
    /// `corrupt_header` or `corrupt_data` (per the [`Part`]).
    Rate,
    /// The bit error rate.
    Ber,
}

/// What was done to one PDU.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum FaultAction {
    /// Not forwarded: the `every`-th PDU of its kind.
    Drop {
        /// The period of the rule that fired.
        every: NonZeroU64,
    },
    /// One bit flipped in place.
    Corrupt {
        /// Header or data.
        part: Part,
        /// The rule that fired.
        cause: Cause,
        /// Byte offset in the frame.
        byte: usize,
        /// Bit in that byte (0 is the least significant).
        bit: u8,
    },
    /// A corruption was due but no digest covers that part, so the receiver could not have
    /// noticed it: the PDU was left alone.
    Skipped {
        /// The part that would have been hit.
        part: Part,
        /// The rule that fired.
        cause: Cause,
    },
    /// Forwarded twice.
    Duplicate,
    /// The connection is reset (both TCP connections, RST) once this PDU is forwarded.
    Reset {
        /// PDUs counted on the connection so far, both directions.
        after: u64,
    },
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rule = |part: Part, cause: Cause| match cause {
            Cause::Rate => format!("corrupt-{}", part.name()),
            Cause::Ber => format!("ber-{}", part.name()),
        };
        match *self {
            FaultAction::Drop { every } => write!(f, "drop every={every}"),
            FaultAction::Corrupt {
                part,
                cause,
                byte,
                bit,
            } => write!(f, "{} byte={byte} bit={bit}", rule(part, cause)),
            FaultAction::Skipped { part, cause } => write!(
                f,
                "skipped-{} reason=no-{}-digest",
                rule(part, cause),
                part.name()
            ),
            FaultAction::Duplicate => f.write_str("duplicate"),
            FaultAction::Reset { after } => write!(f, "reset after={after}"),
        }
    }
}

/// One decision of the injector about one PDU.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct FaultEvent {
    /// The connection's index (its order of arrival at the proxy, from 0).
    pub connection: u64,
    /// Which way the PDU went.
    pub direction: Direction,
    /// The PDU's number in its direction on this connection, from 0, exempt PDUs included.
    pub pdu: u64,
    /// Its opcode (without the I bit).
    pub opcode: u8,
    /// Its Initiator Task Tag.
    pub itt: Itt,
    /// Its sequence number, where the kind has one ([`SeqField::of`]).
    pub seq: Option<(SeqField, u32)>,
    /// What was done.
    pub action: FaultAction,
}

impl FaultEvent {
    /// The PDU's kind (`None` for an opcode RFC 7143 does not define).
    pub fn kind(&self) -> Option<PduKind> {
        PduKind::from_opcode(self.opcode)
    }
}

impl fmt::Display for FaultEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn={} dir={} ", self.connection, self.direction)?;
        match self.kind() {
            Some(kind) => write!(f, "pdu={kind}")?,
            None => write!(f, "pdu=opcode-{:#04x}", self.opcode)?,
        }
        write!(f, " n={} itt={:#010x}", self.pdu, self.itt.0)?;
        if let Some((field, value)) = self.seq {
            write!(f, " {field}={value}")?;
        }
        write!(f, " fault={}", self.action)
    }
}

/// What one direction saw and did. Every field counts PDUs, except `bytes`.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub struct FaultCounters {
    /// PDUs seen, exempt ones included.
    pub pdus: u64,
    /// Bytes of those PDUs as they arrived.
    pub bytes: u64,
    /// Dropped by a drop rule.
    pub dropped: u64,
    /// Forwarded twice.
    pub duplicated: u64,
    /// Header bit flipped by `corrupt_header`.
    pub corrupt_header: u64,
    /// Data bit flipped by `corrupt_data`.
    pub corrupt_data: u64,
    /// Header bit flipped by the bit error rate.
    pub ber_header: u64,
    /// Data bit flipped by the bit error rate.
    pub ber_data: u64,
    /// Header corruption skipped: no header digest in force.
    pub skipped_no_header_digest: u64,
    /// Data corruption skipped: no data digest in force.
    pub skipped_no_data_digest: u64,
    /// Connection resets decided on a PDU of this direction.
    pub resets: u64,
}

impl FaultCounters {
    /// Adds `other` field by field (for totals over connections).
    pub fn add(&mut self, other: &FaultCounters) {
        self.pdus += other.pdus;
        self.bytes += other.bytes;
        self.dropped += other.dropped;
        self.duplicated += other.duplicated;
        self.corrupt_header += other.corrupt_header;
        self.corrupt_data += other.corrupt_data;
        self.ber_header += other.ber_header;
        self.ber_data += other.ber_data;
        self.skipped_no_header_digest += other.skipped_no_header_digest;
        self.skipped_no_data_digest += other.skipped_no_data_digest;
        self.resets += other.resets;
    }

    /// Every fault applied (skips and plain forwarding excluded).
    pub fn faults(&self) -> u64 {
        self.dropped
            + self.duplicated
            + self.corrupt_header
            + self.corrupt_data
            + self.ber_header
            + self.ber_data
            + self.resets
    }

    /// Counts one event.
    pub(crate) fn count(&mut self, action: &FaultAction) {
        let slot = match *action {
            FaultAction::Drop { .. } => &mut self.dropped,
            FaultAction::Duplicate => &mut self.duplicated,
            FaultAction::Reset { .. } => &mut self.resets,
            FaultAction::Corrupt { part, cause, .. } => match (part, cause) {
                (Part::Header, Cause::Rate) => &mut self.corrupt_header,
                (Part::Data, Cause::Rate) => &mut self.corrupt_data,
                (Part::Header, Cause::Ber) => &mut self.ber_header,
                (Part::Data, Cause::Ber) => &mut self.ber_data,
            },
            FaultAction::Skipped { part, .. } => match part {
                Part::Header => &mut self.skipped_no_header_digest,
                Part::Data => &mut self.skipped_no_data_digest,
            },
        };
        *slot += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_print_as_one_greppable_line() {
        let e = FaultEvent {
            connection: 2,
            direction: Direction::ToTarget,
            pdu: 17,
            opcode: 0x05,
            itt: Itt(0x12),
            seq: Some((SeqField::DataSn, 3)),
            action: FaultAction::Corrupt {
                part: Part::Data,
                cause: Cause::Rate,
                byte: 1234,
                bit: 5,
            },
        };
        assert_eq!(
            e.to_string(),
            "conn=2 dir=i->t pdu=data-out n=17 itt=0x00000012 datasn=3 fault=corrupt-data byte=1234 bit=5"
        );
        let skipped = FaultEvent {
            opcode: 0x1a,
            seq: None,
            action: FaultAction::Skipped {
                part: Part::Header,
                cause: Cause::Ber,
            },
            ..e
        };
        assert_eq!(
            skipped.to_string(),
            "conn=2 dir=i->t pdu=opcode-0x1a n=17 itt=0x00000012 fault=skipped-ber-header reason=no-header-digest"
        );
    }

    #[test]
    fn counters_count_and_add() {
        let mut c = FaultCounters::default();
        c.count(&FaultAction::Duplicate);
        c.count(&FaultAction::Skipped {
            part: Part::Data,
            cause: Cause::Rate,
        });
        c.count(&FaultAction::Corrupt {
            part: Part::Header,
            cause: Cause::Ber,
            byte: 0,
            bit: 0,
        });
        assert_eq!(
            (c.duplicated, c.skipped_no_data_digest, c.ber_header),
            (1, 1, 1)
        );
        assert_eq!(c.faults(), 2);
        let mut total = c;
        total.add(&c);
        assert_eq!(total.duplicated, 2);
    }
}
