//! The initiator state machine against the target state machine, in memory: both must agree
//! on the negotiated parameters for a matrix of offers and authentication modes.

use super::*;
use crate::text::{DigestKind, OperationalOffer};

fn config(
    target: Option<&str>,
    chap: Option<InitiatorChap>,
    offer: OperationalOffer,
) -> InitiatorConfig {
    InitiatorConfig {
        initiator_name: INITIATOR.into(),
        initiator_alias: Some("host".into()),
        target_name: target.map(str::to_owned),
        isid: Isid([0x80, 0, 0, 0, 0, 9]),
        tsih: Tsih(0),
        cid: 1,
        chap,
        offer,
    }
}

fn initiator_chap(alg: ChapAlgorithm, mutual: bool) -> InitiatorChap {
    InitiatorChap {
        credential: ChapCredential {
            user: INITIATOR.into(),
            secret: ISECRET.to_vec(),
        },
        algorithms: vec![alg],
        mutual: mutual.then(|| ChapCredential {
            user: TARGET.into(),
            secret: TSECRET.to_vec(),
        }),
    }
}

/// Runs a login to completion; returns both outcomes or the initiator's error.
fn run(
    cfg: InitiatorConfig,
    env: &mut Env,
) -> Result<(InitiatorOutcome, LoginOutcome), InitiatorStep> {
    run_login(InitiatorLogin::new(cfg, Itt(5), SeqNum(1), SeqNum(0)), env)
}

/// [`run`] with the initiator's login made.
fn run_login(
    mut ini: InitiatorLogin,
    env: &mut Env,
) -> Result<(InitiatorOutcome, LoginOutcome), InitiatorStep> {
    let mut tgt = TargetLogin::new(SeqNum(1000), 16);
    let mut req = ini.start().map_err(InitiatorStep::Failed)?;
    let mut rng_state = 3u8;
    let mut rng = |buf: &mut [u8]| {
        for b in buf {
            rng_state = rng_state.wrapping_mul(13).wrapping_add(5);
            *b = rng_state;
        }
    };
    for _ in 0..20 {
        let (rsp, target_outcome) = match tgt.handle_request(&req, env) {
            LoginStep::Respond(r) | LoginStep::Fail(r) => (r, None),
            LoginStep::Complete { response, outcome } => (response, Some(outcome)),
        };
        match ini.handle_response(&rsp, &mut rng) {
            InitiatorStep::Send(next) => req = next,
            InitiatorStep::Complete(outcome) => {
                let t = target_outcome.expect("target completed too");
                return Ok((*outcome, *t));
            }
            other => return Err(other),
        }
    }
    panic!("login did not converge");
}

#[test]
fn both_roles_agree_for_a_matrix_of_offers() {
    let initiator_offers = [
        OperationalOffer::default(),
        OperationalOffer {
            header_digest: vec![DigestKind::Crc32c, DigestKind::None],
            data_digest: vec![DigestKind::None, DigestKind::Crc32c],
            initial_r2t: false,
            immediate_data: true,
            max_burst_length: 16_776_192,
            first_burst_length: 262_144,
            max_recv_data_segment_length: 262_144,
            default_time2retain: 0,
            max_outstanding_r2t: 4,
            protocol_level: Some(1),
            ..OperationalOffer::default()
        },
        OperationalOffer {
            immediate_data: false,
            first_burst_length: 4096,
            error_recovery_level: 2,
            ..OperationalOffer::default()
        },
    ];
    let target_offers = [
        OperationalOffer::default(),
        OperationalOffer {
            header_digest: vec![DigestKind::Crc32c, DigestKind::None],
            data_digest: vec![DigestKind::Crc32c],
            initial_r2t: false,
            max_burst_length: 1_048_576,
            first_burst_length: 1_048_576,
            max_recv_data_segment_length: 65_536,
            max_outstanding_r2t: 2,
            default_time2wait: 5,
            ..OperationalOffer::default()
        },
    ];
    let auths: [Option<(ChapAlgorithm, bool)>; 5] = [
        None,
        Some((ChapAlgorithm::Md5, false)),
        Some((ChapAlgorithm::Sha1, true)),
        Some((ChapAlgorithm::Sha256, true)),
        Some((ChapAlgorithm::Sha3_256, false)),
    ];
    for io in &initiator_offers {
        for to in &target_offers {
            for auth in auths {
                let mut policy = match auth {
                    Some((_, mutual)) => chap_policy(mutual),
                    None => TargetLoginPolicy::default(),
                };
                policy.offer = to.clone();
                policy.alias = Some("disk1".into());
                let mut env = Env::new(policy);
                let chap = auth.map(|(alg, mutual)| initiator_chap(alg, mutual));
                let (i, t) = run(config(Some(TARGET), chap, io.clone()), &mut env)
                    .unwrap_or_else(|e| panic!("{auth:?} {io:?} {to:?}: {e:?}"));
                assert_eq!(i.params, t.params, "{auth:?} {io:?} {to:?}");
                assert!(i.params.first_burst_length <= i.params.max_burst_length);
                assert_eq!(i.tsih, t.tsih);
                assert_eq!(i.exp_stat_sn, t.next_stat_sn);
                assert_eq!(i.target_alias.as_deref(), Some("disk1"));
                assert_eq!(i.portal_group_tag, Some(1));
                assert_eq!(t.initiator_alias.as_deref(), Some("host"));
            }
        }
    }
}

