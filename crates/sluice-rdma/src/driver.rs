//! The tokio driver: an [`Endpoint`] over any `AsyncRead + AsyncWrite` byte stream (TCP, a
//! Unix socket, an in-memory duplex). Two tasks move bytes; every decision is the
//! endpoint's.

use std::sync::{Arc, Mutex, MutexGuard};

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::access::{Access, STag, VaMode};
use crate::endpoint::Endpoint;
use crate::fault::FaultPlan;
use crate::pd::{AccessError, MemoryRegion, RegisterError};
use crate::pool::BufferPool;
use crate::qp::{PostError, QpConfig, QpState};
use crate::work::{RecvWr, SendWr, WorkCompletion};

/// Bytes the reader asks the stream for at a time (more when a frame's body is longer and
/// below [`LARGE_PAYLOAD_BYTES`]: the decoder reserves room for the whole body once its
/// header is judged).
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Payloads at least this long that have not all arrived are read into a buffer of their
/// own rather than into the reader's buffer (see `read_loop`).
const LARGE_PAYLOAD_BYTES: u32 = 64 << 10;

struct Shared {
    endpoint: Mutex<Endpoint>,
    /// A completion was queued.
    completions: Notify,
    /// A frame waits to be sent.
    transmit: Notify,
    /// The reader may start (see [`SoftRdma::spawn_gated`]).
    go: tokio::sync::Semaphore,
}

/// A connected software RDMA endpoint: one protection domain, one reliable-connected queue
/// pair and its completion queue, driven over a byte stream by two tasks that stop when it
/// is dropped.
pub struct SoftRdma {
    shared: Arc<Shared>,
    tasks: [JoinHandle<()>; 2],
}

