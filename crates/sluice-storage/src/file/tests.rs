//! Tests of what only the file backend promises; the shared contract is in `conformance.rs`.

use std::os::unix::fs::MetadataExt;

use super::*;

fn options(size: Option<u64>, block_size: u32) -> FileOptions {
    FileOptions {
        size,
        block_size,
        create: true,
        ..FileOptions::default()
    }
}

fn io_kind(r: Result<impl std::fmt::Debug, StorageError>) -> io::ErrorKind {
    match r {
        Err(StorageError::Io(e)) => e.kind(),
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn data_persists_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let dev = FileDevice::open(&path, options(Some(1 << 20), 512)).unwrap();
    dev.write_at(4096, &[0x5a; 1024], false).unwrap();
    dev.flush().unwrap();
    drop(dev);

    // Reopened without a size or create: the size comes from the file.
    let dev = FileDevice::open(&path, FileOptions::default()).unwrap();
    assert_eq!(dev.size_bytes(), 1 << 20);
    assert_eq!(dev.num_blocks(), 2048);
    let mut buf = [0; 1024];
    dev.read_at(4096, &mut buf).unwrap();
    assert_eq!(buf, [0x5a; 1024]);
    // Reopened with create and the same size: the existing data is kept.
    drop(dev);
    let dev = FileDevice::open(&path, options(Some(1 << 20), 4096)).unwrap();
    dev.read_at(4096, &mut buf).unwrap();
    assert_eq!(buf, [0x5a; 1024]);
}

#[test]
fn creating_a_gibibyte_file_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.img");
    let dev = FileDevice::open(&path, options(Some(1 << 30), 4096)).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 1 << 30);
    assert!(
        meta.blocks() * 512 < 64 * 1024,
        "st_blocks {}",
        meta.blocks()
    );
    let mut buf = vec![0xaa; 4096];
    dev.read_at((1 << 30) - 4096, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn read_only_refuses_writes_but_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let dev = FileDevice::open(&path, options(Some(64 * 1024), 512)).unwrap();
    dev.write_at(0, &[1; 512], true).unwrap();
    drop(dev);

    let ro = FileOptions {
        read_only: true,
        ..FileOptions::default()
    };
    let dev = FileDevice::open(&path, ro).unwrap();
    assert!(dev.read_only());
    let kind = io::ErrorKind::ReadOnlyFilesystem;
    assert_eq!(io_kind(dev.write_at(0, &[2; 512], false)), kind);
    assert_eq!(io_kind(dev.write_at(512, &[2; 512], true)), kind);
    assert_eq!(io_kind(dev.write_zeroes(0, 512, false)), kind);
    dev.flush().unwrap();
    let mut buf = [0; 512];
    dev.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, [1; 512]);
    // Out of range still wins over read-only.
    assert!(matches!(
        dev.write_at(64 * 1024, &[2; 512], false),
        Err(StorageError::OutOfRange { .. })
    ));
    // The descriptor itself is read-only.
    assert!(dev.file.write_at(&[2; 512], 0).is_err());
}

#[test]
fn sizes_that_are_not_whole_blocks_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let r = FileDevice::open(&path, options(Some(4096 + 512), 4096));
    assert_eq!(io_kind(r), io::ErrorKind::InvalidInput);
    assert!(!path.exists(), "nothing is created for a refused size");
    assert_eq!(
        io_kind(FileDevice::open(&path, options(Some(0), 512))),
        io::ErrorKind::InvalidInput
    );

    // An existing file whose length is not whole blocks, opened at its own size.
    std::fs::write(&path, [0u8; 1000]).unwrap();
    let r = FileDevice::open(&path, FileOptions::default());
    assert_eq!(io_kind(r), io::ErrorKind::InvalidInput);
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let invalid = io::ErrorKind::InvalidInput;
    assert_eq!(
        io_kind(FileDevice::open(&path, options(Some(4096), 1000))),
        invalid
    );
    assert_eq!(
        io_kind(FileDevice::open(&path, options(None, 512))),
        invalid
    );
    let ro_create = FileOptions {
        read_only: true,
        ..options(Some(4096), 512)
    };
    assert_eq!(io_kind(FileDevice::open(&path, ro_create)), invalid);
    let missing = FileDevice::open(&path, FileOptions::default());
    assert_eq!(io_kind(missing), io::ErrorKind::NotFound);
    assert!(!path.exists());
    // A character device is neither a file nor a block device.
    assert_eq!(
        io_kind(FileDevice::open("/dev/null", FileOptions::default())),
        invalid
    );
}

