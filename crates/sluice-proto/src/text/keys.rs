//! The one table of text keys: RFC 7143 section 12 (security) and section 13 (operational).
//!
//! Each [`KeyDef`] says how a key is typed, how its result follows from the two sides' values
//! ([`Rule`], RFC 7143 sections 6.2.1 and 6.2.2), its valid range, who may send it, in which
//! phase, and for which session types it is relevant. The negotiator and the login state
//! machines consult this table instead of special-casing keys.
//!
//! Code names a key by its [`KeyId`]; the key's name, type and range are written only here.
//! A name from the wire or from a user becomes a [`KeyDef`] (and so a [`KeyId`]) through
//! [`lookup`], and a configured value is checked against the table with
//! [`KeyId::check_number`], [`KeyId::parse_number`] or [`KeyId::parse_bool`].

use std::fmt;
use std::ops::RangeInclusive;

/// The answer for a value outside the key's domain (RFC 7143 section 6.2).
pub const REJECT: &str = "Reject";
/// The answer for a key that does not apply in the current context (RFC 7143 section 6.2).
pub const IRRELEVANT: &str = "Irrelevant";
/// The answer for a key the responder does not know (RFC 7143 section 6.2: "the answer for a
/// key not understood MUST be key=NotUnderstood").
pub const NOT_UNDERSTOOD: &str = "NotUnderstood";

/// How the negotiated value follows from the offer and the answer (RFC 7143 section 6.2).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Rule {
    /// The responder picks the first value of the originator's list that it supports.
    List,
    /// Numerical: the smaller of the two values.
    Min,
    /// Numerical: the larger of the two values.
    Max,
    /// Boolean: `Yes` only if both sides say `Yes`.
    And,
    /// Boolean: `Yes` if either side says `Yes`.
    Or,
    /// Each side declares a value; nothing is agreed and no answer is sent.
    Declarative,
    /// An RFC 3720 key obsoleted by RFC 7143 section 13.25; always answered with this constant.
    Obsolete(&'static str),
}

/// The value syntax of a key (RFC 7143 section 6.1).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ValueType {
    /// `Yes` or `No`.
    Boolean,
    /// A numerical value, decimal or `0x` hex.
    Number,
    /// A list of the given enumerated values (comma separated).
    Enum(&'static [&'static str]),
    /// A list of numbers (CHAP_A).
    NumberList,
    /// UTF-8 text (names, aliases, addresses).
    Text,
    /// A binary value, `0x` hex or `0b` base64 (CHAP_C, CHAP_R).
    Binary,
}

/// Who may send a key (the "Senders" line of each key in RFC 7143 section 13).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Sender {
    /// Only the initiator.
    Initiator,
    /// Only the target.
    Target,
    /// Either side.
    Both,
}

/// Where a key may be used (the "Use" line of each key in RFC 7143 section 13).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Phase {
    /// LO, and only on the leading connection of a session ("session-wide" keys).
    LeadingLogin,
    /// LO: any login, leading or not (connection keys such as the digests).
    Login,
    /// Only in the security stage of a login (AuthMethod, CHAP_*; section 12).
    Security,
    /// FFPO: only in full feature phase (SendTargets).
    FullFeature,
    /// ALL: login or full feature phase.
    Any,
}

/// Session types for which a key is relevant.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Sessions {
    /// Normal and discovery sessions.
    Both,
    /// Only normal sessions: "Irrelevant when: SessionType=Discovery".
    NormalOnly,
}

/// Who acts on a key.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Handler {
    /// The [`Negotiator`](super::Negotiator) (operational keys).
    Negotiator,
    /// The login state machine (identity and security keys).
    Login,
    /// The discovery/text layer in full feature phase (SendTargets).
    Text,
}

