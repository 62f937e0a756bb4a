//! Target side of the login phase (RFC 7143 sections 6.3, 11.12, 11.13).
//!
//! # Driver contract
//!
//! One [`TargetLogin`] per TCP connection, created when the connection is accepted:
//!
//! ```text
//! let mut login = TargetLogin::new(stat_sn_start, max_cmd_window);
//! loop {
//!     let req: LoginRequest = /* next PDU; any other opcode before login completes: close */;
//!     match login.handle_request(&req, &mut env) {
//!         LoginStep::Respond(rsp) => send(rsp),                 // and read the next request
//!         LoginStep::Complete { response, outcome } => {        // send, then full feature
//!             send(response);                                   // phase with outcome.params,
//!             break;                                            // outcome.tsih, next_stat_sn
//!         }
//!         LoginStep::Fail(rsp) => { send(rsp); close(); break } // status class 2 or 3
//!     }
//! }
//! ```
//!
//! The state machine never blocks and performs no I/O. It calls [`TargetLoginEnv`]:
//! `target`/`discovery_policy` once on the first request, `admit` once after identity and ACL
//! checks, `random_bytes` for CHAP challenges, and `bind_session` exactly once right before the
//! final (T=1, NSG=3) response; `bind_session` decides new session / add connection /
//! reinstatement from the [`SessionBinding`] (ISID, TSIH, CID, names). After `Complete` or
//! `Fail` any further call returns `Fail` (initiator error).
//!
//! Stages: a login starts in SecurityNegotiation (CSG=0) or, when the target needs no
//! authentication, directly in LoginOperationalNegotiation (CSG=1); it may go from security
//! straight to full feature phase. The target sets T only when the initiator did, the
//! requested transition is valid, authentication is complete and none of the target's own
//! offers is unanswered (RFC 7143 section 6.3; open-iscsi refuses a response with T set when
//! its own request had T clear or authentication is incomplete, `usr/auth.c`). Long responses
//! are split into several Login Responses with the C bit; the initiator fetches the rest with
//! empty requests. Request text with the C bit is reassembled (empty responses acknowledge it).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::chap::{decode_binary, encode_hex, parse_identifier, select_algorithm, ChapChallenge};
use crate::params::SessionType;
use crate::pdu::types::{LoginRequest, LoginResponse, Stage};
use crate::seq::{SeqNum, Tsih};
use crate::text::codec::{encode_pairs, parse_pairs, split_text, TextAssembler, TextLimits};
use crate::text::keys::{self, Handler, KeyId, Phase};
use crate::text::{Negotiator, Role};

use super::env::{LoginOutcome, SessionBinding, TargetLoginEnv, TargetLoginPolicy};
use super::{LoginStatus, LOGIN_SEGMENT_MAX};

/// Most Login Requests accepted in one login, a bound on peer-driven work (open-iscsi needs
/// about 4; continuation PDUs count too).
pub const MAX_LOGIN_REQUESTS: u32 = 64;

/// What to do with a Login Request.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum LoginStep {
    /// Send this response and wait for the next request.
    Respond(LoginResponse),
    /// Send this final response; the connection is in full feature phase.
    Complete {
        /// The final Login Response (T=1, NSG=3, status 0).
        response: LoginResponse,
        /// What was negotiated.
        outcome: Box<LoginOutcome>,
    },
    /// Send this Login Response (status class 2 or 3), then close the connection.
    Fail(LoginResponse),
}

/// The target login state machine for one connection.
#[derive(Debug)]
pub struct TargetLogin {
    stat_sn: SeqNum,
    window: u32,
    requests: u32,
    state: State,
    assembler: TextAssembler,
    /// Remaining chunks of a long response, and what the last one completes.
    outgoing: VecDeque<(Bytes, bool)>,
    outgoing_end: Option<Pending>,
    /// ExpCmdSN and MaxCmdSN of the session a non-leading login joins (its responses carry
    /// the session's window, not one computed from the login's CmdSN).
    session_window: Option<(SeqNum, SeqNum)>,
}

#[derive(Debug)]
enum State {
    Start,
    Active(Box<Session>),
    Done,
}

