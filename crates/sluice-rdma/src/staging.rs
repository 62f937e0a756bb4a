//! Helpers for a consumer that moves bytes it holds elsewhere (a datamover): each Send, RDMA
//! Write or RDMA Read gets a region of its own, registered for the one work request and
//! deregistered when it completes, and a ring of receive buffers stays posted.
//!
//! Nothing is staged by copying into zero-filled memory: an RDMA Write's source is the
//! caller's buffer registered in place (shared, read-only), a Send's parts are gathered once
//! into a buffer registered as it is, and an RDMA Read's sink is handed to the consumer as
//! it is when the Read completes (no copy out).

use std::collections::HashMap;

use bytes::Bytes;

use crate::access::{Access, RemoteAddr, STag, Sge, VaMode};
use crate::driver::SoftRdma;
use crate::pd::{AccessError, Contents, RegisterError};
use crate::pool::BufferPool;
use crate::qp::PostError;
use crate::work::{RecvWr, SendWr, WcOpcode, WorkCompletion};

/// Why a staged operation could not be posted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageError {
    /// The staging region could not be registered.
    #[error("cannot register a staging region: {0}")]
    Register(#[from] RegisterError),
    /// The staging region could not be filled or read.
    #[error("staging region: {0}")]
    Access(#[from] AccessError),
    /// The queue pair refused the work request.
    #[error("cannot post: {0}")]
    Post(#[from] PostError),
    /// A payload longer than one work request carries.
    #[error("{0} bytes are more than one work request moves")]
    TooLong(usize),
}

#[derive(Debug)]
struct Staged {
    stag: STag,
    read_len: Option<u32>,
}

/// Work requests posted from staging regions, by `wr_id`.
#[derive(Debug, Default)]
pub struct Stager {
    next: u64,
    posted: HashMap<u64, Staged>,
    sinks: BufferPool,
}

impl Stager {
    /// No work request posted yet.
    pub fn new() -> Self {
        Stager {
            next: 1,
            posted: HashMap::new(),
            sinks: BufferPool::new(),
        }
    }

    /// Work requests not yet completed.
    pub fn outstanding(&self) -> usize {
        self.posted.len()
    }

    fn stage(
        &mut self,
        rdma: &SoftRdma,
        parts: &[&[u8]],
        access: Access,
    ) -> Result<(u64, Sge), StageError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len32 = u32::try_from(len).map_err(|_| StageError::TooLong(len))?;
        let mut bytes = Vec::with_capacity(len.max(1));
        for p in parts {
            bytes.extend_from_slice(p);
        }
        if bytes.is_empty() {
            // A region is never empty; the work request still moves zero bytes.
            bytes.push(0);
        }
        let region = rdma.register_vec(bytes, access, VaMode::ZeroBased)?;
        let id = self.next;
        self.next += 1;
        Ok((
            id,
            Sge {
                stag: region.stag,
                va: 0,
                len: len32,
            },
        ))
    }

    fn post(
        &mut self,
        rdma: &SoftRdma,
        id: u64,
        sge: Sge,
        wr: SendWr,
        read_len: Option<u32>,
    ) -> Result<u64, StageError> {
        if let Err(e) = rdma.post_send(wr) {
            let _ = rdma.deregister(sge.stag);
            return Err(e.into());
        }
        self.posted.insert(
            id,
            Staged {
                stag: sge.stag,
                read_len,
            },
        );
        Ok(id)
    }

    /// Posts a Send of `parts` (concatenated); with `invalidate`, a Send with Invalidate.
    pub fn send(
        &mut self,
        rdma: &SoftRdma,
        parts: &[&[u8]],
        invalidate: Option<STag>,
    ) -> Result<u64, StageError> {
        let (id, sge) = self.stage(rdma, parts, Access::NONE)?;
        let wr = SendWr::Send {
            wr_id: id,
            sge,
            invalidate,
        };
        self.post(rdma, id, sge, wr, None)
    }

    /// Posts one Send per message of `msgs`, in order and all at once (see
    /// [`SoftRdma::post_sends`]): an iSER command and the unsolicited Data-Out behind it reach
    /// the wire before any Read Response the command triggers. Returns how many were posted
    /// (the rest found the send queue full: post them later).
    pub fn send_all(&mut self, rdma: &SoftRdma, msgs: &[Vec<u8>]) -> Result<usize, StageError> {
        self.post_send_batch(rdma, msgs.iter().map(|m| (&m[..], None)))
    }

    /// [`send_all`](Self::send_all) for messages that each name an STag to invalidate on
    /// delivery, or none (a Send with Invalidate where one is named): a target's SCSI
    /// Responses and the other PDUs it sends in one batch.
    pub fn send_all_invalidating(
        &mut self,
        rdma: &SoftRdma,
        msgs: &[(&[u8], Option<STag>)],
    ) -> Result<usize, StageError> {
        self.post_send_batch(rdma, msgs.iter().copied())
    }

    fn post_send_batch<'m>(
        &mut self,
        rdma: &SoftRdma,
        msgs: impl ExactSizeIterator<Item = (&'m [u8], Option<STag>)>,
    ) -> Result<usize, StageError> {
        let mut staged = Vec::with_capacity(msgs.len());
        for (msg, invalidate) in msgs {
            match self.stage(rdma, &[msg], Access::NONE) {
                Ok((id, sge)) => staged.push((id, sge, invalidate)),
                Err(e) => {
                    for (_, sge, _) in staged {
                        let _ = rdma.deregister(sge.stag);
                    }
                    return Err(e);
                }
            }
        }
        let wrs: Vec<SendWr> = staged
            .iter()
            .map(|&(wr_id, sge, invalidate)| SendWr::Send {
                wr_id,
                sge,
                invalidate,
            })
            .collect();
        // Posting stops only at a full send queue: the rest is for the caller to post later.
        let (posted, _full) = rdma.post_sends(&wrs);
        for (i, &(id, sge, _)) in staged.iter().enumerate() {
            if i < posted {
                self.posted.insert(
                    id,
                    Staged {
                        stag: sge.stag,
                        read_len: None,
                    },
                );
            } else {
                let _ = rdma.deregister(sge.stag);
            }
        }
        Ok(posted)
    }

    /// Posts an RDMA Write of `data` to `remote`. The buffer is registered as it is (shared,
    /// read-only): the write moves it to the wire without a copy on this side.
    pub fn write(
        &mut self,
        rdma: &SoftRdma,
        data: Bytes,
        remote: RemoteAddr,
    ) -> Result<u64, StageError> {
        let len = data.len();
        let len32 = u32::try_from(len).map_err(|_| StageError::TooLong(len))?;
        let data = if data.is_empty() {
            // A region is never empty; the work request still moves zero bytes.
            Bytes::from_static(&[0])
        } else {
            data
        };
        let region = rdma.register_shared(data, Access::NONE, VaMode::ZeroBased)?;
        let id = self.next;
        self.next += 1;
        let sge = Sge {
            stag: region.stag,
            va: 0,
            len: len32,
        };
        let wr = SendWr::Write {
            wr_id: id,
            sge,
            remote,
        };
        self.post(rdma, id, sge, wr, None)
    }

    /// Posts an RDMA Read of `len` bytes from `remote`.
    pub fn read(
        &mut self,
        rdma: &SoftRdma,
        len: u32,
        remote: RemoteAddr,
    ) -> Result<u64, StageError> {
        // A Read completes only once every byte of the sink was placed (the provider checks
        // the Read Response's length), so a reused sink need not be cleared first.
        let sink = self.sinks.get(len.max(1) as usize, false);
        let region = rdma.register_vec(sink, Access::LOCAL_WRITE, VaMode::ZeroBased)?;
        let id = self.next;
        self.next += 1;
        let sge = Sge {
            stag: region.stag,
            va: 0,
            len,
        };
        let wr = SendWr::Read {
            wr_id: id,
            sge,
            remote,
        };
        self.post(rdma, id, sge, wr, Some(len))
    }

    /// Takes a send-queue completion of a staged work request: frees its region and, for a
    /// successful RDMA Read, returns the data read. `None` for completions not staged here.
    pub fn complete(
        &mut self,
        rdma: &SoftRdma,
        wc: &WorkCompletion,
    ) -> Option<Result<Option<Bytes>, AccessError>> {
        if wc.opcode == WcOpcode::Recv || wc.opcode == WcOpcode::AsyncError {
            return None;
        }
        let staged = self.posted.remove(&wc.wr_id)?;
        let data = match staged.read_len {
            // The sink region's memory becomes the data: no copy out. A Response that filled
            // the sink whole is already the data (placed without a copy); the sink's own
            // memory goes back to the pool.
            Some(len) if wc.status == crate::work::WcStatus::Success => {
                rdma.take_contents(staged.stag)
                    .map(|contents| match contents {
                        Some(Contents::Owned(mut v)) => {
                            v.truncate(len as usize);
                            Some(self.sinks.share(v))
                        }
                        Some(Contents::Placed { data, spare }) => {
                            self.sinks.put(spare);
                            Some(data.slice(..(len as usize).min(data.len())))
                        }
                        // Never: a sink is registered writable (`register_vec`).
                        None => None,
                    })
            }
            // Retired, not taken: an RDMA Write's source is the caller's buffer (often a
            // LUN's memory or shared zeros), and taking it back as a vector would copy every
            // byte just to drop them. A failed Read's sink is ours, back to the pool as is.
            _ => {
                if let Ok(Some(v)) = rdma.retire(staged.stag) {
                    if staged.read_len.is_some() {
                        self.sinks.put(v);
                    }
                }
                Ok(None)
            }
        };
        Some(data)
    }
}

/// A ring of receive buffers, all in one region, each reposted once its Send was taken.
#[derive(Debug)]
pub struct RecvRing {
    stag: STag,
    slot_bytes: u32,
    depth: u32,
}

impl RecvRing {
    /// Registers `depth` buffers of `slot_bytes` and posts them all.
    pub fn post(rdma: &SoftRdma, depth: u32, slot_bytes: u32) -> Result<Self, StageError> {
        let len = u64::from(depth) * u64::from(slot_bytes);
        let region = rdma.register(len.max(1), Access::LOCAL_WRITE, VaMode::ZeroBased)?;
        let ring = RecvRing {
            stag: region.stag,
            slot_bytes,
            depth,
        };
        for slot in 0..depth {
            ring.repost(rdma, u64::from(slot))?;
        }
        Ok(ring)
    }

    /// Buffers in the ring.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    fn repost(&self, rdma: &SoftRdma, slot: u64) -> Result<(), StageError> {
        rdma.post_recv(RecvWr {
            wr_id: slot,
            sge: Sge {
                stag: self.stag,
                va: slot * u64::from(self.slot_bytes),
                len: self.slot_bytes,
            },
        })?;
        Ok(())
    }

    /// The bytes of a successful receive completion; its buffer is posted again.
    pub fn take(&self, rdma: &SoftRdma, wc: &WorkCompletion) -> Result<Vec<u8>, StageError> {
        let bytes = self.take_last(rdma, wc)?;
        self.repost(rdma, wc.wr_id)?;
        Ok(bytes)
    }

    /// The bytes of a successful receive completion, its buffer left unposted (tests: a
    /// receiver that stops posting, so that a later Send finds none).
    pub fn take_last(&self, rdma: &SoftRdma, wc: &WorkCompletion) -> Result<Vec<u8>, StageError> {
        let va = wc.wr_id * u64::from(self.slot_bytes);
        Ok(rdma.contents(self.stag, va, u64::from(wc.byte_len))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::QpConfig;
    use crate::work::WcStatus;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair(config: QpConfig) -> (SoftRdma, SoftRdma) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (
            SoftRdma::spawn(client.unwrap(), config),
            SoftRdma::spawn(accepted.unwrap().0, config),
        )
    }

    #[tokio::test]
    async fn send_all_posts_what_fits_in_order_and_the_rest_later() {
        let config = QpConfig {
            send_queue_depth: 2,
            ..QpConfig::default()
        };
        let (a, b) = pair(config).await;
        let ring = RecvRing::post(&b, 8, 64).unwrap();
        let mut stager = Stager::new();
        let msgs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        // The queue holds two: the third waits for the caller.
        assert_eq!(stager.send_all(&a, &msgs).unwrap(), 2);
        assert_eq!(stager.outstanding(), 2);
        let mut received = Vec::new();
        let mut reposted = false;
        while received.len() < 3 {
            tokio::select! {
                wc = a.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    assert!(stager.complete(&a, &wc).is_some());
                    if !reposted && stager.outstanding() == 0 {
                        assert_eq!(stager.send_all(&a, &msgs[2..]).unwrap(), 1);
                        reposted = true;
                    }
                }
                wc = b.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    received.push(ring.take(&b, &wc).unwrap());
                }
            }
        }
        assert_eq!(received, msgs, "every message arrives once, in order");
    }

    /// An RDMA Read's data is the Read Response's own buffer, placed whole into the sink
    /// (no copy), and the sink's memory goes back to the pool for the next Read.
    #[tokio::test]
    async fn a_read_returns_the_placed_response_and_pools_its_sink() {
        let (a, b) = pair(QpConfig::default()).await;
        let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let source = b
            .register_shared(
                Bytes::from(data.clone()),
                Access::REMOTE_READ,
                VaMode::Based(0x10),
            )
            .unwrap();
        let mut stager = Stager::new();
        for (va, len) in [(0x10, 100_000u32), (0x20, 50)] {
            let remote = RemoteAddr {
                stag: source.stag,
                va,
            };
            let wr = stager.read(&a, len, remote).unwrap();
            let wc = a.next_completion().await;
            assert_eq!((wc.wr_id, wc.status), (wr, WcStatus::Success));
            let got = stager.complete(&a, &wc).unwrap().unwrap().unwrap();
            let start = (va - 0x10) as usize;
            assert_eq!(&got[..], &data[start..start + len as usize]);
            assert_eq!(stager.sinks.len(), 1, "the sink's memory is pooled again");
        }
    }

    /// A batch with and without invalidates: each Send invalidates the STag it names (and
    /// only that one) at the receiver, in order.
    #[tokio::test]
    async fn send_all_invalidating_invalidates_what_each_send_names() {
        let (a, b) = pair(QpConfig::default()).await;
        let ring = RecvRing::post(&b, 8, 64).unwrap();
        let region = b
            .register(
                4096,
                Access::REMOTE_WRITE | Access::LOCAL_WRITE,
                VaMode::ZeroBased,
            )
            .unwrap();
        let mut stager = Stager::new();
        let msgs: [(&[u8], Option<STag>); 3] = [
            (b"first", None),
            (b"second", Some(region.stag)),
            (b"third", None),
        ];
        assert_eq!(stager.send_all_invalidating(&a, &msgs).unwrap(), 3);
        let mut received = Vec::new();
        while received.len() < 3 {
            tokio::select! {
                wc = a.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    assert!(stager.complete(&a, &wc).is_some());
                }
                wc = b.next_completion() => {
                    assert_eq!(wc.status, WcStatus::Success);
                    received.push((ring.take(&b, &wc).unwrap(), wc.invalidated));
                }
            }
        }
        let want: Vec<(Vec<u8>, Option<STag>)> =
            msgs.iter().map(|(m, i)| (m.to_vec(), *i)).collect();
        assert_eq!(received, want);
    }
}
