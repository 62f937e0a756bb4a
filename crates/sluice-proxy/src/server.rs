//! The listener: [`Proxy`] accepts initiator connections until shut down, and
//! [`ProxyHandle`] reads its counters and fault log meanwhile.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use sluice_fault::{FaultEvent, FaultPlan};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::connection;
use crate::shared::{ProxyCounters, Shared};

/// A bound proxy, not yet serving.
#[derive(Debug)]
pub struct Proxy {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// A cloneable view of a proxy's counters and fault log, usable while it serves.
#[derive(Clone, Debug)]
pub struct ProxyHandle {
    shared: Arc<Shared>,
}

impl Proxy {
    /// Listens on `listen` (port 0 picks a free port, see [`Proxy::local_addr`]); every
    /// initiator connection accepted will get its own connection to `upstream`, with `plan`
    /// applied under `seed`.
    pub async fn bind(
        listen: SocketAddr,
        upstream: SocketAddr,
        plan: FaultPlan,
        seed: u64,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind(listen).await?;
        Ok(Proxy {
            listener,
            shared: Arc::new(Shared::new(upstream, plan, seed)),
        })
    }

    /// The address initiators connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// A handle on the counters and the fault log.
    pub fn handle(&self) -> ProxyHandle {
        ProxyHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Accepts and serves connections until `shutdown` completes, then drops the live ones
    /// and returns the final counters. A connection reset by the plan ends alone: the proxy
    /// keeps accepting, so initiators can reconnect.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> ProxyCounters {
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let shared = Arc::clone(&self.shared);
                        connections.spawn(connection::serve(stream, peer, shared));
                    }
                    // Out of descriptors or an aborted handshake: this connection is lost,
                    // the listener is not.
                    Err(e) => warn!(error = %e, "accept failed"),
                },
                // Reap finished connections so the set does not grow with the run.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        connections.shutdown().await;
        let counters = self.shared.counters();
        info!(
            connections = counters.connections,
            faults = counters.to_target.faults() + counters.to_initiator.faults(),
            "proxy stopped"
        );
        counters
    }
}

impl ProxyHandle {
    /// The counters so far, live connections included.
    pub fn counters(&self) -> ProxyCounters {
        self.shared.counters()
    }

    /// Every fault event so far (up to [`FAULT_LOG_CAPACITY`](crate::FAULT_LOG_CAPACITY)),
    /// ordered by connection, direction and PDU number: for one seed and the same traffic,
    /// the same list.
    pub fn fault_log(&self) -> Vec<FaultEvent> {
        self.shared.fault_log()
    }

    /// The plan applied.
    pub fn plan(&self) -> &FaultPlan {
        &self.shared.plan
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }
}