/// Security sub-states (RFC 7143 section 12.1.3, in the order open-iscsi's `usr/auth.c` sends
/// the keys: AuthMethod, then CHAP_A once CHAP was chosen, then CHAP_N and CHAP_R, with CHAP_I
/// and CHAP_C for mutual CHAP).
#[derive(Debug)]
enum Security {
    ExpectAuthMethod,
    ExpectChapA,
    ExpectChapResponse(ChapChallenge),
    Authenticated,
}

#[derive(Debug)]
struct Session {
    binding: SessionBinding,
    initiator_alias: Option<String>,
    policy: TargetLoginPolicy,
    negotiator: Negotiator,
    stage: Stage,
    security: Security,
    authenticated_user: Option<String>,
    first_response_sent: bool,
    operational_started: bool,
    offers_made: bool,
}

/// The end of a response: its header fields once the last chunk is sent.
#[derive(Debug)]
struct Pending {
    csg: Stage,
    transit: Option<Stage>,
    tsih: Tsih,
    outcome: Option<Box<LoginOutcome>>,
}

impl TargetLogin {
    /// A login on a new connection. `stat_sn_start` is the StatSN of the first Login Response;
    /// `max_cmd_window` (at least 1) sets MaxCmdSN = ExpCmdSN + window - 1.
    pub fn new(stat_sn_start: SeqNum, max_cmd_window: u32) -> Self {
        Self {
            stat_sn: stat_sn_start,
            window: max_cmd_window.max(1),
            requests: 0,
            state: State::Start,
            assembler: TextAssembler::new(TextLimits::LOGIN.max_total_len),
            outgoing: VecDeque::new(),
            outgoing_end: None,
            session_window: None,
        }
    }

    /// Handles one Login Request. Never panics on any input.
    pub fn handle_request(
        &mut self,
        req: &LoginRequest,
        env: &mut dyn TargetLoginEnv,
    ) -> LoginStep {
        match self.step(req, env) {
            Ok(step) => step,
            Err(status) => {
                self.state = State::Done;
                self.outgoing.clear();
                let csg = Stage::from_code(req.csg).unwrap_or(Stage::Security);
                LoginStep::Fail(self.response(
                    req,
                    csg,
                    None,
                    req.tsih,
                    Bytes::new(),
                    false,
                    status,
                ))
            }
        }
    }

