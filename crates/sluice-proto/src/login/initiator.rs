//! Initiator side of the login phase (RFC 7143 sections 6.3, 11.12, 11.13).
//!
//! ```text
//! let mut login = InitiatorLogin::new(config, itt, cmd_sn, exp_stat_sn);
//! let mut req = login.start()?;
//! loop {
//!     send(req);
//!     match login.handle_response(&read_login_response(), &mut random) {
//!         InitiatorStep::Send(next) => req = next,
//!         InitiatorStep::Complete(outcome) => break,           // full feature phase
//!         InitiatorStep::Redirect { target_address, .. } => reconnect(target_address),
//!         InitiatorStep::Failed(error) => return Err(error),   // close the connection
//!     }
//! }
//! ```
//!
//! The sequence follows open-iscsi's iscsid (`usr/login.c`, `usr/auth.c`): without CHAP the
//! first request is already operational (CSG=1, NSG=3, T=1); with one-way CHAP it offers
//! `AuthMethod=CHAP,None` with T=1, with mutual CHAP `AuthMethod=CHAP` with T=0; CHAP_A is sent
//! once the target chose CHAP. The target's response to our mutual challenge is verified in
//! constant time.

use bytes::Bytes;

use crate::chap::{
    decode_binary, encode_hex, parse_identifier, responses_equal, ChapAlgorithm, ChapChallenge,
};
use crate::params::{SessionParams, SessionType};
use crate::pdu::types::{LoginRequest, LoginResponse, Stage};
use crate::seq::{Isid, Itt, SeqNum, Tsih};
use crate::text::codec::{encode_pairs, parse_pairs, TextAssembler, TextLimits};
use crate::text::keys::{self, KeyId, Phase};
use crate::text::{Negotiator, OperationalOffer, Role};

use super::env::ChapCredential;
use super::LoginStatus;

/// Most Login Responses accepted in one login.
pub const MAX_LOGIN_RESPONSES: u32 = 64;

/// The initiator's CHAP configuration.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct InitiatorChap {
    /// Our CHAP_N and the secret we share with the target.
    pub credential: ChapCredential,
    /// CHAP_A values to offer, most preferred first. MD5 alone is the safe default: open-iscsi
    /// 2.1.0 offered a list by default and Linux LIO targets older than kernel 3.15 (Synology
    /// DSM among them) refused any CHAP_A but "5", so open-iscsi went back to MD5 alone
    /// (open-iscsi/open-iscsi issue 180).
    pub algorithms: Vec<ChapAlgorithm>,
    /// For mutual CHAP: the CHAP_N the target must answer with and the target's secret.
    pub mutual: Option<ChapCredential>,
}

/// What the initiator logs in with.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct InitiatorConfig {
    /// InitiatorName.
    pub initiator_name: String,
    /// InitiatorAlias, sent when set.
    pub initiator_alias: Option<String>,
    /// TargetName for a normal session; `None` opens a discovery session.
    pub target_name: Option<String>,
    /// ISID.
    pub isid: Isid,
    /// TSIH: 0 for a new session, else the session to add a connection to.
    pub tsih: Tsih,
    /// Connection ID.
    pub cid: u16,
    /// CHAP, if the initiator authenticates.
    pub chap: Option<InitiatorChap>,
    /// Operational values to offer.
    pub offer: OperationalOffer,
}

