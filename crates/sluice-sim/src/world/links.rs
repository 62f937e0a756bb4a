//! Moving bytes: PDUs from each side's session to its pipe, segments from the pipes to the
//! framers and on to the sessions, and closed sockets.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use sluice_proto::framing::encode;
use sluice_proto::initiator;
use sluice_proto::target;

use super::env::ScsiEnv;
use super::trace::trace;
use super::World;
use crate::Violation;

impl World {
    /// Target PDUs of link `i` to the pipe, and its events.
    pub(super) fn target_transmit(&mut self, i: usize) -> Result<bool, Violation> {
        let Some(conn) = self.links[i].t.conn else {
            return Ok(false);
        };
        let Some(s) = self.tsession.as_mut() else {
            return Ok(false);
        };
        let mut moved = false;
        let mut out = BytesMut::new();
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
            encode(&pdu, link.t.digests, &mut out);
        }
        if !out.is_empty() {
            let link = &mut self.links[i];
            link.down.send(self.now, out.freeze(), &mut self.rng);
        }
        let mut close = false;
        while let Some(e) = self.tsession.as_mut().and_then(|s| s.poll_event(conn)) {
            moved = true;
            match e {
                target::Event::Close(target::CloseReason::Logout) => close = true,
                other => return Err(self.violation(format!("target: unexpected {other:?}"))),
            }
        }
        if close {
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
        let Some(s) = self.isession.as_mut() else {
            return Ok(false);
        };
        let mut out = BytesMut::new();
        let mut moved = false;
        while let Some(pdu) = s.poll_transmit(conn) {
            moved = true;
            self.pdus += 1;
            trace(self.cfg.trace, self.now, self.links[i].cid, "I->T", &pdu);
            let link = &mut self.links[i];
            if let Err(e) = link.mon.initiator_sent(&pdu, &mut self.session_mon) {
                let e = format!("initiator, connection {}: {e}", link.cid);
                return Err(self.violation(e));
            }
            encode(&pdu, link.i.digests, &mut out);
        }
        if !out.is_empty() {
            self.links[i].up.send(self.now, out.freeze(), &mut self.rng);
        }
        Ok(moved)
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
            s.handle_connection_closed(conn, &mut env);
            if s.is_ended() {
                if s.task_count() != 0 || s.window_slots_held() != 0 {
                    // Checked in `check` as a violation; keep the session to report it.
                    return;
                }
                self.tsession = None;
            }
        }
        if let Some(r) = link.t.registry.take() {
            self.registry.remove_connection(r);
        }
    }

    /// The initiator's socket of link `i` is closed.
    pub(super) fn initiator_closed(&mut self, i: usize) {
        let link = &mut self.links[i];
        if link.i.closed {
            return;
        }
        link.i.closed = true;
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
            let link = &mut self.links[i];
            let pdu = match link.t.framer.decode(&mut link.t.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let e = format!("target, connection {}: framing error {e}", link.cid);
                    return Err(self.violation(e));
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
        if self.links[i].i.closed {
            return Ok(());
        }
        self.links[i].i.rbuf.extend_from_slice(seg);
        loop {
            let link = &mut self.links[i];
            let pdu = match link.i.framer.decode(&mut link.i.rbuf) {
                Ok(Some(p)) => p,
                Ok(None) => return Ok(()),
                Err(e) => {
                    let e = format!("initiator, connection {}: framing error {e}", link.cid);
                    return Err(self.violation(e));
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
