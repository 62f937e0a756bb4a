//! One test per rule of the table, plus the context rules (irrelevant, duplicate, reject).

use super::*;

fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn target() -> Negotiator {
    Negotiator::new(
        Role::Target,
        OperationalOffer {
            header_digest: vec![DigestKind::Crc32c, DigestKind::None],
            max_burst_length: 1_048_576,
            first_burst_length: 262_144,
            max_recv_data_segment_length: 262_144,
            ..OperationalOffer::default()
        },
    )
}

#[test]
fn list_picks_first_of_the_originators_list_that_we_support() {
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("HeaderDigest", "None,CRC32C"),
            ("DataDigest", "CRC32C,None"),
        ]))
        .unwrap();
    assert_eq!(a, p(&[("HeaderDigest", "None"), ("DataDigest", "None")]));
    let mut t = target();
    let a = t.respond(&p(&[("HeaderDigest", "CRC32C")])).unwrap();
    assert_eq!(a, p(&[("HeaderDigest", "CRC32C")]));
    assert!(t.result().header_digest);
    let mut t = target();
    assert_eq!(
        t.respond(&p(&[("DataDigest", "CRC32C")])).unwrap(),
        p(&[("DataDigest", "Reject")])
    );
    assert!(!t.result().data_digest);
}

#[test]
fn min_and_max_numbers() {
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("MaxBurstLength", "16776192"),
            ("DefaultTime2Wait", "0"),
            ("DefaultTime2Retain", "0"),
            ("MaxOutstandingR2T", "8"),
        ]))
        .unwrap();
    assert_eq!(
        a,
        p(&[
            ("MaxBurstLength", "1048576"),
            ("DefaultTime2Wait", "2"),
            ("DefaultTime2Retain", "0"),
            ("MaxOutstandingR2T", "1"),
        ])
    );
    let r = t.result();
    assert_eq!(
        (
            r.max_burst_length,
            r.default_time2wait,
            r.default_time2retain
        ),
        (1_048_576, 2, 0)
    );
}

#[test]
fn boolean_and_or() {
    let mut t = Negotiator::new(
        Role::Target,
        OperationalOffer {
            initial_r2t: false,
            immediate_data: true,
            ..OperationalOffer::default()
        },
    );
    let a = t
        .respond(&p(&[
            ("InitialR2T", "No"),
            ("ImmediateData", "No"),
            ("DataPDUInOrder", "No"),
        ]))
        .unwrap();
    assert_eq!(
        a,
        p(&[
            ("InitialR2T", "No"),
            ("ImmediateData", "No"),
            ("DataPDUInOrder", "Yes")
        ])
    );
    let r = t.result();
    assert!(!r.initial_r2t && !r.immediate_data && r.data_pdu_in_order);
}

#[test]
fn declarative_mrdsl_is_per_direction_and_unanswered() {
    let mut t = target();
    assert!(t
        .respond(&p(&[("MaxRecvDataSegmentLength", "65536")]))
        .unwrap()
        .is_empty());
    assert_eq!(
        t.declarations(),
        p(&[("MaxRecvDataSegmentLength", "262144")])
    );
    assert!(t.declarations().is_empty());
    let r = t.result();
    assert_eq!(r.initiator_max_recv_data_segment_length, 65_536);
    assert_eq!(r.target_max_recv_data_segment_length, 262_144);
}

#[test]
fn out_of_range_and_malformed_are_rejected() {
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("MaxRecvDataSegmentLength", "100"),
            ("ErrorRecoveryLevel", "7"),
            ("InitialR2T", "maybe"),
            ("MaxBurstLength", "0x"),
        ]))
        .unwrap();
    assert!(a.iter().all(|(_, v)| v == "Reject"), "{a:?}");
    assert_eq!(
        t.result(),
        SessionParams {
            target_max_recv_data_segment_length: 262_144,
            ..Default::default()
        }
    );
}

#[test]
fn unknown_and_extension_keys_are_not_understood_obsolete_keys_per_13_25() {
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("X-com.example.Foo", "1"),
            ("X#Bar", "1"),
            ("Frobnicate", "1"),
            ("IFMarker", "No"),
            ("OFMarker", "No"),
            ("IFMarkInt", "2048~8192"),
            ("OFMarkInt", "2048"),
        ]))
        .unwrap();
    assert_eq!(
        a,
        p(&[
            ("X-com.example.Foo", "NotUnderstood"),
            ("X#Bar", "NotUnderstood"),
            ("Frobnicate", "NotUnderstood"),
            ("IFMarker", "Reject"),
            ("OFMarker", "Reject"),
            ("IFMarkInt", "Reject"),
            ("OFMarkInt", "Reject"),
        ])
    );
    // X#NodeArchitecture is a declared standard key: recorded, not answered.
    assert!(t
        .respond(&p(&[("X#NodeArchitecture", "Linux")]))
        .unwrap()
        .is_empty());
}

