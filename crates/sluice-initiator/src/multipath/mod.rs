//! A multipath device: one logical unit reached through several sessions, one per portal
//! (target port), with ALUA (SPC-4 5.15) deciding which paths carry the I/O.
//!
//! - Every path logs in to the same target name; its Device Identification VPD page must
//!   name the same logical unit (the same designators) as the first path's, or it is refused.
//! - Each path's access state comes from REPORT TARGET PORT GROUPS read through that path
//!   (so gateways that each report only their own group work as well as one array that
//!   reports all of them). Commands go round-robin over the up paths of the best state:
//!   active/optimized, else active/non-optimized ([`policy::Selector`]).
//! - ASYMMETRIC ACCESS STATE CHANGED, a transitioning group or a port in standby/unavailable
//!   (sense in [`policy::classify`]) makes it re-read the states and send the command again.
//!   While paths are up but none serves I/O, the states are polled, and a standby group is
//!   asked to become active/optimized ([`MultipathOptions::activate_standby`]).
//! - A path that fails (connection lost: its session does not reconnect by itself, so the
//!   failure shows at once; a command timeout) is taken out; the commands it had in flight
//!   are resent on another path if they are idempotent ([`policy::retry_safe`]), and fail
//!   with [`Error::NotResent`] otherwise (COMPARE AND WRITE, PERSISTENT RESERVE OUT: the
//!   first attempt may have run). Only commands whose ending the caller has not seen are ever
//!   resent. A background task logs the path in again; it rejoins with its identity checked
//!   and its state re-read.
//!
//! ```no_run
//! use sluice_initiator::multipath::{Multipath, MultipathOptions};
//! # async fn f() -> Result<(), sluice_initiator::Error> {
//! let portals = vec!["10.0.0.1:3260".to_owned(), "10.0.0.2:3260".to_owned()];
//! let mp = Multipath::connect(&portals, "iqn.2026-11.io.sluice:default", 0,
//!     MultipathOptions::default()).await?;
//! let block = mp.read_capacity().await?.block_size;
//! let data = mp.read(0, 1, block).await?;
//! for p in mp.path_stats() { println!("{} {} {}", p.portal, p.state.map_or("unknown", |s| s.name()), p.commands); }
//! # Ok(()) }
//! ```

mod identity;
mod path;
pub mod policy;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_scsi::{cdb, SenseKey};
use tokio::sync::Notify;

use crate::command::{Command, CommandOutcome};
use crate::discovery::discover;
use crate::error::Error;
use crate::options::ConnectOptions;
use crate::scsi::Capacity;
use crate::session::Session;

pub use identity::{
    parse_device_identification, parse_report_target_port_groups, report_target_port_groups_cdb,
    state_of, Designator, PathIdentity, PortGroup,
};
use path::Path;
pub use path::PathStats;
use policy::{classify, retry_safe, AluaState, PathView, Selector, Verdict};

/// How often the ALUA states are read again while no path serves I/O.
const STATE_POLL: Duration = Duration::from_millis(500);
/// The least time between two attempts to activate a standby group.
const ACTIVATE_INTERVAL: Duration = Duration::from_secs(2);
/// ALUA re-reads one command may cause before its outcome goes to the caller as it is.
const MAX_ALUA_RETRIES: u32 = 8;
/// How long a command waits before resending to a transitioning group (SPC-4 5.15.2.7 leaves
/// the duration to the device; this is a poll, bounded by [`MAX_ALUA_RETRIES`]).
const TRANSITION_POLL: Duration = Duration::from_millis(200);

/// How a multipath device connects and fails over.
#[derive(Clone, Debug)]
pub struct MultipathOptions {
    /// The options of every path's session. Its `max_reconnects` is set to 0: a path's
    /// session does not log in again by itself, so that its failure shows at once and its
    /// commands move to another path; the device logs failed paths in again in the
    /// background.
    pub connect: ConnectOptions,
    /// The pause between attempts to log a failed path in again.
    pub reconnect_interval: Duration,
    /// How long a command waits for a usable path when none is up.
    pub path_wait: Duration,
    /// Most paths one command is sent on after path failures.
    pub max_attempts: u32,
    /// When every path that is up is in standby, ask the target to make one of their groups
    /// active/optimized (SET TARGET PORT GROUPS, explicit ALUA), as Linux's ALUA device
    /// handler does. It changes the state for every initiator of the LU.
    pub activate_standby: bool,
}