    fn step(
        &mut self,
        req: &LoginRequest,
        env: &mut dyn TargetLoginEnv,
    ) -> Result<LoginStep, LoginStatus> {
        self.requests += 1;
        if req.tsih != Tsih::NEW_SESSION {
            self.session_window = env.session_command_window(req.tsih);
        }
        if self.requests > MAX_LOGIN_REQUESTS || matches!(self.state, State::Done) {
            return Err(LoginStatus::INITIATOR_ERROR);
        }
        // RFC 7143 section 11.12.4: version 0x00 is the only version; a Version-min above it
        // cannot be served.
        if req.version_min > 0 {
            return Err(LoginStatus::UNSUPPORTED_VERSION);
        }
        // Section 11.12.2: "If the T bit is set to 1, the C bit MUST be 0."
        if req.transit && req.cont {
            return Err(LoginStatus::INITIATOR_ERROR);
        }
        // Section 11.12.3: stage 2 is reserved; CSG can never be full feature phase, and a
        // transition only goes forward.
        let csg = match Stage::from_code(req.csg) {
            Some(s @ (Stage::Security | Stage::Operational)) => s,
            _ => return Err(LoginStatus::INITIATOR_ERROR),
        };
        let nsg = if req.transit {
            match Stage::from_code(req.nsg) {
                Some(n) if n.code() > csg.code() => Some(n),
                _ => return Err(LoginStatus::INITIATOR_ERROR),
            }
        } else {
            None
        };
        if let State::Active(s) = &self.state {
            // Section 6.3 / 11.12.6 / 11.12.7: ISID, TSIH and CID do not change within a login,
            // and the current stage is the one the last response moved to (no going back).
            // While a long response is being fetched, the stage is still the one it answers.
            let b = &s.binding;
            let stage = match &self.outgoing_end {
                Some(end) if !self.outgoing.is_empty() => end.csg,
                _ => s.stage,
            };
            if req.isid != b.isid || req.tsih != b.tsih || req.cid != b.cid || csg != stage {
                return Err(LoginStatus::INITIATOR_ERROR);
            }
        }
        // RFC 7143 section 6.2 (C bit): the rest of a response sent with the C bit is fetched with
        // empty Login Requests.
        if !self.outgoing.is_empty() {
            if !req.data.is_empty() || req.cont {
                return Err(LoginStatus::INITIATOR_ERROR);
            }
            return Ok(self.next_chunk(req));
        }
        let text = match self.assembler.push(&req.data, req.cont) {
            Err(_) => return Err(LoginStatus::INITIATOR_ERROR),
            // Acknowledge a partial text with an empty response (T=0).
            Ok(None) => {
                return Ok(LoginStep::Respond(self.response(
                    req,
                    csg,
                    None,
                    req.tsih,
                    Bytes::new(),
                    false,
                    LoginStatus::SUCCESS,
                )))
            }
            Ok(Some(text)) => text,
        };
        let pairs =
            parse_pairs(&text, &TextLimits::LOGIN).map_err(|_| LoginStatus::INITIATOR_ERROR)?;
        if matches!(self.state, State::Start) {
            self.state = State::Active(Box::new(begin(req, csg, &pairs, env)?));
        }
        let State::Active(session) = &mut self.state else {
            return Err(LoginStatus::INITIATOR_ERROR);
        };
        let mut out = Vec::new();
        session.identity_extras(req, &pairs, &mut out)?;
        let ready = match csg {
            Stage::Security => session.security(&pairs, env, &mut out)?,
            _ => session.operational(&pairs, nsg.is_some(), &mut out)?,
        };
        let transit = if ready { nsg } else { None };
        let mut end = Pending {
            csg,
            transit,
            tsih: req.tsih,
            outcome: None,
        };
        if transit == Some(Stage::FullFeature) {
            let tsih = env.bind_session(&session.binding)?;
            end.tsih = tsih;
            let negotiated = session.negotiator.result();
            let params = match env.session_params(tsih) {
                Some(joined) if session.binding.tsih != Tsih::NEW_SESSION => {
                    negotiated.joined(&joined)
                }
                _ => negotiated,
            };
            end.outcome = Some(Box::new(LoginOutcome {
                params,
                session_type: session.binding.session_type,
                initiator_name: session.binding.initiator_name.clone(),
                initiator_alias: session.initiator_alias.clone(),
                target_name: session.binding.target_name.clone(),
                isid: session.binding.isid,
                tsih,
                cid: session.binding.cid,
                authenticated_user: session.authenticated_user.clone(),
                next_stat_sn: SeqNum::new(0),
                exp_cmd_sn: req.cmd_sn,
            }));
        }
        if let Some(next) = transit {
            session.stage = next;
        }
        self.outgoing = split_text(&encode_pairs(&out), LOGIN_SEGMENT_MAX).into();
        self.outgoing_end = Some(end);
        Ok(self.next_chunk(req))
    }

    /// Sends the next chunk of the pending response; the last one carries the real T bit.
    fn next_chunk(&mut self, req: &LoginRequest) -> LoginStep {
        let (data, cont) = self.outgoing.pop_front().unwrap_or_default();
        let Some(end) = self.outgoing_end.as_ref() else {
            return LoginStep::Fail(self.response(
                req,
                Stage::Security,
                None,
                req.tsih,
                Bytes::new(),
                false,
                LoginStatus::TARGET_ERROR,
            ));
        };
        let (csg, tsih) = (end.csg, end.tsih);
        if cont {
            // Section 11.13: "the T bit MUST be 0" while the C bit is set.
            return LoginStep::Respond(self.response(
                req,
                csg,
                None,
                req.tsih,
                data,
                true,
                LoginStatus::SUCCESS,
            ));
        }
        let Some(end) = self.outgoing_end.take() else {
            return LoginStep::Respond(self.response(
                req,
                csg,
                None,
                req.tsih,
                data,
                false,
                LoginStatus::SUCCESS,
            ));
        };
        let response = self.response(
            req,
            csg,
            end.transit,
            tsih,
            data,
            false,
            LoginStatus::SUCCESS,
        );
        match end.outcome {
            Some(mut outcome) => {
                self.state = State::Done;
                outcome.next_stat_sn = self.stat_sn;
                LoginStep::Complete { response, outcome }
            }
            None => LoginStep::Respond(response),
        }
    }

