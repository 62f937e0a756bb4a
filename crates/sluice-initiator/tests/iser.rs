//! iSER (RFC 7145) between the initiator library and an in-process target serving iSER on
//! the software RDMA provider: data both ways, the operations the datamovers chose, and the
//! failures: a buffer advertised outside its region, a lost Hello, a target that refuses
//! RDMAExtensions.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_initiator::iser::IserOptions;
use sluice_initiator::{ConnectOptions, Session};
use sluice_rdma::{FaultAction, FaultPlan, FrameKind};
use sluice_target::{IserServeOptions, Target};
use sluice_test_support::{config, IQN};
use tokio::net::TcpListener;

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<_>>()
        .into()
}

/// A target serving iSER on a port of the kernel's choosing (and TCP on another).
async fn iser_target(opts: IserServeOptions) -> (Arc<Target>, String) {
    let target = Arc::new(Target::new(config()).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let portal = listener.local_addr().unwrap().to_string();
    let t = Arc::clone(&target);
    tokio::spawn(async move { t.serve_iser(listener, opts).await });
    (target, portal)
}

fn iser_options(iser: IserOptions) -> ConnectOptions {
    let mut o = ConnectOptions::default();
    o.use_iser(iser);
    o.max_reconnects = 0;
    o.connect_timeout = Duration::from_secs(5);
    o.login_timeout = Duration::from_secs(5);
    o
}

async fn write_read_verify(s: &Session, lba: u64, len: usize, seed: u8) {
    let data = pattern(len, seed);
    s.write(0, lba, data.clone(), 512).await.unwrap();
    let back = s.read(0, lba, (len / 512) as u32, 512).await.unwrap();
    assert!(
        back == data,
        "{len} bytes at LBA {lba} read back differently"
    );
}

/// Waits (5 s at most) until the target counted an iSER error, failing with `missing`
/// otherwise, then shows it still serves: a fresh session writes and reads back `len` bytes.
async fn target_counts_an_error_and_serves_on(
    target: &Target,
    portal: &str,
    len: usize,
    seed: u8,
    missing: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while target.iser_counters().status().errors == 0 {
        assert!(tokio::time::Instant::now() < deadline, "{missing}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let good = Session::connect(portal, IQN, iser_options(IserOptions::default()))
        .await
        .unwrap();
    write_read_verify(&good, 0, len, seed).await;
    good.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_moves_by_rdma_write_and_read() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let opts = iser_options(IserOptions::default());
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    s.test_unit_ready(0).await.ok();
    for (i, len) in [4096usize, 65536, 1 << 20, 8 << 20].into_iter().enumerate() {
        write_read_verify(&s, (i as u64) * 4096, len, i as u8).await;
    }
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!(c.rdma_connections, 1, "{c:?}");
    assert_eq!(c.errors, 0, "{c:?}");
    // Both sides' defaults: ImmediateData=Yes, InitialR2T=No, FirstBurstLength 64 KiB (the
    // target's cap over iSER). Every read's data went by RDMA Write; each write's first
    // 64 KiB in Sends (immediate data and unsolicited Data-Out), the rest by RDMA Read.
    assert_eq!(s.params().first_burst_length, 65536);
    assert!(!s.params().initial_r2t && s.params().immediate_data);
    assert!(
        c.rdma_writes >= 4 && c.rdma_write_bytes >= (4096 + 65536 + (9 << 20)),
        "{c:?}"
    );
    let solicited = ((1 << 20) - 65536) + ((8 << 20) - 65536);
    assert!(c.rdma_reads >= 2 && c.rdma_read_bytes == solicited, "{c:?}");
    assert_eq!(c.unsolicited_bytes, 4096 + 3 * 65536, "{c:?}");
    assert!(c.sends >= 8 && c.sends_received >= 8, "{c:?}");
    let i = stats.snapshot();
    assert_eq!(i.placed_bytes, c.rdma_write_bytes, "{i:?} {c:?}");
    assert_eq!(i.readable_bytes, solicited, "{i:?}");
    assert_eq!(
        (i.unsolicited_bytes, i.unsolicited_data_outs),
        (c.unsolicited_bytes, c.unsolicited_data_outs),
        "{i:?} {c:?}"
    );
    // Four reads; two writes go beyond the first burst (the 4 KiB and 64 KiB ones do not).
    assert_eq!((i.read_buffers, i.write_buffers), (4, 2), "{i:?}");
}

/// Real RDMA orders the initiator's Sends and its RDMA Read Responses each in its own stream,
/// not one against the other: here the first unsolicited Data-Out Send of a write (and the
/// two behind it) goes only after the Read Response of its first solicited burst, so the
/// target sees solicited data first. Its core, which takes a write's data in offset order
/// (DataPDUInOrder, DataSequenceInOrder: RFC 7143 sections 13.18 and 13.19), still gets the
/// unsolicited data first, and the write lands whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_data_before_the_unsolicited_sends_still_writes_in_order() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    // Send 0 is the iSER Hello, 1 and 2 the TEST UNIT READY below (repeated after the unit
    // attention a new session's first command meets), 3 the write's command with 16 KiB of
    // immediate data, 4 the first of its three unsolicited Data-Out (FirstBurstLength 64 KiB
    // over iSER). Without the datamover holding the read data, the core sees the solicited
    // data first and fails the write (ABORTED COMMAND, not enough unsolicited data).
    let opts = iser_options(IserOptions {
        faults: FaultPlan::rule(Some(FrameKind::Send), 4, FaultAction::DeferPastReadResponse),
        ..IserOptions::default()
    });
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    s.test_unit_ready(0).await.ok();
    // One command (256 KiB): 64 KiB in Sends, the rest by RDMA Read.
    let data = pattern(256 << 10, 12);
    tokio::time::timeout(Duration::from_secs(10), s.write(0, 0, data.clone(), 512))
        .await
        .expect("the write ends, it does not hang")
        .unwrap();
    let i = stats.snapshot();
    assert_eq!((i.write_buffers, i.unsolicited_data_outs), (1, 3), "{i:?}");
    assert_eq!(i.readable_bytes, (256 << 10) - 65536, "{i:?}");
    let back = s.read(0, 0, (256 << 10) / 512, 512).await.unwrap();
    assert!(back == data, "the write read back differently");
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!(c.errors, 0, "{c:?}");
    assert_eq!(c.unsolicited_bytes, 65536, "{c:?}");
}

/// sluice's iSER datamovers keep a task's buffers for its first issue only, so an iSER
/// session runs at ErrorRecoveryLevel 0 whatever the initiator offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iser_sessions_negotiate_error_recovery_level_zero() {
    let (_target, portal) = iser_target(IserServeOptions::default()).await;
    let mut opts = iser_options(IserOptions::default());
    opts.offer.error_recovery_level = 2;
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    assert_eq!(s.params().error_recovery_level, 0);
    write_read_verify(&s, 0, 64 << 10, 7).await;
    s.logout().await.unwrap();
}

/// A send queue far shorter than the work the commands in flight need: the target takes the
/// next PDU from its connection task only while the queue has room for what it becomes, so
/// 32 reads and 32 writes at once (each read several RDMA Writes plus a Send) complete, where
/// posting past the queue's depth would fail the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_send_queue_throttles_instead_of_failing() {
    let mut serve = IserServeOptions::default();
    serve.qp.send_queue_depth = 4;
    let (target, portal) = iser_target(serve).await;
    // InitialR2T=Yes, so that each 64 KiB write's data beyond its immediate data is
    // RDMA-Read (with InitialR2T=No it would all fit the first burst, in Sends).
    let mut opts = iser_options(IserOptions::default());
    opts.offer.initial_r2t = true;
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    s.test_unit_ready(0).await.ok();
    let len = 64 << 10;
    let mut writes = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let s = s.clone();
        writes.spawn(async move { s.write(0, i * 128, pattern(len, i as u8), 512).await });
    }
    while let Some(done) = writes.join_next().await {
        done.unwrap().unwrap();
    }
    let mut reads = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let s = s.clone();
        reads.spawn(async move { (i, s.read(0, i * 128, (len / 512) as u32, 512).await) });
    }
    while let Some(done) = reads.join_next().await {
        let (i, back) = done.unwrap();
        assert!(back.unwrap() == pattern(len, i as u8), "read {i} differs");
    }
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!(c.errors, 0, "{c:?}");
    assert!(c.rdma_writes >= 32 && c.rdma_reads >= 32, "{c:?}");
}

