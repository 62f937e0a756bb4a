//! One side of a simulated RDMA connection: `sluice-rdma`'s sans-IO [`Endpoint`] (protection
//! domain, reliable-connected queue pair, wire frames), driven the way sluice's iSER drivers
//! drive it, with every frame carried by the simulator's own pipes in virtual time.
//!
//! What the provider enforces is what hardware enforces (RFC 5040 section 6.4, RFC 5042
//! section 5): an RDMA Write or Read through an unknown, stale or invalidated STag, without
//! the region's right, or touching a byte outside the region is never performed; both queue
//! pairs stop with a remote access error. A Send with Invalidate of an STag that is not valid
//! is the same error (RFC 5040 section 6.10). So a datamover that touches memory it was not
//! given shows up as a failed completion, never as silently moved bytes.
//!
//! Each Send, Write and Read is staged in a region of its own (registered for the one work
//! request and deregistered when it completes), and a ring of receive buffers stays posted,
//! as `sluice_rdma::Stager` and `sluice_rdma::RecvRing` do for the tokio driver.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use sluice_proto::iser::{BufferAdvertisement, Regions};
use sluice_rdma::{
    Access, Endpoint, FaultPlan, QpConfig, QpState, RecvWr, RemoteAddr, STag, SendWr, Sge, VaMode,
    WcOpcode, WcStatus,
};

/// Header room of a receive buffer: the iSER header, the BHS, the largest AHS and padding.
pub(crate) const RECV_HEADROOM: u32 = 28 + 48 + 1020 + 4;

/// Receive buffers each side keeps posted: a full command window (256 at most here) plus
/// task management, NOP, text and logout PDUs, with room to spare, as many as the provider's
/// receive queue holds. A Send that finds none is final (the provider does not retry).
const RECV_DEPTH: u32 = 1024;

/// Where the initiator's task buffers start in its (made-up) address space: not zero, so that
/// a datamover that forgets the advertised base address misses the region.
const FIRST_BUFFER_VA: u64 = 0x7f00_0000_0000;

#[derive(Debug)]
struct Staged {
    stag: STag,
    /// An RDMA Read: its length and the caller's tag for it.
    read: Option<(u32, u64)>,
}

/// What the queue pair reports.
#[derive(Debug)]
pub(crate) enum RdmaEvent {
    /// A Send arrived (its payload).
    Received(Vec<u8>),
    /// An RDMA Read completed with its data.
    ReadDone(u64, Bytes),
    /// A work request failed: the queue pair is stopped and the connection is lost.
    Failed(WcOpcode, WcStatus),
}

/// Counts of the operations one side posted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RdmaCounts {
    pub(crate) sends: u64,
    pub(crate) send_invalidates: u64,
    pub(crate) writes: u64,
    pub(crate) write_bytes: u64,
    pub(crate) reads: u64,
    pub(crate) read_bytes: u64,
}

/// One side's endpoint, staging and receive ring.
pub(crate) struct RdmaSide {
    pub(crate) ep: Endpoint,
    staged: HashMap<u64, Staged>,
    /// Work requests waiting, in order, for room in the send queue: a driver holds them
    /// until completions free slots rather than failing the connection (a large read cut
    /// into small Data-In can put thousands of RDMA Writes in flight on a long link).
    backlog: std::collections::VecDeque<SendWr>,
    next_wr: u64,
    ring: STag,
    slot_bytes: u32,
    pub(crate) counts: RdmaCounts,
}

impl RdmaSide {
    /// A side whose receive buffers hold Sends with data segments up to `recv_dsl` bytes.
    pub(crate) fn new(recv_dsl: u32, faults: FaultPlan) -> Result<Self, String> {
        let mut ep = Endpoint::new(QpConfig::default());
        let slot_bytes = RECV_HEADROOM + recv_dsl;
        let ring = ep
            .register(
                u64::from(RECV_DEPTH) * u64::from(slot_bytes),
                Access::LOCAL_WRITE,
                VaMode::ZeroBased,
            )
            .map_err(|e| e.to_string())?
            .stag;
        let mut side = RdmaSide {
            ep,
            staged: HashMap::new(),
            backlog: std::collections::VecDeque::new(),
            next_wr: 1,
            ring,
            slot_bytes,
            counts: RdmaCounts::default(),
        };
        for slot in 0..u64::from(RECV_DEPTH) {
            side.repost(slot)?;
        }
        // The plan applies from here on: the receive ring is not the datamover's.
        side.ep.set_faults(faults);
        Ok(side)
    }

