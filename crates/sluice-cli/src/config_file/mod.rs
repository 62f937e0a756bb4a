//! The TOML configuration file: schema, conversion to [`TargetConfig`], and errors that name the
//! file, line and column of the offending key.
//!
//! Every table denies unknown keys, so a typo is an error rather than a silently ignored setting.
//! Values that can be wrong after parsing keep their position with [`toml::Spanned`], so that a
//! semantic error found by [`TargetConfig::validate`] still points at a line. The schema is
//! documented key by key in `docs/configuration.md`.
//!
//! One concern per module: [`schema`] (the tables as serde reads them), [`values`] (sizes,
//! durations, addresses, ACLs), [`convert`] (to [`TargetConfig`]), [`session`] (operational
//! keys, bounded by the key table), [`target`], [`lun`] (LUNs and their backends), [`chap`],
//! [`locate`] (where a validation error points), [`error`] (where an error is) and [`kind`]
//! (what it is, with the target, LUN or key it concerns as typed fields).

use std::path::Path;

use sluice_target::config::TargetConfig;

mod chap;
mod convert;
mod error;
mod kind;
mod locate;
mod lun;
mod schema;
mod service;
mod session;
mod target;
mod values;
mod write;

pub use error::ConfigFileError;
pub use kind::ErrorKind;
pub use service::{ControlConfig, MetricsConfig, ServiceConfig};
pub use write::to_toml;

use convert::convert;
use error::{at, toml_message, Located};
use locate::locate_validation_error;
use lun::check_files;
use schema::FileToml;

/// Default block size: 512 bytes, what ESXi requires for external LUNs and Windows prefers.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// Reads, parses and validates a configuration file.
///
/// Relative `path`s of file LUNs are taken relative to the directory of the configuration file.
/// Besides [`TargetConfig::validate`], this checks that the directory of every file LUN exists and
/// that a file LUN without `size` names an existing file.
pub fn load(path: &Path) -> anyhow::Result<TargetConfig> {
    Ok(load_all(path)?.0)
}

/// [`load`], with the file's `[metrics]` and `[control]` tables.
pub fn load_all(path: &Path) -> anyhow::Result<(TargetConfig, ServiceConfig)> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Ok(parse_all(&src, path)?)
}

/// Parses and validates configuration text; `path` names it in errors and anchors relative paths.
#[cfg(test)]
pub fn parse_str(src: &str, path: &Path) -> Result<TargetConfig, ConfigFileError> {
    parse_all(src, path).map(|(config, _)| config)
}

/// [`parse_str`], with the file's `[metrics]` and `[control]` tables.
pub fn parse_all(src: &str, path: &Path) -> Result<(TargetConfig, ServiceConfig), ConfigFileError> {
    let located = |l: Located| ConfigFileError::new(path, src, l.span, l.kind);
    let file: FileToml = toml::from_str(src).map_err(|e| {
        let kind = ErrorKind::Syntax(toml_message(e.message()));
        located(at(e.span().unwrap_or(0..0), kind))
    })?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let service = service::convert(file.metrics.as_ref(), file.control.as_ref(), base);
    let (config, spans) = convert(file, base).map_err(located)?;
    if let Err(e) = config.validate() {
        let span = locate_validation_error(&spans, &e);
        return Err(located(at(span, ErrorKind::Invalid(e))));
    }
    check_files(&config, &spans).map_err(located)?;
    Ok((config, service))
}

#[cfg(test)]
mod tests;