/// A link of one PDU each way between the connection task and the datamover: the driver
/// waits for room with PDUs still queued in the session core, and the datamover waits for the
/// driver, while 40 writes, then 40 reads, of 4 KiB to 1 MiB are in flight; all complete,
/// intact, every read by RDMA Write, and the logout still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_of_depth_one_makes_both_sides_wait_not_fail() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let opts = iser_options(IserOptions {
        link_depth: 1,
        ..IserOptions::default()
    });
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    let sizes = [4096usize, 16 << 10, 64 << 10, 300 << 10, 1 << 20];
    // (LBA, length) of each command, one after the other: 11 MiB of the 16 MiB LUN.
    let mut lba = 0u64;
    let ios: Vec<(u64, usize)> = (0..40)
        .map(|i| {
            let len = sizes[i % sizes.len()];
            let at = lba;
            lba += (len / 512) as u64;
            (at, len)
        })
        .collect();
    let mut writes = tokio::task::JoinSet::new();
    for (i, &(lba, len)) in ios.iter().enumerate() {
        let s = s.clone();
        writes.spawn(async move { s.write(0, lba, pattern(len, i as u8), 512).await });
    }
    while let Some(done) = writes.join_next().await {
        done.unwrap().unwrap();
    }
    let mut reads = tokio::task::JoinSet::new();
    for (i, &(lba, len)) in ios.iter().enumerate() {
        let s = s.clone();
        reads.spawn(async move { (i, len, s.read(0, lba, (len / 512) as u32, 512).await) });
    }
    while let Some(done) = reads.join_next().await {
        let (i, len, back) = done.unwrap();
        assert!(back.unwrap() == pattern(len, i as u8), "read {i} differs");
    }
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!(c.errors, 0, "{c:?}");
    let total: usize = ios.iter().map(|&(_, len)| len).sum();
    let moved = stats.snapshot();
    assert_eq!(moved.read_buffers, 40, "{moved:?}");
    assert_eq!(moved.placed_bytes, total as u64, "{moved:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_advertised_outside_its_region_is_a_remote_access_error() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    // Every read buffer is advertised 1 MiB past its region's end.
    let bad = iser_options(IserOptions {
        advertise_skew: 1 << 30,
        ..IserOptions::default()
    });
    let s = Session::connect(&portal, IQN, bad).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(20), s.read(0, 0, 8, 512))
        .await
        .expect("the read ends, it does not hang")
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("remote access"), "{text}");
    // The target dropped that connection and serves everyone else.
    target_counts_an_error_and_serves_on(&target, &portal, 65536, 9, "the target saw no error")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hello_times_out_with_a_clear_error() {
    // The target waits longer than the initiator: the initiator's own timeout is what is
    // tested, and a target giving up first would end the connection under it (a lost
    // connection, not a lost Hello).
    let (target, portal) = iser_target(IserServeOptions {
        hello_timeout: Duration::from_secs(2),
        ..IserServeOptions::default()
    })
    .await;
    let lost = iser_options(IserOptions {
        faults: FaultPlan::rule(Some(FrameKind::Send), 0, FaultAction::Drop),
        hello_timeout: Duration::from_millis(500),
        ..IserOptions::default()
    });
    let err = Session::connect(&portal, IQN, lost).await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("HelloReply"), "{text}");
    // Nothing lingers: the next initiator gets in.
    target_counts_an_error_and_serves_on(&target, &portal, 4096, 3, "the target did not give up")
        .await;
}

