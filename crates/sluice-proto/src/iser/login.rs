//! iSER-assisted login (RFC 7145 section 5.1 and 6): the login runs in TCP streaming mode,
//! as plain iSCSI, and the connection switches to RDMA mode after the final Login Response
//! when both sides said RDMAExtensions=Yes. These shims sit between the socket and each
//! role's login core: they carry the keys iSER adds (so the cores' key table stays
//! iSCSI's), turn digests and markers off, and say when and how the connection switches.

use bytes::Bytes;

use crate::pdu::codes::LoginStatus;
use crate::pdu::{LoginRequest, LoginResponse};
use crate::seq::Tsih;

use super::keys::{
    append_pairs, cap_first_burst, cap_max_recv, find_key, initiator_offer,
    iser_operational_offers, take_iser_keys, target_answers, IserKeyError, IserKeys,
    DEFAULT_RECV_DSL, INITIATOR_RECV_DSL, MAX_UNSOLICITED_SENDS, RDMA_EXTENSIONS, TARGET_RECV_DSL,
};

/// The full feature phase stage number (RFC 7143 section 11.12.3).
const FULL_FEATURE_PHASE: u8 = 3;
/// The operational negotiation stage.
const OPERATIONAL: u8 = 1;

/// How a login ended, as a shim saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginEnd {
    /// Still logging in.
    Pending,
    /// The final Login Response: switch to RDMA mode.
    Rdma {
        /// The largest data segment the initiator receives in a Send.
        initiator_recv_dsl: u32,
        /// The largest data segment the target receives in a Send.
        target_recv_dsl: u32,
        /// The MaxRecvDataSegmentLength the target's login core declared (the longest
        /// Data-Out it takes).
        target_core_max_recv: u32,
        /// The MaxRecvDataSegmentLength the initiator's login core declared.
        initiator_core_max_recv: u32,
        /// The negotiated MaxBurstLength (the target's answer).
        max_burst: u32,
        /// The negotiated FirstBurstLength: how much of a write whose command has the F bit
        /// clear travels in Sends (RFC 7145 section 7.3.4).
        first_burst: u32,
        /// The MaxOutstandingUnexpectedPDUs the other side declared (RFC 7145 section
        /// 6.3.4; 0, the default, when it declared none: no limit): what this side may
        /// have outstanding at it.
        peer_max_unexpected: u32,
    },
    /// The final Login Response without RDMAExtensions=Yes: the connection stays iSCSI over
    /// TCP.
    Tcp,
    /// The login failed (the response's status says why).
    Failed,
}

fn number(text: &[u8], key: &str) -> Option<u32> {
    find_key(text, key).and_then(|v| v.parse().ok())
}

fn end_of(rsp: &LoginResponse) -> Option<bool> {
    if rsp.status != LoginStatus::SUCCESS {
        return Some(false);
    }
    (rsp.transit && rsp.nsg == FULL_FEATURE_PHASE && !rsp.cont).then_some(true)
}

/// What a connection joining a session (MC/S: a login with the session's TSIH) takes from
/// the session rather than from its own login text. RDMAExtensions is leading-only and
/// session-wide (RFC 7145 section 6.3.1, "LO", "SW"): the leading connection settles whether
/// the session is in iSER-assisted mode, every connection of the session is then in that
/// mode, and a non-leading login does not negotiate the key again (RFC 7143 section 6.2: a
/// key that does not apply is answered "Irrelevant"). FirstBurstLength (RFC 7143 section
/// 13.14) and MaxOutstandingUnexpectedPDUs (RFC 7145 section 6.3.4) are leading-only too.
/// The receive data segment lengths (RFC 7145 sections 6.3.2 and 6.3.3) are declared on each
/// connection in RDMA mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JoinedSession {
    /// Whether the session is in iSER-assisted (RDMA) mode.
    pub rdma: bool,
    /// The session's FirstBurstLength.
    pub first_burst: u32,
    /// The MaxOutstandingUnexpectedPDUs the other side declared on the leading connection
    /// (0: no limit).
    pub peer_max_unexpected: u32,
}

impl JoinedSession {
    /// What a leading login's end says of its session: RDMA mode with its FirstBurstLength
    /// and the peer's MaxOutstandingUnexpectedPDUs, or TCP with `first_burst` (the session's
    /// FirstBurstLength, unused without RDMA mode). `None` for a login that did not end.
    pub fn of(end: LoginEnd, first_burst: u32) -> Option<Self> {
        match end {
            LoginEnd::Rdma {
                first_burst,
                peer_max_unexpected,
                ..
            } => Some(JoinedSession {
                rdma: true,
                first_burst,
                peer_max_unexpected,
            }),
            LoginEnd::Tcp => Some(JoinedSession {
                rdma: false,
                first_burst,
                peer_max_unexpected: 0,
            }),
            LoginEnd::Pending | LoginEnd::Failed => None,
        }
    }
}