/// Every key of the table, in table order: the way code names a key.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub enum KeyId {
    /// The authentication method (section 12.1).
    AuthMethod,
    /// The CHAP algorithm (section 12.1.3).
    ChapA,
    /// The CHAP identifier (section 12.1.3).
    ChapI,
    /// The CHAP challenge (section 12.1.3).
    ChapC,
    /// The CHAP name (section 12.1.3).
    ChapN,
    /// The CHAP response (section 12.1.3).
    ChapR,
    /// The header digest (section 13.1).
    HeaderDigest,
    /// The data digest (section 13.1).
    DataDigest,
    /// The most connections per session (section 13.2).
    MaxConnections,
    /// The discovery request (section 13.3).
    SendTargets,
    /// The target's iSCSI name (section 13.4).
    TargetName,
    /// The initiator's iSCSI name (section 13.5).
    InitiatorName,
    /// The target's alias (section 13.6).
    TargetAlias,
    /// The initiator's alias (section 13.7).
    InitiatorAlias,
    /// A target address (section 13.8).
    TargetAddress,
    /// The target portal group tag (section 13.9).
    TargetPortalGroupTag,
    /// Whether unsolicited Data-Out waits for an R2T (section 13.10).
    InitialR2T,
    /// Whether commands may carry data (section 13.11).
    ImmediateData,
    /// The most data a side receives per PDU (section 13.12).
    MaxRecvDataSegmentLength,
    /// The most data per sequence (section 13.13).
    MaxBurstLength,
    /// The most unsolicited data per command (section 13.14).
    FirstBurstLength,
    /// The wait before logging in again (section 13.15).
    DefaultTime2Wait,
    /// How long task state is kept after a connection loss (section 13.16).
    DefaultTime2Retain,
    /// The most R2Ts in flight per task (section 13.17).
    MaxOutstandingR2T,
    /// Whether the Data PDUs of a sequence arrive in order (section 13.18).
    DataPduInOrder,
    /// Whether data sequences arrive in order (section 13.19).
    DataSequenceInOrder,
    /// The error recovery level (section 13.20).
    ErrorRecoveryLevel,
    /// Discovery or normal session (section 13.21).
    SessionType,
    /// Task reporting semantics (section 13.23).
    TaskReporting,
    /// The iSCSI protocol level (section 13.24).
    ProtocolLevel,
    /// The node architecture extension key (section 13.26).
    NodeArchitecture,
    /// Output markers, obsolete (section 13.25).
    OfMarker,
    /// Input markers, obsolete (section 13.25).
    IfMarker,
    /// The output marker interval, obsolete (section 13.25).
    OfMarkInt,
    /// The input marker interval, obsolete (section 13.25).
    IfMarkInt,
}

/// One key of the table.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct KeyDef {
    /// How code names the key; `KEYS[id as usize]` is this entry.
    pub id: KeyId,
    /// The key name, case-sensitive.
    pub name: &'static str,
    /// Value syntax.
    pub value: ValueType,
    /// Result rule.
    pub rule: Rule,
    /// Valid numeric range, for [`ValueType::Number`] keys.
    pub range: Option<RangeInclusive<u64>>,
    /// Who may send it.
    pub sender: Sender,
    /// Where it may be used.
    pub phase: Phase,
    /// Which session types it applies to.
    pub sessions: Sessions,
    /// Which component acts on it.
    pub handler: Handler,
    /// The RFC 7143 section defining it.
    pub section: &'static str,
}

const DIGESTS: &[&str] = &["CRC32C", "None"];
const AUTH_METHODS: &[&str] = &["CHAP", "None", "KRB5", "SRP", "SPKM1", "SPKM2"];
const SESSION_TYPES: &[&str] = &["Discovery", "Normal"];
const TASK_REPORTING: &[&str] = &["RFC3720", "ResponseFence", "FastAbort"];
const LEN_RANGE: Option<RangeInclusive<u64>> = Some(512..=16_777_215);

macro_rules! key {
    ($id:ident, $name:literal, $value:expr, $rule:expr, $range:expr, $sender:ident, $phase:ident,
     $sessions:ident, $handler:ident, $section:literal) => {
        KeyDef {
            id: KeyId::$id,
            name: $name,
            value: $value,
            rule: $rule,
            range: $range,
            sender: Sender::$sender,
            phase: Phase::$phase,
            sessions: Sessions::$sessions,
            handler: Handler::$handler,
            section: $section,
        }
    };
}

use Rule::{And, Declarative, List, Max, Min, Or};
use ValueType::{Binary, Boolean, Enum, Number, NumberList, Text};

