//! Which digests are in force on a connection, learned by a party in the middle from the login
//! it watches.
//!
//! RFC 7143 section 13.1: HeaderDigest and DataDigest are negotiated during login and apply
//! from the full feature phase on, to both directions; during login neither is in force. A
//! proxy is no endpoint, so it reads the Login PDUs' text (parsed with sluice-proto's PDU and
//! text codecs, reassembled across PDUs with the C bit) and settles each key as negotiation
//! does (section 6.2): the value the responder answered to the originator's offer. Usually
//! the initiator offers and the target answers, so the target's value counts; a target that
//! offers a digest key first gets the initiator's answer in the next request. Digests switch
//! on after the Login Response that completes login: T bit set, NSG = FullFeaturePhase (3),
//! status success (section 11.13). Discovery sessions are no different.

use bytes::Bytes;
use sluice_proto::framing::Digests;
use sluice_proto::login::LoginStatus;
use sluice_proto::pdu::{Bhs, ParseError, Pdu, Stage, BHS_LEN};
use sluice_proto::text::{parse_pairs, DigestKind, KeyId, TextAssembler, TextError, TextLimits};

use crate::cutter::FrameLayout;
use crate::kind::PduKind;
use crate::plan::Direction;

/// How far the negotiation of one digest key went.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
enum KeyState {
    /// Not mentioned yet: the default, None, applies.
    #[default]
    Unset,
    /// The initiator offered; the target's answer settles it.
    InitiatorOffered,
    /// The target offered; the initiator's answer settles it.
    TargetOffered,
    /// Settled: CRC32C or not.
    Settled(bool),
}

impl KeyState {
    /// A value for the key sent in `dir`.
    fn saw(&mut self, dir: Direction, value: &str) {
        let answered = matches!(
            (*self, dir),
            (KeyState::InitiatorOffered, Direction::ToInitiator)
                | (KeyState::TargetOffered, Direction::ToTarget)
        );
        *self = if answered {
            // RFC 7143 section 6.2: the answer is the one value selected; anything else
            // (None, Reject, NotUnderstood, Irrelevant) leaves the digest off.
            KeyState::Settled(value == DigestKind::Crc32c.as_str())
        } else {
            match dir {
                Direction::ToTarget => KeyState::InitiatorOffered,
                Direction::ToInitiator => KeyState::TargetOffered,
            }
        };
    }

    fn in_force(self) -> bool {
        self == KeyState::Settled(true)
    }
}

/// A login PDU the tracker could not read: without its text the digests, and with them the
/// framing of everything after login, would be guesses.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TrackError {
    /// The frame is not a well-formed Login PDU.
    #[error("malformed login PDU: {0}")]
    Malformed(#[from] ParseError),
    /// Its text is malformed or too long.
    #[error("login text: {0}")]
    Text(#[from] TextError),
}

/// Follows one connection's login and reports the digests in force; see the
/// [module docs](self).
#[derive(Debug)]
pub struct DigestTracker {
    full_feature: bool,
    header: KeyState,
    data: KeyState,
    requests: TextAssembler,
    responses: TextAssembler,
}

impl Default for DigestTracker {
    fn default() -> Self {
        DigestTracker::new()
    }
}

impl DigestTracker {
    /// A connection that has not logged in yet.
    pub fn new() -> DigestTracker {
        DigestTracker {
            full_feature: false,
            header: KeyState::Unset,
            data: KeyState::Unset,
            requests: TextAssembler::new(TextLimits::LOGIN.max_total_len),
            responses: TextAssembler::new(TextLimits::LOGIN.max_total_len),
        }
    }

    /// The digests in force: none during login.
    pub fn digests(&self) -> Digests {
        if self.full_feature {
            Digests {
                header: self.header.in_force(),
                data: self.data.in_force(),
            }
        } else {
            Digests::NONE
        }
    }

    /// Whether the login completed.
    pub fn in_full_feature_phase(&self) -> bool {
        self.full_feature
    }

    /// Looks at one frame, in either direction, cut with [`DigestTracker::digests`]. Until
    /// login completes, Login PDUs are read (their opcode says which way they went);
    /// everything else passes unread.
    pub fn observe(&mut self, frame: &[u8]) -> Result<(), TrackError> {
        if self.full_feature {
            return Ok(());
        }
        let Some(header) = frame.first_chunk::<BHS_LEN>() else {
            return Err(ParseError::Truncated { len: frame.len() }.into());
        };
        // Only Login PDUs are read: other opcodes are none of our business here, and a
        // malformed one is for the endpoints to refuse.
        let bhs = Bhs::from_array(header);
        if !PduKind::from_opcode(bhs.opcode()).is_some_and(PduKind::is_login) {
            return Ok(());
        }
        // During login no digest is in force (RFC 7143 section 13.1).
        let layout = FrameLayout::of(header, Digests::NONE);
        let ahs = frame.get(BHS_LEN..layout.header_len).unwrap_or_default();
        let Some(data) = frame.get(layout.data_range()) else {
            return Err(ParseError::DataLength {
                expected: bhs.data_segment_len(),
                actual: frame.len().saturating_sub(layout.head_len),
            }
            .into());
        };
        match Pdu::parse(header, ahs, Bytes::copy_from_slice(data))? {
            Pdu::LoginRequest(req) => {
                if let Some(text) = self.requests.push(&req.data, req.cont)? {
                    self.saw_text(Direction::ToTarget, &text)?;
                }
            }
            Pdu::LoginResponse(rsp) => {
                if let Some(text) = self.responses.push(&rsp.data, rsp.cont)? {
                    self.saw_text(Direction::ToInitiator, &text)?;
                }
                // RFC 7143 section 11.13: T=1 with NSG=FullFeaturePhase and a success status
                // ends the login; the C bit is never set together with T (section 11.13.2).
                if rsp.transit
                    && !rsp.cont
                    && Stage::from_code(rsp.nsg) == Some(Stage::FullFeature)
                    && rsp.status == LoginStatus::SUCCESS
                {
                    self.full_feature = true;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn saw_text(&mut self, dir: Direction, text: &[u8]) -> Result<(), TrackError> {
        let pairs = parse_pairs(text, &TextLimits::LOGIN)?;
        if let Some(v) = KeyId::HeaderDigest.find_in(&pairs) {
            self.header.saw(dir, v);
        }
        if let Some(v) = KeyId::DataDigest.find_in(&pairs) {
            self.data.saw(dir, v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
