//! A safe face on the few librados and librbd calls the RBD backend makes (sluice-rbd-sys).
//!
//! Ownership follows the C API's rules: a [`Cluster`] (connected `rados_t`) outlives every
//! [`Image`] opened through it, because each `Image` holds an `Arc` of its pool's I/O context,
//! which holds an `Arc` of the cluster; dropping the last one closes the image, destroys the
//! context and shuts the cluster handle down, in that order.
//!
//! Every data operation goes through librbd's asynchronous API (`rbd_aio_*`). The synchronous
//! calls ([`Image::run`]) create a completion, submit, and block the calling thread until
//! librbd's callback says the operation ended; the caller's buffers are borrowed for the whole
//! call, so they outlive the operation, and the target runs them on its blocking pool
//! (`BlockDevice::blocks`), never on the network reactor. Reads, writes and flushes can also
//! be awaited (`aio`): the callback wakes a task instead of a thread.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::path::Path;
use std::ptr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use sluice_rbd_sys as sys;

mod aio;

/// The iovecs of a vectored write over `segments`, and their count as librbd takes it. The
/// pointers stay valid only while the segments are neither moved nor dropped.
fn iovecs<S: AsRef<[u8]>>(segments: &[S]) -> io::Result<(Vec<libc::iovec>, c_int)> {
    let iov: Vec<libc::iovec> = segments
        .iter()
        .map(|s| libc::iovec {
            iov_base: s.as_ref().as_ptr().cast_mut().cast::<c_void>(),
            iov_len: s.as_ref().len(),
        })
        .collect();
    let count = c_int::try_from(iov.len()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many segments in one write",
        )
    })?;
    Ok((iov, count))
}

/// How long `rados_connect` waits for a monitor before it fails (`client_mount_timeout`,
/// 300 s by default): a target started against an unreachable cluster says so in seconds.
pub(super) const CONNECT_TIMEOUT_SECS: u32 = 10;

/// How long an operation on an OSD may take before librados fails it with `ETIMEDOUT`
/// (`rados_osd_op_timeout`; 0, Ceph's default, waits forever). A SCSI command stuck on a dead
/// cluster would hold a thread and its initiator's task until the end of time; failed, it
/// becomes an error status the initiator can retry on another path. tcmu-runner's RBD handler
/// uses the same bound.
pub(super) const OSD_OP_TIMEOUT_SECS: u32 = 30;

/// Turns a librados/librbd result (a negated errno) into an error naming what failed.
pub(super) fn check(r: c_int, what: impl FnOnce() -> String) -> io::Result<()> {
    if r >= 0 {
        Ok(())
    } else {
        Err(errno_error(r, what()))
    }
}

/// An `io::Error` of the kind of errno `-r`, with `context` before the system's message.
pub(super) fn errno_error(r: c_int, context: String) -> io::Error {
    // The cluster refuses a blocklisted client with EBLOCKLISTED (= ESHUTDOWN): it was fenced.
    if r == -libc::ESHUTDOWN {
        return io::Error::new(
            io::ErrorKind::NotConnected,
            format!("{context}: this client is blocklisted (fenced) by the cluster"),
        );
    }
    let os = io::Error::from_raw_os_error(r.saturating_neg());
    io::Error::new(os.kind(), format!("{context}: {os}"))
}

fn c_string(what: &str, s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {s:?} contains a NUL byte"),
        )
    })
}

fn c_path(what: &str, p: &Path) -> io::Result<CString> {
    let s = p.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {} is not UTF-8", p.display()),
        )
    })?;
    c_string(what, s)
}

/// A connected cluster handle.
#[derive(Debug)]
pub(super) struct Cluster {
    handle: sys::rados_t,
}

// SAFETY: a `rados_t` may be used from any thread (librados is thread-safe; its handle is a
// pointer to a C++ object with its own locking), and `Cluster` only ever hands it to librados.
unsafe impl Send for Cluster {}
// SAFETY: as above; every librados call on a connected handle may run concurrently.
unsafe impl Sync for Cluster {}

/// What a client connects with.
pub(super) struct ConnectArgs<'a> {
    /// The configuration file; `None` lets librados search (`$CEPH_CONF`, `/etc/ceph`).
    pub conf_file: Option<&'a Path>,
    /// The client's id (the `ID` of `client.ID`).
    pub client_id: &'a str,
    /// The keyring; `None` takes the configuration's.
    pub keyring: Option<&'a Path>,
}