    /// Builds a Login Response (section 11.13) and advances StatSN. Section 11.13.4: "the
    /// next response of any kind ... will carry this number + 1".
    #[allow(clippy::too_many_arguments)]
    fn response(
        &mut self,
        req: &LoginRequest,
        csg: Stage,
        transit: Option<Stage>,
        tsih: Tsih,
        data: Bytes,
        cont: bool,
        status: LoginStatus,
    ) -> LoginResponse {
        let stat_sn = self.stat_sn;
        self.stat_sn = stat_sn.next();
        // A leading login's requests are immediate: ExpCmdSN is the request's CmdSN (RFC 7143
        // section 4.2.2.1), and the window opens from there. A connection joining a session
        // reports the session's window (section 11.13: ExpCmdSN and MaxCmdSN are
        // session-wide).
        let (exp_cmd_sn, max_cmd_sn) = self
            .session_window
            .unwrap_or((req.cmd_sn, req.cmd_sn.add(self.window - 1)));
        LoginResponse {
            transit: transit.is_some(),
            cont,
            csg: csg.code(),
            nsg: transit.map_or(0, Stage::code),
            version_max: 0,
            version_active: 0,
            isid: req.isid,
            tsih,
            itt: req.itt,
            stat_sn,
            exp_cmd_sn,
            max_cmd_sn,
            status,
            data,
        }
    }
}

/// Handles the identity keys of the first request: InitiatorName, SessionType, TargetName,
/// the target's policy, its ACL and the driver's admission check.
fn begin(
    req: &LoginRequest,
    csg: Stage,
    pairs: &[(String, String)],
    env: &mut dyn TargetLoginEnv,
) -> Result<Session, LoginStatus> {
    let get = |k: KeyId| k.find_in(pairs);
    // Section 13.5: InitiatorName "MUST be sent by the initiator in the first Login Request".
    let initiator_name = get(KeyId::InitiatorName)
        .filter(|n| !n.is_empty())
        .ok_or(LoginStatus::MISSING_PARAMETER)?;
    let session_type = match get(KeyId::SessionType) {
        None | Some("Normal") => SessionType::Normal,
        Some("Discovery") => SessionType::Discovery,
        Some(_) => return Err(LoginStatus::SESSION_TYPE_NOT_SUPPORTED),
    };
    let (target_name, policy) = match session_type {
        SessionType::Discovery => (None, env.discovery_policy()),
        // Section 13.4: TargetName is required for a normal session.
        SessionType::Normal => {
            let name = get(KeyId::TargetName)
                .filter(|n| !n.is_empty())
                .ok_or(LoginStatus::MISSING_PARAMETER)?;
            let policy = env.target(name).ok_or(LoginStatus::NOT_FOUND)?;
            (Some(name.to_owned()), policy)
        }
    };
    if let Some(acl) = &policy.allowed_initiators {
        if !acl.iter().any(|n| n == initiator_name) {
            return Err(LoginStatus::AUTHORIZATION_FAILURE);
        }
    }
    // A first PDU in the operational stage skips security (RFC 7143 section 6.3), which is
    // only allowed when no authentication is required; refusing with a Login Response
    // (status 0x0201) rather than a reset makes open-iscsi report an authorization failure
    // instead of retrying forever (`usr/initiator.c`).
    if csg == Stage::Operational && policy.chap.is_some() {
        return Err(LoginStatus::AUTH_FAILURE);
    }
    let binding = SessionBinding {
        isid: req.isid,
        tsih: req.tsih,
        cid: req.cid,
        initiator_name: initiator_name.to_owned(),
        target_name,
        session_type,
    };
    env.admit(&binding)?;
    let mut negotiator = Negotiator::new(Role::Target, policy.offer.clone());
    negotiator.set_session_type(session_type);
    negotiator.set_leading(req.tsih == Tsih::NEW_SESSION);
    let security = if csg == Stage::Operational {
        Security::Authenticated
    } else {
        Security::ExpectAuthMethod
    };
    Ok(Session {
        binding,
        initiator_alias: None,
        policy,
        negotiator,
        stage: csg,
        security,
        authenticated_user: None,
        first_response_sent: false,
        operational_started: false,
        offers_made: false,
    })
}

#[path = "target_stages.rs"]
mod stages;
