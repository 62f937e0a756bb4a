//! Scripted-peer tests of [`TargetLogin`] (one Login Request at a time, as open-iscsi's
//! `usr/login.c` and `usr/auth.c` send them), and a fixture environment shared with the pair
//! tests.

use std::collections::HashMap;

use bytes::Bytes;

use super::*;
use crate::chap::{decode_binary, encode_hex, ChapAlgorithm};
use crate::params::SessionType;
use crate::pdu::types::{LoginRequest, LoginResponse};
use crate::seq::{Isid, Itt, SeqNum, Tsih};
use crate::text::codec::{encode_pairs, parse_pairs, TextLimits};

mod pair;

pub(super) const TARGET: &str = "iqn.2024-01.test:target";
pub(super) const INITIATOR: &str = "iqn.2024-01.test:initiator";
pub(super) const ISECRET: &[u8] = b"initiator-secret";
pub(super) const TSECRET: &[u8] = b"target-secret-x";

/// A fixture environment: one target, deterministic "randomness", a counting session table.
pub(super) struct Env {
    pub targets: HashMap<String, TargetLoginPolicy>,
    pub discovery: TargetLoginPolicy,
    pub counter: u8,
    pub bound: Vec<SessionBinding>,
    pub admit: Result<(), LoginStatus>,
    pub bind: Result<Tsih, LoginStatus>,
    /// The parameters of the session a non-leading login joins.
    pub session: Option<crate::params::SessionParams>,
}

impl Env {
    pub fn new(policy: TargetLoginPolicy) -> Self {
        Self {
            targets: HashMap::from([(TARGET.to_owned(), policy)]),
            discovery: TargetLoginPolicy::default(),
            counter: 0,
            bound: Vec::new(),
            admit: Ok(()),
            bind: Ok(Tsih(7)),
            session: None,
        }
    }
}

impl TargetLoginEnv for Env {
    fn target(&self, name: &str) -> Option<TargetLoginPolicy> {
        self.targets.get(name).cloned()
    }
    fn discovery_policy(&self) -> TargetLoginPolicy {
        self.discovery.clone()
    }
    fn random_bytes(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.counter = self.counter.wrapping_mul(31).wrapping_add(7);
            *b = self.counter;
        }
    }
    fn admit(&mut self, _binding: &SessionBinding) -> Result<(), LoginStatus> {
        self.admit
    }
    fn bind_session(&mut self, binding: &SessionBinding) -> Result<Tsih, LoginStatus> {
        self.bound.push(binding.clone());
        self.bind
    }
    fn session_params(&self, _tsih: Tsih) -> Option<crate::params::SessionParams> {
        self.session
    }
}

pub(super) fn chap_policy(mutual: bool) -> TargetLoginPolicy {
    let mut chap = ChapSecrets::one_way(INITIATOR, ISECRET);
    if mutual {
        chap.mutual = Some(ChapCredential {
            user: TARGET.into(),
            secret: TSECRET.to_vec(),
        });
    }
    TargetLoginPolicy {
        chap: Some(chap),
        ..TargetLoginPolicy::default()
    }
}

const ISID: Isid = Isid([0x00, 0x02, 0x3d, 0, 0, 1]);

/// The template request; tests change only what matters.
fn req(csg: u8, nsg: u8, transit: bool, keys: &[(&str, &str)]) -> LoginRequest {
    LoginRequest {
        transit,
        cont: false,
        csg,
        nsg,
        version_max: 0,
        version_min: 0,
        isid: ISID,
        tsih: Tsih(0),
        itt: Itt(1),
        cid: 0,
        cmd_sn: SeqNum(10),
        exp_stat_sn: SeqNum(0),
        data: if keys.is_empty() {
            Bytes::new()
        } else {
            encode_pairs(keys)
        },
    }
}

const OPEN_ISCSI_OPS: &[(&str, &str)] = &[
    ("HeaderDigest", "None"),
    ("DataDigest", "None"),
    ("DefaultTime2Wait", "2"),
    ("DefaultTime2Retain", "0"),
    ("IFMarker", "No"),
    ("OFMarker", "No"),
    ("ErrorRecoveryLevel", "0"),
    ("InitialR2T", "No"),
    ("ImmediateData", "Yes"),
    ("MaxBurstLength", "16776192"),
    ("FirstBurstLength", "262144"),
    ("MaxOutstandingR2T", "1"),
    ("MaxConnections", "1"),
    ("DataPDUInOrder", "Yes"),
    ("DataSequenceInOrder", "Yes"),
    ("MaxRecvDataSegmentLength", "262144"),
];

