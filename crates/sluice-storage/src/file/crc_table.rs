//! CRC32C of every 4 KiB chunk of a mapped LUN file, so that a Data-In segment's data digest
//! comes from the table (a few lookups per chunk, [`sluice_digest::Appender`]) instead of a
//! pass over bytes that, for a LUN larger than the cache, come from memory: at 1 MiB that pass
//! was a third of the target's CPU time with data digests on.
//!
//! Exactness is the whole point (a stale entry would turn every read of that chunk into a
//! digest error and a dropped connection), so:
//! * the table exists only once some connection asked for a digest ([`cached_crc32c`]), and
//!   from then on every write through the mapping refreshes the chunks it touched, after its
//!   copy and still under its stripe lock (writers of one chunk are serialised);
//! * an entry is `valid | generation | crc`; readers fill a missing entry from the bytes they
//!   are about to send, and store it only if the entry did not change meanwhile
//!   (compare-and-swap), so a reader that raced a writer can never overwrite the writer's
//!   entry with a CRC of half-written data;
//! * writes by other programs to the file are not seen: the file must not be written by
//!   anything but sluice while it is served (documented on `FileDevice`).

use std::fs::File;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock, Weak};

use sluice_digest::{combine, crc32c, Appender};

/// Bytes per table entry.
pub(super) const CHUNK: usize = 4096;
/// Segments shorter than this are digested directly (the lookup would not pay).
const MIN_CACHED: usize = 64 * 1024;

const VALID: u64 = 1 << 63;
const GENERATION: u64 = ((1 << 31) - 1) << 32;

/// What the registry knows of one mapping: where it is, the file it maps (from offset 0), and
/// its table once wanted.
pub(super) struct Shared {
    base: usize,
    len: usize,
    file: Arc<File>,
    table: OnceLock<CrcTable>,
}

impl Shared {
    /// Registers the mapping of `len` bytes at address `base`, of `file` from offset 0.
    pub(super) fn register(base: usize, len: usize, file: Arc<File>) -> Arc<Self> {
        let shared = Arc::new(Self {
            base,
            len,
            file,
            table: OnceLock::new(),
        });
        let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
        reg.retain(|w| w.strong_count() > 0);
        reg.push(Arc::downgrade(&shared));
        shared
    }

    /// Whether the table exists (some connection asked for a digest): writers then refresh
    /// the chunks they wrote, reading them back.
    pub(super) fn has_table(&self) -> bool {
        self.table.get().is_some()
    }

    /// After bytes `start..end` of the mapping (`mapping` is all of it) were written, under
    /// the stripe lock that covers them: refresh their chunks, if the table exists.
    pub(super) fn written(&self, mapping: &[u8], start: usize, end: usize) {
        // Dekker-style: our copy, then the check; a reader creates the table, then reads the
        // data. The fences make sure at least one side sees the other, so either we refresh
        // or the reader digests our bytes.
        fence(Ordering::SeqCst);
        if let Some(t) = self.table.get() {
            t.refresh(mapping, start, end);
        }
    }
}

static REGISTRY: RwLock<Vec<Weak<Shared>>> = RwLock::new(Vec::new());

/// The registered mapping that `data` lies wholly inside, and `data`'s offset in it (which is
/// its offset in the file: mappings start at file offset 0).
fn find(data: &[u8]) -> Option<(Arc<Shared>, usize)> {
    let addr = data.as_ptr().addr();
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let shared = reg.iter().filter_map(Weak::upgrade).find(|s| {
        addr >= s.base
            && addr
                .checked_add(data.len())
                .is_some_and(|e| e <= s.base + s.len)
    })?;
    let offset = addr - shared.base;
    Some((shared, offset))
}

/// Bytes `offset..offset + len` of an open file, whose page cache is what the mapping shows.
///
/// Only mapped LUN files have one (memory-backed regular files, never `O_DIRECT`, never thin:
/// see `FileDevice`), so sending the range with `sendfile(2)` puts on the wire exactly the
/// bytes a copy out of the mapping would, at the moment the kernel reads the pages.
#[derive(Clone, Debug)]
pub struct FileRange {
    /// The file (its own descriptor, kept open while the range exists).
    pub file: Arc<File>,
    /// Where the range starts in the file.
    pub offset: u64,
    /// How many bytes.
    pub len: usize,
}

/// The file range that `data` shows, when `data` lies inside a mapped LUN file; `None` for
/// any other bytes (a copy, memory LUNs, files read with `pread`).
pub fn file_range(data: &[u8]) -> Option<FileRange> {
    let (shared, offset) = find(data)?;
    Some(FileRange {
        file: Arc::clone(&shared.file),
        offset: offset as u64,
        len: data.len(),
    })
}

/// The CRC32C of `data` from the per-chunk table, when `data` lies inside a mapped LUN file
/// and is long enough to be worth it; `None` otherwise (compute it directly).
pub fn cached_crc32c(data: &[u8]) -> Option<u32> {
    if data.len() < MIN_CACHED {
        return None;
    }
    let (shared, offset) = find(data)?;
    let table = shared.table.get_or_init(|| CrcTable::new(shared.len));
    fence(Ordering::SeqCst); // see `Shared::written`
    Some(table.crc_of(offset, data))
}

/// One entry per [`CHUNK`] of the mapping.
pub(super) struct CrcTable {
    entries: Box<[AtomicU64]>,
    appender: Appender,
}

impl CrcTable {
    fn new(len: usize) -> Self {
        Self {
            entries: (0..len.div_ceil(CHUNK))
                .map(|_| AtomicU64::new(0))
                .collect(),
            appender: Appender::new(CHUNK as u64),
        }
    }