impl SoftRdma {
    /// Starts an endpoint on `stream` (inside a tokio runtime). The peer must run one too.
    pub fn spawn<S>(stream: S, config: QpConfig) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        Self::spawn_with_faults(stream, config, FaultPlan::default())
    }

    /// As [`spawn`](Self::spawn), with faults to inject from the first frame on.
    pub fn spawn_with_faults<S>(stream: S, config: QpConfig, faults: FaultPlan) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let rdma = Self::spawn_gated(stream, config, faults);
        rdma.start();
        rdma
    }

    /// As [`spawn_with_faults`](Self::spawn_with_faults), but nothing the peer sends is
    /// handled until [`start`](Self::start): a consumer posts its receives first, as a verbs
    /// consumer does before it accepts a connection, so that the peer's first Send cannot
    /// find the receive queue empty.
    pub fn spawn_gated<S>(stream: S, config: QpConfig, faults: FaultPlan) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let mut endpoint = Endpoint::new(config);
        endpoint.set_faults(faults);
        let shared = Arc::new(Shared {
            endpoint: Mutex::new(endpoint),
            completions: Notify::new(),
            transmit: Notify::new(),
            go: tokio::sync::Semaphore::new(0),
        });
        let (reader, writer) = tokio::io::split(stream);
        let tasks = [
            tokio::spawn(read_loop(reader, shared.clone())),
            tokio::spawn(write_loop(writer, shared.clone())),
        ];
        shared.transmit.notify_one();
        SoftRdma { shared, tasks }
    }

    /// Lets the reader of a [`spawn_gated`](Self::spawn_gated) endpoint start.
    pub fn start(&self) {
        if self.shared.go.available_permits() == 0 {
            self.shared.go.add_permits(1);
        }
    }

    fn endpoint(&self) -> MutexGuard<'_, Endpoint> {
        lock(&self.shared)
    }

    /// Registers `len` zeroed bytes.
    pub fn register(
        &self,
        len: u64,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.endpoint().register(len, access, va)
    }

    /// Registers the caller's memory in place: no allocation, no zero-filling, no copy.
    pub fn register_vec(
        &self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.endpoint().register_vec(bytes, access, va)
    }

    /// Registers the caller's memory (a reused buffer) as a zero-filled region without
    /// clearing it first; see [`ProtectionDomain::register_cleared`].
    ///
    /// [`ProtectionDomain::register_cleared`]: crate::ProtectionDomain::register_cleared
    pub fn register_cleared(
        &self,
        bytes: Vec<u8>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.endpoint().register_cleared(bytes, access, va)
    }

    /// Registers the caller's immutable buffer in place for reading: Sends, RDMA Writes and
    /// the peer's RDMA Reads from it slice it rather than copy it.
    pub fn register_shared(
        &self,
        bytes: bytes::Bytes,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.endpoint().register_shared(bytes, access, va)
    }

    /// Registers the caller's immutable buffers, in order, as one region for reading: the
    /// peer's RDMA Reads slice a chunk where they lie inside one and copy only where they
    /// span chunks.
    pub fn register_gathered(
        &self,
        chunks: Vec<bytes::Bytes>,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, RegisterError> {
        self.endpoint().register_gathered(chunks, access, va)
    }

    /// Deregisters a region and hands its memory back as one vector (a copy unless the
    /// region owned it; see [`ProtectionDomain::take`](crate::ProtectionDomain::take)).
    pub fn take(&self, stag: STag) -> Result<Vec<u8>, AccessError> {
        self.endpoint().pd.take(stag)
    }

    /// Deregisters a writable region and hands back its memory and contents without a copy
    /// (contents placed whole from the stream stay in the buffer they arrived in); `None`
    /// for a shared or gathered region. See [`ProtectionDomain::take_contents`].
    ///
    /// [`ProtectionDomain::take_contents`]: crate::ProtectionDomain::take_contents
    pub fn take_contents(&self, stag: STag) -> Result<Option<crate::Contents>, AccessError> {
        self.endpoint().pd.take_contents(stag)
    }

    /// Deregisters a region and hands back the memory it owned; a shared or gathered
    /// region's memory stays the caller's (`None`, nothing copied).
    pub fn retire(&self, stag: STag) -> Result<Option<Vec<u8>>, AccessError> {
        self.endpoint().pd.retire(stag)
    }

    /// The base address of the region `stag` names, if any.
    pub fn describe_base(&self, stag: STag) -> Option<u64> {
        self.endpoint().pd.describe(stag).map(|(mr, _)| mr.base_va)
    }

    /// Deregisters a region.
    pub fn deregister(&self, stag: STag) -> Result<(), AccessError> {
        self.endpoint().pd.deregister(stag)
    }

    /// Stores `data` into this side's region (a CPU store: bounds checked, not rights).
    pub fn fill(&self, stag: STag, va: u64, data: &[u8]) -> Result<(), AccessError> {
        self.endpoint().pd.fill(stag, va, data)
    }

    /// Copies `len` bytes out of this side's region (a CPU load).
    pub fn contents(&self, stag: STag, va: u64, len: u64) -> Result<Vec<u8>, AccessError> {
        self.endpoint()
            .pd
            .contents(stag, va, len)
            .map(std::borrow::Cow::into_owned)
    }

    /// Replaces the fault plan.
    pub fn set_faults(&self, plan: FaultPlan) {
        self.endpoint().set_faults(plan);
    }

    /// The queue pair's state.
    pub fn state(&self) -> QpState {
        self.endpoint().state()
    }

    /// Posts a send work request.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        let result = self.endpoint().post_send(wr);
        self.kick();
        result
    }

    /// Posts `wrs` in order under one hold of the queue pair, so that nothing this side
    /// transmits in answer to the peer (a Read Response) can come between them on the wire.
    /// Stops at the first that cannot be posted; returns how many were, and why it stopped.
    pub fn post_sends(&self, wrs: &[SendWr]) -> (usize, Result<(), PostError>) {
        let mut posted = 0;
        let mut result = Ok(());
        {
            let mut endpoint = self.endpoint();
            for wr in wrs {
                if let Err(e) = endpoint.post_send(*wr) {
                    result = Err(e);
                    break;
                }
                posted += 1;
            }
        }
        self.kick();
        (posted, result)
    }

    /// Posts a receive.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        let result = self.endpoint().post_recv(wr);
        self.kick();
        result
    }

    /// The next completion, if one is queued.
    pub fn poll_cq(&self) -> Option<WorkCompletion> {
        self.endpoint().poll_completion()
    }

    /// Waits for the next completion.
    pub async fn next_completion(&self) -> WorkCompletion {
        loop {
            let notified = self.shared.completions.notified();
            if let Some(wc) = self.poll_cq() {
                return wc;
            }
            notified.await;
        }
    }

    fn kick(&self) {
        // A post can complete work (a flush, a local invalidate) and queue frames.
        self.shared.transmit.notify_one();
        self.shared.completions.notify_one();
    }
}