/// Why a login failed.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The target answered with a status of class 2 or 3.
    #[error("login rejected by the target: {status}")]
    Rejected {
        /// Status-Class and Status-Detail.
        status: LoginStatus,
    },
    /// The target broke the protocol (bad header fields, stage, text or answers).
    #[error("target protocol error: {0}")]
    Protocol(&'static str),
    /// The target answered an offer with a value outside what was offered, or negotiated a
    /// key twice (RFC 7143 section 6.2): the answer is named, e.g. "invalid answer
    /// HeaderDigest=None" to an initiator that offered only CRC32C.
    #[error("target negotiation error: {0}")]
    Negotiation(crate::text::negotiate::NegotiationError),
    /// Mutual CHAP: the target did not prove its identity.
    #[error("target authentication failed: {0}")]
    TargetAuthentication(&'static str),
    /// The local configuration is unusable (e.g. the same CHAP secret in both directions).
    #[error("invalid login configuration: {0}")]
    Config(&'static str),
}

/// What a successful login settled.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct InitiatorOutcome {
    /// Negotiated parameters.
    pub params: SessionParams,
    /// Session type.
    pub session_type: SessionType,
    /// The TSIH the target assigned.
    pub tsih: Tsih,
    /// ExpStatSN for the first full-feature PDU (final StatSN + 1).
    pub exp_stat_sn: SeqNum,
    /// ExpCmdSN from the final response.
    pub exp_cmd_sn: SeqNum,
    /// MaxCmdSN from the final response.
    pub max_cmd_sn: SeqNum,
    /// TargetAlias, if declared.
    pub target_alias: Option<String>,
    /// TargetPortalGroupTag, if sent.
    pub portal_group_tag: Option<u16>,
}

/// What to do after a Login Response.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum InitiatorStep {
    /// Send this Login Request.
    Send(LoginRequest),
    /// Login complete: full feature phase.
    Complete(Box<InitiatorOutcome>),
    /// Status 0x0101 / 0x0102: reconnect to `target_address` (`host:port,tpgt`).
    Redirect {
        /// The TargetAddress value.
        target_address: String,
        /// 0x0102 (moved permanently): use it for later logins too.
        permanent: bool,
    },
    /// The login failed; close the connection.
    Failed(LoginError),
}

#[derive(Debug)]
enum Security {
    AwaitAuthMethod,
    AwaitChallenge,
    AwaitTargetResponse(ChapChallenge),
    Done,
}

/// The initiator login state machine for one connection.
#[derive(Debug)]
pub struct InitiatorLogin {
    config: InitiatorConfig,
    itt: Itt,
    cmd_sn: SeqNum,
    exp_stat_sn: SeqNum,
    stage: Stage,
    security: Security,
    negotiator: Negotiator,
    assembler: TextAssembler,
    sent_transit: Option<Stage>,
    operational_sent: bool,
    responses: u32,
    finished: bool,
    target_alias: Option<String>,
    portal_group_tag: Option<u16>,
    /// The parameters of the session a non-leading login joins (see [`Self::joining`]).
    session: Option<SessionParams>,
}

impl InitiatorLogin {
    /// A login with the given task tag, CmdSN (not advanced during login) and the ExpStatSN of
    /// the first request.
    pub fn new(config: InitiatorConfig, itt: Itt, cmd_sn: SeqNum, exp_stat_sn: SeqNum) -> Self {
        let mut negotiator = Negotiator::new(Role::Initiator, config.offer.clone());
        negotiator.set_session_type(session_type(&config));
        negotiator.set_leading(config.tsih == Tsih::NEW_SESSION);
        Self {
            config,
            itt,
            cmd_sn,
            exp_stat_sn,
            stage: Stage::Security,
            security: Security::AwaitAuthMethod,
            negotiator,
            assembler: TextAssembler::new(TextLimits::LOGIN.max_total_len),
            sent_transit: None,
            operational_sent: false,
            responses: 0,
            finished: false,
            target_alias: None,
            portal_group_tag: None,
            session: None,
        }
    }

    /// The login joins a session (its configuration names the session's TSIH) whose
    /// parameters are `session`. The keys the login does not negotiate, being leading-only
    /// (RFC 7143 section 13, "LO"), are the session's in its outcome, not their defaults
    /// (see [`SessionParams::joined`]): whatever reads a connection's parameters finds
    /// what holds on it.
    pub fn joining(mut self, session: SessionParams) -> Self {
        self.session = Some(session);
        self
    }