#[test]
fn specific_results() {
    let io = OperationalOffer {
        header_digest: vec![DigestKind::Crc32c, DigestKind::None],
        max_recv_data_segment_length: 262_144,
        ..Default::default()
    };
    let to = OperationalOffer {
        header_digest: vec![DigestKind::Crc32c],
        max_burst_length: 65_536,
        max_recv_data_segment_length: 32_768,
        ..Default::default()
    };
    let mut env = Env::new(TargetLoginPolicy {
        offer: to,
        ..Default::default()
    });
    let (i, _) = run(config(Some(TARGET), None, io), &mut env).unwrap();
    assert!(i.params.header_digest && !i.params.data_digest);
    assert_eq!(i.params.max_burst_length, 65_536);
    assert_eq!(i.params.first_burst_length, 65_536);
    assert_eq!(i.params.initiator_max_recv_data_segment_length, 262_144);
    assert_eq!(i.params.target_max_recv_data_segment_length, 32_768);
}

#[test]
fn discovery_pair() {
    let mut env = Env::new(TargetLoginPolicy::default());
    let (i, t) = run(config(None, None, OperationalOffer::default()), &mut env).unwrap();
    assert_eq!(
        (i.session_type, t.session_type),
        (SessionType::Discovery, SessionType::Discovery)
    );
    assert_eq!(i.params, t.params);
}

#[test]
fn initiator_reports_failures_and_redirects() {
    let mut env = Env::new(chap_policy(false));
    let mut chap = initiator_chap(ChapAlgorithm::Md5, false);
    chap.credential.secret = b"wrong-secret-123".to_vec();
    match run(
        config(Some(TARGET), Some(chap), OperationalOffer::default()),
        &mut env,
    ) {
        Err(InitiatorStep::Failed(LoginError::Rejected { status })) => {
            assert_eq!(status, LoginStatus::AUTH_FAILURE)
        }
        other => panic!("{other:?}"),
    }
    // The target refuses to authenticate itself for mutual CHAP with a wrong secret.
    let mut env = Env::new(chap_policy(true));
    let mut chap = initiator_chap(ChapAlgorithm::Md5, true);
    if let Some(m) = chap.mutual.as_mut() {
        m.secret = b"other-target-secret".to_vec();
    }
    assert!(matches!(
        run(
            config(Some(TARGET), Some(chap), OperationalOffer::default()),
            &mut env
        ),
        Err(InitiatorStep::Failed(LoginError::TargetAuthentication(_)))
    ));
    // Same secret both ways is refused locally.
    let mut chap = initiator_chap(ChapAlgorithm::Md5, true);
    if let Some(m) = chap.mutual.as_mut() {
        m.secret = ISECRET.to_vec();
    }
    let mut ini = InitiatorLogin::new(
        config(Some(TARGET), Some(chap), OperationalOffer::default()),
        Itt(1),
        SeqNum(1),
        SeqNum(0),
    );
    assert!(matches!(ini.start(), Err(LoginError::Config(_))));
    // Redirect.
    let mut ini = InitiatorLogin::new(
        config(Some(TARGET), None, OperationalOffer::default()),
        Itt(5),
        SeqNum(1),
        SeqNum(0),
    );
    let req = ini.start().unwrap();
    let rsp = LoginResponse {
        transit: false,
        cont: false,
        csg: req.csg,
        nsg: 0,
        version_max: 0,
        version_active: 0,
        isid: req.isid,
        tsih: Tsih(0),
        itt: req.itt,
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(1),
        status: LoginStatus::MOVED_PERMANENTLY,
        data: encode_pairs(&[("TargetAddress", "[fd00::1]:3260,1")]),
    };
    assert_eq!(
        ini.handle_response(&rsp, &mut |_| {}),
        InitiatorStep::Redirect {
            target_address: "[fd00::1]:3260,1".into(),
            permanent: true
        }
    );
}

