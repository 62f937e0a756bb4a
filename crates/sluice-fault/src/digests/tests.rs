//! Digest tracking: logins run by sluice-proto's own initiator and target state machines, as
//! encoded on the wire, must teach the tracker what both ends negotiated; hand-built exchanges
//! cover text split with the C bit, target-originated offers and failed logins.

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::{encode, Digests};
use sluice_proto::login::{
    InitiatorConfig, InitiatorLogin, InitiatorStep, LoginStatus, LoginStep, SessionBinding,
    TargetLogin, TargetLoginEnv, TargetLoginPolicy,
};
use sluice_proto::pdu::{LoginRequest, LoginResponse, Pdu, Stage};
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::{encode_pairs, DigestKind, OperationalOffer};

use super::*;

/// A target with one policy for every name, and discovery.
struct Env(TargetLoginPolicy);

impl TargetLoginEnv for Env {
    fn target(&self, _name: &str) -> Option<TargetLoginPolicy> {
        Some(self.0.clone())
    }
    fn discovery_policy(&self) -> TargetLoginPolicy {
        self.0.clone()
    }
    fn random_bytes(&mut self, buf: &mut [u8]) {
        buf.fill(0x5a);
    }
    fn bind_session(&mut self, _binding: &SessionBinding) -> Result<Tsih, LoginStatus> {
        Ok(Tsih(1))
    }
}

fn wire(pdu: Pdu) -> BytesMut {
    let mut out = BytesMut::new();
    encode(&pdu, Digests::NONE, &mut out);
    out
}

/// Runs a real login, feeding every PDU to a tracker as the proxy would; returns what the
/// tracker learned and what the initiator negotiated.
fn login(initiator: &[DigestKind], target: &[DigestKind], discovery: bool) -> (Digests, Digests) {
    let offer = |d: &[DigestKind]| OperationalOffer {
        header_digest: d.to_vec(),
        data_digest: d.iter().rev().copied().collect(),
        ..OperationalOffer::default()
    };
    let config = InitiatorConfig {
        initiator_name: "iqn.2026-11.io.sluice:initiator".into(),
        initiator_alias: None,
        target_name: (!discovery).then(|| "iqn.2026-11.io.sluice:test".into()),
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(0),
        cid: 0,
        chap: None,
        offer: offer(initiator),
    };
    let mut env = Env(TargetLoginPolicy {
        offer: offer(target),
        ..TargetLoginPolicy::default()
    });
    let mut ini = InitiatorLogin::new(config, Itt(1), SeqNum(1), SeqNum(0));
    let mut tgt = TargetLogin::new(SeqNum(100), 16);
    let mut tracker = DigestTracker::new();
    let mut req = ini.start().unwrap();
    for _ in 0..20 {
        tracker
            .observe(&wire(Pdu::LoginRequest(req.clone())))
            .unwrap();
        assert_eq!(tracker.digests(), Digests::NONE, "none during login");
        let rsp = match tgt.handle_request(&req, &mut env) {
            LoginStep::Respond(r) | LoginStep::Fail(r) => r,
            LoginStep::Complete { response, .. } => response,
        };
        tracker
            .observe(&wire(Pdu::LoginResponse(rsp.clone())))
            .unwrap();
        match ini.handle_response(&rsp, &mut |b: &mut [u8]| b.fill(1)) {
            InitiatorStep::Send(next) => req = next,
            InitiatorStep::Complete(outcome) => {
                assert!(tracker.in_full_feature_phase());
                return (tracker.digests(), Digests::negotiated(&outcome.params));
            }
            other => panic!("login failed: {other:?}"),
        }
    }
    panic!("login did not converge");
}

#[test]
fn real_logins_teach_the_negotiated_digests() {
    use DigestKind::{Crc32c, None as Off};
    let offers: [&[DigestKind]; 4] = [&[Off], &[Crc32c], &[Crc32c, Off], &[Off, Crc32c]];
    let mut seen = std::collections::HashSet::new();
    for initiator in offers {
        for target in offers {
            for discovery in [false, true] {
                let (learned, negotiated) = login(initiator, target, discovery);
                assert_eq!(
                    learned, negotiated,
                    "initiator {initiator:?}, target {target:?}, discovery {discovery}"
                );
                seen.insert(learned);
            }
        }
    }
    // The matrix reaches every combination, so the comparison above means something.
    assert_eq!(seen.len(), 4, "{seen:?}");
}

