//! The responder's half of a queue pair: Sends into posted receives, RDMA Writes into
//! registered regions, RDMA Read Requests served from them, and the Acks and Terminates that
//! answer them.

use bytes::Bytes;

use super::{Blame, QpState, QueuePair};
use crate::access::{Access, STag};
use crate::pd::ProtectionDomain;
use crate::wire::{Message, TerminateCause};
use crate::work::{WcOpcode, WcStatus, WorkCompletion};

impl QueuePair {
    pub(super) fn handle_write(
        &mut self,
        pd: &mut ProtectionDomain,
        msn: u32,
        stag: STag,
        va: u64,
        payload: Bytes,
    ) {
        // RFC 5040 sections 5.1 and 6.4: a tagged buffer is only placed after its STag,
        // rights and bounds are validated; a failure is a remote access error. A Write that
        // fills its region whole becomes its contents without a copy.
        match pd.place(stag, va, payload, Access::REMOTE_WRITE) {
            Ok(()) => self.ack(msn),
            Err(_) => self.remote_access_error(msn),
        }
    }

    /// Whether an RDMA Write with this MSN, arriving now, would be taken in order: then its
    /// payload may be placed as it is read ([`handle_placed_write`](Self::handle_placed_write)).
    pub(crate) fn expects_write(&self, msn: u32) -> bool {
        self.state == QpState::Ready && msn == self.expected_msn
    }

    /// An RDMA Write whose payload was read straight into its region, after
    /// [`expects_write`](Self::expects_write) and the protection domain's checks passed:
    /// acknowledged, or a remote access error if the region went away meanwhile
    /// (`placed` false).
    pub(crate) fn handle_placed_write(&mut self, msn: u32, placed: bool) {
        if self.state != QpState::Ready || !self.accept_msn(msn) {
            return;
        }
        match placed {
            true => self.ack(msn),
            false => self.remote_access_error(msn),
        }
    }

    pub(super) fn handle_read_request(
        &mut self,
        pd: &mut ProtectionDomain,
        msn: u32,
        stag: STag,
        va: u64,
        len: u32,
    ) {
        if self.responses_queued >= self.config.ird || len > self.config.max_payload {
            self.enter_error(
                Some((Some(msn), TerminateCause::InvalidRequest)),
                Blame::Async(WcStatus::RemoteInvalidRequest),
            );
            return;
        }
        match pd.read_bytes(stag, va, u64::from(len), Access::REMOTE_READ) {
            Ok(payload) => {
                self.responses_queued += 1;
                self.tx.push_back(Message::ReadResponse { msn, payload });
            }
            Err(_) => self.remote_access_error(msn),
        }
    }

    pub(super) fn handle_send(
        &mut self,
        pd: &mut ProtectionDomain,
        msn: u32,
        invalidate: Option<STag>,
        payload: &[u8],
    ) {
        let Some(recv) = self.recv_queue.front().copied() else {
            // No retry: receiver not ready is final for both sides (see `WcStatus`).
            self.enter_error(
                Some((Some(msn), TerminateCause::ReceiverNotReady)),
                Blame::Async(WcStatus::ReceiveQueueEmpty),
            );
            return;
        };
        let len = payload.len() as u32;
        if len > recv.sge.len {
            self.recv_queue.pop_front();
            self.enter_error(
                Some((Some(msn), TerminateCause::Length)),
                Blame::Recv(recv, WcStatus::LocalLength, len),
            );
            return;
        }
        // RFC 5040 section 6.10: the STag of a Send with Invalidate must be valid in this
        // side's protection domain; otherwise nothing is delivered.
        if let Some(stag) = invalidate {
            if !pd.describe(stag).is_some_and(|(_, valid)| valid) {
                self.remote_access_error(msn);
                return;
            }
        }
        self.recv_queue.pop_front();
        let sge = recv.sge;
        if pd
            .write(sge.stag, sge.va, payload, Access::LOCAL_WRITE)
            .is_err()
        {
            self.enter_error(
                Some((Some(msn), TerminateCause::RemoteOperation)),
                Blame::Recv(recv, WcStatus::LocalProtection, 0),
            );
            return;
        }
        let mut wc = WorkCompletion::new(recv.wr_id, WcOpcode::Recv, WcStatus::Success, len);
        if let Some(stag) = invalidate {
            // Checked valid above.
            let _ = pd.invalidate(stag);
            wc.invalidated = Some(stag);
        }
        self.cq.push_back(wc);
        self.ack(msn);
    }

    pub(super) fn accept_msn(&mut self, msn: u32) -> bool {
        if msn != self.expected_msn {
            self.protocol_error();
            return false;
        }
        self.expected_msn = msn.wrapping_add(1);
        true
    }

    fn ack(&mut self, msn: u32) {
        // Coalesce with an Ack not yet sent; order with Read Responses is kept.
        if let Some(Message::Ack { msn: last }) = self.tx.back_mut() {
            *last = msn;
        } else {
            self.tx.push_back(Message::Ack { msn });
        }
    }

    fn remote_access_error(&mut self, msn: u32) {
        self.enter_error(
            Some((Some(msn), TerminateCause::RemoteAccess)),
            Blame::Async(WcStatus::RemoteAccess),
        );
    }
}
