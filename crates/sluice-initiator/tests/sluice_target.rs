//! The initiator library against an in-process `sluice target`.

mod common;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use sluice_initiator::{discover, Command, ConnectOptions, IscsiUrl, Session};

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<_>>()
        .into()
}

#[tokio::test]
async fn discover_login_read_write_verify() {
    let t = TestTarget::start(config());
    let found = discover(&t.portal(), &ConnectOptions::default())
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].name, IQN);

    let url = IscsiUrl::parse(&t.url(0)).unwrap();
    let s = Session::connect_url(&url).await.unwrap();
    let inq = s.inquiry(0).await.unwrap();
    assert_eq!(inq.device_type, 0);
    let cap = s.read_capacity(0).await.unwrap();
    assert_eq!((cap.block_size, cap.bytes()), (512, 16 << 20));
    assert_eq!(s.report_luns().await.unwrap(), vec![0, 1]);
    let data = pattern(1 << 20, 7);
    s.write(0, 100, data.clone(), 512).await.unwrap();
    assert_eq!(s.read(0, 100, 2048, 512).await.unwrap(), data);
    s.synchronize_cache(0).await.unwrap();
    let c = s.counters();
    assert!(c.commands >= 6, "{c:?}");
    assert!(c.latency_us.len() >= 6);
    s.logout().await.unwrap();
}

#[tokio::test]
async fn check_condition_is_decoded() {
    let t = TestTarget::start(config());
    let s = Session::connect(&t.portal(), IQN, ConnectOptions::default())
        .await
        .unwrap();
    s.test_unit_ready(0).await.unwrap();
    // READ(16) past the end: ILLEGAL REQUEST, LBA OUT OF RANGE.
    let out = s
        .execute(Command::read(
            0,
            &sluice_scsi::cdb::read16(1 << 40, 1, false),
            512,
        ))
        .await
        .unwrap();
    assert_eq!(out.status, sluice_initiator::ScsiStatus::CheckCondition);
    let err = out.check().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("ILLEGAL REQUEST"), "{text}");
    assert!(text.contains("21h/00h"), "{text}");
}

#[tokio::test]
async fn many_commands_in_flight() {
    let t = TestTarget::start(config());
    let s = Session::connect(&t.portal(), IQN, ConnectOptions::default())
        .await
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..256u64 {
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let data = pattern(4096, i as u8);
            s.write(0, i * 8, data.clone(), 512).await.unwrap();
            assert_eq!(s.read(0, i * 8, 8, 512).await.unwrap(), data);
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    let c = s.counters();
    assert_eq!(c.commands - c.commands_failed, 512, "{c:?}");
    assert!(c.max_in_flight > 16, "max in flight {}", c.max_in_flight);
}

#[tokio::test]
async fn nop_in_answered_tmf_and_ping() {
    let mut cfg = config();
    cfg.keepalive = Some(sluice_target::config::Keepalive {
        interval: std::time::Duration::from_millis(100),
        timeout: std::time::Duration::from_secs(2),
    });
    let t = TestTarget::start(cfg);
    let traced = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = std::sync::Arc::clone(&traced);
    let opts = ConnectOptions {
        trace: Some(std::sync::Arc::new(move |_, _| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })),
        ..ConnectOptions::default()
    };
    let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    // The target pinged while we were idle; the answers kept the connection alive.
    s.test_unit_ready(0).await.unwrap();
    let c = s.counters();
    assert!(c.nop_in() >= 2 && c.nop_out() >= 2, "{c:?}");
    assert!(s.ping().await.unwrap() < std::time::Duration::from_secs(1));
    let rsp = s
        .task_management(sluice_initiator::TmfFunction::LogicalUnitReset, 0, None)
        .await
        .unwrap();
    assert_eq!(rsp, sluice_initiator::TmfResponse::FunctionComplete);
    s.logout().await.unwrap();
    assert!(traced.load(std::sync::atomic::Ordering::Relaxed) > 6);
}

/// A TCP relay to `upstream` whose first connection stops passing on what the initiator
/// sends once `stall` is set (a peer that has stopped reading); later connections relay
/// normally. Returns the relay's address.
async fn stalling_relay(
    upstream: std::net::SocketAddr,
    stall: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((down, _)) = listener.accept().await {
            let up = tokio::net::TcpStream::connect(upstream).await.unwrap();
            let stall = first.then(|| std::sync::Arc::clone(&stall));
            first = false;
            let (mut from_initiator, mut to_initiator) = down.into_split();
            let (mut from_target, mut to_target) = up.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_target, &mut to_initiator).await;
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match from_initiator.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if stall
                        .as_ref()
                        .is_some_and(|s| s.load(std::sync::atomic::Ordering::Acquire))
                    {
                        // Hold both sockets open and read nothing more.
                        let _keep = (from_initiator, to_target);
                        std::future::pending::<()>().await;
                        return;
                    }
                    if to_target.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A target that stops reading while a large write's data is queued: the write fails at its
/// deadline, and the connection then closes for session recovery without waiting for ever to
/// send what is still queued (it did wait: the session was stuck for good), so the session
/// is reinstated and serves again.
#[tokio::test]
async fn a_peer_that_stops_reading_does_not_hold_the_session_for_ever() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    let t = TestTarget::start(config());
    let stall = Arc::new(AtomicBool::new(false));
    let relay = stalling_relay(t.addr, Arc::clone(&stall)).await;
    let mut opts = ConnectOptions::default();
    opts.recovery.command_timeout = Some(Duration::from_secs(1));
    let s = Session::connect(&relay.to_string(), IQN, opts)
        .await
        .unwrap();
    let before = pattern(4096, 1);
    s.write(0, 0, before.clone(), 512).await.unwrap();

    stall.store(true, Ordering::Release);
    // More than the socket buffers on the way hold (FirstBurstLength lets it all go
    // unsolicited): most of it stays queued in the initiator.
    let err = s
        .write(0, 0, pattern(16 << 20, 2), 512)
        .await
        .expect_err("nothing reaches the target");
    assert!(err.to_string().contains("timeout"), "{err}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let back = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(0, 0, 8, 512)).await {
            Ok(Ok(b)) => break b,
            Ok(Err(e)) => assert!(Instant::now() < deadline, "no recovery in 60 s: {e}"),
            Err(_) => panic!("no recovery in 60 s: a read never ended"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(back, before, "the stuck write never reached the LU");
    let _ = s.logout().await;
}
