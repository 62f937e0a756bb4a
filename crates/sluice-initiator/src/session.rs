//! The async [`Session`] handle: cloneable, `&self` methods, usable from many tasks at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::codes::{TmfFunction, TmfResponse};
use sluice_proto::seq::Itt;
use sluice_scsi::{cdb, SenseKey};
use tokio::sync::{mpsc, oneshot};

use crate::command::{Command, CommandOutcome};
use crate::counters::{Counters, SessionCounters};
use crate::driver::{Driver, Request, Shared};
use crate::error::Error;
use crate::login::{login, random_isid};
use crate::options::ConnectOptions;
use crate::scsi::{self, Capacity, StandardInquiry};
use crate::tasks::Pending;
use crate::url::IscsiUrl;

/// How often [`Session::execute_good`] repeats a command that met a UNIT ATTENTION.
pub const UNIT_ATTENTION_RETRIES: u32 = 4;

/// Requests queued towards the driver before `execute` waits (backpressure).
const REQUEST_QUEUE: usize = 1024;

/// A logged-in normal session with one connection.
///
/// Cheap to clone; every clone talks to the same driver task, so many tasks can have commands
/// in flight at once (up to the target's CmdSN window; the rest queue in order). The session
/// logs out when the last clone is dropped, or explicitly with [`logout`](Self::logout).
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
    tx: mpsc::Sender<Request>,
    counters: Counters,
    shared: Arc<Mutex<Shared>>,
    target: Arc<str>,
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
        Self::connect(&url.portal(), target, opts).await
    }

    /// Logs in to `target` at `portal` (`host:port`). Must run inside a tokio runtime: the
    /// driver is spawned onto it.
    pub async fn connect(portal: &str, target: &str, opts: ConnectOptions) -> Result<Self, Error> {
        let counters = Counters::default();
        let isid = random_isid();
        let logged = login(portal.to_owned(), Some(target), isid, &opts, &counters).await?;
        let shared = Arc::new(Mutex::new(Shared {
            params: logged.outcome.params,
            tsih: logged.outcome.tsih.0,
            portal: logged.transport.portal.clone(),
            target_alias: logged.outcome.target_alias.clone(),
        }));
        let (tx, rx) = mpsc::channel(REQUEST_QUEUE);
        let driver = Driver::new(
            logged,
            opts,
            target.to_owned(),
            isid,
            rx,
            counters.clone(),
            Arc::clone(&shared),
        );
        tokio::spawn(driver.run());
        Ok(Self {
            tx,
            counters,
            shared,
            target: target.into(),
        })
    }

    /// The target's name.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The negotiated operational parameters (RFC 7143 section 13).
    pub fn params(&self) -> SessionParams {
        self.shared().params
    }

    /// The TSIH the target assigned, the portal logged in to (after redirects) and the
    /// TargetAlias, if any.
    pub fn login_info(&self) -> (u16, String, Option<String>) {
        let s = self.shared();
        (s.tsih, s.portal, s.target_alias)
    }

    fn shared(&self) -> Shared {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A snapshot of the session's counters.
    pub fn counters(&self) -> SessionCounters {
        self.counters.snapshot()
    }

    /// Runs any command. A non-GOOD status is not an error here; see
    /// [`CommandOutcome::check`].
    pub async fn execute(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            cmd,
            reply,
            submitted: Instant::now(),
            attempts: 1,
        };
        self.tx
            .send(Request::Command(pending))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Runs a command and fails unless the status is GOOD. A UNIT ATTENTION (e.g. the
    /// power-on condition every new I_T nexus sees, SAM-5 5.14) is retried up to
    /// [`UNIT_ATTENTION_RETRIES`] times, as operating system initiators do.
    pub async fn execute_good(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        let mut left = UNIT_ATTENTION_RETRIES;
        loop {
            let out = self.execute(cmd.clone()).await?;
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

    /// A Task Management Function Request (RFC 7143 section 11.5); returns the target's
    /// response code ([`TmfResponse::FunctionComplete`] when done).
    pub async fn task_management(
        &self,
        function: TmfFunction,
        lun: u16,
        referenced: Option<u32>,
    ) -> Result<TmfResponse, Error> {
        let (reply, rx) = oneshot::channel();
        let req = Request::TaskMgmt {
            function,
            lun,
            referenced: referenced.map_or(Itt::RESERVED, Itt),
            reply,
        };
        self.tx.send(req).await.map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Sends a NOP-Out ping and returns the round-trip time.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Ping(reply))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Logs the session out (RFC 7143 section 11.14, reason 0: close the session). Commands
    /// still in flight fail with [`Error::Closed`].
    pub async fn logout(&self) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request::Logout(reply))
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}