/// The answer to a leading-only key on a non-leading login (RFC 7143 section 6.2).
const IRRELEVANT: &str = "Irrelevant";

/// The target's shim.
#[derive(Debug)]
pub struct TargetLoginShim {
    serves_iser: bool,
    target_recv_dsl: u32,
    max_unexpected: u32,
    offer: Option<IserKeys>,
    answers: Vec<(&'static str, String)>,
    initiator_max_recv: u32,
    core_max_recv: u32,
    max_burst: u32,
    first_burst: FirstBurst,
    /// The session this connection joins (see [`Self::joins_session`]).
    session: Option<JoinedSession>,
    /// Whether the login is a non-leading one (its requests carry a TSIH): known from its
    /// first request.
    non_leading: bool,
    /// The InitiatorRecvDataSegmentLength a non-leading login declared.
    join_initiator_recv_dsl: Option<u32>,
    /// Whether a non-leading login's answers were made.
    join_answered: bool,
}

/// RFC 7143 section 13.13: MaxBurstLength's default.
const DEFAULT_MAX_BURST: u32 = 262_144;
/// RFC 7143 section 13.14: FirstBurstLength's default.
const DEFAULT_FIRST_BURST: u32 = 65_536;

/// FirstBurstLength as login text settles it: the minimum of every value either side sent
/// (RFC 7143 section 13.14: the result function is Minimum, so an offer's answer is never
/// above it), the default when neither sent one. A connection joining a session negotiates
/// none: the key is leading-only (section 13.14, "LO"), and the session's value, which
/// the shims are told with `joins_session`, is what applies to it.
#[derive(Clone, Copy, Debug)]
struct FirstBurst(Option<u32>);

impl FirstBurst {
    fn see(&mut self, text: &[u8]) {
        if let Some(n) = number(text, "FirstBurstLength") {
            self.0 = Some(self.0.map_or(n, |m| m.min(n)));
        }
    }

    fn value(self) -> u32 {
        self.0.unwrap_or(DEFAULT_FIRST_BURST)
    }
}

impl TargetLoginShim {
    /// A shim for a listener that serves iSER (`serves_iser`) with receive buffers for
    /// `target_recv_dsl` bytes of data segment.
    pub fn new(serves_iser: bool, target_recv_dsl: u32) -> Self {
        TargetLoginShim {
            serves_iser,
            target_recv_dsl,
            max_unexpected: 0,
            offer: None,
            answers: Vec::new(),
            initiator_max_recv: DEFAULT_RECV_DSL,
            core_max_recv: DEFAULT_RECV_DSL,
            max_burst: DEFAULT_MAX_BURST,
            first_burst: FirstBurst(None),
            session: None,
            non_leading: false,
            join_initiator_recv_dsl: None,
            join_answered: false,
        }
    }

    /// Declares MaxOutstandingUnexpectedPDUs=`n` (RFC 7145 section 6.3.4): the receive
    /// buffers this target keeps for unexpected PDUs (0, the default: no limit).
    pub fn with_max_unexpected(mut self, n: u32) -> Self {
        self.max_unexpected = n;
        self
    }

    /// The login (whose requests carry a TSIH) joins `session`; told before its first
    /// request is handled. The connection takes the session's mode (RFC 7145 section
    /// 6.3.1): RDMA mode when the session is in it (and this listener serves iSER), TCP
    /// otherwise, whatever RDMAExtensions the initiator sends, which is answered
    /// "Irrelevant". Its datamover takes the session's FirstBurstLength and the initiator's
    /// MaxOutstandingUnexpectedPDUs from the leading connection. The session's
    /// FirstBurstLength bounds the unsolicited data of every connection (RFC 7143 section
    /// 13.14), which in RDMA mode arrives in Sends, one receive buffer each (RFC 7145 section
    /// 7.3.4): a session whose FirstBurstLength needs more Sends than this target provisions
    /// per command ([`MAX_UNSOLICITED_SENDS`] of TargetRecvDataSegmentLength) cannot take the
    /// connection, and the final Login Response refuses it (0x0208, "can't include in
    /// session").
    ///
    /// A non-leading login the shim is not told of is taken as joining a session in TCP
    /// mode; the driver checks the connection's mode against its session's when it joins.
    pub fn joins_session(&mut self, session: JoinedSession) {
        self.session = Some(session);
    }

    /// The largest FirstBurstLength this target takes over iSER: its unsolicited data in
    /// at most [`MAX_UNSOLICITED_SENDS`] Sends.
    fn max_first_burst(&self) -> u32 {
        self.target_recv_dsl.saturating_mul(MAX_UNSOLICITED_SENDS)
    }

    fn rdma(&self) -> bool {
        if self.non_leading {
            return self.serves_iser && self.session.is_some_and(|s| s.rdma);
        }
        self.serves_iser
            && self
                .offer
                .as_ref()
                .and_then(|o| o.rdma_extensions.as_deref())
                == Some("Yes")
    }

