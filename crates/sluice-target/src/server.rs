//! Listening, accepting and shutting down.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::config::TargetConfig;
use crate::connection;
use crate::context::Context;

/// Pending connections the kernel queues per listener.
const BACKLOG: u32 = 1024;

/// Serves `config` until `shutdown` completes, then asks initiators to log out, waits up to
/// the configured grace period, and returns.
///
/// `on_listening` is called once with the bound addresses (useful with port 0), before any
/// connection is accepted. Errors: the configuration is invalid, a backend cannot be opened,
/// or an address cannot be bound.
pub async fn run(
    config: TargetConfig,
    on_listening: impl FnOnce(&[SocketAddr]) + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let grace = config.limits.shutdown_grace;
    let ctx = Context::build(config)?;
    let mut listeners = Vec::new();
    for addr in &ctx.config.portals {
        listeners.push(bind(*addr).map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))?);
    }
    let bound: Vec<SocketAddr> = listeners
        .iter()
        .filter_map(|l| l.local_addr().ok())
        .collect();
    on_listening(&bound);

    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut acceptors = JoinSet::new();
    for listener in listeners {
        acceptors.spawn(accept_loop(Arc::clone(&ctx), listener, stop_rx.clone()));
    }

    shutdown.await;
    info!("shutting down: asking initiators to log out");
    let _ = stop_tx.send(true);
    while let Some(r) = acceptors.join_next().await {
        if let Ok(set) = r {
            for h in set {
                connections.spawn(async move {
                    let _ = h.await;
                });
            }
        }
    }
    // Connections log out or time out within `grace`; give them a little longer to flush.
    let wait_all = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace + std::time::Duration::from_secs(2), wait_all)
        .await
        .is_err()
    {
        warn!("some connections did not close in time");
        ctx.sessions.kill_all();
    }
    for t in ctx.targets.values() {
        for n in t.scsi.lun_numbers() {
            if let Some(lu) = t.scsi.lu(n) {
                if let Err(e) = lu.device().flush() {
                    warn!(lun = n, error = %e, "flush at shutdown failed");
                }
            }
        }
    }
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
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles: Vec<tokio::task::JoinHandle<()>> = Vec::new();
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
            drop(stream);
            continue;
        }
        let c = Arc::clone(&ctx);
        let s = stop.clone();
        handles.retain(|h| !h.is_finished());
        handles.push(tokio::spawn(async move {
            connection::serve(Arc::clone(&c), stream, peer, s).await;
            c.connections.fetch_sub(1, Ordering::AcqRel);
        }));
    }
    handles
}
