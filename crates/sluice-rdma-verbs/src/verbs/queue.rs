//! A reliable-connected queue pair with its protection domain, its regions and a completion
//! queue for each direction, posting sluice-rdma's work requests and returning sluice-rdma's
//! completions.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use sideway::ibverbs::completion::{
    BasicCompletionQueue, GenericCompletionQueue, PollCompletionQueueError,
};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sluice_rdma::{
    Access, MemoryRegion, RecvWr, STag, SendWr, VaMode, WcOpcode, WcStatus, WorkCompletion,
};

use super::failed;
use super::memory::Region;
use crate::access::{gathered_len, RegionEntry, RegionTable};
use crate::error::VerbsError;
use crate::work::{completion_opcode, completion_status, plan_recv, plan_send, VerbsOp};

/// Queue depths of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDepths {
    /// Send work requests outstanding at once.
    pub send: u32,
    /// Receives posted at once.
    pub recv: u32,
}

impl Default for QueueDepths {
    fn default() -> Self {
        // iSER's defaults in Linux's initiator are of this order: a receive per unexpected
        // PDU and command, a send per PDU in flight.
        Self {
            send: 128,
            recv: 128,
        }
    }
}

/// A queue pair and what it owns. Field order is drop order: the queue pair is destroyed
/// (the device stops touching memory) before the regions are deregistered and freed.
pub struct VerbsQueuePair {
    qp: BasicQueuePair,
    send_cq: Arc<BasicCompletionQueue>,
    recv_cq: Arc<BasicCompletionQueue>,
    regions: Regions,
    pd: Arc<ProtectionDomain>,
    /// Send work requests in posting order (they complete in that order on a reliable
    /// connection): wr_id and what the completion reports when the device leaves the
    /// opcode undefined (a failed completion).
    sends: VecDeque<(u64, WcOpcode)>,
    /// Posted receives, in posting order.
    recvs: VecDeque<u64>,
    completions: VecDeque<WorkCompletion>,
}

/// Regions by the STag handed out for them (the rkey).
#[derive(Default)]
struct Regions(BTreeMap<u32, Region>);

impl RegionTable for Regions {
    fn region(&self, stag: STag) -> Option<RegionEntry> {
        self.0.get(&stag.0).map(Region::entry)
    }
}