impl Cluster {
    /// Creates a handle for `client.ID`, configures it and connects.
    pub(super) fn connect(args: &ConnectArgs<'_>) -> io::Result<Arc<Self>> {
        let name = c_string("client id", &format!("client.{}", args.client_id))?;
        let cluster_name = c_string("cluster name", "ceph")?;
        let mut handle: sys::rados_t = ptr::null_mut();
        // SAFETY: `handle` is a valid place for the new handle; both strings are NUL-terminated
        // and outlive the call (librados copies them).
        let r = unsafe { sys::rados_create2(&mut handle, cluster_name.as_ptr(), name.as_ptr(), 0) };
        check(r, || {
            format!(
                "cannot create a Ceph client handle for client.{}",
                args.client_id
            )
        })?;
        // From here on, dropping `cluster` shuts the handle down.
        let cluster = Self { handle };
        cluster.set("client_mount_timeout", &CONNECT_TIMEOUT_SECS.to_string())?;
        cluster.set("rados_mon_op_timeout", &CONNECT_TIMEOUT_SECS.to_string())?;
        cluster.set("rados_osd_op_timeout", &OSD_OP_TIMEOUT_SECS.to_string())?;
        // A discard that covers part of an object zeroes that part instead of leaving it: a
        // discarded range then always reads as zeros, which thin LUs promise (LBPRZ=1).
        cluster.set("rbd_skip_partial_discard", "false")?;
        let conf = args
            .conf_file
            .map(|p| c_path("Ceph configuration file", p))
            .transpose()?;
        // SAFETY: the handle is valid and not yet connected; the path is NUL-terminated (or
        // NULL: search the default places) and outlives the call.
        let r = unsafe {
            sys::rados_conf_read_file(
                cluster.handle,
                conf.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            )
        };
        check(r, || match args.conf_file {
            Some(p) => format!("cannot read the Ceph configuration file {}", p.display()),
            None => "cannot find a Ceph configuration file (set conf_file, or CEPH_CONF)".into(),
        })?;
        if let Some(keyring) = args.keyring {
            cluster.set("keyring", &keyring.to_string_lossy())?;
        }
        // No client-side cache, whatever the configuration file says: a write is acknowledged
        // once it is on the OSDs, so a gateway killed with `kill -9` loses no acknowledged
        // write, and a read through another gateway of the same image never misses a write
        // that sits in this one's cache (nor returns stale data from its own cache).
        cluster.set("rbd_cache", "false")?;
        // librbd copies every write's data (`rbd_disable_zero_copy_writes`, on by default), 14 %
        // of the target's CPU on 1 MiB writes. Turning the copy off saved a quarter of that CPU
        // but is not safe here: librbd then holds a write's completion until the messenger
        // drops its last reference to the buffer, and for a write refused because this client
        // was blocklisted (fenced) that never happened, so the write never completed. A fenced
        // gateway must fail its writes, not hang them (docs/performance.md, "RBD LUNs").
        // SAFETY: the handle is valid, configured and not yet connected.
        let r = unsafe { sys::rados_connect(cluster.handle) };
        check(r, || {
            let conf = args.conf_file.map_or_else(
                || "the default configuration".into(),
                |p| p.display().to_string(),
            );
            let hint = match -r {
                libc::ETIMEDOUT => format!(
                    " (no monitor answered within {CONNECT_TIMEOUT_SECS} s: is the cluster up, \
                     and is `mon host` in {conf} right?)"
                ),
                libc::EACCES | libc::EPERM => format!(
                    " (the monitors refused client.{}'s key: check the keyring)",
                    args.client_id
                ),
                libc::ENOENT => format!(" (client.{} has no key in the keyring)", args.client_id),
                _ => String::new(),
            };
            format!(
                "cannot connect to the Ceph cluster of {conf} as client.{}{hint}",
                args.client_id
            )
        })?;
        Ok(Arc::new(cluster))
    }

