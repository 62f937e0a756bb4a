//! The backend contract, checked against every backend.
//!
//! Each check is a function over a [`Subject`]; [`conformance!`] turns the one list of checks
//! into `#[test]`s for each backend, so adding a check covers every backend and adding a backend
//! runs every check.

use std::thread;

use tempfile::TempDir;

use crate::memory::CHUNK_BYTES;
use crate::{BlockDevice, FileDevice, FileOptions, MemoryDevice, NullDevice, StorageError};

/// A fresh device under test, and what it promises.
struct Subject {
    dev: Box<dyn BlockDevice>,
    /// Whether written data reads back (false for the null device, which reads zeros).
    stores_data: bool,
    /// Keeps a file backend's directory alive for the duration of the test.
    _dir: Option<TempDir>,
}

impl Subject {
    fn memory(block_size: u32, num_blocks: u64) -> Self {
        let dev = Box::new(MemoryDevice::new(block_size, num_blocks));
        Self {
            dev,
            stores_data: true,
            _dir: None,
        }
    }

    fn null(block_size: u32, num_blocks: u64) -> Self {
        let dev = Box::new(NullDevice::new(block_size, num_blocks));
        Self {
            dev,
            stores_data: false,
            _dir: None,
        }
    }

    fn file(block_size: u32, num_blocks: u64, direct: bool) -> Self {
        Self::file_in(tempfile::tempdir().unwrap(), block_size, num_blocks, direct)
    }

    /// A fully allocated file on tmpfs: mapped, read through `read_shared`.
    fn shm_file(block_size: u32, num_blocks: u64) -> Self {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let len = u64::from(block_size) * num_blocks;
        std::fs::write(dir.path().join("lun.img"), vec![0u8; len as usize]).unwrap();
        let s = Self::file_in(dir, block_size, num_blocks, false);
        assert!(
            s.dev.read_shared(0, 512).is_some(),
            "a full tmpfs file is mapped"
        );
        s
    }

    /// A thin-provisioned file (holes punched by `discard`), on disk or on tmpfs.
    fn thin_file(block_size: u32, num_blocks: u64, shm: bool) -> Self {
        let dir = if shm {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        Self::file_with(dir, block_size, num_blocks, false, true)
    }

    fn file_in(dir: tempfile::TempDir, block_size: u32, num_blocks: u64, direct: bool) -> Self {
        Self::file_with(dir, block_size, num_blocks, direct, false)
    }

    fn file_with(
        dir: tempfile::TempDir,
        block_size: u32,
        num_blocks: u64,
        direct: bool,
        thin: bool,
    ) -> Self {
        let options = FileOptions {
            size: Some(u64::from(block_size) * num_blocks),
            block_size,
            direct,
            create: true,
            thin,
            ..FileOptions::default()
        };
        let dev = Box::new(FileDevice::open(dir.path().join("lun.img"), options).unwrap());
        Self {
            dev,
            stores_data: true,
            _dir: Some(dir),
        }
    }

    /// What a read of a range written with `data` must return.
    fn expected(&self, data: &[u8]) -> Vec<u8> {
        if self.stores_data {
            data.to_vec()
        } else {
            vec![0; data.len()]
        }
    }

    /// Reads through `read_at`, and checks that `read_append` and `read_shared` (when the
    /// backend has it) give the same bytes.
    fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0xee; len];
        self.dev.read_at(offset, &mut buf).unwrap();
        let mut appended = bytes::BytesMut::from(&b"x"[..]);
        self.dev.read_append(offset, len, &mut appended).unwrap();
        assert_eq!(&appended[1..], &buf[..], "read_append differs from read_at");
        if let Some(shared) = self.dev.read_shared(offset, len) {
            assert_eq!(
                &shared.unwrap()[..],
                &buf[..],
                "read_shared differs from read_at"
            );
        }
        buf
    }
}

/// Four chunks plus three blocks, so that the last chunk is short.
const NUM_CHUNKS: u64 = 4;

fn num_blocks(block_size: u32) -> u64 {
    NUM_CHUNKS * CHUNK_BYTES as u64 / u64::from(block_size) + 3
}

/// Bytes that differ from block to block and from seed to seed, so misplaced data shows.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (seed.wrapping_mul(131).wrapping_add(i * 7 + i / 512)) as u8)
        .collect()
}

