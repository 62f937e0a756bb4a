//! Helpers shared by the end-to-end tests of several crates: a `sluice target` served
//! in-process on 127.0.0.1:0 and torn down on drop, Debian's tgtd, a single-node Ceph
//! cluster (`CephCluster`, from `scripts/ceph-cluster`), and the machine's wake-up latency
//! ([`Wakeups`]) for tests that bound how late a timed loop runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failure is a test failure
#![forbid(unsafe_code)]

mod ceph;
mod wakeups;

pub use ceph::{CephCluster, POOL as CEPH_POOL};
pub use wakeups::{WakeupStats, Wakeups};

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;

use sluice_target::config::{
    Acl, Backend, ChapCredentials, LunDef, OperationalOffer, TargetConfig, TargetDef,
};

/// The target name [`config`] serves.
pub const IQN: &str = "iqn.2026-11.io.sluice:test";

/// A running target; shut down on drop.
pub struct TestTarget {
    /// The address it listens on.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Two memory LUNs (16 MiB of 512-byte blocks, 4 MiB of 4096-byte blocks), an open ACL,
/// no keepalive and a short shutdown grace.
pub fn config() -> TargetConfig {
    TargetConfig {
        portals: vec!["127.0.0.1:0".parse().unwrap()],
        portal_groups: Vec::new(),
        state_dir: None,
        targets: vec![TargetDef {
            iqn: IQN.into(),
            alias: Some("test".into()),
            luns: vec![
                LunDef::new(0, Backend::Memory { size: 16 << 20 }, 512),
                LunDef::new(1, Backend::Memory { size: 4 << 20 }, 4096),
            ],
            acl: Acl::Open,
            chap: None,
        }],
        discovery_auth: None,
        offer: OperationalOffer::default(),
        limits: sluice_target::config::Limits {
            shutdown_grace: std::time::Duration::from_millis(200),
            ..Default::default()
        },
        keepalive: None,
        recovery: Default::default(),
        fault_hook: None,
        gateway: None,
        tcp_congestion: None,
    }
}

/// Fails the test, saying that `what` needs root, unless it runs as root (the test command
/// does: it installs packages as root).
pub fn require_root(what: &str) {
    let root = std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    assert!(root, "{what} needs root; run the tests as root");
}

/// CHAP credentials, optionally mutual.
pub fn chap(user: &str, secret: &str, mutual: Option<(&str, &str)>) -> ChapCredentials {
    ChapCredentials {
        user: user.into(),
        secret: secret.into(),
        mutual: mutual.map(|(u, s)| (u.into(), s.into())),
    }
}

impl TestTarget {
    /// Serves `config` on its own runtime thread until dropped.
    pub fn start(config: TargetConfig) -> Self {
        Self::start_with_workers(config, 1)
    }

    /// Serves `config` on a runtime of `workers` threads, so that the commands of different
    /// connections run at the same time (as in `sluice target`, one worker per core).
    pub fn start_with_workers(config: TargetConfig, workers: usize) -> Self {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let on_listening = move |addrs: &[SocketAddr]| {
                    let _ = addr_tx.send(addrs[0]);
                };
                sluice_target::run(config, on_listening, async {
                    let _ = stop_rx.await;
                })
                .await
                .expect("target runs");
            });
        });
        let addr = addr_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("target listening");
        Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// `host:port`.
    pub fn portal(&self) -> String {
        self.addr.to_string()
    }

    /// The `iscsi://` URL of a LUN.
    pub fn url(&self, lun: u16) -> String {
        format!("iscsi://{}/{IQN}/{lun}", self.addr)
    }
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now and that this process has not
/// handed out before.
///
/// The kernel may give the same ephemeral port to two `bind(0)` calls once the first socket
/// is closed, so two tests running in parallel threads could otherwise start daemons on one
/// port: the second daemon fails to bind while the first one's listener makes it look ready.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port on 127.0.0.1");
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
}

/// A management-socket number for `tgtd -C` that no other tgtd uses now (the rule of
/// `scripts/tgt-control`): tgtd names its socket `/var/run/tgtd/socket.N`, a file shared by
/// every network namespace, so the number is drawn at random (from a free port, which the
/// kernel picks at random) and kept only if no such file exists. It must stay below 32768.
pub fn tgtd_control_port() -> String {
    for _ in 0..100 {
        let n = 1000 + free_port() % 31000;
        let taken = std::path::Path::new(&format!("/var/run/tgtd/socket.{n}")).exists()
            || std::path::Path::new(&format!("/var/run/tgtd/socket.{n}.lock")).exists();
        if !taken {
            return n.to_string();
        }
    }
    panic!("no free tgtd management socket number under /var/run/tgtd");
}

/// Starts Debian's tgtd in the foreground on 127.0.0.1:`port` with management socket
/// `control`; the caller owns (and must kill) the child.
pub fn spawn_tgtd(port: u16, control: &str) -> std::process::Child {
    std::process::Command::new("/usr/sbin/tgtd")
        .args([
            "-f",
            "-C",
            control,
            "--iscsi",
            &format!("portal=127.0.0.1:{port}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start tgtd")
}

/// Runs `tgtadm --lld iscsi ARGS` against the tgtd with management socket `control`; fails
/// the test if it fails, otherwise returns its standard output.
pub fn tgtadm(control: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("/usr/sbin/tgtadm")
        .args(["-C", control, "--lld", "iscsi"])
        .args(args)
        .output()
        .expect("run tgtadm");
    assert!(
        out.status.success(),
        "tgtadm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Makes the tgtd behind `control` export target 1 named `iqn` with LUN 1 backed by `image`,
/// open to every initiator.
pub fn tgtd_export(control: &str, iqn: &str, image: &std::path::Path) {
    let image = image.to_str().expect("UTF-8 image path");
    tgtadm(
        control,
        &["--op", "new", "--mode", "target", "--tid", "1", "-T", iqn],
    );
    tgtadm(
        control,
        &[
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "-b",
            image,
        ],
    );
    tgtadm(
        control,
        &[
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    );
}
