//! The iSER listener's login (RFC 7145 section 5.1) over a raw scripted initiator: the login
//! runs on the socket in the connection task, and the final Login Response with
//! RDMAExtensions=Yes hands the socket to the datamover. Bytes the initiator sends between
//! its final Login Request and that response belong to neither side: the connection closes.
//! A connection joining a session is in the session's mode (RFC 7145 section 6.3.1:
//! RDMAExtensions is leading-only): TCP through the iSER listener when the session is in TCP
//! mode, refused through a portal without iSER when the session is in RDMA mode.

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
    negotiate_rdma_with(p, &[]).await
}

/// [`negotiate_rdma`] with `extra` keys in the first request.
async fn negotiate_rdma_with(p: &mut Peer, extra: &[(&str, &str)]) -> Pdu {
    let itt = p.itt();
    let mut pairs = vec![
        ("InitiatorName", INITIATOR),
        ("TargetName", TARGET),
        ("SessionType", "Normal"),
        ("RDMAExtensions", "Yes"),
    ];
    pairs.extend_from_slice(extra);
    let first = login_request(p, itt, &pairs);
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

/// Logs in a connection joining session `tsih` through the iSER listener at `addr`, with
/// `shim` adding iSER's keys as sluice's initiator does; returns the peer, the last Login
/// Response as it arrived (before the shim took iSER's keys off), the shim's end and the
/// login core's step.
async fn join_through_iser(
    addr: std::net::SocketAddr,
    offer: &LoginOpts,
    tsih: Tsih,
    cmd_sn: SeqNum,
    mut shim: sluice_proto::iser::login::InitiatorLoginShim,
) -> (
    Peer,
    sluice_proto::pdu::LoginResponse,
    sluice_proto::iser::login::LoginEnd,
    sluice_proto::login::InitiatorStep,
) {
    use sluice_proto::iser::login::LoginEnd;
    use sluice_proto::login::{InitiatorConfig, InitiatorLogin, InitiatorStep};

    let mut p = Peer::tcp(addr).await;
    let cfg = InitiatorConfig {
        initiator_name: INITIATOR.into(),
        initiator_alias: None,
        target_name: Some(TARGET.into()),
        isid: offer.isid,
        tsih,
        cid: 1,
        chap: None,
        offer: offer.offer.clone(),
    };
    let mut login = InitiatorLogin::new(cfg, Itt(77), cmd_sn, SeqNum(0));
    let mut req = login.start().expect("login start");
    loop {
        shim.handle_request(&mut req);
        p.send(&Pdu::LoginRequest(req)).await;
        let Pdu::LoginResponse(mut rsp) = p.expect().await else {
            panic!("expected a Login Response")
        };
        let as_sent = rsp.clone();
        let end = shim.handle_response(&mut rsp).expect("iSER keys");
        match login.handle_response(&rsp, &mut |b: &mut [u8]| b.fill(7)) {
            InitiatorStep::Send(next) => req = next,
            step => {
                assert_ne!(end, LoginEnd::Pending, "{step:?}");
                if let InitiatorStep::Complete(o) = &step {
                    p.exp_stat_sn = o.exp_stat_sn;
                    p.cmd_sn = o.exp_cmd_sn;
                }
                return (p, as_sent, end, step);
            }
        }
    }
}

fn key_in(data: &[u8], pair: &[u8]) -> bool {
    data.split(|b| *b == 0).any(|kv| kv == pair)
}

/// RDMAExtensions is leading-only and session-wide (RFC 7145 section 6.3.1): a session whose
/// leading connection logged in over plain iSCSI (an in-memory connection, as through the
/// TCP portal) is in TCP mode, and so is every connection that joins it, even through the
/// iSER listener. A peer that offers RDMAExtensions=Yes on the join anyway (as sluice's
/// initiator once did) is answered "Irrelevant" (RFC 7143 section 6.2); the connection goes
/// on as iSCSI over TCP on the same socket and carries commands. Before, the target said
/// Yes and switched the join to RDMA mode: one session over both transports.
#[tokio::test]
async fn a_tcp_session_joined_through_the_iser_listener_stays_on_tcp() {
    use sluice_proto::iser::login::{InitiatorLoginShim, LoginEnd};
    use sluice_proto::login::InitiatorStep;

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

    let legacy = InitiatorLoginShim::new(8192);
    let (mut p, rsp, end, step) =
        join_through_iser(addr, &offer, outcome.tsih, lead.cmd_sn, legacy).await;
    assert!(matches!(step, InitiatorStep::Complete(_)), "{step:?}");
    assert!(
        key_in(&rsp.data, b"RDMAExtensions=Irrelevant"),
        "{:?}",
        String::from_utf8_lossy(&rsp.data)
    );
    assert!(!key_in(&rsp.data, b"RDMAExtensions=Yes"));
    assert_eq!(end, LoginEnd::Tcp);
    // The joined connection is iSCSI over TCP: a NOP-Out is answered on it.
    p.assert_alive().await;
    let c = target.iser_counters();
    counters_reach(c, |c| c.tcp_connections.load(Ordering::Relaxed) == 1).await;
    assert_eq!(c.rdma_connections.load(Ordering::Relaxed), 0);
    assert_eq!(logins(&target).ok, 2);
    assert_eq!(target.session_count(), 1);
    lead.assert_alive().await;
}

/// The reverse: a session whose leading connection is in RDMA mode (through the iSER
/// listener; its datamover then waits for the iSER Hello) cannot take a connection through
/// a portal that does not serve iSER, which could only be in TCP mode. The target refuses
/// the join with 0x0208, "can't include in session" (RFC 7143 section 11.13.5: it cannot
/// span the session to this connection), counts a failed login, and the session goes on.
#[tokio::test]
async fn an_rdma_session_refuses_a_join_through_a_portal_without_iser() {
    let (target, addr) = iser_target(Duration::from_secs(30)).await;
    let mut lead = Peer::tcp(addr).await;
    let itt = lead.itt();
    let first = login_request(
        &mut lead,
        itt,
        &[
            ("InitiatorName", INITIATOR),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("RDMAExtensions", "Yes"),
            ("MaxConnections", "2"),
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
        ],
    );
    lead.send(&first).await;
    let mut tsih = Tsih(0);
    // Answer the target's own offers until it ends the login.
    for _ in 0..4 {
        let Pdu::LoginResponse(rsp) = lead.expect().await else {
            panic!("expected a Login Response")
        };
        assert_eq!(rsp.status.class, 0, "{rsp:?}");
        lead.exp_stat_sn = rsp.stat_sn.next();
        if rsp.transit && rsp.nsg == 3 {
            tsih = rsp.tsih;
            break;
        }
        let next = login_request(
            &mut lead,
            itt,
            &[
                ("InitialR2T", "Yes"),
                ("MaxBurstLength", "262144"),
                ("FirstBurstLength", "65536"),
                ("MaxOutstandingR2T", "1"),
                ("ErrorRecoveryLevel", "0"),
            ],
        );
        lead.send(&next).await;
    }
    assert_ne!(tsih, Tsih(0), "the leading login ended");
    counters_reach(target.iser_counters(), |c| {
        c.rdma_connections.load(Ordering::Relaxed) == 1
    })
    .await;

    // The join through the plain portal (an in-memory connection).
    let h = Harness {
        target: Arc::clone(&target),
    };
    let (mut p, _task) = h.connect();
    let mut join = LoginOpts::normal().with_max_connections(2);
    join.isid = Isid([0x80, 0, 0, 0, 0, 9]);
    join.tsih = tsih;
    join.cid = 1;
    p.cmd_sn = lead.cmd_sn;
    let refused = p.login(&join).await.expect_err("the join is refused");
    assert_eq!(
        refused.status,
        sluice_proto::login::LoginStatus::CANT_INCLUDE_IN_SESSION
    );
    p.expect_closed().await;
    eventually(
        || logins(&target).failed[LoginFailure::Session as usize] == 1,
        || format!("{:?}", logins(&target)),
    )
    .await;
    assert_eq!(logins(&target).ok, 1, "only the leading login");
    assert_eq!(target.session_count(), 1);
}

/// A session in RDMA mode joined through the iSER listener: the join does not offer
/// RDMAExtensions (leading-only, RFC 7145 section 6.3.1), yet is in the session's mode,
/// RDMA: the target declares its TargetRecvDataSegmentLength on the connection and the
/// final Login Response hands the socket to a second datamover.
#[tokio::test]
async fn a_join_of_an_rdma_session_is_in_rdma_mode_without_offering_the_key() {
    use sluice_proto::iser::login::{InitiatorLoginShim, JoinedSession, LoginEnd};
    use sluice_proto::login::InitiatorStep;

    let (target, addr) = iser_target(Duration::from_secs(30)).await;
    let mut lead = Peer::tcp(addr).await;
    let last = negotiate_rdma_with(&mut lead, &[("MaxConnections", "2")]).await;
    lead.send(&last).await;
    let Pdu::LoginResponse(done) = lead.expect().await else {
        panic!("expected the final Login Response")
    };
    assert!(
        is_final_success(&Pdu::LoginResponse(done.clone())),
        "{done:?}"
    );

    let mut shim = InitiatorLoginShim::new(8192);
    shim.joins_session(JoinedSession {
        rdma: true,
        first_burst: 65536,
        peer_max_unexpected: 0,
    });
    let mut offer = LoginOpts::normal().with_max_connections(2);
    offer.isid = Isid([0x80, 0, 0, 0, 0, 9]);
    let (_p, rsp, end, step) = join_through_iser(addr, &offer, done.tsih, lead.cmd_sn, shim).await;
    assert!(matches!(step, InitiatorStep::Complete(_)), "{step:?}");
    assert!(!key_in(&rsp.data, b"RDMAExtensions=Yes"));
    assert!(
        rsp.data
            .split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"TargetRecvDataSegmentLength=")),
        "{:?}",
        String::from_utf8_lossy(&rsp.data)
    );
    assert!(matches!(end, LoginEnd::Rdma { .. }), "{end:?}");
    counters_reach(target.iser_counters(), |c| {
        c.rdma_connections.load(Ordering::Relaxed) == 2
    })
    .await;
    assert_eq!(logins(&target).ok, 2);
}
