//! The driver's side of the session table: each session's sans-IO core behind a lock, the
//! wake-ups of its connections' tasks, and the registry (in sluice-proto) that decides what a
//! login binds to.
//!
//! Lock order: a session's `core`, then its `conns`; the table's lock is never held while a
//! session lock is taken.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sluice_proto::iser::login::JoinedSession;
use sluice_proto::seq::Isid;
use sluice_proto::target::registry::{SessionRef, SessionRegistry};
use sluice_proto::target::{CloseReason, ConnId, TargetSession};
use tokio::sync::Notify;

use crate::metrics::ConnCounters;
use crate::status::{ConnectionStatus, SessionStatus};

/// One live session as its connections' tasks share it.
#[derive(Debug)]
pub(crate) struct SharedSession {
    core: Mutex<TargetSession>,
    /// The SCSI layer's I_T nexus id.
    pub nexus: u64,
    /// Lower-cased target name (`None` for discovery sessions).
    pub target: Option<String>,
    /// InitiatorName as it logged in.
    pub initiator: String,
    /// Its place in the table.
    pub session: SessionRef,
    /// The ISID of its leading login.
    pub isid: Isid,
    /// When it was created.
    pub created: std::time::Instant,
    /// The CmdSN window it was given.
    pub queue_depth: u32,
    conns: Mutex<Vec<ConnEntry>>,
    /// Its commands running in the background.
    pub long_running: crate::long_running::LongRunning,
    /// What its leading connection settled of iSER: whether the session is in RDMA mode,
    /// which every connection joining it follows (RFC 7145 section 6.3.1: RDMAExtensions is
    /// leading-only and session-wide).
    transport: OnceLock<JoinedSession>,
}

/// Who a session is, beside its core: what [`SharedSession::new`] records.
#[derive(Debug)]
pub(crate) struct SessionIdentity {
    /// The SCSI layer's I_T nexus id.
    pub nexus: u64,
    /// Lower-cased target name (`None` for discovery sessions).
    pub target: Option<String>,
    /// InitiatorName as it logged in.
    pub initiator: String,
    /// Its place in the table.
    pub session: SessionRef,
    /// The ISID of its leading login.
    pub isid: Isid,
    /// The CmdSN window it was given.
    pub queue_depth: u32,
}

/// A connection's task as its session knows it.
#[derive(Debug)]
pub(crate) struct ConnEntry {
    pub id: ConnId,
    pub wake: Arc<Notify>,
    /// The portal it arrived on.
    pub local: SocketAddr,
    /// The initiator's address.
    pub peer: SocketAddr,
    /// Its counters (its task writes them).
    pub counters: Arc<ConnCounters>,
}

impl SharedSession {
    pub(crate) fn new(core: TargetSession, who: SessionIdentity) -> Self {
        Self {
            core: Mutex::new(core),
            nexus: who.nexus,
            target: who.target,
            initiator: who.initiator,
            session: who.session,
            isid: who.isid,
            created: std::time::Instant::now(),
            queue_depth: who.queue_depth,
            conns: Mutex::new(Vec::new()),
            long_running: Default::default(),
            transport: OnceLock::new(),
        }
    }

    /// Records what the leading connection's login settled (see [`Self::transport`]); the
    /// first record stays.
    pub(crate) fn set_transport(&self, settled: JoinedSession) {
        let _ = self.transport.set(settled);
    }

    /// What a connection joining the session takes from it: its mode (RDMA or TCP), its
    /// FirstBurstLength and the initiator's MaxOutstandingUnexpectedPDUs. Recorded by the
    /// leading connection before its final Login Response gives the initiator the TSIH a
    /// join names, so a join always finds it; TCP with the session's FirstBurstLength if not.
    pub(crate) fn transport(&self) -> JoinedSession {
        match self.transport.get() {
            Some(t) => *t,
            None => JoinedSession {
                rdma: false,
                first_burst: self.lock().params().first_burst_length,
                peer_max_unexpected: 0,
            },
        }
    }

