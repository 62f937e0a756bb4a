//! EXTENDED COPY end to end: 1 GiB copied from one LUN of a target to another by one
//! command, the data moving inside the target (the session's byte counters show the
//! parameter list go out and nothing else); and a copy aborted with ABORT TASK.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{config, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, Error, Session, TmfFunction, TmfResponse};
use sluice_scsi::cdb::{self, BlockCopy};
use sluice_target::config::{Backend, LunDef};

const BS: u32 = 512;
const GIB: u64 = 1 << 30;

/// Two LUNs backed by files on tmpfs: the source holds `pattern`, the destination zeros.
fn two_file_luns(dir: &Path, size: u64) -> (TestTarget, PathBuf, PathBuf) {
    let (src, dst) = (dir.join("src.img"), dir.join("dst.img"));
    let mut f = std::fs::File::create(&src).unwrap();
    let piece: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i / 512 + i % 251) as u8)
        .collect();
    for i in 0..size >> 20 {
        let mut p = piece.clone();
        p[0] = i as u8;
        std::io::Write::write_all(&mut f, &p).unwrap();
    }
    std::fs::write(&dst, vec![0u8; 0]).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&dst)
        .unwrap()
        .set_len(size)
        .unwrap();
    let lun = |number, path: &Path| {
        let backend = Backend::File {
            path: path.to_owned(),
            size: None,
            direct: false,
            huge_pages: false,
        };
        LunDef::new(number, backend, BS)
    };
    let mut c = config();
    c.targets[0].luns = vec![lun(0, &src), lun(1, &dst)];
    (TestTarget::start_with_workers(c, 2), src, dst)
}

/// The LU's NAA designator, from its Device Identification VPD page.
async fn naa(s: &Session, lun: u16) -> Vec<u8> {
    // The page's body: designators one after another.
    let page = s.vpd(lun, 0x83).await.unwrap();
    let mut at = 0;
    while at + 4 <= page.len() {
        let len = usize::from(page[at + 3]);
        if page[at + 1] & 0x3F == 0x03 {
            return page[at + 4..at + 4 + len].to_vec();
        }
        at += 4 + len;
    }
    panic!("no NAA designator for LUN {lun}");
}

/// An EXTENDED COPY parameter list copying `bytes` from LUN 0 to LUN 1, at LBA 0 of each, in
/// segments of at most 65535 blocks.
fn copy_list(list_id: u8, src: &[u8], dst: &[u8], bytes: u64) -> Vec<u8> {
    let blocks = bytes / u64::from(BS);
    let copies: Vec<BlockCopy> = (0..blocks)
        .step_by(65535)
        .map(|lba| BlockCopy {
            source: 0,
            destination: 1,
            blocks: (blocks - lba).min(65535) as u16,
            source_lba: lba,
            destination_lba: lba,
        })
        .collect();
    cdb::copy_list(list_id, true, &[(1, 3, src, BS), (1, 3, dst, BS)], &copies)
}

fn same_contents(a: &Path, b: &Path) -> bool {
    let (mut a, mut b) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = a.read(&mut x).unwrap();
        b.read_exact(&mut y[..n]).unwrap();
        if x[..n] != y[..n] {
            return false;
        }
        if n == 0 {
            return true;
        }
    }
}

async fn login(t: &TestTarget) -> Session {
    let s = Session::connect(&t.portal(), IQN, ConnectOptions::default())
        .await
        .unwrap();
    for lun in [0, 1] {
        let _ = s.execute(Command::none(lun, &cdb::test_unit_ready())).await;
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gibibyte_moves_inside_the_target() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (t, src, dst) = two_file_luns(dir.path(), GIB);
    let s = login(&t).await;
    let (from, to) = (naa(&s, 0).await, naa(&s, 1).await);
    assert_ne!(from, to);
    let list = copy_list(7, &from, &to, GIB);
    let before = s.counters();
    let started = std::time::Instant::now();
    let out = s
        .execute(Command::write(
            0,
            &cdb::extended_copy(list.len() as u32),
            list.clone(),
        ))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(out.is_good(), "{:?}", out.sense);
    let after = s.counters();
    let sent = after.bytes_sent - before.bytes_sent;
    let received = after.bytes_received - before.bytes_received;
    eprintln!(
        "EXTENDED COPY of 1 GiB in {took:?}; the session sent {sent} bytes and received \
         {received} (parameter list: {} bytes)",
        list.len()
    );
    // The parameter list and PDU headers only: no payload either way.
    assert!(sent < list.len() as u64 + 4096, "{sent} bytes sent");
    assert!(received < 4096, "{received} bytes received");
    assert_eq!(after.read_bytes - before.read_bytes, 0);
    assert!(
        same_contents(&src, &dst),
        "the destination holds the source's bytes"
    );
    // The copy's status was held for its list identifier.
    let rcr = s
        .execute_good(Command::read(0, &cdb::receive_copy_results(0, 7, 64), 64))
        .await
        .unwrap();
    let d = &rcr.data;
    assert_eq!(d[4], 0x01, "completed without error");
    assert_eq!(usize::from(u16::from_be_bytes([d[5], d[6]])), 33);
    assert_eq!(
        (d[7], u32::from_be_bytes(d[8..12].try_into().unwrap())),
        (0, 1 << 30)
    );
    s.logout().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_task_stops_a_copy() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (t, _src, dst) = two_file_luns(dir.path(), GIB);
    let s = login(&t).await;
    let (from, to) = (naa(&s, 0).await, naa(&s, 1).await);
    let list = copy_list(9, &from, &to, GIB);
    let copy = s.start(Command::write(
        0,
        &cdb::extended_copy(list.len() as u32),
        list,
    ));
    tokio::time::sleep(Duration::from_millis(30)).await;
    // The connection still answers while the copy runs.
    s.test_unit_ready(1).await.unwrap();
    let r = s
        .task_management(TmfFunction::AbortTask, 0, Some(copy.id()))
        .await
        .unwrap();
    assert_eq!(r, TmfResponse::FunctionComplete);
    assert!(matches!(copy.wait().await, Err(Error::Aborted)));
    // The copy stopped part way: its held status says so, and the end was never written.
    let rcr = s
        .execute_good(Command::read(0, &cdb::receive_copy_results(0, 9, 64), 64))
        .await
        .unwrap();
    let d = &rcr.data;
    assert_eq!(d[4], 0x02, "completed with an error");
    let copied = u64::from(u32::from_be_bytes(d[8..12].try_into().unwrap())) << (10 * d[7]);
    assert!(copied < GIB, "{copied} bytes copied before the abort");
    let mut tail = vec![1u8; 4096];
    let f = std::fs::File::open(&dst).unwrap();
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut tail, GIB - 4096).unwrap();
    assert!(tail.iter().all(|&b| b == 0));
    s.logout().await.unwrap();
}
