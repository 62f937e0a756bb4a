//! Moving bytes: PDUs from each side's session to its pipe, segments from the pipes to the
//! framers and on to the sessions, and closed sockets.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_fault::Direction;
use sluice_proto::framing::encode;
use sluice_proto::initiator;
use sluice_proto::pdu::Pdu;
use sluice_proto::target;

use super::env::{execute, ScsiEnv};
use super::trace::{trace, trace_fault};
use super::{Link, World};
use crate::Violation;

impl World {
    /// Target PDUs of link `i` to the pipe, and its events.
    pub(super) fn target_transmit(&mut self, i: usize) -> Result<bool, Violation> {
        let Some(conn) = self.links[i].t.conn else {
            return Ok(false);
        };
        if self.links[i].t_iser.is_some() {
            let moved = self.target_rdma_transmit(i, conn)?;
            return self.target_events(i, conn, moved);
        }
        let Some(s) = self.tsession.as_mut() else {
            return Ok(false);
        };
        let mut moved = false;
        let mut out = BytesMut::new();
        let mut reset = false;
        while let Some(pdu) = s.poll_transmit(conn) {
            moved = true;
            self.pdus += 1;
            trace(self.cfg.trace, self.now, self.links[i].cid, "T->I", &pdu);
            let link = &mut self.links[i];
            if let Err(e) =
                link.mon
                    .target_sent(&pdu, self.t_config.queue_depth, &mut self.session_mon)
            {
                let e = format!("target, connection {}: {e}", link.cid);
                return Err(self.violation(e));
            }
            reset |= put(
                link,
                (self.cfg.trace, self.now),
                Direction::ToInitiator,
                &pdu,
                &mut out,
            );
            if reset {
                break;
            }
        }
        if !out.is_empty() {
            let link = &mut self.links[i];
            link.down.send(self.now, out.freeze(), &mut self.rng);
        }
        if reset {
            self.reset_link(i);
            return Ok(true);
        }
        self.target_events(i, conn, moved)
    }

    /// The target session's events for link `i` (its connection closes).
    fn target_events(
        &mut self,
        i: usize,
        conn: target::ConnId,
        mut moved: bool,
    ) -> Result<bool, Violation> {
        if self.links[i].t.conn != Some(conn) {
            return Ok(moved);
        }
        let mut close = false;
        while let Some(e) = self.tsession.as_mut().and_then(|s| s.poll_event(conn)) {
            moved = true;
            match e {
                target::Event::Close(_) => close = true,
                other => return Err(self.violation(format!("target: unexpected {other:?}"))),
            }
        }
        if close && !self.target_close_waits(i) {
            self.links[i].down.close();
            self.target_closed(i);
        }
        Ok(moved)
    }

    /// Initiator PDUs of link `i` to the pipe.
    pub(super) fn initiator_transmit(&mut self, i: usize) -> Result<bool, Violation> {
        let Some(conn) = self.links[i].i.conn else {
            return Ok(false);
        };
        if self.links[i].i.closed {
            return Ok(false);
        }
        if self.links[i].i_iser.is_some() {
            return self.initiator_rdma_transmit(i, conn);
        }
        let Some(s) = self.isession.as_mut() else {
            return Ok(false);
        };
        let mut out = BytesMut::new();
        let mut moved = false;
        let mut reset = false;
        while let Some(pdu) = s.poll_transmit(conn) {
            moved = true;
            self.pdus += 1;
            trace(self.cfg.trace, self.now, self.links[i].cid, "I->T", &pdu);
            let link = &mut self.links[i];
            if let Err(e) = link.mon.initiator_sent(&pdu, &mut self.session_mon) {
                let e = format!("initiator, connection {}: {e}", link.cid);
                return Err(self.violation(e));
            }
            reset |= put(
                link,
                (self.cfg.trace, self.now),
                Direction::ToTarget,
                &pdu,
                &mut out,
            );
            if reset {
                break;
            }
        }
        if !out.is_empty() {
            self.links[i].up.send(self.now, out.freeze(), &mut self.rng);
        }
        if reset {
            self.reset_link(i);
        }
        Ok(moved)
    }

