//! A lossy UDP relay for tests and the lab: forwards datagrams between clients and one
//! upstream address, dropping each with a fixed probability drawn from a seeded ChaCha8
//! stream.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

/// Datagrams forwarded and dropped so far.
#[derive(Debug, Default)]
pub struct RelayCounters {
    /// Forwarded, both ways.
    pub forwarded: AtomicU64,
    /// Dropped, both ways.
    pub dropped: AtomicU64,
}

/// A running relay; stops when dropped.
#[derive(Debug)]
pub struct LossyRelay {
    addr: SocketAddr,
    counters: Arc<RelayCounters>,
    task: JoinHandle<()>,
}

impl LossyRelay {
    /// Listens on 127.0.0.1 (an ephemeral port) and relays to `upstream`, dropping each
    /// datagram, either way, with probability `loss` (0 to 1).
    pub async fn start(upstream: SocketAddr, loss: f64, seed: u64) -> io::Result<LossyRelay> {
        let front = Arc::new(UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?);
        crate::size_buffers(&front, 4 << 20);
        let addr = front.local_addr()?;
        let counters = Arc::new(RelayCounters::default());
        let rng = Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed)));
        let task = tokio::spawn(front_loop(
            front,
            upstream,
            loss.clamp(0.0, 1.0),
            rng,
            Arc::clone(&counters),
        ));
        Ok(LossyRelay {
            addr,
            counters,
            task,
        })
    }

    /// Where clients send.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// (forwarded, dropped) so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counters.forwarded.load(Ordering::Relaxed),
            self.counters.dropped.load(Ordering::Relaxed),
        )
    }
}

impl Drop for LossyRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Rng8 = Arc<Mutex<ChaCha8Rng>>;

/// A task that ends when its handle is dropped (with the relay's own task).
struct Aborting(JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn lost(rng: &Rng8, loss: f64, counters: &RelayCounters) -> bool {
    let drop = loss > 0.0
        && rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .gen_bool(loss);
    let c = if drop {
        &counters.dropped
    } else {
        &counters.forwarded
    };
    c.fetch_add(1, Ordering::Relaxed);
    drop
}

async fn front_loop(
    front: Arc<UdpSocket>,
    upstream: SocketAddr,
    loss: f64,
    rng: Rng8,
    counters: Arc<RelayCounters>,
) {
    let mut clients: HashMap<SocketAddr, (Arc<UdpSocket>, Aborting)> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, client)) = front.recv_from(&mut buf).await else {
            continue;
        };
        if let Entry::Vacant(slot) = clients.entry(client) {
            let Ok(back) = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await else {
                continue;
            };
            crate::size_buffers(&back, 4 << 20);
            if back.connect(upstream).await.is_err() {
                continue;
            }
            let back = Arc::new(back);
            let task = tokio::spawn(back_loop(
                Arc::clone(&back),
                Arc::clone(&front),
                client,
                loss,
                Arc::clone(&rng),
                Arc::clone(&counters),
            ));
            slot.insert((back, Aborting(task)));
        }
        if lost(&rng, loss, &counters) {
            continue;
        }
        if let Some((back, _)) = clients.get(&client) {
            let _ = back.send(&buf[..n]).await;
        }
    }
}

async fn back_loop(
    back: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    client: SocketAddr,
    loss: f64,
    rng: Rng8,
    counters: Arc<RelayCounters>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = match back.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
            Err(_) => return,
        };
        if !lost(&rng, loss, &counters) {
            let _ = front.send_to(&buf[..n], client).await;
        }
    }
}
