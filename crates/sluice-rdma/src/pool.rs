//! Memory for regions that are registered and deregistered once per operation (an RDMA
//! Read's sink, a command's buffers), kept for reuse: a freshly allocated buffer of a few
//! hundred KiB costs a page fault and a page clear per 4 KiB the first time it is touched,
//! which cost more than the copy the buffer exists for.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// Buffers a pool keeps at most.
const MAX_POOLED_BUFFERS: usize = 32;

/// Bytes a pool keeps at most, across its buffers.
const MAX_POOLED_BYTES: usize = 32 << 20;

#[derive(Debug, Default)]
struct Free {
    buffers: Vec<Vec<u8>>,
    bytes: usize,
}

/// A bounded free list of buffers; clones share it. Buffers come back when dropped by
/// whoever holds them last (see [`BufferPool::share`]), from any thread.
#[derive(Clone, Debug, Default)]
pub struct BufferPool(Arc<Mutex<Free>>);

impl BufferPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    fn free(&self) -> MutexGuard<'_, Free> {
        // The free list is consistent between operations; a panic elsewhere leaves it so.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An empty buffer with room for at least `len` bytes, for a caller that fills it by
    /// appending (a socket read into its spare capacity): nothing is cleared, neither a
    /// reused buffer nor a fresh one, whose allocation is then not written twice.
    pub fn get_empty(&self, len: usize) -> Vec<u8> {
        match self.take_fitting(len) {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Vec::with_capacity(len),
        }
    }

    fn take_fitting(&self, len: usize) -> Option<Vec<u8>> {
        let mut free = self.free();
        let found = free.buffers.iter().position(|b| b.capacity() >= len);
        found.map(|i| {
            let b = free.buffers.swap_remove(i);
            free.bytes -= b.capacity();
            b
        })
    }

    /// A buffer of `len` bytes. With `zeroed`, every byte is 0; without, a reused buffer
    /// keeps what its last user left in it, so only memory the caller will overwrite whole
    /// (an RDMA Read's sink: a Read completes only with every byte placed) is taken that way.
    pub fn get(&self, len: usize, zeroed: bool) -> Vec<u8> {
        match self.take_fitting(len) {
            Some(mut b) => {
                if zeroed {
                    b.clear();
                } else {
                    b.truncate(len);
                }
                b.resize(len, 0);
                b
            }
            None => vec![0; len],
        }
    }

    /// Takes `buf` back for reuse (dropped instead when the pool is full).
    pub fn put(&self, buf: Vec<u8>) {
        let mut free = self.free();
        if free.buffers.len() < MAX_POOLED_BUFFERS
            && free.bytes + buf.capacity() <= MAX_POOLED_BYTES
        {
            free.bytes += buf.capacity();
            free.buffers.push(buf);
        }
    }

    /// `buf` as shared `Bytes` without a copy; the buffer returns to the pool when the last
    /// clone or slice of them is dropped.
    pub fn share(&self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            pool: self.clone(),
        })
    }

    /// Buffers held for reuse.
    pub fn len(&self) -> usize {
        self.free().buffers.len()
    }

    /// Whether no buffer is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

struct Pooled {
    buf: Vec<u8>,
    pool: BufferPool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_buffers_come_back_when_the_last_slice_goes() {
        let pool = BufferPool::new();
        let bytes = pool.share(vec![1, 2, 3, 4]);
        let tail = bytes.slice(2..);
        drop(bytes);
        assert!(pool.is_empty());
        assert_eq!(&tail[..], &[3, 4]);
        drop(tail);
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn zeroed_buffers_are_zero_and_reused_ones_have_the_length_asked() {
        let pool = BufferPool::new();
        pool.put(vec![7; 64]);
        assert_eq!(pool.get(16, true), vec![0; 16]);
        pool.put(vec![7; 64]);
        let b = pool.get(80, false);
        assert_eq!(b.len(), 80);
        assert!(b.iter().all(|&x| x == 0), "no buffer fits: a fresh one");
        let b = pool.get(32, false);
        assert_eq!(b.len(), 32);
    }

    #[test]
    fn empty_buffers_have_the_room_asked_and_reuse_what_fits() {
        let pool = BufferPool::new();
        let fresh = pool.get_empty(100);
        assert!(fresh.is_empty() && fresh.capacity() >= 100);
        pool.put(vec![7; 64]);
        let reused = pool.get_empty(48);
        assert!(reused.is_empty() && reused.capacity() >= 64);
        assert!(pool.is_empty(), "the fitting buffer was taken");
        pool.put(vec![7; 16]);
        assert!(pool.get_empty(48).capacity() >= 48, "too small to reuse");
        assert_eq!(pool.len(), 1);
    }

    #[test]
    fn the_pool_is_bounded() {
        let pool = BufferPool::new();
        for _ in 0..MAX_POOLED_BUFFERS + 5 {
            pool.put(vec![0; 16]);
        }
        assert_eq!(pool.len(), MAX_POOLED_BUFFERS);
        let pool = BufferPool::new();
        pool.put(vec![0; MAX_POOLED_BYTES + 1]);
        assert!(pool.is_empty());
    }
}
