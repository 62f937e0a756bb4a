//! A blocking facade for simple callers (libiscsi's `sync.c` over its async core): each call
//! runs the async method to completion on a private tokio runtime.

use std::sync::Arc;

use bytes::Bytes;
use sluice_proto::params::SessionParams;
use tokio::runtime::Runtime;

use crate::command::{Command, CommandOutcome};
use crate::counters::SessionCounters;
use crate::discovery::DiscoveredTarget;
use crate::error::Error;
use crate::options::ConnectOptions;
use crate::scsi::{Capacity, StandardInquiry};
use crate::url::IscsiUrl;

/// A blocking [`crate::Session`]. Do not use it from inside an async runtime.
///
/// ```no_run
/// use sluice_initiator::blocking::Session;
/// use sluice_initiator::IscsiUrl;
/// # fn main() -> Result<(), sluice_initiator::Error> {
/// let url = IscsiUrl::parse("iscsi://127.0.0.1/iqn.2026-11.io.sluice:default/0")?;
/// let s = Session::connect_url(&url)?;
/// let cap = s.read_capacity(0)?;
/// s.write(0, 0, vec![0xab; cap.block_size as usize].into(), cap.block_size)?;
/// s.logout()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    rt: Arc<Runtime>,
    inner: crate::Session,
}

fn runtime() -> Result<Arc<Runtime>, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| Error::Option(format!("cannot start the I/O runtime: {e}")))
}

/// SendTargets discovery, blocking.
pub fn discover(portal: &str, opts: &ConnectOptions) -> Result<Vec<DiscoveredTarget>, Error> {
    runtime()?.block_on(crate::discover(portal, opts))
}

impl Session {
    /// See [`crate::Session::connect_url`].
    pub fn connect_url(url: &IscsiUrl) -> Result<Self, Error> {
        Self::connect_url_with(url, ConnectOptions::from_url(url)?)
    }

    /// See [`crate::Session::connect_url_with`].
    pub fn connect_url_with(url: &IscsiUrl, opts: ConnectOptions) -> Result<Self, Error> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Session::connect_url_with(url, opts))?;
        Ok(Self { rt, inner })
    }

    /// See [`crate::Session::connect`].
    pub fn connect(portal: &str, target: &str, opts: ConnectOptions) -> Result<Self, Error> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Session::connect(portal, target, opts))?;
        Ok(Self { rt, inner })
    }

    /// The async handle, for mixing styles.
    pub fn as_async(&self) -> &crate::Session {
        &self.inner
    }

    /// Negotiated parameters.
    pub fn params(&self) -> SessionParams {
        self.inner.params()
    }

    /// Counter snapshot.
    pub fn counters(&self) -> SessionCounters {
        self.inner.counters()
    }

    /// See [`crate::Session::execute`].
    pub fn execute(&self, cmd: Command) -> Result<CommandOutcome, Error> {
        self.rt.block_on(self.inner.execute(cmd))
    }

    /// See [`crate::Session::read`].
    pub fn read(&self, lun: u16, lba: u64, blocks: u32, block_size: u32) -> Result<Bytes, Error> {
        self.rt
            .block_on(self.inner.read(lun, lba, blocks, block_size))
    }

    /// See [`crate::Session::write`].
    pub fn write(&self, lun: u16, lba: u64, data: Bytes, block_size: u32) -> Result<(), Error> {
        self.rt
            .block_on(self.inner.write(lun, lba, data, block_size))
    }

    /// See [`crate::Session::inquiry`].
    pub fn inquiry(&self, lun: u16) -> Result<StandardInquiry, Error> {
        self.rt.block_on(self.inner.inquiry(lun))
    }

    /// See [`crate::Session::vpd`].
    pub fn vpd(&self, lun: u16, page: u8) -> Result<Bytes, Error> {
        self.rt.block_on(self.inner.vpd(lun, page))
    }

    /// See [`crate::Session::read_capacity`].
    pub fn read_capacity(&self, lun: u16) -> Result<Capacity, Error> {
        self.rt.block_on(self.inner.read_capacity(lun))
    }

    /// See [`crate::Session::report_luns`].
    pub fn report_luns(&self) -> Result<Vec<u16>, Error> {
        self.rt.block_on(self.inner.report_luns())
    }

    /// See [`crate::Session::synchronize_cache`].
    pub fn synchronize_cache(&self, lun: u16) -> Result<(), Error> {
        self.rt.block_on(self.inner.synchronize_cache(lun))
    }

    /// See [`crate::Session::logout`].
    pub fn logout(&self) -> Result<(), Error> {
        self.rt.block_on(self.inner.logout())
    }
}
