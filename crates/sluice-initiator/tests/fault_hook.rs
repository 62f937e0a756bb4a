//! Error recovery end to end between the two drivers over loopback TCP, with faults injected
//! by the drivers' own test hooks (`TargetConfig::fault_hook`, `ConnectOptions::fault_hook`):
//! at ErrorRecoveryLevel 1 digest errors, lost PDUs and duplicates are recovered within the
//! connection (SNACK, recovery R2T, command retry; RFC 7143 section 7) and every command
//! completes with the right data; at level 0 a reset connection costs the session, which is
//! reinstated, and no acknowledged write is lost.

mod common;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use rand::{Rng, SeedableRng};
use sluice_fault::{DropEvery, FaultHook, FaultPlan, PduKind, Rate, Rules};
use sluice_initiator::{Command, CommandOutcome, ConnectOptions, Session, SessionCounters};
use sluice_proto::pdu::opcode;
use sluice_scsi::{cdb, SenseKey};
use sluice_target::config::TargetConfig;

const BLOCK: u32 = 512;
/// Blocks of LUN 0 (16 MiB).
const LUN_BLOCKS: u64 = 32 * 1024;

/// A target whose segments are small (several PDUs per command), with quick recovery timers
/// and, optionally, faults of its own.
fn target_config(hook: Option<FaultHook>) -> TargetConfig {
    let mut c = config();
    c.offer.max_recv_data_segment_length = 8192;
    c.offer.max_burst_length = 32 * 1024;
    c.offer.first_burst_length = 8192;
    c.recovery.sequence_timeout = Duration::from_millis(100);
    c.recovery.data_ack_every = Some(4);
    c.fault_hook = hook.map(Arc::new);
    c
}

/// An initiator asking for `erl` with both digests, small segments and quick retries.
fn initiator_opts(erl: u8, hook: Option<FaultHook>) -> ConnectOptions {
    let mut o = ConnectOptions {
        reconnect_delay: Some(Duration::from_millis(20)),
        max_reconnects: 1000,
        ..ConnectOptions::default()
    };
    o.apply("ErrorRecoveryLevel", &erl.to_string()).unwrap();
    o.apply("HeaderDigest", "CRC32C").unwrap();
    o.apply("DataDigest", "CRC32C").unwrap();
    o.apply("MaxRecvDataSegmentLength", "8192").unwrap();
    o.recovery.retry_timeout = Duration::from_millis(100);
    o.recovery.command_timeout = Some(Duration::from_secs(60));
    o.fault_hook = hook.map(Arc::new);
    o
}

/// What a workload saw.
#[derive(Debug, Default)]
struct Seen {
    /// Commands answered with the unit attention of a new I_T nexus (after session
    /// reinstatement), and sent again as any initiator would.
    unit_attentions: u32,
}

/// Runs `cmd` until it gets an answer other than a unit attention (at most 4 times); any
/// other failure fails the test.
async fn until_not_ua(
    s: &Session,
    what: &str,
    mut cmd: impl FnMut() -> Command,
    first: sluice_initiator::InFlight,
    seen: &mut Seen,
) -> CommandOutcome {
    let mut inflight = first;
    for _ in 0..4 {
        let outcome = inflight
            .wait()
            .await
            .unwrap_or_else(|e| panic!("{what} failed: {e}"));
        let ua = outcome
            .sense
            .as_ref()
            .is_some_and(|d| d.key == SenseKey::UNIT_ATTENTION);
        if !ua {
            assert!(outcome.is_good(), "{what}: {outcome:?}");
            return outcome;
        }
        seen.unit_attentions += 1;
        inflight = s.start(cmd());
    }
    panic!("{what}: unit attention after unit attention");
}

/// Rounds of 8 concurrent writes of random sizes and contents at disjoint places, each round
/// read back concurrently and compared; every command must succeed.
async fn write_and_verify(s: &Session, rounds: u32, seed: u64) -> Seen {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = Seen::default();
    for round in 0..rounds {
        let mut extents = Vec::new();
        let mut writes = Vec::new();
        for slot in 0..8u64 {
            let blocks = rng.gen_range(1..=96u32);
            let lba = slot * (LUN_BLOCKS / 8) + rng.gen_range(0..1000);
            let mut data = vec![0u8; (blocks * BLOCK) as usize];
            rng.fill(&mut data[..]);
            let data = Bytes::from(data);
            writes.push(s.start(write(lba, blocks, &data)));
            extents.push((lba, blocks, data));
        }
        for ((lba, blocks, data), w) in extents.iter().zip(writes) {
            let what = format!("round {round}: write at {lba}");
            until_not_ua(s, &what, || write(*lba, *blocks, data), w, &mut seen).await;
        }
        let reads: Vec<_> = extents
            .iter()
            .map(|(lba, blocks, _)| s.start(read(*lba, *blocks)))
            .collect();
        for ((lba, blocks, data), r) in extents.iter().zip(reads) {
            let what = format!("round {round}: read at {lba}");
            let outcome = until_not_ua(s, &what, || read(*lba, *blocks), r, &mut seen).await;
            assert!(outcome.data == *data, "{what}: wrong data");
        }
    }
    seen
}

fn write(lba: u64, blocks: u32, data: &Bytes) -> Command {
    Command::write(0, &cdb::write16(lba, blocks, false), data.clone())
}

fn read(lba: u64, blocks: u32) -> Command {
    Command::read(0, &cdb::read16(lba, blocks, false), blocks * BLOCK)
}

