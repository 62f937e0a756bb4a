//! The simulated world: one initiator session and one target session, each made of the
//! production state machines (login, framing, the session cores, the SCSI layer over memory
//! LUNs), joined by simulated links, stepped from event to event in virtual time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sluice_proto::framing::{Digests, Framer};
use sluice_proto::initiator::{self, InitiatorSession, Policy};
use sluice_proto::login::{InitiatorLogin, TargetLogin};
use sluice_proto::params::{SessionParams, SessionType};
use sluice_proto::seq::{Isid, SeqNum, Tsih};
use sluice_proto::target::registry::{ConnectionRef, SessionRegistry};
use sluice_proto::target::{self, ScsiWork, TargetSession};
use sluice_proto::text::OperationalOffer;
use sluice_scsi::{LogicalUnit, ScsiTarget};
use sluice_storage::MemoryDevice;

use crate::faults::Faults;
use crate::monitor::{LinkMonitor, SessionMonitor};
use crate::net::{log_uniform, Pipe};
use crate::offers::random_offer;
use crate::workload::{Workload, LUN_BLOCKS};
use crate::{FaultChoice, SimConfig, Summary, Transport, Violation};

pub(crate) mod env;
pub(crate) mod iser;
mod links;
mod login;
mod trace;

use env::{execute, lu_config, ScsiEnv};

const TARGET: &str = "iqn.2026-11.io.sluice.sim:target";
const INITIATOR: &str = "iqn.2026-11.io.sluice.sim:initiator";
/// The SCSI layer's I_T nexus id of the one session.
const NEXUS: u64 = 1;
/// Virtual time after which a run that has not finished is stuck.
const TIME_LIMIT_NS: u64 = 24 * 3_600_000_000_000;
/// Virtual time without a single completion after which a run is stuck: every command has a
/// deadline (300 s here) and each retry is bounded, so a live run completes something well
/// within it, however slowly a hostile link lets it go.
const PROGRESS_LIMIT_NS: u64 = 1_200_000_000_000;
/// Once the initiator is done, how much longer the target may take to end its session: a
/// session logout lost with its connection at ErrorRecoveryLevel 2 leaves the target waiting
/// DefaultTime2Wait + DefaultTime2Retain (each at most an hour) for a recovery that never
/// comes.
const TARGET_GRACE_NS: u64 = 2 * 3_600_000_000_000 + 60_000_000_000;
/// The highest ErrorRecoveryLevel the seeds offer.
const MAX_ERROR_RECOVERY_LEVEL: u8 = 2;
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
    /// The stream could not be framed any more: what still arrives is ignored until the
    /// connection closes.
    broken: bool,
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
    /// The faults of this connection (from its login on).
    faults: Option<sluice_fault::FaultInjector>,
    /// The initiator's iSER end, once its login is over (iSER runs).
    i_iser: Option<Box<iser::InitiatorIser>>,
    /// The target's iSER end, once its login is over (iSER runs).
    t_iser: Option<Box<iser::TargetIser>>,
    /// What the target's login settled, when the connection joined the session.
    t_joined: Option<SessionParams>,
}

pub(crate) struct World {
    cfg: SimConfig,
    rng: ChaCha8Rng,
    base: Instant,
    now: u64,
    steps: u64,
    /// When the initiator last completed something (virtual ns).
    last_progress: u64,
    links: Vec<Link>,
    wanted_connections: u16,
    opened_extra: bool,
    /// The initiator asked for session reinstatement; the new leading connection logs in once
    /// every old one is closed.
    reinstating: bool,
    /// The login of this link index reinstates the session.
    reinstate_link: Option<usize>,
    /// Links whose login replaces a failed connection with its CID (ErrorRecoveryLevel 2
    /// connection recovery), by link index.
    recovery_links: Vec<(usize, u16)>,
    /// Connections lost to faults (not logged out).
    pub(crate) lost_connections: u64,
    /// Commands of sessions that were reinstated (the monitor starts over with each).
    retired_commands: u64,
    faults: Faults,
    isid: Isid,
    tsih: Tsih,
    // The target.
    registry: SessionRegistry<()>,
    tsession: Option<TargetSession>,
    /// The target session's place in the table.
    session_ref: Option<sluice_proto::target::registry::SessionRef>,
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
    /// The connections that joined the session, as their logins settled them.
    joins: Vec<crate::JoinedConnection>,
    /// Totals of the iSER connections that ended (the live ones are added at the end).
    iser_counts: crate::IserCounts,
    /// A deliberate datamover bug, for the tests that show the monitors catch one.
    #[cfg(test)]
    pub(crate) sabotage: iser::Sabotage,
}