/// Every key of RFC 7143 sections 12 and 13 (plus the obsoleted RFC 3720 marker keys).
#[rustfmt::skip]
pub const KEYS: &[KeyDef] = &[
    // Section 12: security keys, exchanged only in the security stage.
    key!(AuthMethod, "AuthMethod", Enum(AUTH_METHODS), List, None, Both, Security, Both, Login, "12.1"),
    key!(ChapA, "CHAP_A", NumberList, List, None, Both, Security, Both, Login, "12.1.3"),
    key!(ChapI, "CHAP_I", Number, Declarative, Some(0..=255), Both, Security, Both, Login, "12.1.3"),
    key!(ChapC, "CHAP_C", Binary, Declarative, None, Both, Security, Both, Login, "12.1.3"),
    key!(ChapN, "CHAP_N", Text, Declarative, None, Both, Security, Both, Login, "12.1.3"),
    key!(ChapR, "CHAP_R", Binary, Declarative, None, Both, Security, Both, Login, "12.1.3"),
    // Section 13: operational and identity keys.
    key!(HeaderDigest, "HeaderDigest", Enum(DIGESTS), List, None, Both, Login, Both, Negotiator, "13.1"),
    key!(DataDigest, "DataDigest", Enum(DIGESTS), List, None, Both, Login, Both, Negotiator, "13.1"),
    key!(MaxConnections, "MaxConnections", Number, Min, Some(1..=65_535), Both, LeadingLogin, NormalOnly, Negotiator, "13.2"),
    key!(SendTargets, "SendTargets", Text, Declarative, None, Initiator, FullFeature, Both, Text, "13.3"),
    key!(TargetName, "TargetName", Text, Declarative, None, Both, Login, Both, Login, "13.4"),
    key!(InitiatorName, "InitiatorName", Text, Declarative, None, Initiator, Login, Both, Login, "13.5"),
    key!(TargetAlias, "TargetAlias", Text, Declarative, None, Target, Any, Both, Login, "13.6"),
    key!(InitiatorAlias, "InitiatorAlias", Text, Declarative, None, Initiator, Any, Both, Login, "13.7"),
    key!(TargetAddress, "TargetAddress", Text, Declarative, None, Target, Any, Both, Login, "13.8"),
    key!(TargetPortalGroupTag, "TargetPortalGroupTag", Number, Declarative, Some(0..=65_535), Target, Login, Both, Login, "13.9"),
    key!(InitialR2T, "InitialR2T", Boolean, Or, None, Both, LeadingLogin, NormalOnly, Negotiator, "13.10"),
    key!(ImmediateData, "ImmediateData", Boolean, And, None, Both, LeadingLogin, NormalOnly, Negotiator, "13.11"),
    key!(MaxRecvDataSegmentLength, "MaxRecvDataSegmentLength", Number, Declarative, LEN_RANGE, Both, Any, Both, Negotiator, "13.12"),
    key!(MaxBurstLength, "MaxBurstLength", Number, Min, LEN_RANGE, Both, LeadingLogin, NormalOnly, Negotiator, "13.13"),
    key!(FirstBurstLength, "FirstBurstLength", Number, Min, LEN_RANGE, Both, LeadingLogin, NormalOnly, Negotiator, "13.14"),
    key!(DefaultTime2Wait, "DefaultTime2Wait", Number, Max, Some(0..=3600), Both, LeadingLogin, Both, Negotiator, "13.15"),
    key!(DefaultTime2Retain, "DefaultTime2Retain", Number, Min, Some(0..=3600), Both, LeadingLogin, Both, Negotiator, "13.16"),
    key!(MaxOutstandingR2T, "MaxOutstandingR2T", Number, Min, Some(1..=65_535), Both, LeadingLogin, NormalOnly, Negotiator, "13.17"),
    key!(DataPduInOrder, "DataPDUInOrder", Boolean, Or, None, Both, LeadingLogin, NormalOnly, Negotiator, "13.18"),
    key!(DataSequenceInOrder, "DataSequenceInOrder", Boolean, Or, None, Both, LeadingLogin, NormalOnly, Negotiator, "13.19"),
    key!(ErrorRecoveryLevel, "ErrorRecoveryLevel", Number, Min, Some(0..=2), Both, LeadingLogin, Both, Negotiator, "13.20"),
    key!(SessionType, "SessionType", Enum(SESSION_TYPES), Declarative, None, Initiator, LeadingLogin, Both, Login, "13.21"),
    key!(TaskReporting, "TaskReporting", Enum(TASK_REPORTING), List, None, Both, LeadingLogin, NormalOnly, Negotiator, "13.23"),
    key!(ProtocolLevel, "iSCSIProtocolLevel", Number, Min, Some(0..=31), Both, LeadingLogin, Both, Negotiator, "13.24"),
    key!(NodeArchitecture, "X#NodeArchitecture", Text, Declarative, None, Both, LeadingLogin, Both, Negotiator, "13.26"),
    // RFC 7143 section 13.25: "When an IFMarker or OFMarker key is received, a compliant iSCSI
    // implementation SHOULD respond with the constant "Reject" value ... When an IFMarkInt or
    // OFMarkInt key is received, a compliant iSCSI implementation MUST respond with the
    // constant "Reject" value."
    key!(OfMarker, "OFMarker", Boolean, Rule::Obsolete(REJECT), None, Both, Login, Both, Negotiator, "13.25"),
    key!(IfMarker, "IFMarker", Boolean, Rule::Obsolete(REJECT), None, Both, Login, Both, Negotiator, "13.25"),
    key!(OfMarkInt, "OFMarkInt", Text, Rule::Obsolete(REJECT), None, Both, Login, Both, Negotiator, "13.25"),
    key!(IfMarkInt, "IFMarkInt", Text, Rule::Obsolete(REJECT), None, Both, Login, Both, Negotiator, "13.25"),
];

