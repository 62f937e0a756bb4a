//! What the target login state machine needs from its driver: policy per target, randomness and
//! the session table ([`TargetLoginEnv`]), and what it reports back ([`LoginOutcome`]).

use crate::chap::ChapAlgorithm;
use crate::params::{SessionParams, SessionType};
use crate::seq::{Isid, SeqNum, Tsih};
use crate::text::OperationalOffer;

use super::LoginStatus;

/// A CHAP user name and secret.
#[derive(Clone, Eq, PartialEq)]
pub struct ChapCredential {
    /// The CHAP_N value (usually the initiator's or target's iSCSI name).
    pub user: String,
    /// The shared secret. The Microsoft iSCSI initiator accepts only 12 to 16 bytes without
    /// IPsec (Microsoft's documentation of `SetIScsiInitiatorCHAPSharedSecret`; the 12-byte
    /// floor is RFC 7143 section 9.2.1's 96 random bits).
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for ChapCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChapCredential")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// CHAP configuration of a target (or of discovery).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct ChapSecrets {
    /// What the initiator must prove: the expected CHAP_N and the secret it shares with us.
    pub initiator: ChapCredential,
    /// For mutual CHAP: the CHAP_N and secret with which the target answers the initiator's
    /// challenge. `None` refuses initiators that ask for mutual authentication.
    pub mutual: Option<ChapCredential>,
    /// Algorithms accepted, in any order; the initiator's CHAP_A order decides. Must contain
    /// MD5 for interoperability: open-iscsi offers `CHAP_A=5` alone unless configured otherwise
    /// (its `node.session.auth.chap_algs` default), and RFC 7143 section 12.1.3 requires every
    /// implementation to support MD5 (5).
    pub algorithms: Vec<ChapAlgorithm>,
    /// Length of the challenges we issue; clamped to digest length..=1024.
    pub challenge_len: usize,
}

impl ChapSecrets {
    /// One-way CHAP with every algorithm and 32-byte challenges.
    pub fn one_way(user: impl Into<String>, secret: impl Into<Vec<u8>>) -> Self {
        Self {
            initiator: ChapCredential {
                user: user.into(),
                secret: secret.into(),
            },
            mutual: None,
            algorithms: ChapAlgorithm::ALL.to_vec(),
            challenge_len: 32,
        }
    }
}

/// Login policy of one target node (or of discovery sessions).
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct TargetLoginPolicy {
    /// `Some`: CHAP is required (AuthMethod=None is refused). `None`: no authentication.
    pub chap: Option<ChapSecrets>,
    /// Initiator names allowed to log in; `None` allows any. Others get 0x0202.
    pub allowed_initiators: Option<Vec<String>>,
    /// What the target offers and accepts for each operational key.
    pub offer: OperationalOffer,
    /// The portal group tag of the portal the connection arrived on (section 13.9).
    pub portal_group_tag: u16,
    /// TargetAlias to declare, if any (section 13.6).
    pub alias: Option<String>,
}

impl Default for TargetLoginPolicy {
    fn default() -> Self {
        Self {
            chap: None,
            allowed_initiators: None,
            offer: OperationalOffer::default(),
            portal_group_tag: 1,
            alias: None,
        }
    }
}

/// Who is logging in, for the driver's session table.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct SessionBinding {
    /// ISID from the request.
    pub isid: Isid,
    /// TSIH from the request: 0 for a new session (or a reinstatement), else the session to
    /// add this connection to.
    pub tsih: Tsih,
    /// Connection ID.
    pub cid: u16,
    /// InitiatorName.
    pub initiator_name: String,
    /// TargetName (None for discovery sessions).
    pub target_name: Option<String>,
    /// Session type.
    pub session_type: SessionType,
}

/// The driver's side of a target login. Object-safe; called synchronously from
/// [`TargetLogin::handle_request`](super::TargetLogin::handle_request).
pub trait TargetLoginEnv {
    /// The policy of the named target, `None` if there is no such target (0x0203).
    fn target(&self, name: &str) -> Option<TargetLoginPolicy>;

    /// The policy for discovery sessions (SessionType=Discovery).
    fn discovery_policy(&self) -> TargetLoginPolicy;

    /// Fills `buf` from a cryptographically secure random source (CHAP challenges and
    /// identifiers).
    fn random_bytes(&mut self, buf: &mut [u8]);

    /// Early admission check, called once when the first Login Request has named the initiator
    /// and target and passed the ACL, before any authentication. Refuse here with e.g.
    /// [`LoginStatus::SESSION_DOES_NOT_EXIST`] (TSIH ≠ 0 unknown),
    /// [`LoginStatus::TOO_MANY_CONNECTIONS`] or [`LoginStatus::SERVICE_UNAVAILABLE`].
    fn admit(&mut self, binding: &SessionBinding) -> Result<(), LoginStatus> {
        let _ = binding;
        Ok(())
    }

    /// Called exactly once, when the login is about to enter full feature phase (after
    /// authentication and negotiation succeeded). The driver decides:
    /// - TSIH 0 and no session with this (InitiatorName, ISID, target): a new session; return
    ///   its fresh non-zero TSIH;
    /// - TSIH 0 and such a session exists: session reinstatement (RFC 7143 section 6.3.5):
    ///   close the old session, then return a fresh TSIH;
    /// - TSIH ≠ 0: add the connection (CID) to that session and return the same TSIH, or
    ///   refuse with 0x020a / 0x0206 / 0x0208.
    fn bind_session(&mut self, binding: &SessionBinding) -> Result<Tsih, LoginStatus>;

    /// ExpCmdSN and MaxCmdSN of the live session `tsih`, for the responses of a login that
    /// adds a connection to it. `None` (the default) when there is no such session: the
    /// login's own CmdSN is used, and binding will refuse it.
    fn session_command_window(&self, tsih: Tsih) -> Option<(SeqNum, SeqNum)> {
        let _ = tsih;
        None
    }

    /// The negotiated parameters of the live session `tsih`, for the outcome of a login that
    /// adds a connection to it: its leading-only keys are the session's (see
    /// [`SessionParams::joined`]). `None` (the default) leaves the login's own result.
    fn session_params(&self, tsih: Tsih) -> Option<SessionParams> {
        let _ = tsih;
        None
    }
}

/// What a successful login settled; handed to the driver with the final Login Response.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct LoginOutcome {
    /// The negotiated operational parameters.
    pub params: SessionParams,
    /// Normal or Discovery.
    pub session_type: SessionType,
    /// InitiatorName.
    pub initiator_name: String,
    /// InitiatorAlias, if declared.
    pub initiator_alias: Option<String>,
    /// TargetName (None for discovery).
    pub target_name: Option<String>,
    /// ISID.
    pub isid: Isid,
    /// The TSIH returned by [`TargetLoginEnv::bind_session`].
    pub tsih: Tsih,
    /// Connection ID.
    pub cid: u16,
    /// The CHAP_N the initiator authenticated as, if CHAP was used.
    pub authenticated_user: Option<String>,
    /// StatSN for the first response sent in full feature phase.
    pub next_stat_sn: SeqNum,
    /// ExpCmdSN after login (the CmdSN of the last Login Request: login PDUs are immediate).
    pub exp_cmd_sn: SeqNum,
}
