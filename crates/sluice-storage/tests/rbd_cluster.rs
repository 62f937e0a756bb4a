//! The RBD backend against a real single-node Ceph cluster (scripts/ceph-cluster): the block
//! device contract, what librbd adds (a second client sees completed writes, resizes show,
//! read-only opens), and the errors a user meets first (unreachable cluster, missing pool or
//! image, a keyring without the client's key). One cluster serves every check, each on its own
//! image; the cluster takes about 10 s to start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_storage::{BlockDevice, DeviceOp, RbdDevice, RbdImage, StorageError, Submission};
use sluice_test_support::{CephCluster, CEPH_POOL};

const MIB: u64 = 1 << 20;
/// librbd's default object size: ranges are chosen to straddle object boundaries.
const OBJECT: u64 = 4 * MIB;

fn spec(c: &CephCluster, image: &str) -> RbdImage {
    RbdImage {
        pool: CEPH_POOL.into(),
        image: image.into(),
        conf_file: Some(c.conf_file()),
        // The restricted client (the RBD profile on the pool), as a deployment would use.
        client_id: Some("sluice".into()),
        keyring: Some(c.keyring("sluice")),
    }
}

fn open(c: &CephCluster, image: &str, size_mib: u64) -> RbdDevice {
    c.create_image(image, size_mib);
    RbdDevice::open(&spec(c, image), 512, false).expect("open the image")
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn read(dev: &dyn BlockDevice, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xa5; len];
    dev.read_at(offset, &mut buf).unwrap();
    buf
}

#[test]
fn rbd_device_against_a_real_cluster() {
    let c = CephCluster::start();
    geometry_follows_the_image_and_its_resizes(&c);
    writes_read_back_across_object_boundaries(&c);
    vectored_writes_land_back_to_back(&c);
    completed_writes_are_seen_by_another_client(&c);
    zeroes_and_discards_clear_their_range(&c);
    write_same_and_compare_and_write_go_to_librbd(&c);
    access_outside_the_image_is_out_of_range(&c);
    read_only_opens_refuse_writes(&c);
    concurrent_writers_all_land(&c);
    submitted_operations_complete_on_librbds_callback(&c);
    a_broken_lock_fences_its_owner(&c);
    missing_pool_image_and_key_are_named(&c);
}

