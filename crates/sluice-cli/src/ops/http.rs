//! The HTTP endpoints: `/metrics` for Prometheus, and the admin API (`GET /v1/status`,
//! `GET /v1/config`, `POST /v1/ctl` with a [`Request`] as JSON).
//!
//! Metrics may be served on loopback without a token; on any other address a token is
//! required (the series name initiators and their addresses). The admin API always requires
//! a token: a loopback port is open to every local user, unlike the control socket.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request as HttpRequest, Response as HttpResponse, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use super::operator::Operator;
use super::protocol::{Request, Response, MAX_REQUEST_BYTES};
use super::token::Token;

/// How long one HTTP connection may stay open: scrapes and requests are short, and a client
/// that sends nothing must not hold a connection forever.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// What an HTTP listener serves.
#[derive(Debug)]
pub enum Endpoint {
    /// `/metrics`, with the token it requires (if any).
    Metrics(Option<Token>),
    /// The admin API and its token.
    Admin(Token),
}

/// Binds `addr` for `endpoint`; refuses a non-loopback metrics address without a token.
pub async fn bind(addr: SocketAddr, endpoint: &Endpoint) -> anyhow::Result<TcpListener> {
    if matches!(endpoint, Endpoint::Metrics(None)) && !addr.ip().is_loopback() {
        bail!(
            "metrics on {addr}: an address other than loopback needs a token \
             ([metrics] token_file, or --metrics-token-file)"
        );
    }
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Serves `endpoint` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, endpoint: Endpoint, operator: Arc<Operator>) {
    let endpoint = Arc::new(endpoint);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "HTTP accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (endpoint, operator) = (Arc::clone(&endpoint), Arc::clone(&operator));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (endpoint, operator) = (Arc::clone(&endpoint), Arc::clone(&operator));
                async move { Ok::<_, Infallible>(handle(req, peer, &endpoint, operator).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_LIFETIME, conn).await {
                Ok(Err(e)) => debug!(%peer, error = %e, "HTTP connection failed"),
                Err(_) => debug!(%peer, "HTTP connection closed after its lifetime"),
                Ok(Ok(())) => {}
            }
        });
    }
}

type Reply = HttpResponse<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Reply {
    let mut r = HttpResponse::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}

fn json(status: StatusCode, response: &Response) -> Reply {
    let text = serde_json::to_string(response).unwrap_or_default();
    reply(status, "application/json", text)
}

async fn handle(
    req: HttpRequest<Incoming>,
    peer: SocketAddr,
    endpoint: &Endpoint,
    operator: Arc<Operator>,
) -> Reply {
    let auth = req.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
    let token = match endpoint {
        Endpoint::Metrics(t) => t.as_ref(),
        Endpoint::Admin(t) => Some(t),
    };
    if token.is_some_and(|t| !t.admits(auth)) {
        warn!(%peer, path = req.uri().path(), "HTTP request without the right token");
        let mut r = reply(
            StatusCode::UNAUTHORIZED,
            "text/plain",
            "a bearer token is required\n",
        );
        if let Ok(v) = "Bearer".parse() {
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        return r;
    }
    let by = format!("{peer} (HTTP admin API)");
    match (endpoint, req.method(), req.uri().path()) {
        (Endpoint::Metrics(_), &Method::GET, "/metrics") => {
            let accept = req
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok());
            let format = super::metrics::Format::negotiate(accept);
            let target = Arc::clone(operator.target());
            let text = tokio::task::spawn_blocking(move || super::metrics::scrape(&target, format))
                .await
                .unwrap_or_default();
            reply(StatusCode::OK, format.content_type(), text)
        }
        (Endpoint::Admin(_), &Method::GET, "/v1/status") => {
            run(operator, Request::Status {}, by).await
        }
        (Endpoint::Admin(_), &Method::GET, "/v1/config") => {
            run(operator, Request::Config {}, by).await
        }
        (Endpoint::Admin(_), &Method::POST, "/v1/ctl") => {
            let body = Limited::new(req.into_body(), MAX_REQUEST_BYTES);
            let bytes = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    return json(StatusCode::BAD_REQUEST, &Response::error(e));
                }
            };
            match serde_json::from_slice::<Request>(&bytes) {
                Ok(request) => run(operator, request, by).await,
                Err(e) => json(
                    StatusCode::BAD_REQUEST,
                    &Response::error(format!("bad request: {e}")),
                ),
            }
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

async fn run(operator: Arc<Operator>, request: Request, by: String) -> Reply {
    let response = tokio::task::spawn_blocking(move || operator.handle(request, &by))
        .await
        .unwrap_or_else(|e| Response::error(format!("internal error: {e}")));
    let status = if response.ok {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    json(status, &response)
}
