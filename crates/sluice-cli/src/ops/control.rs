//! The control socket: a Unix stream socket taking one JSON request per line and answering
//! one JSON line each (see [`super::protocol`]). Only root (or this process's user) may use
//! it, or the members of a configured group: the socket is created mode 0600 (0660 with the
//! group) under a restrictive umask, so it is never open to others even for an instant, and
//! each peer's credentials (SO_PEERCRED) are checked again and logged with every change.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use super::operator::Operator;
use super::protocol::{Request, Response, MAX_REQUEST_BYTES};

/// Where `sluice ctl` looks when no socket is named.
pub const DEFAULT_SOCKET: &str = "/run/sluice/control.sock";

/// A bound control socket; the file goes when this is dropped.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The group allowed besides root and the process's user.
    group: Option<u32>,
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl ControlSocket {
    /// Creates the socket at `path` (its directory too), for root, this process's user and,
    /// with `group`, that group's members (a name from /etc/group or a number).
    pub fn bind(path: &Path, group: Option<&str>) -> anyhow::Result<Self> {
        let gid = group.map(group_id).transpose()?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        remove_stale(path)?;
        // Created 0600 (0660) at once: no moment in which others could connect.
        let mask = if gid.is_some() { 0o117 } else { 0o177 };
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(mask));
        let bound = UnixListener::bind(path);
        rustix::process::umask(old);
        let listener = bound.with_context(|| format!("cannot bind {}", path.display()))?;
        let socket = Self {
            listener,
            path: path.to_path_buf(),
            group: gid,
        };
        if let Some(gid) = gid {
            rustix::fs::chown(path, None, Some(rustix::process::Gid::from_raw(gid)))
                .with_context(|| format!("cannot give {} to group {gid}", path.display()))?;
        }
        let mode = if gid.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        Ok(socket)
    }

    /// Serves requests until the task is dropped.
    pub async fn serve(self, operator: Arc<Operator>) {
        let socket = Arc::new(self);
        loop {
            let stream = match socket.listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    warn!(error = %e, "control socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (op, sock) = (Arc::clone(&operator), Arc::clone(&socket));
            tokio::spawn(async move {
                if let Err(e) = sock.client(stream, op).await {
                    debug!(error = %e, "control connection ended");
                }
            });
        }
    }

    async fn client(&self, stream: UnixStream, operator: Arc<Operator>) -> anyhow::Result<()> {
        let cred = stream.peer_cred()?;
        let me = rustix::process::geteuid().as_raw();
        let (uid, gid) = (cred.uid(), cred.gid());
        let pid = cred.pid().map_or_else(|| "?".into(), |p| p.to_string());
        // The file's mode already keeps others out; this holds even if it was changed.
        let allowed = uid == 0 || uid == me || self.group.is_some_and(|g| g == gid);
        let by = format!("uid {uid} pid {pid} (control socket)");
        let (rd, mut wr) = stream.into_split();
        let mut lines = BufReader::new(rd);
        let mut line = String::new();
        loop {
            line.clear();
            let n = (&mut lines)
                .take(MAX_REQUEST_BYTES as u64 + 1)
                .read_line(&mut line)
                .await?;
            if n == 0 {
                return Ok(());
            }
            let response = if !allowed {
                warn!(
                    by,
                    "control request refused: not root, this user or the group"
                );
                Response::error("permission denied")
            } else if n > MAX_REQUEST_BYTES {
                Response::error(format!("request longer than {MAX_REQUEST_BYTES} bytes"))
            } else {
                match serde_json::from_str::<Request>(line.trim_end()) {
                    Ok(req) => {
                        let (op, by) = (Arc::clone(&operator), by.clone());
                        tokio::task::spawn_blocking(move || op.handle(req, &by))
                            .await
                            .unwrap_or_else(|e| Response::error(format!("internal error: {e}")))
                    }
                    Err(e) => Response::error(format!("bad request: {e}")),
                }
            };
            let mut text = serde_json::to_string(&response)?;
            text.push('\n');
            wr.write_all(text.as_bytes()).await?;
            if n > MAX_REQUEST_BYTES || !allowed {
                return Ok(());
            }
        }
    }
}

/// Removes a socket file left by a process that is gone; refuses one still answering.
fn remove_stale(path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        bail!("{} exists and is not a socket", path.display());
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        bail!(
            "{} is in use: is another sluice target running?",
            path.display()
        );
    }
    std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))
}

/// A group's id: a number, or a name looked up in /etc/group.
fn group_id(group: &str) -> anyhow::Result<u32> {
    if let Ok(n) = group.parse() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group").context("cannot read /etc/group")?;
    groups
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == group).then(|| f.nth(1)?.parse().ok())?
        })
        .with_context(|| format!("no group {group:?} in /etc/group"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_by_name_or_number() {
        assert_eq!(group_id("0").unwrap(), 0);
        assert_eq!(group_id("root").unwrap(), 0);
        assert!(group_id("no-such-group-sluice").is_err());
    }
}
