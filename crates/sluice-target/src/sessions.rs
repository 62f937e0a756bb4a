//! The session table: TSIH allocation, adding a connection, and session reinstatement.
//!
//! RFC 7143 section 6.3.5: a login with TSIH 0 and the same InitiatorName, ISID and target portal
//! group as a live session reinstates that session: the old one is closed (its tasks aborted)
//! and the new login proceeds. A login with a non-zero TSIH adds a connection to (or reinstates
//! a connection of) an existing session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_proto::seq::{Isid, Tsih};
use tokio::sync::watch;

/// The identity that decides reinstatement (RFC 7143 section 4.4.3: the I_T nexus is
/// InitiatorName + ISID with TargetName + portal group tag).
#[derive(Clone, Debug, Eq, PartialEq, Hash)]
pub(crate) struct NexusKey {
    pub initiator: String,
    pub isid: Isid,
    pub target: String,
}

/// A live session as the table sees it.
#[derive(Debug)]
pub(crate) struct SessionEntry {
    pub key: NexusKey,
    pub nexus_id: u64,
    pub cid: u16,
    /// Distinguishes successive holders of one TSIH (connection reinstatement).
    generation: u64,
    /// Set to true to make the session's connection close (reinstatement, shutdown).
    kill: watch::Sender<bool>,
}

/// What a connection holds while its session lives; dropping it removes the session.
#[derive(Debug)]
pub(crate) struct SessionGuard {
    table: Arc<SessionTable>,
    pub tsih: Tsih,
    pub nexus_id: u64,
    pub killed: watch::Receiver<bool>,
    generation: u64,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.table.remove(self.tsih, self.generation);
    }
}

/// Why a session could not be bound, as the Login status the initiator gets.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum BindError {
    /// 0x020a: the TSIH names no session.
    SessionDoesNotExist,
    /// 0x0206: MaxConnections would be exceeded.
    TooManyConnections,
    /// 0x0302: the session limit is reached.
    OutOfResources,
}

/// All sessions of the process.
#[derive(Debug, Default)]
pub(crate) struct SessionTable {
    inner: Mutex<Inner>,
    max_sessions: usize,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<u16, SessionEntry>,
    next_tsih: u16,
    next_nexus: u64,
    next_generation: u64,
}

/// What `bind` did, for logging and for the SCSI layer.
#[derive(Debug)]
pub(crate) struct Bound {
    pub guard: SessionGuard,
    /// The nexus of a session this login replaced: its SCSI state must be dropped.
    pub reinstated: Option<u64>,
}

