//! [`LuObject`]: a RADOS object of an exported image, shared by every gateway that exports it:
//! `sluice.lu.<image>` holds the logical unit's reservation state, `sluice.owner.<image>`
//! which gateway owns it. Each is replaced only by a version-guarded compare-and-write
//! (`assert_version` plus `write_full` in one atomic write operation), and carries the
//! gateways' messages as watch/notify: "the state changed", "who is alive" (each live gateway
//! acks with its target port group and addresses) and "the owner changed".
//!
//! The object is reached through the image's own client (a second I/O context on the same
//! connection), so when a gateway is fenced (its client blocklisted), it can no longer change
//! the shared state either.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::ptr;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use sluice_rbd_sys as sys;

use super::librbd::{check, errno_error, Pool};
use crate::state_file::{StateStore, MAX_STATE_FILE_BYTES};

/// Seconds without this client's pings after which the OSD drops its watch.
const WATCH_TIMEOUT_SECS: u32 = 10;
/// How long a state change waits for every other gateway's ack.
const CHANGE_NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// The notify payload that says the saved state changed.
pub const MSG_STATE_CHANGED: &[u8] = b"state-changed";
/// Largest ack payload kept from one watcher.
const MAX_ACK_BYTES: usize = 4096;
/// Most watchers a notify reply is read for.
const MAX_WATCHERS: usize = 1024;

/// What a watcher answered a notify with.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Ack {
    /// The watcher's client instance id (the `N` of `client.N`).
    pub client: u64,
    /// Its ack payload.
    pub payload: Vec<u8>,
}

/// A handler for notifies from other clients: gets the payload, returns the ack payload.
pub type NotifyHandler = Arc<dyn Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync>;

/// What the watch callback needs; boxed so its address is stable while the watch exists.
struct WatchCtx {
    io: sys::rados_ioctx_t,
    oid: CString,
    me: u64,
    handlers: RwLock<Vec<NotifyHandler>>,
}

/// The shared object of one image's logical unit.
pub struct LuObject {
    pool: Arc<Pool>,
    oid: CString,
    name: String,
    /// Serialises an operation with its `rados_get_last_version`.
    io: Mutex<()>,
    ctx: Box<WatchCtx>,
    cookie: u64,
}

impl std::fmt::Debug for LuObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuObject")
            .field("object", &self.name)
            .finish()
    }
}

// SAFETY: the I/O context is thread-safe (librados); `io` serialises the calls whose result
// (`rados_get_last_version`) is per context; the watch context is only read by callbacks.
unsafe impl Send for LuObject {}
// SAFETY: as above.
unsafe impl Sync for LuObject {}
// SAFETY: the context pointer is only handed to librados, which is thread-safe.
unsafe impl Send for WatchCtx {}
// SAFETY: as above; `handlers` is behind a lock.
unsafe impl Sync for WatchCtx {}

impl LuObject {
    /// Opens (without creating) object `name` in `pool`'s pool, on its own I/O context of
    /// the same client, and watches it.
    pub(super) fn open(pool: &Arc<Pool>, name: &str) -> io::Result<Self> {
        let pool = pool.duplicate()?;
        let oid = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "object name with NUL"))?;
        let ctx = Box::new(WatchCtx {
            io: pool.raw(),
            oid: oid.clone(),
            me: pool.instance_id(),
            handlers: RwLock::new(Vec::new()),
        });
        ensure_exists(&pool, &oid, name)?;
        let mut cookie = 0u64;
        // SAFETY: the context and name are valid; `ctx` is boxed and outlives the watch (Drop
        // unwatches before it is freed); the callbacks are `extern "C"` with the right types.
        let r = unsafe {
            sys::rados_watch3(
                pool.raw(),
                oid.as_ptr(),
                &mut cookie,
                Some(on_notify),
                Some(on_watch_error),
                WATCH_TIMEOUT_SECS,
                &*ctx as *const WatchCtx as *mut c_void,
            )
        };
        check(r, || format!("cannot watch the RADOS object {name}"))?;
        Ok(Self {
            pool,
            oid,
            name: name.into(),
            io: Mutex::new(()),
            ctx,
            cookie,
        })
    }

    /// This client's instance id.
    pub fn client_id(&self) -> u64 {
        self.ctx.me
    }

    /// Adds a handler for notifies sent by other clients.
    pub fn subscribe(&self, handler: NotifyHandler) {
        self.ctx
            .handlers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(handler);
    }

    /// Sends `payload` to every watcher (this client's own included) and waits at most
    /// `timeout` for their acks; a watcher that did not ack in time is absent from the
    /// answer.
    pub fn notify(&self, payload: &[u8], timeout: Duration) -> io::Result<Vec<Ack>> {
        let mut reply: *mut c_char = ptr::null_mut();
        let mut reply_len: usize = 0;
        // SAFETY: context and name valid; payload borrowed for the call; reply pointers are
        // valid places, and the buffer librados allocates is freed below.
        let r = unsafe {
            sys::rados_notify2(
                self.pool.raw(),
                self.oid.as_ptr(),
                payload.as_ptr().cast(),
                payload.len() as c_int,
                timeout.as_millis() as u64,
                &mut reply,
                &mut reply_len,
            )
        };
        let acks = if reply.is_null() {
            Vec::new()
        } else {
            // SAFETY: librados allocated `reply_len` bytes at `reply`.
            let bytes = unsafe { std::slice::from_raw_parts(reply as *const u8, reply_len) };
            let acks = decode_notify_reply(bytes);
            // SAFETY: allocated by librados, freed once.
            unsafe { sys::rados_buffer_free(reply) };
            acks
        };
        if r < 0 && r != -libc::ETIMEDOUT {
            return Err(errno_error(r, format!("notify on {}", self.name)));
        }
        Ok(acks)
    }
}