/// A plain iSCSI target (it answers RDMAExtensions=NotUnderstood).
fn plain_target() -> sluice_test_support::TestTarget {
    sluice_test_support::TestTarget::start(config())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_refuses_rdma_extensions_fails_the_login_clearly() {
    let t = plain_target();
    let err = Session::connect(
        &t.addr.to_string(),
        IQN,
        iser_options(IserOptions::default()),
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("refused iSER"), "{text}");
    assert!(text.contains("NotUnderstood"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_refuses_rdma_extensions_is_used_over_tcp_when_allowed() {
    let t = plain_target();
    let opts = iser_options(IserOptions {
        fallback_to_tcp: true,
        ..IserOptions::default()
    });
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&t.addr.to_string(), IQN, opts)
        .await
        .unwrap();
    write_read_verify(&s, 0, 1 << 20, 5).await;
    s.logout().await.unwrap();
    assert_eq!(stats.snapshot().sends, 0, "nothing went by RDMA");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_iscsi_initiator_on_the_iser_port_stays_on_tcp() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let s = Session::connect(&portal, IQN, ConnectOptions::default())
        .await
        .unwrap();
    write_read_verify(&s, 0, 1 << 20, 6).await;
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!((c.tcp_connections, c.rdma_connections), (1, 0), "{c:?}");
}

/// A target that declares MaxOutstandingUnexpectedPDUs=2 (RFC 7145 section 6.3.4, the
/// key's minimum): 32 verified writes and reads in flight at once with pings beside them
/// complete, the initiator never has more than two unexpected PDUs (the pings, immediate)
/// outstanding, and task management functions, whose responses release what they answer,
/// leave no count behind: pings still go after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_unexpected_pdu_limit_holds_pdus_back_and_loses_nothing() {
    let (target, portal) = iser_target(IserServeOptions {
        declare_max_unexpected: Some(2),
        ..IserServeOptions::default()
    })
    .await;
    let opts = iser_options(IserOptions::default());
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    s.test_unit_ready(0).await.ok();
    let len = 64 << 10;
    let mut io = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let s = s.clone();
        io.spawn(async move {
            let data = pattern(len, i as u8);
            s.write(0, i * 128, data.clone(), 512).await.unwrap();
            let back = s.read(0, i * 128, (len / 512) as u32, 512).await.unwrap();
            assert!(back == data, "block {i} read back differently");
        });
    }
    let mut pings = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let s = s.clone();
        pings.spawn(async move { s.ping().await });
    }
    while let Some(done) = io.join_next().await {
        done.unwrap();
    }
    while let Some(done) = pings.join_next().await {
        done.unwrap().unwrap();
    }
    // Task management ends with its response: three in a row, then pings, would stall
    // behind a limit of two if any were left counted.
    let tmfs = async {
        for _ in 0..3 {
            s.task_management(sluice_initiator::TmfFunction::LogicalUnitReset, 0, None)
                .await
                .unwrap();
        }
        for _ in 0..3 {
            s.ping().await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), tmfs)
        .await
        .expect("nothing is held back for good");
    s.logout().await.unwrap();
    let i = stats.snapshot();
    assert!(
        (1..=2).contains(&i.peak_unexpected),
        "the target's limit held: {i:?}"
    );
    let c = target.iser_counters().status();
    assert_eq!(c.errors, 0, "{c:?}");
}

