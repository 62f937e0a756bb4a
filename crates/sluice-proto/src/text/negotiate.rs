//! Table-driven negotiation of operational keys (RFC 7143 sections 6.2 and 13), for both roles.
//!
//! A [`Negotiator`] holds the local side's values ([`OperationalOffer`]) and the state of every
//! key. It answers the peer's offers ([`Negotiator::respond`]), makes our own offers
//! ([`Negotiator::offers`], [`Negotiator::declarations`]), reads the peer's answers
//! ([`Negotiator::apply_answers`]) and yields the resulting [`SessionParams`]. It handles only
//! keys whose [`Handler`] is `Negotiator`; identity and security keys are skipped (the login
//! state machines own them). One Negotiator serves one login (or one text negotiation).

use crate::params::{SessionParams, SessionType};

use super::keys::{
    self, format_bool, Handler, KeyDef, KeyId, KeyValueError, Phase, Rule, Sessions, IRRELEVANT,
    NOT_UNDERSTOOD, REJECT,
};

/// Which end of the connection we are.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Role {
    /// The initiator.
    Initiator,
    /// The target.
    Target,
}

/// A digest algorithm for HeaderDigest / DataDigest (RFC 7143 section 13.1).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum DigestKind {
    /// No digest.
    None,
    /// CRC32C.
    Crc32c,
}

impl DigestKind {
    /// The key value.
    pub const fn as_str(self) -> &'static str {
        match self {
            DigestKind::None => "None",
            DigestKind::Crc32c => "CRC32C",
        }
    }
}

/// The local side's values for every operational key: what we offer as originator and what we
/// accept as responder. Defaults are the RFC 7143 section 13 defaults.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct OperationalOffer {
    /// HeaderDigest values we support, most preferred first.
    pub header_digest: Vec<DigestKind>,
    /// DataDigest values we support, most preferred first.
    pub data_digest: Vec<DigestKind>,
    /// MaxConnections (Min).
    pub max_connections: u16,
    /// InitialR2T (Or).
    pub initial_r2t: bool,
    /// ImmediateData (And).
    pub immediate_data: bool,
    /// Our own MaxRecvDataSegmentLength (declarative).
    pub max_recv_data_segment_length: u32,
    /// MaxBurstLength (Min).
    pub max_burst_length: u32,
    /// FirstBurstLength (Min).
    pub first_burst_length: u32,
    /// DefaultTime2Wait (Max).
    pub default_time2wait: u16,
    /// DefaultTime2Retain (Min).
    pub default_time2retain: u16,
    /// MaxOutstandingR2T (Min).
    pub max_outstanding_r2t: u16,
    /// DataPDUInOrder (Or).
    pub data_pdu_in_order: bool,
    /// DataSequenceInOrder (Or).
    pub data_sequence_in_order: bool,
    /// ErrorRecoveryLevel (Min).
    pub error_recovery_level: u8,
    /// iSCSIProtocolLevel (Min, section 13.24). The initiator offers it only when `Some`;
    /// a target answers `min(offer, value)` (`None` counts as 0, i.e. RFC 3720).
    pub protocol_level: Option<u8>,
}

impl Default for OperationalOffer {
    fn default() -> Self {
        let d = SessionParams::default();
        Self {
            header_digest: vec![DigestKind::None],
            data_digest: vec![DigestKind::None],
            max_connections: d.max_connections,
            initial_r2t: d.initial_r2t,
            immediate_data: d.immediate_data,
            max_recv_data_segment_length: d.target_max_recv_data_segment_length,
            max_burst_length: d.max_burst_length,
            first_burst_length: d.first_burst_length,
            default_time2wait: d.default_time2wait,
            default_time2retain: d.default_time2retain,
            max_outstanding_r2t: d.max_outstanding_r2t,
            data_pdu_in_order: d.data_pdu_in_order,
            data_sequence_in_order: d.data_sequence_in_order,
            error_recovery_level: d.error_recovery_level,
            protocol_level: None,
        }
    }
}

