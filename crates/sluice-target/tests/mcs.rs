//! Several connections in one session (MC/S, RFC 7143 sections 4.2.2.1, 6.3.4, 11.14) over
//! scripted initiators: session-wide command order, joining a session, the refusals a join can
//! meet, connection reinstatement, and logging out one connection while the others go on.

mod support;

use bytes::Bytes;
use sluice_proto::login::LoginStatus;
use sluice_proto::pdu::codes::{LogoutReason, LogoutResponseCode};
use sluice_proto::pdu::{LogoutRequest, Pdu};
use sluice_proto::seq::{SeqNum, Tsih};
use support::*;

/// A session of `n` connections: the leading one and `n - 1` joined with CIDs 1.. (each
/// peer's CmdSN bookkeeping starts where the session is).
async fn session(h: &Harness, n: u16) -> Vec<Peer> {
    let opts = LoginOpts::normal().with_max_connections(4);
    let (mut lead, _task) = h.logged_in_with(&opts).await;
    let tsih = lead.outcome.as_ref().expect("logged in").tsih;
    let mut peers = Vec::new();
    for cid in 1..n {
        let (mut p, _task) = h.connect();
        p.cmd_sn = lead.cmd_sn;
        let outcome = p
            .login(&opts.clone().joining(tsih, cid))
            .await
            .expect("join the session");
        assert_eq!(outcome.tsih, tsih);
        peers.push(p);
    }
    lead.cmd_sn = peers.last().map_or(lead.cmd_sn, |p| p.cmd_sn);
    peers.insert(0, lead);
    peers
}

#[tokio::test]
async fn cmd_sn_2_on_b_before_cmd_sn_1_on_a_runs_after_it() {
    let h = Harness::new(config());
    let mut s = session(&h, 2).await;
    let one = s[0].cmd_sn;
    let two = one.next();
    // CmdSN 2 on B: a READ of block 50. It must wait for CmdSN 1.
    let mut read = s[1].scsi_command(&read10(50, 1), true, false, BLOCK as u32);
    read.cmd_sn = two;
    let read_itt = read.itt;
    s[1].send(&Pdu::ScsiCommand(read)).await;
    s[1].expect_silence().await;
    // CmdSN 1 on A: a WRITE of block 50.
    let data = pattern(BLOCK, 77);
    let mut write = s[0].scsi_command(&write10(50, 1), false, true, BLOCK as u32);
    write.cmd_sn = one;
    write.data = Bytes::copy_from_slice(&data);
    let write_itt = write.itt;
    s[0].send(&Pdu::ScsiCommand(write)).await;
    assert_eq!(s[0].completion(write_itt).await.status, 0);
    // The read ran after the write: it sees the written data, on its own connection.
    let c = s[1].completion(read_itt).await;
    assert_eq!(c.status, 0, "{c:?}");
    assert_eq!(c.data, data);
}

#[tokio::test]
async fn joining_an_unknown_or_full_session_is_refused() {
    let h = Harness::new(config());
    let opts = LoginOpts::normal().with_max_connections(2);
    let (lead, _task) = h.logged_in_with(&opts).await;
    let tsih = lead.outcome.as_ref().expect("logged in").tsih;
    // No such session: 0x020a.
    let (mut p, _task) = h.connect();
    let refused = p
        .login(&opts.clone().joining(Tsih(tsih.0.wrapping_add(99)), 1))
        .await
        .expect_err("unknown TSIH");
    assert_eq!(refused.status, LoginStatus::SESSION_DOES_NOT_EXIST);
    // MaxConnections=2: the second joins, a third is refused with 0x0206.
    let (mut b, _task) = h.connect();
    b.login(&opts.clone().joining(tsih, 1))
        .await
        .expect("second connection");
    let (mut c, _task) = h.connect();
    let refused = c
        .login(&opts.clone().joining(tsih, 2))
        .await
        .expect_err("third connection");
    assert_eq!(refused.status, LoginStatus::TOO_MANY_CONNECTIONS);
    // Another ISID may not join this session.
    let (mut d, _task) = h.connect();
    let refused = d
        .login(&opts.clone().with_isid(9).joining(tsih, 1))
        .await
        .expect_err("foreign ISID");
    assert_eq!(refused.status, LoginStatus::SESSION_DOES_NOT_EXIST);
}

#[tokio::test]
async fn a_login_with_a_cid_in_use_replaces_that_connection() {
    let h = Harness::new(config());
    let mut s = session(&h, 2).await;
    let tsih = s[0].outcome.as_ref().expect("logged in").tsih;
    let (mut again, _task) = h.connect();
    again.cmd_sn = s[0].cmd_sn;
    let opts = LoginOpts::normal().with_max_connections(4);
    again
        .login(&opts.joining(tsih, 1))
        .await
        .expect("connection reinstatement");
    // The old connection with CID 1 is closed; the new one and the leading one serve.
    s[1].expect_closed().await;
    again.cmd_sn = s[0].cmd_sn;
    assert_eq!(again.read(0, 1).await.len(), BLOCK);
    s[0].cmd_sn = again.cmd_sn;
    assert_eq!(s[0].read(1, 1).await.len(), BLOCK);
}

#[tokio::test]
async fn logging_out_one_connection_from_another_leaves_the_session() {
    let h = Harness::new(config());
    let mut s = session(&h, 3).await;
    let logout = |itt, cmd_sn, cid, reason| {
        Pdu::LogoutRequest(LogoutRequest {
            immediate: true,
            reason,
            itt,
            cid,
            cmd_sn,
            exp_stat_sn: SeqNum(0),
        })
    };
    // On A: log out CID 2.
    let itt = s[0].itt();
    let cmd_sn = s[0].cmd_sn;
    s[0].send(&logout(itt, cmd_sn, 2, LogoutReason::CloseConnection))
        .await;
    match s[0].expect().await {
        Pdu::LogoutResponse(r) => assert_eq!(r.response, LogoutResponseCode::Closed),
        other => panic!("expected a Logout Response, got {other:?}"),
    }
    s[2].expect_closed().await;
    // A CID that is not (or no longer) there.
    let itt = s[0].itt();
    s[0].send(&logout(itt, cmd_sn, 2, LogoutReason::CloseConnection))
        .await;
    match s[0].expect().await {
        Pdu::LogoutResponse(r) => assert_eq!(r.response, LogoutResponseCode::CidNotFound),
        other => panic!("expected a Logout Response, got {other:?}"),
    }
    // The session goes on over A and B.
    s[1].cmd_sn = s[0].cmd_sn;
    assert_eq!(s[1].read(3, 1).await.len(), BLOCK);
    s[0].cmd_sn = s[1].cmd_sn;
    assert_eq!(s[0].read(4, 1).await.len(), BLOCK);
}