    /// Sets one configuration option.
    fn set(&self, option: &str, value: &str) -> io::Result<()> {
        let o = c_string("Ceph option", option)?;
        let v = c_string("Ceph option value", value)?;
        // SAFETY: the handle is valid; both strings are NUL-terminated and outlive the call.
        let r = unsafe { sys::rados_conf_set(self.handle, o.as_ptr(), v.as_ptr()) };
        check(r, || {
            format!("cannot set the Ceph option {option} to {value:?}")
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle came from rados_create2 and is shut down once, here; every I/O
        // context holds an `Arc<Cluster>`, so none is left.
        unsafe { sys::rados_shutdown(self.handle) }
    }
}

/// An I/O context on one pool.
#[derive(Debug)]
pub(super) struct Pool {
    handle: sys::rados_ioctx_t,
    name: String,
    // Destroyed after the context (fields drop after `Drop::drop` ran).
    _cluster: Arc<Cluster>,
}

// SAFETY: an I/O context may be used from several threads at once (librados documents the
// ioctx as thread-safe for I/O); `Pool` only hands it to librados and librbd.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    /// Opens pool `name` of `cluster`.
    pub(super) fn open(cluster: &Arc<Cluster>, name: &str) -> io::Result<Arc<Self>> {
        let c_name = c_string("pool name", name)?;
        let mut handle: sys::rados_ioctx_t = ptr::null_mut();
        // SAFETY: the cluster handle is connected; the name is NUL-terminated and outlives the
        // call; `handle` is a valid place for the context.
        let r = unsafe { sys::rados_ioctx_create(cluster.handle, c_name.as_ptr(), &mut handle) };
        check(r, || {
            if r == -libc::ENOENT {
                format!("the Ceph pool {name} does not exist")
            } else {
                format!("cannot open the Ceph pool {name}")
            }
        })?;
        Ok(Arc::new(Self {
            handle,
            name: name.into(),
            _cluster: Arc::clone(cluster),
        }))
    }
}

impl Pool {
    /// Another I/O context on the same pool through the same client (its own "last version"
    /// and watches; the same client instance, so fencing this client fences it too).
    pub(super) fn duplicate(&self) -> io::Result<Arc<Self>> {
        Self::open(&self._cluster, &self.name)
    }

    /// The raw context, for the RADOS object calls of `rados.rs`.
    pub(super) fn raw(&self) -> sys::rados_ioctx_t {
        self.handle
    }

    /// The client's messenger addresses (`v2:IP:PORT/NONCE,...`): a lock owner's name is one.
    pub(super) fn client_addrs(&self) -> io::Result<String> {
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: the cluster handle is connected; `out` is a valid place for the string.
        let r = unsafe { sys::rados_getaddrs(self._cluster.handle, &mut out) };
        check(r, || "rados_getaddrs".into())?;
        if out.is_null() {
            return Ok(String::new());
        }
        // SAFETY: librados returned a NUL-terminated string it allocated with malloc.
        let s = unsafe { std::ffi::CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: allocated by librados with strdup, freed once.
        unsafe { libc::free(out.cast()) };
        Ok(s)
    }

    /// The client's cluster-wide instance id: the `N` of `client.N`, as librbd names lock
    /// owners.
    /// Blocklists client `address` (`IP:PORT/NONCE`) in the cluster for the default time:
    /// the OSDs refuse its operations from then on.
    pub(super) fn blocklist(&self, address: &str) -> io::Result<()> {
        let c = c_string("client address", address)?;
        // SAFETY: the cluster handle is connected; librados only reads the string (the
        // binding's `*mut` is its C signature's).
        let r = unsafe { sys::rados_blocklist_add(self._cluster.handle, c.as_ptr().cast_mut(), 0) };
        check(r, || format!("cannot blocklist {address}"))
    }

    pub(super) fn instance_id(&self) -> u64 {
        // SAFETY: the cluster handle is connected and outlives `self`.
        unsafe { sys::rados_get_instance_id(self._cluster.handle) }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the context came from rados_ioctx_create and is destroyed once, here; every
        // image holds an `Arc<Pool>`, so none opened through it is left.
        unsafe { sys::rados_ioctx_destroy(self.handle) }
    }
}

/// An open RBD image.
#[derive(Debug)]
pub(super) struct Image {
    handle: sys::rbd_image_t,
    name: String,
    // Destroyed after the image is closed.
    pool: Arc<Pool>,
}

// SAFETY: librbd's image handle is thread-safe: its asynchronous calls, size queries and lock
// calls may be made from several threads at once (qemu and tcmu-runner submit to one handle
// from many). `Image` hands the handle to nothing but librbd.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

/// The layout `rbd_stat` reports.
#[derive(Clone, Copy, Debug)]
pub(super) struct ImageInfo {
    /// Size in bytes.
    pub size: u64,
    /// Bytes per RADOS object.
    pub object_size: u64,
}

impl Image {
    /// Opens image `name` of `pool`; read-only opens set no watch and refuse writes.
    pub(super) fn open(pool: &Arc<Pool>, name: &str, read_only: bool) -> io::Result<Self> {
        let c_name = c_string("image name", name)?;
        let mut handle: sys::rbd_image_t = ptr::null_mut();
        // SAFETY: the context is valid; the name is NUL-terminated and outlives the call;
        // `handle` is a valid place for the image; snap_name NULL opens the image's head.
        let r = unsafe {
            if read_only {
                sys::rbd_open_read_only(pool.handle, c_name.as_ptr(), &mut handle, ptr::null())
            } else {
                sys::rbd_open(pool.handle, c_name.as_ptr(), &mut handle, ptr::null())
            }
        };
        check(r, || {
            if r == -libc::ENOENT {
                format!("the RBD image {}/{name} does not exist", pool.name)
            } else {
                format!("cannot open the RBD image {}/{name}", pool.name)
            }
        })?;
        Ok(Self {
            handle,
            name: format!("{}/{name}", pool.name),
            pool: Arc::clone(pool),
        })
    }