impl OperationalOffer {
    /// Sets our value of one operational key from its text (RFC 7143 section 6.1 syntax: a
    /// number, `Yes`/`No`, or a digest list such as `CRC32C,None`), checked against the key's
    /// type and range in the table. Keys without a value of ours here (identity, security,
    /// TaskReporting, ...) are [`KeyValueError::NotSettable`].
    pub fn set_key(&mut self, key: KeyId, value: &str) -> Result<(), KeyValueError> {
        match key {
            KeyId::HeaderDigest => self.header_digest = digest_list(key, value)?,
            KeyId::DataDigest => self.data_digest = digest_list(key, value)?,
            KeyId::MaxConnections => self.max_connections = key.parse_number(value)?,
            KeyId::InitialR2T => self.initial_r2t = key.parse_bool(value)?,
            KeyId::ImmediateData => self.immediate_data = key.parse_bool(value)?,
            KeyId::MaxRecvDataSegmentLength => {
                self.max_recv_data_segment_length = key.parse_number(value)?;
            }
            KeyId::MaxBurstLength => self.max_burst_length = key.parse_number(value)?,
            KeyId::FirstBurstLength => self.first_burst_length = key.parse_number(value)?,
            KeyId::DefaultTime2Wait => self.default_time2wait = key.parse_number(value)?,
            KeyId::DefaultTime2Retain => self.default_time2retain = key.parse_number(value)?,
            KeyId::MaxOutstandingR2T => self.max_outstanding_r2t = key.parse_number(value)?,
            KeyId::DataPduInOrder => self.data_pdu_in_order = key.parse_bool(value)?,
            KeyId::DataSequenceInOrder => self.data_sequence_in_order = key.parse_bool(value)?,
            KeyId::ErrorRecoveryLevel => self.error_recovery_level = key.parse_number(value)?,
            KeyId::ProtocolLevel => self.protocol_level = Some(key.parse_number(value)?),
            _ => return Err(KeyValueError::NotSettable { key }),
        }
        Ok(())
    }
}

/// A HeaderDigest or DataDigest list, most preferred first (RFC 7143 section 13.1).
fn digest_list(key: KeyId, value: &str) -> Result<Vec<DigestKind>, KeyValueError> {
    value
        .split(',')
        .map(|v| {
            [DigestKind::Crc32c, DigestKind::None]
                .into_iter()
                .find(|d| d.as_str() == v)
                .ok_or_else(|| KeyValueError::Syntax {
                    key,
                    value: value.to_owned(),
                })
        })
        .collect()
}

/// A negotiation failure that ends the login (RFC 7143 section 6.2 / 7.12).
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiationError {
    /// RFC 7143 section 6.3: "An attempt to renegotiate/redeclare parameters not specifically
    /// allowed MUST be detected by the initiator and target. If such an attempt is detected by
    /// the target, the target MUST respond with a Login Reject (initiator error); if detected
    /// by the initiator, the initiator MUST drop the connection."
    #[error("key {0} negotiated twice")]
    Duplicate(String),
    /// The peer answered one of our offers with a value the rule does not allow.
    #[error("invalid answer {key}={value}")]
    BadAnswer {
        /// The key.
        key: String,
        /// The offending value.
        value: String,
    },
    /// More keys than [`MAX_KEYS_PER_NEGOTIATION`] in one negotiation.
    #[error("too many keys in one negotiation")]
    TooManyKeys,
}

/// Most keys processed by one negotiation (a bound on peer-driven work).
pub const MAX_KEYS_PER_NEGOTIATION: usize = 512;