#[test]
fn a_size_grows_a_short_file_and_bounds_a_long_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    std::fs::write(&path, [7u8; 8192]).unwrap();

    let dev = FileDevice::open(&path, options(Some(4096), 512)).unwrap();
    assert_eq!(dev.size_bytes(), 4096);
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        8192,
        "never truncated"
    );
    drop(dev);

    let ro = FileOptions {
        size: Some(16384),
        read_only: true,
        ..FileOptions::default()
    };
    assert_eq!(
        io_kind(FileDevice::open(&path, ro)),
        io::ErrorKind::InvalidInput
    );

    let dev = FileDevice::open(&path, options(Some(16384), 512)).unwrap();
    assert_eq!(dev.size_bytes(), 16384);
    let mut buf = [0xaa; 512];
    dev.read_at(8192, &mut buf).unwrap();
    assert_eq!(buf, [0; 512]);
    dev.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, [7; 512]);
}

#[test]
fn direct_io_takes_aligned_and_unaligned_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lun.img");
    let opts = FileOptions {
        direct: true,
        ..options(Some(1 << 20), 4096)
    };
    let dev = FileDevice::open(&path, opts).unwrap();
    assert!(dev.direct());

    // Aligned: straight to the kernel.
    let mut aligned = AlignedBuf::zeroed(8192);
    aligned.as_mut_slice().fill(0x11);
    assert!(!dev.needs_bounce(aligned.as_slice()));
    dev.write_at(0, aligned.as_slice(), true).unwrap();

    // Unaligned (one byte into an allocation): through the bounce buffer.
    let mut backing = vec![0x22u8; 8192 + 1];
    assert!(dev.needs_bounce(&backing[1..]));
    dev.write_at(8192, &backing[1..], false).unwrap();

    dev.read_at(0, &mut backing[1..]).unwrap();
    assert!(backing[1..].iter().all(|&b| b == 0x11));
    dev.read_at(8192, aligned.as_mut_slice()).unwrap();
    assert!(aligned.as_slice().iter().all(|&b| b == 0x22));
    dev.flush().unwrap();
}

#[test]
fn aligned_buffers_are_aligned() {
    for len in [0, 1, 512, 4095, 4096, 1 << 20] {
        let mut buf = AlignedBuf::zeroed(len);
        assert_eq!(buf.as_slice().as_ptr().addr() % DIRECT_ALIGN, 0);
        assert_eq!(buf.as_mut_slice().len(), len);
        assert!(buf.as_slice().iter().all(|&b| b == 0));
    }
}

#[test]
fn files_in_ram_run_inline_and_others_on_the_pool() {
    // /dev/shm is tmpfs on Linux; the temporary directory is normally a disk filesystem.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let dev = FileDevice::open(shm.path().join("lun.img"), options(Some(1 << 20), 512)).unwrap();
    assert!(dev.memory_backed());
    assert!(!dev.blocks());

    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::open(dir.path().join("lun.img"), options(Some(1 << 20), 512)).unwrap();
    let on_disk = !is_memory_filesystem(&File::open(dir.path()).unwrap());
    assert_eq!(
        dev.blocks(),
        on_disk,
        "a disk file must run off the reactor"
    );
}

