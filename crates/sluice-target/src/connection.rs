//! One TCP connection: the login phase, then full feature phase until logout or loss.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use sluice_proto::framing::{Digests, FrameError, Framer};
use sluice_proto::login::{LoginOutcome, LoginStep, TargetLogin, LOGIN_SEGMENT_MAX};
use sluice_proto::pdu::{LoginResponse, Pdu};
use sluice_proto::seq::SeqNum;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::ffp::FullFeature;
use crate::login_env::LoginEnv;
use crate::outbox::Outbox;
use crate::sessions::Bound;

/// Smallest read buffer growth: enough for several small PDUs per `read` syscall.
const READ_CHUNK: usize = 64 * 1024;

/// The receiving half: socket, buffer and framer.
pub(crate) struct Reader {
    rd: Box<dyn AsyncRead + Send + Unpin>,
    buf: BytesMut,
    pub framer: Framer,
}

/// Why reading stopped.
#[derive(Debug)]
pub(crate) enum ReadEnd {
    /// The peer closed the connection.
    Closed,
    /// A socket error.
    Io(std::io::Error),
    /// The stream cannot be framed any more (header digest, oversized segment).
    Fatal(FrameError),
}

/// What one decode attempt produced.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A whole PDU.
    Pdu(Pdu),
    /// A PDU that was consumed but must be answered with a Reject.
    Reject(FrameError),
}

impl Reader {
    fn new(rd: Box<dyn AsyncRead + Send + Unpin>) -> Self {
        Self {
            rd,
            buf: BytesMut::with_capacity(8192),
            // During login only login PDUs arrive, each at most 8192 data bytes
            // (RFC 7143 section 11.12.14 / interop rule 7).
            framer: Framer::new(LOGIN_SEGMENT_MAX as u32),
        }
    }

    /// The next PDU (or a rejectable error), reading from the socket as needed.
    pub(crate) async fn next(&mut self) -> Result<Incoming, ReadEnd> {
        loop {
            match self.framer.decode(&mut self.buf) {
                Ok(Some(pdu)) => return Ok(Incoming::Pdu(pdu)),
                Ok(None) => {}
                Err(e) if e.can_continue() => return Ok(Incoming::Reject(e)),
                Err(e) => return Err(ReadEnd::Fatal(e)),
            }
            let need = self.framer.bytes_needed(&self.buf).max(1);
            self.buf.reserve(need.max(READ_CHUNK.min(need * 4)));
            match self.rd.read_buf(&mut self.buf).await {
                Ok(0) => return Err(ReadEnd::Closed),
                Ok(_) => {}
                Err(e) => return Err(ReadEnd::Io(e)),
            }
        }
    }
}

/// Serves one accepted connection to the end. `local` is the address the initiator reached
/// (SendTargets reports it for wildcard portals).
pub(crate) async fn serve(
    ctx: Arc<Context>,
    rd: Box<dyn AsyncRead + Send + Unpin>,
    wr: Box<dyn AsyncWrite + Send + Unpin>,
    peer: SocketAddr,
    local: SocketAddr,
    shutdown: watch::Receiver<bool>,
) {
    let mut reader = Reader::new(rd);
    let mut outbox = Outbox::new(wr);

    let login = tokio::time::timeout(
        ctx.config.limits.login_timeout,
        login_phase(&ctx, &mut reader, &mut outbox),
    )
    .await;
    let (outcome, bound) = match login {
        Ok(Some(done)) => done,
        Ok(None) => {
            outbox.close().await;
            return;
        }
        Err(_) => {
            info!(%peer, "login did not complete in time; closing");
            return;
        }
    };
    let span = tracing::info_span!(
        "session",
        initiator = %outcome.initiator_name,
        isid = %outcome.isid,
        tsih = outcome.tsih.0,
        cid = outcome.cid,
    );
    let _entered = span.enter();
    info!(%peer, target = outcome.target_name.as_deref().unwrap_or("(discovery)"), "logged in");
    debug!(params = ?outcome.params, "negotiated");

    let digests = Digests {
        header: outcome.params.header_digest,
        data: outcome.params.data_digest,
    };
    reader.framer.set_digests(digests);
    reader
        .framer
        .set_max_data_segment(outcome.params.target_max_recv_data_segment_length);
    outbox.set_digests(digests);

    if let Some(old) = bound.reinstated {
        info!(
            old_nexus = old,
            "session reinstated: the previous session was closed"
        );
    }
    let nexus = bound.guard.nexus_id;
    let scsi = outcome
        .target_name
        .as_deref()
        .and_then(|n| ctx.target(n))
        .map(|t| Arc::clone(&t.scsi));
    let end = FullFeature::new(&ctx, *outcome, bound.guard, local, &mut outbox, shutdown)
        .run(&mut reader)
        .await;
    info!(reason = %end, "connection closed");
    if let Some(scsi) = scsi {
        if !ctx.sessions.nexus_alive(nexus) {
            scsi.nexus_gone(nexus);
        }
    }
    outbox.close().await;
}

/// Runs the login; `None` means the connection should be closed.
async fn login_phase(
    ctx: &Context,
    reader: &mut Reader,
    outbox: &mut Outbox,
) -> Option<(Box<LoginOutcome>, Bound)> {
    let window = ctx.config.offer.queue_depth;
    // The initial StatSN is arbitrary (RFC 7143 section 11.13.4); a random start makes stale
    // responses from an earlier connection easy to spot.
    let stat_sn = SeqNum(rand::random::<u32>());
    let mut login = TargetLogin::new(stat_sn, window);
    let mut env = LoginEnv {
        config: &ctx.config,
        sessions: &ctx.sessions,
        bound: None,
    };
    loop {
        let pdu = match reader.next().await {
            Ok(Incoming::Pdu(p)) => p,
            Ok(Incoming::Reject(e)) => {
                debug!(error = %e, "malformed PDU during login; closing");
                return None;
            }
            Err(e) => {
                debug!(reason = ?e, "connection ended during login");
                return None;
            }
        };
        let Pdu::LoginRequest(req) = pdu else {
            // RFC 7143 section 6.3: only Login Requests are allowed before full feature
            // phase; anything else ends the connection.
            debug!(opcode = pdu.opcode(), "non-login PDU during login; closing");
            return None;
        };
        match login.handle_request(&req, &mut env) {
            LoginStep::Respond(rsp) => send_login(outbox, rsp).await?,
            LoginStep::Complete { response, outcome } => {
                send_login(outbox, response).await?;
                let bound = env.bound.take()?;
                return Some((outcome, bound));
            }
            LoginStep::Fail(rsp) => {
                warn!(
                    initiator = ?initiator_name(&req.data),
                    class = rsp.status_class,
                    detail = rsp.status_detail,
                    "login refused"
                );
                let _ = send_login(outbox, rsp).await;
                return None;
            }
        }
    }
}

async fn send_login(outbox: &mut Outbox, rsp: LoginResponse) -> Option<()> {
    outbox.push(&Pdu::LoginResponse(rsp));
    outbox.flush().await.ok()
}

/// The InitiatorName in a login request's text, for logging refused logins.
fn initiator_name(text: &[u8]) -> Option<String> {
    text.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(b"InitiatorName=")
            .map(|v| String::from_utf8_lossy(v).into_owned())
    })
}
