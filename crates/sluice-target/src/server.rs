//! Listening, accepting and shutting down.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::TargetConfig;
use crate::connection;
use crate::context::Context;

/// Pending connections the kernel queues per listener.
const BACKLOG: u32 = 1024;

/// A target with its LUNs open, ready to serve connections from any transport.
///
/// [`run`] is the usual entry point (TCP listeners plus signal-driven shutdown). A `Target`
/// made with [`Target::new`] and served with [`Target::serve`] can also be looked at
/// ([`Target::status`]) and changed ([`Target::apply`] and the operations built on it, in
/// `admin.rs`) while it serves; it also serves in-memory streams, which tests and fuzzing use.
#[derive(Debug)]
pub struct Target {
    pub(crate) ctx: Arc<Context>,
    pub(crate) stop_tx: watch::Sender<bool>,
    /// Listening sockets, one per configured portal.
    pub(crate) portals: Mutex<Vec<Portal>>,
    /// The runtimes accepted connections are handed to (see [`run_on`]).
    workers: Mutex<Arc<[tokio::runtime::Handle]>>,
}

/// One listening socket and its accept loop.
#[derive(Debug)]
pub(crate) struct Portal {
    /// The address as configured (port 0 stays 0 here).
    pub(crate) configured: SocketAddr,
    /// The address as bound.
    pub(crate) bound: SocketAddr,
    /// Stops the accept loop (connections it accepted go on).
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// A listener bound but not yet accepting (see [`Target::start_portal`]).
#[derive(Debug)]
pub(crate) struct BoundPortal {
    configured: SocketAddr,
    listener: TcpListener,
}

impl BoundPortal {
    /// Binds `addr`, its accepted connections to use the congestion control `congestion`
    /// (the host's default when `None`).
    pub(crate) fn bind(addr: SocketAddr, congestion: Option<&str>) -> io::Result<Self> {
        let listener = bind(addr, congestion)
            .map_err(|e| io::Error::new(e.kind(), format!("bind {addr}: {e}")))?;
        Ok(Self {
            configured: addr,
            listener,
        })
    }
}

impl Target {
    /// Validates `config` and opens every backend.
    pub fn new(config: TargetConfig) -> io::Result<Self> {
        let ctx = Context::build(config)?;
        let (stop_tx, _) = watch::channel(false);
        Ok(Self {
            ctx,
            stop_tx,
            portals: Mutex::new(Vec::new()),
            workers: Mutex::new(Arc::from(Vec::new())),
        })
    }

    /// Listens on the configured portals and serves until `shutdown` completes, then asks
    /// initiators to log out, waits up to the configured grace period, flushes the LUNs and
    /// returns. Accepted connections go to `workers` in turn, or run on the calling runtime
    /// when there are none (see [`run_on`]).
    ///
    /// `on_listening` is called once with the bound addresses (useful with port 0), before
    /// any connection is accepted. Errors: an address cannot be bound.
    pub async fn serve(
        &self,
        workers: Vec<tokio::runtime::Handle>,
        on_listening: impl FnOnce(&[SocketAddr]) + Send,
        shutdown: impl Future<Output = ()> + Send,
    ) -> io::Result<()> {
        *lock(&self.workers) = workers.into();
        let config = self.ctx.config();
        let bound = config
            .portals
            .iter()
            .map(|a| BoundPortal::bind(*a, config.tcp_congestion.as_deref()))
            .collect::<io::Result<Vec<_>>>()?;
        for b in bound {
            self.start_portal(b);
        }
        on_listening(&self.portals());
        let watch = tokio::spawn(crate::capacity_watch::run(
            Arc::clone(&self.ctx),
            self.stop_tx.subscribe(),
        ));

        shutdown.await;
        watch.abort();
        info!("shutting down: asking initiators to log out");
        self.shutdown();
        let loops: Vec<_> = lock(&self.portals).drain(..).map(|p| p.task).collect();
        for l in loops {
            let _ = l.await;
        }
        // Connections log out or time out within the grace period; allow a little more to
        // flush.
        let grace = self.ctx.config().limits.shutdown_grace + std::time::Duration::from_secs(2);
        let drained = async {
            while self.ctx.connections.load(Ordering::Acquire) > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            warn!("some connections did not close in time");
            for session in self.ctx.sessions.all() {
                session.close(sluice_proto::target::CloseReason::Shutdown);
            }
        }
        self.ctx.flush_all();
        Ok(())
    }