impl SessionTable {
    pub(crate) fn new(max_sessions: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                next_tsih: 1,
                next_nexus: 1,
                ..Inner::default()
            }),
            max_sessions,
        })
    }

    /// Binds a completing login to a session.
    pub(crate) fn bind(
        self: &Arc<Self>,
        key: NexusKey,
        tsih: Tsih,
        cid: u16,
    ) -> Result<Bound, BindError> {
        let mut inner = self.lock();
        let mut reinstated = None;
        if tsih != Tsih::NEW_SESSION {
            // Adding a connection: with MaxConnections=1 only the same CID may come back, which
            // is connection reinstatement (RFC 7143 section 6.3.4); at ErrorRecoveryLevel 0 the
            // old connection's tasks are simply aborted with it.
            let Some(existing) = inner.sessions.get(&tsih.0) else {
                return Err(BindError::SessionDoesNotExist);
            };
            if existing.key != key {
                return Err(BindError::SessionDoesNotExist);
            }
            if existing.cid != cid {
                return Err(BindError::TooManyConnections);
            }
            let old = inner
                .sessions
                .remove(&tsih.0)
                .ok_or(BindError::SessionDoesNotExist)?;
            let _ = old.kill.send(true);
            let nexus_id = old.nexus_id;
            let guard = inner.insert(self, tsih, key, nexus_id, cid);
            return Ok(Bound {
                guard,
                reinstated: None,
            });
        }
        if let Some(old_tsih) = inner
            .sessions
            .iter()
            .find(|(_, s)| s.key == key)
            .map(|(t, _)| *t)
        {
            if let Some(old) = inner.sessions.remove(&old_tsih) {
                let _ = old.kill.send(true);
                reinstated = Some(old.nexus_id);
            }
        }
        if inner.sessions.len() >= self.max_sessions {
            return Err(BindError::OutOfResources);
        }
        let tsih = inner.allocate_tsih();
        let nexus_id = inner.next_nexus;
        inner.next_nexus += 1;
        let guard = inner.insert(self, tsih, key, nexus_id, cid);
        Ok(Bound { guard, reinstated })
    }

    /// Asks every session to close (shutdown).
    pub(crate) fn kill_all(&self) {
        for s in self.lock().sessions.values() {
            let _ = s.kill.send(true);
        }
    }

    /// Whether a live session still owns this I_T nexus (connection reinstatement keeps it).
    pub(crate) fn nexus_alive(&self, nexus_id: u64) -> bool {
        self.lock()
            .sessions
            .values()
            .any(|s| s.nexus_id == nexus_id)
    }

    /// Number of live sessions.
    pub(crate) fn count(&self) -> usize {
        self.lock().sessions.len()
    }

    fn remove(&self, tsih: Tsih, generation: u64) {
        let mut inner = self.lock();
        // A reinstated session's slot may already belong to its successor.
        if inner
            .sessions
            .get(&tsih.0)
            .is_some_and(|s| s.generation == generation)
        {
            inner.sessions.remove(&tsih.0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the map inconsistent (every mutation is
        // a single insert/remove), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn insert(
        &mut self,
        table: &Arc<SessionTable>,
        tsih: Tsih,
        key: NexusKey,
        nexus_id: u64,
        cid: u16,
    ) -> SessionGuard {
        let generation = self.next_generation;
        self.next_generation += 1;
        let (kill, killed) = watch::channel(false);
        self.sessions.insert(
            tsih.0,
            SessionEntry {
                key,
                nexus_id,
                cid,
                generation,
                kill,
            },
        );
        SessionGuard {
            table: Arc::clone(table),
            tsih,
            nexus_id,
            killed,
            generation,
        }
    }

    fn allocate_tsih(&mut self) -> Tsih {
        // TSIH 0 is reserved for "new session" (RFC 7143 section 11.12.6); skip live values.
        loop {
            let t = self.next_tsih;
            self.next_tsih = self.next_tsih.wrapping_add(1).max(1);
            if t != 0 && !self.sessions.contains_key(&t) {
                return Tsih(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(isid: u8) -> NexusKey {
        NexusKey {
            initiator: "iqn.2026-11.test:i".into(),
            isid: Isid([0x80, 0, 0, 0, 0, isid]),
            target: "iqn.2026-11.test:t".into(),
        }
    }

    #[test]
    fn new_sessions_get_distinct_tsihs() {
        let t = SessionTable::new(10);
        let a = t.bind(key(1), Tsih(0), 0).unwrap();
        let b = t.bind(key(2), Tsih(0), 0).unwrap();
        assert_ne!(a.guard.tsih, b.guard.tsih);
        assert_ne!(a.guard.nexus_id, b.guard.nexus_id);
        assert_eq!(t.count(), 2);
        drop(a);
        assert_eq!(t.count(), 1);
    }

    #[test]
    fn same_isid_reinstates_and_kills_the_old_session() {
        let t = SessionTable::new(10);
        let old = t.bind(key(1), Tsih(0), 0).unwrap();
        let new = t.bind(key(1), Tsih(0), 0).unwrap();
        assert!(*old.guard.killed.borrow());
        assert_eq!(new.reinstated, Some(old.guard.nexus_id));
        drop(old);
        assert_eq!(
            t.count(),
            1,
            "dropping the replaced session keeps its successor"
        );
    }

    #[test]
    fn unknown_tsih_and_second_connection_are_refused() {
        let t = SessionTable::new(10);
        assert_eq!(
            t.bind(key(1), Tsih(77), 0).unwrap_err(),
            BindError::SessionDoesNotExist
        );
        let s = t.bind(key(1), Tsih(0), 0).unwrap();
        let tsih = s.guard.tsih;
        assert_eq!(
            t.bind(key(1), tsih, 1).unwrap_err(),
            BindError::TooManyConnections
        );
        let again = t.bind(key(1), tsih, 0).unwrap();
        assert!(*s.guard.killed.borrow());
        assert_eq!(again.guard.tsih, tsih);
        drop(s);
        assert_eq!(
            t.count(),
            1,
            "the replaced connection's guard leaves its successor alone"
        );
    }

    #[test]
    fn session_limit() {
        let t = SessionTable::new(1);
        let _a = t.bind(key(1), Tsih(0), 0).unwrap();
        assert_eq!(
            t.bind(key(2), Tsih(0), 0).unwrap_err(),
            BindError::OutOfResources
        );
    }
}
