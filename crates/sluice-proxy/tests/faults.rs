//! The proxy between sluice's initiator library and an in-process sluice target: pass-through,
//! each fault as the initiator sees it, resets the session recovers from, delay, and replay
//! from a seed. Every wait is bounded.

mod common;

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use common::{config, pattern, RunningProxy, TestTarget, DEADLINE, IQN};
use sluice_fault::{Direction, DropEvery, FaultAction, FaultPlan, Part, PduKind, Rate, Rules};
use sluice_initiator::{ConnectOptions, Error, RejectReason, Session};

fn options(header_digest: bool, data_digest: bool) -> ConnectOptions {
    let mut o = ConnectOptions {
        // A lost connection is found by its reset, not by pings.
        keepalive_interval: None,
        reconnect_delay: Some(Duration::from_millis(20)),
        ..ConnectOptions::default()
    };
    o.set_digests(header_digest, data_digest);
    o
}

async fn connect(proxy: &RunningProxy, opts: ConnectOptions) -> Session {
    tokio::time::timeout(DEADLINE, Session::connect(&proxy.portal(), IQN, opts))
        .await
        .expect("login through the proxy in time")
        .expect("login through the proxy")
}

/// Sizes in 512-byte blocks: 512 bytes to 256 KiB (R2Ts and many Data-Out and Data-In PDUs).
const ALL_SIZES: &[u32] = &[1, 8, 64, 512];
/// Commands of a few PDUs each: immediate data, one Data-In.
const SMALL_SIZES: &[u32] = &[1, 8];

/// Writes then reads back `rounds` regions of LUN 0 (512-byte blocks), one command at a time,
/// cycling through `sizes`.
async fn verified_workload(s: &Session, rounds: u64, sizes: &[u32], seed: u64) -> u64 {
    let mut moved = 0;
    for i in 0..rounds {
        let blocks = sizes[i as usize % sizes.len()];
        // LUN 0 holds 32,768 blocks.
        let lba = (i % 30) * 1024;
        let data = pattern(blocks as usize * 512, seed + i);
        s.write(0, lba, data.clone(), 512).await.expect("write");
        let back = s.read(0, lba, blocks, 512).await.expect("read");
        assert_eq!(back, data, "round {i}");
        moved += 2 * data.len() as u64;
    }
    moved
}

#[tokio::test]
async fn pass_through_moves_a_verified_workload_with_and_without_digests() {
    let target = TestTarget::start(config());
    for (header, data) in [(false, false), (true, true), (true, false)] {
        let proxy = RunningProxy::start(target.addr, FaultPlan::default(), 1).await;
        let s = connect(&proxy, options(header, data)).await;
        let params = s.params();
        assert_eq!((params.header_digest, params.data_digest), (header, data));
        let moved = tokio::time::timeout(DEADLINE, verified_workload(&s, 24, ALL_SIZES, 7))
            .await
            .expect("workload in time");
        s.logout().await.expect("logout");
        let c = proxy.stop().await;
        assert_eq!(c.connections, 1, "{c:?}");
        assert_eq!(c.unframeable, 0, "{c:?}");
        for dir in Direction::BOTH {
            let d = c.direction(dir);
            assert_eq!(d.faults(), 0, "{dir}: {d:?}");
            assert_eq!(d.skipped_no_data_digest + d.skipped_no_header_digest, 0);
        }
        // Every byte of data crossed the proxy, once each way.
        assert!(c.to_target.bytes + c.to_initiator.bytes > moved, "{c:?}");
        assert!(c.to_target.pdus >= 2 * 24, "{c:?}");
    }
}

#[tokio::test]
async fn corrupted_write_data_is_rejected_by_the_target_as_a_data_digest_error() {
    let target = TestTarget::start(config());
    let plan = FaultPlan {
        to_target: Rules {
            corrupt_data: Rate::ONE,
            ..Rules::default()
        },
        ..FaultPlan::default()
    };
    let proxy = RunningProxy::start(target.addr, plan, 3).await;
    let s = connect(&proxy, options(false, true)).await;
    // Commands without data pass.
    tokio::time::timeout(DEADLINE, s.test_unit_ready(0))
        .await
        .expect("in time")
        .expect("TEST UNIT READY");
    // 4 KiB goes as immediate data in the command PDU, whose data segment is hit.
    let write = tokio::time::timeout(DEADLINE, s.write(0, 0, pattern(4096, 1), 512))
        .await
        .expect("the write ends in time");
    match write {
        Err(Error::Rejected(reason)) => assert_eq!(reason, RejectReason::DataDigestError),
        other => panic!("expected a Reject for a data digest error, got {other:?}"),
    }
    let counters = s.counters();
    assert_eq!(counters.rejects, 1, "{counters:?}");
    let c = proxy.handle.counters();
    assert_eq!(c.to_target.corrupt_data, 1, "{c:?}");
    let log = proxy.handle.fault_log();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].kind(), Some(PduKind::Command));
    assert!(matches!(
        log[0].action,
        FaultAction::Corrupt {
            part: Part::Data,
            ..
        }
    ));
}

#[tokio::test]
async fn corruption_without_a_data_digest_is_skipped_and_the_data_arrives_intact() {
    let target = TestTarget::start(config());
    let plan = FaultPlan::symmetric(Rules {
        corrupt_data: Rate::ONE,
        corrupt_header: Rate::ONE,
        ..Rules::default()
    });
    let proxy = RunningProxy::start(target.addr, plan, 3).await;
    let s = connect(&proxy, options(false, false)).await;
    tokio::time::timeout(DEADLINE, verified_workload(&s, 8, ALL_SIZES, 11))
        .await
        .expect("in time");
    let c = proxy.handle.counters();
    assert_eq!(c.to_target.faults() + c.to_initiator.faults(), 0, "{c:?}");
    assert!(c.to_target.skipped_no_data_digest >= 8, "{c:?}");
    assert!(c.to_initiator.skipped_no_data_digest >= 8, "{c:?}");
    assert!(c.to_target.skipped_no_header_digest >= 16, "{c:?}");
}

