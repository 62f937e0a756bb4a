//! The login keys iSER adds (RFC 7145 section 6.3), declared by the iSER transport rather
//! than written into iSCSI's key table: RDMAExtensions, InitiatorRecvDataSegmentLength,
//! TargetRecvDataSegmentLength and MaxOutstandingUnexpectedPDUs. The transport takes them out
//! of a Login Request before the session's login core sees it and adds its answers to the
//! Login Response, so the core negotiates exactly what it negotiates over TCP.

use crate::text::codec::{encode_pairs, parse_pairs};
use crate::text::TextLimits;
use bytes::Bytes;

/// `RDMAExtensions` (RFC 7145 section 6.3.1): Boolean, AND, leading only.
pub const RDMA_EXTENSIONS: &str = "RDMAExtensions";
/// `TargetRecvDataSegmentLength` (section 6.3.2): the largest data segment the target
/// receives in one Send, declared by the target; default 8192.
pub const TARGET_RECV_DSL: &str = "TargetRecvDataSegmentLength";
/// `InitiatorRecvDataSegmentLength` (section 6.3.3): the largest data segment the initiator
/// receives in one Send, declared by the initiator; default 8192.
pub const INITIATOR_RECV_DSL: &str = "InitiatorRecvDataSegmentLength";
/// `MaxOutstandingUnexpectedPDUs` (section 6.3.4): how many unexpected control-type PDUs
/// (those iSCSI's own flow control does not bound; see [`super::unexpected`]) the declaring
/// side can receive outstanding; 0 means no limit. Declarative and leading-only: there is no
/// result function, each side's value binds what the other sends.
pub const MAX_OUTSTANDING_UNEXPECTED: &str = "MaxOutstandingUnexpectedPDUs";

/// RFC 7145 section 6.3.2/6.3.3: both data segment lengths default to 8192 bytes.
pub const DEFAULT_RECV_DSL: u32 = 8192;
/// The range RFC 7145 gives both data segment lengths: 512 to 2^24-1.
pub const RECV_DSL_RANGE: std::ops::RangeInclusive<u32> = 512..=0x00ff_ffff;

/// The iSER keys one side sent, taken out of its login text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IserKeys {
    /// RDMAExtensions as offered or answered (`None`: not sent).
    pub rdma_extensions: Option<String>,
    /// InitiatorRecvDataSegmentLength.
    pub initiator_recv_dsl: Option<u32>,
    /// TargetRecvDataSegmentLength.
    pub target_recv_dsl: Option<u32>,
    /// MaxOutstandingUnexpectedPDUs.
    pub max_outstanding_unexpected: Option<u32>,
}

/// Why login text cannot be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IserKeyError {
    /// The text is not key=value pairs within the limits.
    #[error("login text: {0}")]
    Text(String),
    /// A length outside RFC 7145's 512..2^24-1, or a number that is not one.
    #[error("{key}={value} is outside RFC 7145's range")]
    Range {
        /// The key.
        key: &'static str,
        /// The value sent.
        value: String,
    },
}

fn length(key: &'static str, value: &str) -> Result<u32, IserKeyError> {
    value
        .parse::<u32>()
        .ok()
        .filter(|v| RECV_DSL_RANGE.contains(v))
        .ok_or_else(|| IserKeyError::Range {
            key,
            value: value.to_owned(),
        })
}

