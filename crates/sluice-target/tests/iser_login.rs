//! The iSER listener's login (RFC 7145 section 5.1) over a raw scripted initiator: the login
//! runs on the socket in the connection task, and the final Login Response with
//! RDMAExtensions=Yes hands the socket to the datamover. Bytes the initiator sends between
//! its final Login Request and that response belong to neither side: the connection closes.
//! A connection joining a session whose FirstBurstLength its Sends cannot carry is refused.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::pdu::{LoginRequest, Pdu};
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};
use sluice_proto::text::encode_pairs;
use sluice_target::status::{LoginCounts, LoginFailure};
use sluice_target::{IserCounters, IserServeOptions, Target};
use support::*;
use tokio::net::TcpListener;

/// A target serving iSER whose datamovers wait `hello` for the iSER Hello.
async fn iser_target(hello: Duration) -> (Arc<Target>, std::net::SocketAddr) {
    iser_target_with(config(), hello).await
}

/// [`iser_target`] with `config`.
async fn iser_target_with(
    config: sluice_target::config::TargetConfig,
    hello: Duration,
) -> (Arc<Target>, std::net::SocketAddr) {
    let target = Arc::new(Target::new(config).expect("target"));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let t = Arc::clone(&target);
    let opts = IserServeOptions {
        hello_timeout: hello,
        ..IserServeOptions::default()
    };
    tokio::spawn(async move { t.serve_iser(listener, opts).await });
    (target, addr)
}

/// An operational-stage Login Request with `pairs`, asking to move to full feature phase.
fn login_request(p: &mut Peer, itt: Itt, pairs: &[(&str, &str)]) -> Pdu {
    Pdu::LoginRequest(LoginRequest {
        transit: true,
        cont: false,
        csg: 1,
        nsg: 3,
        version_max: 0,
        version_min: 0,
        isid: Isid([0x80, 0, 0, 0, 0, 9]),
        tsih: Tsih(0),
        itt,
        cid: 0,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
        data: encode_pairs(pairs),
    })
}

/// Offers RDMAExtensions=Yes and checks the target agrees; returns the Login Request that
/// answers the target's own offers and ends the login, not yet sent.
async fn negotiate_rdma(p: &mut Peer) -> Pdu {
    let itt = p.itt();
    let first = login_request(
        p,
        itt,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("RDMAExtensions", "Yes"),
        ],
    );
    p.send(&first).await;
    let Pdu::LoginResponse(rsp) = p.expect().await else {
        panic!("expected a Login Response")
    };
    assert_eq!(rsp.status.class, 0, "{rsp:?}");
    assert!(
        rsp.data
            .split(|b| *b == 0)
            .any(|kv| kv == b"RDMAExtensions=Yes"),
        "the target agrees to RDMA mode: {rsp:?}"
    );
    p.exp_stat_sn = rsp.stat_sn.next();
    // RFC 7143 section 6.2: the target's offers are answered before the login moves on.
    login_request(
        p,
        itt,
        &[
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("InitialR2T", "Yes"),
            ("MaxBurstLength", "262144"),
            ("FirstBurstLength", "65536"),
            ("MaxOutstandingR2T", "1"),
            ("ErrorRecoveryLevel", "0"),
        ],
    )
}

/// Whether `pdu` is a successful Login Response that ends the login.
fn is_final_success(pdu: &Pdu) -> bool {
    matches!(pdu, Pdu::LoginResponse(r) if r.status.class == 0 && r.transit && r.nsg == 3)
}

/// The target's login counts (the one target of the test configuration).
fn logins(target: &Target) -> LoginCounts {
    target.status().targets[0].logins.clone()
}

/// Waits (boundedly) until `done` holds of the counters.
async fn counters_reach(c: &IserCounters, done: impl Fn(&IserCounters) -> bool) {
    eventually(
        || done(c),
        || format!("counters never got there: {:?}", c.status()),
    )
    .await;
}

