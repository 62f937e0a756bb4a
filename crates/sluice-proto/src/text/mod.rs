//! Text keys: the `key=value\0` codec, the table of every key (RFC 7143 sections 12 and 13) and
//! the table-driven [`Negotiator`].
//!
//! Layering:
//! - [`codec`] turns data segments into `(key, value)` pairs and back, reassembles text split
//!   over several PDUs with the C bit ([`codec::TextAssembler`]) and splits outgoing text into
//!   PDU-sized chunks ([`codec::split_text`]). It knows nothing about what keys mean.
//! - [`keys`] is the single `KEYS` table: type, result rule, range, sender, phase and session
//!   types of every key, plus the answer constants (`Reject`, `Irrelevant`, `NotUnderstood`).
//!   Code names keys by [`KeyId`]; configured values are checked against the table there.
//! - [`negotiate`] drives the table: answers the peer's offers, reads the peer's answers to ours
//!   and produces a [`SessionParams`](crate::params::SessionParams).
//!
//! Login-only identity keys (InitiatorName, TargetName, SessionType, ...) and the security keys
//! (AuthMethod, CHAP_*) are described by the table but acted upon by [`crate::login`].

pub mod codec;
pub mod keys;
pub mod negotiate;

pub use codec::{encode_pairs, parse_pairs, split_text, TextAssembler, TextError, TextLimits};
pub use keys::{lookup, KeyDef, KeyId, KeyValueError, Rule, KEYS};
pub use negotiate::{DigestKind, NegotiationError, Negotiator, OperationalOffer, Role};