// `KeyId::def` indexes the table by id: every entry must sit at its id's position.
const _: () = {
    let mut i = 0;
    while i < KEYS.len() {
        assert!(KEYS[i].id as usize == i, "KEYS is out of KeyId order");
        i += 1;
    }
    assert!(
        KEYS.len() == KeyId::IfMarkInt as usize + 1,
        "a KeyId has no entry"
    );
};

/// Finds a key by its exact (case-sensitive) name: the one way from a key name, read from
/// the wire or given by a user, to its entry.
pub fn lookup(name: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|k| k.name == name)
}

impl KeyId {
    /// The key's entry in [`KEYS`].
    pub fn def(self) -> &'static KeyDef {
        &KEYS[self as usize]
    }

    /// The key name, as sent on the wire.
    pub fn name(self) -> &'static str {
        self.def().name
    }

    /// The valid values of a numerical key (`None` for other keys).
    pub fn range(self) -> Option<RangeInclusive<u64>> {
        self.def().range.clone()
    }

    /// Checks a configured number against the key's range and converts it to the type that
    /// holds the key's values.
    pub fn check_number<T: TryFrom<u64>>(self, value: u64) -> Result<T, KeyValueError> {
        let in_range = self.def().range.as_ref().is_none_or(|r| r.contains(&value));
        match T::try_from(value) {
            Ok(n) if in_range => Ok(n),
            _ => Err(KeyValueError::OutOfRange { key: self, value }),
        }
    }

    /// Parses a configured value of a numerical key (decimal, or `0x` hex as on the wire) and
    /// checks it like [`check_number`](Self::check_number).
    pub fn parse_number<T: TryFrom<u64>>(self, value: &str) -> Result<T, KeyValueError> {
        if self.def().value != ValueType::Number {
            return Err(self.syntax_error(value));
        }
        let n = parse_number(value).ok_or_else(|| self.syntax_error(value))?;
        self.check_number(n)
    }

    /// Parses a configured value of a boolean key (`Yes` or `No`).
    pub fn parse_bool(self, value: &str) -> Result<bool, KeyValueError> {
        if self.def().value != ValueType::Boolean {
            return Err(self.syntax_error(value));
        }
        parse_bool(value).ok_or_else(|| self.syntax_error(value))
    }

    /// The pair `key=value`, named as the table names the key.
    pub fn pair(self, value: impl Into<String>) -> (String, String) {
        (self.name().to_owned(), value.into())
    }

    /// The value of the first pair of this key among `pairs`.
    pub fn find_in(self, pairs: &[(String, String)]) -> Option<&str> {
        pairs
            .iter()
            .find(|(k, _)| k == self.name())
            .map(|(_, v)| v.as_str())
    }

    fn syntax_error(self, value: &str) -> KeyValueError {
        KeyValueError::Syntax {
            key: self,
            value: value.to_owned(),
        }
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A configured value the key table refuses.
#[derive(Clone, Debug, Eq, PartialEq)]
#[non_exhaustive]
pub enum KeyValueError {
    /// A number outside the key's range (RFC 7143 section 13).
    OutOfRange {
        /// The key.
        key: KeyId,
        /// The value given.
        value: u64,
    },
    /// A value not of the key's type (RFC 7143 section 6.1): not a number, not `Yes`/`No`.
    Syntax {
        /// The key.
        key: KeyId,
        /// The value given.
        value: String,
    },
    /// A key that is not one of the operational values a side chooses (an identity or
    /// security key, or one answered by a fixed rule).
    NotSettable {
        /// The key.
        key: KeyId,
    },
}

impl KeyValueError {
    /// The key whose value was refused.
    pub fn key(&self) -> KeyId {
        match self {
            KeyValueError::OutOfRange { key, .. }
            | KeyValueError::Syntax { key, .. }
            | KeyValueError::NotSettable { key } => *key,
        }
    }
}

impl fmt::Display for KeyValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyValueError::OutOfRange { key, value } => {
                write!(f, "{key} = {value} is outside ")?;
                match key.def().range.as_ref() {
                    Some(r) => write!(f, "{}..={}", r.start(), r.end())?,
                    None => f.write_str("its range")?,
                }
                write!(f, " (RFC 7143 section {})", key.def().section)
            }
            KeyValueError::Syntax { key, value } => {
                let expected = match key.def().value {
                    ValueType::Boolean => "Yes or No",
                    ValueType::Number => "a number (decimal or 0x hex)",
                    _ => "a value of its type",
                };
                write!(
                    f,
                    "{key} = {value:?}: expected {expected} (RFC 7143 section {})",
                    key.def().section
                )
            }
            KeyValueError::NotSettable { key } => write!(
                f,
                "{key} is not an operational value to choose (RFC 7143 section {})",
                key.def().section
            ),
        }
    }
}

