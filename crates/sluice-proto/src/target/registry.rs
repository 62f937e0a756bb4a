//! The target's session table: which login starts a session, joins one, or replaces one
//! (RFC 7143 sections 4.4.3, 6.3.4, 6.3.5 and 11.12.6), with the Login status each refusal
//! gets. Generic over the driver's handle of a session (`H`), so the decisions are tested here
//! and the driver keeps only its locks and channels.
//!
//! - TSIH 0 and no session of the same I_T nexus (InitiatorName and ISID with the target):
//!   a new session with a fresh TSIH.
//! - TSIH 0 and such a session exists: session reinstatement; the old session is handed back
//!   to be closed, and the login proceeds.
//! - TSIH ≠ 0: the connection joins that session. Unknown TSIH, or one of another nexus:
//!   "session does not exist" (0x020a). A CID the session already has: connection
//!   reinstatement. No room under the session's MaxConnections: "too many connections"
//!   (0x0206).

use crate::map::Map;

use crate::login::LoginStatus;
use crate::seq::{Isid, Tsih};

/// The identity that decides reinstatement (RFC 7143 section 4.4.3: the I_T nexus is
/// InitiatorName + ISID with TargetName + portal group tag). The same initiator port logging
/// in to the same target through two portal groups makes two I_T nexuses (two paths), not a
/// reinstatement; and a connection may only join a session through the session's own portal
/// group.
#[derive(Clone, Debug, Eq, PartialEq, Hash)]
pub struct NexusKey {
    initiator: String,
    isid: Isid,
    target: String,
    portal_group: u16,
}

impl NexusKey {
    /// The key of a login through the portal group with tag `portal_group`. iSCSI names
    /// compare case-insensitively (RFC 3722 folds case); `target` is empty for discovery
    /// sessions.
    pub fn new(initiator: &str, isid: Isid, target: &str, portal_group: u16) -> Self {
        Self {
            initiator: initiator.to_ascii_lowercase(),
            isid,
            target: target.to_ascii_lowercase(),
            portal_group,
        }
    }
}

/// A session's place in the table; removals name it, so a stale removal after the TSIH was
/// reused finds nothing.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct SessionRef {
    /// The TSIH.
    pub tsih: Tsih,
    generation: u64,
}

/// One connection's place in its session.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Hash)]
pub struct ConnectionRef {
    /// The session.
    pub session: SessionRef,
    /// The CID.
    pub cid: u16,
    token: u64,
}

/// What a login binds to.
#[derive(Debug)]
pub enum Binding<H> {
    /// A new session: create it, then [`SessionRegistry::attach`] its handle.
    NewSession {
        /// The connection's place.
        conn: ConnectionRef,
        /// A session of the same nexus this login replaces (session reinstatement, RFC 7143
        /// section 6.3.5): the driver closes it.
        replaced: Option<H>,
    },
    /// A connection joining an existing session; with a CID the session already has, this is
    /// connection reinstatement (RFC 7143 section 6.3.4).
    AddConnection {
        /// The connection's place.
        conn: ConnectionRef,
        /// The session.
        handle: H,
        /// Whether the CID was in use (connection reinstatement).
        reinstates: bool,
    },
}

#[derive(Debug)]
struct Entry<H> {
    key: NexusKey,
    generation: u64,
    max_connections: u16,
    conns: Vec<(u16, u64)>,
    handle: Option<H>,
}

/// All sessions of one target process.
#[derive(Debug)]
pub struct SessionRegistry<H> {
    sessions: Map<u16, Entry<H>>,
    next_tsih: u16,
    next_token: u64,
    max_sessions: usize,
}