fn identity() -> Vec<(&'static str, &'static str)> {
    vec![
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
    ]
}

fn keys_of(rsp: &LoginResponse) -> HashMap<String, String> {
    parse_pairs(&rsp.data, &TextLimits::LOGIN)
        .unwrap()
        .into_iter()
        .collect()
}

fn respond(step: LoginStep) -> LoginResponse {
    match step {
        LoginStep::Respond(r) => r,
        other => panic!("expected Respond, got {other:?}"),
    }
}

fn fail_status(step: LoginStep) -> LoginStatus {
    match step {
        LoginStep::Fail(r) => {
            assert!(!r.transit && r.data.is_empty());
            r.status
        }
        other => panic!("expected Fail, got {other:?}"),
    }
}

#[test]
fn no_auth_login_in_one_round_trip() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let mut login = TargetLogin::new(SeqNum(100), 32);
    let mut keys = identity();
    keys.extend_from_slice(OPEN_ISCSI_OPS);
    keys.push(("X-com.example.Vendor", "1"));
    let LoginStep::Complete { response, outcome } =
        login.handle_request(&req(1, 3, true, &keys), &mut env)
    else {
        panic!("expected completion");
    };
    assert!(response.transit && !response.cont);
    assert_eq!(
        (response.csg, response.nsg, response.version_active),
        (1, 3, 0)
    );
    assert_eq!(
        (response.stat_sn, response.exp_cmd_sn, response.max_cmd_sn),
        (SeqNum(100), SeqNum(10), SeqNum(41))
    );
    assert_eq!(
        (response.isid, response.itt, response.tsih),
        (ISID, Itt(1), Tsih(7))
    );
    let k = keys_of(&response);
    assert_eq!(k["TargetPortalGroupTag"], "1");
    assert_eq!(k["ErrorRecoveryLevel"], "0");
    assert_eq!(k["MaxConnections"], "1");
    assert_eq!(k["IFMarker"], "Reject");
    assert_eq!(k["X-com.example.Vendor"], "NotUnderstood");
    assert_eq!(k["MaxBurstLength"], "262144");
    assert_eq!(k["FirstBurstLength"], "65536");
    assert_eq!(k["MaxRecvDataSegmentLength"], "8192");
    assert!(!k.contains_key("iSCSIProtocolLevel") && !k.contains_key("TaskReporting"));
    assert_eq!(outcome.tsih, Tsih(7));
    assert_eq!(outcome.next_stat_sn, SeqNum(101));
    assert_eq!(
        outcome.params.initiator_max_recv_data_segment_length,
        262_144
    );
    // InitialR2T is Or: the target's default Yes wins over the initiator's No.
    assert!(outcome.params.initial_r2t);
    assert_eq!(env.bound.len(), 1);
    assert_eq!(env.bound[0].initiator_name, INITIATOR);
    // Nothing is accepted after completion.
    assert_eq!(
        fail_status(login.handle_request(&req(1, 3, true, &[]), &mut env)),
        LoginStatus::INITIATOR_ERROR
    );
}