    /// A connection reset (injected): what is in flight is lost and both ends see the
    /// connection gone.
    pub(super) fn reset_link(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.i.closed && link.t.closed {
            return;
        }
        link.up.reset();
        link.down.reset();
        self.lost_connections += 1;
        self.workload.lossy |= self.session_erl() < 2;
        self.workload.connections_lost = true;
        self.initiator_closed(i);
        self.target_closed(i);
    }

    pub(super) fn link_of_initiator(&self, conn: initiator::ConnId) -> Result<usize, Violation> {
        self.links
            .iter()
            .position(|l| l.i.conn == Some(conn))
            .ok_or_else(|| self.violation(format!("initiator event for an unknown {conn:?}")))
    }

    /// The target's socket of link `i` is closed (it closed it, or the initiator did).
    pub(super) fn target_closed(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.t.closed {
            return;
        }
        link.t.closed = true;
        link.down.close();
        if let (Some(conn), Some(s)) = (link.t.conn, self.tsession.as_mut()) {
            let mut env = ScsiEnv { scsi: &self.scsi };
            // What the SCSI layer runs for this connection completes first: a real target's
            // connection task finishes the command it executes before it sees the close.
            let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.work)
                .into_iter()
                .partition(|w| w.2.conn == conn);
            self.work = others;
            for (_, _, work) in mine {
                let done = execute(&self.scsi, &work);
                s.handle_completion(work.ticket, done, &mut env);
            }
            s.handle_connection_closed(conn, &mut env);
            if s.is_ended() {
                if s.task_count() != 0 || s.window_slots_held() != 0 {
                    // Checked in `check` as a violation; keep the session to report it.
                    return;
                }
                self.tsession = None;
            }
        }
        let link = &mut self.links[i];
        // Its id may be reused by a session that replaces this one.
        link.t.conn = None;
        if let Some(r) = link.t.registry.take() {
            if self.tsession.is_some() {
                // The session goes on (other connections, or tasks waiting for connection
                // recovery): a login with its TSIH may still join it.
                self.registry.detach_connection(r);
            } else {
                self.registry.remove_connection(r);
                self.registry.remove_session(r.session);
                self.session_ref = None;
            }
        }
    }

    /// A target session left without connections ends once nothing of it remains (its
    /// failed connections' tasks were reassigned or discarded).
    pub(super) fn end_target_session_if_over(&mut self) {
        let Some(s) = self.tsession.as_ref() else {
            return;
        };
        if !s.is_ended() || s.task_count() != 0 || s.window_slots_held() != 0 {
            return;
        }
        if self.links.iter().any(|l| l.t.conn.is_some()) {
            return;
        }
        self.tsession = None;
        if let Some(r) = self.session_ref.take() {
            self.registry.remove_session(r);
        }
    }

    /// The initiator's socket of link `i` is closed.
    pub(super) fn initiator_closed(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.i.closed {
            return;
        }
        link.i.closed = true;
        // A login that had not finished never will; a reinstatement that it was starts over,
        // and a connection recovery that it was gives way to session reinstatement.
        let login_failed = link.i.login.take().is_some();
        if login_failed && self.reinstate_link == Some(i) {
            self.reinstate_link = None;
            self.reinstating = true;
        }
        if let Some(at) = self.recovery_links.iter().position(|(l, _)| *l == i) {
            let (_, cid) = self.recovery_links.remove(at);
            if login_failed {
                if let Some(s) = self.isession.as_mut() {
                    s.connection_recovery_failed(cid);
                }
            }
        }
        let link = &mut self.links[i];
        link.up.close();
        if let (Some(conn), Some(s)) = (link.i.conn, self.isession.as_mut()) {
            s.handle_connection_closed(conn, self.base + Duration::from_nanos(self.now));
        }
    }

    pub(super) fn target_received(&mut self, i: usize, seg: &Bytes) -> Result<(), Violation> {
        if self.links[i].t.closed {
            return Ok(());
        }
        self.links[i].t.rbuf.extend_from_slice(seg);
        loop {
            if self.links[i].t_iser.is_some() {
                return self.target_rdma_received(i);
            }
            let link = &mut self.links[i];
            let pdu = match link.t.framer.decode(&mut link.t.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) if link.t.login.is_some() => {
                    let e = format!(
                        "target, connection {}: framing error in login {e}",
                        link.cid
                    );
                    return Err(self.violation(e));
                }
                Err(e) => {
                    // A digest error (injected faults): the session decides; a stream that
                    // cannot be framed any more is closed.
                    let fatal = !e.can_continue();
                    if let (Some(conn), Some(s)) = (link.t.conn, self.tsession.as_mut()) {
                        let mut env = ScsiEnv { scsi: &self.scsi };
                        let now = self.base + Duration::from_nanos(self.now);
                        s.handle_frame_error(conn, &e, now, &mut env);
                    }
                    if fatal {
                        self.links[i].t.rbuf.clear();
                        self.lost_connections += 1;
                        self.workload.lossy |= self.session_erl() < 2;
                        self.workload.connections_lost = true;
                        self.target_closed(i);
                        return Ok(());
                    }
                    continue;
                }
            };
            if self.links[i].t.login.is_some() {
                self.target_login(i, pdu)?;
                continue;
            }
            let Some(conn) = self.links[i].t.conn else {
                return Ok(());
            };
            if let Some(s) = self.tsession.as_mut() {
                let mut env = ScsiEnv { scsi: &self.scsi };
                s.handle_pdu(
                    conn,
                    pdu,
                    self.base + Duration::from_nanos(self.now),
                    &mut env,
                );
            }
        }
    }

    pub(super) fn initiator_received(&mut self, i: usize, seg: &Bytes) -> Result<(), Violation> {
        if self.links[i].i.closed || self.links[i].i.broken {
            return Ok(());
        }
        self.links[i].i.rbuf.extend_from_slice(seg);
        loop {
            if self.links[i].i_iser.is_some() {
                return self.initiator_rdma_received(i);
            }
            let link = &mut self.links[i];
            let pdu = match link.i.framer.decode(&mut link.i.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) if link.i.login.is_some() => {
                    let e = format!(
                        "initiator, connection {}: framing error in login {e}",
                        link.cid
                    );
                    return Err(self.violation(e));
                }
                Err(e) => {
                    // A digest error (injected faults): the session decides whether the stream
                    // goes on; if not, it asks for the connection to be closed.
                    let goes_on = match (link.i.conn, self.isession.as_mut()) {
                        (Some(conn), Some(s)) => s.handle_frame_error(
                            conn,
                            &e,
                            self.base + Duration::from_nanos(self.now),
                        ),
                        _ => false,
                    };
                    if !goes_on {
                        self.links[i].i.rbuf.clear();
                        self.links[i].i.broken = true;
                        return Ok(());
                    }
                    continue;
                }
            };
            if self.links[i].i.login.is_some() {
                self.initiator_login(i, pdu)?;
                continue;
            }
            let Some(conn) = self.links[i].i.conn else {
                return Ok(());
            };
            if let Some(s) = self.isession.as_mut() {
                s.handle_pdu(conn, pdu, self.base + Duration::from_nanos(self.now));
            }
        }
    }
}

/// Encodes `pdu` onto `out` through the link's faults (`trace` says whether to print them, and
/// when); returns whether the connection is to be reset after it.
fn put(link: &mut Link, trace: (bool, u64), dir: Direction, pdu: &Pdu, out: &mut BytesMut) -> bool {
    let digests = match dir {
        Direction::ToTarget => link.i.digests,
        Direction::ToInitiator => link.t.digests,
    };
    let Some(faults) = link.faults.as_mut() else {
        encode(pdu, digests, out);
        return false;
    };
    let mut frame = BytesMut::new();
    encode(pdu, digests, &mut frame);
    let decision = faults.inject(dir, &mut frame, digests);
    for event in &decision.events {
        trace_fault(trace.0, trace.1, link.cid, event);
    }
    for _ in 0..decision.copies {
        out.extend_from_slice(&frame);
    }
    decision.reset_after
}
