//! Carries out the requests of `sluice ctl` (whichever way they came) and reloads on SIGHUP:
//! every change goes through [`Target::apply`] and is logged with who asked.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use sluice_target::config::{Acl, Backend, ChapCredentials, LuOptions, LunDef, SanitizeOptions};
use sluice_target::{ChangeReport, Target};
use tracing::{info, warn};

use super::protocol::{LunSpec, Request, Response};
use crate::config_file::{self, ServiceConfig, DEFAULT_BLOCK_SIZE};

/// The target, and where its configuration came from.
#[derive(Debug)]
pub struct Operator {
    target: Arc<Target>,
    /// The file the target was started with (`--config`), read again on reload.
    config_path: Option<PathBuf>,
    /// `[metrics]` and `[control]` as the process started with them.
    service: ServiceConfig,
}

impl Operator {
    /// Operates `target`, started from `config_path` (if any) with `service`.
    pub fn new(target: Arc<Target>, config_path: Option<PathBuf>, service: ServiceConfig) -> Self {
        let config_path = config_path.map(|p| std::path::absolute(&p).unwrap_or(p));
        Self {
            target,
            config_path,
            service,
        }
    }

    /// The target operated.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// Carries out `request` for `by` (who asked, as the log shows it).
    pub fn handle(&self, request: Request, by: &str) -> Response {
        if request.changes() {
            info!(by, request = %describe(&request), "operator request");
        }
        match self.run(request, by) {
            Ok(v) => Response::ok(v),
            Err(e) => {
                warn!(by, error = %format!("{e:#}"), "operator request refused");
                Response::error(format!("{e:#}"))
            }
        }
    }

    fn run(&self, request: Request, by: &str) -> anyhow::Result<Value> {
        let t = &self.target;
        let report = match request {
            Request::Status {} => return Ok(super::report::status(&t.status())),
            Request::Config {} => {
                return Ok(json!({ "toml": config_file::to_toml(&t.config(), &self.service) }))
            }
            Request::Save { path } => {
                let path = match (path, &self.config_path) {
                    (Some(p), _) => p,
                    (None, Some(p)) => p.clone(),
                    (None, None) => {
                        bail!("the target was started without --config: name the file to save to")
                    }
                };
                if !path.is_absolute() {
                    bail!("{}: the path must be absolute", path.display());
                }
                let text = config_file::to_toml(&t.config(), &self.service);
                write_private(&path, &text)?;
                info!(by, path = %path.display(), "configuration saved");
                return Ok(json!({ "path": path }));
            }
            Request::Reload {} => self.reload(by)?,
            Request::LunAdd { target, lun } => t.add_lun(&target, lun_def(lun)?, by)?,
            Request::LunRemove { target, number } => t.remove_lun(&target, number, by)?,
            Request::LunResize {
                target,
                number,
                size,
            } => t.resize_lun(&target, number, size, by)?,
            Request::AclAdd { target, initiator } => t.acl_add(&target, &initiator, by)?,
            Request::AclRemove { target, initiator } => t.acl_remove(&target, &initiator, by)?,
            Request::AclSet { target, initiators } => {
                let acl = initiators.map_or(Acl::Open, Acl::Allow);
                t.set_acl(&target, acl, by)?
            }
            Request::Chap {
                target,
                credentials,
            } => {
                let chap = credentials.map(|c| ChapCredentials {
                    user: c.user,
                    secret: c.secret,
                    mutual: c.mutual,
                });
                t.set_chap(target.as_deref(), chap, by)?
            }
            Request::SessionClose { id } => {
                t.close_session(id, by)?;
                return Ok(json!({ "closed": id }));
            }
        };
        Ok(report_json(&report))
    }

    /// Reads the configuration file again and applies the difference. An invalid file
    /// changes nothing; the error says where it is wrong.
    pub fn reload(&self, by: &str) -> anyhow::Result<ChangeReport> {
        let Some(path) = &self.config_path else {
            bail!("the target was started without --config: there is no file to reload");
        };
        let (config, service) = config_file::load_all(path)?;
        let mut report = self.target.apply(config, by)?;
        if service != self.service {
            report
                .changes
                .push("[metrics] or [control] changed: they take effect at the next start".into());
        }
        info!(by, path = %path.display(), changes = report.changes.len(), "configuration reloaded");
        Ok(report)
    }
}