macro_rules! conformance {
    ($($backend:ident => $make:expr),+ $(,)?) => {
        $(
            mod $backend {
                use super::*;

                #[test]
                fn geometry_is_consistent() {
                    super::geometry_is_consistent(&$make);
                }

                #[test]
                fn read_after_write_returns_the_data() {
                    super::read_after_write_returns_the_data(&$make);
                }

                #[test]
                fn vectored_writes_land_back_to_back() {
                    super::vectored_writes_land_back_to_back(&$make);
                }

                #[test]
                fn writes_spanning_chunks_read_back() {
                    super::writes_spanning_chunks_read_back(&$make);
                }

                #[test]
                fn untouched_blocks_read_as_zeros() {
                    super::untouched_blocks_read_as_zeros(&$make);
                }

                #[test]
                fn access_outside_the_device_is_out_of_range() {
                    super::access_outside_the_device_is_out_of_range(&$make);
                }

                #[test]
                fn zero_length_access_is_allowed() {
                    super::zero_length_access_is_allowed(&$make);
                }

                #[test]
                fn concurrent_writers_to_distinct_ranges_all_land() {
                    super::concurrent_writers_to_distinct_ranges_all_land(&$make);
                }

                #[test]
                fn flush_succeeds() {
                    super::flush_succeeds(&$make);
                }

                #[test]
                fn fua_write_is_visible() {
                    super::fua_write_is_visible(&$make);
                }

                #[test]
                fn write_zeroes_clears_exactly_the_range() {
                    super::write_zeroes_clears_exactly_the_range(&$make);
                }

                #[test]
                fn discarded_blocks_read_as_old_data_or_zeros() {
                    super::discarded_blocks_read_as_old_data_or_zeros(&$make);
                }

                #[test]
                fn deallocation_reads_zeros_and_is_reported() {
                    super::deallocation_reads_zeros_and_is_reported(&$make);
                }

                #[test]
                fn physical_block_is_a_power_of_two_of_blocks() {
                    super::physical_block_is_a_power_of_two_of_blocks(&$make);
                }
            }
        )+
    };
}

conformance! {
    memory_512 => Subject::memory(512, num_blocks(512)),
    memory_4096 => Subject::memory(4096, num_blocks(4096)),
    null_512 => Subject::null(512, num_blocks(512)),
    null_4096 => Subject::null(4096, num_blocks(4096)),
    file_512 => Subject::file(512, num_blocks(512), false),
    file_4096 => Subject::file(4096, num_blocks(4096), false),
    file_direct_4096 => Subject::file(4096, num_blocks(4096), true),
    shm_file_512 => Subject::shm_file(512, num_blocks(512)),
    thin_file_512 => Subject::thin_file(512, num_blocks(512), false),
    thin_file_4096 => Subject::thin_file(4096, num_blocks(4096), false),
    thin_shm_file_512 => Subject::thin_file(512, num_blocks(512), true),
}

fn geometry_is_consistent(s: &Subject) {
    let bs = s.dev.block_size();
    assert!(bs == 512 || bs == 4096);
    assert_eq!(s.dev.num_blocks(), num_blocks(bs));
    assert_eq!(s.dev.size_bytes(), u64::from(bs) * s.dev.num_blocks());
    assert!(!s.dev.read_only());
}

fn read_after_write_returns_the_data(s: &Subject) {
    let bs = u64::from(s.dev.block_size());
    let data = pattern(1, 2 * bs as usize);
    s.dev.write_at(3 * bs, &data, false).unwrap();
    assert_eq!(s.read(3 * bs, data.len()), s.expected(&data));

    // Overwrite the second block only; the first keeps its data.
    let second = pattern(2, bs as usize);
    s.dev.write_at(4 * bs, &second, false).unwrap();
    let mut both = data[..bs as usize].to_vec();
    both.extend_from_slice(&second);
    assert_eq!(s.read(3 * bs, both.len()), s.expected(&both));

    // The very last block of the device.
    let last = s.dev.size_bytes() - bs;
    s.dev.write_at(last, &second, false).unwrap();
    assert_eq!(s.read(last, second.len()), s.expected(&second));
}