impl<H: Clone> SessionRegistry<H> {
    /// An empty table admitting at most `max_sessions` sessions.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            sessions: Map::default(),
            next_tsih: 1,
            next_token: 1,
            max_sessions,
        }
    }

    /// Changes how many sessions the table admits. Sessions beyond a lowered bound stay; new
    /// ones are refused until the count falls below it.
    pub fn set_max_sessions(&mut self, max_sessions: usize) {
        self.max_sessions = max_sessions;
    }

    /// Early admission of a login naming `tsih` and `cid` (before authentication).
    pub fn check(&self, key: &NexusKey, tsih: Tsih, cid: u16) -> Result<(), LoginStatus> {
        if tsih == Tsih::NEW_SESSION {
            return Ok(());
        }
        let entry = self.joinable(key, tsih)?;
        let in_use = entry.conns.iter().any(|&(c, _)| c == cid);
        if !in_use && entry.conns.len() >= usize::from(entry.max_connections) {
            return Err(LoginStatus::TOO_MANY_CONNECTIONS);
        }
        Ok(())
    }

    /// Binds a login that is about to enter full feature phase.
    pub fn bind(&mut self, key: NexusKey, tsih: Tsih, cid: u16) -> Result<Binding<H>, LoginStatus> {
        if tsih != Tsih::NEW_SESSION {
            self.check(&key, tsih, cid)?;
            let token = self.token();
            let entry = self
                .sessions
                .get_mut(&tsih.0)
                .ok_or(LoginStatus::SESSION_DOES_NOT_EXIST)?;
            let handle = entry
                .handle
                .clone()
                .ok_or(LoginStatus::SESSION_DOES_NOT_EXIST)?;
            let reinstates = entry.conns.iter().any(|&(c, _)| c == cid);
            entry.conns.retain(|&(c, _)| c != cid);
            entry.conns.push((cid, token));
            let session = SessionRef {
                tsih,
                generation: entry.generation,
            };
            return Ok(Binding::AddConnection {
                conn: ConnectionRef {
                    session,
                    cid,
                    token,
                },
                handle,
                reinstates,
            });
        }
        let old = self
            .sessions
            .iter()
            .find(|(_, e)| e.key == key)
            .map(|(t, _)| *t);
        let replaced = old
            .and_then(|t| self.sessions.remove(&t))
            .and_then(|e| e.handle);
        if self.sessions.len() >= self.max_sessions {
            return Err(LoginStatus::OUT_OF_RESOURCES);
        }
        let tsih = self.allocate_tsih();
        let token = self.token();
        let generation = token;
        self.sessions.insert(
            tsih.0,
            Entry {
                key,
                generation,
                // Until the session is attached with its negotiated MaxConnections, nothing
                // can join it.
                max_connections: 1,
                conns: vec![(cid, token)],
                handle: None,
            },
        );
        let session = SessionRef { tsih, generation };
        Ok(Binding::NewSession {
            conn: ConnectionRef {
                session,
                cid,
                token,
            },
            replaced,
        })
    }

    /// Gives a new session its handle and negotiated MaxConnections (RFC 7143 section 13.2).
    pub fn attach(&mut self, session: SessionRef, handle: H, max_connections: u16) {
        if let Some(e) = self.entry_mut(session) {
            e.handle = Some(handle);
            e.max_connections = max_connections.max(1);
        }
    }

    /// A connection ended. Returns `true` when it was its session's last: the session is
    /// removed.
    pub fn remove_connection(&mut self, conn: ConnectionRef) -> bool {
        let Some(e) = self.entry_mut(conn.session) else {
            return false;
        };
        e.conns.retain(|&(_, t)| t != conn.token);
        if e.conns.is_empty() {
            self.sessions.remove(&conn.session.tsih.0);
            return true;
        }
        false
    }

    /// Removes a connection but keeps its session in the table, even with no connection left:
    /// the session outlives a failed connection while its tasks wait for connection recovery
    /// (ErrorRecoveryLevel 2, RFC 7143 section 7.1.4.3), so that a login with its TSIH can
    /// still join it. [`Self::remove_session`] removes it once it is over.
    pub fn detach_connection(&mut self, conn: ConnectionRef) {
        if let Some(e) = self.entry_mut(conn.session) {
            e.conns.retain(|&(_, t)| t != conn.token);
        }
    }

    /// Removes a session and all its connections (it ended, e.g. by logout).
    pub fn remove_session(&mut self, session: SessionRef) {
        if self.entry_mut(session).is_some() {
            self.sessions.remove(&session.tsih.0);
        }
    }

    /// Whether this session is still in the table.
    pub fn contains(&self, session: SessionRef) -> bool {
        self.sessions
            .get(&session.tsih.0)
            .is_some_and(|e| e.generation == session.generation)
    }

    /// The handle of a live session.
    pub fn handle(&self, session: SessionRef) -> Option<&H> {
        self.sessions
            .get(&session.tsih.0)
            .filter(|e| e.generation == session.generation)
            .and_then(|e| e.handle.as_ref())
    }

    /// The handle of the live, attached session with this TSIH.
    pub fn by_tsih(&self, tsih: Tsih) -> Option<&H> {
        self.sessions.get(&tsih.0).and_then(|e| e.handle.as_ref())
    }

    /// Every attached session's handle (shutdown, cold reset).
    pub fn handles(&self) -> impl Iterator<Item = &H> {
        self.sessions.values().filter_map(|e| e.handle.as_ref())
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether there is no session.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    fn joinable(&self, key: &NexusKey, tsih: Tsih) -> Result<&Entry<H>, LoginStatus> {
        match self.sessions.get(&tsih.0) {
            // Section 11.12.6: the TSIH must name a session of this initiator (same ISID).
            Some(e) if &e.key == key && e.handle.is_some() => Ok(e),
            _ => Err(LoginStatus::SESSION_DOES_NOT_EXIST),
        }
    }

    fn entry_mut(&mut self, session: SessionRef) -> Option<&mut Entry<H>> {
        self.sessions
            .get_mut(&session.tsih.0)
            .filter(|e| e.generation == session.generation)
    }

    fn token(&mut self) -> u64 {
        let t = self.next_token;
        self.next_token += 1;
        t
    }

    fn allocate_tsih(&mut self) -> Tsih {
        // TSIH 0 is reserved for "new session" (section 11.12.6); skip live values. The table
        // holds at most `max_sessions` (< 65535) sessions, so a free value exists.
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
        NexusKey::new(
            "iqn.2026-11.test:I",
            Isid([0x80, 0, 0, 0, 0, isid]),
            "iqn.2026-11.test:t",
            1,
        )
    }

    fn new_session(
        r: &mut SessionRegistry<&'static str>,
        k: NexusKey,
        name: &'static str,
    ) -> ConnectionRef {
        match r.bind(k, Tsih(0), 0).unwrap() {
            Binding::NewSession { conn, .. } => {
                r.attach(conn.session, name, 4);
                conn
            }
            other => panic!("expected a new session, got {other:?}"),
        }
    }

    #[test]
    fn new_sessions_get_distinct_tsihs_and_names_fold_case() {
        let mut r = SessionRegistry::new(10);
        let a = new_session(&mut r, key(1), "a");
        let b = new_session(&mut r, key(2), "b");
        assert_ne!(a.session.tsih, b.session.tsih);
        assert_eq!(r.len(), 2);
        let upper = NexusKey::new(
            "IQN.2026-11.TEST:i",
            Isid([0x80, 0, 0, 0, 0, 1]),
            "IQN.2026-11.test:T",
            1,
        );
        assert_eq!(upper, key(1));
        // The same initiator port through another portal group is another I_T nexus: a
        // second path, not a reinstatement.
        let other_path = NexusKey::new(
            "iqn.2026-11.test:i",
            Isid([0x80, 0, 0, 0, 0, 1]),
            "iqn.2026-11.test:t",
            2,
        );
        assert_ne!(other_path, key(1));
        let c = new_session(&mut r, other_path.clone(), "c");
        assert_eq!(r.len(), 3);
        // A connection cannot join a session through another portal group.
        assert_eq!(
            r.check(&key(1), c.session.tsih, 1),
            Err(LoginStatus::SESSION_DOES_NOT_EXIST)
        );
        assert!(r.remove_connection(c));
        assert!(r.remove_connection(a));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_session_detached_from_its_last_connection_can_still_be_joined() {
        let mut r = SessionRegistry::new(10);
        let a = new_session(&mut r, key(1), "a");
        r.detach_connection(a);
        assert_eq!(r.len(), 1, "kept for connection recovery");
        match r.bind(key(1), a.session.tsih, 0).unwrap() {
            Binding::AddConnection {
                handle, reinstates, ..
            } => {
                assert_eq!(handle, "a");
                assert!(!reinstates, "the CID is free: its connection is gone");
            }
            other => panic!("{other:?}"),
        }
        r.remove_session(a.session);
        assert!(r.is_empty());
    }

    #[test]
    fn same_nexus_with_tsih_0_reinstates_the_session() {
        let mut r = SessionRegistry::new(10);
        let old = new_session(&mut r, key(1), "old");
        match r.bind(key(1), Tsih(0), 0).unwrap() {
            Binding::NewSession { replaced, conn } => {
                assert_eq!(replaced, Some("old"));
                assert_ne!(conn.session, old.session);
            }
            other => panic!("{other:?}"),
        }
        // The replaced session's late removal finds nothing and leaves its successor alone.
        assert!(!r.remove_connection(old));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn connections_join_up_to_max_connections_and_a_cid_in_use_reinstates() {
        let mut r = SessionRegistry::new(10);
        let first = new_session(&mut r, key(1), "s");
        let tsih = first.session.tsih;
        let mut conns = vec![first];
        for cid in 1..4 {
            match r.bind(key(1), tsih, cid).unwrap() {
                Binding::AddConnection {
                    conn,
                    handle,
                    reinstates,
                } => {
                    assert_eq!((handle, reinstates), ("s", false));
                    conns.push(conn);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            r.check(&key(1), tsih, 9),
            Err(LoginStatus::TOO_MANY_CONNECTIONS)
        );
        assert_eq!(
            r.bind(key(1), tsih, 9).unwrap_err(),
            LoginStatus::TOO_MANY_CONNECTIONS
        );
        // CID 2 again: connection reinstatement, allowed even when full.
        let again = match r.bind(key(1), tsih, 2).unwrap() {
            Binding::AddConnection {
                conn, reinstates, ..
            } => {
                assert!(reinstates);
                conn
            }
            other => panic!("{other:?}"),
        };
        // The replaced connection's late removal leaves the new one in place.
        assert!(!r.remove_connection(conns[2]));
        assert_eq!(
            r.check(&key(1), tsih, 9),
            Err(LoginStatus::TOO_MANY_CONNECTIONS)
        );
        for c in [conns[0], conns[1], conns[3]] {
            assert!(!r.remove_connection(c));
        }
        assert!(
            r.remove_connection(again),
            "the last connection ends the session"
        );
        assert!(r.is_empty());
    }

    #[test]
    fn unknown_or_foreign_tsih_is_refused() {
        let mut r = SessionRegistry::new(10);
        assert_eq!(
            r.bind(key(1), Tsih(77), 1).unwrap_err(),
            LoginStatus::SESSION_DOES_NOT_EXIST
        );
        let s = new_session(&mut r, key(1), "s");
        // Another ISID may not join this session.
        assert_eq!(
            r.check(&key(2), s.session.tsih, 1),
            Err(LoginStatus::SESSION_DOES_NOT_EXIST)
        );
    }

    #[test]
    fn a_session_not_yet_attached_cannot_be_joined() {
        let mut r: SessionRegistry<&str> = SessionRegistry::new(10);
        let Binding::NewSession { conn, .. } = r.bind(key(1), Tsih(0), 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            r.check(&key(1), conn.session.tsih, 1),
            Err(LoginStatus::SESSION_DOES_NOT_EXIST)
        );
    }

    #[test]
    fn session_limit() {
        let mut r = SessionRegistry::new(1);
        new_session(&mut r, key(1), "a");
        assert_eq!(
            r.bind(key(2), Tsih(0), 0).unwrap_err(),
            LoginStatus::OUT_OF_RESOURCES
        );
    }
}
