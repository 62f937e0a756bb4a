//! A `sluice target` in-process on 127.0.0.1:0 (from sluice-test-support), Debian's tgtd,
//! and the RFC model of write PDU counts, for the end-to-end tests.
#![allow(dead_code, unused_imports)]

pub use sluice_test_support::{chap, config, TestTarget, IQN};

/// Debian's tgtd on 127.0.0.1 with a port of our choosing: target [`TGT_IQN`], LUN 1 backed
/// by a [`TGT_DISK_BYTES`] file. Killed on drop (by its own pid, never by name: other tgtds
/// may be running). Copied in small from `sluice-cli/tests/client/peers.rs`.
pub struct Tgtd {
    child: std::process::Child,
    /// `127.0.0.1:PORT`.
    pub portal: String,
    control: String,
    /// The backing file's directory, removed after the daemon is killed.
    _dir: Option<tempfile::TempDir>,
}

/// The target name tgtd exports.
pub const TGT_IQN: &str = "iqn.2026-11.io.sluice:tgt";
/// Size of tgtd's backing file.
pub const TGT_DISK_BYTES: u64 = 32 << 20;

use sluice_test_support::free_port;

impl Tgtd {
    /// Starts tgtd; a missing binary fails the test naming the package to install.
    pub fn start() -> Self {
        use std::process::{Command, Stdio};
        use std::time::{Duration, Instant};
        for binary in ["/usr/sbin/tgtd", "/usr/sbin/tgtadm"] {
            assert!(
                std::path::Path::new(binary).exists(),
                "{binary} is missing: this interop test needs Debian's `tgt` package \
                 (run scripts/install-deps, or apt-get install tgt)"
            );
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let image = dir.path().join("disk.img");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(TGT_DISK_BYTES))
            .expect("backing file");
        // The ports are picked free then released, and other tests' tgtds may hold the same
        // management socket number: a daemon that exits at once is retried on new numbers.
        let mut failures = Vec::new();
        let t = loop {
            let port = free_port();
            let control = sluice_test_support::tgtd_control_port();
            let child = sluice_test_support::spawn_tgtd(port, &control);
            // The guard exists from here on, so a failed start still kills the daemon.
            let mut t = Self {
                child,
                portal: format!("127.0.0.1:{port}"),
                control,
                _dir: None,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            let exited = loop {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break None;
                }
                if let Ok(Some(status)) = t.child.try_wait() {
                    break Some(status);
                }
                assert!(
                    Instant::now() < deadline,
                    "tgtd not listening on 127.0.0.1:{port}"
                );
                std::thread::sleep(Duration::from_millis(50));
            };
            match exited {
                None => break t,
                Some(status) => {
                    failures.push(format!("-C {} port {port}: {status}", t.control));
                    assert!(
                        failures.len() < 3,
                        "tgtd exited before listening: {failures:?}"
                    );
                }
            }
        };
        let mut t = t;
        t._dir = Some(dir);
        sluice_test_support::tgtd_export(&t.control, TGT_IQN, &image);
        t
    }

    /// Runs `tgtadm --lld iscsi ARGS` against this daemon; fails the test if it fails.
    pub fn tgtadm(&self, args: &[&str]) -> String {
        sluice_test_support::tgtadm(&self.control, args)
    }

    /// Sets a session parameter of target 1 (applies to sessions logged in afterwards).
    pub fn set(&self, key: &str, value: &str) {
        self.tgtadm(&[
            "--op", "update", "--mode", "target", "--tid", "1", "--name", key, "--value", value,
        ]);
    }
}

impl Drop for Tgtd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Data-carrying PDUs per sequence the RFC 7143 rules predict for a write of `len` bytes:
/// immediate data (section 13.11) and unsolicited Data-Out up to FirstBurstLength (13.14)
/// unless InitialR2T (13.10), then R2T sequences of MaxBurstLength (13.13), every PDU at most
/// the target's MaxRecvDataSegmentLength (13.12).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn model(
    len: u32,
    immediate: bool,
    initial_r2t: bool,
    fbl: u32,
    mbl: u32,
    mrdsl: u32,
) -> Vec<u32> {
    let first = fbl.min(len);
    let imm = if immediate { first.min(mrdsl) } else { 0 };
    let unsolicited_end = if initial_r2t { imm } else { first };
    let mut seqs = Vec::new();
    let first_pdus = u32::from(imm > 0) + (unsolicited_end - imm).div_ceil(mrdsl);
    if first_pdus > 0 {
        seqs.push(first_pdus);
    }
    let mut off = unsolicited_end;
    while off < len {
        let burst = mbl.min(len - off);
        seqs.push(burst.div_ceil(mrdsl));
        off += burst;
    }
    seqs
}

/// `len` pseudo-random bytes (xorshift) for `seed`: data whose misplacement shows.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