fn vectored_writes_land_back_to_back(s: &Subject) {
    let bs = s.dev.block_size() as usize;
    let data = pattern(9, 4 * bs);
    // Segments of any length (PDU-sized), summing to whole blocks; then whole-block segments.
    let odd: [&[u8]; 4] = [
        &data[..bs + 100],
        &data[bs + 100..bs + 400],
        &data[bs + 400..3 * bs - 1],
        &data[3 * bs - 1..],
    ];
    let at = 5 * bs as u64;
    s.dev.write_vectored_at(at, &odd, true).unwrap();
    assert_eq!(s.read(at, data.len()), s.expected(&data));
    let other = pattern(10, 4 * bs);
    let whole: [&[u8]; 2] = [&other[..bs], &other[bs..]];
    s.dev.write_vectored_at(at, &whole, false).unwrap();
    assert_eq!(s.read(at, other.len()), s.expected(&other));
    // Past the end: refused, nothing written.
    let end = s.dev.size_bytes() - bs as u64;
    assert!(s.dev.write_vectored_at(end, &whole, false).is_err());
    assert_eq!(s.read(at, other.len()), s.expected(&other));
}

fn writes_spanning_chunks_read_back(s: &Subject) {
    let bs = u64::from(s.dev.block_size());
    let chunk = CHUNK_BYTES as u64;
    // From two blocks before the first boundary to two blocks past the second: three chunks.
    let offset = chunk - 2 * bs;
    let data = pattern(3, (chunk + 4 * bs) as usize);
    s.dev.write_at(offset, &data, false).unwrap();
    assert_eq!(s.read(offset, data.len()), s.expected(&data));
    // Reads that straddle each boundary on their own.
    for boundary in [chunk, 2 * chunk] {
        let at = (boundary - bs - offset) as usize;
        let want = s.expected(&data[at..at + 2 * bs as usize]);
        assert_eq!(
            s.read(boundary - bs, 2 * bs as usize),
            want,
            "boundary {boundary}"
        );
    }
    // Into the short last chunk.
    let tail_offset = NUM_CHUNKS * chunk - bs;
    let tail = pattern(4, (s.dev.size_bytes() - tail_offset) as usize);
    s.dev.write_at(tail_offset, &tail, false).unwrap();
    assert_eq!(s.read(tail_offset, tail.len()), s.expected(&tail));
}

fn untouched_blocks_read_as_zeros(s: &Subject) {
    let size = s.dev.size_bytes();
    let bs = u64::from(s.dev.block_size());
    assert!(s.read(0, CHUNK_BYTES).iter().all(|&b| b == 0));
    assert!(s
        .read(size - 4 * bs, 4 * bs as usize)
        .iter()
        .all(|&b| b == 0));
    // Near data, but not under it.
    s.dev
        .write_at(8 * bs, &pattern(5, bs as usize), false)
        .unwrap();
    assert!(s.read(7 * bs, bs as usize).iter().all(|&b| b == 0));
    assert!(s.read(9 * bs, bs as usize).iter().all(|&b| b == 0));
}

fn access_outside_the_device_is_out_of_range(s: &Subject) {
    let size = s.dev.size_bytes();
    let bs = u64::from(s.dev.block_size());
    let block = vec![0u8; bs as usize];
    let two = vec![0u8; 2 * bs as usize];
    let is_out_of_range = |r: Result<(), StorageError>, offset: u64, len: u64| match r {
        Err(StorageError::OutOfRange {
            offset: o,
            len: l,
            size: sz,
        }) => {
            assert_eq!((o, l, sz), (offset, len, size));
        }
        other => panic!("{offset}+{len}: expected OutOfRange, got {other:?}"),
    };
    for (offset, len) in [(size, bs), (size - bs, 2 * bs), (u64::MAX - bs + 1, bs)] {
        let buf = if len == bs { &block } else { &two };
        let mut out = buf.clone();
        is_out_of_range(s.dev.read_at(offset, &mut out), offset, len);
        is_out_of_range(s.dev.write_at(offset, buf, false), offset, len);
        is_out_of_range(s.dev.write_at(offset, buf, true), offset, len);
        is_out_of_range(s.dev.write_zeroes(offset, len, false), offset, len);
        is_out_of_range(s.dev.discard(offset, len), offset, len);
    }
    // An overflowing length, which no buffer could have.
    is_out_of_range(s.dev.write_zeroes(bs, u64::MAX, false), bs, u64::MAX);
    is_out_of_range(s.dev.discard(bs, u64::MAX), bs, u64::MAX);
    // A refused write left nothing behind.
    assert!(s.read(size - bs, bs as usize).iter().all(|&b| b == 0));
}