#[test]
fn irrelevant_in_context() {
    let mut t = target();
    t.set_session_type(SessionType::Discovery);
    let a = t
        .respond(&p(&[
            ("MaxBurstLength", "1024"),
            ("MaxConnections", "1"),
            ("ErrorRecoveryLevel", "0"),
        ]))
        .unwrap();
    assert_eq!(
        a,
        p(&[
            ("MaxBurstLength", "Irrelevant"),
            ("MaxConnections", "Irrelevant"),
            ("ErrorRecoveryLevel", "0")
        ])
    );
    // FirstBurstLength with InitialR2T=Yes and ImmediateData=No, even when those come later.
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("FirstBurstLength", "4096"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "No"),
        ]))
        .unwrap();
    assert!(a.contains(&("FirstBurstLength".to_owned(), "Irrelevant".to_owned())));
    // Session-wide keys on a non-leading connection.
    let mut t = target();
    t.set_leading(false);
    assert_eq!(
        t.respond(&p(&[("MaxBurstLength", "4096")])).unwrap(),
        p(&[("MaxBurstLength", "Irrelevant")])
    );
}

#[test]
fn first_burst_never_exceeds_max_burst() {
    let mut t = target();
    let a = t
        .respond(&p(&[
            ("FirstBurstLength", "262144"),
            ("MaxBurstLength", "65536"),
        ]))
        .unwrap();
    assert!(
        a.contains(&("FirstBurstLength".to_owned(), "65536".to_owned())),
        "{a:?}"
    );
    let r = t.result();
    assert_eq!((r.first_burst_length, r.max_burst_length), (65_536, 65_536));
}

#[test]
fn error_recovery_with_sequences_in_order_means_one_outstanding_r2t() {
    let ours = OperationalOffer {
        error_recovery_level: 2,
        max_outstanding_r2t: 8,
        data_sequence_in_order: false,
        ..OperationalOffer::default()
    };
    let offer = |seq_in_order: &str| {
        p(&[
            ("ErrorRecoveryLevel", "1"),
            ("MaxOutstandingR2T", "4"),
            ("DataSequenceInOrder", seq_in_order),
        ])
    };
    // Section 13.19: ErrorRecoveryLevel above 0 and DataSequenceInOrder=Yes: exactly 1.
    let mut t = Negotiator::new(Role::Target, ours.clone());
    t.respond(&offer("Yes")).unwrap();
    let r = t.result();
    assert_eq!((r.error_recovery_level, r.max_outstanding_r2t), (1, 1));
    let mut t = Negotiator::new(Role::Target, ours.clone());
    t.respond(&offer("No")).unwrap();
    assert_eq!(t.result().max_outstanding_r2t, 4);
    let mut t = Negotiator::new(Role::Target, ours);
    t.respond(&p(&[("MaxOutstandingR2T", "4")])).unwrap();
    assert_eq!(
        t.result().max_outstanding_r2t,
        4,
        "at level 0 the rule does not apply"
    );
}

#[test]
fn duplicates_are_detected_across_pdus() {
    let mut t = target();
    t.respond(&p(&[("MaxBurstLength", "65536")])).unwrap();
    assert_eq!(
        t.respond(&p(&[("MaxBurstLength", "65536")])),
        Err(NegotiationError::Duplicate("MaxBurstLength".into()))
    );
    let mut t = target();
    assert!(t
        .respond(&p(&[("HeaderDigest", "None"), ("HeaderDigest", "None")]))
        .is_err());
}

#[test]
fn wrong_sender_and_phase() {
    let mut t = target();
    assert_eq!(
        t.respond(&p(&[("MaxBurstLength", "65536")])).unwrap().len(),
        1
    );
    let mut f = target();
    f.set_full_feature(true);
    assert_eq!(
        f.respond(&p(&[("MaxBurstLength", "65536")])).unwrap(),
        p(&[("MaxBurstLength", "Reject")])
    );
    // MaxRecvDataSegmentLength may be redeclared in full feature phase (Use: ALL).
    assert!(f
        .respond(&p(&[("MaxRecvDataSegmentLength", "65536")]))
        .unwrap()
        .is_empty());
}