/// RFC 7145 section 8: every Send consumes a receive buffer the peer posted, and a Send that
/// finds none is final. An initiator that stops posting receives (a test hook: three in
/// all, the HelloReply's included) gets a clear error on the command whose response found
/// none, not a hang or a panic; the target ends that connection (ReceiverNotReady) and
/// serves the next session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_finds_no_receive_ends_the_connection_clearly() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let starved = iser_options(IserOptions {
        recv_budget: Some(3),
        ..IserOptions::default()
    });
    let s = Session::connect(&portal, IQN, starved).await.unwrap();
    let mut failure = None;
    for _ in 0..4 {
        match tokio::time::timeout(Duration::from_secs(20), s.read(0, 0, 8, 512))
            .await
            .expect("the read ends, it does not hang")
        {
            Ok(_) => {}
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    let text = failure.expect("the third Send from the target found no receive");
    assert!(text.contains("receiver not ready"), "{text}");
    target_counts_an_error_and_serves_on(&target, &portal, 65536, 11, "the target saw no error")
        .await;
}

/// Runs `cmd` until it gets an answer other than the unit attention a new session's first
/// commands meet (at most 4 times), and returns that answer.
async fn until_not_unit_attention(
    s: &Session,
    cmd: impl Fn() -> sluice_initiator::Command,
) -> sluice_initiator::CommandOutcome {
    for _ in 0..4 {
        let outcome = s.start(cmd()).wait().await.expect("the command ends");
        let ua = outcome
            .sense
            .as_ref()
            .is_some_and(|d| d.key == sluice_scsi::SenseKey::UNIT_ATTENTION);
        if !ua {
            return outcome;
        }
    }
    panic!("unit attention after unit attention");
}

/// The target's test fault hook (`TargetConfig::fault_hook`) applies to iSER connections in
/// RDMA mode, on the PDUs its core exchanges with the datamover: here its resets end each
/// connection after 24 PDUs. At ErrorRecoveryLevel 0 (iSER's) each reset costs the session;
/// the initiator reinstates it over iSER again, and every write reads back. Before the hook
/// applied in RDMA mode no connection was ever reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_targets_fault_hook_resets_iser_connections_and_no_write_is_lost() {
    let mut config = config();
    let plan = sluice_fault::FaultPlan {
        reset_every: std::num::NonZeroU64::new(24),
        ..sluice_fault::FaultPlan::default()
    };
    config.fault_hook = Some(Arc::new(sluice_fault::FaultHook::new(plan, 9)));
    let target = Arc::new(Target::new(config).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let portal = listener.local_addr().unwrap().to_string();
    let t = Arc::clone(&target);
    tokio::spawn(async move { t.serve_iser(listener, IserServeOptions::default()).await });

    let opts = iser_options(IserOptions::default());
    writes_survive_resets_in_rdma_mode(&target, &portal, opts).await;
}

/// MC/S over iSER. FirstBurstLength is leading-only (RFC 7143 section 13.14): a connection
/// joining the session negotiates none, yet the session's value bounds the unsolicited data
/// sent on it, and both datamovers take a write's unsolicited length from it (RFC 7145
/// section 7.3.4: the solicited part starts in the write buffer where the unsolicited part
/// ends). Here the session settles on 32 KiB: a 256 KiB write sends 16 KiB of immediate data
/// and one 16 KiB unsolicited Data-Out in Sends, and the target RDMA-Reads the other 224 KiB.
/// On the joined connection the datamovers once assumed the default 64 KiB, and its writes
/// failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_iser_connection_follows_the_sessions_first_burst() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let mut opts = iser_options(IserOptions::default());
    opts.connections = 2;
    opts.offer.first_burst_length = 32768;
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.connections().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second connection never joined"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p = s.params();
    assert_eq!(p.first_burst_length, 32768);
    assert!(!p.initial_r2t && p.immediate_data, "{p:?}");
    s.test_unit_ready(0).await.ok();
    let len = 256 << 10;
    // The writes back to back, so that round robin puts every other one on each connection.
    for i in 0..6u64 {
        let write = s.write(0, i * 1024, pattern(len, i as u8), 512);
        tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("the write ends")
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    for i in 0..6u64 {
        let back = s.read(0, i * 1024, (len / 512) as u32, 512).await.unwrap();
        assert!(
            back == pattern(len, i as u8),
            "write {i} read back differently"
        );
    }
    // Round robin: both connections carried writes.
    let per_connection: Vec<u64> = s.connections().iter().map(|c| c.write_bytes).collect();
    assert!(
        per_connection.iter().all(|b| *b >= 2 * len as u64),
        "{per_connection:?}"
    );
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!((c.rdma_connections, c.errors), (2, 0), "{c:?}");
    assert_eq!(c.unsolicited_bytes, 6 * 32768, "{c:?}");
    assert_eq!(c.rdma_read_bytes, 6 * (len as u64 - 32768), "{c:?}");
    let i = stats.snapshot();
    assert_eq!(i.unsolicited_data_outs, 6, "{i:?}");
}

/// Waits (boundedly) until the session has `n` connections.
async fn until_connections(s: &Session, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.connections().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} connections joined",
            s.connections().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes spread over the session's connections (round robin), each read back; every
/// connection carried writes.
async fn writes_on_every_connection(s: &Session, seed: u8) {
    let len = 64 << 10;
    for i in 0..4u64 {
        s.write(0, i * 256, pattern(len, seed + i as u8), 512)
            .await
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    for i in 0..4u64 {
        let back = s.read(0, i * 256, (len / 512) as u32, 512).await.unwrap();
        assert!(back == pattern(len, seed + i as u8), "write {i} read back");
    }
    let per_connection: Vec<u64> = s.connections().iter().map(|c| c.write_bytes).collect();
    assert!(per_connection.iter().all(|b| *b > 0), "{per_connection:?}");
}

/// RDMAExtensions is leading-only (RFC 7145 section 6.3.1): an iSER session whose leading
/// connection fell back to TCP (the target does not serve iSER there) is in TCP mode, and
/// its second connection joins it over TCP without offering the key again, rather than
/// being taken for a refusal of iSER.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_fell_back_to_tcp_joins_its_connections_over_tcp() {
    let t = plain_target();
    let mut opts = iser_options(IserOptions {
        fallback_to_tcp: true,
        ..IserOptions::default()
    });
    opts.connections = 2;
    let stats = opts.iser_stats.clone();
    let s = Session::connect(&t.addr.to_string(), IQN, opts)
        .await
        .unwrap();
    until_connections(&s, 2).await;
    writes_on_every_connection(&s, 11).await;
    s.logout().await.unwrap();
    assert_eq!(stats.snapshot().sends, 0, "nothing went by RDMA");
}

/// A plain iSCSI session through the iSER listener is in TCP mode, and so is its joined
/// connection (the target answers for the session's mode, not the connection's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_session_on_the_iser_port_joins_over_tcp() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let opts = ConnectOptions {
        connections: 2,
        ..ConnectOptions::default()
    };
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    until_connections(&s, 2).await;
    writes_on_every_connection(&s, 21).await;
    s.logout().await.unwrap();
    let c = target.iser_counters().status();
    assert_eq!((c.tcp_connections, c.rdma_connections), (2, 0), "{c:?}");
}

