//! A target served in this process, on its own runtime thread, for the studies that measure
//! sluice's initiator against sluice's target over a transport a separate `sluice target`
//! would need extra set-up for (iSER on the software provider, iSCSI over UDP), and whose CPU
//! accounting wants both ends in one process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_target::config::{Acl, Backend, LunDef, OperationalOffer, TargetConfig, TargetDef};
use sluice_target::Target;

use crate::LabError;

/// One target `iqn` with one memory LUN of `lun_bytes` (512-byte blocks), open to every
/// initiator, listening on 127.0.0.1 at a port the system picks, offering `offer`; a short
/// shutdown grace, so a study's runs do not wait on it.
pub(crate) fn memory_target_config(
    iqn: &str,
    lun_bytes: u64,
    offer: OperationalOffer,
) -> TargetConfig {
    TargetConfig {
        portals: vec![SocketAddr::from(([127, 0, 0, 1], 0))],
        portal_groups: Vec::new(),
        state_dir: None,
        targets: vec![TargetDef {
            iqn: iqn.into(),
            alias: None,
            luns: vec![LunDef::new(0, Backend::Memory { size: lun_bytes }, 512)],
            acl: Acl::Open,
            chap: None,
        }],
        discovery_auth: None,
        offer,
        limits: sluice_target::config::Limits {
            shutdown_grace: Duration::from_millis(200),
            ..Default::default()
        },
        keepalive: None,
        recovery: Default::default(),
        fault_hook: None,
        gateway: None,
        tcp_congestion: None,
    }
}

/// A target serving on a runtime of its own (one worker thread, so that the initiator's
/// runtime and the target's do not share one); stopped and joined on drop.
pub(crate) struct InProcessTarget<A> {
    /// What `start`'s `on_listening` found: the addresses the study connects to.
    pub addrs: A,
    /// The target, for its counters.
    pub target: Arc<Target>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<A: Send + 'static> InProcessTarget<A> {
    /// Serves `config` on a thread named `name`. Once its TCP portals listen, `on_listening`
    /// runs on the target's runtime with the target and those portals' addresses: it may
    /// start more listeners there (`tokio::spawn`) and returns the addresses the study needs,
    /// or `None` if it could not. `transports` names what was expected, for the error.
    pub(crate) fn start(
        name: &str,
        config: TargetConfig,
        transports: &str,
        on_listening: impl FnOnce(&Arc<Target>, &[SocketAddr]) -> Option<A> + Send + 'static,
    ) -> Result<Self, LabError> {
        let target =
            Arc::new(Target::new(config).map_err(|e| LabError::Workload(format!("target: {e}")))?);
        let served = Arc::clone(&target);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread_name = name.to_owned();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(thread_name)
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let listening = Arc::clone(&served);
                    let on_listening = move |addrs: &[SocketAddr]| {
                        let _ = addr_tx.send(on_listening(&listening, addrs));
                    };
                    let _ = served
                        .serve(Vec::new(), on_listening, async {
                            let _ = stop_rx.await;
                        })
                        .await;
                });
            })
            .map_err(|e| LabError::Workload(format!("target thread: {e}")))?;
        let addrs = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .flatten()
            .ok_or_else(|| {
                LabError::Workload(format!("the target did not listen on {transports}"))
            })?;
        Ok(Self {
            addrs,
            target,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }
}

impl<A> Drop for InProcessTarget<A> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
