//! Login phase over a raw scripted initiator: success, every refusal status the target can give
//! on a first request, CHAP failure, the login timeout and session reinstatement. A refused
//! login must also close the connection (RFC 7143 section 11.13.5: "the connection MUST be
//! closed" after a status class 2 or 3 response).

mod support;

use std::time::Duration;

use sluice_proto::pdu::Pdu;
use sluice_target::config::{Acl, ChapCredentials, Limits};
use support::*;

fn status(rsp: &sluice_proto::pdu::LoginResponse) -> u16 {
    (u16::from(rsp.status.class) << 8) | u16::from(rsp.status.detail)
}

/// A refused login gets exactly one Login Response with `expected`, then the connection ends
/// and the session table stays empty.
async fn assert_refused(
    h: &Harness,
    peer: &mut Peer,
    rsp: sluice_proto::pdu::LoginResponse,
    expected: u16,
) {
    assert_eq!(status(&rsp), expected, "login status: {rsp:?}");
    assert_eq!(rsp.tsih.0, 0, "a refused login gets no session");
    let after = peer.expect_closed().await;
    assert!(after.is_empty(), "nothing may follow a refusal: {after:?}");
    assert_eq!(h.target.session_count(), 0);
}

#[tokio::test]
async fn normal_login_succeeds_and_reaches_full_feature_phase() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    let outcome = p.login(&LoginOpts::normal()).await.expect("login");
    assert_ne!(outcome.tsih.0, 0, "a new session gets a TSIH");
    assert_eq!(outcome.portal_group_tag, Some(1));
    assert_eq!(h.target.session_count(), 1);
    // Full feature phase: a ping is answered.
    p.assert_alive().await;
}

#[tokio::test]
async fn discovery_login_succeeds() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    p.login(&LoginOpts::discovery()).await.expect("login");
    p.assert_alive().await;
}

#[tokio::test]
async fn unknown_target_is_not_found() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    let rsp = p
        .raw_login(
            &[
                ("InitiatorName", INITIATOR),
                ("TargetName", "iqn.2026-11.io.sluice:nope"),
            ],
            0,
        )
        .await;
    assert_refused(&h, &mut p, rsp, 0x0203).await;
}

#[tokio::test]
async fn missing_initiator_name_is_a_missing_parameter() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    let rsp = p
        .raw_login(&[("TargetName", TARGET), ("SessionType", "Normal")], 0)
        .await;
    assert_refused(&h, &mut p, rsp, 0x0207).await;
}

#[tokio::test]
async fn acl_refusal_is_an_authorization_failure() {
    let mut cfg = config();
    cfg.targets[0].acl = Acl::Allow(vec!["iqn.2026-11.io.sluice.test:someone-else".into()]);
    let h = Harness::new(cfg);
    let (mut p, _task) = h.connect();
    let rsp = p
        .raw_login(&[("InitiatorName", INITIATOR), ("TargetName", TARGET)], 0)
        .await;
    assert_refused(&h, &mut p, rsp, 0x0202).await;
}

#[tokio::test]
async fn acl_compares_initiator_names_case_insensitively() {
    // config.rs: "compared case-insensitively, RFC 3722 stringprep folds case".
    let mut cfg = config();
    cfg.targets[0].acl = Acl::Allow(vec![INITIATOR.to_ascii_uppercase()]);
    let h = Harness::new(cfg);
    let (mut p, _task) = h.connect();
    p.login(&LoginOpts::normal())
        .await
        .expect("an ACL entry differing only in case admits the initiator");
}

#[tokio::test]
async fn wrong_chap_secret_is_an_authentication_failure() {
    let mut cfg = config();
    cfg.targets[0].chap = Some(ChapCredentials {
        user: "alice".into(),
        secret: "correct-horse-battery".into(),
        mutual: None,
    });
    let h = Harness::new(cfg);

    let (mut p, _task) = h.connect();
    let opts = LoginOpts {
        chap: Some(("alice".into(), "wrong-secret-value".into())),
        ..LoginOpts::normal()
    };
    let rsp = p.login(&opts).await.expect_err("wrong secret must fail");
    assert_refused(&h, &mut p, rsp, 0x0201).await;

    // The right secret gets in (so the failure above was the secret, not the setup).
    let (mut ok, _task) = h.connect();
    let opts = LoginOpts {
        chap: Some(("alice".into(), "correct-horse-battery".into())),
        ..LoginOpts::normal()
    };
    ok.login(&opts).await.expect("right secret");
    ok.assert_alive().await;
}