/// Drives open-iscsi's CHAP sequence for one algorithm: `AuthMethod=CHAP,None` with T=1 (one-way)
/// or `AuthMethod=CHAP` with T=0 (mutual), then CHAP_A, then CHAP_N and CHAP_R (with CHAP_I and
/// CHAP_C when mutual) with T=1 (`usr/auth.c`).
fn chap_login(
    alg: ChapAlgorithm,
    mutual: bool,
    reflect: bool,
) -> Result<Box<LoginOutcome>, LoginStatus> {
    let mut env = Env::new(chap_policy(mutual));
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.push(("AuthMethod", if mutual { "CHAP" } else { "CHAP,None" }));
    let r1 = respond(login.handle_request(&req(0, 1, !mutual, &keys), &mut env));
    assert!(!r1.transit, "authentication is not complete yet");
    assert_eq!(keys_of(&r1)["AuthMethod"], "CHAP");
    let code = alg.code().to_string();
    let r2 = respond(login.handle_request(
        &req(0, 1, false, &[("CHAP_A", &format!("99,{code}"))]),
        &mut env,
    ));
    let k = keys_of(&r2);
    assert_eq!(k["CHAP_A"], code);
    let id: u8 = k["CHAP_I"].parse().unwrap();
    let challenge = decode_binary(&k["CHAP_C"]).unwrap();
    assert_eq!(challenge.len(), 32);
    let response = encode_hex(&alg.response(id, ISECRET, &challenge));
    let my_challenge = if reflect {
        challenge.clone()
    } else {
        vec![0x5a; 16]
    };
    let mut keys = vec![("CHAP_N", INITIATOR.to_owned()), ("CHAP_R", response)];
    if mutual {
        keys.push(("CHAP_I", "77".into()));
        keys.push(("CHAP_C", encode_hex(&my_challenge)));
    }
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r3 = match login.handle_request(&req(0, 1, true, &keys), &mut env) {
        LoginStep::Fail(r) => return Err(r.status),
        step => respond(step),
    };
    assert!(r3.transit && r3.nsg == 1);
    if mutual {
        let k = keys_of(&r3);
        assert_eq!(k["CHAP_N"], TARGET);
        assert_eq!(
            decode_binary(&k["CHAP_R"]).unwrap(),
            alg.response(77, TSECRET, &my_challenge)
        );
    }
    match login.handle_request(&req(1, 3, true, OPEN_ISCSI_OPS), &mut env) {
        LoginStep::Complete { outcome, .. } => Ok(outcome),
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn one_way_chap_for_every_algorithm() {
    for alg in ChapAlgorithm::ALL {
        let outcome = chap_login(alg, false, false).unwrap();
        assert_eq!(outcome.authenticated_user.as_deref(), Some(INITIATOR));
    }
}

#[test]
fn mutual_chap_for_every_algorithm() {
    for alg in ChapAlgorithm::ALL {
        chap_login(alg, true, false).unwrap();
    }
}

#[test]
fn reflected_challenge_is_refused() {
    assert_eq!(
        chap_login(ChapAlgorithm::Md5, true, true).unwrap_err(),
        LoginStatus::AUTH_FAILURE
    );
}

#[test]
fn same_secret_for_both_directions_is_refused() {
    let mut policy = chap_policy(true);
    if let Some(chap) = policy.chap.as_mut() {
        chap.mutual = Some(ChapCredential {
            user: TARGET.into(),
            secret: ISECRET.to_vec(),
        });
    }
    let mut env = Env::new(policy);
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.push(("AuthMethod", "CHAP"));
    keys.push(("CHAP_A", "5"));
    let k = keys_of(&respond(
        login.handle_request(&req(0, 1, false, &keys), &mut env),
    ));
    let challenge = decode_binary(&k["CHAP_C"]).unwrap();
    let r =
        encode_hex(&ChapAlgorithm::Md5.response(k["CHAP_I"].parse().unwrap(), ISECRET, &challenge));
    let step = login.handle_request(
        &req(
            0,
            1,
            true,
            &[
                ("CHAP_N", INITIATOR),
                ("CHAP_R", &r),
                ("CHAP_I", "1"),
                ("CHAP_C", "0x0102030405060708"),
            ],
        ),
        &mut env,
    );
    assert_eq!(fail_status(step), LoginStatus::AUTH_FAILURE);
}

#[test]
fn bad_chap_response_is_an_authentication_failure() {
    let mut env = Env::new(chap_policy(false));
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.push(("AuthMethod", "CHAP,None"));
    respond(login.handle_request(&req(0, 1, true, &keys), &mut env));
    respond(login.handle_request(&req(0, 1, false, &[("CHAP_A", "5")]), &mut env));
    let bad = encode_hex(&[0u8; 16]);
    let step = login.handle_request(
        &req(0, 1, true, &[("CHAP_N", INITIATOR), ("CHAP_R", &bad)]),
        &mut env,
    );
    assert_eq!(fail_status(step), LoginStatus::AUTH_FAILURE);
}

#[test]
fn auth_required_but_skipped_or_refused() {
    // First PDU at CSG=1 while CHAP is required: what open-iscsi sends when it has no secret
    // configured (it skips the security stage, `usr/login.c`).
    let mut env = Env::new(chap_policy(false));
    let mut keys = identity();
    keys.extend_from_slice(OPEN_ISCSI_OPS);
    let step = TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &keys), &mut env);
    assert_eq!(fail_status(step), LoginStatus::AUTH_FAILURE);
    // AuthMethod=None only.
    let mut keys = identity();
    keys.push(("AuthMethod", "None"));
    let step = TargetLogin::new(SeqNum(1), 8).handle_request(&req(0, 1, true, &keys), &mut env);
    assert_eq!(fail_status(step), LoginStatus::AUTH_FAILURE);
}