/// The local value of one key, in the form its rule needs.
enum Local {
    Num(u64),
    Bool(bool),
    List(Vec<&'static str>),
    Unsupported,
}

/// Table-driven negotiator for one login or text negotiation.
#[derive(Clone, Debug)]
pub struct Negotiator {
    role: Role,
    local: OperationalOffer,
    session_type: SessionType,
    leading: bool,
    full_feature: bool,
    params: SessionParams,
    /// Our offers waiting for an answer: (key, the value we offered).
    pending: Vec<(KeyId, String)>,
    /// Keys settled, offered by the peer, or declared by the peer.
    done: Vec<KeyId>,
    /// Declarative keys we have declared.
    declared: Vec<KeyId>,
    keys_seen: usize,
}

impl Negotiator {
    /// A negotiator for a leading login of a normal session.
    pub fn new(role: Role, local: OperationalOffer) -> Self {
        let mut params = SessionParams::default();
        match role {
            Role::Target => {
                params.target_max_recv_data_segment_length = local.max_recv_data_segment_length
            }
            Role::Initiator => {
                params.initiator_max_recv_data_segment_length = local.max_recv_data_segment_length
            }
        }
        Self {
            role,
            local,
            session_type: SessionType::Normal,
            leading: true,
            full_feature: false,
            params,
            pending: Vec::new(),
            done: Vec::new(),
            declared: Vec::new(),
            keys_seen: 0,
        }
    }

    /// Sets the session type (discovery makes normal-only keys irrelevant).
    pub fn set_session_type(&mut self, session_type: SessionType) {
        self.session_type = session_type;
    }

    /// Marks the login as non-leading (TSIH ≠ 0): session-wide keys become irrelevant.
    pub fn set_leading(&mut self, leading: bool) {
        self.leading = leading;
    }

    /// Marks the negotiation as a Text negotiation in full feature phase.
    pub fn set_full_feature(&mut self, full_feature: bool) {
        self.full_feature = full_feature;
    }

    /// Whether some of our offers still wait for an answer.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The parameters negotiated so far (defaults for everything else).
    ///
    /// RFC 7143 section 13.14: "FirstBurstLength MUST NOT exceed MaxBurstLength." If the two
    /// were settled separately and disagree, FirstBurstLength is clamped. Section 13.19: "if
    /// ErrorRecoveryLevel is not 0 and DataSequenceInOrder is set to Yes, then
    /// MaxOutstandingR2T MUST be set to 1" (a target may retry only the last R2T then); both
    /// sides apply it to what they settled, so they agree whatever order the keys came in.
    pub fn result(&self) -> SessionParams {
        let mut p = self.params;
        p.first_burst_length = p.first_burst_length.min(p.max_burst_length);
        if p.error_recovery_level > 0 && p.data_sequence_in_order {
            p.max_outstanding_r2t = 1;
        }
        p
    }

    /// Our declarative keys not declared yet (MaxRecvDataSegmentLength, section 13.12).
    pub fn declarations(&mut self) -> Vec<(String, String)> {
        const KEY: KeyId = KeyId::MaxRecvDataSegmentLength;
        if self.declared.contains(&KEY) {
            return Vec::new();
        }
        self.declared.push(KEY);
        vec![(
            KEY.name().to_owned(),
            self.local.max_recv_data_segment_length.to_string(),
        )]
    }

    /// Our offers for negotiable keys that are neither settled nor pending; they become
    /// pending. An initiator offers every key relevant to the session; a target offers only
    /// keys whose value differs from the RFC default (so that it sends no unsolicited keys
    /// open-iscsi would refuse: its `usr/login.c` fails the login on any key it does not know,
    /// "couldn't recognize text") and never MaxConnections, TaskReporting or
    /// iSCSIProtocolLevel.
    pub fn offers(&mut self) -> Vec<(String, String)> {
        let defaults = Negotiator::new(self.role, OperationalOffer::default());
        let mut out = Vec::new();
        for def in keys::KEYS {
            if def.handler != Handler::Negotiator
                || matches!(def.rule, Rule::Declarative | Rule::Obsolete(_))
                || self.done.contains(&def.id)
                || self.pending.iter().any(|(k, _)| *k == def.id)
                || !self.applies(def)
            {
                continue;
            }
            if def.id == KeyId::TaskReporting {
                continue;
            }
            // Extra connections are the initiator's to open: a target that offered
            // MaxConnections would only invite an answer of 1 from an initiator that did not
            // ask for more (and open-iscsi fails a login on any MaxConnections but 1).
            if def.id == KeyId::MaxConnections && self.role == Role::Target {
                continue;
            }
            if def.id == KeyId::ProtocolLevel
                && (self.role == Role::Target || self.local.protocol_level.is_none())
            {
                continue;
            }
            let Some(value) = self.offer_value(def) else {
                continue;
            };
            if self.role == Role::Target && defaults.offer_value(def).as_deref() == Some(&value) {
                continue;
            }
            self.pending.push((def.id, value.clone()));
            out.push((def.name.to_owned(), value));
        }
        out
    }