    /// A Login Request from the initiator, rewritten for the target's login core.
    pub fn handle_request(&mut self, req: &mut LoginRequest) -> Result<(), IserKeyError> {
        if req.cont {
            // Text continued over several PDUs is passed as is (iSER keys are short and
            // sluice's initiator never splits them).
            return Ok(());
        }
        self.non_leading |= req.tsih != Tsih::NEW_SESSION;
        let (keys, rest) = take_iser_keys(&req.data)?;
        if self.non_leading {
            self.join_keys(&keys, req.csg);
        } else if keys.rdma_extensions.is_some() {
            self.answers = target_answers(
                &keys,
                self.serves_iser,
                self.target_recv_dsl,
                self.max_unexpected,
            );
            self.offer = Some(keys);
        }
        if let Some(n) = number(&rest, "MaxRecvDataSegmentLength") {
            self.initiator_max_recv = n;
        }
        req.data = if self.rdma() {
            cap_first_burst(&iser_operational_offers(&rest), self.max_first_burst())
        } else {
            rest
        };
        self.first_burst.see(&req.data);
        Ok(())
    }

    /// The iSER keys of a non-leading login's request: RDMAExtensions and
    /// MaxOutstandingUnexpectedPDUs are leading-only (RFC 7145 sections 6.3.1 and 6.3.4):
    /// the first is answered "Irrelevant", the second (declarative) is not answered and the
    /// session's value stays. InitiatorRecvDataSegmentLength is the connection's own; in RDMA
    /// mode the target declares its TargetRecvDataSegmentLength on the connection.
    fn join_keys(&mut self, keys: &IserKeys, csg: u8) {
        if let Some(n) = keys.initiator_recv_dsl {
            self.join_initiator_recv_dsl = Some(n);
        }
        if keys.rdma_extensions.is_some() {
            self.answers.push((RDMA_EXTENSIONS, IRRELEVANT.to_owned()));
        }
        if !self.join_answered && csg == OPERATIONAL {
            self.join_answered = true;
            if self.rdma() {
                self.answers
                    .push((TARGET_RECV_DSL, self.target_recv_dsl.to_string()));
            }
        }
    }

    /// A Login Response from the target's login core, rewritten for the initiator; says
    /// whether the login ended and how.
    pub fn handle_response(&mut self, rsp: &mut LoginResponse) -> LoginEnd {
        if let Some(n) = number(&rsp.data, "MaxRecvDataSegmentLength") {
            self.core_max_recv = n;
        }
        if let Some(n) = number(&rsp.data, "MaxBurstLength") {
            self.max_burst = n;
        }
        if self.rdma() {
            rsp.data = cap_max_recv(&rsp.data, self.target_recv_dsl);
            rsp.data = cap_first_burst(&rsp.data, self.max_first_burst());
        }
        self.first_burst.see(&rsp.data);
        if !self.answers.is_empty() && rsp.csg == OPERATIONAL && !rsp.cont {
            let answers = std::mem::take(&mut self.answers);
            rsp.data = append_pairs(&rsp.data, &answers);
        }
        let first_burst = self
            .session
            .filter(|_| self.non_leading)
            .map_or_else(|| self.first_burst.value(), |s| s.first_burst);
        match end_of(rsp) {
            None => LoginEnd::Pending,
            Some(false) => LoginEnd::Failed,
            Some(true) if self.rdma() && first_burst > self.max_first_burst() => {
                rsp.status = LoginStatus::CANT_INCLUDE_IN_SESSION;
                rsp.transit = false;
                rsp.data = Bytes::new();
                LoginEnd::Failed
            }
            Some(true) if self.rdma() => LoginEnd::Rdma {
                initiator_recv_dsl: if self.non_leading {
                    self.join_initiator_recv_dsl
                } else {
                    self.offer.as_ref().and_then(|o| o.initiator_recv_dsl)
                }
                .unwrap_or(DEFAULT_RECV_DSL),
                target_recv_dsl: self.target_recv_dsl,
                target_core_max_recv: self.core_max_recv,
                initiator_core_max_recv: self.initiator_max_recv,
                max_burst: self.max_burst,
                first_burst,
                peer_max_unexpected: match (self.non_leading, self.session) {
                    (true, Some(s)) => s.peer_max_unexpected,
                    _ => self
                        .offer
                        .as_ref()
                        .and_then(|o| o.max_outstanding_unexpected)
                        .unwrap_or(0),
                },
            },
            Some(true) => LoginEnd::Tcp,
        }
    }
}

/// The initiator's shim.
#[derive(Debug)]
pub struct InitiatorLoginShim {
    initiator_recv_dsl: u32,
    max_unexpected: u32,
    offered: bool,
    answer: Option<IserKeys>,
    core_max_recv: u32,
    target_core_max_recv: u32,
    max_burst: u32,
    first_burst: FirstBurst,
    /// The session this connection joins (see [`Self::joins_session`]).
    session: Option<JoinedSession>,
}

impl InitiatorLoginShim {
    /// A shim that offers iSER with receive buffers for `initiator_recv_dsl` bytes of data
    /// segment.
    pub fn new(initiator_recv_dsl: u32) -> Self {
        InitiatorLoginShim {
            initiator_recv_dsl,
            max_unexpected: 0,
            offered: false,
            answer: None,
            core_max_recv: DEFAULT_RECV_DSL,
            target_core_max_recv: DEFAULT_RECV_DSL,
            max_burst: DEFAULT_MAX_BURST,
            first_burst: FirstBurst(None),
            session: None,
        }
    }

