//! A single-node Ceph cluster for one test, started by the project's `scripts/ceph-cluster`
//! and stopped (its directory removed) on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running cluster: one monitor, one manager, one memstore OSD, pool `rbd`, on 127.0.0.1.
pub struct CephCluster {
    dir: PathBuf,
}

/// The pool the cluster serves images from.
pub const POOL: &str = "rbd";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ceph-cluster")
}

impl CephCluster {
    /// Starts a cluster (about 10 s); panics with the script's output when it cannot, naming
    /// the Debian packages when the Ceph daemons are missing.
    pub fn start() -> Self {
        for tool in ["ceph-mon", "ceph-mgr", "ceph-osd", "rbd"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{tool} is missing: install Debian's ceph-mon ceph-mgr ceph-osd ceph-common \
                 (scripts/install-deps)"
            );
        }
        let out = Command::new(script())
            .arg("start")
            .output()
            .expect("run scripts/ceph-cluster");
        assert!(
            out.status.success(),
            "scripts/ceph-cluster start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8(out.stdout).expect("directory name");
        Self {
            dir: PathBuf::from(dir.trim()),
        }
    }

    /// The cluster's configuration file.
    pub fn conf_file(&self) -> PathBuf {
        self.dir.join("ceph.conf")
    }

    /// The keyring of `client.ID` (`admin`, or `sluice`: the RBD profile on [`POOL`] only).
    pub fn keyring(&self, id: &str) -> PathBuf {
        self.dir.join(format!("ceph.client.{id}.keyring"))
    }

    /// Runs the `rbd` tool as client.admin; panics when it fails. Returns its standard output.
    pub fn rbd(&self, args: &[&str]) -> String {
        let out = Command::new("rbd")
            .arg("--conf")
            .arg(self.conf_file())
            .args(args)
            .output()
            .expect("run rbd");
        assert!(
            out.status.success(),
            "rbd {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates image `name` of `size_mib` MiB in [`POOL`].
    pub fn create_image(&self, name: &str, size_mib: u64) {
        self.rbd(&[
            "create",
            "--size",
            &format!("{size_mib}M"),
            &format!("{POOL}/{name}"),
        ]);
    }
}

impl Drop for CephCluster {
    fn drop(&mut self) {
        let status = Command::new(script()).arg("stop").arg(&self.dir).status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!(
                "scripts/ceph-cluster stop {} failed: {status:?}",
                self.dir.display()
            );
        }
    }
}
