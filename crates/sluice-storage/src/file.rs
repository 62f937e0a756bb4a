//! A regular file or a block device, through `pread`/`pwrite`.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};

use crate::{
    check_range, checked_size, invalid_input, read_only_error, BlockDevice, Extent, Provisioning,
    StorageError,
};

/// Memory alignment of buffers handed to the kernel with `O_DIRECT`.
///
/// Linux requires the logical block size of the underlying device (512 or 4096); 4096 satisfies
/// both.
const DIRECT_ALIGN: usize = 4096;

/// How to open a [`FileDevice`].
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct FileOptions {
    /// Size of the LUN in bytes; a multiple of `block_size`.
    ///
    /// `None` uses the whole file or device. With a size, a shorter regular file is extended
    /// (sparsely: no data blocks are allocated) and a longer one is exported only up to `size`
    /// (the rest is left alone); a block device must be at least this large.
    pub size: Option<u64>,
    /// Logical block size in bytes: a power of two of at least 512.
    pub block_size: u32,
    /// Open the file read-only; writes then fail (see [`BlockDevice::read_only`]).
    pub read_only: bool,
    /// Open with `O_DIRECT`, bypassing the page cache (Linux only).
    ///
    /// Offsets and lengths must then be multiples of the logical block size of the underlying
    /// device, which holds when `block_size` is at least that. Buffers need not be aligned:
    /// unaligned ones go through an aligned bounce buffer.
    pub direct: bool,
    /// Create the file if it is missing; `size` is then required.
    pub create: bool,
    /// When the file is mapped (fully allocated, on tmpfs), have a background thread ask the
    /// kernel to back it with 2 MiB pages (`MADV_COLLAPSE`): fewer TLB misses when large reads
    /// copy from it. The file's contents never change; its pages stay huge after sluice exits.
    /// See [`FileDevice::huge_pages`].
    pub huge_pages: bool,
    /// Thin provisioning: [`discard`](BlockDevice::discard) punches holes in the file
    /// (`fallocate` with `FALLOC_FL_PUNCH_HOLE`), and [`provisioning`](BlockDevice::provisioning)
    /// reports the file's holes (`SEEK_HOLE`/`SEEK_DATA`). Needs a regular file, and such a
    /// file is never mapped: a write through a mapping into a hole of a full tmpfs raises
    /// SIGBUS, where `pwrite` fails with `ENOSPC`.
    pub thin: bool,
}

impl Default for FileOptions {
    /// Whole existing file, 512-byte blocks, read-write, through the page cache, not created,
    /// huge pages asked for when mapped.
    fn default() -> Self {
        Self {
            size: None,
            block_size: 512,
            read_only: false,
            direct: false,
            create: false,
            huge_pages: true,
            thin: false,
        }
    }
}

/// A LUN backed by a regular file or a block device.
///
/// Every call is a positional `pread`/`pwrite` on one shared descriptor, so threads never
/// contend on a file position and need no lock. Calls block, so [`BlockDevice::blocks`] is
/// `true`.
///
/// A fully allocated file on tmpfs or ramfs (not opened `O_DIRECT`) is also mapped shared
/// (writable unless read-only, page tables filled at open, `MAP_POPULATE`). Reads hand out
/// slices of that mapping ([`BlockDevice::read_shared`]): no copy into a buffer, the socket
/// copies straight from the page cache. Writes copy into the mapping instead of `pwrite`
/// (tmpfs's `pwrite` costs about twice the copy: page lookups and folio locks per 4 KiB); on
/// such a file a write does not update its modification time. Once a data digest is wanted
/// for a large read of the mapping ([`cached_crc32c`](crate::cached_crc32c)), a CRC32C per
/// 4 KiB chunk is kept and refreshed by every write, so digests of reads need not read the
/// data; the file must therefore not be written by other programs while it is served, nor
/// shrunk (touching pages past the new end raises SIGBUS, as with any mapping).
///
/// Durability: a write is reported durable only once it is. With FUA the write is followed by
/// `fdatasync` before returning; [`flush`](BlockDevice::flush) is `fdatasync` too. Without FUA a
/// completed write may still sit in the page cache (or the disk's cache), as SCSI allows.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    block_size: u32,
    num_blocks: u64,
    size_bytes: u64,
    read_only: bool,
    direct: bool,
    /// The file lives in RAM (tmpfs, ramfs): reads and writes never wait for a disk.
    memory_backed: bool,
    /// For memory-backed files: the first `size_bytes` of the file, mapped (writable unless
    /// the device is read-only).
    mapped: Option<mapping::MappedFile>,
    /// Thin provisioning ([`FileOptions::thin`]).
    thin: bool,
    /// The file system's preferred I/O size (`st_blksize`), a power of two of at least the
    /// block size: the unit holes are punched in.
    fs_block: u32,
}