impl Default for MultipathOptions {
    fn default() -> Self {
        Self::for_paths(ConnectOptions::default())
    }
}

impl MultipathOptions {
    /// Options whose paths log in with `connect` (CHAP, digests, offers...), with the
    /// timers that find a failed path made shorter: a path that stops answering without
    /// closing (a cable pulled, a host frozen) is found by keepalive pings after 4 s without
    /// a PDU from the target and 4 s more unanswered, so within 8 s, where a single-path
    /// session waits 30 s + 15 s (dm-multipath's users likewise shorten open-iscsi's NOP-Out
    /// timeouts to about 5 s so that a path fails well before the I/O above it times out);
    /// connecting and logging in get 5 s each.
    pub fn for_paths(connect: ConnectOptions) -> Self {
        let connect = ConnectOptions {
            keepalive_interval: Some(Duration::from_secs(4)),
            keepalive_timeout: Duration::from_secs(4),
            connect_timeout: Duration::from_secs(5),
            login_timeout: Duration::from_secs(5),
            max_reconnects: 0,
            ..connect
        };
        Self {
            connect,
            reconnect_interval: Duration::from_secs(1),
            path_wait: Duration::from_secs(30),
            max_attempts: 8,
            activate_standby: true,
        }
    }
}

/// When commands completed, for the failover measurements.
#[derive(Debug, Default)]
struct Timing {
    last_completion: Option<Instant>,
    longest_pause: Duration,
    /// When a path last failed, while no command has completed since.
    failed_at: Option<Instant>,
    failover_times: Vec<Duration>,
}

/// A logical unit reached through several paths. Cheap to clone: every clone drives the
/// same paths, from any number of tasks at once.
#[derive(Clone, Debug)]
pub struct Multipath {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    target: String,
    lun: u16,
    opts: MultipathOptions,
    paths: Vec<Path>,
    /// The LU designators every path must report (the first path's).
    lu: Mutex<Option<Vec<Designator>>>,
    selector: Mutex<Selector>,
    /// Raised when a path comes up or its state changes.
    changed: Notify,
    /// Serialises ALUA re-reads.
    reread_lock: tokio::sync::Mutex<()>,
    /// Re-reads done, so that a caller skips one that ran while it waited for the lock.
    rereads: AtomicU64,
    /// Serialises state polls and activations while no path serves.
    poll_lock: tokio::sync::Mutex<()>,
    last_poll: Mutex<Option<Instant>>,
    last_activation: Mutex<Option<Instant>>,
    /// Completion timing: failovers and the longest pause.
    timing: Mutex<Timing>,
    closed: AtomicBool,
}