#[tokio::test]
async fn chap_target_refuses_a_login_that_skips_security() {
    let mut cfg = config();
    cfg.targets[0].chap = Some(ChapCredentials {
        user: "alice".into(),
        secret: "correct-horse-battery".into(),
        mutual: None,
    });
    let h = Harness::new(cfg);
    let (mut p, _task) = h.connect();
    // CSG=1 straight away: no authentication.
    let rsp = p
        .raw_login(&[("InitiatorName", INITIATOR), ("TargetName", TARGET)], 0)
        .await;
    assert_refused(&h, &mut p, rsp, 0x0201).await;
}

#[tokio::test]
async fn unsupported_version_is_refused() {
    let h = Harness::new(config());
    let (mut p, _task) = h.connect();
    let rsp = p
        .raw_login(&[("InitiatorName", INITIATOR), ("TargetName", TARGET)], 1)
        .await;
    assert_refused(&h, &mut p, rsp, 0x0205).await;
}

#[tokio::test]
async fn non_login_pdu_before_login_closes_the_connection() {
    let h = Harness::new(config());
    let (mut p, task) = h.connect();
    p.nop_ping(b"too early").await;
    let got = p.expect_closed().await;
    assert!(got.is_empty(), "no answer before login: {got:?}");
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
}

#[tokio::test]
async fn login_that_never_completes_is_dropped_after_the_login_timeout() {
    let mut cfg = config();
    cfg.limits = Limits {
        login_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let h = Harness::new(cfg);

    // Silent from the start.
    let (mut silent, silent_task) = h.connect();
    // Half a login: a first request in the security stage (T=0), never followed up.
    let (mut half, half_task) = h.connect();
    let req = sluice_proto::pdu::LoginRequest {
        transit: false,
        cont: false,
        csg: 0,
        nsg: 0,
        version_max: 0,
        version_min: 0,
        isid: sluice_proto::seq::Isid([0x80, 0, 0, 0, 0, 3]),
        tsih: sluice_proto::seq::Tsih(0),
        itt: half.itt(),
        cid: 0,
        cmd_sn: half.cmd_sn,
        exp_stat_sn: half.exp_stat_sn,
        data: sluice_proto::text::encode_pairs(&[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("AuthMethod", "None"),
        ]),
    };
    half.send(&Pdu::LoginRequest(req)).await;
    match half.expect().await {
        Pdu::LoginResponse(r) => assert_eq!(status(&r), 0, "{r:?}"),
        other => panic!("expected a Login Response, got {other:?}"),
    }

    let started = std::time::Instant::now();
    // Not closed well before the timeout...
    silent.expect_silence().await;
    // ...but closed soon after it (generous upper bound: this is not a timing test).
    silent.expect_closed_within(Duration::from_secs(10)).await;
    half.expect_closed_within(Duration::from_secs(10)).await;
    assert!(started.elapsed() >= Duration::from_millis(500));
    tokio::time::timeout(ANSWER, silent_task)
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(ANSWER, half_task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.target.session_count(), 0);
}

#[tokio::test]
async fn same_isid_and_initiator_name_reinstates_the_session() {
    let h = Harness::new(config());
    let (mut first, first_task) = h.logged_in().await;
    let first_tsih = first.outcome.as_ref().unwrap().tsih;

    let (mut second, _task) = h.connect();
    let outcome = second.login(&LoginOpts::normal()).await.expect("login");
    assert_ne!(
        outcome.tsih, first_tsih,
        "a reinstated session gets a new TSIH"
    );

    first.expect_closed().await;
    tokio::time::timeout(ANSWER, first_task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(h.target.session_count(), 1, "only the new session remains");
    second.assert_alive().await;

    // A different ISID is a second, independent session.
    let (mut third, _task) = h.connect();
    let opts = LoginOpts {
        isid: sluice_proto::seq::Isid([0x80, 0, 0, 0, 0, 2]),
        ..LoginOpts::normal()
    };
    third.login(&opts).await.expect("login");
    second.assert_alive().await;
    third.assert_alive().await;
    assert_eq!(h.target.session_count(), 2);
}

#[tokio::test]
async fn initial_stat_sn_stays_below_two_to_the_31() {
    // libiscsi 1.19 compares StatSNs as signed integers: from 2^31 on it stops advancing its
    // ExpStatSN, which would hide from busy polling that it pipelines. 16 logins: a start
    // drawn from the whole u32 range would pass by chance once in 65,536 runs.
    let h = Harness::new(config());
    for n in 0..16u8 {
        let (mut p, _task) = h.connect();
        p.login(&LoginOpts::normal().with_isid(n))
            .await
            .expect("login");
        let first = p.exp_stat_sn.0.wrapping_sub(1);
        assert!(first < 1 << 31, "login {n}: initial StatSN {first:#x}");
    }
}