impl Drop for SoftRdma {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Endpoint> {
    // A panic while holding the lock would be a bug in this crate; the endpoint's state is
    // still consistent message by message, so keep serving rather than cascade the panic.
    shared
        .endpoint
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn read_loop<R: AsyncRead>(reader: R, shared: Arc<Shared>) {
    tokio::pin!(reader);
    if shared.go.acquire().await.is_err() {
        return;
    }
    let payloads = BufferPool::new();
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    loop {
        if buf.capacity() - buf.len() < READ_CHUNK_BYTES / 4 {
            buf.reserve(READ_CHUNK_BYTES);
        }
        // A read error ends the stream just as end-of-file does.
        let mut n: usize = reader.read_buf(&mut buf).await.unwrap_or_default();
        let large = {
            let mut endpoint = lock(&shared);
            if n == 0 {
                endpoint.handle_transport_lost();
                None
            } else {
                endpoint.handle_bytes_until_large(&mut buf, LARGE_PAYLOAD_BYTES)
            }
        };
        if let Some(frame) = large {
            // The payload goes straight from the stream into a pooled buffer of its own, which
            // a whole placement then makes the region's contents (`ProtectionDomain::place`):
            // the one copy is the kernel's, as a plain socket read's. Left in `buf`, a large
            // payload grew it by a fresh allocation per frame (page faults, then a copy of
            // what had arrived) and was copied again into the region.
            // What the frames before it completed need not wait for the payload.
            shared.completions.notify_one();
            shared.transmit.notify_one();
            // An RDMA Write into part of a region (a burst of a larger read buffer) is read
            // straight into the region's memory at its offset; stored from a buffer of its
            // own instead, every byte was copied once more (15 % of the samples of 1 MiB
            // iSER reads, on the initiator).
            let lent = lock(&shared).lend_for(&frame);
            if let Some(mut lent) = lent {
                let target = lent.target();
                let have = buf.len().min(target.len());
                target[..have].copy_from_slice(&buf.split_to(have));
                let read = reader.read_exact(&mut target[have..]).await;
                let mut endpoint = lock(&shared);
                if read.is_ok() {
                    endpoint.handle_lent_payload(frame, lent);
                } else {
                    endpoint.return_lent(lent);
                    endpoint.handle_transport_lost();
                    n = 0;
                }
                drop(endpoint);
                shared.completions.notify_one();
                shared.transmit.notify_one();
                if n == 0 {
                    return;
                }
                continue;
            }
            // It is read into the buffer's spare capacity. Zeroed first (as `read_exact`
            // needs), every payload the pool could not supply cost a memset: 10 % of the
            // samples of 16 MiB iSCSI writes over iSER, whose four commands in flight keep
            // 64 MiB of Read Responses until each command's data is complete, twice what the
            // pool keeps.
            let len = frame.payload_len() as usize;
            let mut payload = payloads.get_empty(len);
            let have = buf.len().min(len);
            payload.extend_from_slice(&buf.split_to(have));
            while payload.len() < len {
                let room = len - payload.len();
                match reader.read_buf(&mut (&mut payload).limit(room)).await {
                    Ok(0) | Err(_) => {
                        n = 0;
                        break;
                    }
                    Ok(_) => {}
                }
            }
            let mut endpoint = lock(&shared);
            if n == 0 {
                endpoint.handle_transport_lost();
            } else {
                endpoint.handle_payload(frame, payloads.share(payload));
            }
        }
        shared.completions.notify_one();
        shared.transmit.notify_one();
        if n == 0 {
            return;
        }
    }
}

async fn write_loop<W: AsyncWrite>(writer: W, shared: Arc<Shared>) {
    let writer = BufWriter::with_capacity(READ_CHUNK_BYTES, writer);
    tokio::pin!(writer);
    loop {
        let notified = shared.transmit.notified();
        let batch: Vec<_> = {
            let mut endpoint = lock(&shared);
            std::iter::from_fn(|| endpoint.poll_transmit()).collect()
        };
        if batch.is_empty() {
            notified.await;
            continue;
        }
        for frame in batch {
            if let Some(delay) = frame.delay {
                if writer.flush().await.is_err() {
                    break;
                }
                tokio::time::sleep(delay).await;
            }
            let sent = async {
                writer.write_all(&frame.head).await?;
                writer.write_all(&frame.payload).await
            };
            if sent.await.is_err() {
                lock(&shared).handle_transport_lost();
                shared.completions.notify_one();
                return;
            }
        }
        if writer.flush().await.is_err() {
            lock(&shared).handle_transport_lost();
            shared.completions.notify_one();
            return;
        }
    }
}
