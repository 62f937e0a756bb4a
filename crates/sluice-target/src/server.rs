//! Listening, accepting and shutting down.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::config::TargetConfig;
use crate::connection;
use crate::context::Context;

/// Pending connections the kernel queues per listener.
const BACKLOG: u32 = 1024;

/// A target with its LUNs open, ready to serve connections from any transport.
///
/// [`run`] is the usual entry point (TCP listeners plus signal-driven shutdown); `Target`
/// also serves in-memory streams, which tests and fuzzing use.
#[derive(Debug)]
pub struct Target {
    ctx: Arc<Context>,
    stop_tx: watch::Sender<bool>,
}

impl Target {
    /// Validates `config` and opens every backend.
    pub fn new(config: TargetConfig) -> io::Result<Self> {
        let ctx = Context::build(config)?;
        let (stop_tx, _) = watch::channel(false);
        Ok(Self { ctx, stop_tx })
    }

    /// Serves one connection over any byte stream until it ends. `peer` and `local` are what
    /// logs and SendTargets report.
    pub async fn serve_stream<S>(&self, stream: S, peer: SocketAddr, local: SocketAddr)
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (rd, wr) = tokio::io::split(stream);
        let shutdown = self.stop_tx.subscribe();
        connection::serve(
            Arc::clone(&self.ctx),
            Box::new(rd),
            Box::new(wr),
            peer,
            local,
            shutdown,
        )
        .await;
    }

    /// Asks every connection to log out (Async Message) and end within the grace period.
    pub fn shutdown(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// Number of live sessions.
    pub fn session_count(&self) -> usize {
        self.ctx.sessions.count()
    }

    /// Number of open connections accepted by [`run`].
    pub fn connection_count(&self) -> usize {
        self.ctx.connections.load(Ordering::Acquire)
    }
}

/// Serves `config` until `shutdown` completes, then asks initiators to log out, waits up to
/// the configured grace period, flushes the LUNs and returns.
///
/// `on_listening` is called once with the bound addresses (useful with port 0), before any
/// connection is accepted. Errors: the configuration is invalid, a backend cannot be opened,
/// or an address cannot be bound.
pub async fn run(
    config: TargetConfig,
    on_listening: impl FnOnce(&[SocketAddr]) + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    run_on(config, Vec::new(), on_listening, shutdown).await
}

/// [`run`], with each accepted connection handed to one of `workers` in turn (round robin)
/// instead of being spawned on the calling runtime. A connection then lives on that runtime
/// for good: with one single-threaded runtime per core, a connection's reads, commands and
/// writes stay on one thread and one cache (see docs/performance.md, "Threading model").
/// An empty `workers` is [`run`].
pub async fn run_on(
    config: TargetConfig,
    workers: Vec<tokio::runtime::Handle>,
    on_listening: impl FnOnce(&[SocketAddr]) + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let workers: Arc<[tokio::runtime::Handle]> = workers.into();
    let target = Arc::new(Target::new(config)?);
    let ctx = Arc::clone(&target.ctx);
    let mut listeners = Vec::new();
    for addr in &ctx.config.portals {
        let l = bind(*addr).map_err(|e| io::Error::new(e.kind(), format!("bind {addr}: {e}")))?;
        listeners.push(l);
    }
    let bound: Vec<SocketAddr> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    on_listening(&bound);

    let mut acceptors = JoinSet::new();
    for listener in listeners {
        acceptors.spawn(accept_loop(
            Arc::clone(&ctx),
            listener,
            target.stop_tx.subscribe(),
            Arc::clone(&workers),
        ));
    }

    shutdown.await;
    info!("shutting down: asking initiators to log out");
    target.shutdown();
    let mut connections = JoinSet::new();
    while let Some(r) = acceptors.join_next().await {
        if let Ok(handles) = r {
            for h in handles {
                connections.spawn(async move {
                    let _ = h.await;
                });
            }
        }
    }
    // Connections log out or time out within the grace period; allow a little more to flush.
    let grace = ctx.config.limits.shutdown_grace + std::time::Duration::from_secs(2);
    let wait_all = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, wait_all).await.is_err() {
        warn!("some connections did not close in time");
        for session in ctx.sessions.all() {
            session.close(sluice_proto::target::CloseReason::Shutdown);
        }
    }
    ctx.flush_all();
    Ok(())
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn accept_loop(
    ctx: Arc<Context>,
    listener: TcpListener,
    stop: watch::Receiver<bool>,
    workers: Arc<[tokio::runtime::Handle]>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut next_worker = 0usize;
    let mut stop_wait = stop.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop_wait.changed() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly, keep serving.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let limit = ctx.config.limits.max_connections;
        if ctx.connections.fetch_add(1, Ordering::AcqRel) >= limit {
            ctx.connections.fetch_sub(1, Ordering::AcqRel);
            warn!(%peer, limit, "connection limit reached; refusing");
            continue;
        }
        let c = Arc::clone(&ctx);
        let s = stop.clone();
        handles.retain(|h| !h.is_finished());
        if workers.is_empty() {
            handles.push(tokio::spawn(async move {
                serve_tcp(Arc::clone(&c), stream, peer, s).await;
                c.connections.fetch_sub(1, Ordering::AcqRel);
            }));
            continue;
        }
        // The socket is registered with this runtime's reactor: move it out as a std socket
        // and register it again on the worker that will own the connection.
        let worker = &workers[next_worker % workers.len()];
        next_worker = next_worker.wrapping_add(1);
        let std_stream = match stream.into_std() {
            Ok(st) => st,
            Err(e) => {
                warn!(%peer, error = %e, "cannot hand the connection to a worker");
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
                continue;
            }
        };
        handles.push(worker.spawn(async move {
            match TcpStream::from_std(std_stream) {
                Ok(stream) => serve_tcp(Arc::clone(&c), stream, peer, s).await,
                Err(e) => warn!(%peer, error = %e, "cannot register the connection"),
            }
            c.connections.fetch_sub(1, Ordering::AcqRel);
        }));
    }
    handles
}

async fn serve_tcp(
    ctx: Arc<Context>,
    stream: TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    let local = match stream.local_addr() {
        Ok(a) => a,
        Err(e) => {
            debug!(%peer, error = %e, "no local address");
            return;
        }
    };
    // Commands and responses are small and latency-bound; Nagle would hold them behind
    // delayed ACKs. Initiators with delayed ACK on (ESXi by default, VMware KB 1002598) stall
    // a sender that waits for ACKs; open-iscsi sets TCP_NODELAY on its side for the same reason.
    let _ = stream.set_nodelay(true);
    let (rd, wr) = stream.into_split();
    connection::serve(ctx, Box::new(rd), Box::new(wr), peer, local, stop).await;
}
