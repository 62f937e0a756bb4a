//! Data digests of reads from a mapped tmpfs LUN come from the target's per-chunk CRC table
//! (sluice-storage `cached_crc32c`): interleaved writes of every shape (partial chunks, across
//! stripes, many small PDUs) and concurrent reads must never produce a digest error or wrong
//! data, because this initiator checks every data digest.

mod common;

use bytes::Bytes;
use common::{config, noise as pattern, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, Session};
use sluice_target::config::Backend;

const BLOCK: u32 = 512;
const LUN_BYTES: usize = 4 << 20;

async fn read(s: &Session, at: usize, len: usize) -> Bytes {
    let out = s
        .execute(Command::read(
            0,
            &sluice_scsi::cdb::read16((at / BLOCK as usize) as u64, len as u32 / BLOCK, false),
            len as u32,
        ))
        .await
        .unwrap()
        .check()
        .unwrap();
    out.data
}

#[tokio::test]
async fn digests_from_the_crc_table_follow_every_write() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("lun.img");
    std::fs::write(&path, pattern(LUN_BYTES, 1)).unwrap(); // fully allocated: mapped
    let mut cfg = config();
    cfg.targets[0].luns[0].backend = Backend::File {
        path: path.clone(),
        size: None,
        direct: false,
        huge_pages: true,
    };
    let t = TestTarget::start(cfg);
    let mut opts = ConnectOptions::default();
    opts.set_digests(true, true);
    // Small Data-Out PDUs too, so that some writes arrive in many pieces.
    opts.apply("MaxBurstLength", "65536").unwrap();
    let s = Session::connect(&t.portal(), IQN, opts).await.unwrap();
    assert!(s.params().data_digest, "data digests negotiated");
    // Consume the POWER ON unit attention.
    let _ = s
        .execute(Command::none(0, &sluice_scsi::cdb::test_unit_ready()))
        .await;

    let mut model = pattern(LUN_BYTES, 1);
    // Reads first: the table fills from the file's bytes.
    assert!(read(&s, 0, 1 << 20).await == model[..1 << 20]);
    let writes: [(usize, usize); 7] = [
        (512, 512),                   // inside one chunk
        (4096 * 5 + 1024, 3 * 4096),  // partial chunks at both ends
        ((1 << 20) - 8192, 16_384),   // across the 1 MiB stripe boundary
        (2 << 20, 1 << 20),           // whole stripe, many Data-Out PDUs
        (0, 4096),                    // first chunk
        (LUN_BYTES - 4096, 4096),     // last chunk
        ((3 << 20) + 512, 200 * 512), // odd length
    ];
    for (round, &(at, len)) in writes.iter().enumerate() {
        let data = pattern(len, 100 + round as u64);
        s.write(
            0,
            (at / BLOCK as usize) as u64,
            Bytes::from(data.clone()),
            BLOCK,
        )
        .await
        .unwrap();
        model[at..at + len].copy_from_slice(&data);
        // Read back large, unaligned windows around every write so far.
        for &(w_at, w_len) in &writes[..=round] {
            let lo = w_at.saturating_sub(70 * 512) / 512 * 512;
            let hi = (w_at + w_len + 70 * 512).min(LUN_BYTES);
            assert!(
                read(&s, lo, hi - lo).await == model[lo..hi],
                "round {round}"
            );
        }
    }
    // Concurrent readers and writers on disjoint halves, then everything read back.
    let mut tasks = Vec::new();
    for k in 0..4u64 {
        let s = s.clone();
        let half = k as usize % 2 * (LUN_BYTES / 2);
        let data = pattern(256 * 1024, 500 + k);
        let at = half + (k as usize / 2) * (1 << 20);
        model[at..at + data.len()].copy_from_slice(&data);
        tasks.push(tokio::spawn(async move {
            s.write(0, (at / BLOCK as usize) as u64, Bytes::from(data), BLOCK)
                .await
                .unwrap();
            read(&s, half, 1 << 20).await.len()
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for at in (0..LUN_BYTES).step_by(1 << 20) {
        assert!(read(&s, at, 1 << 20).await == model[at..at + (1 << 20)]);
    }
    assert_eq!(s.counters().data_digest_errors, 0);
    s.logout().await.unwrap();
}
