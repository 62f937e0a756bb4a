//! Raw declarations of the parts of librados' and librbd's C API that sluice's RBD backend
//! calls, written by hand from Debian 12's headers (`/usr/include/rados/librados.h` and
//! `/usr/include/rbd/librbd.h`, Ceph 16.2 "Pacific"; the functions used here have kept their
//! signatures since Ceph 12).
//!
//! Only declarations: every function is `unsafe` to call, and the safe wrapper lives in
//! sluice-storage (`rbd/librbd.rs`), which states why each call's preconditions hold. Names and
//! types follow the C headers exactly so that a reader can check one against the other.
//!
//! Conventions of both libraries: functions return 0 (or a byte count) on success and a
//! negated `errno` on failure; handles are opaque pointers; strings are NUL-terminated.
//! An asynchronous call takes a completion made by [`rbd_aio_create_completion`]; librbd calls
//! the completion's callback once, from one of its own threads, when the operation ends, and
//! [`rbd_aio_get_return_value`] then holds its result. The caller releases the completion with
//! [`rbd_aio_release`] after that, and must keep the buffers it passed alive until then.
#![no_std]
#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};

/// A cluster handle (`rados_t`): configuration, then a connection.
pub type rados_t = *mut c_void;
/// An I/O context (`rados_ioctx_t`): a cluster handle bound to one pool.
pub type rados_ioctx_t = *mut c_void;
/// An open image (`rbd_image_t`).
pub type rbd_image_t = *mut c_void;
/// An asynchronous operation's completion (`rbd_completion_t`).
pub type rbd_completion_t = *mut c_void;
/// Called once when an asynchronous operation ends (`rbd_callback_t`), on a librbd thread,
/// with the completion and the argument given to [`rbd_aio_create_completion`].
pub type rbd_callback_t = Option<unsafe extern "C" fn(cb: rbd_completion_t, arg: *mut c_void)>;

/// `rbd_lock_mode_t`: how [`rbd_lock_acquire`] takes an image's managed lock.
pub type rbd_lock_mode_t = c_int;
/// `RBD_LOCK_MODE_EXCLUSIVE`: one owner at a time (the exclusive-lock feature).
pub const RBD_LOCK_MODE_EXCLUSIVE: rbd_lock_mode_t = 0;
/// `RBD_LOCK_MODE_SHARED`.
pub const RBD_LOCK_MODE_SHARED: rbd_lock_mode_t = 1;

/// `LIBRADOS_OP_FLAG_FADVISE_FUA`: the write is to be durable when it completes.
pub const LIBRADOS_OP_FLAG_FADVISE_FUA: c_int = 0x80;

/// `RBD_FEATURE_EXCLUSIVE_LOCK` (`rbd/features.h`).
pub const RBD_FEATURE_EXCLUSIVE_LOCK: u64 = 1 << 2;

/// `RBD_MAX_BLOCK_NAME_SIZE`.
pub const RBD_MAX_BLOCK_NAME_SIZE: usize = 24;
/// `RBD_MAX_IMAGE_NAME_SIZE`.
pub const RBD_MAX_IMAGE_NAME_SIZE: usize = 96;

/// `rbd_image_info_t`, filled by [`rbd_stat`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rbd_image_info_t {
    /// Image size in bytes.
    pub size: u64,
    /// Size of each RADOS object the image is striped over, in bytes.
    pub obj_size: u64,
    /// Number of objects.
    pub num_objs: u64,
    /// log2 of `obj_size`.
    pub order: c_int,
    /// Deprecated in the header.
    pub block_name_prefix: [c_char; RBD_MAX_BLOCK_NAME_SIZE],
    /// Deprecated in the header.
    pub parent_pool: i64,
    /// Deprecated in the header.
    pub parent_name: [c_char; RBD_MAX_IMAGE_NAME_SIZE],
}