impl FileDevice {
    /// Opens (or creates) the file or block device at `path` as a LUN.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] (inside [`StorageError::Io`]) when the block
    /// size is not a power of two of at least 512, the size is zero or not a multiple of it,
    /// `create` comes without a size or with `read_only`, a block device is smaller than
    /// `size`, a read-only file is shorter than `size`, or the path is neither a regular file
    /// nor a block device. A file this call created is removed again if opening fails later.
    pub fn open(path: impl AsRef<Path>, options: FileOptions) -> Result<Self, StorageError> {
        let path = path.as_ref();
        let mut created = false;
        let result = Self::open_inner(path, &options, &mut created);
        if result.is_err() && created {
            // Best effort: the open already failed, and that error is the one to report.
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn open_inner(
        path: &Path,
        options: &FileOptions,
        created: &mut bool,
    ) -> Result<Self, StorageError> {
        let block_size = options.block_size;
        checked_size(block_size, 0)?;
        if let Some(size) = options.size {
            check_lun_size(size, block_size)?;
        }
        if options.create && options.read_only {
            return Err(invalid_input("cannot create a read-only file".into()).into());
        }
        if options.create && options.size.is_none() {
            return Err(invalid_input("creating a file needs a size".into()).into());
        }

        let mut open = OpenOptions::new();
        open.read(true).write(!options.read_only);
        if options.direct {
            open.custom_flags(direct_flag()?);
        }
        let file = if options.create {
            match open.clone().create_new(true).open(path) {
                Ok(file) => {
                    *created = true;
                    file
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => open.open(path)?,
                Err(e) => return Err(e.into()),
            }
        } else {
            open.open(path)?
        };

        let file_type = file.metadata()?.file_type();
        let current_len = if file_type.is_file() {
            file.metadata()?.len()
        } else if file_type.is_block_device() {
            // A block device's size is where its end is; pread/pwrite ignore the file position,
            // so moving it is harmless.
            (&file).seek(SeekFrom::End(0))?
        } else {
            let msg = format!(
                "{} is neither a regular file nor a block device",
                path.display()
            );
            return Err(invalid_input(msg).into());
        };

        let size_bytes = match options.size {
            None => {
                check_lun_size(current_len, block_size)?;
                current_len
            }
            Some(size) if size <= current_len => size,
            Some(size) if file_type.is_file() && !options.read_only => {
                // Extending with ftruncate allocates no data blocks: the file stays sparse.
                file.set_len(size)?;
                size
            }
            Some(size) => {
                let msg = format!(
                    "{} has {current_len} bytes, fewer than {size}",
                    path.display()
                );
                return Err(invalid_input(msg).into());
            }
        };

        if options.thin && !file_type.is_file() {
            let msg = format!(
                "{}: thin provisioning needs a regular file (holes are punched in it)",
                path.display()
            );
            return Err(invalid_input(msg).into());
        }
        let fs_block = {
            use std::os::unix::fs::MetadataExt;
            let b = file.metadata()?.blksize();
            // st_blksize is a hint; keep it a power of two between the block size and 1 MiB.
            if b.is_power_of_two() {
                (b.clamp(u64::from(block_size), 1 << 20)) as u32
            } else {
                block_size
            }
        };
        let memory_backed = is_memory_filesystem(&file);
        // Map RAM-backed regular files for zero-copy reads, if every block is allocated: a
        // page fault on a hole of a tmpfs file allocates the page (pread does not), so a
        // sparse file would fill up as it is read, and a fault on a full tmpfs raises SIGBUS.
        // A failed mmap (address space, limits) only costs the optimisation: reads fall back
        // to pread.
        let fully_allocated = {
            use std::os::unix::fs::MetadataExt;
            file.metadata()?.blocks().saturating_mul(512) >= size_bytes
        };
        let mapped = if memory_backed
            && !options.direct
            && !options.thin
            && file_type.is_file()
            && fully_allocated
        {
            let huge_pages = options.huge_pages.then(|| path.display().to_string());
            mapping::MappedFile::map(&file, size_bytes, !options.read_only, huge_pages).ok()
        } else {
            None
        };
        Ok(Self {
            memory_backed,
            mapped,
            file,
            path: path.to_owned(),
            block_size,
            num_blocks: size_bytes / u64::from(block_size),
            size_bytes,
            read_only: options.read_only,
            direct: options.direct,
            thin: options.thin,
            fs_block,
        })
    }

    /// The path this device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How far backing the mapped file with 2 MiB pages has come ([`FileOptions::huge_pages`]);
    /// `None` when the file is not mapped or huge pages were not asked for.
    pub fn huge_pages(&self) -> Option<HugePageStatus> {
        self.mapped
            .as_ref()
            .and_then(mapping::MappedFile::huge_pages)
    }

    /// Whether the file lives on a RAM filesystem (tmpfs or ramfs).
    pub fn memory_backed(&self) -> bool {
        self.memory_backed
    }

    /// Whether the device was opened with `O_DIRECT`.
    pub fn direct(&self) -> bool {
        self.direct
    }

    fn needs_bounce(&self, buf: &[u8]) -> bool {
        self.direct && buf.as_ptr().addr() % DIRECT_ALIGN != 0
    }
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn blocks(&self) -> bool {
        // A file in tmpfs is page-cache memory: pread/pwrite copy and return, so running them
        // on a worker thread would only add two thread hops per command. Only O_DIRECT keeps
        // them on the pool (it may bounce through a buffer and is meant for real devices).
        !self.memory_backed || self.direct
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), StorageError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        if self.needs_bounce(buf) {
            let mut bounce = AlignedBuf::zeroed(buf.len());
            self.file.read_exact_at(bounce.as_mut_slice(), offset)?;
            buf.copy_from_slice(bounce.as_slice());
        } else {
            self.file.read_exact_at(buf, offset)?;
        }
        Ok(())
    }

    fn read_shared(&self, offset: u64, len: usize) -> Option<Result<Bytes, StorageError>> {
        let mapped = self.mapped.as_ref()?;
        Some(check_range(offset, len as u64, self.size_bytes).map(|()| {
            // In range of the device, hence of the mapping (it covers `size_bytes`).
            let start = offset as usize;
            mapped.bytes().slice(start..start + len)
        }))
    }

    fn read_append(&self, offset: u64, len: usize, out: &mut BytesMut) -> Result<(), StorageError> {
        check_range(offset, len as u64, self.size_bytes)?;
        if self.direct {
            // O_DIRECT wants aligned buffers: take the zero-filling default path (bounce).
            let start = out.len();
            out.resize(start + len, 0);
            let r = self.read_at(offset, &mut out[start..]);
            if r.is_err() {
                out.truncate(start);
            }
            return r;
        }
        let start = out.len();
        out.reserve(len);
        while out.len() - start < len {
            let done = out.len() - start;
            let spare = &mut out.spare_capacity_mut()[..len - done];
            let n = match rustix::io::pread(&self.file, spare, offset + done as u64) {
                Ok((filled, _)) => filled.len(),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    out.truncate(start);
                    return Err(io::Error::from(e).into());
                }
            };
            if n == 0 {
                out.truncate(start);
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
            }
            // SAFETY: pread initialized the first `n` bytes of the spare capacity (`filled`
            // is exactly that prefix), and `n <= len - done`, within the reserved capacity.
            #[allow(unsafe_code)]
            unsafe {
                out.set_len(out.len() + n);
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), StorageError> {
        check_range(offset, data.len() as u64, self.size_bytes)?;
        if self.read_only {
            return Err(read_only_error());
        }
        if self.mapped.as_ref().is_some_and(|m| m.write(offset, data)) {
            // Copied into the page cache through the mapping (tmpfs, ramfs: nothing to sync
            // beyond what fdatasync below does for FUA).
        } else if self.needs_bounce(data) {
            let mut bounce = AlignedBuf::zeroed(data.len());
            bounce.as_mut_slice().copy_from_slice(data);
            self.file.write_all_at(bounce.as_slice(), offset)?;
        } else {
            self.file.write_all_at(data, offset)?;
        }
        if fua {
            // Even with O_DIRECT the data may sit in the disk's volatile cache: fdatasync
            // flushes it, so FUA is not reported before the data is durable.
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn write_vectored_at(
        &self,
        offset: u64,
        segments: &[&[u8]],
        fua: bool,
    ) -> Result<(), StorageError> {
        let total: usize = segments.iter().map(|s| s.len()).sum();
        check_range(offset, total as u64, self.size_bytes)?;
        if self.read_only {
            return Err(read_only_error());
        }
        if self.direct && segments.len() > 1 {
            // O_DIRECT wants whole, aligned blocks per call; segments are PDU-sized.
            let mut bounce = AlignedBuf::zeroed(total);
            let mut at = 0;
            for s in segments {
                bounce.as_mut_slice()[at..at + s.len()].copy_from_slice(s);
                at += s.len();
            }
            return self.write_at(offset, bounce.as_slice(), fua);
        }
        // Buffered and mapped writes take any byte range: one call per segment, then one
        // fdatasync for all of them.
        let mut at = offset;
        for s in segments {
            self.write_at(at, s, false)?;
            at += s.len() as u64;
        }
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), StorageError> {
        if self.read_only {
            // Nothing was written through this descriptor, so nothing can be pending.
            return Ok(());
        }
        self.file.sync_data()?;
        Ok(())
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), StorageError> {
        // Checked here so a read-only device reports a bad range before it reports read-only,
        // as write_at does; then the provided implementation.
        check_range(offset, len, self.size_bytes)?;
        if self.read_only {
            return Err(read_only_error());
        }
        let zeros = AlignedBuf::zeroed(len.min(crate::ZERO_BUFFER_BYTES as u64) as usize);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(zeros.as_slice().len() as u64) as usize;
            let piece = &zeros.as_slice()[..n];
            // Through the mapping when there is one, so its per-chunk CRCs stay exact.
            if !self
                .mapped
                .as_ref()
                .is_some_and(|m| m.write(offset + done, piece))
            {
                self.file.write_all_at(piece, offset + done)?;
            }
            done += n as u64;
        }
        if fua {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Thin: punches a hole (the file keeps its size); the range then reads as zeros, and the
    /// file system frees its whole blocks inside it. Otherwise the provided no-op.
    fn discard(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        check_range(offset, len, self.size_bytes)?;
        if !self.thin || len == 0 {
            return Ok(());
        }
        if self.read_only {
            return Err(read_only_error());
        }
        use rustix::fs::FallocateFlags;
        rustix::fs::fallocate(
            &self.file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len,
        )
        .map_err(io::Error::from)?;
        Ok(())
    }

    fn deallocates(&self) -> bool {
        self.thin
    }

    fn deallocation_granularity(&self) -> u64 {
        u64::from(self.fs_block)
    }

    /// Thin: the file's data and holes, from `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)`.
    fn provisioning(&self, offset: u64, len: u64) -> Result<Extent, StorageError> {
        check_range(offset, len, self.size_bytes)?;
        let mapped = Extent {
            state: Provisioning::Mapped,
            len,
        };
        if !self.thin || len == 0 {
            return Ok(mapped);
        }
        use rustix::fs::{seek, SeekFrom};
        let end = offset + len;
        // lseek returns offsets; the file position it moves is never used (pread and pwrite
        // take their own).
        let data = match seek(&self.file, SeekFrom::Data(offset)) {
            Ok(at) => at,
            // ENXIO: no data at or after `offset` (the rest of the file is a hole).
            Err(rustix::io::Errno::NXIO) => end,
            Err(e) => return Err(io::Error::from(e).into()),
        };
        if data > offset {
            return Ok(Extent {
                state: Provisioning::Deallocated,
                len: data.min(end) - offset,
            });
        }
        let hole = match seek(&self.file, SeekFrom::Hole(offset)) {
            Ok(at) => at,
            Err(rustix::io::Errno::NXIO) => end,
            Err(e) => return Err(io::Error::from(e).into()),
        };
        Ok(Extent {
            state: Provisioning::Mapped,
            len: hole.clamp(offset + 1, end) - offset,
        })
    }

    fn allocated_bytes(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        let meta = self.file.metadata().ok()?;
        meta.is_file().then(|| meta.blocks().saturating_mul(512))
    }

    fn physical_block_size(&self) -> u32 {
        self.fs_block
    }
}

/// Refuses a LUN size that is zero or not a whole number of blocks.
fn check_lun_size(size: u64, block_size: u32) -> io::Result<()> {
    if size == 0 || size % u64::from(block_size) != 0 {
        return Err(invalid_input(format!(
            "size {size} is not a positive multiple of the block size {block_size}"
        )));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn direct_flag() -> io::Result<i32> {
    Ok(libc::O_DIRECT)
}

#[cfg(not(target_os = "linux"))]
fn direct_flag() -> io::Result<i32> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "O_DIRECT is only supported on Linux",
    ))
}

/// A zeroed byte buffer whose start is aligned to [`DIRECT_ALIGN`], as `O_DIRECT` requires.
///
/// It over-allocates a `Vec` by one alignment unit and uses the aligned window inside it, which
/// needs no `unsafe` (unlike `std::alloc` with a `Layout`), at the cost of 4 KiB per buffer.
/// Moving the `Vec` does not move its heap allocation, so the window stays aligned.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> Self {
        let storage = vec![0u8; len + DIRECT_ALIGN];
        let misalignment = storage.as_ptr().addr() % DIRECT_ALIGN;
        let start = (DIRECT_ALIGN - misalignment) % DIRECT_ALIGN;
        Self {
            storage,
            start,
            len,
        }
    }

    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

mod crc_table;
mod huge_pages;
mod mapping;

pub use crc_table::{cached_crc32c, file_range, FileRange};
pub use huge_pages::HugePageStatus;

#[cfg(test)]
mod tests;

/// Whether `file` is on tmpfs or ramfs (statfs magic numbers from linux/magic.h).
fn is_memory_filesystem(file: &File) -> bool {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    match rustix::fs::fstatfs(file) {
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
        Ok(st) => matches!(st.f_type as u64, TMPFS_MAGIC | RAMFS_MAGIC),
        Err(_) => false,
    }
}