    fn repost(&mut self, slot: u64) -> Result<(), String> {
        self.ep
            .post_recv(RecvWr {
                wr_id: slot,
                sge: Sge {
                    stag: self.ring,
                    va: slot * u64::from(self.slot_bytes),
                    len: self.slot_bytes,
                },
            })
            .map_err(|e| e.to_string())
    }

    /// Whether work requests still wait for room in the send queue.
    pub(crate) fn backlogged(&self) -> bool {
        !self.backlog.is_empty() && !self.failed()
    }

    /// Whether the queue pair stopped.
    pub(crate) fn failed(&self) -> bool {
        self.ep.state() == QpState::Error
    }

    fn stage(&mut self, parts: &[&[u8]], len: usize) -> Result<(u64, Sge), String> {
        let len32 = u32::try_from(len).map_err(|_| format!("{len} bytes in one work request"))?;
        let region = self
            .ep
            .register(u64::from(len32.max(1)), Access::NONE, VaMode::ZeroBased)
            .map_err(|e| e.to_string())?;
        let mut at = 0u64;
        for p in parts {
            self.ep
                .pd
                .fill(region.stag, at, p)
                .map_err(|e| e.to_string())?;
            at += p.len() as u64;
        }
        let id = self.next_wr;
        self.next_wr += 1;
        Ok((
            id,
            Sge {
                stag: region.stag,
                va: 0,
                len: len32,
            },
        ))
    }

    fn post(&mut self, id: u64, wr: SendWr, staged: Staged) -> Result<(), String> {
        self.staged.insert(id, staged);
        self.backlog.push_back(wr);
        self.post_backlog();
        Ok(())
    }

    /// Posts what waits, in order, while the send queue has room.
    fn post_backlog(&mut self) {
        while let Some(wr) = self.backlog.front().copied() {
            if self.failed() || self.ep.post_send(wr).is_err() {
                return;
            }
            self.backlog.pop_front();
        }
    }

    /// Posts a Send of `msg`; with `invalidate`, a Send with Invalidate of the peer's STag.
    pub(crate) fn send(&mut self, msg: &[u8], invalidate: Option<u32>) -> Result<(), String> {
        let (id, sge) = self.stage(&[msg], msg.len())?;
        self.counts.sends += 1;
        self.counts.send_invalidates += u64::from(invalidate.is_some());
        let wr = SendWr::Send {
            wr_id: id,
            sge,
            invalidate: invalidate.map(STag),
        };
        self.post(
            id,
            wr,
            Staged {
                stag: sge.stag,
                read: None,
            },
        )
    }

    /// Posts an RDMA Write of `data` to the peer's `stag` at `va`.
    pub(crate) fn write(&mut self, data: &[u8], stag: u32, va: u64) -> Result<(), String> {
        let (id, sge) = self.stage(&[data], data.len())?;
        self.counts.writes += 1;
        self.counts.write_bytes += data.len() as u64;
        let remote = RemoteAddr {
            stag: STag(stag),
            va,
        };
        let wr = SendWr::Write {
            wr_id: id,
            sge,
            remote,
        };
        self.post(
            id,
            wr,
            Staged {
                stag: sge.stag,
                read: None,
            },
        )
    }

    /// Posts an RDMA Read of `len` bytes of the peer's `stag` at `va`, reported with `tag`.
    pub(crate) fn read(&mut self, len: u32, stag: u32, va: u64, tag: u64) -> Result<(), String> {
        let region = self
            .ep
            .register(
                u64::from(len.max(1)),
                Access::LOCAL_WRITE,
                VaMode::ZeroBased,
            )
            .map_err(|e| e.to_string())?;
        let id = self.next_wr;
        self.next_wr += 1;
        self.counts.reads += 1;
        self.counts.read_bytes += u64::from(len);
        let sge = Sge {
            stag: region.stag,
            va: 0,
            len,
        };
        let remote = RemoteAddr {
            stag: STag(stag),
            va,
        };
        let wr = SendWr::Read {
            wr_id: id,
            sge,
            remote,
        };
        self.post(
            id,
            wr,
            Staged {
                stag: region.stag,
                read: Some((len, tag)),
            },
        )
    }