    /// Starts accepting on a bound portal (on the calling runtime).
    pub(crate) fn start_portal(&self, b: BoundPortal) {
        let bound = b.listener.local_addr().unwrap_or(b.configured);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            Arc::clone(&self.ctx),
            b.listener,
            self.stop_tx.subscribe(),
            stopped,
            Arc::clone(&lock(&self.workers)),
        ));
        lock(&self.ctx.listeners).push((b.configured, bound));
        lock(&self.portals).push(Portal {
            configured: b.configured,
            bound,
            stop,
            task,
        });
    }

    /// Stops accepting on the portal configured as `addr`; its connections go on.
    pub(crate) fn stop_portal(&self, addr: SocketAddr) {
        let mut portals = lock(&self.portals);
        if let Some(i) = portals.iter().position(|p| p.configured == addr) {
            lock(&self.ctx.listeners).retain(|(configured, _)| *configured != addr);
            let p = portals.remove(i);
            let _ = p.stop.send(true);
        }
    }

    /// The addresses listened on, as bound.
    pub fn portals(&self) -> Vec<SocketAddr> {
        lock(&self.portals).iter().map(|p| p.bound).collect()
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

    /// Serves iSCSI over UDP (experimental; see `sluice_udp`) on `socket` until
    /// [`Target::shutdown`]: one association, and one iSCSI connection, per initiator address
    /// and port, within the configured connection limit (shared with TCP). Datagrams that are
    /// not well-formed segments are dropped without opening anything. Returns what the
    /// listener dropped.
    pub async fn serve_udp(
        &self,
        socket: tokio::net::UdpSocket,
        udp: sluice_udp::UdpConfig,
    ) -> sluice_udp::listener::ListenerStats {
        let ctx = Arc::clone(&self.ctx);
        let stop = self.stop_tx.subscribe();
        let connection_stop = stop.clone();
        let limit = ctx.config().limits.max_connections;
        sluice_udp::listener::serve(socket, udp, limit, stop, move |stream, peer, local| {
            if ctx.connections.fetch_add(1, Ordering::AcqRel) >= limit {
                ctx.connections.fetch_sub(1, Ordering::AcqRel);
                warn!(%peer, limit, "connection limit reached; refusing a UDP association");
                return;
            }
            let c = Arc::clone(&ctx);
            let s = connection_stop.clone();
            tokio::spawn(async move {
                let (rd, wr) = tokio::io::split(stream);
                connection::serve(Arc::clone(&c), Box::new(rd), Box::new(wr), peer, local, s).await;
                c.connections.fetch_sub(1, Ordering::AcqRel);
            });
        })
        .await
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

/// A mutex whose holder cannot leave it inconsistent: a poisoned one is taken over.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
    Target::new(config)?
        .serve(workers, on_listening, shutdown)
        .await
}

fn bind(addr: SocketAddr, congestion: Option<&str>) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    // On the listener, so that a name the process may not use (EPERM: not in
    // tcp_allowed_congestion_control, no CAP_NET_ADMIN) fails here, at start, and so that
    // connections have it from their handshake on.
    if let Some(name) = congestion {
        sluice_tcp::set_congestion_control(&socket, name).map_err(|e| {
            io::Error::new(e.kind(), format!("TCP congestion control {name:?}: {e}"))
        })?;
    }
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

async fn accept_loop(
    ctx: Arc<Context>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    mut portal_stop: watch::Receiver<bool>,
    workers: Arc<[tokio::runtime::Handle]>,
) {
    let mut next_worker = 0usize;
    let connection_stop = stop.clone();
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            _ = portal_stop.changed() => break,
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
        let limit = ctx.config().limits.max_connections;
        if ctx.connections.fetch_add(1, Ordering::AcqRel) >= limit {
            ctx.connections.fetch_sub(1, Ordering::AcqRel);
            warn!(%peer, limit, "connection limit reached; refusing");
            continue;
        }
        let c = Arc::clone(&ctx);
        let s = connection_stop.clone();
        if workers.is_empty() {
            tokio::spawn(async move {
                serve_tcp(Arc::clone(&c), stream, peer, s).await;
                c.connections.fetch_sub(1, Ordering::AcqRel);
            });
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
        worker.spawn(async move {
            match TcpStream::from_std(std_stream) {
                Ok(stream) => serve_tcp(Arc::clone(&c), stream, peer, s).await,
                Err(e) => warn!(%peer, error = %e, "cannot register the connection"),
            }
            c.connections.fetch_sub(1, Ordering::AcqRel);
        });
    }
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
    // Again on the connection: a route's `congctl` would take precedence over what the
    // listener passes on, and the operator asked for this one.
    if let Some(name) = &ctx.config().tcp_congestion {
        if let Err(e) = sluice_tcp::set_congestion_control(&stream, name) {
            warn!(%peer, error = %e, congestion = %name, "cannot set the TCP congestion control");
        }
    }
    let (rd, wr) = stream.into_split();
    connection::serve(ctx, Box::new(rd), Box::new(wr), peer, local, stop).await;
}