fn zero_length_access_is_allowed(s: &Subject) {
    let size = s.dev.size_bytes();
    for offset in [0, size] {
        s.dev.read_at(offset, &mut []).unwrap();
        s.dev.write_at(offset, &[], false).unwrap();
        s.dev.write_zeroes(offset, 0, false).unwrap();
        s.dev.discard(offset, 0).unwrap();
    }
}

fn concurrent_writers_to_distinct_ranges_all_land(s: &Subject) {
    const WRITERS: u64 = 6;
    const ROUNDS: u64 = 2;
    let bs = u64::from(s.dev.block_size());
    // Seven-block slots: not a divisor of the chunk size, so some slots straddle a boundary.
    let slot = 7 * bs;
    let slots = s.dev.size_bytes() / slot;
    let dev = &*s.dev;
    thread::scope(|scope| {
        for writer in 0..WRITERS {
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    for k in (writer..slots).step_by(WRITERS as usize) {
                        let fua = k % 97 == 0;
                        dev.write_at(k * slot, &pattern(k * 10 + round, slot as usize), fua)
                            .unwrap();
                    }
                }
            });
        }
        // A reader racing the writers must never fail, whatever it sees.
        scope.spawn(move || {
            let mut buf = vec![0u8; 3 * slot as usize];
            for k in 0..slots - 3 {
                dev.read_at(k * slot, &mut buf).unwrap();
            }
        });
    });
    for k in 0..slots {
        let want = pattern(k * 10 + ROUNDS - 1, slot as usize);
        assert!(
            s.read(k * slot, slot as usize) == s.expected(&want),
            "slot {k}"
        );
    }
}

fn flush_succeeds(s: &Subject) {
    s.dev.flush().unwrap();
    s.dev
        .write_at(0, &pattern(6, s.dev.block_size() as usize), false)
        .unwrap();
    s.dev.flush().unwrap();
    s.dev.flush().unwrap();
}

fn fua_write_is_visible(s: &Subject) {
    let bs = u64::from(s.dev.block_size());
    let data = pattern(7, 3 * bs as usize);
    let offset = CHUNK_BYTES as u64 - bs;
    s.dev.write_at(offset, &data, true).unwrap();
    assert_eq!(s.read(offset, data.len()), s.expected(&data));
}

fn write_zeroes_clears_exactly_the_range(s: &Subject) {
    let bs = u64::from(s.dev.block_size());
    let chunk = CHUNK_BYTES as u64;
    let data = pattern(8, 3 * CHUNK_BYTES);
    s.dev.write_at(0, &data, false).unwrap();
    // A partial chunk, a whole chunk, and a partial chunk.
    let (start, end) = (chunk - 2 * bs, 2 * chunk + 3 * bs);
    s.dev.write_zeroes(start, end - start, false).unwrap();
    let mut want = data.clone();
    want[start as usize..end as usize].fill(0);
    assert!(s.read(0, want.len()) == s.expected(&want));
    // With FUA, and a single block.
    s.dev.write_zeroes(bs, bs, true).unwrap();
    want[bs as usize..2 * bs as usize].fill(0);
    assert!(s.read(0, want.len()) == s.expected(&want));
}

fn discarded_blocks_read_as_old_data_or_zeros(s: &Subject) {
    let bs = s.dev.block_size() as usize;
    let offset = CHUNK_BYTES as u64 / 2;
    let data = pattern(9, 2 * CHUNK_BYTES);
    s.dev.write_at(offset, &data, false).unwrap();
    s.dev
        .discard(offset + bs as u64, (2 * CHUNK_BYTES - 2 * bs) as u64)
        .unwrap();
    let got = s.read(offset, data.len());
    let want = s.expected(&data);
    for (i, (g, w)) in got.chunks(bs).zip(want.chunks(bs)).enumerate() {
        assert!(g == w || g.iter().all(|&b| b == 0), "block {i}");
    }
    // The blocks on either side of the discarded range are untouched.
    assert_eq!(got[..bs], want[..bs]);
    assert_eq!(got[got.len() - bs..], want[want.len() - bs..]);
}

