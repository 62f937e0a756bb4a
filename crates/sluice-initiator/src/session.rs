//! The async [`Session`] handle: cloneable, `&self` methods, usable from many tasks at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proto::initiator::{
    CommandResult, ConnId, ConnectionStats, InitiatorSession, SessionConfig, TaskId,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::{TmfFunction, TmfResponse};
use sluice_proto::seq::{Isid, Lun};
use sluice_scsi::{cdb, SenseKey};
use tokio::sync::{mpsc, oneshot};

use crate::command::{Command, CommandOutcome};
use crate::counters::{Counters, SessionCounters};
use crate::driver::{Info, Key, Shared, Waiter};
use crate::error::Error;
use crate::login::{login, random_isid};
use crate::options::ConnectOptions;
use crate::scsi::{self, Capacity, StandardInquiry};
use crate::supervisor::{open_extra_connections, setup_of, supervise};
use crate::url::IscsiUrl;

/// How often [`Session::execute_good`] repeats a command that met a UNIT ATTENTION.
pub const UNIT_ATTENTION_RETRIES: u32 = 4;

/// Runs a command through `run` until it meets no UNIT ATTENTION, at most
/// [`UNIT_ATTENTION_RETRIES`] times more, and fails unless the last status is GOOD: the
/// `execute_good` of a session and of a multipath device.
pub(crate) async fn retry_unit_attention<F, Fut>(mut run: F) -> Result<CommandOutcome, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<CommandOutcome, Error>>,
{
    let mut left = UNIT_ATTENTION_RETRIES;
    loop {
        let out = run().await?;
        let ua = out
            .sense
            .as_ref()
            .is_some_and(|s| s.key == SenseKey::UNIT_ATTENTION);
        if !ua || left == 0 {
            return out.check();
        }
        left -= 1;
    }
}

/// A logged-in normal session, over one or more connections (MC/S).
///
/// Cheap to clone; every clone drives the same session, so many tasks can have commands in
/// flight at once (up to the target's CmdSN window; the rest queue in order). With
/// [`ConnectOptions::connections`] above 1 the session opens that many connections (as many
/// as the target's MaxConnections allows) and spreads commands over them by
/// [`ConnectOptions::policy`]. The session logs out when the last clone is dropped, or
/// explicitly with [`logout`](Self::logout).
///
/// ```no_run
/// use sluice_initiator::{IscsiUrl, Session};
/// # async fn f() -> Result<(), sluice_initiator::Error> {
/// let url = IscsiUrl::parse("iscsi://127.0.0.1/iqn.2026-11.io.sluice:default/0")?;
/// let session = Session::connect_url(&url).await?;
/// let cap = session.read_capacity(0).await?;
/// let first = session.read(0, 0, 1, cap.block_size).await?;
/// assert_eq!(first.len(), cap.block_size as usize);
/// println!("{:?}", session.counters().latency_us.mean());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    shared: Arc<Shared>,
    _handles: Arc<Handles>,
    target: Arc<str>,
}

/// Logs the session out when the last [`Session`] clone goes.
#[derive(Debug)]
struct Handles(Arc<Shared>);

impl Drop for Handles {
    fn drop(&mut self) {
        let mut core = self.0.lock();
        if core.connections().next().is_some() {
            let _ = core.logout();
            self.0.after(&mut core, None);
        }
    }
}

/// A command in flight, from [`Session::start`]: its id names it in task management.
#[derive(Debug)]
pub struct InFlight {
    id: TaskId,
    rx: oneshot::Receiver<Result<CommandResult, Error>>,
}

impl InFlight {
    /// The id [`Session::task_management`] takes for ABORT TASK.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Waits for the command to end.
    pub async fn wait(self) -> Result<CommandOutcome, Error> {
        let result = self.rx.await.map_err(|_| Error::Closed)??;
        Ok(CommandOutcome::from_result(result))
    }
}

impl Session {
    /// Logs in to the target named in `url` (its CHAP user/secret and query options apply).
    pub async fn connect_url(url: &IscsiUrl) -> Result<Self, Error> {
        let opts = ConnectOptions::from_url(url)?;
        Self::connect_url_with(url, opts).await
    }

    /// Logs in to the target named in `url` with explicit options.
    pub async fn connect_url_with(url: &IscsiUrl, opts: ConnectOptions) -> Result<Self, Error> {
        let target = url
            .target
            .as_deref()
            .ok_or_else(|| Error::Option(format!("{url}: the URL names no target IQN")))?;
        let mut opts = opts;
        if url.udp && opts.udp.is_none() {
            opts.use_udp(sluice_udp::UdpConfig::default());
        }
        if url.iser && opts.iser.is_none() {
            opts.use_iser(crate::iser::IserOptions::default());
        }
        Self::connect(&url.portal(), target, opts).await
    }

