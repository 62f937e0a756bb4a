//! Faults inside a driver: [`DriverFaults`], the test hook through which a target or
//! initiator driver corrupts, drops, duplicates or resets its own connection's PDUs, on send
//! or on receive, with the same plan and seed semantics as `sluice proxy`.
//!
//! The hook is installed when a connection enters full feature phase, so the digests are
//! known (RFC 7143 section 13.1: they apply from the first PDU after the final Login
//! Response) and no login PDU is touched. On send the driver hands over each frame it just
//! encoded and forwards as many copies as it is told. On receive it hands over the bytes it
//! read and frames whole PDUs from what comes back: partial frames wait inside the hook. A
//! driver that receives whole PDUs rather than a byte stream (an iSER connection in RDMA
//! mode, whose datamover hands it PDUs one by one) hands over each one's frame instead
//! ([`DriverFaults::on_receive_frame`]).

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use sluice_proto::framing::{encode, Digests};
use sluice_proto::pdu::Pdu;

use crate::cutter::{CutError, FrameCutter};
use crate::event::FaultCounters;
use crate::injector::FaultInjector;
use crate::kind::Sender;
use crate::plan::{Direction, FaultPlan};

/// A driver's fault plan and seed, shared by its connections: each connection that enters
/// full feature phase takes the next connection number, so a run replays from its seed like
/// one through `sluice proxy`.
#[derive(Debug)]
pub struct FaultHook {
    plan: FaultPlan,
    seed: u64,
    next_connection: AtomicU64,
}

impl FaultHook {
    /// The hook of a run with `plan` and `seed`.
    pub fn new(plan: FaultPlan, seed: u64) -> FaultHook {
        FaultHook {
            plan,
            seed,
            next_connection: AtomicU64::new(0),
        }
    }

    /// The plan every connection follows.
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    /// The faults of the next connection; see [`DriverFaults::new`].
    pub fn connection(
        &self,
        role: Sender,
        digests: Digests,
        max_recv_data_segment: u32,
    ) -> DriverFaults {
        let n = self.next_connection.fetch_add(1, Ordering::Relaxed);
        DriverFaults::new(
            self.plan.clone(),
            self.seed,
            n,
            role,
            digests,
            max_recv_data_segment,
        )
    }
}

/// One connection's faults as its own driver applies them; see the [module docs](self).
#[derive(Debug)]
pub struct DriverFaults {
    injector: FaultInjector,
    sending: Direction,
    digests: Digests,
    cutter: FrameCutter,
    /// Received bytes not yet a whole frame.
    partial: BytesMut,
    /// The received stream could not be framed: from there on it passes untouched.
    unframed: bool,
    reset_due: bool,
}

impl DriverFaults {
    /// The hook of connection number `connection` of a run with `plan` and `seed`, in the
    /// driver of `role`, whose connection negotiated `digests` and declared
    /// `max_recv_data_segment` (received frames above it are passed on for the framer to
    /// refuse).
    pub fn new(
        plan: FaultPlan,
        seed: u64,
        connection: u64,
        role: Sender,
        digests: Digests,
        max_recv_data_segment: u32,
    ) -> DriverFaults {
        DriverFaults {
            injector: FaultInjector::new(plan, seed, connection),
            sending: match role {
                Sender::Initiator => Direction::ToTarget,
                Sender::Target => Direction::ToInitiator,
            },
            digests,
            cutter: FrameCutter::new(max_recv_data_segment),
            partial: BytesMut::new(),
            unframed: false,
            reset_due: false,
        }
    }

    fn receiving(&self) -> Direction {
        match self.sending {
            Direction::ToTarget => Direction::ToInitiator,
            Direction::ToInitiator => Direction::ToTarget,
        }
    }

    /// Faults one frame the driver just encoded (in place) and says how many copies of it to
    /// send: 0 (dropped), 1 or 2 (duplicated).
    pub fn on_send(&mut self, frame: &mut [u8]) -> u8 {
        let decision = self.injector.inject(self.sending, frame, self.digests);
        self.note(&decision);
        decision.copies
    }

    /// Faults one PDU a driver hands over as a value rather than as a frame (an iSER
    /// connection in RDMA mode, to its datamover) and says how many copies of it to pass on:
    /// 0, 1 or 2. The hook judges the PDU's frame, encoded here without digests: a copy, so
    /// this is for tests only, and the PDU itself is never changed (corruption cannot apply).
    pub fn on_send_pdu(&mut self, pdu: &Pdu) -> u8 {
        self.on_send(&mut frame_of(pdu))
    }

    /// [`Self::on_send_pdu`] for a PDU the datamover handed to the driver.
    pub fn on_receive_pdu(&mut self, pdu: &Pdu) -> u8 {
        self.on_receive_frame(&mut frame_of(pdu))
    }

    /// Faults one whole frame received (in place) and says how many copies of it to take:
    /// 0 (dropped), 1 or 2 (duplicated). For drivers whose PDUs arrive whole; those reading a
    /// byte stream use [`Self::on_receive`].
    pub fn on_receive_frame(&mut self, frame: &mut [u8]) -> u8 {
        let decision = self.injector.inject(self.receiving(), frame, self.digests);
        self.note(&decision);
        decision.copies
    }

    /// Takes the bytes just read off the end of `buf` (everything from `from` on), and puts
    /// back in their place the whole frames among them and those waiting from earlier reads,
    /// faulted. A stream that cannot be framed is passed on untouched from there, for the
    /// driver's framer to refuse.
    pub fn on_receive(&mut self, buf: &mut BytesMut, from: usize) {
        if self.unframed {
            return;
        }
        let fresh = buf.split_off(from);
        if self.partial.is_empty() {
            self.partial = fresh;
        } else {
            self.partial.extend_from_slice(&fresh);
        }
        loop {
            match self.cutter.cut(&mut self.partial, self.digests) {
                Ok(Some(mut frame)) => {
                    let decision = self
                        .injector
                        .inject(self.receiving(), &mut frame, self.digests);
                    self.note(&decision);
                    for _ in 0..decision.copies {
                        buf.extend_from_slice(&frame);
                    }
                }
                Ok(None) => return,
                Err(CutError::SegmentTooLong { .. }) => {
                    self.unframed = true;
                    buf.extend_from_slice(&self.partial.split());
                    return;
                }
            }
        }
    }

    fn note(&mut self, decision: &crate::injector::Decision) {
        self.reset_due |= decision.reset_after;
    }

    /// Whether the plan asked for the connection to be reset: the driver closes it once what
    /// it is sending now is out.
    pub fn reset_due(&self) -> bool {
        self.reset_due
    }

    /// What one direction saw and did so far.
    pub fn counters(&self, direction: Direction) -> &FaultCounters {
        self.injector.counters(direction)
    }
}

/// A PDU's frame without digests, for the hook to judge.
fn frame_of(pdu: &Pdu) -> BytesMut {
    let mut frame = BytesMut::new();
    encode(pdu, Digests::NONE, &mut frame);
    frame
}

#[cfg(test)]
mod tests;