impl VerbsQueuePair {
    /// A queue pair on `ctx`'s device, in the RESET state; [`super::cm`] takes it through
    /// INIT, RTR and RTS with the attributes RDMA-CM gives.
    pub fn new(ctx: &Arc<DeviceContext>, depths: QueueDepths) -> Result<Self, VerbsError> {
        let pd = ctx.alloc_pd().map_err(|e| failed("ibv_alloc_pd")(&e))?;
        let cq = |n: u32| {
            ctx.create_cq_builder()
                .setup_cqe(n)
                .build()
                .map_err(|e| failed("ibv_create_cq")(&e))
        };
        let send_cq = cq(depths.send)?;
        let recv_cq = cq(depths.recv)?;
        let qp = pd
            .create_qp_builder()
            .setup_max_send_wr(depths.send)
            .setup_max_recv_wr(depths.recv)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(GenericCompletionQueue::from(Arc::clone(&send_cq)))
            .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(&recv_cq)))
            .build()
            .map_err(|e| failed("ibv_create_qp")(&e))?;
        Ok(Self {
            qp,
            send_cq,
            recv_cq,
            regions: Regions::default(),
            pd,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            completions: VecDeque::new(),
        })
    }

    /// The queue pair number, for the connection request.
    pub fn qp_number(&self) -> u32 {
        self.qp.qp_number()
    }

    /// Moves the queue pair to the state `attr` names.
    pub fn modify(&mut self, attr: &QueuePairAttribute) -> Result<(), VerbsError> {
        self.qp
            .modify(attr)
            .map_err(|e| failed("ibv_modify_qp")(&e))
    }

    /// Registers `len` zeroed bytes; the returned region's STag is its rkey, and is also
    /// what local work requests name it by.
    pub fn register(
        &mut self,
        len: u64,
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, VerbsError> {
        let len = usize::try_from(len).map_err(|_| VerbsError::InvalidAccess)?;
        let region = Region::register(&self.pd, len, access, va)?;
        let described = region.describe();
        self.regions.0.insert(described.stag.0, region);
        Ok(described)
    }

    /// Registers `chunks`, one after the other, as one region for reading only (a write's
    /// data the peer RDMA-Reads, arriving in pieces): the counterpart of sluice-rdma's
    /// `ProtectionDomain::register_gathered`. Unlike the software provider, which registers
    /// the caller's buffers in place, this one copies them, once, into a region it allocates
    /// and registers: the device reaches only memory registered with it and pinned for as
    /// long as the region lives, which the caller's buffers are not. Write rights are refused
    /// ([`gathered_len`]).
    pub fn register_gathered<B: AsRef<[u8]>>(
        &mut self,
        chunks: &[B],
        access: Access,
        va: VaMode,
    ) -> Result<MemoryRegion, VerbsError> {
        // Past `MAX_REGION_BYTES` the registration refuses it, as it refuses an empty one.
        let len = gathered_len(chunks, access)?;
        let region = Region::register(&self.pd, len, access, va)?;
        let described = region.describe();
        let mut at = described.base_va;
        for chunk in chunks {
            region.fill(at, chunk.as_ref())?;
            at += chunk.as_ref().len() as u64;
        }
        self.regions.0.insert(described.stag.0, region);
        Ok(described)
    }

    /// Deregisters a region; refused while any work request is in flight.
    pub fn deregister(&mut self, stag: STag) -> Result<(), VerbsError> {
        if !self.sends.is_empty() || !self.recvs.is_empty() {
            return Err(VerbsError::Busy(stag));
        }
        self.regions
            .0
            .remove(&stag.0)
            .map(drop)
            .ok_or(VerbsError::UnknownStag(stag))
    }

    /// The STags of the regions registered, in ascending order.
    pub fn stags(&self) -> impl Iterator<Item = STag> + '_ {
        self.regions.0.keys().map(|k| STag(*k))
    }

    fn region(&self, stag: STag) -> Result<&Region, VerbsError> {
        self.regions
            .0
            .get(&stag.0)
            .ok_or(VerbsError::UnknownStag(stag))
    }

    /// Copies `data` into a region at `va`.
    pub fn fill(&self, stag: STag, va: u64, data: &[u8]) -> Result<(), VerbsError> {
        self.region(stag)?.fill(va, data)
    }

    /// Copies `len` bytes of a region at `va` out.
    pub fn contents(&self, stag: STag, va: u64, len: usize) -> Result<Vec<u8>, VerbsError> {
        self.region(stag)?.copy_out(va, len)
    }

    /// Posts a send work request (Send, RDMA Write, RDMA Read), signaled.
    pub fn post_send(&mut self, wr: &SendWr) -> Result<(), VerbsError> {
        let plan = plan_send(&self.regions, wr)?;
        let mut guard = self.qp.start_post_send();
        let handle = guard.construct_wr(plan.wr_id, WorkRequestFlags::Signaled);
        let (local, opcode) = match plan.op {
            VerbsOp::Send => (handle.setup_send(), WcOpcode::Send),
            VerbsOp::RdmaWrite { rkey, remote_addr } => {
                (handle.setup_write(rkey, remote_addr), WcOpcode::RdmaWrite)
            }
            VerbsOp::RdmaRead { rkey, remote_addr } => {
                (handle.setup_read(rkey, remote_addr), WcOpcode::RdmaRead)
            }
        };
        // SAFETY: `plan_send` resolved the entry inside a region this queue pair owns, and
        // regions are not deregistered (nor freed) while a work request is in flight
        // (`deregister`), nor before the queue pair is destroyed (field order).
        unsafe { local.setup_sge(plan.sge.lkey, plan.sge.addr, plan.sge.length) };
        guard.post().map_err(|e| failed("ibv_post_send")(&e))?;
        self.sends.push_back((plan.wr_id, opcode));
        Ok(())
    }

    /// Posts a receive.
    pub fn post_recv(&mut self, wr: &RecvWr) -> Result<(), VerbsError> {
        let (wr_id, sge) = plan_recv(&self.regions, wr)?;
        let mut guard = self.qp.start_post_recv();
        let handle = guard.construct_wr(wr_id);
        // SAFETY: as in `post_send`: inside an owned region that outlives the work request.
        unsafe { handle.setup_sge(sge.lkey, sge.addr, sge.length) };
        guard.post().map_err(|e| failed("ibv_post_recv")(&e))?;
        self.recvs.push_back(wr_id);
        Ok(())
    }

    /// The next completion, if one is there: receives first, then sends.
    pub fn poll_cq(&mut self) -> Result<Option<WorkCompletion>, VerbsError> {
        if self.completions.is_empty() {
            self.drain(true)?;
            self.drain(false)?;
        }
        Ok(self.completions.pop_front())
    }

    fn drain(&mut self, recv: bool) -> Result<(), VerbsError> {
        let cq = if recv { &self.recv_cq } else { &self.send_cq };
        let mut poller = match cq.start_poll() {
            Ok(p) => p,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok(()),
            Err(e) => return Err(failed("ibv_poll_cq")(&e)),
        };
        for wc in poller.by_ref() {
            let status = completion_status(wc.status());
            let posted = if recv {
                self.recvs.pop_front().map(|id| (id, WcOpcode::Recv))
            } else {
                self.sends.pop_front()
            };
            // A successful completion names its opcode; a failed one's is undefined, so the
            // work request it completes (the oldest of its queue) says what it was.
            let opcode = match (status, completion_opcode(wc.opcode())) {
                (WcStatus::Success, Some(op)) => op,
                _ => posted.map_or(WcOpcode::AsyncError, |p| p.1),
            };
            self.completions.push_back(WorkCompletion {
                wr_id: wc.wr_id(),
                opcode,
                status,
                byte_len: wc.byte_len(),
                invalidated: None,
            });
        }
        Ok(())
    }
}