    /// Dispatches the peer's pairs: answers to our pending offers go to
    /// [`apply_answers`](Self::apply_answers), everything else to [`respond`](Self::respond).
    /// Returns our answers.
    pub fn handle(
        &mut self,
        pairs: &[(String, String)],
    ) -> Result<Vec<(String, String)>, NegotiationError> {
        let (answers, offers): (Vec<_>, Vec<_>) = pairs.iter().cloned().partition(|(k, _)| {
            keys::lookup(k).is_some_and(|d| self.pending.iter().any(|(p, _)| *p == d.id))
        });
        self.apply_answers(&answers)?;
        self.respond(&offers)
    }

    /// Answers the peer's offers (RFC 7143 section 6.2). Keys handled by the login state
    /// machine are skipped. Declarative keys are recorded without an answer.
    pub fn respond(
        &mut self,
        pairs: &[(String, String)],
    ) -> Result<Vec<(String, String)>, NegotiationError> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut first_burst = None;
        for (key, value) in pairs {
            self.count()?;
            let Some(def) = keys::lookup(key) else {
                // RFC 7143 section 6.2: "the answer for a key not understood MUST be
                // key=NotUnderstood" (this covers X- and X# extension keys too).
                out.push((key.clone(), NOT_UNDERSTOOD.to_owned()));
                continue;
            };
            if def.handler != Handler::Negotiator {
                continue;
            }
            if self.done.contains(&def.id) {
                return Err(NegotiationError::Duplicate(key.clone()));
            }
            self.done.push(def.id);
            if def.id == KeyId::FirstBurstLength {
                // Decided after the batch: its relevance depends on InitialR2T and
                // ImmediateData, which may come later in the same text.
                first_burst = Some(value.clone());
                continue;
            }
            if let Some(answer) = self.answer(def, value) {
                out.push((key.clone(), answer));
            }
        }
        let mut first_burst_answer = None;
        if let Some(value) = first_burst {
            let def = KeyId::FirstBurstLength.def();
            if let Some(answer) = self.answer(def, &value) {
                first_burst_answer = Some(out.len());
                out.push((def.name.to_owned(), answer));
            }
        }
        // RFC 7143 section 13.14: "FirstBurstLength MUST NOT exceed MaxBurstLength." With Min
        // the responder may answer any value up to the offer, so lower our FirstBurstLength
        // answer instead of producing an invalid pair.
        if self.params.first_burst_length > self.params.max_burst_length {
            self.params.first_burst_length = self.params.max_burst_length;
            if let Some((_, v)) = first_burst_answer.and_then(|i| out.get_mut(i)) {
                if v.parse::<u32>().is_ok() {
                    *v = self.params.first_burst_length.to_string();
                }
            }
        }
        Ok(out)
    }