    /// Declares MaxOutstandingUnexpectedPDUs=`n` (RFC 7145 section 6.3.4): the receive
    /// buffers this initiator keeps for unexpected PDUs (0, the default: no limit).
    pub fn with_max_unexpected(mut self, n: u32) -> Self {
        self.max_unexpected = n;
        self
    }

    /// The connection joins `session` (a login with its TSIH); told before the first
    /// request. RDMAExtensions and MaxOutstandingUnexpectedPDUs are leading-only (RFC 7145
    /// sections 6.3.1 and 6.3.4), so the shim offers neither: the connection is in the
    /// session's mode, declaring only its InitiatorRecvDataSegmentLength in RDMA mode, and
    /// its datamover takes the session's FirstBurstLength (RFC 7143 section 13.14: the
    /// session core sends that much unsolicited data on every connection) and the target's
    /// MaxOutstandingUnexpectedPDUs from the leading connection.
    pub fn joins_session(&mut self, session: JoinedSession) {
        self.session = Some(session);
    }

    /// Whether the login joins a session (see [`Self::joins_session`]).
    pub fn joining(&self) -> bool {
        self.session.is_some()
    }

    /// Whether the connection may end in RDMA mode: a leading login until the target
    /// answers, a joining one when its session is in RDMA mode.
    fn may_be_rdma(&self) -> bool {
        self.session.is_none_or(|s| s.rdma)
    }

    /// A Login Request from the initiator's login core, with iSER's offer added to the
    /// first one of the operational stage (RDMAExtensions is leading-only and operational,
    /// RFC 7145 section 6.3.1; a joining connection's own declaration instead: see
    /// [`Self::joins_session`]).
    pub fn handle_request(&mut self, req: &mut LoginRequest) {
        if let Some(n) = number(&req.data, "MaxRecvDataSegmentLength") {
            self.core_max_recv = n;
        }
        self.first_burst.see(&req.data);
        if req.cont || !self.may_be_rdma() {
            return;
        }
        req.data = iser_operational_offers(&req.data);
        if !self.offered && req.csg == OPERATIONAL {
            self.offered = true;
            let ours = if self.session.is_some() {
                vec![(INITIATOR_RECV_DSL, self.initiator_recv_dsl.to_string())]
            } else {
                initiator_offer(self.initiator_recv_dsl, self.max_unexpected)
            };
            req.data = append_pairs(&req.data, &ours);
        }
    }

    /// A Login Response from the target, with iSER's keys taken out for the login core.
    pub fn handle_response(&mut self, rsp: &mut LoginResponse) -> Result<LoginEnd, IserKeyError> {
        if !rsp.cont {
            let (keys, rest) = take_iser_keys(&rsp.data)?;
            if self.session.is_some() {
                // A joining login: an RDMAExtensions answer ("Irrelevant") settles nothing;
                // the target's receive length is the connection's own.
                if keys.target_recv_dsl.is_some() {
                    self.answer = Some(keys);
                }
            } else if keys.rdma_extensions.is_some() {
                self.answer = Some(keys);
            }
            rsp.data = rest;
            if let Some(cap) = self.send_cap() {
                rsp.data = cap_max_recv(&rsp.data, cap);
            }
        }
        if let Some(n) = number(&rsp.data, "MaxRecvDataSegmentLength") {
            self.target_core_max_recv = n;
        }
        if let Some(n) = number(&rsp.data, "MaxBurstLength") {
            self.max_burst = n;
        }
        self.first_burst.see(&rsp.data);
        let rdma = match (&self.session, &self.answer) {
            (Some(s), _) => s.rdma,
            (None, Some(a)) => a.rdma_extensions.as_deref() == Some("Yes"),
            (None, None) => false,
        };
        Ok(match end_of(rsp) {
            None => LoginEnd::Pending,
            Some(false) => LoginEnd::Failed,
            Some(true) if rdma => {
                let answer = self.answer.clone().unwrap_or_default();
                LoginEnd::Rdma {
                    initiator_recv_dsl: self.initiator_recv_dsl,
                    target_recv_dsl: answer.target_recv_dsl.unwrap_or(DEFAULT_RECV_DSL),
                    target_core_max_recv: self.target_core_max_recv,
                    initiator_core_max_recv: self.core_max_recv,
                    max_burst: self.max_burst,
                    first_burst: self
                        .session
                        .map_or_else(|| self.first_burst.value(), |s| s.first_burst),
                    peer_max_unexpected: self.session.map_or_else(
                        || answer.max_outstanding_unexpected.unwrap_or(0),
                        |s| s.peer_max_unexpected,
                    ),
                }
            }
            Some(true) => LoginEnd::Tcp,
        })
    }

