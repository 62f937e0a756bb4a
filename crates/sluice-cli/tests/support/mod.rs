//! Helpers shared by the end-to-end tests: a `sluice target` child process that is killed when
//! dropped, and external tools that must be installed.

#![allow(dead_code)]

pub mod cunit;
pub mod gateways;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running `sluice target`, stopped (SIGKILL) when dropped.
pub struct TargetProcess {
    child: Child,
    /// The first `iscsi://` URL the target printed.
    pub url: String,
    /// Every `iscsi://` URL it printed (each LU through each portal).
    pub urls: Vec<String>,
    /// Every `iser://` URL it printed (with `--iser`).
    pub iser_urls: Vec<String>,
}

impl TargetProcess {
    /// Starts `sluice target --listen 127.0.0.1:0 ARGS...` and waits for its URL.
    pub fn start(args: &[&str]) -> Self {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        Self::spawn(&all, "warn", Stdio::inherit())
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `sluice target ARGS...` (which name the listen address) and waits for its URL.
    pub fn start_exact(args: &[&str]) -> Self {
        Self::spawn(args, "warn", Stdio::inherit())
    }

    /// Starts `sluice target ARGS...` with two portal groups, 127.0.0.1 (TPGT 1) and
    /// 127.0.0.2 (TPGT 2), on ports of the kernel's choosing: one LU seen through two paths.
    /// [`urls`](Self::urls) holds LUN 0 through each (for a one-LUN target).
    pub fn start_multipath(args: &[&str]) -> Self {
        let mut all = vec!["--listen", "127.0.0.1:0", "--listen", "127.0.0.2:0,2"];
        all.extend_from_slice(args);
        let t = Self::spawn(&all, "warn", Stdio::inherit());
        assert_eq!(t.urls.len(), 2, "one URL per portal: {:?}", t.urls);
        t
    }

    /// Starts `sluice target --config FILE` with logs at `log_level` written to `log`.
    pub fn with_config(config: &std::path::Path, log_level: &str, log: std::fs::File) -> Self {
        let config = config.to_str().expect("utf-8 path");
        Self::spawn(&["--config", config], log_level, Stdio::from(log))
    }

    fn spawn(args: &[&str], log_level: &str, stderr: Stdio) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("target")
            .args(args)
            .env("RUST_LOG", log_level)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start sluice target");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("iscsi://") || line.starts_with("iser://") {
                    let _ = tx.send(line);
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sluice target did not print its URL within 30 s");
        // The others follow at once (they are printed together).
        let mut urls = vec![url.clone()];
        while let Ok(more) = rx.recv_timeout(Duration::from_millis(300)) {
            urls.push(more);
        }
        let (iser_urls, urls) = urls.into_iter().partition(|u| u.starts_with("iser://"));
        Self {
            child,
            url,
            urls,
            iser_urls,
        }
    }
}

impl Drop for TargetProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Path of an external tool, or a panic saying how to get it. A missing tool fails the test:
/// a skipped check must never look like a pass.
pub fn require_tool(name: &str, package: &str) -> String {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => p.to_string_lossy().into_owned(),
        None => {
            panic!("{name} is not installed: run scripts/install-deps (Debian package {package})")
        }
    }
}