// The header's layout on LP64: three u64 (24), an int (28), 24 chars (52), padding to 8 (56),
// an i64 (64), 96 chars (160). rbd_stat is also told this size and refuses a smaller one.
const _: () = assert!(core::mem::size_of::<rbd_image_info_t>() == 160);

extern "C" {
    /// Creates a cluster handle for `name` (`client.ID`) in cluster `clustername` ("ceph").
    pub fn rados_create2(
        pcluster: *mut rados_t,
        clustername: *const c_char,
        name: *const c_char,
        flags: u64,
    ) -> c_int;
    /// Reads a configuration file; `path` NULL searches the default places and `$CEPH_CONF`.
    pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    /// Sets one configuration option (e.g. `keyring`, `client_mount_timeout`).
    pub fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    /// Connects to the monitors and authenticates.
    pub fn rados_connect(cluster: rados_t) -> c_int;
    /// Disconnects and frees the handle; every I/O context must be destroyed first.
    pub fn rados_shutdown(cluster: rados_t);
    /// Creates an I/O context on pool `pool_name`.
    pub fn rados_ioctx_create(
        cluster: rados_t,
        pool_name: *const c_char,
        ioctx: *mut rados_ioctx_t,
    ) -> c_int;
    /// Frees an I/O context; every image opened through it must be closed first.
    pub fn rados_ioctx_destroy(io: rados_ioctx_t);
}

