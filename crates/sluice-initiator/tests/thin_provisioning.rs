//! Thin provisioning end to end: UNMAP through an iSCSI session to a thin file LUN punches
//! holes in the backing file (its allocated blocks shrink), GET LBA STATUS reports the range
//! deallocated, and reads return zeros; filling the LUN past its soft threshold raises the
//! unit attention THIN PROVISIONING SOFT THRESHOLD REACHED.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use bytes::Bytes;
use common::{config, TestTarget, IQN};
use sluice_initiator::{Command, ConnectOptions, Session};
use sluice_scsi::cdb::{self, UnmapDescriptor};
use sluice_target::config::{Backend, LuOptions, LunDef};

const BS: u32 = 512;
const MIB: u64 = 1 << 20;

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// GET LBA STATUS from `lba`: (lba, blocks, provisioning status) per descriptor.
async fn lba_status(s: &Session, lba: u64) -> Vec<(u64, u32, u8)> {
    let out = s
        .execute_good(Command::read(
            0,
            &cdb::get_lba_status(lba, 8 + 16 * 8),
            8 + 16 * 8,
        ))
        .await
        .unwrap();
    out.data[8..]
        .chunks(16)
        .map(|d| {
            let lba = u64::from_be_bytes(d[0..8].try_into().unwrap());
            let n = u32::from_be_bytes(d[8..12].try_into().unwrap());
            (lba, n, d[12] & 0x0F)
        })
        .collect()
}

async fn unmap_on_a_thin_file_lun(dir: tempfile::TempDir) {
    let path = dir.path().join("lun.img");
    let mut c = config();
    c.targets[0].luns = vec![LunDef {
        number: 0,
        backend: Backend::File {
            path: path.clone(),
            size: Some(64 * MIB),
            direct: false,
            huge_pages: false,
        },
        block_size: BS,
        read_only: false,
        removable: false,
        serial: None,
        options: LuOptions {
            thin: true,
            // 20 % of 64 MiB: crossed by the fourth 4 MiB write below.
            soft_threshold_percent: Some(20),
            ..LuOptions::default()
        },
    }];
    let t = TestTarget::start(c);
    let s = Session::connect(&t.portal(), IQN, ConnectOptions::default())
        .await
        .unwrap();
    let _ = s.execute(Command::none(0, &cdb::test_unit_ready())).await;
    // The LU says it is thin, and that unmapped blocks read zeros.
    let cap = s
        .execute_good(Command::read(0, &cdb::read_capacity16(32), 32))
        .await
        .unwrap();
    assert_eq!(cap.data[14] & 0xC0, 0xC0, "LBPME and LBPRZ");
    assert_eq!(allocated(&path), 0, "a new thin LUN allocates nothing");

    // 16 MiB of data: the file gets at least that much.
    let data = Bytes::from(vec![0x5A; (16 * MIB) as usize]);
    for i in 0..4 {
        let at = i * 4 * MIB;
        s.write(
            0,
            at / u64::from(BS),
            data.slice(at as usize..(at + 4 * MIB) as usize),
            BS,
        )
        .await
        .unwrap();
        let tur = s
            .execute(Command::none(0, &cdb::test_unit_ready()))
            .await
            .unwrap();
        let sense = tur.sense.map(|s| (s.key.0, s.asc, s.ascq));
        if i < 3 {
            assert_eq!(
                sense,
                None,
                "below the soft threshold after {} MiB",
                4 * (i + 1)
            );
        } else {
            assert_eq!(
                sense,
                Some((6, 0x38, 0x07)),
                "THIN PROVISIONING SOFT THRESHOLD REACHED"
            );
        }
    }
    s.synchronize_cache(0).await.unwrap();
    let before = allocated(&path);
    assert!(before >= 16 * MIB, "{before}");
    let blocks = |bytes: u64| bytes / u64::from(BS);
    assert_eq!(
        lba_status(&s, 0).await[..2],
        [
            (0, blocks(16 * MIB) as u32, 0),
            (blocks(16 * MIB), blocks(48 * MIB) as u32, 1)
        ]
    );

    // UNMAP 4 MiB..12 MiB, in two descriptors.
    let (c, list) = cdb::unmap(&[
        UnmapDescriptor {
            lba: blocks(4 * MIB),
            blocks: blocks(3 * MIB) as u32,
        },
        UnmapDescriptor {
            lba: blocks(7 * MIB),
            blocks: blocks(5 * MIB) as u32,
        },
    ]);
    s.execute_good(Command::write(0, &c, list)).await.unwrap();
    let after = allocated(&path);
    assert_eq!(
        before - after,
        8 * MIB,
        "the backing file's allocated blocks shrink"
    );
    assert_eq!(
        lba_status(&s, blocks(4 * MIB)).await[..3],
        [
            (blocks(4 * MIB), blocks(8 * MIB) as u32, 1),
            (blocks(12 * MIB), blocks(4 * MIB) as u32, 0),
            (blocks(16 * MIB), blocks(48 * MIB) as u32, 1),
        ]
    );
    let zeros = s
        .read(0, blocks(4 * MIB), blocks(8 * MIB) as u32, BS)
        .await
        .unwrap();
    assert!(zeros.iter().all(|&b| b == 0), "unmapped blocks read zeros");
    let kept = s.read(0, blocks(12 * MIB), 8, BS).await.unwrap();
    assert!(kept.iter().all(|&b| b == 0x5A), "the rest is untouched");

    // WRITE SAME(16) with UNMAP and NDOB deallocates too.
    let ws = cdb::write_same16(0, blocks(MIB) as u32, true, true);
    s.execute_good(Command::none(0, &ws)).await.unwrap();
    assert_eq!(allocated(&path), after - MIB);
    assert_eq!(lba_status(&s, 0).await[0], (0, blocks(MIB) as u32, 1));
    s.logout().await.unwrap();
}

#[tokio::test]
async fn unmap_of_a_thin_file_lun_on_disk_punches_holes() {
    unmap_on_a_thin_file_lun(tempfile::tempdir().unwrap()).await;
}

#[tokio::test]
async fn unmap_of_a_thin_file_lun_on_tmpfs_punches_holes() {
    unmap_on_a_thin_file_lun(tempfile::tempdir_in("/dev/shm").unwrap()).await;
}