    /// The next event; completions of Sends and Writes only free their staging regions.
    pub(crate) fn poll(&mut self) -> Result<Option<RdmaEvent>, String> {
        self.post_backlog();
        while let Some(wc) = self.ep.poll_completion() {
            if wc.status != WcStatus::Success {
                if let Some(s) = self.staged.remove(&wc.wr_id) {
                    let _ = self.ep.pd.deregister(s.stag);
                }
                return Ok(Some(RdmaEvent::Failed(wc.opcode, wc.status)));
            }
            match wc.opcode {
                WcOpcode::Recv => {
                    let va = wc.wr_id * u64::from(self.slot_bytes);
                    let bytes = self
                        .ep
                        .pd
                        .contents(self.ring, va, u64::from(wc.byte_len))
                        .map_err(|e| e.to_string())?
                        .to_vec();
                    self.repost(wc.wr_id)?;
                    return Ok(Some(RdmaEvent::Received(bytes)));
                }
                WcOpcode::AsyncError => return Ok(Some(RdmaEvent::Failed(wc.opcode, wc.status))),
                _ => {
                    let Some(s) = self.staged.remove(&wc.wr_id) else {
                        return Err(format!("completion of unknown work request {}", wc.wr_id));
                    };
                    let data = match s.read {
                        Some((len, tag)) => Some((
                            tag,
                            Bytes::copy_from_slice(
                                &self
                                    .ep
                                    .pd
                                    .contents(s.stag, 0, u64::from(len))
                                    .map_err(|e| e.to_string())?,
                            ),
                        )),
                        None => None,
                    };
                    self.ep
                        .pd
                        .deregister(s.stag)
                        .map_err(|e| format!("staging region: {e}"))?;
                    if let Some((tag, data)) = data {
                        return Ok(Some(RdmaEvent::ReadDone(tag, data)));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Every frame waiting to go out, as bytes for the pipe, and the longest delay the fault
    /// plan put on any of them (a delayed frame holds back every frame after it).
    pub(crate) fn transmit(&mut self) -> (Bytes, Option<std::time::Duration>) {
        let mut out = BytesMut::new();
        let mut delay = None;
        while let Some(frame) = self.ep.poll_transmit() {
            out.extend_from_slice(&frame.head);
            out.extend_from_slice(&frame.payload);
            delay = delay.max(frame.delay);
        }
        (out.freeze(), delay)
    }

    /// Regions registered, besides the receive ring (staging regions of work requests in
    /// flight and the datamover's task buffers).
    #[cfg(test)]
    pub(crate) fn staged(&self) -> usize {
        self.staged.len()
    }
}

/// The initiator's task buffers, registered in its protection domain as the iSER driver does
/// (each at a base address of its own, never zero-based), with an optional wrong
/// advertisement: the `wrong_every`-th buffer is advertised with a STag whose key is off, as a
/// buggy or hostile initiator would.
pub(crate) struct TaskBuffers<'a> {
    pub(crate) side: &'a mut RdmaSide,
    pub(crate) state: &'a mut BufferState,
}

/// What [`TaskBuffers`] keeps between calls.
#[derive(Debug, Default)]
pub(crate) struct BufferState {
    next_va: u64,
    /// Buffers registered and not yet released.
    pub(crate) live: usize,
    registered: u64,
    /// Advertise every this-many-th buffer with a wrong STag (fault injection).
    pub(crate) wrong_every: Option<u64>,
    /// Wrong STags advertised, and the real STag each stands for.
    wrong: HashMap<u32, u32>,
    /// Wrong STags advertised so far.
    pub(crate) wrong_advertised: u64,
}

/// The STag key bits a wrong advertisement flips (the low byte: RFC 5040 section 2.1's
/// consumer key part of the STag).
const WRONG_KEY: u32 = 0x5a;

impl BufferState {
    /// Buffers advertised truthfully, or every `wrong_every`-th with a wrong STag.
    pub(crate) fn new(wrong_every: Option<u64>) -> Self {
        BufferState {
            wrong_every,
            ..BufferState::default()
        }
    }

    fn real(&self, stag: u32) -> STag {
        STag(self.wrong.get(&stag).copied().unwrap_or(stag))
    }
}

impl TaskBuffers<'_> {
    /// The base address of the next buffer of `len` bytes: a gap after every buffer, so a
    /// write past one's end never lands in the next.
    fn next_va(&mut self, len: u64) -> u64 {
        let st = &mut *self.state;
        if st.next_va == 0 {
            st.next_va = FIRST_BUFFER_VA;
        }
        let va = st.next_va;
        st.next_va = (st.next_va + len.next_multiple_of(4096) + 4096) % (1 << 48);
        va
    }

    /// Counts a registered region and advertises it, truthfully or, every `wrong_every`-th,
    /// with a wrong STag.
    fn advertise(&mut self, mr: sluice_rdma::MemoryRegion) -> BufferAdvertisement {
        let st = &mut *self.state;
        st.live += 1;
        st.registered += 1;
        let mut stag = mr.stag.0;
        if st
            .wrong_every
            .is_some_and(|n| st.registered.is_multiple_of(n))
        {
            stag ^= WRONG_KEY;
            st.wrong.insert(stag, mr.stag.0);
            st.wrong_advertised += 1;
        }
        BufferAdvertisement {
            stag,
            base_offset: mr.base_va,
        }
    }
}

impl Regions for TaskBuffers<'_> {
    fn register(&mut self, len: u32) -> Result<BufferAdvertisement, String> {
        let va = self.next_va(u64::from(len));
        let mr = self
            .side
            .ep
            .register(
                u64::from(len.max(1)),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                VaMode::Based(va),
            )
            .map_err(|e| e.to_string())?;
        Ok(self.advertise(mr))
    }

    /// The write's data registered in place, as the iSER driver does.
    fn register_gathered(&mut self, chunks: Vec<Bytes>) -> Result<BufferAdvertisement, String> {
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        let va = self.next_va(len);
        let mr = self
            .side
            .ep
            .register_gathered(chunks, Access::REMOTE_READ, VaMode::Based(va))
            .map_err(|e| e.to_string())?;
        Ok(self.advertise(mr))
    }

    fn contents(&mut self, buf: BufferAdvertisement, len: u32) -> Result<Bytes, String> {
        let stag = self.state.real(buf.stag);
        self.side
            .ep
            .pd
            .contents(stag, buf.base_offset, u64::from(len))
            .map(|c| Bytes::copy_from_slice(&c))
            .map_err(|e| e.to_string())
    }

    fn release(&mut self, buf: BufferAdvertisement) {
        let stag = self.state.real(buf.stag);
        self.state.wrong.remove(&buf.stag);
        if self.side.ep.pd.deregister(stag).is_ok() {
            self.state.live = self.state.live.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moves every frame between two sides until neither has anything to send.
    fn exchange(a: &mut RdmaSide, b: &mut RdmaSide) {
        loop {
            let (ab, _) = a.transmit();
            let (ba, _) = b.transmit();
            if ab.is_empty() && ba.is_empty() {
                return;
            }
            b.ep.handle_bytes(&mut BytesMut::from(&ab[..]));
            a.ep.handle_bytes(&mut BytesMut::from(&ba[..]));
        }
    }

    fn events(side: &mut RdmaSide) -> Vec<RdmaEvent> {
        let mut v = Vec::new();
        while let Some(e) = side.poll().unwrap() {
            v.push(e);
        }
        v
    }

    fn pair() -> (RdmaSide, RdmaSide) {
        (
            RdmaSide::new(8192, FaultPlan::default()).unwrap(),
            RdmaSide::new(8192, FaultPlan::default()).unwrap(),
        )
    }

    #[test]
    fn writes_land_in_the_advertised_buffer_and_reads_fetch_it() {
        let (mut ini, mut tgt) = pair();
        let mut state = BufferState::default();
        let (rbuf, wbuf) = {
            let mut bufs = TaskBuffers {
                side: &mut ini,
                state: &mut state,
            };
            let r = bufs.register(4096).unwrap();
            let w = bufs
                .register_gathered(vec![
                    Bytes::from_static(&[7; 600]),
                    Bytes::from_static(&[7; 400]),
                ])
                .unwrap();
            (r, w)
        };
        assert_ne!(rbuf.base_offset, 0, "never zero-based");
        tgt.write(&[1; 96], rbuf.stag, rbuf.base_offset + 4000)
            .unwrap();
        tgt.read(1000, wbuf.stag, wbuf.base_offset, 9).unwrap();
        exchange(&mut ini, &mut tgt);
        let got = events(&mut tgt);
        assert!(
            matches!(&got[..], [RdmaEvent::ReadDone(9, d)] if d[..] == [7; 1000]),
            "{got:?}"
        );
        let mut bufs = TaskBuffers {
            side: &mut ini,
            state: &mut state,
        };
        let placed = bufs.contents(rbuf, 4096).unwrap();
        assert_eq!(&placed[4000..], &[1; 96]);
        assert_eq!(&placed[..4000], &[0; 4000][..]);
        bufs.release(rbuf);
        bufs.release(wbuf);
        assert_eq!(state.live, 0);
        assert_eq!(tgt.staged(), 0, "staging regions are freed on completion");
    }

    #[test]
    fn a_write_past_the_buffer_is_a_remote_access_error_not_a_write() {
        let (mut ini, mut tgt) = pair();
        let mut state = BufferState::default();
        let rbuf = TaskBuffers {
            side: &mut ini,
            state: &mut state,
        }
        .register(4096)
        .unwrap();
        tgt.write(&[1; 100], rbuf.stag, rbuf.base_offset + 3900)
            .unwrap();
        tgt.write(&[2; 100], rbuf.stag, rbuf.base_offset + 3997)
            .unwrap();
        exchange(&mut ini, &mut tgt);
        let got = events(&mut tgt);
        assert!(
            got.iter().any(|e| matches!(
                e,
                RdmaEvent::Failed(WcOpcode::RdmaWrite, WcStatus::RemoteAccess)
            )),
            "{got:?}"
        );
        assert!(ini.failed() && tgt.failed());
        let placed = TaskBuffers {
            side: &mut ini,
            state: &mut state,
        }
        .contents(rbuf, 4096)
        .unwrap();
        assert_eq!(&placed[3900..4000], &[1; 100]);
        assert_eq!(&placed[4000..], &[0; 96], "the bad write moved nothing");
    }

    #[test]
    fn a_wrong_advertised_stag_is_refused_and_an_invalidated_one_too() {
        let (mut ini, mut tgt) = pair();
        let mut state = BufferState::new(Some(2));
        let mut bufs = TaskBuffers {
            side: &mut ini,
            state: &mut state,
        };
        let good = bufs.register(512).unwrap();
        let wrong = bufs.register(512).unwrap();
        assert_eq!(state.wrong_advertised, 1);
        // A Send with Invalidate of the good buffer, then a Write to it: refused.
        tgt.send(b"response", Some(good.stag)).unwrap();
        exchange(&mut ini, &mut tgt);
        let got = events(&mut ini);
        assert!(
            matches!(&got[..], [RdmaEvent::Received(m)] if m == b"response"),
            "{got:?}"
        );
        tgt.write(&[1; 8], good.stag, good.base_offset).unwrap();
        exchange(&mut ini, &mut tgt);
        assert!(tgt.failed(), "a write through an invalidated STag");

        let (mut ini, mut tgt) = pair();
        let mut state = BufferState::new(Some(1));
        let wrong2 = TaskBuffers {
            side: &mut ini,
            state: &mut state,
        }
        .register(512)
        .unwrap();
        assert_ne!(wrong.stag, 0);
        tgt.write(&[1; 8], wrong2.stag, wrong2.base_offset).unwrap();
        exchange(&mut ini, &mut tgt);
        let got = events(&mut tgt);
        assert!(
            matches!(
                &got[..],
                [
                    RdmaEvent::Failed(WcOpcode::RdmaWrite, WcStatus::RemoteAccess),
                    ..
                ]
            ),
            "{got:?}"
        );
    }
}
