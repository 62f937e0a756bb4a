//! The driver's side of a login: target policies from the configuration, OS randomness, and
//! the session table.

use std::sync::Arc;

use rand::RngCore;
use sluice_proto::chap::ChapAlgorithm;
use sluice_proto::login::{
    ChapCredential, ChapSecrets, LoginStatus, SessionBinding, TargetLoginEnv, TargetLoginPolicy,
};
use sluice_proto::params::{SessionParams, SessionType};
use sluice_proto::seq::{SeqNum, Tsih};
use sluice_proto::target::registry::{Binding, NexusKey};
use sluice_proto::text::{DigestKind, OperationalOffer as ProtoOffer};

use crate::config::{ChapCredentials, DigestPolicy, OperationalOffer, TargetConfig};
use crate::discovery::{admits, find_target};
use crate::sessions::{Sessions, SharedSession};

/// One connection's login environment. Holds the session binding once the login completes.
pub(crate) struct LoginEnv<'a> {
    pub config: &'a TargetConfig,
    pub sessions: &'a Sessions,
    /// The tag of the portal group the connection arrived through (its TargetPortalGroupTag,
    /// RFC 7143 section 13.9).
    pub portal_group: u16,
    pub bound: Option<Binding<Arc<SharedSession>>>,
    /// The TargetName the login core looked up (for counting the login's outcome).
    pub asked_target: std::cell::RefCell<Option<String>>,
    /// Whether the login core asked for the discovery policy.
    pub asked_discovery: std::cell::Cell<bool>,
}

impl TargetLoginEnv for LoginEnv<'_> {
    fn target(&self, name: &str) -> Option<TargetLoginPolicy> {
        *self.asked_target.borrow_mut() = Some(name.to_string());
        let t = find_target(self.config, name)?;
        Some(TargetLoginPolicy {
            chap: t.chap.as_ref().map(chap_secrets),
            // The ACL is checked in `admit`: the login core compares names exactly, but iSCSI
            // names compare case-insensitively (RFC 3722 stringprep folds case).
            allowed_initiators: None,
            offer: proto_offer(&self.config.offer),
            portal_group_tag: self.portal_group,
            alias: t.alias.clone(),
        })
    }

    fn discovery_policy(&self) -> TargetLoginPolicy {
        self.asked_discovery.set(true);
        TargetLoginPolicy {
            chap: self.config.discovery_auth.as_ref().map(chap_secrets),
            allowed_initiators: None,
            offer: proto_offer(&self.config.offer),
            portal_group_tag: self.portal_group,
            alias: None,
        }
    }

    fn admit(&mut self, binding: &SessionBinding) -> Result<(), LoginStatus> {
        let refused = binding
            .target_name
            .as_deref()
            .and_then(|name| find_target(self.config, name))
            .is_some_and(|t| !admits(&t.acl, &binding.initiator_name));
        if refused {
            return Err(LoginStatus::AUTHORIZATION_FAILURE);
        }
        // A connection for an existing session is refused before authentication when the
        // session does not exist or is full (RFC 7143 section 11.13.5: 0x020a, 0x0206).
        self.sessions.registry().check(
            &nexus_key(binding, self.portal_group),
            binding.tsih,
            binding.cid,
        )
    }

    fn random_bytes(&mut self, buf: &mut [u8]) {
        rand::rngs::OsRng.fill_bytes(buf);
    }

    fn bind_session(&mut self, binding: &SessionBinding) -> Result<Tsih, LoginStatus> {
        let bound = self.sessions.registry().bind(
            nexus_key(binding, self.portal_group),
            binding.tsih,
            binding.cid,
        )?;
        let tsih = match &bound {
            Binding::NewSession { conn, .. } | Binding::AddConnection { conn, .. } => {
                conn.session.tsih
            }
        };
        self.bound = Some(bound);
        Ok(tsih)
    }

    fn session_command_window(&self, tsih: Tsih) -> Option<(SeqNum, SeqNum)> {
        let session = self.sessions.registry().by_tsih(tsih).cloned()?;
        let window = session.lock().command_window();
        Some(window)
    }

    fn session_params(&self, tsih: Tsih) -> Option<SessionParams> {
        let session = self.sessions.registry().by_tsih(tsih).cloned()?;
        let params = *session.lock().params();
        Some(params)
    }
}

fn nexus_key(binding: &SessionBinding, portal_group: u16) -> NexusKey {
    let target = match binding.session_type {
        SessionType::Discovery => "",
        SessionType::Normal => binding.target_name.as_deref().unwrap_or_default(),
    };
    NexusKey::new(&binding.initiator_name, binding.isid, target, portal_group)
}

fn chap_secrets(c: &ChapCredentials) -> ChapSecrets {
    let mut s = ChapSecrets::one_way(c.user.clone(), c.secret.as_bytes().to_vec());
    s.mutual = c.mutual.as_ref().map(|(user, secret)| ChapCredential {
        user: user.clone(),
        secret: secret.as_bytes().to_vec(),
    });
    s.algorithms = ChapAlgorithm::ALL.to_vec();
    s
}

fn digests(policy: DigestPolicy) -> Vec<DigestKind> {
    match policy {
        DigestPolicy::Allow => vec![DigestKind::Crc32c, DigestKind::None],
        DigestPolicy::Require => vec![DigestKind::Crc32c],
        DigestPolicy::Forbid => vec![DigestKind::None],
    }
}

/// The configuration's offer in the negotiator's terms. MaxConnections is negotiated as the
/// smaller of the two offers (RFC 7143 section 13.2), so an initiator that offers 1 gets 1
/// (open-iscsi fails a normal session's login on any other answer, "can't accept
/// MaxConnections", `usr/login.c`).
pub(crate) fn proto_offer(o: &OperationalOffer) -> ProtoOffer {
    ProtoOffer {
        header_digest: digests(o.header_digest),
        data_digest: digests(o.data_digest),
        max_connections: o.max_connections,
        initial_r2t: o.initial_r2t,
        immediate_data: o.immediate_data,
        max_recv_data_segment_length: o.max_recv_data_segment_length,
        max_burst_length: o.max_burst_length,
        first_burst_length: o.first_burst_length,
        default_time2wait: o.default_time2wait,
        default_time2retain: o.default_time2retain,
        max_outstanding_r2t: o.max_outstanding_r2t,
        data_pdu_in_order: o.data_pdu_in_order,
        data_sequence_in_order: o.data_sequence_in_order,
        error_recovery_level: o.error_recovery_level,
        protocol_level: None,
    }
}
