//! Forced operational parameters: the PDU counters follow the RFC 7143 rules (sections
//! 13.10-13.14 and 11.8), plus digests and CHAP against an in-process `sluice target`.

mod common;

use bytes::Bytes;
use common::{chap, config, model, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, Session};
use sluice_proto::chap::ChapAlgorithm;

async fn write_with(
    immediate: bool,
    initial_r2t: bool,
    mrdsl: u32,
    max_r2t: u16,
) -> (Vec<u32>, u32, u32) {
    let mut cfg = config();
    cfg.offer.max_recv_data_segment_length = mrdsl;
    cfg.offer.first_burst_length = 32 * 1024;
    cfg.offer.max_burst_length = 64 * 1024;
    cfg.offer.immediate_data = immediate;
    cfg.offer.initial_r2t = initial_r2t;
    cfg.offer.max_outstanding_r2t = max_r2t;
    let t = TestTarget::start(cfg);
    let mut opts = ConnectOptions::default();
    for (k, v) in [
        ("ImmediateData", if immediate { "Yes" } else { "No" }),
        ("InitialR2T", if initial_r2t { "Yes" } else { "No" }),
        ("FirstBurstLength", "32768"),
        ("MaxBurstLength", "65536"),
        ("MaxRecvDataSegmentLength", "4096"),
        ("MaxOutstandingR2T", &max_r2t.to_string()),
    ] {
        opts.apply(k, v).unwrap();
    }
    let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
    let p = s.params();
    assert_eq!(
        (
            p.immediate_data,
            p.initial_r2t,
            p.target_max_recv_data_segment_length
        ),
        (immediate, initial_r2t, mrdsl)
    );
    assert_eq!(p.max_outstanding_r2t, max_r2t);
    s.test_unit_ready(0).await.unwrap();
    let len = 168 * 1024;
    let data: Bytes = (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
    let out = s
        .execute(Command::write(
            0,
            &sluice_scsi::cdb::write16(64, len / 512, false),
            data.clone(),
        ))
        .await
        .unwrap()
        .check()
        .unwrap();
    let before = s.counters().data_in();
    let read = s
        .execute(Command::read(
            0,
            &sluice_scsi::cdb::read16(64, len / 512, false),
            len,
        ))
        .await
        .unwrap()
        .check()
        .unwrap();
    assert_eq!(read.data, data);
    // Section 13.12: every Data-In carries at most our MaxRecvDataSegmentLength (4096).
    assert_eq!(read.stats.data_in, len / 4096);
    assert_eq!(s.counters().data_in() - before, u64::from(len / 4096));
    let expect = model(len, immediate, initial_r2t, 32768, 65536, mrdsl);
    assert_eq!(
        out.stats.sequences, expect,
        "imm={immediate} r2t={initial_r2t} mrdsl={mrdsl}"
    );
    let pdus: u32 = out.stats.sequences.iter().sum();
    assert_eq!(
        out.stats.data_out,
        pdus - u32::from(out.stats.immediate_bytes > 0)
    );
    let c = s.counters();
    assert_eq!(c.r2t(), u64::from(out.stats.r2t));
    s.logout().await.unwrap();
    (
        out.stats.sequences,
        out.stats.r2t,
        out.stats.immediate_bytes,
    )
}

#[tokio::test]
async fn issue_example_168k_write() {
    // ImmediateData=Yes, InitialR2T=No, FBL 32 KiB, MBL 64 KiB, target MRDSL 1500.
    let (seqs, r2t, imm) = write_with(true, false, 1500, 1).await;
    assert_eq!(seqs, vec![22, 44, 44, 6]);
    assert_eq!((r2t, imm), (3, 1500));
}

#[tokio::test]
async fn forced_parameter_matrix() {
    for immediate in [false, true] {
        for initial_r2t in [false, true] {
            for (mrdsl, max_r2t) in [(512, 1), (8192, 4)] {
                let (seqs, r2t, _) = write_with(immediate, initial_r2t, mrdsl, max_r2t).await;
                assert_eq!(
                    r2t as usize,
                    seqs.len() - usize::from(!initial_r2t || immediate)
                );
            }
        }
    }
    assert_eq!(
        model(168 * 1024, false, true, 32768, 65536, 1500),
        vec![44, 44, 28]
    );
}

#[tokio::test]
async fn digests_both_ways() {
    let t = TestTarget::start(config());
    let mut opts = ConnectOptions::default();
    opts.set_digests(true, true);
    let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
    assert!(s.params().header_digest && s.params().data_digest);
    let data = Bytes::from(vec![0x5a; 256 * 1024]);
    s.write(0, 0, data.clone(), 512).await.unwrap();
    assert_eq!(s.read(0, 0, 512, 512).await.unwrap(), data);
    assert_eq!(s.counters().data_digest_errors, 0);
}

#[tokio::test]
async fn chap_one_way_mutual_and_wrong_secret() {
    let mut cfg = config();
    cfg.targets[0].chap = Some(chap(
        "alice",
        "alicesecret12",
        Some(("tgt", "targetsecret34")),
    ));
    let t = TestTarget::start(cfg);
    for alg in [
        ChapAlgorithm::Md5,
        ChapAlgorithm::Sha1,
        ChapAlgorithm::Sha256,
        ChapAlgorithm::Sha3_256,
    ] {
        let mut opts = ConnectOptions::default();
        opts.set_chap("alice", "alicesecret12");
        opts.chap.as_mut().unwrap().algorithms = vec![alg];
        let s = Session::connect(&t.portal(), IQN, opts.clone())
            .await
            .unwrap();
        s.inquiry(0).await.unwrap();
        s.logout().await.unwrap();
        opts.set_mutual_chap("tgt", "targetsecret34").unwrap();
        let s = Session::connect(&t.portal(), IQN, opts.clone())
            .await
            .unwrap();
        s.inquiry(0).await.unwrap();
        s.logout().await.unwrap();
        // The target proving a different secret than we expect is refused by us.
        opts.set_mutual_chap("tgt", "not-the-secret").unwrap();
        let e = Session::connect(&t.portal(), IQN, opts).await.unwrap_err();
        assert!(
            e.to_string().contains("target authentication failed"),
            "{e}"
        );
    }
    let mut opts = ConnectOptions::default();
    opts.set_chap("alice", "wrongsecret99");
    let e = Session::connect(&t.portal(), IQN, opts).await.unwrap_err();
    assert!(e.to_string().contains("authentication failure"), "{e}");
    assert_eq!(e.login_status().map(|s| s.class), Some(2));
}
