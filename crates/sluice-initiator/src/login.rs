//! Drives [`InitiatorLogin`] over a [`Transport`], following redirects (RFC 7143 sections 6.3
//! and 11.13.5: status class 1 carries a TargetAddress to log in to instead).

use rand::RngCore;
use sluice_proto::chap::ChapAlgorithm;
use sluice_proto::iser::login::JoinedSession;
use sluice_proto::login::{
    ChapCredential, InitiatorChap, InitiatorConfig, InitiatorLogin, InitiatorOutcome,
    InitiatorStep, LoginError,
};
use sluice_proto::params::SessionParams;
use sluice_proto::pdu::Pdu;
use sluice_proto::seq::{Isid, Itt, SeqNum, Tsih};

use crate::counters::Counters;
use crate::error::Error;
use crate::options::ConnectOptions;
use crate::transport::Transport;
use crate::url::{portal, split_host_port};

/// The CmdSN the login starts from (any value is allowed; the target echoes it back as
/// ExpCmdSN).
const FIRST_CMD_SN: SeqNum = SeqNum(1);

/// A logged-in connection.
pub(crate) struct LoggedIn {
    pub(crate) transport: Transport,
    pub(crate) outcome: InitiatorOutcome,
    /// The login's CmdSN: the first full-feature command carries it (login is immediate).
    pub(crate) cmd_sn: SeqNum,
}

/// A random ISID of type 2 ("random", RFC 7143 section 11.12.5).
pub(crate) fn random_isid() -> Isid {
    let mut b = [0u8; 6];
    rand::thread_rng().fill_bytes(&mut b);
    b[0] = 0x80 | (b[0] & 0x3f);
    Isid(b)
}

/// A login that adds a connection to an existing session.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Join {
    /// The session's TSIH.
    pub(crate) tsih: Tsih,
    /// The new connection's CID.
    pub(crate) cid: u16,
    /// The session's next CmdSN (RFC 7143 section 11.12.8: a login joining a session carries
    /// the session's CmdSN).
    pub(crate) cmd_sn: SeqNum,
    /// The session's parameters: the leading-only keys (RFC 7143 section 13, "LO") are not
    /// negotiated again, yet hold on the new connection (its login's outcome carries them,
    /// see `InitiatorLogin::joining`); FirstBurstLength is what the session core's
    /// unsolicited data on it follows, which an iSER datamover must know.
    pub(crate) session: SessionParams,
    /// What the session's leading connection settled of iSER (`None` without iSER): the
    /// joining connection is in the session's mode (RFC 7145 section 6.3.1).
    pub(crate) iser: Option<JoinedSession>,
}

/// Logs in to `target` (`None`: a discovery session) at `portal`, following redirects; with
/// `join`, a connection for an existing session.
pub(crate) async fn login(
    mut portal_addr: String,
    target: Option<&str>,
    isid: Isid,
    join: Option<Join>,
    opts: &ConnectOptions,
    counters: &Counters,
) -> Result<LoggedIn, Error> {
    let mut redirects = 0;
    loop {
        let attempt = login_once(&portal_addr, target, isid, join, opts, counters);
        let step = tokio::time::timeout(opts.login_timeout, attempt)
            .await
            .map_err(|_| Error::Timeout("login"))??;
        match step {
            Attempt::Done(l) => return Ok(*l),
            Attempt::Redirect(address) => {
                redirects += 1;
                if redirects > opts.max_redirects {
                    return Err(Error::TooManyRedirects(redirects - 1));
                }
                // TargetAddress is `domainname[:port][,portal-group-tag]` (section 13.8).
                let addr = address.split(',').next().unwrap_or_default();
                let (host, port) = split_host_port(addr).ok_or_else(|| {
                    Error::Protocol(format!("unusable TargetAddress {address:?} in redirect"))
                })?;
                tracing::debug!(from = %portal_addr, to = %addr, "login redirected");
                portal_addr = portal(&host, port);
            }
        }
    }
}

