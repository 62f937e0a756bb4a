//! `[[target.lun]]` tables: number, backend and its keys, block size, serial; and the checks of
//! file LUNs' paths once the whole file is converted.

use std::path::Path;

use sluice_target::config::{
    Backend, LuOptions, LunDef, LunRef, RbdImage, SanitizeOptions, TargetConfig, TargetRef,
    MAX_LUN_NUMBER,
};
use toml::Spanned;

use super::convert::int_in;
use super::error::{at, Located};
use super::kind::{ErrorKind, FileKey};
use super::locate::{LunSpans, Spans};
use super::schema::LunToml;
use super::values::{BackendKind, ProvisioningKind};
use super::DEFAULT_BLOCK_SIZE;

/// Converts the `index`th LUN of `target`; `next_number` is its number when it names none.
pub(super) fn convert_lun(
    target: &TargetRef,
    index: usize,
    next_number: i64,
    l: &Spanned<LunToml>,
    base: &Path,
) -> Result<(LunDef, LunSpans), Located> {
    let lun = l.get_ref();
    let max = MAX_LUN_NUMBER.into();
    let number: u16 = match &lun.number {
        Some(n) => int_in(n, FileKey::LunNumber, 0, max)?,
        None => int_in(
            &Spanned::new(l.span(), next_number),
            FileKey::CountedLunNumber,
            0,
            max,
        )?,
    };
    let this = LunRef { index, number };
    let backend = *lun.backend.get_ref();
    let owned_keys = [
        (
            BackendKind::File,
            FileKey::Path,
            lun.path.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::File,
            FileKey::Direct,
            lun.direct.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::File,
            FileKey::HugePages,
            lun.huge_pages.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::Rbd,
            FileKey::Image,
            lun.image.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::Rbd,
            FileKey::CephConf,
            lun.ceph_conf.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::Rbd,
            FileKey::CephId,
            lun.ceph_id.as_ref().map(Spanned::span),
        ),
        (
            BackendKind::Rbd,
            FileKey::CephKeyring,
            lun.ceph_keyring.as_ref().map(Spanned::span),
        ),
    ];
    let misplaced = owned_keys
        .into_iter()
        .find(|(only, _, span)| *only != backend && span.is_some());
    if let Some((only, key, Some(span))) = misplaced {
        let kind = ErrorKind::NotForBackend {
            target: target.clone(),
            lun: this,
            key,
            only,
            backend,
        };
        return Err(at(span, kind));
    }
    let size = lun.size.as_ref().map(|s| s.get_ref().0);
    let no_size = || {
        let kind = ErrorKind::NoSize {
            target: target.clone(),
            lun: this,
            backend,
        };
        at(lun.backend.span(), kind)
    };
    let backend = match backend {
        BackendKind::Memory => Backend::Memory {
            size: size.ok_or_else(no_size)?,
        },
        BackendKind::Null => Backend::Null {
            size: size.ok_or_else(no_size)?,
        },
        BackendKind::File => {
            let Some(p) = &lun.path else {
                let kind = ErrorKind::NoPath {
                    target: target.clone(),
                    lun: this,
                };
                return Err(at(lun.backend.span(), kind));
            };
            Backend::File {
                path: base.join(p.get_ref()),
                size,
                direct: lun.direct.as_ref().is_some_and(|d| *d.get_ref()),
                huge_pages: lun.huge_pages.as_ref().is_none_or(|h| *h.get_ref()),
            }
        }
        BackendKind::Rbd => convert_rbd(target, this, l, base)?,
    };
    let block_size = match &lun.block_size {
        Some(b) => int_in(b, FileKey::BlockSize, 0, u32::MAX.into())?,
        None => DEFAULT_BLOCK_SIZE,
    };
    if let Some(s) = &lun.serial {
        let text = s.get_ref();
        if text.is_empty() || text.len() > 64 || !text.bytes().all(|b| b.is_ascii_graphic()) {
            let kind = ErrorKind::BadSerial {
                target: target.clone(),
                lun: this,
            };
            return Err(at(s.span(), kind));
        }
    }
    let rate = lun.sanitize_rate.as_ref().map(|r| r.get_ref().0);
    if let Some(span) = lun.sanitize_rate.as_ref().map(Spanned::span) {
        if lun.sanitize != Some(true) || rate == Some(0) {
            let kind = ErrorKind::SanitizeRate {
                target: target.clone(),
                lun: this,
            };
            return Err(at(span, kind));
        }
    }
    let thin = lun
        .provisioning
        .as_ref()
        .is_some_and(|p| *p.get_ref() == ProvisioningKind::Thin);
    let soft_threshold_percent = match &lun.soft_threshold {
        None => None,
        Some(t) if !thin => {
            let kind = ErrorKind::ThresholdNeedsThin {
                target: target.clone(),
                lun: this,
            };
            return Err(at(t.span(), kind));
        }
        Some(t) => Some(int_in(t, FileKey::SoftThreshold, 1, 100)?),
    };
    let options = LuOptions {
        thin,
        soft_threshold_percent,
        sanitize: (lun.sanitize == Some(true)).then_some(SanitizeOptions {
            overwrite_bytes_per_s: rate,
        }),
    };
    let def = LunDef {
        number,
        backend,
        block_size,
        read_only: lun.read_only.unwrap_or(false),
        removable: lun.removable.unwrap_or(false),
        serial: lun.serial.as_ref().map(|s| s.get_ref().clone()),
        options,
    };
    let spans = LunSpans {
        table: l.span(),
        number: lun.number.as_ref().map(Spanned::span),
        size: lun.size.as_ref().map(Spanned::span),
        block_size: lun.block_size.as_ref().map(Spanned::span),
        path: lun.path.as_ref().map(Spanned::span),
    };
    Ok((def, spans))
}