#[test]
fn initiator_offers_and_validates_answers() {
    let mut i = Negotiator::new(Role::Initiator, OperationalOffer::default());
    let offers = i.offers();
    assert!(offers
        .iter()
        .any(|(k, v)| k == "MaxBurstLength" && v == "262144"));
    assert!(!offers
        .iter()
        .any(|(k, _)| k == "iSCSIProtocolLevel" || k == "TaskReporting"));
    assert!(i.has_pending());
    assert!(i.offers().is_empty(), "offers are made once");
    // A Min answer above our offer violates the rule.
    let mut bad = i.clone();
    assert!(bad
        .apply_answers(&p(&[("MaxBurstLength", "524288")]))
        .is_err());
    // An And answer of Yes to our No violates it too.
    let mut j = Negotiator::new(
        Role::Initiator,
        OperationalOffer {
            immediate_data: false,
            ..Default::default()
        },
    );
    j.offers();
    assert!(j.apply_answers(&p(&[("ImmediateData", "Yes")])).is_err());
    // Unsolicited answers are errors; apply valid ones.
    assert!(i.clone().apply_answers(&p(&[("Bogus", "1")])).is_err());
    i.apply_answers(&p(&[("MaxBurstLength", "65536"), ("HeaderDigest", "None")]))
        .unwrap();
    assert_eq!(i.result().max_burst_length, 65_536);
}

#[test]
fn target_offers_only_non_default_values_and_discovery_subset() {
    let mut t = target();
    let offers = t.offers();
    assert_eq!(
        offers,
        p(&[
            ("HeaderDigest", "CRC32C,None"),
            ("MaxBurstLength", "1048576"),
            ("FirstBurstLength", "262144")
        ])
    );
    let mut d = Negotiator::new(Role::Initiator, OperationalOffer::default());
    d.set_session_type(SessionType::Discovery);
    let keys: Vec<String> = d.offers().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "HeaderDigest",
            "DataDigest",
            "DefaultTime2Wait",
            "DefaultTime2Retain",
            "ErrorRecoveryLevel"
        ]
    );
}

#[test]
fn set_key_reads_what_offers_write() {
    // Every key an initiator offers, set by name on a default offer, gives back the offer.
    let ours = OperationalOffer {
        header_digest: vec![DigestKind::Crc32c, DigestKind::None],
        data_digest: vec![DigestKind::None, DigestKind::Crc32c],
        max_connections: 4,
        initial_r2t: false,
        immediate_data: false,
        max_recv_data_segment_length: 65_536,
        max_burst_length: 1_048_576,
        first_burst_length: 131_072,
        default_time2wait: 7,
        default_time2retain: 0,
        max_outstanding_r2t: 3,
        data_pdu_in_order: false,
        data_sequence_in_order: false,
        error_recovery_level: 1,
        protocol_level: Some(2),
    };
    let mut i = Negotiator::new(Role::Initiator, ours.clone());
    let mut rebuilt = OperationalOffer::default();
    for (k, v) in i.offers().into_iter().chain(i.declarations()) {
        let def = keys::lookup(&k).unwrap();
        rebuilt.set_key(def.id, &v).unwrap();
    }
    assert_eq!(rebuilt, ours);
}

#[test]
fn set_key_refuses_what_the_table_refuses() {
    let mut o = OperationalOffer::default();
    assert_eq!(
        o.set_key(KeyId::MaxRecvDataSegmentLength, "100"),
        Err(KeyValueError::OutOfRange {
            key: KeyId::MaxRecvDataSegmentLength,
            value: 100
        })
    );
    assert!(o.set_key(KeyId::MaxConnections, "0").is_err());
    assert!(o.set_key(KeyId::ProtocolLevel, "32").is_err());
    assert!(o.set_key(KeyId::InitialR2T, "yes").is_err());
    assert!(o.set_key(KeyId::HeaderDigest, "CRC32C,,None").is_err());
    assert_eq!(
        o.set_key(KeyId::TargetName, "iqn.x"),
        Err(KeyValueError::NotSettable {
            key: KeyId::TargetName
        })
    );
    assert_eq!(
        o,
        OperationalOffer::default(),
        "a refused value changes nothing"
    );
}
