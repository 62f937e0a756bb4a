//! tgtd and istgt started on 127.0.0.1 with ports of our choosing, for interop tests. Each
//! is a guard that kills the daemon on drop. A missing binary fails the test with what to
//! install (scripts/install-deps installs both).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Target name both daemons export.
pub const TGT_IQN: &str = "iqn.2026-11.io.sluice:tgt";
/// istgt's NodeBase + TargetName.
pub const ISTGT_IQN: &str = "iqn.2026-11.io.sluice:disk1";
/// Size of the backing file.
pub const DISK_BYTES: u64 = 32 << 20;

/// A free TCP port on 127.0.0.1 (bound and released; the daemon takes it right after).
pub use sluice_test_support::free_port;

fn require(binary: &str, package: &str) {
    assert!(
        Path::new(binary).exists(),
        "{binary} is missing: this interop test needs Debian's `{package}` package \
         (run scripts/install-deps, or apt-get install {package})"
    );
}

fn wait_for_portal(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening on 127.0.0.1:{port}: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} not listening on 127.0.0.1:{port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Someone listens; make sure it is our daemon that stayed up, not one that failed to bind
    // while another process held the port.
    std::thread::sleep(Duration::from_millis(100));
    if let Ok(Some(status)) = child.try_wait() {
        panic!("{what} exited right after 127.0.0.1:{port} accepted a connection: {status}");
    }
}

/// A running daemon plus its temporary directory.
pub struct Daemon {
    child: Child,
    /// The portal, `127.0.0.1:PORT`.
    pub portal: String,
    /// Target IQN.
    pub iqn: &'static str,
    _dir: tempfile::TempDir,
}

impl Daemon {
    /// `iscsi://127.0.0.1:PORT/IQN/LUN`.
    pub fn url(&self, lun: u16) -> String {
        format!("iscsi://{}/{}/{lun}", self.portal, self.iqn)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn disk(dir: &Path) -> PathBuf {
    let path = dir.join("disk.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(DISK_BYTES))
        .expect("backing file");
    path
}

/// tgtd with target TGT_IQN, LUN 1 backed by a 32 MiB file, digests allowed.
pub fn tgtd() -> Daemon {
    require("/usr/sbin/tgtd", "tgt");
    require("/usr/sbin/tgtadm", "tgt");
    let dir = tempfile::tempdir().expect("temp dir");
    let image = disk(dir.path());
    let port = free_port();
    let control = sluice_test_support::tgtd_control_port();
    let mut child = sluice_test_support::spawn_tgtd(port, &control);
    wait_for_portal(port, &mut child, "tgtd");
    sluice_test_support::tgtd_export(&control, TGT_IQN, &image);
    for key in ["HeaderDigest", "DataDigest"] {
        sluice_test_support::tgtadm(
            &control,
            &[
                "--op",
                "update",
                "--mode",
                "target",
                "--tid",
                "1",
                "--name",
                key,
                "--value",
                "CRC32C,None",
            ],
        );
    }
    Daemon {
        child,
        portal: format!("127.0.0.1:{port}"),
        iqn: TGT_IQN,
        _dir: dir,
    }
}

/// istgt with target ISTGT_IQN, LUN 0 backed by a 32 MiB file.
pub fn istgt() -> Daemon {
    require("/usr/sbin/istgt", "istgt");
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().display();
    let image = disk(dir.path());
    let port = free_port();
    let control = free_port();
    let conf = dir.path().join("istgt.conf");
    std::fs::write(dir.path().join("auth.conf"), "").expect("auth.conf");
    std::fs::write(
        &conf,
        format!(
            r#"[Global]
  NodeBase "iqn.2026-11.io.sluice"
  PidFile {d}/istgt.pid
  AuthFile {d}/auth.conf
  MediaDirectory {d}
  LogFacility "local7"
  Timeout 30
  NopInInterval 20
  DiscoveryAuthMethod None
  MaxSessions 16
  MaxConnections 4
  MaxR2T 32
  MaxOutstandingR2T 16
  FirstBurstLength 262144
  MaxBurstLength 1048576
  MaxRecvDataSegmentLength 262144
  InitialR2T Yes
  ImmediateData Yes
[UnitControl]
  AuthMethod None
  Portal UC1 127.0.0.1:{control}
  Netmask 127.0.0.1
[PortalGroup1]
  Portal DA1 127.0.0.1:{port}
[InitiatorGroup1]
  InitiatorName "ALL"
  Netmask 127.0.0.0/8
[LogicalUnit1]
  TargetName disk1
  TargetAlias "Data Disk1"
  Mapping PortalGroup1 InitiatorGroup1
  AuthMethod None
  UseDigest Auto
  UnitType Disk
  LUN0 Storage {image} 32MB
"#,
            image = image.display()
        ),
    )
    .expect("istgt.conf");
    let mut child = Command::new("/usr/sbin/istgt")
        .args(["-c", conf.to_str().unwrap(), "-D", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start istgt");
    wait_for_portal(port, &mut child, "istgt");
    Daemon {
        child,
        portal: format!("127.0.0.1:{port}"),
        iqn: ISTGT_IQN,
        _dir: dir,
    }
}
