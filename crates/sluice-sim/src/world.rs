//! The simulated world: one initiator session and one target session, each made of the
//! production state machines (login, framing, the session cores, the SCSI layer over memory
//! LUNs), joined by simulated links, stepped from event to event in virtual time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_proto::framing::{encode, Digests, Framer};
use sluice_proto::initiator::{self, InitiatorSession, Policy};
use sluice_proto::login::{
    InitiatorConfig, InitiatorLogin, InitiatorStep, LoginStatus, LoginStep, SessionBinding,
    TargetLogin, TargetLoginEnv, TargetLoginPolicy, LOGIN_SEGMENT_MAX,
};
use sluice_proto::params::{SessionParams, SessionType};
use sluice_proto::pdu::codes::ScsiStatus;
use sluice_proto::pdu::{Cdb, Pdu};
use sluice_proto::seq::{Isid, Itt, Lun, SeqNum, Tsih};
use sluice_proto::target::registry::{Binding, ConnectionRef, NexusKey, SessionRegistry};
use sluice_proto::target::{
    self, DataTransfer, ResetKind, ScsiCompletion, ScsiWork, TargetSession, TargetSessionEnv,
};
use sluice_proto::text::OperationalOffer;
use sluice_scsi::{DataOut, LogicalUnit, LuConfig, ScsiTarget, Transfer};
use sluice_storage::MemoryDevice;

use crate::monitor::{describe, LinkMonitor, SessionMonitor};
use crate::net::{log_uniform, LinkShape, Pipe};
use crate::offers::random_offer;
use crate::workload::{Workload, LUN_BLOCKS};
use crate::{SimConfig, Summary, Violation};

const TARGET: &str = "iqn.2026-11.io.sluice.sim:target";
const INITIATOR: &str = "iqn.2026-11.io.sluice.sim:initiator";
/// The SCSI layer's I_T nexus id of the one session.
const NEXUS: u64 = 1;
/// Virtual time after which a run that has not finished is stuck.
const TIME_LIMIT_NS: u64 = 3_600_000_000_000;
/// Events after which a run that has not finished is stuck.
const STEP_LIMIT: u64 = 2_000_000;

/// The initiator's end of one connection.
struct InitiatorEnd {
    login: Option<InitiatorLogin>,
    framer: Framer,
    rbuf: BytesMut,
    digests: Digests,
    conn: Option<initiator::ConnId>,
    closed: bool,
}

/// The target's end of one connection.
struct TargetEnd {
    login: Option<TargetLogin>,
    framer: Framer,
    rbuf: BytesMut,
    digests: Digests,
    conn: Option<target::ConnId>,
    registry: Option<ConnectionRef>,
    closed: bool,
}

/// One connection: two pipes and two ends.
struct Link {
    cid: u16,
    up: Pipe,
    down: Pipe,
    i: InitiatorEnd,
    t: TargetEnd,
    mon: LinkMonitor,
    /// CmdSN the initiator's login used (the first command carries it, for the leading one).
    login_cmd_sn: SeqNum,
}

pub(crate) struct World {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    base: Instant,
    now: u64,
    steps: u64,
    links: Vec<Link>,
    wanted_connections: u16,
    opened_extra: bool,
    isid: Isid,
    tsih: Tsih,
    // The target.
    registry: SessionRegistry<()>,
    tsession: Option<TargetSession>,
    t_offer: OperationalOffer,
    t_config: target::SessionConfig,
    scsi: ScsiTarget,
    work: Vec<(u64, u64, ScsiWork)>,
    work_seq: u64,
    service_ns: u64,
    // The initiator.
    isession: Option<InitiatorSession>,
    i_offer: OperationalOffer,
    i_config: initiator::SessionConfig,
    first_cmd_sn: SeqNum,
    ended: bool,
    workload: Workload,
    session_mon: SessionMonitor,
    pdus: u64,
    leading_params: Option<SessionParams>,
}