    /// The first Login Request.
    pub fn start(&mut self) -> Result<LoginRequest, LoginError> {
        let c = &self.config;
        let mut pairs = vec![KeyId::InitiatorName.pair(c.initiator_name.clone())];
        if let Some(alias) = &c.initiator_alias {
            pairs.push(KeyId::InitiatorAlias.pair(alias.clone()));
        }
        match &c.target_name {
            Some(name) => {
                pairs.push(KeyId::TargetName.pair(name.clone()));
                pairs.push(KeyId::SessionType.pair("Normal"));
            }
            None => pairs.push(KeyId::SessionType.pair("Discovery")),
        }
        match &c.chap {
            Some(chap) => {
                if chap
                    .mutual
                    .as_ref()
                    .is_some_and(|m| m.secret == chap.credential.secret)
                {
                    // RFC 7143 section 9.2.1: secrets must differ per direction.
                    return Err(LoginError::Config(
                        "the same CHAP secret for both directions",
                    ));
                }
                let mutual = chap.mutual.is_some();
                pairs.push(KeyId::AuthMethod.pair(if mutual { "CHAP" } else { "CHAP,None" }));
                self.stage = Stage::Security;
                Ok(self.request(pairs, (!mutual).then_some(Stage::Operational)))
            }
            None => {
                self.stage = Stage::Operational;
                self.security = Security::Done;
                pairs.extend(self.operational_offers());
                Ok(self.request(pairs, Some(Stage::FullFeature)))
            }
        }
    }

    /// Handles one Login Response. `random` fills buffers for our mutual CHAP challenge.
    pub fn handle_response(
        &mut self,
        rsp: &LoginResponse,
        random: &mut dyn FnMut(&mut [u8]),
    ) -> InitiatorStep {
        match self.step(rsp, random) {
            Ok(step) => step,
            Err(e) => {
                self.finished = true;
                InitiatorStep::Failed(e)
            }
        }
    }

    fn step(
        &mut self,
        rsp: &LoginResponse,
        random: &mut dyn FnMut(&mut [u8]),
    ) -> Result<InitiatorStep, LoginError> {
        use LoginError::Protocol;
        self.responses += 1;
        if self.finished || self.responses > MAX_LOGIN_RESPONSES {
            return Err(Protocol("unexpected Login Response"));
        }
        let status = rsp.status;
        if status.class == 1 {
            self.finished = true;
            let pairs = parse_pairs(&rsp.data, &TextLimits::LOGIN).unwrap_or_default();
            return match KeyId::TargetAddress.find_in(&pairs) {
                Some(target_address) => Ok(InitiatorStep::Redirect {
                    target_address: target_address.to_owned(),
                    permanent: status == LoginStatus::MOVED_PERMANENTLY,
                }),
                None => Err(Protocol("redirection without TargetAddress")),
            };
        }
        if status != LoginStatus::SUCCESS {
            return Err(LoginError::Rejected { status });
        }
        // The header checks open-iscsi's iscsid applies to a success response (`usr/login.c`:
        // VersionActive 0, the CSG it is in, T only towards a later stage).
        if rsp.version_active != 0 {
            return Err(Protocol("unsupported version"));
        }
        if rsp.isid != self.config.isid || rsp.itt != self.itt {
            return Err(Protocol("ISID or ITT mismatch"));
        }
        if Stage::from_code(rsp.csg) != Some(self.stage) {
            return Err(Protocol("CSG differs from the current stage"));
        }
        let transit = if rsp.transit {
            let nsg = Stage::from_code(rsp.nsg).ok_or(Protocol("reserved NSG"))?;
            let Some(asked) = self.sent_transit else {
                return Err(Protocol("T bit set on response, but not on the request"));
            };
            if rsp.cont || nsg.code() <= self.stage.code() || nsg.code() > asked.code() {
                return Err(Protocol("invalid stage transition"));
            }
            Some(nsg)
        } else {
            None
        };
        self.exp_stat_sn = rsp.stat_sn.next();
        let text = match self.assembler.push(&rsp.data, rsp.cont) {
            Err(_) => return Err(Protocol("response text too long")),
            // RFC 7143 section 6.2 (C bit): fetch the rest of the text with an empty request.
            Ok(None) => return Ok(InitiatorStep::Send(self.request(Vec::new(), None))),
            Ok(Some(text)) => text,
        };
        let pairs = parse_pairs(&text, &TextLimits::LOGIN)
            .map_err(|_| Protocol("malformed response text"))?;
        self.declarations(&pairs)?;
        let mut out = Vec::new();
        if self.stage == Stage::Security {
            self.security(&pairs, random, &mut out)?;
        } else if pairs.iter().any(|(k, _)| is_security_key(k)) {
            return Err(Protocol("security key outside the security stage"));
        }
        let answers = self
            .negotiator
            .handle(&negotiable(&pairs))
            .map_err(LoginError::Negotiation)?;
        out.extend(answers);
        match transit {
            Some(Stage::FullFeature) => self.complete(rsp),
            Some(next) => {
                self.stage = next;
                out.extend(self.operational_offers());
                Ok(InitiatorStep::Send(
                    self.request(out, Some(Stage::FullFeature)),
                ))
            }
            None => {
                // With mutual CHAP the initiator asks to transit together with its challenge
                // (open-iscsi sends CHAP_N, CHAP_R, CHAP_I and CHAP_C with T=1 in one request,
                // `usr/auth.c`); the target only transits once it answered.
                let ready = matches!(
                    self.security,
                    Security::Done | Security::AwaitTargetResponse(_)
                );
                let next = match self.stage {
                    Stage::Security => ready.then_some(Stage::Operational),
                    _ => Some(Stage::FullFeature),
                };
                Ok(InitiatorStep::Send(self.request(out, next)))
            }
        }
    }