/// Splits login `text` into the iSER keys and the rest (re-encoded, for the login core).
pub fn take_iser_keys(text: &[u8]) -> Result<(IserKeys, Bytes), IserKeyError> {
    let pairs =
        parse_pairs(text, &TextLimits::default()).map_err(|e| IserKeyError::Text(e.to_string()))?;
    let mut keys = IserKeys::default();
    let mut rest = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        // RFC 7143 section 6.2: a peer that does not know a key answers NotUnderstood (or
        // Irrelevant, Reject); that answer carries no value to check.
        let answer_only = matches!(v.as_str(), "NotUnderstood" | "Irrelevant" | "Reject");
        match k.as_str() {
            INITIATOR_RECV_DSL | TARGET_RECV_DSL | MAX_OUTSTANDING_UNEXPECTED if answer_only => {}
            RDMA_EXTENSIONS => keys.rdma_extensions = Some(v),
            INITIATOR_RECV_DSL => keys.initiator_recv_dsl = Some(length(INITIATOR_RECV_DSL, &v)?),
            TARGET_RECV_DSL => keys.target_recv_dsl = Some(length(TARGET_RECV_DSL, &v)?),
            MAX_OUTSTANDING_UNEXPECTED => {
                // RFC 7145 section 6.3.4: 0 or 2..2^32-1.
                let n = v.parse::<u32>().ok().filter(|n| *n != 1).ok_or_else(|| {
                    IserKeyError::Range {
                        key: MAX_OUTSTANDING_UNEXPECTED,
                        value: v.clone(),
                    }
                })?;
                keys.max_outstanding_unexpected = Some(n);
            }
            _ => rest.push((k, v)),
        }
    }
    let rest = if rest.is_empty() {
        Bytes::new()
    } else {
        encode_pairs(&rest)
    };
    Ok((keys, rest))
}

/// Appends `pairs` to login text `text` (key=value pairs, each NUL-terminated).
pub fn append_pairs(text: &[u8], pairs: &[(&str, String)]) -> Bytes {
    let mut out = Vec::with_capacity(text.len() + 96);
    out.extend_from_slice(text);
    out.extend_from_slice(&encode_pairs(pairs));
    Bytes::from(out)
}

