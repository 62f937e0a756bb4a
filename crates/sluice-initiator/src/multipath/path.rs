//! One path of a multipath device: its portal, its session (while it is up), what it last
//! reported (identity, ALUA state) and its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::multipath::identity::PathIdentity;
use crate::multipath::policy::AluaState;
use crate::session::Session;

/// A snapshot of one path's state and counters.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct PathStats {
    /// `host:port` of the path's portal.
    pub portal: String,
    /// Logged in and serving.
    pub up: bool,
    /// Its target port group's access state as last read (kept while the path is down);
    /// `None` until the path first logged in.
    pub state: Option<AluaState>,
    /// Its target port group (Device Identification VPD page), if reported.
    pub port_group: Option<u16>,
    /// Its relative target port identifier, if reported.
    pub relative_port: Option<u16>,
    /// Commands sent on the path (resends included).
    pub commands: u64,
    /// Bytes of the commands that completed on the path.
    pub bytes: u64,
    /// Commands that failed on the path with the path (connection loss, session recovery
    /// exhausted, timeout).
    pub errors: u64,
    /// Commands sent on the path again: resent from a failed path, or after an ALUA change.
    pub retries: u64,
    /// Times the path failed and its I/O moved to the others.
    pub failovers: u64,
    /// Times the path was logged in again after failing.
    pub reconnects: u64,
    /// The last failure, in words.
    pub last_error: Option<String>,
}

/// What changes under the path's lock.
#[derive(Debug)]
pub(crate) struct PathState {
    /// The session while the path is up.
    pub session: Option<Session>,
    /// Bumped at every login, so that a failure seen through an old session cannot take a
    /// newer one down.
    pub generation: u64,
    pub state: Option<AluaState>,
    pub identity: Option<PathIdentity>,
    /// The port takes SET TARGET PORT GROUPS (INQUIRY TPGS explicit).
    pub explicit_alua: bool,
    /// A background task is logging the path in again.
    pub reconnecting: bool,
    pub last_error: Option<String>,
}

/// One path.
#[derive(Debug)]
pub(crate) struct Path {
    pub portal: String,
    pub inner: Mutex<PathState>,
    pub commands: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    pub failovers: AtomicU64,
    pub reconnects: AtomicU64,
}

impl Path {
    pub fn new(portal: String) -> Self {
        Self {
            portal,
            inner: Mutex::new(PathState {
                session: None,
                generation: 0,
                state: None,
                identity: None,
                explicit_alua: false,
                reconnecting: false,
                last_error: None,
            }),
            commands: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, PathState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn stats(&self) -> PathStats {
        let s = self.lock();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PathStats {
            portal: self.portal.clone(),
            up: s.session.is_some(),
            state: s.state,
            port_group: s.identity.as_ref().and_then(|i| i.port_group),
            relative_port: s.identity.as_ref().and_then(|i| i.relative_port),
            commands: load(&self.commands),
            bytes: load(&self.bytes),
            errors: load(&self.errors),
            retries: load(&self.retries),
            failovers: load(&self.failovers),
            reconnects: load(&self.reconnects),
            last_error: s.last_error.clone(),
        }
    }
}
