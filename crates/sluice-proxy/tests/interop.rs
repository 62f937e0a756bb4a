//! The proxy between real peers (interop tier): libiscsi's `iscsi-inq` and `iscsi-ls` through
//! a pass-through proxy to sluice's target, and sluice's initiator and `iscsi-inq` through it
//! to Debian's tgtd. A missing tool fails the test, naming its Debian package.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{config, pattern, RunningProxy, TestTarget, DEADLINE, IQN};
use sluice_fault::{Direction, FaultPlan};
use sluice_initiator::{ConnectOptions, Session};
use sluice_target::config::DigestPolicy;
use sluice_test_support::free_port;

/// Path of an external tool, or a panic saying which package provides it: a skipped check
/// must never look like a pass.
fn require_tool(path: &str, package: &str) -> String {
    assert!(
        std::path::Path::new(path).exists(),
        "{path} is missing: this interop test needs Debian's `{package}` package \
         (run scripts/install-deps, or apt-get install {package})"
    );
    path.to_owned()
}

/// Runs a tool to completion (it must succeed); returns stdout and stderr together.
fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .expect("run the tool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

/// A runtime whose worker threads serve the proxy while the test thread runs the tools.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn assert_no_faults(proxy: &RunningProxy) {
    let c = proxy.handle.counters();
    for dir in Direction::BOTH {
        assert_eq!(c.direction(dir).faults(), 0, "{dir}: {c:?}");
    }
    assert_eq!((c.unframeable, c.upstream_failures), (0, 0), "{c:?}");
}

#[test]
fn libiscsi_tools_through_a_pass_through_proxy_to_sluice() {
    let iscsi_inq = require_tool("/usr/bin/iscsi-inq", "libiscsi-bin");
    let iscsi_ls = require_tool("/usr/bin/iscsi-ls", "libiscsi-bin");
    // The target insists on header digests: libiscsi offers "None,CRC32C", so the proxy must
    // learn them from the login to cut what follows.
    let mut cfg = config();
    cfg.offer.header_digest = DigestPolicy::Require;
    let target = TestTarget::start(cfg);
    let rt = runtime();
    let proxy = rt.block_on(RunningProxy::start(target.addr, FaultPlan::default(), 1));
    let portal = proxy.portal();

    let inq = run(&iscsi_inq, &[&format!("iscsi://{portal}/{IQN}/0")]);
    assert!(inq.contains("Vendor:SLUICE"), "{inq}");
    let vpd = run(
        &iscsi_inq,
        &["-e", "1", "-c", "128", &format!("iscsi://{portal}/{IQN}/0")],
    );
    assert!(vpd.contains("Unit Serial Number"), "{vpd}");
    // Discovery through the proxy (with -s the tool would log in to the addresses the target
    // reports, which are the target's own, not the proxy's).
    let ls = run(&iscsi_ls, &[&format!("iscsi://{portal}")]);
    assert!(ls.contains(&format!("Target:{IQN}")), "{ls}");

    assert_no_faults(&proxy);
    let c = proxy.handle.counters();
    assert_eq!(c.connections, 3, "{c:?}");
    assert!(c.to_target.pdus >= 3 && c.to_initiator.pdus >= 3, "{c:?}");
    rt.block_on(proxy.stop());
}

/// Debian's tgtd on 127.0.0.1 with target [`TGT_IQN`], LUN 1 on a 32 MiB file; killed (by its
/// own pid) on drop.
struct Tgtd {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    control: String,
    _dir: tempfile::TempDir,
}

const TGT_IQN: &str = "iqn.2026-11.io.sluice:proxy-tgt";

impl Tgtd {
    fn start() -> Tgtd {
        require_tool("/usr/sbin/tgtd", "tgt");
        require_tool("/usr/sbin/tgtadm", "tgt");
        let dir = tempfile::tempdir().expect("temp dir");
        let image = dir.path().join("disk.img");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(32 << 20))
            .expect("backing file");
        // Ports are picked free and released, and other tests' tgtds may hold the same
        // management socket number: a daemon that exits at once is retried on new numbers.
        for _ in 0..3 {
            let port = free_port();
            let control = sluice_test_support::tgtd_control_port();
            let mut child = sluice_test_support::spawn_tgtd(port, &control);
            let deadline = Instant::now() + Duration::from_secs(10);
            let listening = loop {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break true;
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break false;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("tgtd not listening on 127.0.0.1:{port}");
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            if listening {
                let t = Tgtd {
                    child,
                    addr: ([127, 0, 0, 1], port).into(),
                    control: control.clone(),
                    _dir: dir,
                };
                sluice_test_support::tgtd_export(&control, TGT_IQN, &image);
                return t;
            }
        }
        panic!("tgtd exited before listening, three times");
    }

    /// Sets a session parameter of target 1, for the logins that follow.
    fn set(&self, key: &str, value: &str) {
        sluice_test_support::tgtadm(
            &self.control,
            &[
                "--op", "update", "--mode", "target", "--tid", "1", "--name", key, "--value", value,
            ],
        );
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sluice_and_libiscsi_through_a_pass_through_proxy_to_tgtd() {
    let iscsi_inq = require_tool("/usr/bin/iscsi-inq", "libiscsi-bin");
    let tgtd = Tgtd::start();
    let rt = runtime();
    let proxy = rt.block_on(RunningProxy::start(tgtd.addr, FaultPlan::default(), 1));
    let portal = proxy.portal();

    let inq = run(&iscsi_inq, &[&format!("iscsi://{portal}/{TGT_IQN}/1")]);
    assert!(inq.contains("Vendor:"), "{inq}");

    // Both digests, negotiated with tgtd (whose default is None): a verified workload through
    // the proxy, which must learn them from tgtd's login answers.
    tgtd.set("HeaderDigest", "CRC32C");
    tgtd.set("DataDigest", "CRC32C");
    rt.block_on(async {
        let mut opts = ConnectOptions::default();
        opts.set_digests(true, true);
        let s = tokio::time::timeout(DEADLINE, Session::connect(&portal, TGT_IQN, opts))
            .await
            .expect("login in time")
            .expect("login to tgtd through the proxy");
        let params = s.params();
        assert!(params.header_digest && params.data_digest, "{params:?}");
        for i in 0..8u64 {
            let data = pattern(64 << 10, i);
            let io = async {
                s.write(1, i * 256, data.clone(), 512).await.expect("write");
                s.read(1, i * 256, 128, 512).await.expect("read")
            };
            let back = tokio::time::timeout(DEADLINE, io).await.expect("in time");
            assert_eq!(back, data);
        }
        s.logout().await.expect("logout");
    });
    assert_no_faults(&proxy);
    let c = proxy.handle.counters();
    assert_eq!(c.connections, 2, "{c:?}");
    assert!(c.to_target.bytes > 8 * (64 << 10), "{c:?}");
    rt.block_on(proxy.stop());
}