#[test]
fn an_answer_outside_the_offer_is_named_in_the_error() {
    let offer = OperationalOffer {
        header_digest: vec![DigestKind::Crc32c],
        ..OperationalOffer::default()
    };
    let mut ini = InitiatorLogin::new(
        config(Some(TARGET), None, offer),
        Itt(5),
        SeqNum(1),
        SeqNum(0),
    );
    let req = ini.start().unwrap();
    // A target that does not do digests answers None to an initiator that offered only
    // CRC32C (RFC 7143 section 13.1): a failed negotiation, which names the answer.
    let rsp = LoginResponse {
        transit: true,
        cont: false,
        csg: req.csg,
        nsg: 3,
        version_max: 0,
        version_active: 0,
        isid: req.isid,
        tsih: Tsih(7),
        itt: req.itt,
        stat_sn: SeqNum(0),
        exp_cmd_sn: SeqNum(1),
        max_cmd_sn: SeqNum(1),
        status: LoginStatus::SUCCESS,
        data: encode_pairs(&[("HeaderDigest", "None")]),
    };
    match ini.handle_response(&rsp, &mut |_| {}) {
        InitiatorStep::Failed(e @ LoginError::Negotiation(_)) => assert_eq!(
            e.to_string(),
            "target negotiation error: invalid answer HeaderDigest=None"
        ),
        other => panic!("{other:?}"),
    }
}

/// A login that joins a session (MC/S, TSIH set) negotiates the connection-only keys alone:
/// the leading-only ones are irrelevant on it (RFC 7143 section 13, "LO"). Both outcomes
/// still carry what holds on the connection, the session's values, not the defaults the
/// login's own negotiation leaves.
#[test]
fn a_joining_logins_outcome_carries_the_sessions_leading_only_keys() {
    let session = crate::params::SessionParams {
        max_connections: 2,
        initial_r2t: false,
        immediate_data: false,
        max_burst_length: 1_048_576,
        first_burst_length: 32768,
        default_time2wait: 5,
        max_outstanding_r2t: 4,
        error_recovery_level: 1,
        ..crate::params::SessionParams::default()
    };
    let offer = OperationalOffer {
        header_digest: vec![DigestKind::Crc32c],
        max_recv_data_segment_length: 65536,
        initial_r2t: false,
        first_burst_length: 32768,
        error_recovery_level: 1,
        ..OperationalOffer::default()
    };
    let joining_config = || InitiatorConfig {
        tsih: Tsih(7),
        ..config(Some(TARGET), None, offer.clone())
    };
    let mut policy = TargetLoginPolicy::default();
    policy.offer.header_digest = vec![DigestKind::Crc32c, DigestKind::None];
    policy.offer.error_recovery_level = 1;

    // Without the session's values: the defaults, as before.
    let mut env = Env::new(policy.clone());
    let (i, t) = run(joining_config(), &mut env).expect("join");
    assert_eq!(
        (i.params.first_burst_length, t.params.error_recovery_level),
        (65536, 0)
    );

    let mut env = Env::new(policy);
    env.session = Some(session);
    let ini = InitiatorLogin::new(joining_config(), Itt(5), SeqNum(1), SeqNum(0)).joining(session);
    let (i, t) = run_login(ini, &mut env).expect("join");
    let want = crate::params::SessionParams {
        header_digest: true,
        initiator_max_recv_data_segment_length: 65536,
        target_max_recv_data_segment_length: t.params.target_max_recv_data_segment_length,
        ..session
    };
    assert_eq!(i.params, want);
    assert_eq!(t.params, want);
    assert_eq!(env.bound[0].tsih, Tsih(7));
}