fn request(pairs: &[(&str, &str)], cont: bool, transit: bool) -> Pdu {
    Pdu::LoginRequest(LoginRequest {
        transit,
        cont,
        csg: Stage::Operational.code(),
        nsg: if transit {
            Stage::FullFeature.code()
        } else {
            0
        },
        version_max: 0,
        version_min: 0,
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(0),
        itt: Itt(1),
        cid: 0,
        cmd_sn: SeqNum(1),
        exp_stat_sn: SeqNum(0),
        data: encode_pairs(pairs),
    })
}

fn response(data: Bytes, cont: bool, transit: bool, status: LoginStatus) -> Pdu {
    Pdu::LoginResponse(LoginResponse {
        transit,
        cont,
        csg: Stage::Operational.code(),
        nsg: if transit {
            Stage::FullFeature.code()
        } else {
            0
        },
        version_max: 0,
        version_active: 0,
        isid: Isid([0x80, 0, 0, 0, 0, 1]),
        tsih: Tsih(1),
        itt: Itt(1),
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(1),
        status,
        data,
    })
}

#[test]
fn an_answer_split_over_several_responses_is_reassembled() {
    let mut t = DigestTracker::new();
    t.observe(&wire(request(
        &[("HeaderDigest", "CRC32C,None"), ("DataDigest", "CRC32C")],
        false,
        true,
    )))
    .unwrap();
    // The answer is cut in the middle of a key: only the reassembled text can be read.
    let text = encode_pairs(&[("HeaderDigest", "CRC32C"), ("DataDigest", "CRC32C")]);
    let (a, b) = text.split_at(17);
    t.observe(&wire(response(
        Bytes::copy_from_slice(a),
        true,
        false,
        LoginStatus::SUCCESS,
    )))
    .unwrap();
    assert!(!t.in_full_feature_phase());
    t.observe(&wire(response(
        Bytes::copy_from_slice(b),
        false,
        true,
        LoginStatus::SUCCESS,
    )))
    .unwrap();
    assert_eq!(t.digests(), Digests::BOTH);
}

#[test]
fn a_digest_the_target_offers_is_settled_by_the_initiators_answer() {
    let mut t = DigestTracker::new();
    t.observe(&wire(request(&[("MaxConnections", "1")], false, false)))
        .unwrap();
    // The target offers; the value it sends is not an answer.
    t.observe(&wire(response(
        encode_pairs(&[("HeaderDigest", "CRC32C"), ("DataDigest", "CRC32C")]),
        false,
        false,
        LoginStatus::SUCCESS,
    )))
    .unwrap();
    t.observe(&wire(request(
        &[("HeaderDigest", "CRC32C"), ("DataDigest", "None")],
        false,
        true,
    )))
    .unwrap();
    t.observe(&wire(response(
        Bytes::new(),
        false,
        true,
        LoginStatus::SUCCESS,
    )))
    .unwrap();
    assert_eq!(
        t.digests(),
        Digests {
            header: true,
            data: false
        }
    );
}

#[test]
fn a_failed_login_leaves_the_digests_off() {
    let mut t = DigestTracker::new();
    t.observe(&wire(request(&[("HeaderDigest", "CRC32C")], false, true)))
        .unwrap();
    let answer = encode_pairs(&[("HeaderDigest", "CRC32C")]);
    t.observe(&wire(response(
        answer.clone(),
        false,
        true,
        LoginStatus::AUTH_FAILURE,
    )))
    .unwrap();
    assert!(!t.in_full_feature_phase());
    assert_eq!(t.digests(), Digests::NONE);
    // A Reject answer is no digest either.
    let mut t = DigestTracker::new();
    t.observe(&wire(request(&[("DataDigest", "CRC32C")], false, true)))
        .unwrap();
    t.observe(&wire(response(
        encode_pairs(&[("DataDigest", "Reject")]),
        false,
        true,
        LoginStatus::SUCCESS,
    )))
    .unwrap();
    assert_eq!(t.digests(), Digests::NONE);
    assert!(t.in_full_feature_phase());
}

#[test]
fn unreadable_login_text_is_reported() {
    let mut t = DigestTracker::new();
    let bad = response(
        Bytes::from_static(b"no equals sign\0"),
        false,
        false,
        LoginStatus::SUCCESS,
    );
    assert!(matches!(t.observe(&wire(bad)), Err(TrackError::Text(_))));
    assert!(matches!(
        t.observe(&[0x23; 20]),
        Err(TrackError::Malformed(_))
    ));
    // Other opcodes are not read during login, malformed or not.
    assert_eq!(t.observe(&[0x01; 48]), Ok(()));
}