#[test]
fn files_in_ram_are_read_without_copy_and_see_later_writes() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = shm.path().join("lun.img");
    // Sparse (created with a size): not mapped, a read fault would allocate the holes.
    let sparse = FileDevice::open(&path, options(Some(1 << 20), 512)).unwrap();
    assert!(sparse.read_shared(0, 512).is_none());
    drop(sparse);
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let dev = FileDevice::open(&path, options(Some(1 << 20), 512)).unwrap();
    dev.write_at(8192, &[0xa5; 4096], false).unwrap();
    let got = dev.read_shared(8192 - 512, 4608).unwrap().unwrap();
    assert_eq!(&got[..512], &[0u8; 512][..]);
    assert!(got[512..].iter().all(|&b| b == 0xa5));
    // The slice is a view of the page cache: a write through pwrite shows (same pages).
    dev.write_at(8192, &[0x3c; 512], false).unwrap();
    let again = dev.read_shared(8192, 512).unwrap().unwrap();
    assert!(again.iter().all(|&b| b == 0x3c));
    assert!(matches!(
        dev.read_shared((1 << 20) - 512, 1024),
        Some(Err(StorageError::OutOfRange { .. }))
    ));
    // Dropping the device while slices live keeps the mapping alive (it is reference counted).
    drop(dev);
    assert!(got[512..1024].iter().all(|&b| b == 0x3c));
}

/// A slice of a mapped file names its file range: reading those bytes of that descriptor
/// gives the slice's bytes, also after a write through the mapping, and after the device is
/// gone (the range keeps the file open). Copies and unmapped files have none.
#[test]
fn mapped_slices_name_their_file_range_and_nothing_else_does() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = shm.path().join("lun.img");
    let len = 1 << 20;
    std::fs::write(&path, (0..len).map(|i| (i % 253) as u8).collect::<Vec<_>>()).unwrap();
    let dev = FileDevice::open(&path, options(Some(len as u64), 512)).unwrap();
    let got = dev.read_shared(8192 + 512, 70_000).unwrap().unwrap();
    let range = crate::file_range(&got).expect("a mapped slice has a file range");
    assert_eq!((range.offset, range.len), (8192 + 512, 70_000));
    dev.write_at(8192 + 1024, &[0xee; 512], false).unwrap();
    drop(dev);
    let mut back = vec![0u8; range.len];
    range.file.read_exact_at(&mut back, range.offset).unwrap();
    assert!(back == got[..], "the descriptor shows the mapping's bytes");
    assert_eq!(&back[512..1024], &[0xee; 512][..]);

    let copy = got.to_vec();
    assert!(crate::file_range(&copy).is_none(), "a copy");
    // Sparse, so not mapped: read with pread.
    let unmapped = FileDevice::open(
        shm.path().join("sparse.img"),
        options(Some(len as u64), 512),
    )
    .unwrap();
    assert!(unmapped.read_shared(0, 512).is_none());
    let mut buf = BytesMut::new();
    unmapped.read_append(0, 65_536, &mut buf).unwrap();
    assert!(crate::file_range(&buf).is_none(), "a pread buffer");
}

#[test]
fn disk_files_are_not_mapped_and_read_append_keeps_old_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let dev = FileDevice::open(dir.path().join("lun.img"), options(Some(1 << 20), 512)).unwrap();
    if dev.memory_backed() {
        return; // the temporary directory is itself in RAM here: nothing to check
    }
    assert!(dev.read_shared(0, 512).is_none());
    dev.write_at(0, &[7; 1024], false).unwrap();
    let mut out = bytes::BytesMut::from(&b"head"[..]);
    dev.read_append(512, 1024, &mut out).unwrap();
    assert_eq!(&out[..4], b"head");
    assert!(out[4..516].iter().all(|&b| b == 7));
    assert!(out[516..].iter().all(|&b| b == 0));
    assert_eq!(out.len(), 4 + 1024);
    assert!(dev.read_append((1 << 20) - 512, 1024, &mut out).is_err());
    assert_eq!(
        out.len(),
        4 + 1024,
        "a failed read leaves the buffer as it was"
    );
}