#[test]
fn auth_method_none_skips_to_operational_stage() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.push(("AuthMethod", "CHAP,None"));
    let r = respond(login.handle_request(&req(0, 1, true, &keys), &mut env));
    assert!(r.transit && r.csg == 0 && r.nsg == 1);
    assert_eq!(keys_of(&r)["AuthMethod"], "None");
    assert!(matches!(
        login.handle_request(&req(1, 3, true, OPEN_ISCSI_OPS), &mut env),
        LoginStep::Complete { .. }
    ));
}

#[test]
fn discovery_session_needs_no_target_name() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let mut keys = vec![("InitiatorName", INITIATOR), ("SessionType", "Discovery")];
    keys.extend_from_slice(&OPEN_ISCSI_OPS[..7]);
    keys.push(("MaxBurstLength", "65536"));
    let LoginStep::Complete { response, outcome } =
        TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &keys), &mut env)
    else {
        panic!("expected completion");
    };
    let k = keys_of(&response);
    assert_eq!(k["MaxBurstLength"], "Irrelevant");
    assert!(!k.contains_key("TargetPortalGroupTag"));
    assert_eq!(outcome.session_type, SessionType::Discovery);
    assert_eq!(outcome.target_name, None);
}

#[test]
fn identity_and_policy_failures() {
    let cases: Vec<(Vec<(&str, &str)>, LoginStatus)> = vec![
        (vec![("TargetName", TARGET)], LoginStatus::MISSING_PARAMETER),
        (
            vec![("InitiatorName", INITIATOR)],
            LoginStatus::MISSING_PARAMETER,
        ),
        (
            vec![("InitiatorName", INITIATOR), ("TargetName", "iqn.nope:x")],
            LoginStatus::NOT_FOUND,
        ),
        (
            vec![
                ("InitiatorName", INITIATOR),
                ("TargetName", TARGET),
                ("SessionType", "Weird"),
            ],
            LoginStatus::SESSION_TYPE_NOT_SUPPORTED,
        ),
    ];
    for (keys, status) in cases {
        let mut env = Env::new(TargetLoginPolicy::default());
        let step = TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &keys), &mut env);
        assert_eq!(fail_status(step), status, "{keys:?}");
    }
    let acl = TargetLoginPolicy {
        allowed_initiators: Some(vec!["iqn.other:x".into()]),
        ..Default::default()
    };
    let mut env = Env::new(acl);
    let step =
        TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &identity()), &mut env);
    assert_eq!(fail_status(step), LoginStatus::AUTHORIZATION_FAILURE);
}

#[test]
fn header_failures() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let mut r = req(1, 3, true, &identity());
    r.version_min = 1;
    assert_eq!(
        fail_status(TargetLogin::new(SeqNum(1), 8).handle_request(&r, &mut env)),
        LoginStatus::UNSUPPORTED_VERSION
    );
    for (csg, nsg, transit, cont) in [
        (2, 3, true, false),
        (3, 3, true, false),
        (1, 1, true, false),
        (1, 0, true, false),
        (0, 2, true, false),
        (1, 3, true, true),
    ] {
        let mut r = req(csg, nsg, transit, &identity());
        r.cont = cont;
        let step = TargetLogin::new(SeqNum(1), 8).handle_request(&r, &mut env);
        assert_eq!(
            fail_status(step),
            LoginStatus::INITIATOR_ERROR,
            "{csg}->{nsg}"
        );
    }
    // Going back from operational to security.
    let mut login = TargetLogin::new(SeqNum(1), 8);
    respond(login.handle_request(&req(1, 3, false, &identity()), &mut env));
    assert_eq!(
        fail_status(login.handle_request(&req(0, 1, true, &[]), &mut env)),
        LoginStatus::INITIATOR_ERROR
    );
}