/// Waits (boundedly, polling) until `done` holds; fails with `why()` at the deadline. For
/// state a connection task changes after the event a test saw (a counter moves before the
/// session leaves the table, say): never a fixed sleep.
async fn eventually(done: impl Fn() -> bool, why: impl Fn() -> String) {
    let deadline = tokio::time::Instant::now() + ANSWER;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{}", why());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The final Login Response agrees to RDMA mode, and the connection becomes the
/// datamover's: with no iSER Hello it ends after the hello timeout, counted as an RDMA
/// connection and an error.
#[tokio::test]
async fn a_login_asking_for_rdma_hands_the_socket_to_the_datamover() {
    let (target, addr) = iser_target(Duration::from_millis(300)).await;
    let mut p = Peer::tcp(addr).await;
    let last = negotiate_rdma(&mut p).await;
    p.send(&last).await;
    let rsp = p.expect().await;
    assert!(is_final_success(&rsp), "{rsp:?}");
    let c = target.iser_counters();
    counters_reach(c, |c| c.errors.load(Ordering::Relaxed) == 1).await;
    assert_eq!(c.rdma_connections.load(Ordering::Relaxed), 1);
    p.expect_closed().await;
    // The login itself completed: the missing Hello is the datamover's error, not the login's.
    let l = logins(&target);
    assert_eq!(l.ok, 1, "{l:?}");
    assert_eq!(l.failed.iter().sum::<u64>(), 0, "{l:?}");
}

/// Bytes sent right behind the final Login Request (before its response could arrive) are
/// a protocol error: the Login Response goes out, then the connection closes without
/// starting RDMA mode, counted as an iSER error and as an aborted login (never a good one:
/// the connection never reached full feature phase), and the session it made is gone.
#[tokio::test]
async fn bytes_behind_the_final_login_request_close_the_connection() {
    let (target, addr) = iser_target(Duration::from_secs(30)).await;
    let mut p = Peer::tcp(addr).await;
    let last = negotiate_rdma(&mut p).await;
    let mut bytes = p.encode(&last).to_vec();
    bytes.extend_from_slice(b"sent too early!!");
    p.send_raw(&bytes).await;
    let rsp = p.expect().await;
    assert!(is_final_success(&rsp), "{rsp:?}");
    p.expect_closed().await;
    let c = target.iser_counters();
    counters_reach(c, |c| c.errors.load(Ordering::Relaxed) == 1).await;
    assert_eq!(c.rdma_connections.load(Ordering::Relaxed), 0);
    // The connection task leaves the session just after it counts the error.
    eventually(
        || target.session_count() == 0,
        || format!("the session stayed: {}", target.session_count()),
    )
    .await;
    let l = logins(&target);
    assert_eq!(
        l.ok, 0,
        "a login closed for early bytes is no success: {l:?}"
    );
    assert_eq!(l.failed[LoginFailure::Aborted as usize], 1, "{l:?}");
    assert_eq!(l.failed.iter().sum::<u64>(), 1, "{l:?}");
}

/// A session logged in over plain iSCSI (an in-memory connection, as through the TCP portal)
/// settles on FirstBurstLength 256 KiB; a second connection joins it through the iSER
/// listener asking for RDMA mode. FirstBurstLength is leading-only (RFC 7143 section
/// 13.14), so the join negotiates none, but the session's 256 KiB bounds what is sent on it,
/// and in RDMA mode that travels in Sends the target provisions four receive buffers of
/// 16 KiB per command for (RFC 7145 section 7.3.4). The target refuses the join ("can't
/// include in session"), counts it as a failed login, and the session goes on.
#[tokio::test]
async fn a_join_whose_sessions_first_burst_sends_cannot_carry_is_refused() {
    use sluice_proto::iser::login::{InitiatorLoginShim, LoginEnd};
    use sluice_proto::login::{InitiatorConfig, InitiatorLogin, InitiatorStep, LoginStatus};

    let mut config = config();
    config.offer.first_burst_length = 262_144;
    let (target, addr) = iser_target_with(config, Duration::from_secs(30)).await;
    let h = Harness {
        target: Arc::clone(&target),
    };
    let mut offer = LoginOpts::normal().with_max_connections(2);
    offer.offer.first_burst_length = 262_144;
    offer.offer.initial_r2t = false;
    let (mut lead, _task) = h.logged_in_with(&offer).await;
    let outcome = lead.outcome.clone().expect("logged in");
    assert_eq!(outcome.params.first_burst_length, 262_144);

    // The join, through the iSER listener, with iSER's keys added by the initiator's shim.
    let mut p = Peer::tcp(addr).await;
    let cfg = InitiatorConfig {
        initiator_name: INITIATOR.into(),
        initiator_alias: None,
        target_name: Some(TARGET.into()),
        isid: offer.isid,
        tsih: outcome.tsih,
        cid: 1,
        chap: None,
        offer: offer.offer.clone(),
    };
    let mut shim = InitiatorLoginShim::new(8192);
    let mut login = InitiatorLogin::new(cfg, Itt(77), lead.cmd_sn, SeqNum(0));
    let mut req = login.start().expect("login start");
    let refused = loop {
        shim.handle_request(&mut req);
        p.send(&Pdu::LoginRequest(req)).await;
        let Pdu::LoginResponse(mut rsp) = p.expect().await else {
            panic!("expected a Login Response")
        };
        let end = shim.handle_response(&mut rsp).expect("iSER keys");
        match login.handle_response(&rsp, &mut |b: &mut [u8]| b.fill(7)) {
            InitiatorStep::Send(next) => req = next,
            InitiatorStep::Failed(_) => {
                assert_eq!(end, LoginEnd::Failed);
                break rsp;
            }
            other => panic!("the join should be refused, got {other:?} after {rsp:?}"),
        }
    };
    assert_eq!(refused.status, LoginStatus::CANT_INCLUDE_IN_SESSION);
    p.expect_closed().await;
    let deadline = tokio::time::Instant::now() + ANSWER;
    while logins(&target).failed[LoginFailure::Session as usize] == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            logins(&target)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let l = logins(&target);
    assert_eq!(l.ok, 1, "only the leading login: {l:?}");
    assert_eq!(target.iser_counters().status().rdma_connections, 0);
    lead.assert_alive().await;
    assert_eq!(target.session_count(), 1);
}