impl Drop for LuObject {
    fn drop(&mut self) {
        // SAFETY: the watch was made on this context; after unwatch2 returns no callback runs,
        // so `ctx` may be freed.
        unsafe { sys::rados_unwatch2(self.pool.raw(), self.cookie) };
    }
}

impl StateStore for LuObject {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.load_versioned()?.0)
    }

    fn save(&self, contents: &[u8]) -> io::Result<()> {
        // Unconditional: read the version and write over it until nobody raced.
        loop {
            let (_, v) = self.load_versioned()?;
            if self.save_if(v, contents)?.is_some() {
                return Ok(());
            }
        }
    }

    fn shared(&self) -> bool {
        true
    }

    fn load_versioned(&self) -> io::Result<(Option<Vec<u8>>, u64)> {
        let mut buf = vec![0u8; MAX_STATE_FILE_BYTES as usize];
        let _serial = self.io.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: context and name valid; `buf` is writable for its length.
        let r = unsafe {
            sys::rados_read(
                self.pool.raw(),
                self.oid.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
            )
        };
        if r == -libc::ENOENT {
            return Ok((None, 0));
        }
        check(r, || format!("cannot read the RADOS object {}", self.name))?;
        // SAFETY: the context is valid; the read above was its last operation (serialised).
        let version = unsafe { sys::rados_get_last_version(self.pool.raw()) };
        buf.truncate(r as usize);
        // Created empty by the first gateway: nothing saved yet.
        Ok((Some(buf).filter(|b| !b.is_empty()), version))
    }

    fn save_if(&self, version: u64, contents: &[u8]) -> io::Result<Option<u64>> {
        let Some(new_version) = self.compare_and_write(version, contents)? else {
            return Ok(None);
        };
        // Every other gateway has marked its copy stale when this returns (or did not ack in
        // time: then it is dead or about to be fenced).
        if let Err(e) = self.notify(MSG_STATE_CHANGED, CHANGE_NOTIFY_TIMEOUT) {
            tracing::warn!(object = %self.name, error = %e, "cannot notify the other gateways");
        }
        Ok(Some(new_version))
    }

    fn on_change(&self, changed: Box<dyn Fn() + Send + Sync>) {
        self.subscribe(Arc::new(move |payload: &[u8]| {
            if payload == MSG_STATE_CHANGED {
                changed();
            }
            None
        }));
    }
}

impl LuObject {
    /// Replaces the object's contents with `contents` if its version is still `version` (0:
    /// if it does not exist or is empty and was never written), in one atomic write
    /// operation; returns the new version, or `None` when someone wrote it since. Nobody is
    /// notified.
    pub fn compare_and_write(&self, version: u64, contents: &[u8]) -> io::Result<Option<u64>> {
        let new_version = {
            let _serial = self.io.lock().unwrap_or_else(PoisonError::into_inner);
            // SAFETY: a new operation, released below on every path.
            let op = unsafe { sys::rados_create_write_op() };
            if op.is_null() {
                return Err(io::Error::other("rados_create_write_op failed"));
            }
            // SAFETY: `op` is valid; the contents are copied into it; context and name valid.
            let r = unsafe {
                if version == 0 {
                    sys::rados_write_op_create(op, sys::LIBRADOS_CREATE_EXCLUSIVE, ptr::null());
                } else {
                    sys::rados_write_op_assert_version(op, version);
                }
                sys::rados_write_op_write_full(op, contents.as_ptr().cast(), contents.len());
                let r = sys::rados_write_op_operate(
                    op,
                    self.pool.raw(),
                    self.oid.as_ptr(),
                    ptr::null_mut(),
                    0,
                );
                sys::rados_release_write_op(op);
                r
            };
            if matches!(-r, libc::EEXIST | libc::ERANGE | libc::EOVERFLOW) {
                return Ok(None);
            }
            check(r, || format!("cannot write the RADOS object {}", self.name))?;
            // SAFETY: the context is valid; the write above was its last operation.
            unsafe { sys::rados_get_last_version(self.pool.raw()) }
        };
        Ok(Some(new_version))
    }
}