/// The backend of an RBD LUN: `image = "POOL/IMAGE"` and the optional `ceph_conf`, `ceph_id`
/// and `ceph_keyring` (paths relative to the file's directory); `size` is refused, the image
/// has one.
fn convert_rbd(
    target: &TargetRef,
    this: LunRef,
    l: &Spanned<LunToml>,
    base: &Path,
) -> Result<Backend, Located> {
    let lun = l.get_ref();
    if let Some(s) = &lun.size {
        let kind = ErrorKind::RbdSize {
            target: target.clone(),
            lun: this,
        };
        return Err(at(s.span(), kind));
    }
    let Some(spec) = &lun.image else {
        let kind = ErrorKind::NoImage {
            target: target.clone(),
            lun: this,
        };
        return Err(at(lun.backend.span(), kind));
    };
    let bad = |span, message| {
        let kind = ErrorKind::BadRbd {
            target: target.clone(),
            lun: this,
            message,
        };
        at(span, kind)
    };
    let mut image = RbdImage::parse(spec.get_ref()).map_err(|m| bad(spec.span(), m))?;
    image.conf_file = lun.ceph_conf.as_ref().map(|p| base.join(p.get_ref()));
    image.keyring = lun.ceph_keyring.as_ref().map(|p| base.join(p.get_ref()));
    if let Some(id) = &lun.ceph_id {
        image.client_id = Some(id.get_ref().clone());
        image.check_names().map_err(|m| bad(id.span(), m))?;
    }
    Ok(Backend::Rbd { image })
}

/// Checks that file LUNs can be opened or created: the directory exists, and a file given
/// without `size` already exists.
pub(super) fn check_files(config: &TargetConfig, spans: &Spans) -> Result<(), Located> {
    for (index, (t, ts)) in config.targets.iter().zip(&spans.targets).enumerate() {
        for (lun_index, (l, ls)) in t.luns.iter().zip(&ts.luns).enumerate() {
            let Backend::File { path, size, .. } = &l.backend else {
                continue;
            };
            let span = ls.path.clone().unwrap_or_else(|| ls.table.clone());
            let target = TargetRef {
                index,
                iqn: t.iqn.clone(),
            };
            let lun = LunRef {
                index: lun_index,
                number: l.number,
            };
            let dir = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let kind = if !dir.is_dir() {
                ErrorKind::NoDirectory {
                    target,
                    lun,
                    dir: dir.to_path_buf(),
                }
            } else if path.is_dir() {
                ErrorKind::PathIsDirectory {
                    target,
                    lun,
                    path: path.clone(),
                }
            } else if size.is_none() && !path.exists() {
                ErrorKind::NoFile {
                    target,
                    lun,
                    path: path.clone(),
                }
            } else {
                continue;
            };
            return Err(at(span, kind));
        }
    }
    Ok(())
}