    /// The most data a Send to the target may carry, as far as the login has told: in
    /// iSER-assisted mode immediate and unsolicited data travel in Sends, each landing in a
    /// receive buffer of TargetRecvDataSegmentLength bytes (RFC 7145 sections 6.3.2 and
    /// 7.3.4), whatever MaxRecvDataSegmentLength the target's iSCSI layer declared (a target
    /// such as Linux's declares the two independently). The core sizes those PDUs by the
    /// target's MaxRecvDataSegmentLength, so the shim caps that at this. Before the target
    /// has answered RDMAExtensions the cap is the key's default, 8192: the only length known
    /// to fit if the answer turns out Yes, and a declarative limit the initiator may always
    /// stay under if it turns out No. After a No (or NotUnderstood) nothing is capped; on a
    /// connection joining a session, nothing in TCP mode, and in RDMA mode the target's
    /// TargetRecvDataSegmentLength once declared (its default before).
    fn send_cap(&self) -> Option<u32> {
        if let Some(s) = &self.session {
            return s.rdma.then(|| {
                self.answer
                    .as_ref()
                    .and_then(|a| a.target_recv_dsl)
                    .unwrap_or(DEFAULT_RECV_DSL)
            });
        }
        match &self.answer {
            None => Some(DEFAULT_RECV_DSL),
            Some(a) if a.rdma_extensions.as_deref() == Some("Yes") => {
                Some(a.target_recv_dsl.unwrap_or(DEFAULT_RECV_DSL))
            }
            Some(_) => None,
        }
    }

    /// The target's answer to RDMAExtensions, if it gave one (`NotUnderstood` from a target
    /// that knows nothing of iSER, `No` from one that does not serve it here).
    pub fn rdma_answer(&self) -> Option<&str> {
        self.answer
            .as_ref()
            .and_then(|a| a.rdma_extensions.as_deref())
    }
}

/// The key name, for messages.
pub const RDMA_EXTENSIONS_KEY: &str = RDMA_EXTENSIONS;

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::seq::{Isid, Itt, SeqNum, Tsih};

    fn request(csg: u8, nsg: u8, transit: bool, text: &'static [u8]) -> LoginRequest {
        LoginRequest {
            transit,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_min: 0,
            isid: Isid::default(),
            tsih: Tsih::default(),
            itt: Itt(0),
            cid: 0,
            cmd_sn: SeqNum::new(1),
            exp_stat_sn: SeqNum::new(0),
            data: Bytes::from_static(text),
        }
    }

    fn response(req: &LoginRequest, text: &'static [u8]) -> LoginResponse {
        LoginResponse {
            transit: req.transit,
            cont: false,
            csg: req.csg,
            nsg: req.nsg,
            version_max: 0,
            version_active: 0,
            isid: req.isid,
            tsih: Tsih::default(),
            itt: req.itt,
            stat_sn: SeqNum::new(0),
            exp_cmd_sn: SeqNum::new(1),
            max_cmd_sn: SeqNum::new(1),
            status: LoginStatus::SUCCESS,
            data: Bytes::from_static(text),
        }
    }