    /// Logs in to `target` at `portal` (`host:port`), then opens the other connections
    /// [`ConnectOptions::connections`] asks for. Must run inside a tokio runtime: the
    /// connections' tasks are spawned onto it.
    pub async fn connect(portal: &str, target: &str, opts: ConnectOptions) -> Result<Self, Error> {
        let mut opts = opts;
        if opts.connections > opts.offer.max_connections {
            opts.offer.max_connections = opts.connections;
        }
        let counters = Counters::default();
        let isid = opts.isid.map(Isid).unwrap_or_else(random_isid);
        let logged = login(
            portal.to_owned(),
            Some(target),
            isid,
            None,
            &opts,
            &counters,
        )
        .await?;
        let info = Info {
            params: logged.outcome.params,
            tsih: logged.outcome.tsih.0,
            portal: logged.transport.portal.clone(),
            target_alias: logged.outcome.target_alias.clone(),
            iser: logged.transport.iser_settled(),
        };
        let config = SessionConfig {
            policy: opts.policy,
            max_retries: opts.max_retries,
            keepalive: opts.keepalive_interval.map(|i| (i, opts.keepalive_timeout)),
            recovery: opts.recovery,
        };
        let (core, id) = InitiatorSession::new(config, setup_of(&logged, 0), Instant::now());
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(
            core,
            info,
            opts,
            target.to_owned(),
            isid,
            counters,
            tx,
        ));
        shared.spawn_connection(id, logged.transport);
        tokio::spawn(supervise(Arc::clone(&shared), rx));
        open_extra_connections(&shared).await;
        Ok(Self {
            _handles: Arc::new(Handles(Arc::clone(&shared))),
            shared,
            target: target.into(),
        })
    }

    /// The target's name.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The negotiated operational parameters (RFC 7143 section 13) of the leading connection.
    pub fn params(&self) -> SessionParams {
        self.info().params
    }

    /// The TSIH the target assigned, the portal logged in to (after redirects) and the
    /// TargetAlias, if any.
    pub fn login_info(&self) -> (u16, String, Option<String>) {
        let s = self.info();
        (s.tsih, s.portal, s.target_alias)
    }

    fn info(&self) -> Info {
        self.shared
            .info
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A snapshot of the session's counters.
    pub fn counters(&self) -> SessionCounters {
        let stats = self.shared.lock().stats();
        let mut c = self.shared.counters.snapshot();
        c.commands_retried = stats.retried;
        c.rejects = stats.rejects;
        c.async_messages = stats.async_messages;
        c.max_in_flight = stats.max_in_flight;
        c.reassigned = stats.reassigned;
        c
    }

    /// Counters of each connection (its CID, commands, bytes), for reports.
    pub fn connections(&self) -> Vec<ConnectionStats> {
        self.shared.lock().connection_stats()
    }

    /// Starts any command; [`InFlight::wait`] collects its outcome, and its id names it in
    /// [`Session::task_management`].
    pub fn start(&self, cmd: Command) -> InFlight {
        let (id, rx) = self.shared.submit(cmd.into_core());
        InFlight { id, rx }
    }

    /// Runs any command. A non-GOOD status is not an error here; see
    /// [`CommandOutcome::check`].
    pub async fn execute(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        self.start(cmd).wait().await
    }

    /// Runs a command and fails unless the status is GOOD. A UNIT ATTENTION (e.g. the
    /// power-on condition every new I_T nexus sees, SAM-5 5.14) is retried up to
    /// [`UNIT_ATTENTION_RETRIES`] times, as operating system initiators do.
    pub async fn execute_good(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        retry_unit_attention(|| self.execute(cmd.clone())).await
    }

    /// Reads `blocks` blocks at `lba` with READ(16).
    pub async fn read(
        &self,
        lun: u16,
        lba: u64,
        blocks: u32,
        block_size: u32,
    ) -> Result<Bytes, Error> {
        let len = blocks
            .checked_mul(block_size)
            .ok_or_else(|| Error::Option("read too large".into()))?;
        let cmd = Command::read(lun, &cdb::read16(lba, blocks, false), len);
        Ok(self.execute_good(cmd).await?.data)
    }

    /// Writes `data` (a whole number of blocks) at `lba` with WRITE(16).
    pub async fn write(
        &self,
        lun: u16,
        lba: u64,
        data: Bytes,
        block_size: u32,
    ) -> Result<(), Error> {
        if block_size == 0 || !data.len().is_multiple_of(block_size as usize) {
            return Err(Error::Option(format!(
                "write of {} bytes is not a multiple of the block size {block_size}",
                data.len()
            )));
        }
        let blocks = u32::try_from(data.len() / block_size as usize)
            .map_err(|_| Error::Option("write too large".into()))?;
        let cmd = Command::write(lun, &cdb::write16(lba, blocks, false), data);
        self.execute_good(cmd).await.map(drop)
    }

    /// Standard INQUIRY data, decoded.
    pub async fn inquiry(&self, lun: u16) -> Result<StandardInquiry, Error> {
        let out = self
            .execute_good(Command::read(lun, &cdb::inquiry(None, 255), 255))
            .await?;
        scsi::parse_standard_inquiry(&out.data)
    }

    /// A VPD page (INQUIRY with EVPD=1): the page body after its 4-byte header.
    pub async fn vpd(&self, lun: u16, page: u8) -> Result<Bytes, Error> {
        let cmd = Command::read(lun, &cdb::inquiry(Some(page), 4096), 4096);
        let data = self.execute_good(cmd).await?.data;
        scsi::vpd_body(&data, page)
    }

    /// READ CAPACITY(16), falling back to READ CAPACITY(10) when the target refuses it.
    pub async fn read_capacity(&self, lun: u16) -> Result<Capacity, Error> {
        let out = self
            .execute(Command::read(lun, &cdb::read_capacity16(32), 32))
            .await?;
        if out.is_good() {
            return scsi::parse_read_capacity16(&out.data);
        }
        let out = self
            .execute_good(Command::read(lun, &cdb::read_capacity10(), 8))
            .await?;
        scsi::parse_read_capacity10(&out.data)
    }

    /// REPORT LUNS: the LUN numbers the target reports.
    pub async fn report_luns(&self) -> Result<Vec<u16>, Error> {
        let out = self
            .execute_good(Command::read(0, &cdb::report_luns(0, 16384), 16384))
            .await?;
        scsi::parse_report_luns(&out.data)
    }

    /// TEST UNIT READY.
    pub async fn test_unit_ready(&self, lun: u16) -> Result<(), Error> {
        self.execute_good(Command::none(lun, &cdb::test_unit_ready()))
            .await
            .map(drop)
    }

    /// SYNCHRONIZE CACHE(10) of the whole LUN.
    pub async fn synchronize_cache(&self, lun: u16) -> Result<(), Error> {
        self.execute_good(Command::none(lun, &cdb::sync_cache10(0, 0, false)))
            .await
            .map(drop)
    }

    /// A Task Management Function Request (RFC 7143 section 11.5); `referenced` names the
    /// command of ABORT TASK. Commands the function ended fail with [`Error::Aborted`].
    pub async fn task_management(
        &self,
        function: TmfFunction,
        lun: u16,
        referenced: Option<TaskId>,
    ) -> Result<TmfResponse, Error> {
        let lun = Lun::from_number(lun);
        let rx = self.shared.call(
            |core, now| Key::Request(core.task_management(function, lun, referenced, now)),
            Waiter::TaskMgmt,
        );
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Sends a NOP-Out ping and returns the round-trip time.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let rx = self
            .shared
            .call(|core, now| Key::Request(core.ping(now)), Waiter::Ping);
        rx.await.map_err(|_| Error::Closed)?
    }

    /// A text exchange in full feature phase (RFC 7143 section 11.10), e.g.
    /// `[("SendTargets", "")]`: the answer's pairs.
    pub async fn text(&self, pairs: &[(&str, &str)]) -> Result<Vec<(String, String)>, Error> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let rx = self
            .shared
            .call(|core, _| Key::Request(core.text(&pairs)), Waiter::Text);
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Logs out the connection with this CID (RFC 7143 section 11.14, reason 1): it finishes
    /// its commands and takes no new ones; the session goes on over the others.
    pub async fn logout_connection(&self, cid: u16) -> Result<(), Error> {
        let conn = self.connection_by_cid(cid)?;
        let rx = self.shared.call(
            |core, _| Key::Request(core.logout_connection(conn)),
            Waiter::Logout,
        );
        rx.await.map_err(|_| Error::Closed)?
    }

    fn connection_by_cid(&self, cid: u16) -> Result<ConnId, Error> {
        let core = self.shared.lock();
        let found = core.connections().find(|c| core.cid(*c) == Some(cid));
        found.ok_or_else(|| Error::Option(format!("the session has no connection with CID {cid}")))
    }

    /// Logs the session out (RFC 7143 section 11.14, reason 0: close the session). Commands
    /// still in flight fail with [`Error::Closed`].
    pub async fn logout(&self) -> Result<(), Error> {
        let rx = self
            .shared
            .call(|core, _| Key::Request(core.logout()), Waiter::Logout);
        rx.await.map_err(|_| Error::Closed)?
    }
}