    fn refresh(&self, mapping: &[u8], start: usize, end: usize) {
        if start >= end {
            return;
        }
        for index in start / CHUNK..=(end - 1) / CHUNK {
            let lo = index * CHUNK;
            let Some(bytes) = mapping.get(lo..(lo + CHUNK).min(mapping.len())) else {
                return;
            };
            let crc = crc32c(bytes);
            let entry = &self.entries[index];
            let generation = (entry.load(Ordering::Acquire) + (1 << 32)) & GENERATION;
            entry.store(VALID | generation | u64::from(crc), Ordering::Release);
        }
    }

    /// CRC32C of `data`, the bytes at byte `offset` of the mapping.
    fn crc_of(&self, offset: usize, data: &[u8]) -> u32 {
        let end = offset + data.len();
        let first_full = offset.div_ceil(CHUNK) * CHUNK;
        let last_full = end / CHUNK * CHUNK;
        if first_full >= last_full {
            return crc32c(data);
        }
        let head = &data[..first_full - offset];
        let mut crc: Option<u32> = (!head.is_empty()).then(|| crc32c(head));
        for index in first_full / CHUNK..last_full / CHUNK {
            let lo = index * CHUNK - offset;
            let c = self.chunk_crc(index, &data[lo..lo + CHUNK]);
            crc = Some(match crc {
                None => c,
                Some(prev) => self.appender.append(prev, c),
            });
        }
        let mut crc = crc.unwrap_or_else(|| crc32c(&[]));
        let tail = &data[last_full - offset..];
        if !tail.is_empty() {
            crc = combine(crc, crc32c(tail), tail.len() as u64);
        }
        crc
    }

    /// The chunk's CRC: from the table, or computed from `bytes` (the chunk as about to be
    /// sent) and stored unless a writer changed the entry meanwhile.
    fn chunk_crc(&self, index: usize, bytes: &[u8]) -> u32 {
        let entry = &self.entries[index];
        let seen = entry.load(Ordering::Acquire);
        if seen & VALID != 0 {
            return seen as u32;
        }
        let crc = crc32c(bytes);
        let _ = entry.compare_exchange(
            seen,
            VALID | (seen & GENERATION) | u64::from(crc),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
        crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockDevice, FileDevice, FileOptions};

    /// A fully allocated tmpfs file served by a `FileDevice` (so mapped), and all its bytes.
    fn mapped_lun(len: usize) -> (tempfile::TempDir, FileDevice, bytes::Bytes) {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let path = dir.path().join("lun.img");
        std::fs::write(&path, vec![0u8; len]).unwrap();
        let options = FileOptions {
            size: Some(len as u64),
            huge_pages: false,
            ..FileOptions::default()
        };
        let dev = FileDevice::open(&path, options).unwrap();
        let all = dev.read_shared(0, len).expect("mapped").unwrap();
        (dir, dev, all)
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (seed.wrapping_mul(0x9e37_79b9).wrapping_add(i * 131) >> 3) as u8)
            .collect()
    }

    fn check_ranges(all: &bytes::Bytes, ranges: &[(usize, usize)]) {
        for &(at, len) in ranges {
            let slice = &all[at..at + len];
            assert_eq!(
                cached_crc32c(slice),
                Some(crc32c(slice)),
                "range {at}+{len}"
            );
        }
    }

    const RANGES: [(usize, usize); 6] = [
        (0, 1 << 20),
        (512, 256 * 1024),
        (4096 * 3 + 100, 70_000),
        (1 << 20, 65_536),
        ((2 << 20) - 65_536 - 512, 65_536 + 512),
        (777, 3 << 19),
    ];

    #[test]
    fn cached_digests_follow_writes_and_zeroing() {
        let len = 2 << 20;
        let (_dir, dev, all) = mapped_lun(len);
        assert_eq!(
            cached_crc32c(&all[..100]),
            None,
            "short segments are not cached"
        );
        assert_eq!(
            cached_crc32c(&pattern(1, 1 << 17)),
            None,
            "not a mapped LUN"
        );
        check_ranges(&all, &RANGES);
        // Writes (whole and partial chunks, one across the 1 MiB stripe boundary) change
        // cached chunks: the next digests must see the new bytes.
        dev.write_at(512, &pattern(2, 1536), false).unwrap();
        dev.write_at((1 << 20) - 8192, &pattern(3, 20_480), false)
            .unwrap();
        let segs = pattern(4, 3 * 4096);
        dev.write_vectored_at(40_960, &[&segs[..5000], &segs[5000..]], false)
            .unwrap();
        check_ranges(&all, &RANGES);
        dev.write_zeroes(4096, 1 << 20, false).unwrap();
        check_ranges(&all, &RANGES);
    }

    #[test]
    fn concurrent_writers_and_readers_leave_no_stale_entry() {
        let len = 2 << 20;
        let (_dir, dev, all) = mapped_lun(len);
        std::thread::scope(|s| {
            for w in 0..3u64 {
                let dev = &dev;
                s.spawn(move || {
                    for round in 0..40u64 {
                        let at = ((w * 7 + round * 13) % 480) * 4096 + (round % 3) * 512;
                        dev.write_at(at, &pattern(w * 100 + round, 5 * 4096), false)
                            .unwrap();
                    }
                });
            }
            for _ in 0..2 {
                let all = &all;
                s.spawn(move || {
                    for _ in 0..30 {
                        for &(at, len) in &RANGES {
                            // Racing writers: any value, but it must not panic.
                            let _ = cached_crc32c(&all[at..at + len]);
                        }
                    }
                });
            }
        });
        // Quiescent now: every cached digest must be exact.
        check_ranges(&all, &RANGES);
        for at in (0..len - 65_536).step_by(65_536 + 4096) {
            check_ranges(&all, &[(at, 65_536)]);
        }
    }
}
