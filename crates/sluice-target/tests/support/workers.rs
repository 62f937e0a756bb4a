//! A target serving its connections on worker runtimes (`sluice_target::run_on`): one
//! current-thread runtime per OS thread, as `sluice target --threads N` runs them.

use std::net::SocketAddr;

use sluice_target::config::TargetConfig;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// The running target, its worker threads and the means to stop both.
pub struct WorkerTarget {
    pub addr: SocketAddr,
    stop_server: oneshot::Sender<()>,
    server: JoinHandle<std::io::Result<()>>,
    stop_workers: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl WorkerTarget {
    /// Starts `cfg` on an ephemeral loopback port with `workers` worker runtimes.
    pub async fn start(mut cfg: TargetConfig, workers: usize) -> Self {
        let (stop_workers, _) = watch::channel(false);
        let mut handles = Vec::new();
        let mut threads = Vec::new();
        for _ in 0..workers {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            handles.push(rt.handle().clone());
            let mut stop = stop_workers.subscribe();
            threads.push(std::thread::spawn(move || {
                rt.block_on(async move {
                    let _ = stop.changed().await;
                })
            }));
        }
        cfg.portals = vec!["127.0.0.1:0".parse().unwrap()];
        let (addr_tx, addr_rx) = oneshot::channel();
        let (stop_server, stop_rx) = oneshot::channel::<()>();
        let server = tokio::spawn(sluice_target::run_on(
            cfg,
            handles,
            move |a: &[SocketAddr]| {
                let _ = addr_tx.send(a[0]);
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        let addr = addr_rx.await.unwrap();
        Self {
            addr,
            stop_server,
            server,
            stop_workers,
            threads,
        }
    }

    /// Stops accepting, waits for `run_on` to return Ok, then ends the worker threads.
    pub async fn stop(self) {
        self.stop_server.send(()).unwrap();
        self.server.await.unwrap().expect("run_on returns Ok");
        let _ = self.stop_workers.send(true);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}
