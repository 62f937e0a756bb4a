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
