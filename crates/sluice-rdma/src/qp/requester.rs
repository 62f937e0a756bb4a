//! The requester's half of a queue pair: the send queue moved onto the wire in order under
//! the ORD/IRD limit, and the Acks, Read Responses and Terminates that complete it.

use bytes::Bytes;

use super::{Blame, InFlight, Peer, QpState, QueuePair};
use crate::access::{Access, Sge};
use crate::pd::ProtectionDomain;
use crate::wire::{Message, TerminateCause};
use crate::work::{SendWr, WcStatus, WorkCompletion};

impl QueuePair {
    pub(super) fn handle_read_response(
        &mut self,
        pd: &mut ProtectionDomain,
        msn: u32,
        payload: Bytes,
    ) {
        let Some(entry) = self
            .in_flight
            .iter_mut()
            .find(|e| e.msn == msn && !e.done && matches!(e.wr, SendWr::Read { .. }))
        else {
            self.protocol_error();
            return;
        };
        let SendWr::Read { sge, .. } = entry.wr else {
            return;
        };
        if payload.len() as u64 != u64::from(sge.len) {
            self.protocol_error();
            return;
        }
        // The sink was checked at post time; it may have been invalidated since. A Response
        // that fills its sink whole becomes its contents without a copy.
        if pd
            .place(sge.stag, sge.va, payload, Access::LOCAL_WRITE)
            .is_err()
        {
            self.enter_error(
                Some((None, TerminateCause::RemoteOperation)),
                Blame::InFlight(msn, WcStatus::LocalProtection),
            );
            return;
        }
        entry.done = true;
        self.reads_outstanding = self.reads_outstanding.saturating_sub(1);
        self.complete_in_order();
        self.pump(pd);
    }

    pub(super) fn handle_ack(&mut self, pd: &mut ProtectionDomain, msn: u32) {
        // Serial arithmetic: an Ack may only cover MSNs already sent.
        if (msn.wrapping_sub(self.next_msn) as i32) >= 0 {
            self.protocol_error();
            return;
        }
        for entry in &mut self.in_flight {
            if (msn.wrapping_sub(entry.msn) as i32) < 0 {
                break;
            }
            match entry.wr {
                // The responder answers a Read before it acknowledges anything after it.
                SendWr::Read { .. } if !entry.done => {
                    self.protocol_error();
                    return;
                }
                _ => entry.done = true,
            }
        }
        self.complete_in_order();
        self.pump(pd);
    }

    pub(super) fn handle_terminate(&mut self, msn: Option<u32>, cause: TerminateCause) {
        let status = match cause {
            TerminateCause::RemoteAccess => WcStatus::RemoteAccess,
            TerminateCause::ReceiverNotReady => WcStatus::ReceiverNotReady,
            TerminateCause::Length | TerminateCause::InvalidRequest => {
                WcStatus::RemoteInvalidRequest
            }
            TerminateCause::RemoteOperation => WcStatus::RemoteOperation,
            TerminateCause::Protocol => WcStatus::Protocol,
        };
        let blame = match msn {
            Some(m) if self.in_flight.iter().any(|e| e.msn == m && !e.done) => {
                Blame::InFlight(m, status)
            }
            _ => Blame::Async(status),
        };
        self.enter_error(None, blame);
    }

    /// Moves work requests from the send queue onto the wire, in order, while the peer's
    /// IRD and this side's ORD allow.
    pub(super) fn pump(&mut self, pd: &mut ProtectionDomain) {
        while self.state == QpState::Ready {
            let Some(peer) = self.peer else { return };
            let Some(wr) = self.send_queue.front().copied() else {
                return;
            };
            let msn = self.next_msn;
            let message = match wr {
                SendWr::LocalInvalidate { stag, .. } => {
                    // An implicit fence: the region may be an RDMA Read sink or a Send source
                    // of an earlier work request, so it is invalidated only once every earlier
                    // one has finished.
                    if self.in_flight.iter().any(|e| !e.done) {
                        return;
                    }
                    if pd.invalidate(stag).is_err() {
                        self.fail_head(WcStatus::LocalProtection);
                        return;
                    }
                    self.send_queue.pop_front();
                    self.in_flight.push_back(InFlight {
                        msn,
                        wr,
                        done: true,
                    });
                    self.complete_in_order();
                    continue;
                }
                SendWr::Send {
                    sge, invalidate, ..
                } => {
                    let Some(payload) = self.gather(pd, sge, peer) else {
                        return;
                    };
                    Message::Send {
                        msn,
                        invalidate,
                        payload,
                    }
                }
                SendWr::Write { sge, remote, .. } => {
                    let Some(payload) = self.gather(pd, sge, peer) else {
                        return;
                    };
                    Message::Write {
                        msn,
                        stag: remote.stag,
                        va: remote.va,
                        payload,
                    }
                }
                SendWr::Read { sge, remote, .. } => {
                    if self.reads_outstanding >= self.config.ord.min(peer.ird) {
                        return;
                    }
                    if sge.len > peer.max_payload {
                        self.fail_head(WcStatus::LocalLength);
                        return;
                    }
                    if pd
                        .check(sge.stag, sge.va, u64::from(sge.len), Access::LOCAL_WRITE)
                        .is_err()
                    {
                        self.fail_head(WcStatus::LocalProtection);
                        return;
                    }
                    self.reads_outstanding += 1;
                    Message::ReadRequest {
                        msn,
                        stag: remote.stag,
                        va: remote.va,
                        len: sge.len,
                    }
                }
            };
            self.send_queue.pop_front();
            self.next_msn = msn.wrapping_add(1);
            self.in_flight.push_back(InFlight {
                msn,
                wr,
                done: false,
            });
            self.tx.push_back(message);
        }
    }

    /// The bytes of a Send or Write, or `None` after failing the work request.
    fn gather(&mut self, pd: &ProtectionDomain, sge: Sge, peer: Peer) -> Option<Bytes> {
        if sge.len > peer.max_payload {
            self.fail_head(WcStatus::LocalLength);
            return None;
        }
        // A shared (caller's) region is sliced, not copied.
        match pd.read_bytes(sge.stag, sge.va, u64::from(sge.len), Access::NONE) {
            Ok(data) => Some(data),
            Err(_) => {
                self.fail_head(WcStatus::LocalProtection);
                None
            }
        }
    }

    fn fail_head(&mut self, status: WcStatus) {
        self.enter_error(
            Some((None, TerminateCause::RemoteOperation)),
            Blame::SendHead(status),
        );
    }

    pub(super) fn complete_in_order(&mut self) {
        while self.in_flight.front().is_some_and(|e| e.done) {
            if let Some(e) = self.in_flight.pop_front() {
                self.cq.push_back(self.success(e.wr));
            }
        }
    }

    pub(super) fn success(&self, wr: SendWr) -> WorkCompletion {
        let len = match wr {
            SendWr::Send { sge, .. } | SendWr::Write { sge, .. } | SendWr::Read { sge, .. } => {
                sge.len
            }
            SendWr::LocalInvalidate { .. } => 0,
        };
        WorkCompletion::new(wr.wr_id(), wr.opcode(), WcStatus::Success, len)
    }
}