/// The value of `key` in login text, if sent.
pub fn find_key(text: &[u8], key: &str) -> Option<String> {
    parse_pairs(text, &TextLimits::default())
        .ok()?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The target's answers to an initiator's iSER offer: RDMAExtensions is a Boolean AND
/// (RFC 7143 section 6.2.1), so the target says Yes only when it serves iSER and the
/// initiator asked for it; with Yes it declares its receive length.
pub fn target_answers(
    offer: &IserKeys,
    serves_iser: bool,
    target_recv_dsl: u32,
    max_unexpected: u32,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(v) = &offer.rdma_extensions {
        let yes = serves_iser && v == "Yes";
        out.push((RDMA_EXTENSIONS, if yes { "Yes" } else { "No" }.to_owned()));
        if yes {
            out.push((TARGET_RECV_DSL, target_recv_dsl.to_string()));
            // RFC 7145 section 6.3.4: declared by both sides, each its own receive
            // buffers beyond what the CmdSN window and FirstBurstLength account for.
            out.push((MAX_OUTSTANDING_UNEXPECTED, max_unexpected.to_string()));
        }
    }
    out
}

/// The initiator's offer: RDMAExtensions=Yes, its receive length and the unexpected PDUs
/// it can receive outstanding.
pub fn initiator_offer(
    initiator_recv_dsl: u32,
    max_unexpected: u32,
) -> Vec<(&'static str, String)> {
    vec![
        (RDMA_EXTENSIONS, "Yes".to_owned()),
        (INITIATOR_RECV_DSL, initiator_recv_dsl.to_string()),
        (MAX_OUTSTANDING_UNEXPECTED, max_unexpected.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iser_keys_are_taken_out_and_the_rest_kept() {
        let text = b"HeaderDigest=None\0RDMAExtensions=Yes\0InitiatorRecvDataSegmentLength=262144\0MaxBurstLength=262144\0";
        let (keys, rest) = take_iser_keys(text).unwrap();
        assert_eq!(keys.rdma_extensions.as_deref(), Some("Yes"));
        assert_eq!(keys.initiator_recv_dsl, Some(262_144));
        assert_eq!(&rest[..], b"HeaderDigest=None\0MaxBurstLength=262144\0");
    }

    #[test]
    fn lengths_outside_the_rfc_range_are_refused() {
        assert!(take_iser_keys(b"TargetRecvDataSegmentLength=511\0").is_err());
        assert!(take_iser_keys(b"TargetRecvDataSegmentLength=16777216\0").is_err());
        assert!(take_iser_keys(b"MaxOutstandingUnexpectedPDUs=1\0").is_err());
        assert!(take_iser_keys(b"MaxOutstandingUnexpectedPDUs=x\0").is_err());
        assert!(take_iser_keys(b"MaxOutstandingUnexpectedPDUs=4294967296\0").is_err());
    }

    #[test]
    fn max_outstanding_unexpected_takes_zero_and_two_up() {
        for (text, n) in [
            (&b"MaxOutstandingUnexpectedPDUs=0\0"[..], 0),
            (b"MaxOutstandingUnexpectedPDUs=2\0", 2),
            (b"MaxOutstandingUnexpectedPDUs=4294967295\0", u32::MAX),
        ] {
            let (keys, rest) = take_iser_keys(text).unwrap();
            assert_eq!(keys.max_outstanding_unexpected, Some(n));
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn each_side_declares_its_own_limit() {
        let offer = initiator_offer(8192, 48);
        assert!(offer.contains(&(MAX_OUTSTANDING_UNEXPECTED, "48".to_owned())));
        let keys = IserKeys {
            rdma_extensions: Some("Yes".into()),
            max_outstanding_unexpected: Some(48),
            ..IserKeys::default()
        };
        // Declarative: the target states its own value, whatever the initiator's was.
        let answers = target_answers(&keys, true, 16384, 300);
        assert!(answers.contains(&(MAX_OUTSTANDING_UNEXPECTED, "300".to_owned())));
        // Irrelevant without RDMAExtensions=Yes: not declared.
        let no = target_answers(&keys, false, 16384, 300);
        assert!(!no.iter().any(|(k, _)| *k == MAX_OUTSTANDING_UNEXPECTED));
    }

    #[test]
    fn rdma_extensions_is_an_and() {
        let offer = IserKeys {
            rdma_extensions: Some("Yes".into()),
            ..IserKeys::default()
        };
        assert_eq!(target_answers(&offer, false, 8192, 0)[0].1, "No");
        let yes = target_answers(&offer, true, 65536, 0);
        assert_eq!(yes[0].1, "Yes");
        assert!(yes.contains(&(TARGET_RECV_DSL, "65536".to_owned())));
        assert!(target_answers(&IserKeys::default(), true, 8192, 0).is_empty());
    }
}

/// Rewrites the values of keys in login text: `f(key, value)` returns a replacement or
/// `None` to keep the pair. Text that does not parse is returned unchanged (the login core
/// refuses it with its own error).
pub fn rewrite_values(text: &Bytes, f: impl Fn(&str, &str) -> Option<String>) -> Bytes {
    let Ok(pairs) = parse_pairs(text, &TextLimits::default()) else {
        return text.clone();
    };
    let mut changed = false;
    let pairs: Vec<(String, String)> = pairs
        .into_iter()
        .map(|(k, v)| match f(&k, &v) {
            Some(new) if new != v => {
                changed = true;
                (k, new)
            }
            _ => (k, v),
        })
        .collect();
    if changed {
        encode_pairs(&pairs)
    } else {
        text.clone()
    }
}

/// The initiator's operational offers as an iSER connection takes them, rewritten before the
/// login core negotiates:
/// - RFC 7145 section 6.3 (iSER-assisted mode): no digests and no markers: RDMA's own CRCs
///   protect the data, and markers have no meaning on an RDMA stream. Offers of them become
///   `None`/`No`.
/// - ErrorRecoveryLevel becomes 0. RFC 7145 allows higher levels, but sluice's datamovers
///   keep a task's advertised buffers only for the task's first issue: a command retried
///   with its ITT at level 1 is given new buffers while the target may still read the old
///   ones, and a task reassigned at level 2 is unknown to its new connection's datamover
///   (both found by the simulator). The level is negotiated as the lower of the two sides'
///   values (RFC 7143 section 13.20), so offering, or answering, 0 is always valid.
pub fn iser_operational_offers(text: &Bytes) -> Bytes {
    rewrite_values(text, |k, _| match k {
        "HeaderDigest" | "DataDigest" => Some("None".to_owned()),
        "IFMarker" | "OFMarker" => Some("No".to_owned()),
        "ErrorRecoveryLevel" => Some("0".to_owned()),
        _ => None,
    })
}

/// Caps a declared MaxRecvDataSegmentLength at `cap`: with iSER a peer's control-type
/// PDUs arrive in Sends whose receive buffers hold `cap` bytes of data segment (RFC 7145
/// section 6.3.2-6.3.3 replace MaxRecvDataSegmentLength with these lengths).
pub fn cap_max_recv(text: &Bytes, cap: u32) -> Bytes {
    cap_number(text, "MaxRecvDataSegmentLength", cap)
}

/// Unsolicited Data-Out PDUs one write may send over iSER at most, beside its command: the
/// target caps FirstBurstLength at this many TargetRecvDataSegmentLengths, so that a full
/// CmdSN window of commands with their unsolicited data fits the receive buffers it posts
/// (RFC 7145 section 7.3.4: immediate and unsolicited data arrive in Sends, each needing a
/// posted receive; a Send that finds none fails the connection).
pub const MAX_UNSOLICITED_SENDS: u32 = 4;

/// Caps an offered FirstBurstLength (a Minimum key, RFC 7143 section 13.14, so lowering an
/// offer or a declaration is always valid) at `cap`.
pub fn cap_first_burst(text: &Bytes, cap: u32) -> Bytes {
    cap_number(text, "FirstBurstLength", cap)
}

fn cap_number(text: &Bytes, key: &str, cap: u32) -> Bytes {
    rewrite_values(text, |k, v| {
        (k == key)
            .then(|| v.parse::<u32>().ok())
            .flatten()
            .filter(|n| *n > cap)
            .map(|_| cap.to_string())
    })
}

#[cfg(test)]
mod rewrite_tests {
    use super::*;

    #[test]
    fn digests_and_markers_are_turned_off() {
        let t = Bytes::from_static(
            b"HeaderDigest=CRC32C,None\0DataDigest=CRC32C\0IFMarker=Yes\0MaxBurstLength=4096\0",
        );
        let out = iser_operational_offers(&t);
        assert_eq!(
            &out[..],
            b"HeaderDigest=None\0DataDigest=None\0IFMarker=No\0MaxBurstLength=4096\0"
        );
    }

    #[test]
    fn error_recovery_level_is_offered_as_zero() {
        let t = Bytes::from_static(b"ErrorRecoveryLevel=2\0InitialR2T=Yes\0");
        assert_eq!(
            &iser_operational_offers(&t)[..],
            b"ErrorRecoveryLevel=0\0InitialR2T=Yes\0"
        );
    }

    #[test]
    fn max_recv_is_capped_never_raised() {
        let t = Bytes::from_static(b"MaxRecvDataSegmentLength=262144\0");
        assert_eq!(
            &cap_max_recv(&t, 16384)[..],
            b"MaxRecvDataSegmentLength=16384\0"
        );
        let small = Bytes::from_static(b"MaxRecvDataSegmentLength=4096\0");
        assert_eq!(cap_max_recv(&small, 16384), small);
    }

    #[test]
    fn first_burst_is_capped_and_irrelevant_left_alone() {
        let t = Bytes::from_static(b"FirstBurstLength=16776192\0MaxBurstLength=16776192\0");
        assert_eq!(
            &cap_first_burst(&t, 65536)[..],
            b"FirstBurstLength=65536\0MaxBurstLength=16776192\0"
        );
        let irrelevant = Bytes::from_static(b"FirstBurstLength=Irrelevant\0");
        assert_eq!(cap_first_burst(&irrelevant, 65536), irrelevant);
    }
}