/// `ShmemPmdMapped` (kB) of this process's mapping of `path`, from /proc/self/smaps.
fn pmd_mapped_kib(path: &Path) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let name = path.to_str()?;
    let mut in_mapping = false;
    for line in smaps.lines() {
        if line
            .split_whitespace()
            .next()
            .is_some_and(|f| f.contains('-'))
            && line.contains(' ')
        {
            in_mapping = line.ends_with(name);
        } else if in_mapping {
            if let Some(v) = line.strip_prefix("ShmemPmdMapped:") {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

#[test]
fn a_mapped_tmpfs_file_is_collapsed_into_huge_pages_without_changing_a_byte() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = shm.path().join("lun.img");
    // Three whole 2 MiB windows and a partial one, fully allocated: mapped.
    let len = 3 * huge_pages::HUGE_PAGE + 64 * 1024;
    let data: Vec<u8> = (0..len).map(|i| (i * 31 / 7) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let dev = FileDevice::open(&path, FileOptions::default()).unwrap();
    let mapped = dev.read_shared(0, len).expect("mapped").unwrap();
    assert_eq!(
        mapped.as_ptr().addr() % huge_pages::HUGE_PAGE,
        0,
        "the mapping starts on a 2 MiB boundary"
    );

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let s = dev.huge_pages().expect("asked for by default");
        if s.finished || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(status.finished, "{status:?}");
    assert_eq!(status.windows, 3);
    if status.unsupported {
        // A kernel without MADV_COLLAPSE (before 6.1) or with shmem huge pages denied: the
        // device must simply keep working with small pages, as checked below.
        eprintln!("huge pages unavailable on this kernel: only the fallback is tested");
    } else {
        assert_eq!(status.collapsed + status.failed, 3, "{status:?}");
        assert!(status.collapsed >= 1, "no window collapsed: {status:?}");
        let kib = pmd_mapped_kib(&path).expect("mapping listed in smaps");
        assert!(
            kib >= 2048,
            "huge pages not mapped whole: ShmemPmdMapped {kib} kB"
        );
    }
    assert!(mapped[..] == data[..], "contents changed");
    // Writes through the collapsed mapping still reach the file.
    dev.write_at(5 << 20, &[0xa5; 8192], false).unwrap();
    let mut back = vec![0u8; 8192];
    dev.file.read_exact_at(&mut back, 5 << 20).unwrap();
    assert!(back.iter().all(|b| *b == 0xa5));
}

#[test]
fn huge_pages_are_only_asked_for_when_wanted() {
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = shm.path().join("lun.img");
    std::fs::write(&path, vec![1u8; 4 << 20]).unwrap();
    let opts = FileOptions {
        huge_pages: false,
        ..FileOptions::default()
    };
    let dev = FileDevice::open(&path, opts).unwrap();
    assert!(dev.read_shared(0, 4096).is_some(), "mapped");
    assert_eq!(dev.huge_pages(), None);
}

#[test]
fn a_thin_file_is_never_mapped_and_unmap_shrinks_it() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("lun.img");
    // Fully allocated on tmpfs: a thick LUN would be mapped.
    std::fs::write(&path, vec![1u8; 4 << 20]).unwrap();
    let thin = FileOptions {
        thin: true,
        ..FileOptions::default()
    };
    let dev = FileDevice::open(&path, thin).unwrap();
    assert!(
        dev.read_shared(0, 1 << 20).is_none(),
        "thin files are not mapped"
    );
    assert!(dev.deallocates());
    let before = std::fs::metadata(&path).unwrap().blocks();
    dev.discard(1 << 20, 2 << 20).unwrap();
    let after = std::fs::metadata(&path).unwrap().blocks();
    assert_eq!(
        before - after,
        (2 << 20) / 512,
        "st_blocks shrink by the hole"
    );
    assert_eq!(dev.allocated_bytes(), Some(after * 512));
    let mut buf = vec![9u8; 4096];
    dev.read_at((2 << 20) - 2048, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    // A thick device ignores discard, and cannot be read-only and punched.
    let thick = FileDevice::open(&path, FileOptions::default()).unwrap();
    assert!(!thick.deallocates());
    let ro = FileOptions {
        read_only: true,
        thin: true,
        ..FileOptions::default()
    };
    let ro = FileDevice::open(&path, ro).unwrap();
    assert_eq!(
        io_kind(ro.discard(0, 4096)),
        io::ErrorKind::ReadOnlyFilesystem
    );
}

#[test]
fn thin_provisioning_needs_a_regular_file() {
    let thin = FileOptions {
        thin: true,
        ..FileOptions::default()
    };
    let e = FileDevice::open("/dev/null", thin).unwrap_err();
    assert!(
        e.to_string().contains("neither") || e.to_string().contains("thin"),
        "{e}"
    );
}
