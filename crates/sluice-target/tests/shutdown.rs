//! Graceful shutdown through `run` over real TCP: completing the shutdown future makes the
//! target ask each logged-in session to log out (Async Message, AsyncEvent 1); once the
//! initiator has logged out, `run` returns Ok.

mod support;

use std::time::Duration;

use sluice_proto::pdu::codes::{AsyncEvent, LogoutReason, LogoutResponseCode};
use sluice_proto::pdu::{LogoutRequest, Pdu};
use support::*;

#[tokio::test]
async fn shutdown_asks_sessions_to_log_out_and_run_returns_after_logout() {
    let mut cfg = config();
    cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
    // Long enough that only the logout (not the grace period) can end the connection within
    // the waits below.
    cfg.limits.shutdown_grace = Duration::from_secs(30);
    let (addr, stop_tx, server) = run_tcp(cfg).await;

    let mut p = Peer::tcp(addr).await;
    p.login(&LoginOpts::normal()).await.expect("login");
    p.clear_unit_attention().await;
    // A discovery session is simply closed on shutdown.
    let mut d = Peer::tcp(addr).await;
    d.login(&LoginOpts::discovery())
        .await
        .expect("discovery login");

    stop_tx.send(()).unwrap();
    let msg = match p.expect().await {
        Pdu::AsyncMessage(m) => m,
        other => panic!("expected an Async Message, got {other:?}"),
    };
    assert_eq!(msg.async_event, AsyncEvent::LogoutRequested);
    assert!(msg.parameter3 >= 1, "Parameter3 gives the time to log out");
    d.expect_closed().await;

    // Still serving commands while waiting for the logout.
    assert_eq!(p.read(0, 1).await.len(), BLOCK);
    assert!(!server.is_finished(), "run waits for the logout");

    let itt = p.itt();
    let req = LogoutRequest {
        immediate: true,
        reason: LogoutReason::CloseSession,
        itt,
        cid: 0,
        cmd_sn: p.cmd_sn,
        exp_stat_sn: p.exp_stat_sn,
    };
    p.send(&Pdu::LogoutRequest(req)).await;
    match p.expect().await {
        Pdu::LogoutResponse(r) => {
            assert_eq!((r.itt, r.response), (itt, LogoutResponseCode::Closed))
        }
        other => panic!("expected a Logout Response, got {other:?}"),
    }
    p.expect_closed().await;
    let result = tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("run returns soon after the last logout")
        .expect("run task");
    result.expect("run returns Ok");
}