    /// Reads the peer's answers to our offers and updates the result. Answers `Reject`,
    /// `Irrelevant` and `NotUnderstood` leave the default in place.
    pub fn apply_answers(&mut self, pairs: &[(String, String)]) -> Result<(), NegotiationError> {
        for (key, value) in pairs {
            self.count()?;
            let id = keys::lookup(key).map(|d| d.id);
            let Some(pos) = self.pending.iter().position(|(k, _)| Some(*k) == id) else {
                return Err(NegotiationError::BadAnswer {
                    key: key.clone(),
                    value: value.clone(),
                });
            };
            let (id, offered) = self.pending.swap_remove(pos);
            self.done.push(id);
            if matches!(value.as_str(), REJECT | IRRELEVANT | NOT_UNDERSTOOD) {
                continue;
            }
            let bad = || NegotiationError::BadAnswer {
                key: key.clone(),
                value: value.clone(),
            };
            let def = id.def();
            let ok = match def.rule {
                Rule::List => offered.split(',').any(|v| v == value),
                Rule::Min | Rule::Max => {
                    match (def.check_value(value), keys::parse_number(&offered)) {
                        (Some(a), Some(o)) => {
                            (def.rule == Rule::Min && a <= o) || (def.rule == Rule::Max && a >= o)
                        }
                        _ => false,
                    }
                }
                // RFC 7143 section 6.2.2: with And, an offer of No can only yield No; with Or,
                // an offer of Yes can only yield Yes.
                Rule::And => keys::parse_bool(value).is_some_and(|a| offered == "Yes" || !a),
                Rule::Or => keys::parse_bool(value).is_some_and(|a| offered == "No" || a),
                Rule::Declarative | Rule::Obsolete(_) => true,
            };
            if !ok {
                return Err(bad());
            }
            self.set(def, value);
        }
        Ok(())
    }

    fn count(&mut self) -> Result<(), NegotiationError> {
        self.keys_seen += 1;
        if self.keys_seen > MAX_KEYS_PER_NEGOTIATION {
            return Err(NegotiationError::TooManyKeys);
        }
        Ok(())
    }

    /// Whether a key applies in the current context (session type, leading, phase).
    fn applies(&self, def: &KeyDef) -> bool {
        let discovery_only =
            def.sessions == Sessions::NormalOnly && self.session_type == SessionType::Discovery;
        let session_wide_on_secondary = def.phase == Phase::LeadingLogin && !self.leading;
        !discovery_only && !session_wide_on_secondary
    }

    /// The answer to one offer (None for declarative keys, which are not answered).
    fn answer(&mut self, def: &'static KeyDef, value: &str) -> Option<String> {
        let from_initiator = self.role == Role::Target;
        if let Rule::Obsolete(answer) = def.rule {
            return Some(answer.to_owned());
        }
        if !def.may_send(from_initiator) {
            return Some(REJECT.to_owned());
        }
        // RFC 7143 section 13: login-only keys may not be negotiated in full feature phase.
        let phase_ok = match def.phase {
            Phase::LeadingLogin | Phase::Login | Phase::Security => !self.full_feature,
            Phase::FullFeature => self.full_feature,
            Phase::Any => true,
        };
        if !phase_ok {
            return Some(REJECT.to_owned());
        }
        // RFC 7143 section 6.2: "If a specific key is not relevant for the current
        // negotiation, the responder may answer with the constant "Irrelevant"".
        if !self.applies(def) {
            return Some(IRRELEVANT.to_owned());
        }
        // Section 13.14: FirstBurstLength is "Irrelevant when: ( InitialR2T=Yes and
        // ImmediateData=No )".
        if def.id == KeyId::FirstBurstLength
            && self.params.initial_r2t
            && !self.params.immediate_data
        {
            return Some(IRRELEVANT.to_owned());
        }
        // Section 6.2: out-of-range or malformed values are answered with Reject.
        let Some(offered) = def.check_value(value) else {
            return Some(REJECT.to_owned());
        };
        let result = match (def.rule, self.local(def)) {
            (Rule::Declarative, _) => {
                self.set(def, value);
                return None;
            }
            (Rule::List, Local::List(ours)) => {
                // Section 6.2.1: "the first value that it supports ... selected from the
                // originator list".
                match value.split(',').find(|v| ours.contains(v)) {
                    Some(v) => v.to_owned(),
                    None => return Some(REJECT.to_owned()),
                }
            }
            (Rule::Min, Local::Num(ours)) => offered.min(ours).to_string(),
            (Rule::Max, Local::Num(ours)) => offered.max(ours).to_string(),
            (Rule::And, Local::Bool(ours)) => format_bool(ours && offered == 1).to_owned(),
            (Rule::Or, Local::Bool(ours)) => format_bool(ours || offered == 1).to_owned(),
            _ => return Some(REJECT.to_owned()),
        };
        self.set(def, &result);
        Some(result)
    }