#[test]
fn duplicate_keys_and_security_keys_in_operational_stage() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.push(("MaxBurstLength", "65536"));
    respond(login.handle_request(&req(1, 3, false, &keys), &mut env));
    let step = login.handle_request(&req(1, 3, true, &[("MaxBurstLength", "65536")]), &mut env);
    assert_eq!(fail_status(step), LoginStatus::INITIATOR_ERROR);
    let mut keys = identity();
    keys.push(("AuthMethod", "None"));
    let step = TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &keys), &mut env);
    assert_eq!(fail_status(step), LoginStatus::INITIATOR_ERROR);
}

#[test]
fn session_table_refusals() {
    let mut env = Env::new(TargetLoginPolicy::default());
    env.admit = Err(LoginStatus::TOO_MANY_CONNECTIONS);
    let step =
        TargetLogin::new(SeqNum(1), 8).handle_request(&req(1, 3, true, &identity()), &mut env);
    assert_eq!(fail_status(step), LoginStatus::TOO_MANY_CONNECTIONS);
    let mut env = Env::new(TargetLoginPolicy::default());
    env.bind = Err(LoginStatus::SESSION_DOES_NOT_EXIST);
    let mut r = req(1, 3, true, &identity());
    r.tsih = Tsih(42);
    assert_eq!(
        fail_status(TargetLogin::new(SeqNum(1), 8).handle_request(&r, &mut env)),
        LoginStatus::SESSION_DOES_NOT_EXIST
    );
    assert_eq!(env.bound[0].tsih, Tsih(42));
}

#[test]
fn request_continuation_and_long_response_split() {
    let long_alias = "a".repeat(8000);
    let policy = TargetLoginPolicy {
        alias: Some(long_alias.clone()),
        ..Default::default()
    };
    let mut env = Env::new(policy);
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let mut keys = identity();
    keys.extend_from_slice(OPEN_ISCSI_OPS);
    let text = encode_pairs(&keys);
    let mut first = req(1, 3, false, &[]);
    first.cont = true;
    first.data = text.slice(..20);
    let ack = respond(login.handle_request(&first, &mut env));
    assert!(ack.data.is_empty() && !ack.transit);
    let mut rest = req(1, 3, true, &[]);
    rest.data = text.slice(20..);
    let part1 = respond(login.handle_request(&rest, &mut env));
    assert!(part1.cont && !part1.transit && part1.data.len() == LOGIN_SEGMENT_MAX);
    let LoginStep::Complete { response, outcome } =
        login.handle_request(&req(1, 3, true, &[]), &mut env)
    else {
        panic!("expected completion");
    };
    assert!(response.transit && !response.cont);
    let mut all = part1.data.to_vec();
    all.extend_from_slice(&response.data);
    let k: HashMap<_, _> = parse_pairs(&all, &TextLimits::LOGIN)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(k["TargetAlias"], long_alias);
    assert_eq!(outcome.next_stat_sn, SeqNum(4));
}

#[test]
fn target_offers_its_own_values_before_transit() {
    let policy = TargetLoginPolicy {
        offer: crate::text::OperationalOffer {
            max_burst_length: 65_536,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut env = Env::new(policy);
    let mut login = TargetLogin::new(SeqNum(1), 8);
    let r = respond(login.handle_request(&req(1, 3, true, &identity()), &mut env));
    assert!(!r.transit, "the target's offer is unanswered");
    assert_eq!(keys_of(&r)["MaxBurstLength"], "65536");
    // An answer above the offer breaks the Min rule.
    let mut bad = TargetLogin::new(SeqNum(1), 8);
    respond(bad.handle_request(&req(1, 3, true, &identity()), &mut env));
    let step = bad.handle_request(&req(1, 3, true, &[("MaxBurstLength", "262144")]), &mut env);
    assert_eq!(fail_status(step), LoginStatus::INITIATOR_ERROR);
    let LoginStep::Complete { outcome, .. } =
        login.handle_request(&req(1, 3, true, &[("MaxBurstLength", "32768")]), &mut env)
    else {
        panic!("expected completion");
    };
    assert_eq!(outcome.params.max_burst_length, 32_768);
    assert_eq!(outcome.params.first_burst_length, 32_768);
}