/// The initiator's test fault hook (`ConnectOptions::fault_hook`) applies to its iSER
/// connections in RDMA mode, on the PDUs its core exchanges with the datamover: here its
/// resets end each connection after 24 PDUs. At ErrorRecoveryLevel 0 (iSER's) each reset
/// costs the session; the initiator reinstates it over iSER, and every write reads back.
/// Before, the hook did not apply in RDMA mode and no connection was ever reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initiators_fault_hook_resets_iser_connections_and_no_write_is_lost() {
    let (target, portal) = iser_target(IserServeOptions::default()).await;
    let mut opts = iser_options(IserOptions::default());
    let plan = sluice_fault::FaultPlan {
        reset_every: std::num::NonZeroU64::new(24),
        ..sluice_fault::FaultPlan::default()
    };
    opts.fault_hook = Some(Arc::new(sluice_fault::FaultHook::new(plan, 5)));
    writes_survive_resets_in_rdma_mode(&target, &portal, opts).await;
}

/// The initiator's hook duplicates every PDU it hands to the datamover in RDMA mode: each
/// NOP-Out ping reaches the target twice, and the target answers both. Before, the hook did
/// not apply in RDMA mode and each ping was answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initiators_fault_hook_duplicates_what_it_sends_in_rdma_mode() {
    let (_target, portal) = iser_target(IserServeOptions::default()).await;
    let mut opts = iser_options(IserOptions::default());
    let plan = sluice_fault::FaultPlan {
        to_target: sluice_fault::Rules {
            duplicate: sluice_fault::Rate::ONE,
            ..sluice_fault::Rules::default()
        },
        ..sluice_fault::FaultPlan::default()
    };
    opts.fault_hook = Some(Arc::new(sluice_fault::FaultHook::new(plan, 3)));
    opts.keepalive_interval = None;
    let s = Session::connect(&portal, IQN, opts).await.unwrap();
    for _ in 0..3 {
        s.ping().await.unwrap();
    }
    // NOP-In is opcode 0x20: two answers to each ping.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.counters().pdus_received[0x20] < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "NOP-Ins: {}",
            s.counters().pdus_received[0x20]
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.counters().pdus_sent[0x00],
        3,
        "the core sent each ping once"
    );
    s.logout().await.ok();
}

