//! A socket whose reads and writes are [`Stage::Syscall`] spans, for the drivers.
//!
//! A span must not stay open across an `.await` (the stack is per thread, and the task may
//! move or give way), so the span is opened inside each `poll_*` call, around the one system
//! call it makes. A call that finds the socket empty (or full) is relabelled
//! [`Stage::Poll`]: waiting, not work.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{span, Stage};

/// `T` with its reads and writes timed. With probes compiled out it only forwards.
#[derive(Debug)]
pub struct ProbedIo<T>(pub T);

fn timed<R>(poll: impl FnOnce() -> Poll<R>) -> Poll<R> {
    let mut s = span(Stage::Syscall);
    let r = poll();
    if r.is_pending() {
        s.relabel(Stage::Poll);
    }
    r
}

impl<T: AsyncRead + Unpin> AsyncRead for ProbedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        timed(|| Pin::new(&mut self.0).poll_read(cx, buf))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ProbedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        timed(|| Pin::new(&mut self.0).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        timed(|| Pin::new(&mut self.0).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