impl std::error::Error for KeyValueError {}

/// Whether a key is a private (`X-`) or public (`X#`) extension key (RFC 7143 sections 13.22
/// and 6.1). Those not in the table are answered `NotUnderstood`.
pub fn is_extension(name: &str) -> bool {
    name.starts_with("X-") || name.starts_with("X#")
}

/// Parses a numerical value: decimal, or `0x`/`0X` hex (RFC 7143 section 6.1).
pub fn parse_number(value: &str) -> Option<u64> {
    if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        if hex.is_empty() || hex.len() > 16 {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// Parses `Yes` / `No`.
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

/// Formats a boolean as `Yes` / `No`.
pub fn format_bool(value: bool) -> &'static str {
    if value {
        "Yes"
    } else {
        "No"
    }
}

impl KeyDef {
    /// Checks a value offered or answered for this key, returning the parsed number for numeric
    /// keys (0 otherwise). `None` means out of range or malformed: answer [`REJECT`].
    pub fn check_value(&self, value: &str) -> Option<u64> {
        match self.value {
            ValueType::Boolean => parse_bool(value).map(u64::from),
            ValueType::Number => {
                let n = parse_number(value)?;
                match &self.range {
                    Some(r) if !r.contains(&n) => None,
                    _ => Some(n),
                }
            }
            ValueType::Enum(_) | ValueType::NumberList => {
                (!value.is_empty() && value.split(',').all(|v| !v.is_empty())).then_some(0)
            }
            ValueType::Text | ValueType::Binary => Some(0),
        }
    }

    /// Whether `sender` may send this key.
    pub fn may_send(&self, from_initiator: bool) -> bool {
        match self.sender {
            Sender::Both => true,
            Sender::Initiator => from_initiator,
            Sender::Target => !from_initiator,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_every_key_once() {
        let names = [
            "AuthMethod",
            "CHAP_A",
            "CHAP_I",
            "CHAP_C",
            "CHAP_N",
            "CHAP_R",
            "HeaderDigest",
            "DataDigest",
            "MaxConnections",
            "SendTargets",
            "TargetName",
            "InitiatorName",
            "TargetAlias",
            "InitiatorAlias",
            "TargetAddress",
            "TargetPortalGroupTag",
            "InitialR2T",
            "ImmediateData",
            "MaxRecvDataSegmentLength",
            "MaxBurstLength",
            "FirstBurstLength",
            "DefaultTime2Wait",
            "DefaultTime2Retain",
            "MaxOutstandingR2T",
            "DataPDUInOrder",
            "DataSequenceInOrder",
            "ErrorRecoveryLevel",
            "SessionType",
            "TaskReporting",
            "iSCSIProtocolLevel",
            "X#NodeArchitecture",
            "OFMarker",
            "IFMarker",
            "OFMarkInt",
            "IFMarkInt",
        ];
        for n in names {
            assert_eq!(KEYS.iter().filter(|k| k.name == n).count(), 1, "{n}");
        }
        assert_eq!(KEYS.len(), names.len());
        assert!(lookup("headerdigest").is_none(), "names are case-sensitive");
        for def in KEYS {
            assert_eq!(def.id.def(), def, "{}", def.name);
            assert_eq!(lookup(def.name).map(|d| d.id), Some(def.id));
            assert_eq!(def.id.to_string(), def.name);
        }
    }

    #[test]
    fn configured_values_are_checked_against_the_table() {
        let k = KeyId::MaxRecvDataSegmentLength;
        assert_eq!(k.check_number::<u32>(8192), Ok(8192));
        assert_eq!(k.parse_number::<u32>("0x2000"), Ok(8192));
        let low = k.parse_number::<u32>("100").unwrap_err();
        assert_eq!(low, KeyValueError::OutOfRange { key: k, value: 100 });
        assert_eq!(
            low.to_string(),
            "MaxRecvDataSegmentLength = 100 is outside 512..=16777215 (RFC 7143 section 13.12)"
        );
        assert!(matches!(
            KeyId::MaxBurstLength.check_number::<u32>(16_777_216),
            Err(KeyValueError::OutOfRange {
                value: 16_777_216,
                ..
            })
        ));
        // The range, not the holding type, is the bound.
        assert!(KeyId::ErrorRecoveryLevel.check_number::<u8>(3).is_err());
        assert!(KeyId::MaxConnections.check_number::<u16>(0).is_err());
        // A holding type too small for a value in range is refused too.
        assert!(KeyId::MaxBurstLength.check_number::<u8>(512).is_err());
        let e = KeyId::InitialR2T.parse_bool("maybe").unwrap_err();
        assert_eq!(
            e,
            KeyValueError::Syntax {
                key: KeyId::InitialR2T,
                value: "maybe".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "InitialR2T = \"maybe\": expected Yes or No (RFC 7143 section 13.10)"
        );
        assert_eq!(KeyId::InitialR2T.parse_bool("No"), Ok(false));
        assert!(KeyId::MaxBurstLength.parse_number::<u32>("1M").is_err());
        assert!(KeyId::InitialR2T.parse_number::<u32>("1").is_err());
        assert!(KeyId::MaxBurstLength.parse_bool("Yes").is_err());
        assert_eq!(
            KeyValueError::NotSettable {
                key: KeyId::TargetName
            }
            .to_string(),
            "TargetName is not an operational value to choose (RFC 7143 section 13.4)"
        );
    }

    #[test]
    fn values_are_checked_against_type_and_range() {
        let mrdsl = lookup("MaxRecvDataSegmentLength").unwrap();
        assert_eq!(mrdsl.check_value("8192"), Some(8192));
        assert_eq!(mrdsl.check_value("0x2000"), Some(8192));
        assert_eq!(mrdsl.check_value("511"), None);
        assert_eq!(mrdsl.check_value("16777216"), None);
        assert_eq!(mrdsl.check_value("-1"), None);
        assert_eq!(mrdsl.check_value("99999999999999999999999"), None);
        let erl = lookup("ErrorRecoveryLevel").unwrap();
        assert_eq!(erl.check_value("3"), None);
        let b = lookup("InitialR2T").unwrap();
        assert_eq!(b.check_value("Yes"), Some(1));
        assert_eq!(b.check_value("yes"), None);
        let l = lookup("HeaderDigest").unwrap();
        assert_eq!(l.check_value("CRC32C,None"), Some(0));
        assert_eq!(l.check_value("CRC32C,,None"), None);
    }

    #[test]
    fn senders_and_extensions() {
        assert!(!lookup("TargetAlias").unwrap().may_send(true));
        assert!(lookup("InitiatorName").unwrap().may_send(true));
        assert!(!lookup("InitiatorName").unwrap().may_send(false));
        assert!(is_extension("X-com.example.foo"));
        assert!(is_extension("X#Whatever"));
        assert!(!is_extension("Xfoo"));
    }
}