/// 24 writes of 8 KiB (16 blocks, with immediate data), each read back, on a session whose
/// connections a fault hook keeps resetting: every write lands, the resets cost at least two
/// sessions, and every session came back in RDMA mode.
async fn writes_survive_resets_in_rdma_mode(
    target: &Target,
    portal: &str,
    mut opts: ConnectOptions,
) {
    use sluice_scsi::cdb;
    opts.max_reconnects = 1000;
    opts.reconnect_delay = Some(Duration::from_millis(20));
    let s = Session::connect(portal, IQN, opts).await.unwrap();
    for i in 0..24u64 {
        // 8 KiB writes (16 blocks) with immediate data, each read back.
        let lba = i * 64;
        let data = pattern(8192, i as u8);
        let w = until_not_unit_attention(&s, || {
            sluice_initiator::Command::write(0, &cdb::write16(lba, 16, false), data.clone())
        })
        .await;
        assert!(w.is_good(), "write {i}: {w:?}");
        let r = until_not_unit_attention(&s, || {
            sluice_initiator::Command::read(0, &cdb::read16(lba, 16, false), 8192)
        })
        .await;
        assert!(r.is_good() && r.data == data, "read {i}: {r:?}");
    }
    let reconnects = s.counters().reconnects;
    assert!(reconnects >= 2, "the resets cost sessions: {reconnects}");
    let iser = target.iser_counters().status();
    assert!(
        iser.rdma_connections > reconnects,
        "every session came back in RDMA mode: {iser:?}, {reconnects} reconnects"
    );
    s.logout().await.ok();
}