extern "C" {
    /// librbd's version.
    pub fn rbd_version(major: *mut c_int, minor: *mut c_int, extra: *mut c_int);

    /// Opens image `name` (at snapshot `snap_name`, or the head when NULL).
    pub fn rbd_open(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    /// Opens image `name` read-only (no header watch, writes fail with `-EROFS`).
    pub fn rbd_open_read_only(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    /// Closes an image after its outstanding operations; the handle is then invalid.
    pub fn rbd_close(image: rbd_image_t) -> c_int;
    /// Fills `info` (of `infosize` bytes) with the image's size and layout.
    pub fn rbd_stat(image: rbd_image_t, info: *mut rbd_image_info_t, infosize: size_t) -> c_int;
    /// The image's current size in bytes.
    pub fn rbd_get_size(image: rbd_image_t, size: *mut u64) -> c_int;
    /// The image's feature bits (`RBD_FEATURE_*`).
    pub fn rbd_get_features(image: rbd_image_t, features: *mut u64) -> c_int;

    /// Whether this client holds the image's exclusive lock.
    pub fn rbd_is_exclusive_lock_owner(image: rbd_image_t, is_owner: *mut c_int) -> c_int;
    /// Takes the image's managed lock, asking its owner to hand it over.
    pub fn rbd_lock_acquire(image: rbd_image_t, lock_mode: rbd_lock_mode_t) -> c_int;
    /// Releases the image's managed lock.
    pub fn rbd_lock_release(image: rbd_image_t) -> c_int;
    /// Lists the lock's owners into `lock_owners` (room for `*max_lock_owners` strings, to be
    /// freed with [`rbd_lock_get_owners_cleanup`]); `-ERANGE` with the count needed when short.
    pub fn rbd_lock_get_owners(
        image: rbd_image_t,
        lock_mode: *mut rbd_lock_mode_t,
        lock_owners: *mut *mut c_char,
        max_lock_owners: *mut size_t,
    ) -> c_int;
    /// Frees the strings [`rbd_lock_get_owners`] returned.
    pub fn rbd_lock_get_owners_cleanup(lock_owners: *mut *mut c_char, lock_owner_count: size_t);
    /// Breaks `lock_owner`'s lock (and blocklists it, so it can no longer write).
    pub fn rbd_lock_break(
        image: rbd_image_t,
        lock_mode: rbd_lock_mode_t,
        lock_owner: *const c_char,
    ) -> c_int;

    /// Makes a completion whose callback `complete_cb` gets `cb_arg`.
    pub fn rbd_aio_create_completion(
        cb_arg: *mut c_void,
        complete_cb: rbd_callback_t,
        c: *mut rbd_completion_t,
    ) -> c_int;
    /// The ended operation's result: a byte count, 0, or a negated errno.
    pub fn rbd_aio_get_return_value(c: rbd_completion_t) -> ssize_t;
    /// Frees a completion.
    pub fn rbd_aio_release(c: rbd_completion_t);

    /// Reads `len` bytes at `off` into `buf`.
    pub fn rbd_aio_read(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        buf: *mut c_char,
        c: rbd_completion_t,
    ) -> c_int;
    /// Writes `len` bytes of `buf` at `off`, with `LIBRADOS_OP_FLAG_*` `op_flags`.
    pub fn rbd_aio_write2(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        buf: *const c_char,
        c: rbd_completion_t,
        op_flags: c_int,
    ) -> c_int;
    /// Writes the `iovcnt` buffers of `iov` back to back at `off`.
    pub fn rbd_aio_writev(
        image: rbd_image_t,
        iov: *const iovec,
        iovcnt: c_int,
        off: u64,
        c: rbd_completion_t,
    ) -> c_int;
    /// Deallocates `len` bytes at `off` (they then read as zeros).
    pub fn rbd_aio_discard(image: rbd_image_t, off: u64, len: u64, c: rbd_completion_t) -> c_int;
    /// Writes `len` bytes at `off` as copies of the `data_len` bytes of `buf`.
    pub fn rbd_aio_writesame(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        buf: *const c_char,
        data_len: size_t,
        c: rbd_completion_t,
        op_flags: c_int,
    ) -> c_int;
    /// Writes `len` bytes of zeros at `off`.
    pub fn rbd_aio_write_zeroes(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        c: rbd_completion_t,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int;
    /// Writes `buf` at `off` only if the image holds `cmp_buf` there; on a miscompare the
    /// result is `-EILSEQ` and `*mismatch_off` the image offset of the first differing byte.
    /// `mismatch_off` must stay valid until the completion ends.
    pub fn rbd_aio_compare_and_write(
        image: rbd_image_t,
        off: u64,
        len: size_t,
        cmp_buf: *const c_char,
        buf: *const c_char,
        c: rbd_completion_t,
        mismatch_off: *mut u64,
        op_flags: c_int,
    ) -> ssize_t;
    /// Makes every write that completed before it durable.
    pub fn rbd_aio_flush(image: rbd_image_t, c: rbd_completion_t) -> c_int;
}

/// A compound write operation on one object (`rados_write_op_t`), built step by step and
/// applied atomically by [`rados_write_op_operate`]: if any step fails (an assertion), none
/// takes effect.
pub type rados_write_op_t = *mut c_void;

/// `LIBRADOS_CREATE_EXCLUSIVE`: [`rados_write_op_create`] fails with `EEXIST` when the object
/// exists.
pub const LIBRADOS_CREATE_EXCLUSIVE: c_int = 1;

/// Called for each notify on a watched object (`rados_watchcb2_t`), on a librados thread:
/// `arg` as given to [`rados_watch3`], the notify's id, the watch's cookie, the notifier's
/// client instance id and the payload. The notifier waits until every watcher called
/// [`rados_notify_ack`] (or its timeout).
pub type rados_watchcb2_t = Option<
    unsafe extern "C" fn(
        arg: *mut c_void,
        notify_id: u64,
        handle: u64,
        notifier_id: u64,
        data: *mut c_void,
        data_len: size_t,
    ),
>;

/// Called when a watch broke (`rados_watcherrcb_t`): notifies may have been missed; the
/// watch must be removed and made again.
pub type rados_watcherrcb_t =
    Option<unsafe extern "C" fn(pre: *mut c_void, cookie: u64, err: c_int)>;

extern "C" {
    /// This client's messenger addresses (as blocklists and lock owners name them), in a
    /// string the caller frees with `free`.
    pub fn rados_getaddrs(cluster: rados_t, addrs: *mut *mut c_char) -> c_int;
    /// The cluster-wide unique id of this client (the `N` of its entity name `client.N`).
    pub fn rados_get_instance_id(cluster: rados_t) -> u64;
    /// Blocklists `client_address` from the OSDs for `expire_seconds` (0: the default).
    pub fn rados_blocklist_add(
        cluster: rados_t,
        client_address: *mut c_char,
        expire_seconds: u32,
    ) -> c_int;
    /// The cluster handle an I/O context belongs to.
    pub fn rados_ioctx_get_cluster(io: rados_ioctx_t) -> rados_t;
    /// The version of the object last read or written through `io`.
    pub fn rados_get_last_version(io: rados_ioctx_t) -> u64;
    /// Reads up to `len` bytes at `off` of object `oid`; returns the count read.
    pub fn rados_read(
        io: rados_ioctx_t,
        oid: *const c_char,
        buf: *mut c_char,
        len: size_t,
        off: u64,
    ) -> c_int;
    /// A new, empty write operation.
    pub fn rados_create_write_op() -> rados_write_op_t;
    /// Frees a write operation.
    pub fn rados_release_write_op(write_op: rados_write_op_t);
    /// Adds: the object's version must be `ver` (else the operation fails with `ERANGE` or
    /// `EOVERFLOW` and changes nothing).
    pub fn rados_write_op_assert_version(write_op: rados_write_op_t, ver: u64);
    /// Adds: create the object (`exclusive`: fail with `EEXIST` if it exists).
    pub fn rados_write_op_create(
        write_op: rados_write_op_t,
        exclusive: c_int,
        category: *const c_char,
    );
    /// Adds: replace the object's whole contents with `len` bytes of `buffer` (copied).
    pub fn rados_write_op_write_full(
        write_op: rados_write_op_t,
        buffer: *const c_char,
        len: size_t,
    );
    /// Applies a write operation to object `oid`, synchronously.
    pub fn rados_write_op_operate(
        write_op: rados_write_op_t,
        io: rados_ioctx_t,
        oid: *const c_char,
        mtime: *mut libc::time_t,
        flags: c_int,
    ) -> c_int;
    /// Watches object `o`: `watchcb` is called for each notify, `watcherrcb` when the watch
    /// broke; `timeout` seconds without this client's pings end the watch on the OSD.
    pub fn rados_watch3(
        io: rados_ioctx_t,
        o: *const c_char,
        cookie: *mut u64,
        watchcb: rados_watchcb2_t,
        watcherrcb: rados_watcherrcb_t,
        timeout: u32,
        arg: *mut c_void,
    ) -> c_int;
    /// Ends a watch; no callback for it runs after this returns.
    pub fn rados_unwatch2(io: rados_ioctx_t, cookie: u64) -> c_int;
    /// Sends a notify to every watcher of `o` and waits for their acks (at most
    /// `timeout_ms`); the reply (acks and timeouts, encoded) is freed with
    /// [`rados_buffer_free`]. Returns `ETIMEDOUT` if some watcher did not ack.
    pub fn rados_notify2(
        io: rados_ioctx_t,
        o: *const c_char,
        buf: *const c_char,
        buf_len: c_int,
        timeout_ms: u64,
        reply_buffer: *mut *mut c_char,
        reply_buffer_len: *mut size_t,
    ) -> c_int;
    /// Acknowledges a notify, with an optional payload for the notifier.
    pub fn rados_notify_ack(
        io: rados_ioctx_t,
        o: *const c_char,
        notify_id: u64,
        cookie: u64,
        buf: *const c_char,
        buf_len: c_int,
    ) -> c_int;
    /// Frees a buffer librados allocated (a notify reply).
    pub fn rados_buffer_free(buf: *mut c_char);
}
