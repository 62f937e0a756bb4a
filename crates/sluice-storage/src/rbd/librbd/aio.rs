//! librbd's asynchronous calls awaited as futures: an operation is submitted, the calling
//! thread goes on, and librbd's completion callback stores the result and wakes the task that
//! awaits it ([`Pending`]). No thread is parked per operation, however many are in flight.
//!
//! What librbd reads from or writes into stays alive until its callback ran whatever happens
//! to the future: the buffers sit in the [`Waiter`] that the callback holds a reference of.
//! The future holds the image, and a future dropped before its operation completed (its task
//! cancelled) waits for the callback, so the image is never closed under an operation; the
//! completion itself is released by the callback.

use std::ffi::{c_char, c_int};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use sluice_rbd_sys as sys;

use super::{errno_error, Completion, Image, Waiter};

/// What an operation in flight reads from or writes into.
#[derive(Debug, Default)]
pub(super) enum Buffers {
    /// No buffer (a flush), or handed back already.
    #[default]
    None,
    /// A read's destination: `len` bytes of spare capacity that librbd fills.
    Read(BytesMut),
    /// A write's segments, and the `iovec`s that point into them (kept, never read).
    Write { _segments: Vec<Bytes>, _iov: IoVecs },
}

/// `iovec`s pointing into the segments kept beside them in [`Buffers::Write`].
#[derive(Debug, Default)]
pub(super) struct IoVecs {
    _iov: Vec<libc::iovec>,
}

// SAFETY: the pointers are only handed to librbd, never dereferenced here; they point into
// `Bytes` that live beside them, which are `Send + Sync`.
unsafe impl Send for IoVecs {}
// SAFETY: as above; nothing reads through them from Rust.
unsafe impl Sync for IoVecs {}

/// An operation librbd is carrying out: resolves to the bytes read (empty for writes and
/// flushes) or the operation's error.
pub(in crate::rbd) struct Pending {
    waiter: Arc<Waiter>,
    image: Arc<Image>,
    what: &'static str,
}

impl Drop for Pending {
    /// Dropped before its operation completed (its task cancelled, e.g. by a runtime shutting
    /// down): waits for librbd's callback, so the image is not closed under an operation in
    /// flight. A completed one (the usual case) returns at once.
    fn drop(&mut self) {
        self.waiter.wait();
    }
}

impl Future for Pending {
    type Output = io::Result<Bytes>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut slot = this.waiter.slot();
        let Some(result) = slot.result else {
            if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                slot.waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        };
        let buffers = std::mem::take(&mut slot.buffers);
        drop(slot);
        let Ok(done) = usize::try_from(result) else {
            return Poll::Ready(Err(this.image.op_error(this.what, result)));
        };
        Poll::Ready(match buffers {
            Buffers::Read(mut buf) => {
                let want = buf.capacity();
                if done != want {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{}: read {done} of {want} bytes", this.image.name()),
                    )));
                }
                // SAFETY: librbd's callback ran (the result is set) and reported all `want`
                // bytes of the buffer's capacity written: they are initialised.
                unsafe { buf.set_len(want) };
                Ok(buf.freeze())
            }
            Buffers::Write { .. } | Buffers::None => Ok(Bytes::new()),
        })
    }
}

impl Image {
    /// Starts reading `len` bytes (at least one) from byte `offset`.
    pub(in crate::rbd) fn submit_read(
        self: &Arc<Self>,
        offset: u64,
        len: usize,
    ) -> io::Result<Pending> {
        let mut buf = BytesMut::with_capacity(len);
        // The heap block does not move when the `BytesMut` is moved into the waiter below.
        let ptr = buf.as_mut_ptr().cast::<c_char>();
        let len = buf.capacity().min(len);
        self.submit("read", Buffers::Read(buf), |c| {
            // SAFETY: `ptr` is valid for `len` writable bytes of the buffer's spare capacity;
            // the buffer is owned by the waiter whose reference the callback holds, so it
            // outlives the operation, and nothing reads or moves its bytes until then.
            unsafe { sys::rbd_aio_read(self.handle, offset, len, ptr, c) }
        })
    }

    /// Starts writing `segments` (none empty, at least one) back to back from byte `offset`.
    pub(in crate::rbd) fn submit_write(
        self: &Arc<Self>,
        offset: u64,
        segments: Vec<Bytes>,
    ) -> io::Result<Pending> {
        if let [one] = &segments[..] {
            let (ptr, len) = (one.as_ptr().cast::<c_char>(), one.len());
            let buffers = Buffers::Write {
                _segments: segments,
                _iov: IoVecs::default(),
            };
            return self.submit("write", buffers, |c| {
                // SAFETY: `ptr` is valid for `len` bytes of a segment the waiter owns until the
                // callback ran.
                unsafe { sys::rbd_aio_write2(self.handle, offset, len, ptr, c, 0) }
            });
        }
        let (iov, count) = super::iovecs(&segments)?;
        let iov_ptr = iov.as_ptr();
        let buffers = Buffers::Write {
            _segments: segments,
            _iov: IoVecs { _iov: iov },
        };
        self.submit("write", buffers, |c| {
            // SAFETY: `iov_ptr` points at `count` iovecs, and they into the segments, all owned
            // by the waiter until the callback ran (moving the `Vec`s moved no element);
            // librbd only reads through `iov_base` for a write.
            unsafe { sys::rbd_aio_writev(self.handle, iov_ptr, count, offset, c) }
        })
    }

    /// Starts a flush: every write completed before it is durable when it completes.
    pub(in crate::rbd) fn submit_flush(self: &Arc<Self>) -> io::Result<Pending> {
        self.submit("flush", Buffers::None, |c| {
            // SAFETY: the image is open; no buffer is involved.
            unsafe { sys::rbd_aio_flush(self.handle, c) }
        })
    }

    /// Creates a completion whose waiter owns `buffers`, submits through `submit` (which
    /// returns what the `rbd_aio_*` call returned) and hands back the future of its result.
    fn submit(
        self: &Arc<Self>,
        what: &'static str,
        buffers: Buffers,
        submit: impl FnOnce(sys::rbd_completion_t) -> c_int,
    ) -> io::Result<Pending> {
        let waiter = Arc::new(Waiter::holding(buffers));
        let completion = Completion::new(&waiter)?;
        let r = submit(completion.raw);
        if r < 0 {
            // Refused before it was queued: librbd will not call back.
            drop(completion);
            return Err(errno_error(r, format!("{}: {what}", self.name)));
        }
        completion.submitted();
        Ok(Pending {
            waiter,
            image: Arc::clone(self),
            what,
        })
    }
}