#[tokio::test]
async fn a_dropped_response_leaves_its_command_unanswered() {
    let target = TestTarget::start(config());
    let plan = FaultPlan::symmetric(Rules {
        drop: vec![DropEvery {
            kind: PduKind::Response,
            every: NonZeroU64::MIN,
        }],
        ..Rules::default()
    });
    let proxy = RunningProxy::start(target.addr, plan, 5).await;
    // Login is exempt, so the session opens.
    let s = connect(&proxy, options(false, false)).await;
    let tur = tokio::time::timeout(Duration::from_secs(2), s.test_unit_ready(0)).await;
    assert!(tur.is_err(), "the command completed: {tur:?}");
    let c = proxy.handle.counters();
    assert_eq!(c.to_initiator.dropped, 1, "{c:?}");
    let log = proxy.handle.fault_log();
    assert_eq!(log.len(), 1);
    assert!(
        log[0].to_string().contains("dir=t->i pdu=response"),
        "{}",
        log[0]
    );
    assert!(
        log[0].to_string().ends_with("fault=drop every=1"),
        "{}",
        log[0]
    );
}

#[tokio::test]
async fn resets_force_reconnects_and_the_session_recovers() {
    let target = TestTarget::start(config());
    let plan = FaultPlan {
        reset_every: NonZeroU64::new(25),
        ..FaultPlan::default()
    };
    let proxy = RunningProxy::start(target.addr, plan, 9).await;
    let opts = ConnectOptions {
        max_reconnects: 10,
        max_retries: 10,
        ..options(false, false)
    };
    let s = connect(&proxy, opts).await;
    tokio::time::timeout(DEADLINE, verified_workload(&s, 40, SMALL_SIZES, 21))
        .await
        .expect("in time");
    let initiator = s.counters();
    let c = proxy.handle.counters();
    // About 4 PDUs per round over 40 rounds, a reset every 25.
    assert!(c.resets() >= 4, "{c:?}");
    assert!(initiator.reconnects >= 4, "{initiator:?}");
    assert_eq!(
        c.connections,
        c.resets() + 1,
        "one new connection per reset: {c:?}"
    );
}

#[tokio::test]
async fn the_delay_applies_to_each_direction() {
    let target = TestTarget::start(config());
    let delay = Duration::from_millis(40);
    let plan = FaultPlan::symmetric(Rules {
        delay,
        ..Rules::default()
    });
    let proxy = RunningProxy::start(target.addr, plan, 0).await;
    let s = connect(&proxy, options(false, false)).await;
    let start = Instant::now();
    for _ in 0..3 {
        tokio::time::timeout(DEADLINE, s.test_unit_ready(0))
            .await
            .expect("in time")
            .expect("TEST UNIT READY");
    }
    // Each command waits once each way.
    assert!(start.elapsed() >= 3 * 2 * delay, "{:?}", start.elapsed());
    // Data still arrives whole and in order.
    tokio::time::timeout(DEADLINE, verified_workload(&s, 4, ALL_SIZES, 3))
        .await
        .expect("in time");
}

/// One run of a sequential workload through a faulty proxy; returns its fault log as lines.
async fn faulty_run(seed: u64) -> Vec<String> {
    let target = TestTarget::start(config());
    let plan = FaultPlan {
        // No header digest: these are skipped, but drawn and logged all the same.
        to_target: Rules {
            corrupt_header: Rate::new(0.3).unwrap(),
            ..Rules::default()
        },
        // A corrupted Data-In costs the initiator its connection (ErrorRecoveryLevel 0): it
        // logs in again and retries the read.
        to_initiator: Rules {
            corrupt_data: Rate::new(0.1).unwrap(),
            ..Rules::default()
        },
        ..FaultPlan::default()
    };
    let proxy = RunningProxy::start(target.addr, plan, seed).await;
    let opts = ConnectOptions {
        max_reconnects: 10,
        max_retries: 10,
        ..options(false, true)
    };
    let s = connect(&proxy, opts).await;
    let data = pattern(64 << 10, 5);
    tokio::time::timeout(DEADLINE, s.write(0, 0, data.clone(), 512))
        .await
        .expect("in time")
        .expect("write");
    for i in 0..30 {
        let back = tokio::time::timeout(DEADLINE, s.read(0, (i % 8) * 16, 16, 512))
            .await
            .expect("in time")
            .expect("read");
        let at = (i % 8) as usize * 16 * 512;
        assert_eq!(back, data.slice(at..at + 16 * 512));
    }
    s.logout().await.expect("logout");
    let log = proxy.handle.fault_log();
    drop(proxy);
    log.iter().map(ToString::to_string).collect()
}

#[tokio::test]
async fn the_same_seed_gives_the_same_fault_log() {
    let first = faulty_run(2026).await;
    assert!(
        first.iter().any(|l| l.contains("fault=corrupt-data")),
        "the run must corrupt something: {first:#?}"
    );
    assert!(first
        .iter()
        .any(|l| l.contains("fault=skipped-corrupt-header")));
    assert_eq!(first, faulty_run(2026).await);
    assert_ne!(first, faulty_run(2027).await);
}