    /// Records the target's declarative login keys.
    fn declarations(&mut self, pairs: &[(String, String)]) -> Result<(), LoginError> {
        for (k, v) in pairs {
            match keys::lookup(k).map(|d| d.id) {
                Some(KeyId::TargetAlias) => self.target_alias = Some(v.clone()),
                Some(KeyId::TargetPortalGroupTag) => {
                    let tag = KeyId::TargetPortalGroupTag.parse_number(v);
                    self.portal_group_tag =
                        Some(tag.map_err(|_| LoginError::Protocol("bad TargetPortalGroupTag"))?);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn security(
        &mut self,
        pairs: &[(String, String)],
        random: &mut dyn FnMut(&mut [u8]),
        out: &mut Vec<(String, String)>,
    ) -> Result<(), LoginError> {
        use LoginError::{Protocol, TargetAuthentication};
        let get = |k: KeyId| k.find_in(pairs);
        match std::mem::replace(&mut self.security, Security::Done) {
            Security::AwaitAuthMethod => match (get(KeyId::AuthMethod), &self.config.chap) {
                (Some("CHAP"), Some(chap)) => {
                    let list: Vec<String> = chap
                        .algorithms
                        .iter()
                        .map(|a| a.code().to_string())
                        .collect();
                    out.push(KeyId::ChapA.pair(list.join(",")));
                    self.security = Security::AwaitChallenge;
                }
                (Some("None"), Some(chap)) if chap.mutual.is_some() => {
                    return Err(TargetAuthentication("target refused mutual CHAP"));
                }
                (Some("None"), _) => {}
                (None, None) => {}
                _ => return Err(Protocol("unacceptable AuthMethod answer")),
            },
            Security::AwaitChallenge => {
                let chap = self
                    .config
                    .chap
                    .as_ref()
                    .ok_or(Protocol("unexpected CHAP"))?;
                let (Some(a), Some(i), Some(c)) =
                    (get(KeyId::ChapA), get(KeyId::ChapI), get(KeyId::ChapC))
                else {
                    return Err(Protocol("missing CHAP_A, CHAP_I or CHAP_C"));
                };
                let alg = keys::parse_number(a)
                    .and_then(ChapAlgorithm::from_code)
                    .filter(|alg| chap.algorithms.contains(alg))
                    .ok_or(Protocol("CHAP_A not offered"))?;
                let id = parse_identifier(i).map_err(|_| Protocol("bad CHAP_I"))?;
                let challenge = decode_binary(c).map_err(|_| Protocol("bad CHAP_C"))?;
                let response = alg.response(id, &chap.credential.secret, &challenge);
                out.push(KeyId::ChapN.pair(chap.credential.user.clone()));
                out.push(KeyId::ChapR.pair(encode_hex(&response)));
                if chap.mutual.is_some() {
                    let mut ours = ChapChallenge::issue(alg, alg.digest_len(), random);
                    // RFC 7143 section 9.2.1: never reuse the responder's challenge.
                    if ours.challenge == challenge {
                        if let Some(b) = ours.challenge.first_mut() {
                            *b ^= 0xff;
                        }
                    }
                    out.push(KeyId::ChapI.pair(ours.identifier.to_string()));
                    out.push(KeyId::ChapC.pair(encode_hex(&ours.challenge)));
                    self.security = Security::AwaitTargetResponse(ours);
                }
            }
            Security::AwaitTargetResponse(ours) => {
                let mutual = self
                    .config
                    .chap
                    .as_ref()
                    .and_then(|c| c.mutual.as_ref())
                    .ok_or(Protocol("unexpected CHAP"))?;
                let (Some(n), Some(r)) = (get(KeyId::ChapN), get(KeyId::ChapR)) else {
                    return Err(TargetAuthentication("missing CHAP_N or CHAP_R"));
                };
                if n != mutual.user || !ours.verify(&mutual.secret, r) {
                    return Err(TargetAuthentication("CHAP response did not match"));
                }
                // A response computed with our own secret means both directions share one
                // secret, which RFC 7143 section 9.2.1 forbids; open-iscsi refuses it too
                // ("Local password same as remote", `usr/auth.c`).
                let own = self.config.chap.as_ref().map(|c| {
                    ours.algorithm
                        .response(ours.identifier, &c.credential.secret, &ours.challenge)
                });
                if let (Some(own), Ok(got)) = (own, decode_binary(r)) {
                    if responses_equal(&own, &got) {
                        return Err(TargetAuthentication("target used the initiator's secret"));
                    }
                }
            }
            Security::Done => {
                if pairs.iter().any(|(k, _)| is_security_key(k)) {
                    return Err(Protocol("security keys after authentication"));
                }
            }
        }
        Ok(())
    }

    fn complete(&mut self, rsp: &LoginResponse) -> Result<InitiatorStep, LoginError> {
        self.finished = true;
        // RFC 7143 section 11.13 (TSIH): the final response of a leading login carries the new
        // TSIH; a non-leading login keeps the session's.
        let tsih_ok = match self.config.tsih {
            Tsih::NEW_SESSION => rsp.tsih != Tsih::NEW_SESSION,
            t => rsp.tsih == t,
        };
        if !tsih_ok {
            return Err(LoginError::Protocol("invalid TSIH in the final response"));
        }
        let negotiated = self.negotiator.result();
        let params = match self.session {
            Some(session) if self.config.tsih != Tsih::NEW_SESSION => negotiated.joined(&session),
            _ => negotiated,
        };
        Ok(InitiatorStep::Complete(Box::new(InitiatorOutcome {
            params,
            session_type: session_type(&self.config),
            tsih: rsp.tsih,
            exp_stat_sn: rsp.stat_sn.next(),
            exp_cmd_sn: rsp.exp_cmd_sn,
            max_cmd_sn: rsp.max_cmd_sn,
            target_alias: self.target_alias.clone(),
            portal_group_tag: self.portal_group_tag,
        })))
    }

    fn operational_offers(&mut self) -> Vec<(String, String)> {
        if self.operational_sent {
            return Vec::new();
        }
        self.operational_sent = true;
        let mut pairs = self.negotiator.offers();
        pairs.extend(self.negotiator.declarations());
        pairs
    }

    fn request(&mut self, pairs: Vec<(String, String)>, transit: Option<Stage>) -> LoginRequest {
        self.sent_transit = transit;
        LoginRequest {
            transit: transit.is_some(),
            cont: false,
            csg: self.stage.code(),
            nsg: transit.map_or(0, Stage::code),
            version_max: 0,
            version_min: 0,
            isid: self.config.isid,
            tsih: self.config.tsih,
            itt: self.itt,
            cid: self.config.cid,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            data: if pairs.is_empty() {
                Bytes::new()
            } else {
                encode_pairs(&pairs)
            },
        }
    }
}

fn session_type(config: &InitiatorConfig) -> SessionType {
    if config.target_name.is_some() {
        SessionType::Normal
    } else {
        SessionType::Discovery
    }
}

fn is_security_key(key: &str) -> bool {
    keys::lookup(key).is_some_and(|d| d.phase == Phase::Security)
}

/// Keys for the negotiator: everything but security and the target's declarative login keys.
fn negotiable(pairs: &[(String, String)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .filter(|(k, _)| keys::lookup(k).is_none_or(|d| d.handler != keys::Handler::Login))
        .cloned()
        .collect()
}