    /// The core. Never held across an `.await`.
    pub(crate) fn lock(&self) -> MutexGuard<'_, TargetSession> {
        // A panic while holding the lock leaves the core as the last completed call left it:
        // every method keeps its invariants before returning, so a poisoned lock is usable.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conns(&self) -> MutexGuard<'_, Vec<ConnEntry>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a connection's task: how to wake it, where it came from, its counters.
    pub(crate) fn register(&self, entry: ConnEntry) {
        self.conns().push(entry);
    }

    /// Forgets a connection's task.
    pub(crate) fn unregister(&self, id: ConnId) {
        self.conns().retain(|c| c.id != id);
    }

    /// Connection tasks registered.
    pub(crate) fn connection_count(&self) -> usize {
        self.conns().len()
    }

    /// Wakes every other connection's task that has something to send or act on.
    pub(crate) fn wake_others(&self, me: ConnId, core: &TargetSession) {
        for c in self.conns().iter() {
            if c.id != me && core.has_output(c.id) {
                c.wake.notify_one();
            }
        }
    }

    /// Wakes one connection's task.
    pub(crate) fn wake(&self, id: ConnId) {
        if let Some(c) = self.conns().iter().find(|c| c.id == id) {
            c.wake.notify_one();
        }
    }

    /// Wakes every connection's task.
    pub(crate) fn wake_all(&self) {
        for c in self.conns().iter() {
            c.wake.notify_one();
        }
    }

    /// Closes every connection (from outside: reinstatement, cold reset) and wakes them.
    pub(crate) fn close(&self, reason: CloseReason) {
        self.lock().close_all(reason);
        self.wake_all();
    }

    /// The local address a connection arrived on (SendTargets reports it for wildcard
    /// portals).
    pub(crate) fn local(&self, id: ConnId) -> Option<SocketAddr> {
        self.conns().iter().find(|c| c.id == id).map(|c| c.local)
    }

    /// The session and its connections as they are now, counters included.
    pub(crate) fn status(&self) -> SessionStatus {
        let core = self.lock();
        let connections = self
            .conns()
            .iter()
            .filter_map(|c| {
                let params = core.connection_params(c.id)?;
                Some(ConnectionStatus {
                    cid: core.cid(c.id)?,
                    peer: c.peer,
                    local: c.local,
                    header_digest: params.header_digest,
                    data_digest: params.data_digest,
                    initiator_max_recv_data_segment_length: params
                        .initiator_max_recv_data_segment_length,
                    target_max_recv_data_segment_length: params.target_max_recv_data_segment_length,
                    counts: c.counters.counts(),
                })
            })
            .collect();
        SessionStatus {
            id: self.nexus,
            tsih: self.session.tsih.0,
            isid: self.isid.to_string(),
            initiator: self.initiator.clone(),
            target: self.target.clone(),
            age: self.created.elapsed(),
            params: *core.params(),
            tasks: core.task_count(),
            window_slots_held: core.window_slots_held(),
            queue_depth: self.queue_depth,
            recovery: *core.stats(),
            connections,
        }
    }
}

/// All sessions of the process.
#[derive(Debug)]
pub(crate) struct Sessions {
    registry: Mutex<SessionRegistry<Arc<SharedSession>>>,
    next_nexus: AtomicU64,
}

impl Sessions {
    pub(crate) fn new(max_sessions: usize) -> Self {
        Self {
            registry: Mutex::new(SessionRegistry::new(max_sessions)),
            next_nexus: AtomicU64::new(1),
        }
    }

    /// The registry. Never take a session's lock while holding it.
    pub(crate) fn registry(&self) -> MutexGuard<'_, SessionRegistry<Arc<SharedSession>>> {
        // Every registry method keeps the table consistent before returning: a poisoned lock
        // is still usable.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh SCSI I_T nexus id.
    pub(crate) fn next_nexus(&self) -> u64 {
        self.next_nexus.fetch_add(1, Ordering::Relaxed)
    }

    /// Every session, for shutdown and cold reset.
    pub(crate) fn all(&self) -> Vec<Arc<SharedSession>> {
        self.registry().handles().cloned().collect()
    }

    /// Number of live sessions.
    pub(crate) fn count(&self) -> usize {
        self.registry().len()
    }
}