impl Multipath {
    /// Logs in to `target` through every portal (`host:port`) and checks that all reach the
    /// same LU `lun`. Portals that cannot be reached now are retried in the background; at
    /// least one must log in.
    pub async fn connect(
        portals: &[String],
        target: &str,
        lun: u16,
        opts: MultipathOptions,
    ) -> Result<Self, Error> {
        if portals.is_empty() {
            return Err(Error::Option("multipath needs at least one portal".into()));
        }
        let mut opts = opts;
        opts.connect.max_reconnects = 0;
        let inner = Arc::new(Inner {
            target: target.to_owned(),
            lun,
            paths: portals.iter().map(|p| Path::new(p.clone())).collect(),
            opts,
            lu: Mutex::new(None),
            selector: Mutex::new(Selector::default()),
            changed: Notify::new(),
            reread_lock: tokio::sync::Mutex::new(()),
            rereads: AtomicU64::new(0),
            timing: Mutex::new(Timing::default()),
            poll_lock: tokio::sync::Mutex::new(()),
            last_poll: Mutex::new(None),
            last_activation: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        let mut first_error = None;
        for i in 0..inner.paths.len() {
            if let Err(e) = inner.login_path(i).await {
                tracing::warn!(portal = %inner.paths[i].portal, error = %e, "path not up");
                if matches!(e, Error::PathIdentity(_)) {
                    return Err(e);
                }
                inner.paths[i].lock().last_error = Some(e.to_string());
                first_error.get_or_insert(e);
                Inner::spawn_reconnect(&inner, i);
            }
        }
        if inner.paths.iter().all(|p| p.lock().session.is_none()) {
            inner.close();
            return Err(first_error.unwrap_or(Error::Closed));
        }
        Ok(Self { inner })
    }

    /// The portals SendTargets at `portal` lists for `target` (its TargetAddress values,
    /// RFC 7143 section 13.8, the portal group tags dropped), in the order given; `portal`
    /// itself when it lists none.
    pub async fn discover_portals(
        portal: &str,
        target: &str,
        opts: &ConnectOptions,
    ) -> Result<Vec<String>, Error> {
        let found = discover(portal, opts).await?;
        let t = found
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(target))
            .ok_or_else(|| Error::Option(format!("{portal} does not list target {target}")))?;
        let mut out: Vec<String> = Vec::new();
        for a in &t.addresses {
            let addr = a.rsplit_once(',').map_or(a.as_str(), |(addr, _)| addr);
            if !out.iter().any(|x| x == addr) {
                out.push(addr.to_owned());
            }
        }
        if out.is_empty() {
            out.push(portal.to_owned());
        }
        Ok(out)
    }

    /// The LUN every command addresses.
    pub fn lun(&self) -> u16 {
        self.inner.lun
    }

    /// The LU's NAA designator in hex, as the paths reported it.
    pub fn naa(&self) -> Option<String> {
        let lu = self.inner.lu.lock().unwrap_or_else(|p| p.into_inner());
        let id = PathIdentity {
            lu: lu.clone().unwrap_or_default(),
            ..PathIdentity::default()
        };
        id.naa_hex()
    }

    /// Every path's state and counters, in the order of the portals given.
    pub fn path_stats(&self) -> Vec<PathStats> {
        self.inner.paths.iter().map(Path::stats).collect()
    }

    /// For each failover so far: from the moment a path was found failed to the next command
    /// completing on another path.
    pub fn failover_times(&self) -> Vec<Duration> {
        self.inner.timing().failover_times.clone()
    }

    /// The longest time between two consecutive command completions so far: with a steady
    /// load, how long I/O stood still around a failover, the time to notice the failure
    /// included.
    pub fn longest_pause(&self) -> Duration {
        self.inner.timing().longest_pause
    }

    /// The session of the first path that is up (for its negotiated parameters).
    pub fn any_session(&self) -> Option<Session> {
        self.inner
            .paths
            .iter()
            .find_map(|p| p.lock().session.clone())
    }

    /// Runs a command on the best path, failing over as the module docs describe. A non-GOOD
    /// status is not an error here; see [`CommandOutcome::check`].
    pub async fn execute(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        let inner = &self.inner;
        let safe = retry_safe(&cmd.cdb);
        let (mut attempts, mut alua_retries, mut resend) = (0u32, 0u32, false);
        loop {
            let (i, session, generation) = inner.pick().await?;
            let path = &inner.paths[i];
            Path::add(&path.commands, 1);
            if resend {
                Path::add(&path.retries, 1);
            }
            let result = session.execute(cmd.clone()).await;
            drop(session);
            match result {
                Ok(out) => match classify(out.sense.as_ref()) {
                    Verdict::RereadAlua | Verdict::Transitioning
                        if alua_retries < MAX_ALUA_RETRIES =>
                    {
                        alua_retries += 1;
                        resend = true;
                        if classify(out.sense.as_ref()) == Verdict::Transitioning {
                            tokio::time::sleep(TRANSITION_POLL).await;
                        }
                        inner.reread_alua().await;
                    }
                    _ => {
                        if out.is_good() {
                            Path::add(&path.bytes, u64::from(cmd.edtl()));
                        }
                        inner.completed();
                        return Ok(out);
                    }
                },
                Err(e) if is_path_failure(&e) => {
                    Path::add(&path.errors, 1);
                    Inner::path_failed(inner, i, generation, &e);
                    if !safe {
                        return Err(Error::NotResent {
                            opcode: cmd.cdb.first().copied().unwrap_or(0),
                            portal: path.portal.clone(),
                            error: e.to_string(),
                        });
                    }
                    attempts += 1;
                    if attempts >= inner.opts.max_attempts.max(1) {
                        return Err(e);
                    }
                    resend = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs a command and fails unless its status is GOOD; UNIT ATTENTIONs other than the
    /// ALUA ones (a new I_T nexus's power-on condition) are retried a few times.
    pub async fn execute_good(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        crate::session::retry_unit_attention(|| self.execute(cmd.clone())).await
    }

    /// READ(16) of `blocks` blocks at `lba`.
    pub async fn read(&self, lba: u64, blocks: u32, block_size: u32) -> Result<Bytes, Error> {
        let len = blocks
            .checked_mul(block_size)
            .ok_or_else(|| Error::Option("read too large".into()))?;
        let cmd = Command::read(self.inner.lun, &cdb::read16(lba, blocks, false), len);
        Ok(self.execute_good(cmd).await?.data)
    }

    /// WRITE(16) of `data` (whole blocks) at `lba`.
    pub async fn write(&self, lba: u64, data: Bytes, block_size: u32) -> Result<(), Error> {
        if block_size == 0 || !data.len().is_multiple_of(block_size as usize) {
            return Err(Error::Option(format!(
                "write of {} bytes is not a multiple of the block size {block_size}",
                data.len()
            )));
        }
        let blocks = u32::try_from(data.len() / block_size as usize)
            .map_err(|_| Error::Option("write too large".into()))?;
        let cmd = Command::write(self.inner.lun, &cdb::write16(lba, blocks, false), data);
        self.execute_good(cmd).await.map(drop)
    }

    /// READ CAPACITY(16).
    pub async fn read_capacity(&self) -> Result<Capacity, Error> {
        let cmd = Command::read(self.inner.lun, &cdb::read_capacity16(32), 32);
        crate::scsi::parse_read_capacity16(&self.execute_good(cmd).await?.data)
    }

    /// Stops the reconnect tasks and logs every path out.
    pub async fn close(&self) {
        self.inner.close();
        let sessions: Vec<Session> = self
            .inner
            .paths
            .iter()
            .filter_map(|p| p.lock().session.take())
            .collect();
        for s in sessions {
            let _ = s.logout().await;
        }
    }
}

/// Errors that mean the path, not the command, failed: the command's fate is unknown.
fn is_path_failure(e: &Error) -> bool {
    matches!(
        e,
        Error::ConnectionLost { .. }
            | Error::Closed
            | Error::Io { .. }
            | Error::Connect { .. }
            | Error::Timeout(_)
            | Error::Frame(_)
    )
}

impl Inner {
    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// The path for the next command, waiting up to `path_wait` for one to come up.
    async fn pick(&self) -> Result<(usize, Session, u64), Error> {
        let deadline = tokio::time::Instant::now() + self.opts.path_wait;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.closed.load(Ordering::Relaxed) {
                return Err(Error::Closed);
            }
            if let Some(found) = self.try_pick() {
                return Ok(found);
            }
            // Paths are up but none serves I/O (standby, unavailable, transitioning): a
            // group's state can change without this nexus being told (SPC-4 5.15.2.3 raises
            // the unit attention only when a command reaches it, and none is sent to such a
            // path), so the states are polled, and a standby group activated.
            if self.paths.iter().any(|p| p.lock().session.is_some()) {
                self.poll_or_activate().await;
                if let Some(found) = self.try_pick() {
                    return Ok(found);
                }
            }
            let wake = deadline.min(tokio::time::Instant::now() + STATE_POLL);
            if tokio::time::timeout_at(wake, changed).await.is_err()
                && tokio::time::Instant::now() >= deadline
            {
                return Err(Error::NoPath(self.no_path_message()));
            }
        }
    }

    fn no_path_message(&self) -> String {
        let why: Vec<String> = self
            .paths
            .iter()
            .map(|p| {
                let s = p.lock();
                let up = if s.session.is_some() { "up" } else { "down" };
                let state = s.state.map_or("state unknown", AluaState::name);
                format!("{} ({up}, {state})", p.portal)
            })
            .collect();
        format!(
            "no path could serve I/O for {:?}: {}",
            self.opts.path_wait,
            why.join(", ")
        )
    }

    /// With no path serving: reads the states again (at most every [`STATE_POLL`]) and, if
    /// allowed and still none serves, asks one standby group whose port takes explicit ALUA
    /// to become active/optimized with SET TARGET PORT GROUPS (SPC-4 6.44), at most every
    /// [`ACTIVATE_INTERVAL`], as Linux's ALUA device handler activates a standby path.
    async fn poll_or_activate(&self) {
        let _one_at_a_time = self.poll_lock.lock().await;
        let now = Instant::now();
        {
            let mut last = self.last_poll.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now - t < STATE_POLL) {
                return;
            }
            *last = Some(now);
        }
        self.reread_alua().await;
        if !self.opts.activate_standby || self.try_pick().is_some() {
            return;
        }
        {
            let mut last = self
                .last_activation
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| now - t < ACTIVATE_INTERVAL) {
                return;
            }
            *last = Some(now);
        }
        let candidate = self.paths.iter().find_map(|p| {
            let s = p.lock();
            let group = s.identity.as_ref().and_then(|i| i.port_group)?;
            (s.state == Some(AluaState::Standby) && s.explicit_alua)
                .then(|| (p, s.session.clone(), group))
        });
        let Some((path, Some(session), group)) = candidate else {
            return;
        };
        let [hi, lo] = group.to_be_bytes();
        let list = vec![0u8, 0, 0, 0, 0x00, 0, hi, lo];
        let mut cdb = [0u8; 12];
        cdb[0] = 0xa4;
        cdb[1] = 0x0a;
        cdb[6..10].copy_from_slice(&(list.len() as u32).to_be_bytes());
        match session
            .execute_good(Command::write(self.lun, &cdb, list))
            .await
        {
            Ok(_) => {
                tracing::info!(portal = %path.portal, group, "activated a standby target port group");
                self.reread_alua().await;
            }
            Err(e) => {
                tracing::warn!(portal = %path.portal, group, error = %e, "SET TARGET PORT GROUPS failed");
            }
        }
    }

    fn try_pick(&self) -> Option<(usize, Session, u64)> {
        let views: Vec<PathView> = self
            .paths
            .iter()
            .map(|p| {
                let s = p.lock();
                PathView {
                    up: s.session.is_some(),
                    state: s.state.unwrap_or(AluaState::Unavailable),
                }
            })
            .collect();
        let i = self
            .selector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .choose(&views)?;
        let s = self.paths[i].lock();
        Some((i, s.session.clone()?, s.generation))
    }

    fn timing(&self) -> std::sync::MutexGuard<'_, Timing> {
        self.timing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A command completed: closes the measurement of a pending failover.
    fn completed(&self) {
        let now = Instant::now();
        let mut t = self.timing();
        if let Some(last) = t.last_completion.replace(now) {
            t.longest_pause = t.longest_pause.max(now - last);
        }
        if let Some(at) = t.failed_at.take() {
            t.failover_times.push(now - at);
        }
    }

    /// Takes path `i` out (unless a newer login replaced the session that failed) and
    /// starts logging it in again.
    fn path_failed(this: &Arc<Self>, i: usize, generation: u64, e: &Error) {
        let path = &this.paths[i];
        let session = {
            let mut s = path.lock();
            if s.generation != generation || s.session.is_none() {
                return;
            }
            s.last_error = Some(e.to_string());
            s.session.take()
        };
        Path::add(&path.failovers, 1);
        tracing::warn!(portal = %path.portal, error = %e, "path failed; its I/O moves to the others");
        this.timing().failed_at.get_or_insert_with(Instant::now);
        drop(session);
        Self::spawn_reconnect(this, i);
        this.changed.notify_waiters();
    }

    /// Logs path `i` in again every `reconnect_interval` until it succeeds or the device
    /// closes.
    fn spawn_reconnect(this: &Arc<Self>, i: usize) {
        {
            let mut s = this.paths[i].lock();
            if s.reconnecting {
                return;
            }
            s.reconnecting = true;
        }
        let weak: Weak<Self> = Arc::downgrade(this);
        let interval = this.opts.reconnect_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.load(Ordering::Relaxed) {
                    return;
                }
                let path = &inner.paths[i];
                match inner.login_path(i).await {
                    Ok(()) => {
                        Path::add(&path.reconnects, 1);
                        path.lock().reconnecting = false;
                        tracing::info!(portal = %path.portal, "path rejoined");
                        inner.changed.notify_waiters();
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(portal = %path.portal, error = %e, "path still down");
                        path.lock().last_error = Some(e.to_string());
                    }
                }
            }
        });
    }

    /// Logs path `i` in, checks its identity, reads its ALUA state and puts it in service.
    async fn login_path(&self, i: usize) -> Result<(), Error> {
        let path = &self.paths[i];
        let session =
            Session::connect(&path.portal, &self.target, self.opts.connect.clone()).await?;
        // The power-on UNIT ATTENTION of the new I_T nexus is cleared here (execute_good
        // retries it), before the path takes I/O.
        session.test_unit_ready(self.lun).await.or_else(|e| {
            // A standby or unavailable port refuses media access but still identifies.
            match e.sense() {
                Some(s) if s.key == SenseKey::NOT_READY => Ok(()),
                _ => Err(e),
            }
        })?;
        // Standard INQUIRY byte 5, TPGS (SPC-4 6.6.2): 10b or 11b, explicit ALUA (SET TARGET
        // PORT GROUPS) is supported.
        let inquiry = session
            .execute_good(Command::read(self.lun, &cdb::inquiry(None, 36), 36))
            .await?;
        let explicit_alua = inquiry.data.get(5).is_some_and(|b| b & 0x20 != 0);
        let page = session.vpd(self.lun, 0x83).await?;
        let identity = parse_device_identification(&page)?;
        self.check_identity(&path.portal, &identity)?;
        let state = read_state(&session, self.lun, &identity).await?;
        let mut s = path.lock();
        s.generation += 1;
        s.session = Some(session);
        s.identity = Some(identity);
        s.state = Some(state);
        s.explicit_alua = explicit_alua;
        s.last_error = None;
        Ok(())
    }

    /// Refuses a path to another LU (different LU designators), and warns about a path that
    /// reports the same target port as another (the same port twice is no redundancy).
    fn check_identity(&self, portal: &str, id: &PathIdentity) -> Result<(), Error> {
        {
            let mut lu = self.lu.lock().unwrap_or_else(|p| p.into_inner());
            match lu.as_ref() {
                None => *lu = Some(id.lu.clone()),
                Some(first) if *first != id.lu => {
                    return Err(Error::PathIdentity(format!(
                        "{portal} reaches a different logical unit (NAA {}) than the other paths",
                        id.naa_hex().unwrap_or_else(|| "none".into())
                    )))
                }
                Some(_) => {}
            }
        }
        for other in &self.paths {
            if other.portal == portal {
                continue;
            }
            let same = other.lock().identity.as_ref().is_some_and(|o| {
                o.relative_port.is_some()
                    && (o.relative_port, o.port_group) == (id.relative_port, id.port_group)
            });
            if same {
                tracing::warn!(
                    portal,
                    other = %other.portal,
                    "both portals report the same target port and group: one port, not two paths"
                );
            }
        }
        Ok(())
    }

    /// Reads every up path's ALUA state again (one re-read at a time; a caller that waited
    /// while another ran uses its result).
    async fn reread_alua(&self) {
        let seen = self.rereads.load(Ordering::Acquire);
        let _one_at_a_time = self.reread_lock.lock().await;
        if self.rereads.load(Ordering::Acquire) != seen {
            return;
        }
        for path in &self.paths {
            let (session, identity) = {
                let s = path.lock();
                match (&s.session, &s.identity) {
                    (Some(session), Some(id)) => (session.clone(), id.clone()),
                    _ => continue,
                }
            };
            match read_state(&session, self.lun, &identity).await {
                Ok(state) => path.lock().state = Some(state),
                Err(e) => {
                    tracing::debug!(portal = %path.portal, error = %e, "ALUA re-read failed");
                }
            }
        }
        self.rereads.fetch_add(1, Ordering::Release);
        self.changed.notify_waiters();
    }
}

/// The path's access state from REPORT TARGET PORT GROUPS read through it. A target without
/// ALUA (the command refused: ILLEGAL REQUEST) is symmetric: every port active/optimized.
async fn read_state(session: &Session, lun: u16, id: &PathIdentity) -> Result<AluaState, Error> {
    const ALLOC: u32 = 4096;
    let cmd = Command::read(lun, &report_target_port_groups_cdb(ALLOC), ALLOC);
    match session.execute_good(cmd).await {
        Ok(out) => {
            let groups = parse_report_target_port_groups(&out.data)?;
            Ok(state_of(&groups, id).unwrap_or(AluaState::ActiveOptimized))
        }
        Err(e)
            if e.sense()
                .is_some_and(|s| s.key == SenseKey::ILLEGAL_REQUEST) =>
        {
            Ok(AluaState::ActiveOptimized)
        }
        Err(e) => Err(e),
    }
}