/// The target's bound on read data kept for resending: the default, or small enough that the
/// window stops opening for it often. Drawn from a stream of its own so that adding it left
/// every other choice of a seed as it was (the workloads and faults of earlier findings).
fn retained_bytes_bound(seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7265_7461_696e_6564);
    if rng.gen_bool(0.5) {
        target::RecoveryConfig::default().max_retained_bytes
    } else {
        log_uniform(&mut rng, 1 << 10, 1 << 20) as usize
    }
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
        let mut t_offer = random_offer(&mut rng, target_max_connections, MAX_ERROR_RECOVERY_LEVEL);
        // The target's own offer of MaxConnections is what it accepts at most.
        t_offer.max_connections = target_max_connections;
        let mut i_offer = random_offer(&mut rng, wanted_connections, MAX_ERROR_RECOVERY_LEVEL);
        if cfg.transport == Transport::Iser {
            iser::adapt_offers(&mut t_offer, &mut i_offer);
        }
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
            recovery: target::RecoveryConfig {
                data_ack_every: rng.gen_bool(0.5).then(|| rng.gen_range(1..=8)),
                // From shorter than a transfer takes (spurious recovery R2Ts) to long.
                sequence_timeout: Duration::from_nanos(log_uniform(
                    &mut rng,
                    20_000_000,
                    5_000_000_000,
                )),
                max_retained_statuses: log_uniform(&mut rng, 16, 1024) as usize,
                max_retained_bytes: retained_bytes_bound(cfg.seed),
            },
        };
        let i_config = initiator::SessionConfig {
            policy,
            max_retries: 3,
            keepalive: keepalive(&mut rng),
            recovery: initiator::RecoveryConfig {
                retry_timeout: Duration::from_nanos(log_uniform(
                    &mut rng,
                    20_000_000,
                    5_000_000_000,
                )),
                max_command_retries: 16,
                // Virtual time: long enough for any fault the seed draws to be recovered
                // from, unless the link cannot carry a PDU whole any more.
                command_timeout: Some(Duration::from_secs(300)),
            },
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
        // Drawn last, so that a seed's session is the same with and without faults.
        let faults = match cfg.faults {
            FaultChoice::FromSeed if cfg.transport == Transport::Iser => {
                Faults::random_iser(&mut rng)
            }
            FaultChoice::FromSeed => Faults::random(&mut rng),
            FaultChoice::Off => Faults::none(),
        };
        Self {
            cfg,
            rng,
            base: Instant::now(),
            now: 0,
            steps: 0,
            last_progress: 0,
            links: Vec::new(),
            wanted_connections,
            opened_extra: false,
            reinstating: false,
            reinstate_link: None,
            recovery_links: Vec::new(),
            session_ref: None,
            lost_connections: 0,
            retired_commands: 0,
            faults,
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
            joins: Vec::new(),
            iser_counts: crate::IserCounts::default(),
            #[cfg(test)]
            sabotage: iser::Sabotage::None,
        }
    }

    /// The session's ErrorRecoveryLevel (0 before it is known).
    pub(super) fn session_erl(&self) -> u8 {
        self.leading_params.map_or(0, |p| p.error_recovery_level)
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
            faults: self.cfg.faults,
            transport: self.cfg.transport,
            at_ns: self.now,
            what: what.into(),
        }
    }

    /// Runs to the end: the session logged out and every connection closed.
    pub(crate) fn run(mut self) -> Result<Summary, Violation> {
        self.open_connection(0)?;
        loop {
            self.steps += 1;
            let limit = if self.ended {
                TIME_LIMIT_NS + TARGET_GRACE_NS
            } else {
                TIME_LIMIT_NS
            };
            let stuck = !self.ended && self.now - self.last_progress > PROGRESS_LIMIT_NS;
            if self.steps > STEP_LIMIT || self.now > limit || stuck {
                if self.cfg.trace {
                    if let Some(s) = &self.isession {
                        eprintln!(
                            "initiator window {:?}, {} in flight, {} waiting, requests {}",
                            s.command_window(),
                            s.in_flight(),
                            s.waiting(),
                            s.describe_requests()
                        );
                    }
                    if let Some(s) = &self.tsession {
                        eprintln!(
                            "target window {:?}, {} bytes of read data kept; tasks {}",
                            s.command_window(),
                            s.retained_bytes(),
                            s.describe_tasks()
                        );
                    }
                    eprintln!("workload: {}", self.workload.describe());
                }
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
                if self.cfg.trace {
                    eprintln!(
                        "initiator window {:?}, target window {:?}",
                        self.isession.as_ref().map(InitiatorSession::command_window),
                        self.tsession.as_ref().map(TargetSession::command_window)
                    );
                    if let Some(s) = &self.isession {
                        eprintln!("initiator requests: {}", s.describe_requests());
                    }
                    if let Some(s) = &self.tsession {
                        eprintln!("target tasks: {}", s.describe_tasks());
                    }
                    eprintln!("workload: {}", self.workload.describe());
                    for (n, l) in self.links.iter().enumerate() {
                        eprintln!(
                            "link {n}: cid {} i.closed {} i.broken {} i.login {} i.conn {:?} t.closed {} t.login {} t.conn {:?}; reinstating {} {:?}",
                            l.cid, l.i.closed, l.i.broken, l.i.login.is_some(), l.i.conn, l.t.closed,
                            l.t.login.is_some(), l.t.conn, self.reinstating, self.reinstate_link
                        );
                    }
                }
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
                if self.workload.faulty {
                    // Under faults the target may close a connection the initiator still
                    // uses (its NOP-In timed out after a corrupted stream it could not
                    // frame): lost like a reset. Without faults the initiator's own checks
                    // decide.
                    self.lost_connections += 1;
                    self.workload.lossy |= self.session_erl() < 2;
                    self.workload.connections_lost = true;
                }
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
        // A session without connections (its tasks waited for connection recovery) ends
        // when its last task does.
        self.end_target_session_if_over();
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
                if self.cfg.trace && !matches!(c, initiator::Completion::Command(_, Ok(_))) {
                    eprintln!("{:>12} initiator completion {c:?}", self.now);
                }
                self.last_progress = self.now;
                self.workload.complete(c).map_err(|e| self.violation(e))?;
            }
            while let Some(e) = self
                .isession
                .as_mut()
                .and_then(InitiatorSession::poll_event)
            {
                moved = true;
                if self.cfg.trace {
                    eprintln!("{:>12} initiator event {e:?}", self.now);
                }
                match e {
                    initiator::Event::Close(conn, reason) => {
                        let i = self.link_of_initiator(conn)?;
                        if reason == initiator::CloseReason::Logout {
                            // A logout's last PDUs still go out.
                            self.initiator_transmit(i)?;
                        } else if !self.links[i].i.closed {
                            self.lost_connections += 1;
                            self.workload.lossy |= self.session_erl() < 2;
                            self.workload.connections_lost = true;
                        }
                        self.links[i].up.close();
                        self.initiator_closed(i);
                    }
                    initiator::Event::Reinstate => self.reinstating = true,
                    initiator::Event::RecoverConnection { cid } => {
                        // Connection recovery (RFC 7143 section 6.3.4): a login with the
                        // session's TSIH and the failed connection's CID.
                        self.recovery_links.push((self.links.len(), cid));
                        self.open_connection(cid)?;
                    }
                    initiator::Event::Ended => {
                        self.ended = true;
                        // A session whose logout lost its connection is over all the same.
                        self.workload.logged_out |= self.workload.lossy;
                    }
                }
            }
            moved |= self.reinstate_when_closed()?;
            if !moved {
                return Ok(());
            }
        }
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
            return Err(self.violation(format!(
                "the workload did not finish: {}",
                self.workload.describe()
            )));
        }
        self.session_mon
            .check_contiguous()
            .map_err(|e| self.violation(e))?;
        let iser = self.iser_totals();
        self.check_iser_counts(&iser)?;
        Ok(Summary {
            seed: self.cfg.seed,
            connections: self.links.len() as u16,
            policy: self.i_config.policy,
            params: self.leading_params.unwrap_or_default(),
            queue_depth: self.t_config.queue_depth,
            commands: self.retired_commands + self.session_mon.commands() as u64,
            counts: self.workload.counts,
            pdus: self.pdus,
            bytes: self.links.iter().map(|l| l.up.bytes + l.down.bytes).sum(),
            virtual_ns: self.now,
            events: self.steps,
            faults: self.faults.mode,
            lost_connections: self.lost_connections,
            transport: self.cfg.transport,
            iser,
            joins: self.joins,
        })
    }
}
