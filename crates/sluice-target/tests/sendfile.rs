//! Large reads of a mapped file LUN over real TCP connections: without a data digest their
//! Data-In segments go out with `sendfile(2)` (`sluice_target::sendfile_bytes` grows), with one
//! or with the switch off they are copied; the initiator gets the file's bytes either way,
//! including what was just written. A test binary of its own: the switch and the counter are
//! process-wide.

mod support;

use std::net::SocketAddr;

use sluice_target::config::Backend;
use support::*;

const LUN_BYTES: usize = 8 << 20;

/// Reads that must come out of the file: 1 MiB from the start, 1 MiB at an odd block,
/// 256 KiB near the end.
const READS: [(u32, u16); 3] = [(0, 2048), (4097, 2048), (16384 - 512, 512)];

async fn login(addr: SocketAddr, isid: u8, digests: bool) -> Peer {
    let mut opts = LoginOpts::normal().with_isid(isid);
    if digests {
        opts = opts.with_digests();
    }
    // Data-In segments of 256 KiB: well above the sendfile threshold.
    opts.offer.max_recv_data_segment_length = 262_144;
    let mut p = Peer::tcp(addr).await;
    p.login(&opts).await.expect("login");
    p.clear_unit_attention().await;
    p
}

/// Reads [`READS`] and checks each against `file`.
async fn read_and_check(p: &mut Peer, file: &[u8], what: &str) {
    for (lba, blocks) in READS {
        let got = p.read(lba, blocks).await;
        let at = lba as usize * BLOCK;
        assert!(
            got == file[at..at + usize::from(blocks) * BLOCK],
            "{what}: READ of {blocks} blocks at {lba} returned other bytes"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_reads_of_a_mapped_file_are_right_with_and_without_sendfile() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("lun.img");
    let mut file: Vec<u8> = (0..LUN_BYTES).map(|i| (i * 31 / 7) as u8).collect();
    std::fs::write(&path, &file).unwrap();

    let mut cfg = config();
    cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
    cfg.targets[0].luns[0].backend = Backend::File {
        path: path.clone(),
        size: None,
        direct: false,
        huge_pages: false,
    };
    let (addr, stop_tx, server) = run_tcp(cfg).await;

    // Switched on: the data goes by sendfile, and shows a write just made.
    sluice_target::set_sendfile(true);
    let mut p = login(addr, 1, false).await;
    let before = sluice_target::sendfile_bytes();
    read_and_check(&mut p, &file, "sendfile").await;
    let sent = sluice_target::sendfile_bytes() - before;
    let total: u64 = READS
        .iter()
        .map(|&(_, b)| u64::from(b) * BLOCK as u64)
        .sum();
    assert_eq!(sent, total, "every Data-In byte went by sendfile");
    let new = pattern(64 * BLOCK, 0x3d);
    assert_eq!(p.write_immediate(4100, &new).await.status, 0);
    file[4100 * BLOCK..4164 * BLOCK].copy_from_slice(&new);
    read_and_check(&mut p, &file, "sendfile after a write").await;

    // A data digest needs the bytes in user space: copied, and still right.
    let before = sluice_target::sendfile_bytes();
    let mut d = login(addr, 2, true).await;
    read_and_check(&mut d, &file, "data digest").await;
    assert_eq!(
        sluice_target::sendfile_bytes(),
        before,
        "no sendfile with a digest"
    );

    // Switched off: new connections copy.
    sluice_target::set_sendfile(false);
    let mut off = login(addr, 3, false).await;
    read_and_check(&mut off, &file, "switched off").await;
    assert_eq!(
        sluice_target::sendfile_bytes(),
        before,
        "no sendfile when off"
    );
    // The connection that started with it on keeps it.
    read_and_check(&mut p, &file, "sendfile, still on").await;
    assert!(sluice_target::sendfile_bytes() > before);

    drop((p, d, off));
    stop_tx.send(()).unwrap();
    server.await.unwrap().expect("run returns Ok");
}