/// Creates object `oid` empty unless it exists (a watch needs an object).
fn ensure_exists(pool: &Pool, oid: &CString, name: &str) -> io::Result<()> {
    // SAFETY: a new operation, released below; context and name valid.
    let r = unsafe {
        let op = sys::rados_create_write_op();
        if op.is_null() {
            return Err(io::Error::other("rados_create_write_op failed"));
        }
        sys::rados_write_op_create(op, 0, ptr::null());
        let r = sys::rados_write_op_operate(op, pool.raw(), oid.as_ptr(), ptr::null_mut(), 0);
        sys::rados_release_write_op(op);
        r
    };
    check(r, || format!("cannot create the RADOS object {name}"))
}

/// Called by librados for each notify on the watched object.
unsafe extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    notifier: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: `arg` is the boxed WatchCtx, alive while the watch exists.
    let ctx = unsafe { &*(arg as *const WatchCtx) };
    let payload: &[u8] = if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: librados passes `len` readable bytes at `data` for the callback's duration.
        unsafe { std::slice::from_raw_parts(data as *const u8, len) }
    };
    let mut reply = None;
    if notifier != ctx.me || payload != MSG_STATE_CHANGED {
        let handlers = ctx.handlers.read().unwrap_or_else(PoisonError::into_inner);
        for h in handlers.iter() {
            if let Some(r) = h(payload) {
                reply.get_or_insert(r);
            }
        }
    }
    let reply = reply.unwrap_or_default();
    // SAFETY: context and name valid; the reply is borrowed for the call.
    unsafe {
        sys::rados_notify_ack(
            ctx.io,
            ctx.oid.as_ptr(),
            notify_id,
            cookie,
            reply.as_ptr().cast(),
            reply.len().min(MAX_ACK_BYTES) as c_int,
        )
    };
}

/// Called by librados when the watch broke: notifies may have been missed, so every handler
/// is told the state changed (it reloads) and the error is logged.
unsafe extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, err: c_int) {
    // SAFETY: as in `on_notify`.
    let ctx = unsafe { &*(arg as *const WatchCtx) };
    tracing::warn!(
        error = err,
        "the watch on the shared logical unit object broke"
    );
    let handlers = ctx.handlers.read().unwrap_or_else(PoisonError::into_inner);
    for h in handlers.iter() {
        h(MSG_STATE_CHANGED);
    }
}

/// Decodes librados' notify reply: a little-endian `u32` count of acks, each a `u64` client
/// id, a `u64` cookie and a `u32`-length payload; then the watchers that timed out (ignored).
/// Every count and length is bounded by the buffer.
pub fn decode_notify_reply(mut b: &[u8]) -> Vec<Ack> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Some(h)
    }
    fn u32le(b: &mut &[u8]) -> Option<u32> {
        take(b, 4).map(|x| u32::from_le_bytes(x.try_into().unwrap_or_default()))
    }
    fn u64le(b: &mut &[u8]) -> Option<u64> {
        take(b, 8).map(|x| u64::from_le_bytes(x.try_into().unwrap_or_default()))
    }
    let mut out = Vec::new();
    let Some(count) = u32le(&mut b) else {
        return out;
    };
    for _ in 0..(count as usize).min(MAX_WATCHERS) {
        let (Some(client), Some(_cookie), Some(len)) =
            (u64le(&mut b), u64le(&mut b), u32le(&mut b))
        else {
            break;
        };
        let Some(payload) = take(&mut b, len as usize) else {
            break;
        };
        out.push(Ack {
            client,
            payload: payload[..payload.len().min(MAX_ACK_BYTES)].to_vec(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_reply_decodes_and_bounds() {
        let mut b = 2u32.to_le_bytes().to_vec();
        for (id, p) in [(7u64, &b"g 1"[..]), (9, b"")] {
            b.extend_from_slice(&id.to_le_bytes());
            b.extend_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(&(p.len() as u32).to_le_bytes());
            b.extend_from_slice(p);
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        let acks = decode_notify_reply(&b);
        assert_eq!(acks.len(), 2);
        assert_eq!(acks[0].client, 7);
        assert_eq!(acks[0].payload, b"g 1");
        // Truncated anywhere: what was whole is kept, nothing panics.
        for cut in 0..b.len() {
            assert!(decode_notify_reply(&b[..cut]).len() <= 2);
        }
        let huge = u32::MAX.to_le_bytes();
        assert!(decode_notify_reply(&huge).is_empty());
    }
}
