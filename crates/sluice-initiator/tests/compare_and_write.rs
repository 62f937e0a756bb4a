//! COMPARE AND WRITE racing WRITE from two iSCSI sessions, against `sluice target` on each
//! execution path: a memory LUN and a mapped tmpfs file (run inline on the connections'
//! tasks, two runtime workers at once) and a file on disk (run on the blocking pool).
//!
//! Each round both sessions start together: session A reads what the blocks hold and sends a
//! COMPARE AND WRITE expecting that, session B writes the same blocks. The range is 255
//! blocks of 4 KiB, across a 1 MiB boundary (where the memory backend's chunk locks and a
//! mapping's stripes change). Afterwards the blocks must hold exactly one writer's data (no
//! torn range), and which one is fixed by what A saw and how its COMPARE AND WRITE ended:
//! GOOD after seeing B's data means A's data is last; GOOD after seeing the old data means B
//! wrote after A, so B's data is last; MISCOMPARE means B wrote first and A wrote nothing.
//! A COMPARE AND WRITE that let the write in between its comparison and its own write ends
//! GOOD having seen the old data with its own data last: B's acknowledged write is lost.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, ScsiStatus, Session};
use sluice_scsi::cdb;
use sluice_target::config::{Backend, LunDef};
use tokio::sync::Barrier;

const BS: u32 = 4096;
const BLOCKS: u8 = 255;
/// 200 blocks of 4 KiB: the range runs from 800 KiB to 1820 KiB, across the 1 MiB mark.
const LBA: u64 = 200;
const ROUNDS: usize = 300;

fn pattern(v: u8) -> Bytes {
    Bytes::from(vec![v; usize::from(BLOCKS) * BS as usize])
}

fn target_with(backend: Backend) -> TestTarget {
    let mut c = config();
    c.targets[0].luns = vec![LunDef::new(0, backend, BS)];
    TestTarget::start_with_workers(c, 2)
}

async fn session(t: &TestTarget) -> Session {
    let s = Session::connect(&t.portal(), IQN, ConnectOptions::default())
        .await
        .unwrap();
    // The first command of each I_T nexus meets the power-on unit attention.
    let _ = s.execute(Command::none(0, &cdb::test_unit_ready())).await;
    s
}

async fn race(t: &TestTarget) {
    let a = session(t).await;
    let b = session(t).await;
    a.write(0, LBA, pattern(0), BS).await.unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let writer = {
        let barrier = Arc::clone(&barrier);
        tokio::spawn(async move {
            for round in 0..ROUNDS {
                barrier.wait().await;
                let v = (2 * round + 1) as u8;
                b.write(0, LBA, pattern(v), BS).await.unwrap();
                barrier.wait().await;
            }
        })
    };
    let (mut good, mut miscompares) = (0, 0);
    for round in 0..ROUNDS {
        barrier.wait().await;
        let seen = a.read(0, LBA, 1, BS).await.unwrap()[0];
        let mine = (2 * round + 2) as u8;
        let data = [pattern(seen), pattern(mine)].concat();
        let caw = a
            .execute(Command::write(
                0,
                &cdb::compare_and_write(LBA, BLOCKS, false),
                data,
            ))
            .await
            .unwrap();
        barrier.wait().await;
        let now = a.read(0, LBA, u32::from(BLOCKS), BS).await.unwrap();
        let last = now[0];
        assert!(
            now.iter().all(|&x| x == last),
            "round {round}: torn data after COMPARE AND WRITE and WRITE"
        );
        let written = (2 * round + 1) as u8;
        let expected = if caw.status == ScsiStatus::Good {
            good += 1;
            if seen == written {
                mine
            } else {
                written
            }
        } else {
            let sense = caw.sense.expect("MISCOMPARE carries sense");
            assert_eq!((sense.key.0, sense.asc, sense.ascq), (0x0E, 0x1D, 0x00));
            miscompares += 1;
            written
        };
        assert_eq!(
            last, expected,
            "round {round}: saw {seen}, COMPARE AND WRITE {:?}: a write was lost",
            caw.status
        );
    }
    writer.await.unwrap();
    eprintln!("{ROUNDS} rounds: {good} COMPARE AND WRITE won, {miscompares} miscompared");
    assert!(good > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_lun() {
    let t = target_with(Backend::Memory { size: 16 << 20 });
    race(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_tmpfs_file_lun() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("lun.img");
    // Fully allocated on tmpfs: served through a shared mapping.
    std::fs::write(&path, vec![0u8; 16 << 20]).unwrap();
    let t = target_with(Backend::File {
        path,
        size: None,
        direct: false,
        huge_pages: false,
    });
    race(&t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_file_lun_on_the_blocking_pool() {
    let dir = tempfile::tempdir().unwrap();
    let t = target_with(Backend::File {
        path: dir.path().join("lun.img"),
        size: Some(16 << 20),
        direct: false,
        huge_pages: false,
    });
    race(&t).await;
}
