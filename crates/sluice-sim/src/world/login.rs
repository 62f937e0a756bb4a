//! Connections being opened: the login phase of both ends and the hand-over of a finished
//! login to the session cores (a new session, or a connection joining one).

use bytes::BytesMut;
use rand::{Rng, RngCore};
use sluice_proto::framing::{encode, Digests, Framer};
use sluice_proto::initiator::{self, InitiatorSession};
use sluice_proto::login::{
    InitiatorConfig, InitiatorLogin, InitiatorStep, LoginStep, TargetLogin, LOGIN_SEGMENT_MAX,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::{Itt, SeqNum, Tsih};
use sluice_proto::target::registry::Binding;
use sluice_proto::target::{self, ScsiWork, TargetSession};

use super::env::{execute, LoginEnv, ScsiEnv};
use super::{InitiatorEnd, Link, TargetEnd, World, INITIATOR, TARGET};
use crate::monitor::{describe, LinkMonitor};
use crate::net::{LinkShape, Pipe};
use crate::Violation;

impl World {
    /// Once every connection of a session being reinstated is closed, logs in its new leading
    /// connection (same ISID, TSIH 0). Returns whether it did.
    pub(super) fn reinstate_when_closed(&mut self) -> Result<bool, Violation> {
        if !self.reinstating || self.reinstate_link.is_some() {
            return Ok(false);
        }
        if !self.links.iter().all(|l| l.i.closed) {
            return Ok(false);
        }
        self.reinstating = false;
        self.tsih = sluice_proto::seq::Tsih::NEW_SESSION;
        // A new session numbers its commands afresh.
        self.retired_commands += self.session_mon.commands() as u64;
        self.session_mon = crate::monitor::SessionMonitor::default();
        self.reinstate_link = Some(self.links.len());
        self.open_connection(0)?;
        Ok(true)
    }

    /// A login reinstated the session: the old target session ends. What its SCSI layer was
    /// running completes first (a real target's connection tasks finish the command they
    /// execute before they see the close), and its connections stop being its.
    fn replace_target_session(&mut self) {
        let Some(mut old) = self.tsession.take() else {
            return;
        };
        old.close_all(target::CloseReason::SessionReinstated);
        let pending: Vec<(u64, u64, ScsiWork)> = std::mem::take(&mut self.work);
        for (_, _, work) in pending {
            execute(&self.scsi, &work);
        }
        for link in &mut self.links {
            if link.t.conn.is_some() {
                link.t.conn = None;
                link.t.closed = true;
                link.t.registry = None;
                link.down.close();
            }
        }
    }

    /// Opens connection `cid` and sends its first Login Request.
    pub(super) fn open_connection(&mut self, cid: u16) -> Result<(), Violation> {
        let shape_up = LinkShape::random(&mut self.rng);
        let shape_down = LinkShape {
            latency_ns: shape_up.latency_ns,
            ..LinkShape::random(&mut self.rng)
        };
        let cmd_sn = match &self.isession {
            Some(s) => s.command_window().0,
            None => self.first_cmd_sn,
        };
        let config = InitiatorConfig {
            initiator_name: INITIATOR.into(),
            initiator_alias: None,
            target_name: Some(TARGET.into()),
            isid: self.isid,
            tsih: self.tsih,
            cid,
            chap: None,
            offer: self.i_offer.clone(),
        };
        let mut login = InitiatorLogin::new(config, Itt(u32::from(cid)), cmd_sn, SeqNum(0));
        // A login with the session's TSIH joins it (MC/S, or connection recovery): as
        // sluice's initiator does, its outcome takes the session's leading-only keys.
        if let Some(s) = self
            .isession
            .as_ref()
            .filter(|_| self.tsih != Tsih::NEW_SESSION)
        {
            login = login.joining(*s.params());
        }
        let req = login
            .start()
            .map_err(|e| self.violation(format!("login start: {e}")))?;
        let stat_sn = SeqNum(self.rng.gen());
        let mut link = Link {
            cid,
            up: Pipe::new(shape_up),
            down: Pipe::new(shape_down),
            i: InitiatorEnd {
                login: Some(login),
                framer: Framer::new(LOGIN_SEGMENT_MAX as u32),
                rbuf: BytesMut::new(),
                digests: Digests::NONE,
                conn: None,
                closed: false,
                broken: false,
            },
            t: TargetEnd {
                login: Some(TargetLogin::new(stat_sn, self.t_config.queue_depth)),
                framer: Framer::new(LOGIN_SEGMENT_MAX as u32),
                rbuf: BytesMut::new(),
                digests: Digests::NONE,
                conn: None,
                registry: None,
                closed: false,
            },
            mon: LinkMonitor::default(),
            login_cmd_sn: cmd_sn,
            faults: None,
            i_iser: None,
            t_iser: None,
            t_joined: None,
        };
        let pdu = Pdu::LoginRequest(req);
        let mut out = BytesMut::new();
        encode(&pdu, Digests::NONE, &mut out);
        link.up.send(self.now, out.freeze(), &mut self.rng);
        self.links.push(link);
        Ok(())
    }

    /// A Login Request at the target.
    pub(super) fn target_login(&mut self, i: usize, pdu: Pdu) -> Result<(), Violation> {
        let Pdu::LoginRequest(req) = pdu else {
            return Err(self.violation(format!("target: {} during login", describe(&pdu))));
        };
        let window = self.tsession.as_ref().map(TargetSession::command_window);
        let session = self
            .session_ref
            .zip(self.tsession.as_ref())
            .map(|(r, s)| (r.tsih, *s.params()));
        let mut env = LoginEnv {
            registry: &mut self.registry,
            rng: &mut self.rng,
            offer: &self.t_offer,
            window,
            session,
            bound: None,
        };
        let Some(login) = self.links[i].t.login.as_mut() else {
            return Ok(());
        };
        let step = login.handle_request(&req, &mut env);
        let bound = env.bound.take();
        let (rsp, outcome) = match step {
            LoginStep::Respond(rsp) => (rsp, None),
            LoginStep::Complete { response, outcome } => (response, Some(outcome)),
            LoginStep::Fail(rsp) if !self.faults.any() => {
                return Err(self.violation(format!(
                    "target refused the login of connection {}: {}",
                    self.links[i].cid, rsp.status
                )))
            }
            LoginStep::Fail(_) => {
                // Under faults a connection may try to join a session that a reinstatement
                // just replaced: the initiator goes on without it.
                self.reset_link(i);
                return Ok(());
            }
        };
        let pdu = Pdu::LoginResponse(rsp);
        let link = &mut self.links[i];
        if let Err(e) = link
            .mon
            .target_sent(&pdu, self.t_config.queue_depth, &mut self.session_mon)
        {
            let e = format!("target login, connection {}: {e}", link.cid);
            return Err(self.violation(e));
        }
        let mut out = BytesMut::new();
        encode(&pdu, Digests::NONE, &mut out);
        link.down.send(self.now, out.freeze(), &mut self.rng);
        let Some(outcome) = outcome else {
            return Ok(());
        };
        let setup = target::ConnectionSetup {
            cid: outcome.cid,
            params: outcome.params,
            next_stat_sn: outcome.next_stat_sn,
            exp_cmd_sn: outcome.exp_cmd_sn,
        };
        let now = self.at(self.now);
        let conn = match bound {
            Some(Binding::NewSession { conn, replaced }) => {
                if replaced.is_some() {
                    self.replace_target_session();
                }
                let (s, id) = TargetSession::new(self.t_config, setup, now);
                self.registry
                    .attach(conn.session, (), outcome.params.max_connections);
                self.session_ref = Some(conn.session);
                self.tsession = Some(s);
                self.links[i].t.registry = Some(conn);
                id
            }
            Some(Binding::AddConnection { conn, .. }) => {
                let Some(s) = self.tsession.as_mut() else {
                    return Err(self.violation("a connection joined a session the target lost"));
                };
                if let Err(e) = check_joined("target", outcome.cid, &outcome.params, s.params()) {
                    return Err(self.violation(e));
                }
                self.links[i].t_joined = Some(outcome.params);
                let mut env = ScsiEnv { scsi: &self.scsi };
                let added = s.add_connection(setup, now, &mut env);
                self.links[i].t.registry = Some(conn);
                added.conn()
            }
            None => return Err(self.violation("the login completed without binding a session")),
        };
        let link = &mut self.links[i];
        link.t.login = None;
        link.t.conn = Some(conn);
        link.t.digests = Digests::negotiated(&outcome.params);
        link.t.framer.set_digests(link.t.digests);
        link.t
            .framer
            .set_max_data_segment(outcome.params.target_max_recv_data_segment_length);
        // ErrorRecoveryLevel is the session's (a leading-only key, RFC 7143 section 13.20),
        // which a joining login's outcome carries.
        let erl = outcome.params.error_recovery_level;
        let recovering = erl > 0;
        let faults = self.faults.injector(&outcome.params, erl, self.cfg.seed, i);
        if self.cfg.transport == crate::Transport::Iser {
            self.target_to_rdma_mode(i, &outcome.params, erl)?;
        }
        if faults.is_some() {
            self.workload.faulty = true;
            if erl == 0 {
                // Below level 1 a fault costs a connection or a command.
                self.workload.lossy = true;
            }
        }
        let link = &mut self.links[i];
        link.t
            .framer
            .set_header_resync(recovering.then_some(sluice_proto::text::Role::Target));
        link.mon.set_recovery(recovering);
        link.faults = faults;
        Ok(())
    }

    /// A Login Response at the initiator.
    pub(super) fn initiator_login(&mut self, i: usize, pdu: Pdu) -> Result<(), Violation> {
        let Pdu::LoginResponse(rsp) = pdu else {
            return Err(self.violation(format!("initiator: {} during login", describe(&pdu))));
        };
        let Some(login) = self.links[i].i.login.as_mut() else {
            return Ok(());
        };
        let rng = &mut self.rng;
        let step = login.handle_response(&rsp, &mut |buf: &mut [u8]| rng.fill_bytes(buf));
        let mut outcome = match step {
            InitiatorStep::Send(req) => {
                let pdu = Pdu::LoginRequest(req);
                let mut out = BytesMut::new();
                encode(&pdu, Digests::NONE, &mut out);
                self.links[i].up.send(self.now, out.freeze(), &mut self.rng);
                return Ok(());
            }
            InitiatorStep::Complete(outcome) => outcome,
            other => {
                return Err(self.violation(format!(
                    "initiator login of connection {}: {other:?}",
                    self.links[i].cid
                )))
            }
        };
        if self.cfg.transport == crate::Transport::Iser {
            // As sluice's initiator driver runs a connection in RDMA mode: solicited data
            // goes to the datamover one burst at a time, never cut for the wire.
            outcome.params.solicited_data_by_rdma = true;
        }
        let link = &mut self.links[i];
        let setup = initiator::ConnectionSetup {
            cid: link.cid,
            params: outcome.params,
            cmd_sn: link.login_cmd_sn,
            exp_stat_sn: outcome.exp_stat_sn,
            exp_cmd_sn: outcome.exp_cmd_sn,
            max_cmd_sn: outcome.max_cmd_sn,
        };
        link.i.login = None;
        self.recovery_links.retain(|(l, _)| *l != i);
        let link = &mut self.links[i];
        link.i.digests = Digests::negotiated(&outcome.params);
        link.i.framer.set_digests(link.i.digests);
        link.i
            .framer
            .set_max_data_segment(outcome.params.initiator_max_recv_data_segment_length);
        // ErrorRecoveryLevel is the session's (a leading-only key, RFC 7143 section 13.20),
        // which a joining login's outcome carries.
        let erl = outcome.params.error_recovery_level;
        self.links[i]
            .i
            .framer
            .set_header_resync((erl > 0).then_some(sluice_proto::text::Role::Initiator));
        let now = self.at(self.now);
        let reinstates = self.reinstate_link == Some(i);
        let conn = match self.isession.as_mut() {
            None => {
                self.tsih = outcome.tsih;
                self.leading_params = Some(outcome.params);
                let (s, id) = InitiatorSession::new(self.i_config, setup, now);
                self.isession = Some(s);
                id
            }
            Some(s) if reinstates => {
                // Session reinstatement (RFC 7143 section 6.3.5): the new session takes over
                // what the old one had outstanding.
                self.reinstate_link = None;
                self.tsih = outcome.tsih;
                // The new session's own negotiation settles its leading-only keys.
                self.leading_params = Some(outcome.params);
                self.opened_extra = false;
                s.reinstate(setup, now)
            }
            Some(s) => {
                let session = *s.params();
                if let Err(e) = check_joined("initiator", setup.cid, &outcome.params, &session) {
                    return Err(self.violation(e));
                }
                self.joins.push(crate::JoinedConnection {
                    cid: setup.cid,
                    initiator: outcome.params,
                    target: self.links[i].t_joined,
                    session,
                });
                s.add_connection(setup, now)
            }
        };
        self.links[i].i.conn = Some(conn);
        if self.cfg.transport == crate::Transport::Iser {
            self.initiator_to_rdma_mode(i, &outcome.params)?;
        }
        if !self.opened_extra {
            self.opened_extra = true;
            let accepted = outcome.params.max_connections;
            for cid in 1..self.wanted_connections.min(accepted) {
                self.open_connection(cid)?;
            }
        }
        Ok(())
    }
}

/// A connection joining a session negotiates only the connection-only keys; its login's
/// outcome must still carry what holds on it, the session's value of every leading-only key
/// (RFC 7143 section 13, "LO"), as `SessionParams::joined` makes it.
fn check_joined(
    end: &str,
    cid: u16,
    outcome: &SessionParams,
    session: &SessionParams,
) -> Result<(), String> {
    if *outcome == outcome.joined(session) {
        return Ok(());
    }
    Err(format!(
        "{end}: connection {cid} joined the session with {outcome:?}, not the session's \
         leading-only keys ({session:?})"
    ))
}