enum Attempt {
    Done(Box<LoggedIn>),
    Redirect(String),
}

async fn login_once(
    portal_addr: &str,
    target: Option<&str>,
    isid: Isid,
    join: Option<Join>,
    opts: &ConnectOptions,
    counters: &Counters,
) -> Result<Attempt, Error> {
    let mut t = Transport::connect(portal_addr, opts, counters.clone()).await?;
    if let Some(iser) = join.and_then(|j| j.iser.map(|s| (s, j.session))) {
        let (settled, session) = iser;
        t.iser_joins_session(JoinedSession {
            first_burst: session.first_burst_length,
            ..settled
        });
    }
    let what = target.unwrap_or("discovery").to_owned();
    let fail = |error: LoginError| Error::Login {
        target: what.clone(),
        portal: portal_addr.to_owned(),
        error,
    };
    let cmd_sn = join.map_or(FIRST_CMD_SN, |j| j.cmd_sn);
    let mut login =
        InitiatorLogin::new(config(target, isid, join, opts), Itt(0), cmd_sn, SeqNum(0));
    if let Some(j) = join {
        login = login.joining(j.session);
    }
    let mut req = login.start().map_err(fail)?;
    let mut random = |buf: &mut [u8]| rand::thread_rng().fill_bytes(buf);
    loop {
        t.send(&Pdu::LoginRequest(req)).await?;
        let rsp = match t.recv().await? {
            Pdu::LoginResponse(r) => r,
            // Section 4.2.4: only Login Responses are valid during login; a Reject here means
            // the target could not parse our request.
            Pdu::Reject(r) => return Err(Error::Rejected(r.reason)),
            other => {
                return Err(Error::Protocol(format!(
                    "opcode {:#04x} during login",
                    other.opcode()
                )))
            }
        };
        match login.handle_response(&rsp, &mut random) {
            InitiatorStep::Send(next) => req = next,
            InitiatorStep::Complete(mut outcome) => {
                if t.iser_rdma_mode() {
                    crate::iser::rdma_mode_params(&mut outcome.params);
                }
                if opts.udp.is_some()
                    && target.is_some()
                    && outcome.params.error_recovery_level == 0
                {
                    return Err(Error::Protocol(format!(
                        "{portal_addr}: iSCSI over UDP needs ErrorRecoveryLevel 1 or more to \
                         recover lost datagrams; the session settled on 0"
                    )));
                }
                let hook = opts.fault_hook.as_deref().filter(|_| target.is_some());
                t.enter_full_feature(&outcome.params, hook);
                return Ok(Attempt::Done(Box::new(LoggedIn {
                    transport: t,
                    outcome: *outcome,
                    cmd_sn,
                })));
            }
            InitiatorStep::Redirect { target_address, .. } => {
                return Ok(Attempt::Redirect(target_address))
            }
            InitiatorStep::Failed(e) => return Err(fail(e)),
        }
    }
}

fn config(
    target: Option<&str>,
    isid: Isid,
    join: Option<Join>,
    opts: &ConnectOptions,
) -> InitiatorConfig {
    let chap = opts.chap.as_ref().map(|c| InitiatorChap {
        credential: ChapCredential {
            user: c.user.clone(),
            secret: c.secret.as_bytes().to_vec(),
        },
        algorithms: if c.algorithms.is_empty() {
            vec![ChapAlgorithm::Md5]
        } else {
            c.algorithms.clone()
        },
        mutual: c.mutual.as_ref().map(|(user, secret)| ChapCredential {
            user: user.clone(),
            secret: secret.as_bytes().to_vec(),
        }),
    });
    InitiatorConfig {
        initiator_name: opts.initiator_name.clone(),
        initiator_alias: opts.initiator_alias.clone(),
        target_name: target.map(str::to_owned),
        isid,
        tsih: join.map_or(Tsih::NEW_SESSION, |j| j.tsih),
        cid: join.map_or(0, |j| j.cid),
        chap,
        offer: opts.offer.clone(),
    }
}