    /// `POOL/IMAGE`.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The pool the image was opened through.
    pub(super) fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Size and object size.
    pub(super) fn stat(&self) -> io::Result<ImageInfo> {
        let mut info = std::mem::MaybeUninit::<sys::rbd_image_info_t>::zeroed();
        // SAFETY: the image is open; `info` is a writable rbd_image_info_t of the size passed.
        let r = unsafe {
            sys::rbd_stat(
                self.handle,
                info.as_mut_ptr(),
                std::mem::size_of::<sys::rbd_image_info_t>(),
            )
        };
        check(r, || format!("{}: rbd_stat", self.name))?;
        // SAFETY: zero-initialised plain data (integers and char arrays), filled by rbd_stat.
        let info = unsafe { info.assume_init() };
        Ok(ImageInfo {
            size: info.size,
            object_size: info.obj_size,
        })
    }

    /// The image's size now (librbd follows resizes through its header watch).
    pub(super) fn size(&self) -> io::Result<u64> {
        let mut size = 0u64;
        // SAFETY: the image is open; `size` is a valid place for the result.
        let r = unsafe { sys::rbd_get_size(self.handle, &mut size) };
        check(r, || format!("{}: rbd_get_size", self.name))?;
        Ok(size)
    }

    /// Fills `buf` from byte `offset`.
    pub(super) fn read(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let (ptr, len) = (buf.as_mut_ptr().cast::<c_char>(), buf.len());
        let n = self.run("read", |c| {
            // SAFETY: `ptr` is valid for `len` writable bytes (borrowed from `buf`) until `run`
            // returns, which is after the operation completed.
            unsafe { sys::rbd_aio_read(self.handle, offset, len, ptr, c) }
        })?;
        if n != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: read {n} of {len} bytes at {offset}", self.name),
            ));
        }
        Ok(())
    }

    /// Writes `data` at byte `offset`.
    pub(super) fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let (ptr, len) = (data.as_ptr().cast::<c_char>(), data.len());
        self.run("write", |c| {
            // SAFETY: `ptr` is valid for `len` bytes (borrowed from `data`) until `run` returns,
            // after the operation completed.
            unsafe { sys::rbd_aio_write2(self.handle, offset, len, ptr, c, 0) }
        })
        .map(drop)
    }

    /// Writes `segments` back to back from byte `offset`, in one operation.
    pub(super) fn write_vectored(&self, offset: u64, segments: &[&[u8]]) -> io::Result<()> {
        let (iov, count) = iovecs(segments)?;
        self.run("write", |c| {
            // SAFETY: `iov` and the segments it points into are borrowed until `run` returns,
            // after the operation completed; librbd only reads through `iov_base` for a write
            // (the `*mut` is the iovec type's, not a licence to write).
            unsafe { sys::rbd_aio_writev(self.handle, iov.as_ptr(), count, offset, c) }
        })
        .map(drop)
    }

    /// Writes `len` bytes of zeros from byte `offset`.
    pub(super) fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "zeroed range too long"))?;
        self.run("write zeroes", |c| {
            // SAFETY: the image is open; no buffer is involved.
            unsafe { sys::rbd_aio_write_zeroes(self.handle, offset, len, c, 0, 0) }
        })
        .map(drop)
    }

    /// Writes `len` bytes from byte `offset` as copies of `pattern` (`len` a multiple of
    /// its length).
    pub(super) fn write_same(&self, offset: u64, len: u64, pattern: &[u8]) -> io::Result<()> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "write-same too long"))?;
        let (ptr, unit) = (pattern.as_ptr().cast::<c_char>(), pattern.len());
        self.run("write same", |c| {
            // SAFETY: `ptr` is valid for `unit` bytes (borrowed from `pattern`) until `run`
            // returns, after the operation completed.
            unsafe { sys::rbd_aio_writesame(self.handle, offset, len, ptr, unit, c, 0) }
        })
        .map(drop)
    }

    /// Writes `data` at byte `offset` if the image holds `compare` there (the same length),
    /// as one operation of the OSD. `Ok(None)`: written; `Ok(Some(at))`: not written, byte
    /// `at` of the range differs first; `Err` with `InvalidInput` when librbd refuses the
    /// range (one that crosses an object boundary).
    pub(super) fn compare_and_write(
        &self,
        offset: u64,
        compare: &[u8],
        data: &[u8],
    ) -> io::Result<Option<u64>> {
        if compare.len() != data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "compare and write halves differ in length",
            ));
        }
        let len = data.len();
        let (cmp, buf) = (
            compare.as_ptr().cast::<c_char>(),
            data.as_ptr().cast::<c_char>(),
        );
        let mut mismatch = 0u64;
        let at: *mut u64 = &mut mismatch;
        let r = self.run_raw("compare and write", |c| {
            // SAFETY: `cmp` and `buf` are valid for `len` bytes (borrowed from `compare` and
            // `data`), and `at` points at `mismatch`, all until `run_raw` returns, after the
            // operation completed. The submission's `ssize_t` result is 0 or a negative errno.
            let r = unsafe {
                sys::rbd_aio_compare_and_write(self.handle, offset, len, cmp, buf, c, at, 0)
            };
            c_int::try_from(r).unwrap_or(-libc::EINVAL)
        })?;
        match r {
            0.. => Ok(None),
            // The first differing byte: librbd up to 16.2 (Debian 12) reports it counted from
            // the range, as the OSD's compare does; later releases count it from the start of
            // the image. Callers keep `offset` at 0 or at least `len` (whole 512-byte blocks
            // inside one sector), where the two cannot be confused.
            r if r == -(libc::EILSEQ as isize) => {
                let at = if mismatch >= offset && offset >= len as u64 {
                    mismatch - offset
                } else {
                    mismatch
                };
                Ok(Some(at.min(len.saturating_sub(1) as u64)))
            }
            r => Err(self.op_error("compare and write", r)),
        }
    }

    /// Deallocates `len` bytes from byte `offset`.
    pub(super) fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.run("discard", |c| {
            // SAFETY: the image is open; no buffer is involved.
            unsafe { sys::rbd_aio_discard(self.handle, offset, len, c) }
        })
        .map(drop)
    }

    /// Makes every completed write durable.
    pub(super) fn flush(&self) -> io::Result<()> {
        self.run("flush", |c| {
            // SAFETY: the image is open; no buffer is involved.
            unsafe { sys::rbd_aio_flush(self.handle, c) }
        })
        .map(drop)
    }

    /// Takes the image's exclusive lock and keeps it: while this client holds a lock it
    /// asked for, librbd refuses other clients' requests to hand it over, so another client
    /// can only write after [`lock_break`](Self::lock_break).
    pub(super) fn lock_acquire(&self) -> io::Result<()> {
        // SAFETY: the image is open.
        let r = unsafe { sys::rbd_lock_acquire(self.handle, sys::RBD_LOCK_MODE_EXCLUSIVE) };
        check(r, || {
            format!("{}: cannot take the exclusive lock", self.name)
        })
    }

    /// Gives the exclusive lock back.
    pub(super) fn lock_release(&self) -> io::Result<()> {
        // SAFETY: the image is open.
        let r = unsafe { sys::rbd_lock_release(self.handle) };
        check(r, || {
            format!("{}: cannot release the exclusive lock", self.name)
        })
    }

    /// Whether this client holds the exclusive lock.
    pub(super) fn is_lock_owner(&self) -> io::Result<bool> {
        let mut owner: c_int = 0;
        // SAFETY: the image is open; `owner` is a valid place for the answer.
        let r = unsafe { sys::rbd_is_exclusive_lock_owner(self.handle, &mut owner) };
        check(r, || format!("{}: rbd_is_exclusive_lock_owner", self.name))?;
        Ok(owner != 0)
    }

    /// The clients holding the lock (librbd's owner strings, as
    /// [`lock_break`](Self::lock_break) takes them); empty when nobody does.
    pub(super) fn lock_owners(&self) -> io::Result<Vec<String>> {
        // Room for a few owners; librbd says how many more it needs (-ERANGE).
        let mut room: usize = 4;
        loop {
            let mut owners: Vec<*mut c_char> = vec![ptr::null_mut(); room];
            let mut count = room;
            let mut mode: sys::rbd_lock_mode_t = 0;
            // SAFETY: the image is open; `owners` has room for `count` pointers, which librbd
            // fills with strings it allocated (freed below by rbd_lock_get_owners_cleanup).
            let r = unsafe {
                sys::rbd_lock_get_owners(self.handle, &mut mode, owners.as_mut_ptr(), &mut count)
            };
            if r == -libc::ERANGE && count > room {
                room = count;
                continue;
            }
            if r == -libc::ENOENT {
                return Ok(Vec::new());
            }
            check(r, || format!("{}: rbd_lock_get_owners", self.name))?;
            let count = count.min(room);
            let names = owners[..count]
                .iter()
                .map(|&p| {
                    // SAFETY: librbd filled the first `count` entries with NUL-terminated
                    // strings, alive until the cleanup call below.
                    unsafe { std::ffi::CStr::from_ptr(p) }
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            // SAFETY: the `count` strings librbd returned, freed once.
            unsafe { sys::rbd_lock_get_owners_cleanup(owners.as_mut_ptr(), count) };
            return Ok(names);
        }
    }

    /// Breaks `owner`'s exclusive lock; librbd blocklists that client, so none of its writes
    /// can land afterwards (they fail with `ESHUTDOWN`).
    pub(super) fn lock_break(&self, owner: &str) -> io::Result<()> {
        let c_owner = c_string("lock owner", owner)?;
        // SAFETY: the image is open; the owner string is NUL-terminated and outlives the call.
        let r = unsafe {
            sys::rbd_lock_break(self.handle, sys::RBD_LOCK_MODE_EXCLUSIVE, c_owner.as_ptr())
        };
        check(r, || format!("{}: cannot break {owner}'s lock", self.name))
    }

    /// Submits one asynchronous operation through `submit` (which gets the completion and
    /// returns what the `rbd_aio_*` call returned) and waits for it; returns its non-negative
    /// result (a byte count for reads).
    fn run(
        &self,
        what: &str,
        submit: impl FnOnce(sys::rbd_completion_t) -> c_int,
    ) -> io::Result<usize> {
        let result = self.run_raw(what, submit)?;
        usize::try_from(result).map_err(|_| self.op_error(what, result))
    }

    /// [`run`](Self::run), returning the operation's result as librbd gave it (a negative
    /// errno when it failed); `Err` only when librbd refused the submission.
    fn run_raw(
        &self,
        what: &str,
        submit: impl FnOnce(sys::rbd_completion_t) -> c_int,
    ) -> io::Result<isize> {
        let waiter = Arc::new(Waiter::default());
        let completion = Completion::new(&waiter)?;
        let r = submit(completion.raw);
        if r < 0 {
            // Refused before it was queued: librbd will not call back.
            drop(completion);
            return Err(errno_error(r, format!("{}: {what}", self.name)));
        }
        completion.submitted();
        Ok(waiter.wait())
    }

    /// The error of an operation that ended with `result` (a negative errno).
    fn op_error(&self, what: &str, result: isize) -> io::Error {
        let errno = c_int::try_from(result).unwrap_or(-libc::EIO);
        let e = errno_error(errno, format!("{}: {what}", self.name));
        if errno == -libc::ESHUTDOWN {
            // librados answers ESHUTDOWN once this client was blocklisted (fenced).
            return io::Error::new(e.kind(), format!("{e} (this client was fenced)"));
        }
        e
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: the handle came from rbd_open and is closed once, here; no operation is
        // outstanding (every `run` waited for its completion, and every `aio::Pending` holds
        // the image until its callback ran), and the pool outlives this.
        let r = unsafe { sys::rbd_close(self.handle) };
        if r < 0 {
            tracing::warn!(image = %self.name, pool = %self.pool.name, "rbd_close: {}", errno_error(r, String::new()));
        }
    }
}

/// Where an operation's result lands, and who waits for it: a thread (`wait`) or a task
/// (the waker of an [`aio::Pending`]).
#[derive(Debug, Default)]
struct Waiter {
    slot: Mutex<Slot>,
    done: Condvar,
}

/// The result, once librbd called back; the waker of the task awaiting it; the buffers librbd
/// reads from or writes into until then (owned here, so they live as long as the callback's
/// reference, whoever else lets go first).
#[derive(Debug, Default)]
struct Slot {
    result: Option<isize>,
    waker: Option<Waker>,
    buffers: aio::Buffers,
}

impl Waiter {
    fn holding(buffers: aio::Buffers) -> Self {
        Self {
            slot: Mutex::new(Slot {
                result: None,
                waker: None,
                buffers,
            }),
            done: Condvar::new(),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn complete(&self, result: isize) {
        let waker = {
            let mut slot = self.slot();
            slot.result = Some(result);
            self.done.notify_all();
            slot.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn wait(&self) -> isize {
        let mut slot = self.slot();
        loop {
            if let Some(r) = slot.result {
                return r;
            }
            slot = self.done.wait(slot).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// An `rbd_completion_t` whose callback owns one reference of a [`Waiter`]. Until it is
/// [`submitted`](Self::submitted) it is ours to release (dropped: librbd refused the
/// operation, or it was never handed over); afterwards the callback releases it.
struct Completion {
    raw: sys::rbd_completion_t,
    /// The reference handed to the callback, as a raw pointer (`Arc::into_raw`).
    arg: *const Waiter,
}

impl Completion {
    fn new(waiter: &Arc<Waiter>) -> io::Result<Self> {
        let arg = Arc::into_raw(Arc::clone(waiter));
        let mut raw: sys::rbd_completion_t = ptr::null_mut();
        // SAFETY: `arg` is a live `Arc<Waiter>` reference that `on_complete` takes back exactly
        // once; `raw` is a valid place for the completion.
        let r = unsafe {
            sys::rbd_aio_create_completion(arg.cast_mut().cast(), Some(on_complete), &mut raw)
        };
        if r < 0 {
            // SAFETY: the completion was not made, so the callback never runs: the reference
            // is still ours to drop.
            drop(unsafe { Arc::from_raw(arg) });
            return Err(errno_error(r, "rbd_aio_create_completion".into()));
        }
        Ok(Self { raw, arg })
    }

    /// librbd accepted the operation: from now on its callback owns the completion (and
    /// releases it, after its last use of it) and the waiter's reference.
    fn submitted(self) {
        std::mem::forget(self);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // SAFETY: not submitted (see `submitted`), so librbd never calls back: the callback's
        // `Waiter` reference is still unclaimed and the completion is released once, here.
        // (Releasing a submitted completion before its callback ran would free the handle
        // librbd then calls back with.)
        drop(unsafe { Arc::from_raw(self.arg) });
        // SAFETY: as above; the completion came from rbd_aio_create_completion.
        unsafe { sys::rbd_aio_release(self.raw) }
    }
}

/// librbd's completion callback: records the result, releases the completion and wakes the
/// waiting thread or task.
///
/// # Safety
///
/// `arg` must be a pointer from `Arc::into_raw` of a `Waiter` that nothing else takes back,
/// and `c` the completion it was registered with, submitted and ended; librbd calls it once
/// per completion.
unsafe extern "C" fn on_complete(c: sys::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `c` is the ended completion librbd calls back with.
    let result = unsafe { sys::rbd_aio_get_return_value(c) };
    // SAFETY: a submitted completion is released by its callback (see `Completion::submitted`),
    // once, after its last use above; librbd allows the release from the callback.
    unsafe { sys::rbd_aio_release(c) };
    // SAFETY: per this function's contract, `arg` is an `Arc<Waiter>` reference given up by
    // `Completion::new` and claimed only here.
    let waiter = unsafe { Arc::from_raw(arg.cast_const().cast::<Waiter>()) };
    waiter.complete(result);
}

/// librbd's version as `major.minor.extra`.
pub(super) fn version() -> String {
    let (mut major, mut minor, mut extra) = (0, 0, 0);
    // SAFETY: three valid places for the numbers.
    unsafe { sys::rbd_version(&mut major, &mut minor, &mut extra) };
    format!("{major}.{minor}.{extra}")
}