/// `RUST_LOG=debug` shows what both drivers did.
fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Logs in and takes the power-on unit attention every new I_T nexus starts with.
async fn connect(t: &TestTarget, opts: ConnectOptions) -> Session {
    log();
    let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
    s.test_unit_ready(0).await.unwrap();
    s
}

fn snacks(c: &SessionCounters) -> u64 {
    c.pdus_sent[usize::from(opcode::SNACK_REQUEST)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erl1_recovers_data_corrupted_both_ways_by_the_target() {
    let plan = FaultPlan::symmetric(Rules {
        corrupt_data: Rate::new(0.03).unwrap(),
        ..Rules::default()
    });
    let t = TestTarget::start(target_config(Some(FaultHook::new(plan, 11))));
    let s = connect(&t, initiator_opts(1, None)).await;
    assert_eq!(s.params().error_recovery_level, 1);
    let seen = write_and_verify(&s, 12, 1).await;
    let c = s.counters();
    assert_eq!(seen.unit_attentions, 0);
    assert_eq!(c.reconnects, 0, "recovered within the connection");
    assert!(c.data_digest_errors > 0, "Data-In was corrupted: {c:?}");
    assert!(snacks(&c) > 0, "and asked for again with SNACK");
    assert!(
        c.rejects > 0,
        "corrupted Data-Out was rejected (section 7.8)"
    );
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erl1_recovers_lost_and_damaged_pdus_of_every_kind_from_the_initiator_hook() {
    // Drops need header digests (a lost PDU is found by the sequence numbers around it) and
    // everything here is recovered by SNACK, recovery R2T, status resend or command retry.
    let every = |kind, n| DropEvery {
        kind,
        every: NonZeroU64::new(n).unwrap(),
    };
    let plan = FaultPlan {
        to_target: Rules {
            corrupt_header: Rate::new(0.01).unwrap(),
            drop: vec![every(PduKind::DataOut, 23), every(PduKind::Command, 37)],
            ..Rules::default()
        },
        to_initiator: Rules {
            corrupt_header: Rate::new(0.01).unwrap(),
            drop: vec![
                every(PduKind::DataIn, 19),
                every(PduKind::R2t, 7),
                every(PduKind::Response, 13),
            ],
            ..Rules::default()
        },
        ..FaultPlan::default()
    };
    let t = TestTarget::start(target_config(None));
    let s = connect(&t, initiator_opts(1, Some(FaultHook::new(plan, 5)))).await;
    let seen = write_and_verify(&s, 12, 2).await;
    let c = s.counters();
    assert_eq!(seen.unit_attentions, 0);
    assert_eq!(c.reconnects, 0, "recovered within the connection");
    assert!(
        snacks(&c) > 0,
        "lost Data-In, R2Ts and statuses were asked for"
    );
    assert!(c.commands_retried > 0, "lost commands were retried");
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erl1_ignores_duplicated_pdus() {
    let plan = FaultPlan::symmetric(Rules {
        duplicate: Rate::new(0.05).unwrap(),
        ..Rules::default()
    });
    let t = TestTarget::start(target_config(Some(FaultHook::new(plan, 3))));
    let s = connect(&t, initiator_opts(1, None)).await;
    let seen = write_and_verify(&s, 8, 3).await;
    let c = s.counters();
    assert_eq!(seen.unit_attentions, 0);
    assert_eq!(c.reconnects, 0);
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erl0_reinstates_the_session_after_resets_and_loses_no_acknowledged_write() {
    let plan = FaultPlan {
        reset_every: NonZeroU64::new(150),
        ..FaultPlan::default()
    };
    let t = TestTarget::start(target_config(Some(FaultHook::new(plan, 4))));
    let s = connect(&t, initiator_opts(0, None)).await;
    assert_eq!(s.params().error_recovery_level, 0);
    // Every command ends GOOD (after the unit attention of each new session, if it met
    // one) and every write reads back.
    let seen = write_and_verify(&s, 10, 4).await;
    let c = s.counters();
    assert!(c.reconnects > 0, "the resets cost sessions: {c:?}");
    assert!(
        seen.unit_attentions > 0,
        "new sessions announced themselves"
    );
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erl2_recovers_reset_connections_and_reassigns_their_tasks() {
    let plan = FaultPlan {
        reset_every: NonZeroU64::new(150),
        ..FaultPlan::default()
    };
    let mut tc = target_config(Some(FaultHook::new(plan, 4)));
    // A replacement may log in at once (section 6.2: DefaultTime2Wait), and the failed
    // connection's tasks wait long enough for it (DefaultTime2Retain).
    tc.offer.default_time2wait = 0;
    tc.offer.default_time2retain = 20;
    let t = TestTarget::start(tc);
    let s = connect(&t, initiator_opts(2, None)).await;
    assert_eq!(s.params().error_recovery_level, 2);
    let seen = write_and_verify(&s, 10, 4).await;
    let c = s.counters();
    assert_eq!(c.reconnects, 0, "the session was never reinstated: {c:?}");
    assert_eq!(seen.unit_attentions, 0, "one I_T nexus throughout");
    assert!(
        c.connection_recoveries > 0,
        "connections were replaced: {c:?}"
    );
    assert!(
        c.reassigned > 0,
        "and their tasks moved with TASK REASSIGN: {c:?}"
    );
    s.logout().await.unwrap();
}
