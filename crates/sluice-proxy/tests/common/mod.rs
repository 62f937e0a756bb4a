//! A proxy on 127.0.0.1:0 in the test's runtime, in front of an in-process `sluice target`
//! (from sluice-test-support), stopped on drop; and the data the workloads write.
#![allow(dead_code)] // not every test binary uses every helper

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use sluice_fault::FaultPlan;
use sluice_proxy::{Proxy, ProxyCounters, ProxyHandle};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use sluice_test_support::{config, TestTarget, IQN};

/// Every wait of these tests is bounded by this.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A serving proxy; stopped when dropped or with [`RunningProxy::stop`].
pub struct RunningProxy {
    /// Where initiators connect.
    pub addr: SocketAddr,
    /// Counters and fault log.
    pub handle: ProxyHandle,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<ProxyCounters>>,
}

impl RunningProxy {
    /// Serves `plan` under `seed` in front of `upstream`.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan, seed: u64) -> RunningProxy {
        let proxy = Proxy::bind("127.0.0.1:0".parse().unwrap(), upstream, plan, seed)
            .await
            .expect("bind the proxy");
        let addr = proxy.local_addr().unwrap();
        let handle = proxy.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(proxy.serve(async {
            let _ = stopped.await;
        }));
        RunningProxy {
            addr,
            handle,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `host:port` for `Session::connect`.
    pub fn portal(&self) -> String {
        self.addr.to_string()
    }

    /// Stops serving; returns the final counters.
    pub async fn stop(mut self) -> ProxyCounters {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let task = self.task.take().expect("running");
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("the proxy stops")
            .expect("the proxy task did not panic")
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// `len` bytes that differ from block to block and from seed to seed, so misplaced data shows.
pub fn pattern(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<u8>>()
        .into()
}