impl World {
    pub(crate) fn new(cfg: SimConfig) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let wanted_connections = cfg.connections.unwrap_or_else(|| rng.gen_range(1..=4));
        let luns: u16 = rng.gen_range(1..=4);
        let ops = cfg.ops.unwrap_or_else(|| rng.gen_range(30..=120));
        let policy = Policy::ALL[rng.gen_range(0..Policy::ALL.len())];
        let target_max_connections = if rng.gen_bool(0.2) {
            rng.gen_range(1..=4)
        } else {
            8
        };
        let mut t_offer = random_offer(&mut rng, target_max_connections);
        // The target's own offer of MaxConnections is what it accepts at most.
        t_offer.max_connections = target_max_connections;
        let i_offer = random_offer(&mut rng, wanted_connections);
        let keepalive = |rng: &mut ChaCha8Rng| {
            rng.gen_bool(0.5).then(|| {
                (
                    Duration::from_nanos(log_uniform(rng, 50_000_000, 5_000_000_000)),
                    Duration::from_nanos(log_uniform(rng, 20_000_000_000, 60_000_000_000)),
                )
            })
        };
        let t_keepalive = keepalive(&mut rng);
        let t_config = target::SessionConfig {
            session_type: SessionType::Normal,
            queue_depth: log_uniform(&mut rng, 1, 256) as u32,
            max_write_bytes_per_connection: log_uniform(&mut rng, 64 << 10, 64 << 20) as usize,
            keepalive: t_keepalive
                .map(|(interval, timeout)| target::KeepaliveConfig { interval, timeout }),
        };
        let i_config = initiator::SessionConfig {
            policy,
            max_retries: 3,
            keepalive: keepalive(&mut rng),
        };
        let scsi = ScsiTarget::new(
            (0..luns)
                .map(|n| {
                    let device = Arc::new(MemoryDevice::new(512, u64::from(LUN_BLOCKS)));
                    (n, Arc::new(LogicalUnit::new(lu_config(n, device))))
                })
                .collect(),
        );
        let service_ns = if rng.gen_bool(0.3) {
            0
        } else {
            log_uniform(&mut rng, 1_000, 2_000_000)
        };
        let first_cmd_sn = match rng.gen_range(0..4) {
            // Near the wrap, so that serial-number arithmetic is exercised.
            0 => SeqNum(u32::MAX - rng.gen_range(0..64)),
            _ => SeqNum(rng.gen()),
        };
        let mut isid = [0u8; 6];
        rng.fill_bytes(&mut isid);
        isid[0] = 0x80 | (isid[0] & 0x3f);
        let workload = Workload::new(&mut rng, luns, ops);
        Self {
            cfg,
            rng,
            base: Instant::now(),
            now: 0,
            steps: 0,
            links: Vec::new(),
            wanted_connections,
            opened_extra: false,
            isid: Isid(isid),
            tsih: Tsih::NEW_SESSION,
            registry: SessionRegistry::new(4),
            tsession: None,
            t_offer,
            t_config,
            scsi,
            work: Vec::new(),
            work_seq: 0,
            service_ns,
            isession: None,
            i_offer,
            i_config,
            first_cmd_sn,
            ended: false,
            workload,
            session_mon: SessionMonitor::default(),
            pdus: 0,
            leading_params: None,
        }
    }

    fn at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    fn ns(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    fn violation(&self, what: impl Into<String>) -> Violation {
        Violation {
            seed: self.cfg.seed,
            connections: self.cfg.connections,
            ops: self.cfg.ops,
            at_ns: self.now,
            what: what.into(),
        }
    }

    /// Runs to the end: the session logged out and every connection closed.
    pub(crate) fn run(mut self) -> Result<Summary, Violation> {
        self.open_connection(0)?;
        loop {
            self.steps += 1;
            if self.steps > STEP_LIMIT || self.now > TIME_LIMIT_NS {
                return Err(self.violation(format!(
                    "no end after {} events and {:.3} s of virtual time: {} commands and requests outstanding",
                    self.steps,
                    self.now as f64 / 1e9,
                    self.isession.as_ref().map_or(0, |s| s.in_flight() + s.waiting() + s.requests_pending()),
                )));
            }
            if self.finished() {
                return self.summary();
            }
            let Some(next) = self.next_time() else {
                return Err(self.violation(format!(
                    "nothing left to happen, but the run is not over: initiator {} in flight, {} waiting, {} requests; target {} tasks",
                    self.isession.as_ref().map_or(0, InitiatorSession::in_flight),
                    self.isession.as_ref().map_or(0, InitiatorSession::waiting),
                    self.isession.as_ref().map_or(0, InitiatorSession::requests_pending),
                    self.tsession.as_ref().map_or(0, TargetSession::task_count),
                )));
            };
            self.now = self.now.max(next);
            self.step()?;
        }
    }

    fn finished(&self) -> bool {
        self.ended
            && self.tsession.is_none()
            && self
                .links
                .iter()
                .all(|l| l.i.closed && l.t.closed && l.up.idle() && l.down.idle())
    }

    /// The earliest time something happens.
    fn next_time(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut consider = |t: Option<u64>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: u64| n.min(t)));
            }
        };
        for l in &self.links {
            consider(l.up.next_delivery());
            consider(l.down.next_delivery());
            if (l.up.finished() && !l.t.closed) || (l.down.finished() && !l.i.closed) {
                consider(Some(self.now));
            }
        }
        consider(self.work.iter().map(|w| w.0).min());
        consider(
            self.tsession
                .as_ref()
                .and_then(TargetSession::poll_timeout)
                .map(|t| self.ns(t)),
        );
        consider(
            self.isession
                .as_ref()
                .and_then(InitiatorSession::poll_timeout)
                .map(|t| self.ns(t)),
        );
        if self.isession.is_some() && !self.ended {
            consider(self.workload.next_time());
            let logging_in = self.links.iter().any(|l| l.i.login.is_some());
            if self.workload.done() && !self.workload.logout_sent() && !logging_in {
                consider(Some(self.now));
            }
        }
        next
    }

    fn step(&mut self) -> Result<(), Violation> {
        let now = self.now;
        let at = self.at(now);
        // Bytes that arrived.
        for i in 0..self.links.len() {
            while let Some(seg) = self.links[i].up.take_due(now) {
                self.target_received(i, &seg)?;
            }
            while let Some(seg) = self.links[i].down.take_due(now) {
                self.initiator_received(i, &seg)?;
            }
            if self.links[i].up.finished() && !self.links[i].t.closed {
                self.target_closed(i);
            }
            if self.links[i].down.finished() && !self.links[i].i.closed {
                self.initiator_closed(i);
            }
        }
        // SCSI commands that finished.
        let mut due: Vec<(u64, u64, ScsiWork)> = Vec::new();
        self.work.retain(|w| {
            if w.0 <= now {
                due.push(w.clone());
                false
            } else {
                true
            }
        });
        due.sort_by_key(|w| (w.0, w.1));
        for (_, _, work) in due {
            let completion = execute(&self.scsi, &work);
            if let Some(s) = self.tsession.as_mut() {
                let mut env = ScsiEnv { scsi: &self.scsi };
                s.handle_completion(work.ticket, completion, &mut env);
            }
        }
        // Timers.
        if let Some(s) = self.tsession.as_mut() {
            if s.poll_timeout().is_some_and(|t| t <= at) {
                let mut env = ScsiEnv { scsi: &self.scsi };
                s.handle_timeout(at, &mut env);
            }
        }
        if let Some(s) = self.isession.as_mut() {
            if s.poll_timeout().is_some_and(|t| t <= at) {
                s.handle_timeout(at);
            }
        }
        // The application.
        if let Some(s) = self.isession.as_mut() {
            if !self.ended {
                self.workload.act(now, at, s, &mut self.rng);
                // The session logs out once the work is done and every connection it opened
                // finished logging in (a login still on its way would find no session).
                let logging_in = self.links.iter().any(|l| l.i.login.is_some());
                if self.workload.done() && !logging_in {
                    self.workload.finish(s);
                }
            }
        }
        self.pump()?;
        self.check()
    }

    /// Everything the two sides want to send, do or report.
    fn pump(&mut self) -> Result<(), Violation> {
        loop {
            let mut moved = false;
            // Target: work to schedule, PDUs to send, connections to close.
            if let Some(s) = self.tsession.as_mut() {
                while let Some(work) = s.poll_work() {
                    let delay = if self.service_ns == 0 {
                        0
                    } else {
                        self.rng.gen_range(0..=self.service_ns)
                    };
                    self.work_seq += 1;
                    self.work.push((self.now + delay, self.work_seq, work));
                    moved = true;
                }
            }
            for i in 0..self.links.len() {
                moved |= self.target_transmit(i)?;
                moved |= self.initiator_transmit(i)?;
            }
            // Initiator: completions and events.
            while let Some(c) = self
                .isession
                .as_mut()
                .and_then(InitiatorSession::poll_completion)
            {
                moved = true;
                self.workload.complete(c).map_err(|e| self.violation(e))?;
            }
            while let Some(e) = self
                .isession
                .as_mut()
                .and_then(InitiatorSession::poll_event)
            {
                moved = true;
                match e {
                    initiator::Event::Close(conn, initiator::CloseReason::Logout) => {
                        let i = self.link_of_initiator(conn)?;
                        self.initiator_transmit(i)?;
                        self.links[i].up.close();
                        self.initiator_closed(i);
                    }
                    initiator::Event::Ended => self.ended = true,
                    other => return Err(self.violation(format!("initiator: unexpected {other:?}"))),
                }
            }
            if !moved {
                return Ok(());
            }
        }
    }

    /// Target PDUs of link `i` to the pipe, and its events.
    fn target_transmit(&mut self, i: usize) -> Result<bool, Violation> {
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
    fn initiator_transmit(&mut self, i: usize) -> Result<bool, Violation> {
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

    fn link_of_initiator(&self, conn: initiator::ConnId) -> Result<usize, Violation> {
        self.links
            .iter()
            .position(|l| l.i.conn == Some(conn))
            .ok_or_else(|| self.violation(format!("initiator event for an unknown {conn:?}")))
    }

    /// The target's socket of link `i` is closed (it closed it, or the initiator did).
    fn target_closed(&mut self, i: usize) {
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
    fn initiator_closed(&mut self, i: usize) {
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

    /// Opens connection `cid` and sends its first Login Request.
    fn open_connection(&mut self, cid: u16) -> Result<(), Violation> {
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
        };
        let pdu = Pdu::LoginRequest(req);
        let mut out = BytesMut::new();
        encode(&pdu, Digests::NONE, &mut out);
        link.up.send(self.now, out.freeze(), &mut self.rng);
        self.links.push(link);
        Ok(())
    }

    fn target_received(&mut self, i: usize, seg: &Bytes) -> Result<(), Violation> {
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

    fn initiator_received(&mut self, i: usize, seg: &Bytes) -> Result<(), Violation> {
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

    /// A Login Request at the target.
    fn target_login(&mut self, i: usize, pdu: Pdu) -> Result<(), Violation> {
        let Pdu::LoginRequest(req) = pdu else {
            return Err(self.violation(format!("target: {} during login", describe(&pdu))));
        };
        let window = self.tsession.as_ref().map(TargetSession::command_window);
        let mut env = LoginEnv {
            registry: &mut self.registry,
            rng: &mut self.rng,
            offer: &self.t_offer,
            window,
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
            LoginStep::Fail(rsp) => {
                return Err(self.violation(format!(
                    "target refused the login of connection {}: {}",
                    self.links[i].cid, rsp.status
                )))
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
            Some(Binding::NewSession { conn, .. }) => {
                let (s, id) = TargetSession::new(self.t_config, setup, now);
                self.registry
                    .attach(conn.session, (), outcome.params.max_connections);
                self.tsession = Some(s);
                self.links[i].t.registry = Some(conn);
                id
            }
            Some(Binding::AddConnection { conn, .. }) => {
                let Some(s) = self.tsession.as_mut() else {
                    return Err(self.violation("a connection joined a session the target lost"));
                };
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
        link.t.digests = Digests {
            header: outcome.params.header_digest,
            data: outcome.params.data_digest,
        };
        link.t.framer.set_digests(link.t.digests);
        link.t
            .framer
            .set_max_data_segment(outcome.params.target_max_recv_data_segment_length);
        Ok(())
    }

    /// A Login Response at the initiator.
    fn initiator_login(&mut self, i: usize, pdu: Pdu) -> Result<(), Violation> {
        let Pdu::LoginResponse(rsp) = pdu else {
            return Err(self.violation(format!("initiator: {} during login", describe(&pdu))));
        };
        let Some(login) = self.links[i].i.login.as_mut() else {
            return Ok(());
        };
        let rng = &mut self.rng;
        let step = login.handle_response(&rsp, &mut |buf: &mut [u8]| rng.fill_bytes(buf));
        let outcome = match step {
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
        link.i.digests = Digests {
            header: outcome.params.header_digest,
            data: outcome.params.data_digest,
        };
        link.i.framer.set_digests(link.i.digests);
        link.i
            .framer
            .set_max_data_segment(outcome.params.initiator_max_recv_data_segment_length);
        let now = self.at(self.now);
        let conn = match self.isession.as_mut() {
            None => {
                self.tsih = outcome.tsih;
                self.leading_params = Some(outcome.params);
                let (s, id) = InitiatorSession::new(self.i_config, setup, now);
                self.isession = Some(s);
                id
            }
            Some(s) => s.add_connection(setup, now),
        };
        self.links[i].i.conn = Some(conn);
        if !self.opened_extra {
            self.opened_extra = true;
            let accepted = outcome.params.max_connections;
            for cid in 1..self.wanted_connections.min(accepted) {
                self.open_connection(cid)?;
            }
        }
        Ok(())
    }

    /// Invariants after every event.
    fn check(&self) -> Result<(), Violation> {
        if let Some(s) = &self.tsession {
            let depth = self.t_config.queue_depth;
            if s.window_slots_held() > depth {
                return Err(self.violation(format!(
                    "target holds {} window slots, queue depth {depth}",
                    s.window_slots_held()
                )));
            }
            if s.commands_held() > depth as usize {
                return Err(self.violation(format!(
                    "target holds {} out-of-order commands, queue depth {depth}",
                    s.commands_held()
                )));
            }
            if s.is_ended() && (s.task_count() != 0 || s.window_slots_held() != 0) {
                return Err(self.violation(format!(
                    "target session ended with {} tasks and {} window slots left",
                    s.task_count(),
                    s.window_slots_held()
                )));
            }
        }
        Ok(())
    }

    fn summary(self) -> Result<Summary, Violation> {
        if let Some(s) = &self.isession {
            if s.in_flight() + s.waiting() + s.requests_pending() != 0 {
                return Err(self.violation("the initiator ended with work left"));
            }
        }
        if !self.registry.is_empty() {
            return Err(self.violation("the target's session table kept the session"));
        }
        if !self.workload.done() || !self.workload.logged_out {
            return Err(self.violation("the workload did not finish"));
        }
        self.session_mon
            .check_contiguous()
            .map_err(|e| self.violation(e))?;
        Ok(Summary {
            seed: self.cfg.seed,
            connections: self.links.len() as u16,
            policy: self.i_config.policy,
            params: self.leading_params.unwrap_or_default(),
            queue_depth: self.t_config.queue_depth,
            commands: self.session_mon.commands() as u64,
            counts: self.workload.counts,
            pdus: self.pdus,
            bytes: self.links.iter().map(|l| l.up.bytes + l.down.bytes).sum(),
            virtual_ns: self.now,
            events: self.steps,
        })
    }
}

/// Runs a command on the SCSI layer.
fn execute(scsi: &ScsiTarget, work: &ScsiWork) -> ScsiCompletion {
    let mut buf = BytesMut::new();
    let mut shared = None;
    let result = scsi.execute_shared(
        NEXUS,
        work.lun.0,
        &work.cdb,
        DataOut::Segments(work.data_out.segments()),
        &mut buf,
        &mut shared,
    );
    ScsiCompletion {
        status: ScsiStatus::from(result.status),
        sense: result.sense_bytes().map(Bytes::from).unwrap_or_default(),
        data: shared.unwrap_or_else(|| buf.freeze()),
    }
}

/// The target session's view of the SCSI layer.
struct ScsiEnv<'a> {
    scsi: &'a ScsiTarget,
}

impl TargetSessionEnv for ScsiEnv<'_> {
    fn transfer(&self, lun: Lun, cdb: &Cdb) -> DataTransfer {
        match self.scsi.transfer(lun.0, cdb) {
            Transfer::None => DataTransfer::None,
            Transfer::ToDevice(n) => DataTransfer::ToDevice(n),
            Transfer::FromDevice(n) => DataTransfer::FromDevice(n),
        }
    }

    fn lun_exists(&self, lun: Lun) -> bool {
        match sluice_scsi::decode_lun(lun.0) {
            sluice_scsi::LunAddress::Lun(n) => self.scsi.lu(n).is_some(),
            _ => false,
        }
    }

    fn reset(&mut self, kind: ResetKind) {
        let kind = match kind {
            ResetKind::LogicalUnit(lun) => sluice_scsi::ResetKind::LogicalUnit(lun.0),
            ResetKind::TargetWarm => sluice_scsi::ResetKind::TargetWarm,
            ResetKind::TargetCold => sluice_scsi::ResetKind::TargetCold,
        };
        self.scsi.reset(kind, NEXUS);
    }

    fn send_targets(&mut self, _conn: target::ConnId, _query: &str) -> Vec<(String, String)> {
        vec![
            ("TargetName".into(), TARGET.into()),
            ("TargetAddress".into(), "192.0.2.1:3260,1".into()),
        ]
    }
}

/// The target's login environment: one target, no authentication, the session table.
struct LoginEnv<'a> {
    registry: &'a mut SessionRegistry<()>,
    rng: &'a mut ChaCha8Rng,
    offer: &'a OperationalOffer,
    window: Option<(SeqNum, SeqNum)>,
    bound: Option<Binding<()>>,
}

impl LoginEnv<'_> {
    fn policy(&self) -> TargetLoginPolicy {
        TargetLoginPolicy {
            offer: self.offer.clone(),
            ..TargetLoginPolicy::default()
        }
    }
}

impl TargetLoginEnv for LoginEnv<'_> {
    fn target(&self, name: &str) -> Option<TargetLoginPolicy> {
        name.eq_ignore_ascii_case(TARGET).then(|| self.policy())
    }

    fn discovery_policy(&self) -> TargetLoginPolicy {
        self.policy()
    }

    fn random_bytes(&mut self, buf: &mut [u8]) {
        self.rng.fill_bytes(buf);
    }

    fn admit(&mut self, binding: &SessionBinding) -> Result<(), LoginStatus> {
        self.registry
            .check(&key(binding), binding.tsih, binding.cid)
    }

    fn bind_session(&mut self, binding: &SessionBinding) -> Result<Tsih, LoginStatus> {
        let bound = self
            .registry
            .bind(key(binding), binding.tsih, binding.cid)?;
        let tsih = match &bound {
            Binding::NewSession { conn, .. } | Binding::AddConnection { conn, .. } => {
                conn.session.tsih
            }
        };
        self.bound = Some(bound);
        Ok(tsih)
    }

    fn session_command_window(&self, _tsih: Tsih) -> Option<(SeqNum, SeqNum)> {
        self.window
    }
}

fn key(binding: &SessionBinding) -> NexusKey {
    NexusKey::new(
        &binding.initiator_name,
        binding.isid,
        binding.target_name.as_deref().unwrap_or_default(),
    )
}

fn lu_config(n: u16, device: Arc<MemoryDevice>) -> LuConfig {
    LuConfig {
        device,
        read_only: false,
        vendor: "SLUICE".into(),
        product: "sluice sim".into(),
        revision: "0001".into(),
        serial: format!("sim{n}"),
        naa_id: (6u64 << 60) | u64::from(n),
        target_port_name: format!("{TARGET},t,0x0001"),
        relative_target_port: 1,
        target_port_group: 1,
        write_cache: true,
        removable: false,
    }
}

fn trace(on: bool, now: u64, cid: u16, dir: &str, pdu: &Pdu) {
    if on {
        eprintln!("{now:>12} cid {cid} {dir} {}", trace_line(pdu));
    }
}

/// One line per PDU for `--trace`: the fields that matter when reading a run.
fn trace_line(pdu: &Pdu) -> String {
    match pdu {
        Pdu::ScsiCommand(p) => {
            format!(
            "SCSI Command itt {:#x} cmd_sn {} imm {} R{} W{} F{} edtl {} data {} exp_stat_sn {}",
            p.itt.0, p.cmd_sn, p.immediate, p.read as u8, p.write as u8, p.final_bit as u8,
            p.expected_data_transfer_length, p.data.len(), p.exp_stat_sn
        )
        }
        Pdu::DataOut(p) => format!(
            "Data-Out itt {:#x} ttt {:#x} data_sn {} offset {} len {} F{}",
            p.itt.0,
            p.ttt.0,
            p.data_sn,
            p.buffer_offset,
            p.data.len(),
            p.final_bit as u8
        ),
        Pdu::DataIn(p) => format!(
            "Data-In itt {:#x} data_sn {} offset {} len {} S{} F{} stat_sn {} exp {} max {}",
            p.itt.0,
            p.data_sn,
            p.buffer_offset,
            p.data.len(),
            p.status_present as u8,
            p.final_bit as u8,
            p.stat_sn,
            p.exp_cmd_sn,
            p.max_cmd_sn
        ),
        Pdu::R2t(p) => format!(
            "R2T itt {:#x} ttt {:#x} r2t_sn {} offset {} len {} exp {} max {}",
            p.itt.0,
            p.ttt.0,
            p.r2t_sn,
            p.buffer_offset,
            p.desired_data_transfer_length,
            p.exp_cmd_sn,
            p.max_cmd_sn
        ),
        Pdu::ScsiResponse(p) => format!(
            "SCSI Response itt {:#x} status {} stat_sn {} exp {} max {}",
            p.itt.0, p.status, p.stat_sn, p.exp_cmd_sn, p.max_cmd_sn
        ),
        Pdu::Reject(p) => format!(
            "Reject {} stat_sn {} of {:02x?}",
            p.reason,
            p.stat_sn,
            &p.data[..p.data.len().min(48)]
        ),
        other => format!("{other:?}"),
    }
}