/// Walks `provisioning` over `len` bytes from `offset`: the runs, which must tile the range.
fn runs(s: &Subject, offset: u64, len: u64) -> Vec<(crate::Provisioning, u64)> {
    let mut out = Vec::new();
    let mut at = offset;
    while at < offset + len {
        let e = s.dev.provisioning(at, offset + len - at).unwrap();
        assert!(
            e.len >= 1 && e.len <= offset + len - at,
            "run {e:?} at {at}"
        );
        out.push((e.state, e.len));
        at += e.len;
    }
    out
}

fn deallocation_reads_zeros_and_is_reported(s: &Subject) {
    use crate::Provisioning::{Deallocated, Mapped};
    let size = s.dev.size_bytes();
    if !s.dev.deallocates() {
        // Fully provisioned: everything is mapped, in one run.
        assert_eq!(runs(s, 0, size), vec![(Mapped, size)]);
        return;
    }
    let unit = s.dev.deallocation_granularity();
    assert!(unit.is_power_of_two() && unit >= u64::from(s.dev.block_size()));
    // Nothing written yet: a fresh device (memory, a sparse file) holds no data.
    assert_eq!(runs(s, 0, size), vec![(Deallocated, size)]);
    assert_eq!(s.dev.allocated_bytes(), Some(0));
    let data = pattern(5, 3 * CHUNK_BYTES);
    s.dev.write_at(0, &data, false).unwrap();
    assert_eq!(runs(s, 0, 3 * CHUNK_BYTES as u64)[0].0, Mapped);
    let allocated = s.dev.allocated_bytes().unwrap();
    assert!(allocated >= 3 * CHUNK_BYTES as u64, "{allocated}");
    // Discard the middle chunk: whole units are released, and it reads zeros.
    let (start, len) = (CHUNK_BYTES as u64, CHUNK_BYTES as u64);
    s.dev.discard(start, len).unwrap();
    assert!(s.read(start, len as usize).iter().all(|&b| b == 0));
    assert_eq!(s.read(0, CHUNK_BYTES), data[..CHUNK_BYTES]);
    assert_eq!(
        s.read(2 * CHUNK_BYTES as u64, CHUNK_BYTES),
        data[2 * CHUNK_BYTES..]
    );
    assert_eq!(
        runs(s, 0, 3 * CHUNK_BYTES as u64),
        vec![(Mapped, len), (Deallocated, len), (Mapped, len)]
    );
    assert!(s.dev.allocated_bytes().unwrap() <= allocated - len);
    // A discard that covers no whole unit zeroes the range and releases nothing around it.
    let bs = u64::from(s.dev.block_size());
    if unit > bs {
        s.dev.discard(bs, bs).unwrap();
        assert!(s.read(bs, bs as usize).iter().all(|&b| b == 0));
        assert_eq!(s.read(0, bs as usize), data[..bs as usize]);
        assert_eq!(s.dev.provisioning(0, unit).unwrap().state, Mapped);
    }
    // Discarding a whole unit piece by piece zeroes it. (Memory releases the chunk once it
    // is all zeros, memory.rs tests that; a file keeps a block that no single hole covered,
    // since widening a hole over bytes another command may be writing would lose them.)
    let last = 2 * CHUNK_BYTES as u64;
    let mut at = last;
    while at < last + unit {
        s.dev.discard(at, bs).unwrap();
        at += bs;
    }
    assert!(s.read(last, unit as usize).iter().all(|&b| b == 0));
    // Writing maps again.
    s.dev.write_at(start, &data[..bs as usize], false).unwrap();
    assert_eq!(s.dev.provisioning(start, len).unwrap().state, Mapped);
}

fn physical_block_is_a_power_of_two_of_blocks(s: &Subject) {
    let (bs, pbs) = (s.dev.block_size(), s.dev.physical_block_size());
    assert!(
        pbs.is_power_of_two() && pbs >= bs && pbs <= 1 << 20,
        "{pbs}"
    );
}