fn geometry_follows_the_image_and_its_resizes(c: &CephCluster) {
    let dev = open(c, "geometry", 64);
    assert_eq!(dev.block_size(), 512);
    assert_eq!(dev.num_blocks(), 64 * MIB / 512);
    assert_eq!(dev.object_size(), OBJECT);
    assert!(
        dev.blocks(),
        "librbd calls wait: the target must run them off its reactor"
    );
    assert_eq!(dev.name(), "rbd/geometry");
    c.rbd(&["resize", "--size", "96M", "rbd/geometry"]);
    // librbd learns of the resize through its header watch, shortly after.
    let deadline = Instant::now() + Duration::from_secs(10);
    while dev.num_blocks() != 96 * MIB / 512 {
        assert!(
            Instant::now() < deadline,
            "the resize never showed: {}",
            dev.num_blocks()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let data = pattern(1, 4096);
    dev.write_at(90 * MIB, &data, false).unwrap();
    assert_eq!(read(&dev, 90 * MIB, 4096), data);
}

fn writes_read_back_across_object_boundaries(c: &CephCluster) {
    let dev = open(c, "readback", 64);
    // Untouched blocks read as zeros.
    assert_eq!(read(&dev, 8 * MIB, 8192), vec![0; 8192]);
    let cases = [
        (0u64, 512usize),
        (OBJECT - 512, 1024),
        (2 * OBJECT - 3 * MIB, 5 * MIB as usize),
    ];
    for (i, (offset, len)) in cases.into_iter().enumerate() {
        let data = pattern(10 + i as u64, len);
        dev.write_at(offset, &data, false).unwrap();
        assert_eq!(read(&dev, offset, len), data, "{len} bytes at {offset}");
    }
    // read_append (the target's read path) appends and keeps what was there.
    let mut out = bytes::BytesMut::from(&b"head"[..]);
    dev.read_append(0, 512, &mut out).unwrap();
    assert_eq!(&out[..4], b"head");
    assert_eq!(&out[4..], &pattern(10, 512)[..]);
}

fn vectored_writes_land_back_to_back(c: &CephCluster) {
    let dev = open(c, "vectored", 16);
    // Segments of any length (Data-Out PDUs need not be whole blocks); 4 KiB in all, over an
    // object boundary.
    let data = pattern(20, 4096);
    let (a, rest) = data.split_at(100);
    let (b, rest) = rest.split_at(1436);
    let (d, e) = rest.split_at(7);
    let offset = OBJECT - 2048;
    dev.write_vectored_at(offset, &[a, b, d, e], true).unwrap();
    assert_eq!(read(&dev, offset, 4096), data);
}

fn completed_writes_are_seen_by_another_client(c: &CephCluster) {
    let writer = open(c, "shared", 16);
    let data = pattern(30, 64 * 1024);
    writer.write_at(MIB, &data, true).unwrap();
    writer.write_at(2 * MIB, &data, false).unwrap();
    writer.flush().unwrap();
    // A second connection (as client.admin), with its own cache: it can only see the data if
    // the writes reached the OSD.
    let mut other = spec(c, "shared");
    other.client_id = None;
    other.keyring = Some(c.keyring("admin"));
    let reader = RbdDevice::open(&other, 512, true).unwrap();
    assert_eq!(read(&reader, MIB, data.len()), data);
    assert_eq!(read(&reader, 2 * MIB, data.len()), data);
}

fn zeroes_and_discards_clear_their_range(c: &CephCluster) {
    let dev = open(c, "zeroes", 32);
    let data = pattern(40, 3 * OBJECT as usize);
    dev.write_at(0, &data, false).unwrap();
    // write_zeroes clears exactly its range, inside an object and across one's end.
    dev.write_zeroes(OBJECT - 4096, 8192, true).unwrap();
    let back = read(&dev, 0, data.len());
    let z = (OBJECT - 4096) as usize;
    assert_eq!(&back[..z], &data[..z]);
    assert_eq!(&back[z..z + 8192], &[0u8; 8192][..]);
    assert_eq!(&back[z + 8192..], &data[z + 8192..]);
    // A discard of a whole object reads back as zeros; the neighbours keep their data.
    dev.discard(OBJECT, OBJECT).unwrap();
    let back = read(&dev, 0, data.len());
    assert_eq!(
        &back[OBJECT as usize..2 * OBJECT as usize],
        &vec![0u8; OBJECT as usize][..]
    );
    assert_eq!(&back[2 * OBJECT as usize..], &data[2 * OBJECT as usize..]);
    // A partial-object discard zeroes its range (the device deallocates: thin LUs promise
    // zeros), and nothing else changes.
    assert!(dev.deallocates());
    assert_eq!(dev.deallocation_granularity(), OBJECT);
    dev.discard(2 * OBJECT + 4096, 4096).unwrap();
    let tail = read(&dev, 2 * OBJECT, 3 * 4096);
    let o = 2 * OBJECT as usize;
    assert_eq!(&tail[..4096], &data[o..o + 4096]);
    assert_eq!(&tail[4096..8192], &[0u8; 4096][..]);
    assert_eq!(&tail[8192..], &data[o + 8192..o + 12288]);
}

fn write_same_and_compare_and_write_go_to_librbd(c: &CephCluster) {
    let dev = open(c, "caw", 16);
    let data = pattern(50, 2 * OBJECT as usize);
    dev.write_at(0, &data, false).unwrap();
    // One block repeated over 64 KiB across an object's end.
    let block = pattern(51, 512);
    let at = OBJECT - 32 * 1024;
    let repeated = block.repeat(128);
    dev.write_repeated(at, &repeated, 512, true).unwrap();
    assert_eq!(read(&dev, at, repeated.len()), repeated);
    assert_eq!(
        read(&dev, at - 512, 512),
        data[at as usize - 512..at as usize]
    );
    // Compare and write of one 512-byte sector: a match writes.
    let at = 8192u64;
    let old = data[8192..8192 + 512].to_vec();
    let new = pattern(52, 512);
    let r = dev
        .compare_and_write(at, &old, &new, false)
        .expect("librbd's compare and write");
    assert_eq!(r.unwrap(), None);
    assert_eq!(read(&dev, at, 512), new);
    // A miscompare at byte 300 of the range: that offset, counted from the range, and
    // nothing written.
    let mut wrong = new.clone();
    wrong[300] ^= 1;
    let r = dev.compare_and_write(at, &wrong, &pattern(53, 512), false);
    assert_eq!(r.expect("librbd's compare and write").unwrap(), Some(300));
    assert_eq!(read(&dev, at, 512), new);
    // A longer range is not librbd's to take: the caller compares under its own lock.
    let two = new.repeat(2);
    assert!(dev.compare_and_write(at, &two, &two, false).is_none());
}

fn access_outside_the_image_is_out_of_range(c: &CephCluster) {
    let dev = open(c, "range", 4);
    let size = 4 * MIB;
    let mut buf = vec![0; 1024];
    let out = |r: Result<(), StorageError>| matches!(r, Err(StorageError::OutOfRange { .. }));
    assert!(out(dev.read_at(size - 512, &mut buf)));
    assert!(out(dev.write_at(size, &buf, false)));
    assert!(out(dev.write_vectored_at(
        size - 512,
        &[&buf[..512], &buf[..512]],
        false
    )));
    assert!(out(dev.write_zeroes(u64::MAX - 511, 1024, false)));
    assert!(out(dev.discard(size, 512)));
    // The last block itself is inside.
    dev.write_at(size - 512, &buf[..512], false).unwrap();
}

fn read_only_opens_refuse_writes(c: &CephCluster) {
    c.create_image("readonly", 4);
    let dev = RbdDevice::open(&spec(c, "readonly"), 4096, true).unwrap();
    assert!(dev.read_only());
    assert_eq!(dev.num_blocks(), 1024);
    let refused = |r: Result<(), StorageError>| matches!(r, Err(StorageError::Io(e)) if e.kind() == io::ErrorKind::ReadOnlyFilesystem);
    assert!(refused(dev.write_at(0, &[1; 4096], false)));
    assert!(refused(dev.write_zeroes(0, 4096, false)));
    assert!(refused(dev.discard(0, 4096)));
    assert_eq!(read(&dev, 0, 4096), vec![0; 4096]);
    dev.flush().unwrap();
}

fn concurrent_writers_all_land(c: &CephCluster) {
    let dev = Arc::new(open(c, "concurrent", 16));
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let dev = Arc::clone(&dev);
            thread::spawn(move || {
                for i in 0..16u64 {
                    let offset = (t * 16 + i) * 8192;
                    dev.write_at(offset, &pattern(t * 100 + i, 8192), false)
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for t in 0..8u64 {
        for i in 0..16u64 {
            let offset = (t * 16 + i) * 8192;
            assert_eq!(read(&*dev, offset, 8192), pattern(t * 100 + i, 8192));
        }
    }
}

/// Polls `fut` on this thread, parked between polls until librbd's callback wakes it.
fn block_on(mut fut: Submission) -> Result<Bytes, StorageError> {
    struct Unpark(thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            return r;
        }
        thread::park_timeout(Duration::from_secs(1));
    }
}

/// Reads, writes and flushes submitted (the target's path for READ, WRITE and SYNCHRONIZE
/// CACHE): many in flight at once from one thread, each woken by its own completion; ranges
/// and write protection checked as for the synchronous calls; a submission dropped before it
/// completed leaves librbd nothing freed to write into or read from, nor a closed image.
fn submitted_operations_complete_on_librbds_callback(c: &CephCluster) {
    let dev = open(c, "submitted", 16);
    assert!(dev.submits());
    // 32 writes in flight, each 12 KiB in three segments of odd lengths, the later ones over
    // an object boundary.
    let write = |i: u64| {
        let data = Bytes::from(pattern(200 + i, 12288));
        let segments = vec![
            data.slice(..1000),
            data.slice(1000..9000),
            data.slice(9000..),
        ];
        let offset = OBJECT - 16 * 12288 + i * 12288;
        (
            offset,
            data,
            dev.submit(DeviceOp::Write {
                offset,
                segments,
                fua: i % 4 == 0,
            }),
        )
    };
    let writes: Vec<_> = (0..32).map(write).collect();
    let mut reads = Vec::new();
    for (offset, data, fut) in writes {
        assert!(block_on(fut).unwrap().is_empty());
        reads.push((data, dev.submit(DeviceOp::Read { offset, len: 12288 })));
    }
    for (data, fut) in reads {
        assert_eq!(block_on(fut).unwrap(), data);
    }
    assert!(block_on(dev.submit(DeviceOp::Flush)).unwrap().is_empty());
    assert_eq!(read(&dev, OBJECT - 16 * 12288, 12288), pattern(200, 12288));

    let beyond = DeviceOp::Read {
        offset: 16 * MIB - 512,
        len: 1024,
    };
    assert!(matches!(
        block_on(dev.submit(beyond)),
        Err(StorageError::OutOfRange { .. })
    ));

    // Dropped in flight: the drop waits for librbd's callback (the image stays open under
    // the operation), the write lands whole, and the device goes on serving.
    let data = Bytes::from(pattern(300, 4 * MIB as usize));
    drop(dev.submit(DeviceOp::Write {
        offset: 2 * MIB,
        segments: vec![data.clone()],
        fua: false,
    }));
    let deadline = Instant::now() + Duration::from_secs(30);
    while read(&dev, 2 * MIB, data.len()) != data {
        assert!(Instant::now() < deadline, "the dropped write never landed");
        thread::sleep(Duration::from_millis(50));
    }
    drop(dev.submit(DeviceOp::Read {
        offset: 0,
        len: 4 * MIB as usize,
    }));
    assert!(block_on(dev.submit(DeviceOp::Flush)).unwrap().is_empty());

    c.create_image("submitted-ro", 4);
    let ro = RbdDevice::open(&spec(c, "submitted-ro"), 512, true).unwrap();
    let refused = block_on(ro.submit(DeviceOp::Write {
        offset: 0,
        segments: vec![Bytes::from_static(&[1; 512])],
        fua: false,
    }));
    assert!(
        matches!(refused, Err(StorageError::Io(e)) if e.kind() == io::ErrorKind::ReadOnlyFilesystem)
    );
    assert!(block_on(ro.submit(DeviceOp::Flush)).unwrap().is_empty());
}

/// Two clients on one image, as two gateways would be: the one holding the exclusive lock
/// writes; the other sees it as the owner; once the other breaks the lock, the first one's
/// writes fail (it is fenced) and the second one takes the lock and writes.
fn a_broken_lock_fences_its_owner(c: &CephCluster) {
    let a = open(c, "locked", 16);
    assert!(
        a.lock_owners().unwrap().is_empty(),
        "nobody holds a new image's lock"
    );
    a.lock_exclusive().unwrap();
    assert!(a.holds_lock().unwrap());
    a.write_at(0, &pattern(50, 4096), true).unwrap();

    let b = RbdDevice::open(&spec(c, "locked"), 512, false).unwrap();
    assert!(!b.holds_lock().unwrap());
    let owners = b.lock_owners().unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(read(&b, 0, 4096), pattern(50, 4096), "reads need no lock");

    b.break_lock(&owners[0]).unwrap();
    let e = a.write_at(4096, &pattern(51, 4096), true).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("fenced"),
        "the old owner's write failed otherwise: {text}"
    );

    b.lock_exclusive().unwrap();
    assert!(b.holds_lock().unwrap());
    b.write_at(8192, &pattern(52, 4096), true).unwrap();
    assert_eq!(read(&b, 8192, 4096), pattern(52, 4096));
    // The fenced write never landed.
    assert_eq!(read(&b, 4096, 4096), vec![0; 4096]);
    b.release_lock().unwrap();
    assert!(!b.holds_lock().unwrap());
}

fn missing_pool_image_and_key_are_named(c: &CephCluster) {
    let err = |s: &RbdImage| RbdDevice::open(s, 512, false).unwrap_err().to_string();

    let e = err(&spec(c, "no-such-image"));
    assert!(e.contains("rbd/no-such-image does not exist"), "{e}");

    let mut s = spec(c, "x");
    s.pool = "no-such-pool".into();
    let e = err(&s);
    assert!(e.contains("pool no-such-pool does not exist"), "{e}");

    // client.sluice with client.admin's keyring: the keyring holds no key for it.
    let mut s = spec(c, "x");
    s.keyring = Some(c.keyring("admin"));
    let e = err(&s);
    assert!(e.contains("client.sluice"), "{e}");

    // A monitor address nothing listens on: a clear error, within about ten seconds.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("ceph.conf");
    std::fs::write(
        &conf,
        "[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = cephx\n",
    )
    .unwrap();
    let mut s = spec(c, "x");
    s.conf_file = Some(conf.clone());
    let started = Instant::now();
    let e = err(&s);
    assert!(e.contains("no monitor answered"), "{e}");
    assert!(e.contains(&conf.display().to_string()), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // A configuration file that is not there.
    let mut s = spec(c, "x");
    s.conf_file = Some(dir.path().join("missing.conf"));
    let e = err(&s);
    assert!(e.contains("cannot read the Ceph configuration file"), "{e}");
}
