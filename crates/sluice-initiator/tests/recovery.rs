//! Session recovery at ErrorRecoveryLevel 0: a cut connection is re-established and the
//! commands in flight are sent again; a connection that goes silent is found by the NOP-Out
//! keepalive; with the target gone the retries stop at the bound.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use sluice_initiator::{ConnectOptions, Error, Session};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// A TCP proxy whose connections can all be cut at once.
async fn proxy(target: String) -> (String, Arc<Notify>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let cut = Arc::new(Notify::new());
    let cut2 = Arc::clone(&cut);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(mut server) = TcpStream::connect(&target).await else {
                continue;
            };
            let cut = Arc::clone(&cut2);
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    () = cut.notified() => {}
                }
            });
        }
    });
    (addr, cut)
}

/// A TCP proxy whose open connections can be turned into black holes: once `freeze` is
/// notified they stop forwarding but stay open, as across a dead path; new connections work.
async fn freezing_proxy(target: String) -> (String, Arc<Notify>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let freeze = Arc::new(Notify::new());
    let freeze2 = Arc::clone(&freeze);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let Ok(mut server) = TcpStream::connect(&target).await else {
                continue;
            };
            let freeze = Arc::clone(&freeze2);
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
                    () = freeze.notified() => {}
                }
                // Hold both sockets open, forwarding nothing.
                std::future::pending::<()>().await;
                drop((client, server));
            });
        }
    });
    (addr, freeze)
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        reconnect_delay: Some(Duration::from_millis(50)),
        max_reconnects: 2,
        ..ConnectOptions::default()
    }
}

#[tokio::test]
async fn lost_connection_is_recovered_and_commands_retried() {
    let t = TestTarget::start(config());
    let (addr, cut) = proxy(t.portal()).await;
    let s = Session::connect(&addr, IQN, opts()).await.unwrap();
    let data = Bytes::from(vec![0x3c; 64 * 1024]);
    s.write(0, 0, data.clone(), 512).await.unwrap();
    cut.notify_waiters();
    // Commands issued around the cut complete on the new connection.
    let mut handles = Vec::new();
    for _ in 0..8 {
        let s = s.clone();
        handles.push(tokio::spawn(async move { s.read(0, 0, 128, 512).await }));
    }
    for h in handles {
        assert_eq!(h.await.unwrap().unwrap(), data);
    }
    let c = s.counters();
    assert_eq!(c.reconnects, 1, "{c:?}");
}

#[tokio::test]
async fn a_silent_connection_is_found_by_the_keepalive_and_replaced() {
    let t = TestTarget::start(config());
    let (addr, freeze) = freezing_proxy(t.portal()).await;
    let opts = ConnectOptions {
        keepalive_interval: Some(Duration::from_millis(100)),
        keepalive_timeout: Duration::from_millis(200),
        ..opts()
    };
    let s = Session::connect(&addr, IQN, opts).await.unwrap();
    let data = Bytes::from(vec![0x5a; 4096]);
    s.write(0, 0, data.clone(), 512).await.unwrap();
    freeze.notify_waiters();
    // Sent into the black hole: only the keepalive can notice that no answer will come.
    let read = tokio::time::timeout(Duration::from_secs(20), s.read(0, 0, 8, 512)).await;
    assert_eq!(read.expect("the keepalive never fired").unwrap(), data);
    let c = s.counters();
    assert_eq!(c.reconnects, 1, "{c:?}");
}

#[tokio::test]
async fn retries_stop_at_the_bound() {
    let t = TestTarget::start(config());
    let (addr, cut) = proxy(t.portal()).await;
    let s = Session::connect(&addr, IQN, opts()).await.unwrap();
    s.test_unit_ready(0).await.unwrap();
    drop(t); // the target is gone: the proxy cannot reach it any more
    cut.notify_waiters();
    let e = s.read(0, 0, 1, 512).await.unwrap_err();
    assert!(
        matches!(e, Error::ConnectionLost { attempts: 2, .. } | Error::Closed),
        "{e}"
    );
}