    #[test]
    fn both_shims_agree_on_rdma_mode_and_the_cores_never_see_iser_keys() {
        let mut ini = InitiatorLoginShim::new(8192).with_max_unexpected(64);
        let mut tgt = TargetLoginShim::new(true, 16384).with_max_unexpected(384);
        let mut req = request(
            OPERATIONAL,
            FULL_FEATURE_PHASE,
            true,
            b"HeaderDigest=CRC32C,None\0MaxRecvDataSegmentLength=1048576\0FirstBurstLength=131072\0",
        );
        ini.handle_request(&mut req);
        assert_eq!(find_key(&req.data, RDMA_EXTENSIONS).as_deref(), Some("Yes"));
        tgt.handle_request(&mut req).unwrap();
        // What the target's login core sees: no iSER key, no digest offered.
        assert_eq!(find_key(&req.data, RDMA_EXTENSIONS), None);
        assert_eq!(find_key(&req.data, "HeaderDigest").as_deref(), Some("None"));
        // The first burst is capped at four of the target's receive lengths.
        assert_eq!(
            find_key(&req.data, "FirstBurstLength").as_deref(),
            Some("65536")
        );
        let mut rsp = response(
            &req,
            b"HeaderDigest=None\0MaxRecvDataSegmentLength=262144\0MaxBurstLength=262144\0FirstBurstLength=65536\0",
        );
        let t_end = tgt.handle_response(&mut rsp);
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("16384"),
            "capped at the target's receive buffers"
        );
        let i_end = ini.handle_response(&mut rsp).unwrap();
        assert_eq!(
            find_key(&rsp.data, RDMA_EXTENSIONS),
            None,
            "stripped for the core"
        );
        assert!(
            matches!(
                i_end,
                LoginEnd::Rdma {
                    peer_max_unexpected: 384,
                    ..
                }
            ),
            "the initiator holds itself to the target's declaration: {i_end:?}"
        );
        assert!(
            matches!(
                t_end,
                LoginEnd::Rdma {
                    peer_max_unexpected: 64,
                    ..
                }
            ),
            "and the target to the initiator's: {t_end:?}"
        );
        let LoginEnd::Rdma {
            target_recv_dsl,
            initiator_core_max_recv,
            max_burst,
            first_burst,
            ..
        } = i_end
        else {
            panic!("{i_end:?}")
        };
        assert_eq!(
            (
                target_recv_dsl,
                initiator_core_max_recv,
                max_burst,
                first_burst
            ),
            (16384, 1_048_576, 262_144, 65_536)
        );
        assert!(
            matches!(
                t_end,
                LoginEnd::Rdma {
                    target_core_max_recv: 262_144,
                    first_burst: 65_536,
                    ..
                }
            ),
            "{t_end:?}"
        );
    }

    #[test]
    fn a_targets_max_recv_is_capped_at_its_target_recv_dsl_for_sends() {
        // A target (Linux LIO, say) that declares a MaxRecvDataSegmentLength above its
        // TargetRecvDataSegmentLength: the initiator's core must size immediate and
        // unsolicited data by the smaller, as they travel in Sends.
        let mut ini = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        ini.handle_request(&mut req);
        let mut rsp = response(
            &req,
            b"RDMAExtensions=Yes\0TargetRecvDataSegmentLength=65536\0MaxRecvDataSegmentLength=262144\0",
        );
        let end = ini.handle_response(&mut rsp).unwrap();
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("65536"),
            "the core sees the Send limit"
        );
        assert!(
            matches!(
                end,
                LoginEnd::Rdma {
                    target_recv_dsl: 65_536,
                    target_core_max_recv: 65_536,
                    ..
                }
            ),
            "{end:?}"
        );

        // A smaller MaxRecvDataSegmentLength is kept as declared.
        let mut ini = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        ini.handle_request(&mut req);
        let mut rsp = response(
            &req,
            b"RDMAExtensions=Yes\0TargetRecvDataSegmentLength=65536\0MaxRecvDataSegmentLength=16384\0",
        );
        ini.handle_response(&mut rsp).unwrap();
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("16384")
        );

        // No TargetRecvDataSegmentLength declared: its default, 8192, is the limit.
        let mut ini = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        ini.handle_request(&mut req);
        let mut rsp = response(
            &req,
            b"RDMAExtensions=Yes\0MaxRecvDataSegmentLength=262144\0",
        );
        ini.handle_response(&mut rsp).unwrap();
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("8192")
        );
    }

    #[test]
    fn a_target_that_refuses_iser_keeps_its_max_recv() {
        let mut ini = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        ini.handle_request(&mut req);
        let mut rsp = response(
            &req,
            b"RDMAExtensions=No\0MaxRecvDataSegmentLength=262144\0",
        );
        assert_eq!(ini.handle_response(&mut rsp).unwrap(), LoginEnd::Tcp);
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("262144")
        );
    }

    #[test]
    fn a_target_without_iser_leaves_the_connection_on_tcp() {
        let mut ini = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        ini.handle_request(&mut req);
        // A plain iSCSI target does not know the keys.
        let mut rsp = response(
            &req,
            b"RDMAExtensions=NotUnderstood\0InitiatorRecvDataSegmentLength=NotUnderstood\0",
        );
        assert_eq!(ini.handle_response(&mut rsp).unwrap(), LoginEnd::Tcp);
        assert_eq!(ini.rdma_answer(), Some("NotUnderstood"));
        assert!(rsp.data.is_empty());
        // An iSER listener serving an initiator that did not ask stays on TCP too.
        let mut tgt = TargetLoginShim::new(true, 16384);
        let mut plain = request(
            OPERATIONAL,
            FULL_FEATURE_PHASE,
            true,
            b"HeaderDigest=CRC32C\0",
        );
        tgt.handle_request(&mut plain).unwrap();
        assert_eq!(
            &plain.data[..],
            b"HeaderDigest=CRC32C\0",
            "digests are the core's"
        );
        let mut rsp = response(&plain, b"HeaderDigest=CRC32C\0");
        assert_eq!(tgt.handle_response(&mut rsp), LoginEnd::Tcp);
    }

    const TSIH: Tsih = Tsih(9);

    fn rdma_session(first_burst: u32, peer_max_unexpected: u32) -> JoinedSession {
        JoinedSession {
            rdma: true,
            first_burst,
            peer_max_unexpected,
        }
    }

    const TCP_SESSION: JoinedSession = JoinedSession {
        rdma: false,
        first_burst: 262_144,
        peer_max_unexpected: 0,
    };

    /// The login of a connection joining a session (MC/S: its requests carry the session's
    /// TSIH), through both shims; `text` is what the initiator's core sends.
    fn joining_login_with(
        ini: &mut InitiatorLoginShim,
        tgt: &mut TargetLoginShim,
        text: &'static [u8],
    ) -> (LoginEnd, LoginEnd, LoginRequest, LoginResponse) {
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, text);
        req.tsih = TSIH;
        ini.handle_request(&mut req);
        let sent = req.clone();
        tgt.handle_request(&mut req).unwrap();
        let mut rsp = response(
            &req,
            b"HeaderDigest=None\0MaxRecvDataSegmentLength=262144\0",
        );
        rsp.tsih = TSIH;
        let t_end = tgt.handle_response(&mut rsp);
        let i_end = ini.handle_response(&mut rsp).unwrap();
        (i_end, t_end, sent, rsp)
    }

    fn joining_login(
        ini: &mut InitiatorLoginShim,
        tgt: &mut TargetLoginShim,
    ) -> (LoginEnd, LoginEnd, LoginResponse) {
        let (i, t, _, rsp) = joining_login_with(
            ini,
            tgt,
            b"HeaderDigest=None\0MaxRecvDataSegmentLength=8192\0",
        );
        (i, t, rsp)
    }

    fn joined(session: JoinedSession) -> (InitiatorLoginShim, TargetLoginShim) {
        let mut ini = InitiatorLoginShim::new(8192).with_max_unexpected(64);
        let mut tgt = TargetLoginShim::new(true, 16384).with_max_unexpected(384);
        ini.joins_session(session);
        tgt.joins_session(session);
        (ini, tgt)
    }

    fn first_burst_of(end: LoginEnd) -> u32 {
        match end {
            LoginEnd::Rdma { first_burst, .. } => first_burst,
            other => panic!("not RDMA mode: {other:?}"),
        }
    }

    /// Each datamover takes a write's unsolicited length from FirstBurstLength, so on a
    /// joining connection it must be the session's, not the default 64 KiB the connection's
    /// own login text leaves: the session's 16 KiB here. So too the other side's
    /// MaxOutstandingUnexpectedPDUs, declared on the leading connection only.
    #[test]
    fn a_joining_connection_takes_the_sessions_first_burst_and_unexpected_limit() {
        let (mut ini, mut tgt) = joined(rdma_session(16384, 0));
        ini.joins_session(rdma_session(16384, 384));
        tgt.joins_session(rdma_session(16384, 64));
        let (i_end, t_end, rsp) = joining_login(&mut ini, &mut tgt);
        assert_eq!(rsp.status, LoginStatus::SUCCESS);
        assert_eq!(
            (first_burst_of(i_end), first_burst_of(t_end)),
            (16384, 16384)
        );
        assert!(
            matches!(
                (i_end, t_end),
                (
                    LoginEnd::Rdma {
                        peer_max_unexpected: 384,
                        target_recv_dsl: 16384,
                        ..
                    },
                    LoginEnd::Rdma {
                        peer_max_unexpected: 64,
                        initiator_recv_dsl: 8192,
                        ..
                    }
                )
            ),
            "{i_end:?} {t_end:?}"
        );
    }

    /// RDMAExtensions is leading-only (RFC 7145 section 6.3.1): a joining connection does
    /// not offer it, nor MaxOutstandingUnexpectedPDUs (section 6.3.4), and is in its
    /// session's mode. In RDMA mode it declares its own receive length, the target its own,
    /// and the Send caps apply as on a leading connection.
    #[test]
    fn a_connection_joining_an_rdma_session_offers_no_leading_only_key_and_is_in_rdma_mode() {
        let (mut ini, mut tgt) = joined(rdma_session(65536, 0));
        let (i_end, t_end, sent, rsp) = joining_login_with(
            &mut ini,
            &mut tgt,
            b"HeaderDigest=CRC32C,None\0MaxRecvDataSegmentLength=8192\0",
        );
        assert_eq!(find_key(&sent.data, RDMA_EXTENSIONS), None);
        assert_eq!(find_key(&sent.data, "MaxOutstandingUnexpectedPDUs"), None);
        assert_eq!(
            find_key(&sent.data, INITIATOR_RECV_DSL).as_deref(),
            Some("8192")
        );
        assert_eq!(
            find_key(&sent.data, "HeaderDigest").as_deref(),
            Some("None"),
            "no digests in RDMA mode"
        );
        assert!(matches!(i_end, LoginEnd::Rdma { .. }), "{i_end:?}");
        assert!(matches!(t_end, LoginEnd::Rdma { .. }), "{t_end:?}");
        // The target's core declared 256 KiB; Sends carry 16 KiB.
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("16384")
        );
        assert_eq!(find_key(&rsp.data, TARGET_RECV_DSL), None, "taken off");
    }

    /// A connection joining a session in TCP mode (its leading connection was not in RDMA
    /// mode) stays in TCP mode: the initiator offers nothing of iSER and leaves its core's
    /// text alone; the target's shim, even on a listener that serves iSER, answers an
    /// RDMAExtensions offer (a peer that sends it anyway) with "Irrelevant" and does not
    /// switch.
    #[test]
    fn a_connection_joining_a_tcp_session_stays_on_tcp() {
        let (mut ini, mut tgt) = joined(TCP_SESSION);
        let (i_end, t_end, sent, rsp) = joining_login_with(
            &mut ini,
            &mut tgt,
            b"HeaderDigest=CRC32C,None\0MaxRecvDataSegmentLength=8192\0",
        );
        assert_eq!(
            &sent.data[..],
            b"HeaderDigest=CRC32C,None\0MaxRecvDataSegmentLength=8192\0",
            "the core's text as it was"
        );
        assert_eq!((i_end, t_end), (LoginEnd::Tcp, LoginEnd::Tcp));
        assert_eq!(
            find_key(&rsp.data, "MaxRecvDataSegmentLength").as_deref(),
            Some("262144"),
            "nothing capped"
        );

        // A peer that offers RDMAExtensions on the join anyway (as a leading login would).
        let mut tgt = TargetLoginShim::new(true, 16384);
        tgt.joins_session(TCP_SESSION);
        let mut legacy = InitiatorLoginShim::new(8192);
        let mut req = request(OPERATIONAL, FULL_FEATURE_PHASE, true, b"");
        req.tsih = TSIH;
        legacy.handle_request(&mut req);
        assert_eq!(find_key(&req.data, RDMA_EXTENSIONS).as_deref(), Some("Yes"));
        tgt.handle_request(&mut req).unwrap();
        let mut rsp = response(&req, b"MaxRecvDataSegmentLength=262144\0");
        assert_eq!(tgt.handle_response(&mut rsp), LoginEnd::Tcp);
        assert_eq!(
            find_key(&rsp.data, RDMA_EXTENSIONS).as_deref(),
            Some("Irrelevant")
        );
        assert_eq!(find_key(&rsp.data, TARGET_RECV_DSL), None);
        assert_eq!(legacy.handle_response(&mut rsp).unwrap(), LoginEnd::Tcp);

        // The same offer on a non-leading login the target's shim was told nothing of: no
        // switch either (the driver then checks the mode against the session's).
        let mut tgt = TargetLoginShim::new(true, 16384);
        let mut req = request(
            OPERATIONAL,
            FULL_FEATURE_PHASE,
            true,
            b"RDMAExtensions=Yes\0",
        );
        req.tsih = TSIH;
        tgt.handle_request(&mut req).unwrap();
        let mut rsp = response(&req, b"");
        assert_eq!(tgt.handle_response(&mut rsp), LoginEnd::Tcp);
    }

    /// A session whose FirstBurstLength needs more Sends per command than the target
    /// provisions receive buffers for (the target's receive length shrank since the leading
    /// login, say) cannot take a connection in RDMA mode: the final Login Response refuses
    /// it, and neither side switches.
    #[test]
    fn a_session_with_a_longer_first_burst_than_sends_can_carry_refuses_rdma_mode() {
        let (mut ini, mut tgt) = joined(rdma_session(262_144, 0));
        let (i_end, t_end, rsp) = joining_login(&mut ini, &mut tgt);
        assert_eq!(rsp.status, LoginStatus::CANT_INCLUDE_IN_SESSION);
        assert_eq!((i_end, t_end), (LoginEnd::Failed, LoginEnd::Failed));
        // Exactly the cap still fits: four Sends of 16 KiB.
        let (mut ini, mut tgt) = joined(rdma_session(65536, 0));
        let (_, t_end, _) = joining_login(&mut ini, &mut tgt);
        assert_eq!(first_burst_of(t_end), 65536);
        // In TCP mode the target's Sends are not involved.
        let (mut ini, mut tgt) = joined(TCP_SESSION);
        let (_, t_end, rsp) = joining_login(&mut ini, &mut tgt);
        assert_eq!((t_end, rsp.status), (LoginEnd::Tcp, LoginStatus::SUCCESS));
    }

    #[test]
    fn a_leading_logins_end_says_the_sessions_mode() {
        let end = LoginEnd::Rdma {
            initiator_recv_dsl: 8192,
            target_recv_dsl: 16384,
            target_core_max_recv: 16384,
            initiator_core_max_recv: 8192,
            max_burst: 262_144,
            first_burst: 32768,
            peer_max_unexpected: 7,
        };
        assert_eq!(JoinedSession::of(end, 65536), Some(rdma_session(32768, 7)));
        assert_eq!(JoinedSession::of(LoginEnd::Tcp, 262_144), Some(TCP_SESSION));
        assert_eq!(JoinedSession::of(LoginEnd::Pending, 1), None);
    }
}