/// What a request is, for the log: never its secrets.
fn describe(r: &Request) -> String {
    match r {
        Request::Chap {
            target,
            credentials,
        } => format!(
            "chap {} {}",
            target.as_deref().unwrap_or("(discovery)"),
            if credentials.is_some() {
                "set"
            } else {
                "cleared"
            }
        ),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A change's report as JSON.
pub fn report_json(r: &ChangeReport) -> Value {
    json!({ "changes": r.changes, "sessions_closed": r.sessions_closed })
}

fn lun_def(s: LunSpec) -> anyhow::Result<LunDef> {
    let size = || s.size.context("a memory or null LUN needs a size");
    let backend = match s.backend.as_str() {
        "memory" => Backend::Memory { size: size()? },
        "null" => Backend::Null { size: size()? },
        "file" => {
            let path = s.path.clone().context("a file LUN needs a path")?;
            if !path.is_absolute() {
                bail!("{}: the path must be absolute", path.display());
            }
            if s.size.is_none() && !path.exists() {
                bail!("{}: no such file; give a size to create it", path.display());
            }
            Backend::File {
                path,
                size: s.size,
                direct: s.direct,
                huge_pages: true,
            }
        }
        "rbd" => bail!(
            "backend \"rbd\": add RBD LUNs to the configuration file and reload (its \
             [[target.lun]] names the image and the cluster)"
        ),
        other => bail!("backend {other:?}: use memory, file or null"),
    };
    Ok(LunDef {
        number: s.number,
        backend,
        block_size: s.block_size.unwrap_or(DEFAULT_BLOCK_SIZE),
        read_only: s.read_only,
        removable: s.removable,
        options: lu_options(&s)?,
        serial: s.serial,
    })
}

/// The SCSI options of a LU to add, checked as the configuration file checks them.
fn lu_options(s: &LunSpec) -> anyhow::Result<LuOptions> {
    if let Some(p) = s.soft_threshold {
        if !s.thin {
            bail!("soft_threshold only applies to a thin LUN");
        }
        if !(1..=100).contains(&p) {
            bail!("soft_threshold {p}: give a percentage from 1 to 100");
        }
    }
    if let Some(rate) = s.sanitize_rate {
        if !s.sanitize || rate == 0 {
            bail!("sanitize_rate needs sanitize and a rate above zero");
        }
    }
    Ok(LuOptions {
        thin: s.thin,
        soft_threshold_percent: s.soft_threshold,
        sanitize: s.sanitize.then_some(SanitizeOptions {
            overwrite_bytes_per_s: s.sanitize_rate,
        }),
    })
}

/// Writes `text` to `path` readable by its owner only (it may hold CHAP secrets), through a
/// temporary file renamed over it, so a reader never sees half a file.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let name = path
        .file_name()
        .context("the path names no file")?
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.sluice-tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> LunSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_lun_spec_carries_thin_and_sanitize_checked_like_the_file() {
        // Older clients send no options: a thick LU.
        let thick = lun_def(spec(r#"{"number":1,"backend":"memory","size":1048576}"#)).unwrap();
        assert_eq!(thick.options, LuOptions::default());
        let thin = lun_def(spec(
            r#"{"number":1,"backend":"memory","size":1048576,"thin":true,
                "soft_threshold":80,"sanitize":true,"sanitize_rate":1000000}"#,
        ))
        .unwrap();
        assert_eq!(
            thin.options,
            LuOptions {
                thin: true,
                soft_threshold_percent: Some(80),
                sanitize: Some(SanitizeOptions {
                    overwrite_bytes_per_s: Some(1_000_000)
                }),
            }
        );
        for bad in [
            r#"{"number":1,"backend":"memory","size":1048576,"soft_threshold":80}"#,
            r#"{"number":1,"backend":"memory","size":1048576,"thin":true,"soft_threshold":0}"#,
            r#"{"number":1,"backend":"memory","size":1048576,"thin":true,"soft_threshold":101}"#,
            r#"{"number":1,"backend":"memory","size":1048576,"sanitize_rate":1000}"#,
            r#"{"number":1,"backend":"memory","size":1048576,"sanitize":true,"sanitize_rate":0}"#,
        ] {
            assert!(lun_def(spec(bad)).is_err(), "{bad}");
        }
    }
}
