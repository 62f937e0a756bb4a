//! `[[target]]` tables and their `[[target.lun]]` tables, and the checks of file LUNs' paths.

use std::path::Path;

use sluice_target::config::{Acl, Backend, LunDef, TargetConfig, TargetDef, MAX_LUN_NUMBER};
use toml::Spanned;

use super::chap::convert_chap;
use super::convert::int_in;
use super::error::{at, Located};
use super::locate::{LunSpans, Spans, TargetSpans};
use super::schema::TargetToml;
use super::values::{AclToml, BackendKind};
use super::DEFAULT_BLOCK_SIZE;

/// Converts one `[[target]]` and its LUNs.
pub(super) fn convert_target(
    t: &Spanned<TargetToml>,
    base: &Path,
) -> Result<(TargetDef, TargetSpans), Located> {
    let target = t.get_ref();
    let iqn = target.iqn.get_ref().clone();
    let acl = match &target.acl {
        None => {
            return Err(at(
                target.iqn.span(),
                format!(
                    "target {iqn} has no `acl` key: choose who may log in, either \
                     acl = [\"iqn.1994-05.com.redhat:client1\", ...] or acl = \"open\" \
                     (any initiator; protect it with chap or keep it on loopback)"
                ),
            ));
        }
        Some(a) => match a.get_ref() {
            AclToml::Open => Acl::Open,
            AclToml::Allow(names) => {
                if names.is_empty() {
                    return Err(at(
                        a.span(),
                        "acl = [] admits nobody: list initiator names, or write acl = \"open\"",
                    ));
                }
                for n in names {
                    if !sluice_target::is_iscsi_name(n.get_ref()) {
                        return Err(at(
                            n.span(),
                            format!(
                                "{:?} is not a valid initiator name (iqn.YYYY-MM.reversed.domain[:id], eui.<16 hex> or naa.<16|32 hex>)",
                                n.get_ref()
                            ),
                        ));
                    }
                }
                Acl::Allow(names.iter().map(|n| n.get_ref().clone()).collect())
            }
        },
    };
    let (chap, chap_spans) = match &target.chap {
        Some(c) => {
            let (creds, s) = convert_chap(&iqn, c)?;
            (Some(creds), Some(s))
        }
        None => (None, None),
    };
    if let Some(alias) = &target.alias {
        if alias.get_ref().len() > 255 || alias.get_ref().chars().any(char::is_control) {
            return Err(at(
                alias.span(),
                "alias must be at most 255 bytes of printable text",
            ));
        }
    }
    let mut luns = Vec::new();
    let mut lun_spans = Vec::new();
    let mut next_number: i64 = 0;
    for l in &target.luns {
        let lun = l.get_ref();
        let number: u16 = match &lun.number {
            Some(n) => int_in(n, "number", 0, MAX_LUN_NUMBER.into())?,
            None => int_in(
                &Spanned::new(l.span(), next_number),
                "number (counted from the previous LUN)",
                0,
                MAX_LUN_NUMBER.into(),
            )?,
        };
        next_number = i64::from(number) + 1;
        let kind = *lun.backend.get_ref();
        let name = match kind {
            BackendKind::Memory => "memory",
            BackendKind::File => "file",
            BackendKind::Null => "null",
        };
        if kind != BackendKind::File {
            if let Some(p) = &lun.path {
                return Err(at(
                    p.span(),
                    format!("`path` only applies to backend = \"file\", not {name:?}"),
                ));
            }
            for (key, value) in [("direct", &lun.direct), ("huge_pages", &lun.huge_pages)] {
                if let Some(v) = value {
                    return Err(at(
                        v.span(),
                        format!("`{key}` only applies to backend = \"file\", not {name:?}"),
                    ));
                }
            }
        }
        let size = lun.size.as_ref().map(|s| s.get_ref().0);
        let backend = match kind {
            BackendKind::Memory | BackendKind::Null => {
                let Some(size) = size else {
                    return Err(at(
                        lun.backend.span(),
                        format!(
                            "LUN {number}: backend = {name:?} needs a `size`, e.g. size = \"1G\""
                        ),
                    ));
                };
                if kind == BackendKind::Memory {
                    Backend::Memory { size }
                } else {
                    Backend::Null { size }
                }
            }
            BackendKind::File => {
                let Some(p) = &lun.path else {
                    return Err(at(
                        lun.backend.span(),
                        format!("LUN {number}: backend = \"file\" needs a `path`"),
                    ));
                };
                let path = base.join(p.get_ref());
                Backend::File {
                    path,
                    size,
                    direct: lun.direct.as_ref().is_some_and(|d| *d.get_ref()),
                    huge_pages: lun.huge_pages.as_ref().is_none_or(|h| *h.get_ref()),
                }
            }
        };
        let block_size = match &lun.block_size {
            Some(b) => int_in(b, "block_size", 0, i64::from(u32::MAX))?,
            None => DEFAULT_BLOCK_SIZE,
        };
        if let Some(s) = &lun.serial {
            let text = s.get_ref();
            if text.is_empty() || text.len() > 64 || !text.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(at(
                    s.span(),
                    "serial must be 1 to 64 printable ASCII characters without spaces",
                ));
            }
        }
        luns.push(LunDef {
            number,
            backend,
            block_size,
            read_only: lun.read_only.unwrap_or(false),
            removable: lun.removable.unwrap_or(false),
            serial: lun.serial.as_ref().map(|s| s.get_ref().clone()),
        });
        lun_spans.push(LunSpans {
            table: l.span(),
            number: lun.number.as_ref().map(Spanned::span),
            size: lun.size.as_ref().map(Spanned::span),
            block_size: lun.block_size.as_ref().map(Spanned::span),
            path: lun.path.as_ref().map(Spanned::span),
        });
    }
    let def = TargetDef {
        iqn,
        alias: target.alias.as_ref().map(|a| a.get_ref().clone()),
        luns,
        acl,
        chap,
    };
    let spans = TargetSpans {
        iqn: target.iqn.span(),
        chap: chap_spans,
        luns: lun_spans,
    };
    Ok((def, spans))
}

/// Checks that file LUNs can be opened or created: the directory exists, and a file given
/// without `size` already exists.
pub(super) fn check_files(config: &TargetConfig, spans: &Spans) -> Result<(), Located> {
    for (t, ts) in config.targets.iter().zip(&spans.targets) {
        for (l, ls) in t.luns.iter().zip(&ts.luns) {
            let Backend::File { path, size, .. } = &l.backend else {
                continue;
            };
            let span = ls.path.clone().unwrap_or_else(|| ls.table.clone());
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                return Err(at(
                    span,
                    format!(
                        "LUN {}: directory {} does not exist",
                        l.number,
                        dir.display()
                    ),
                ));
            }
            if path.is_dir() {
                return Err(at(
                    span,
                    format!("LUN {}: {} is a directory", l.number, path.display()),
                ));
            }
            if size.is_none() && !path.exists() {
                return Err(at(
                    span,
                    format!(
                        "LUN {}: {} does not exist; add `size` to create it (sparse)",
                        l.number,
                        path.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}