    /// The value we offer as originator.
    fn offer_value(&self, def: &KeyDef) -> Option<String> {
        match self.local(def) {
            Local::Num(n) => Some(n.to_string()),
            Local::Bool(b) => Some(format_bool(b).to_owned()),
            Local::List(l) if !l.is_empty() => Some(l.join(",")),
            _ => None,
        }
    }

    fn local(&self, def: &KeyDef) -> Local {
        let o = &self.local;
        let digests = |d: &[DigestKind]| Local::List(d.iter().map(|k| k.as_str()).collect());
        match def.id {
            KeyId::HeaderDigest => digests(&o.header_digest),
            KeyId::DataDigest => digests(&o.data_digest),
            KeyId::MaxConnections => Local::Num(o.max_connections.into()),
            KeyId::InitialR2T => Local::Bool(o.initial_r2t),
            KeyId::ImmediateData => Local::Bool(o.immediate_data),
            KeyId::MaxBurstLength => Local::Num(o.max_burst_length.into()),
            KeyId::FirstBurstLength => Local::Num(o.first_burst_length.into()),
            KeyId::DefaultTime2Wait => Local::Num(o.default_time2wait.into()),
            KeyId::DefaultTime2Retain => Local::Num(o.default_time2retain.into()),
            KeyId::MaxOutstandingR2T => Local::Num(o.max_outstanding_r2t.into()),
            KeyId::DataPduInOrder => Local::Bool(o.data_pdu_in_order),
            KeyId::DataSequenceInOrder => Local::Bool(o.data_sequence_in_order),
            KeyId::ErrorRecoveryLevel => Local::Num(o.error_recovery_level.into()),
            KeyId::ProtocolLevel => Local::Num(o.protocol_level.unwrap_or(0).into()),
            // Only the RFC 3720 semantics are implemented (section 13.23).
            KeyId::TaskReporting => Local::List(vec!["RFC3720"]),
            _ => Local::Unsupported,
        }
    }

    /// Stores a settled value. `value` has been validated against the key's type.
    fn set(&mut self, def: &KeyDef, value: &str) {
        let p = &mut self.params;
        let num = def.check_value(value).unwrap_or(0);
        let n32 = u32::try_from(num).unwrap_or(u32::MAX);
        let n16 = u16::try_from(num).unwrap_or(u16::MAX);
        let yes = value == "Yes";
        match def.id {
            KeyId::HeaderDigest => p.header_digest = value == DigestKind::Crc32c.as_str(),
            KeyId::DataDigest => p.data_digest = value == DigestKind::Crc32c.as_str(),
            KeyId::MaxConnections => p.max_connections = n16,
            KeyId::InitialR2T => p.initial_r2t = yes,
            KeyId::ImmediateData => p.immediate_data = yes,
            KeyId::MaxRecvDataSegmentLength => match self.role {
                // The peer's declaration: what it can receive from us.
                Role::Target => p.initiator_max_recv_data_segment_length = n32,
                Role::Initiator => p.target_max_recv_data_segment_length = n32,
            },
            KeyId::MaxBurstLength => p.max_burst_length = n32,
            KeyId::FirstBurstLength => p.first_burst_length = n32,
            KeyId::DefaultTime2Wait => p.default_time2wait = n16,
            KeyId::DefaultTime2Retain => p.default_time2retain = n16,
            KeyId::MaxOutstandingR2T => p.max_outstanding_r2t = n16,
            KeyId::DataPduInOrder => p.data_pdu_in_order = yes,
            KeyId::DataSequenceInOrder => p.data_sequence_in_order = yes,
            KeyId::ErrorRecoveryLevel => p.error_recovery_level = u8::try_from(num).unwrap_or(0),
            _ => {}
        }
    }
}

#[cfg(test)]
#[path = "negotiate_tests.rs"]
mod tests;
