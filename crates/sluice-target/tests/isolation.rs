//! Isolation: connections that send garbage (random bytes, a malformed AHS, a huge
//! DataSegmentLength) must not disturb another logged-in connection, which keeps completing
//! READs with the right data throughout.

mod support;

use rand::{Rng, SeedableRng};
use sluice_proto::pdu::codes::RejectReason;
use sluice_proto::pdu::Pdu;
use support::*;

/// A logged-in connection that sends `count` random chunks, draining whatever comes back.
async fn random_garbage(h: &Harness, seed: u64) {
    let (mut p, task) = h
        .logged_in_with(&LoginOpts::normal().with_isid(seed as u8))
        .await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..64 {
        let len = rng.gen_range(1..2048);
        let chunk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        p.send_raw(&chunk).await;
        // Whatever comes back (Rejects, responses) or a close is fine; the target must not stall.
        while let Ok(_pdu) = p.recv(std::time::Duration::from_millis(1)).await {}
        if task.is_finished() {
            break;
        }
    }
    drop(p);
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
}

/// A SCSI command whose AHS runs past TotalAHSLength: rejected, and the connection lives on.
async fn malformed_ahs(h: &Harness) {
    let (mut p, task) = h.logged_in_with(&LoginOpts::normal().with_isid(100)).await;
    let cmd = p.scsi_command(&read10(0, 1), true, false, BLOCK as u32);
    let encoded = p.encode(&Pdu::ScsiCommand(cmd));
    let mut bytes = encoded[..48].to_vec();
    bytes[4] = 1; // TotalAHSLength: one word
    bytes.extend_from_slice(&[0x00, 0x64, 0x01, 0x00]); // AHSLength 100, Extended CDB
    p.send_raw(&bytes).await;
    match p.expect().await {
        Pdu::Reject(r) => assert!(
            [RejectReason::ProtocolError, RejectReason::InvalidPduField].contains(&r.reason),
            "{r:?}"
        ),
        other => panic!("expected Reject, got {other:?}"),
    }
    p.assert_alive().await;
    drop(p);
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
}

/// A header announcing a 16 MiB data segment: the connection is closed.
async fn huge_segment(h: &Harness) {
    let (mut p, task) = h.logged_in_with(&LoginOpts::normal().with_isid(101)).await;
    let mut bhs = [0u8; 48];
    bhs[0] = 0x01; // SCSI Command
    bhs[5..8].copy_from_slice(&[0xff, 0xff, 0xff]);
    p.send_raw(&bhs).await;
    p.expect_closed().await;
    tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_one_connection_does_not_disturb_another() {
    let h = std::sync::Arc::new(Harness::new(config()));
    let (mut good, _task) = h.logged_in().await;
    let data = pattern(16 * BLOCK, 77);
    assert_eq!(good.write_immediate(500, &data).await.status, 0);

    let bad = {
        let h = std::sync::Arc::clone(&h);
        tokio::spawn(async move {
            for seed in 0..4 {
                random_garbage(&h, seed).await;
            }
            malformed_ahs(&h).await;
            huge_segment(&h).await;
            // Pre-login garbage as well.
            let (mut p, task) = h.connect();
            p.send_raw(&pattern(4096, 1)).await;
            p.expect_closed().await;
            tokio::time::timeout(ANSWER, task).await.unwrap().unwrap();
        })
    };
    // At least one read, even if the garbage connections are all done before the first one
    // completes (it happens on a loaded machine: the check used to race with them).
    let mut reads = 0;
    loop {
        assert_eq!(good.read(500, 16).await, data, "read {reads} corrupted");
        reads += 1;
        if bad.is_finished() {
            break;
        }
    }
    bad.await.expect("garbage connections behaved as expected");
    // And afterwards.
    for _ in 0..10 {
        assert_eq!(good.read(500, 16).await, data);
    }
    good.assert_alive().await;
    assert!(reads > 0);
    assert_eq!(h.target.session_count(), 1, "only the good session is left");
}
