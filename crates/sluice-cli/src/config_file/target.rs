//! `[[target]]` tables: name, ACL, CHAP and alias; their LUNs are converted by [`super::lun`].

use std::path::Path;

use sluice_target::config::{Acl, ChapOwner, TargetDef, TargetRef};
use toml::Spanned;

use super::chap::convert_chap;
use super::error::{at, Located};
use super::kind::ErrorKind;
use super::locate::TargetSpans;
use super::lun::convert_lun;
use super::schema::TargetToml;
use super::values::AclToml;

/// Converts the `index`th `[[target]]` and its LUNs.
pub(super) fn convert_target(
    index: usize,
    t: &Spanned<TargetToml>,
    base: &Path,
) -> Result<(TargetDef, TargetSpans), Located> {
    let target = t.get_ref();
    let iqn = target.iqn.get_ref().clone();
    let this = TargetRef {
        index,
        iqn: iqn.clone(),
    };
    let acl = match &target.acl {
        None => return Err(at(target.iqn.span(), ErrorKind::NoAcl(this))),
        Some(a) => match a.get_ref() {
            AclToml::Open => Acl::Open,
            AclToml::Allow(names) => {
                if names.is_empty() {
                    return Err(at(a.span(), ErrorKind::EmptyAcl(this)));
                }
                if let Some(n) = names
                    .iter()
                    .find(|n| !sluice_target::is_iscsi_name(n.get_ref()))
                {
                    let name = n.get_ref().clone();
                    let kind = ErrorKind::BadInitiatorName { target: this, name };
                    return Err(at(n.span(), kind));
                }
                Acl::Allow(names.iter().map(|n| n.get_ref().clone()).collect())
            }
        },
    };
    let (chap, chap_spans) = match &target.chap {
        Some(c) => {
            let (creds, s) = convert_chap(ChapOwner::Target(this.clone()), c)?;
            (Some(creds), Some(s))
        }
        None => (None, None),
    };
    if let Some(alias) = &target.alias {
        if alias.get_ref().len() > 255 || alias.get_ref().chars().any(char::is_control) {
            return Err(at(alias.span(), ErrorKind::BadAlias(this)));
        }
    }
    let mut luns = Vec::new();
    let mut lun_spans = Vec::new();
    // A LUN without `number` follows the previous one.
    let mut next_number: i64 = 0;
    for (index, l) in target.luns.iter().enumerate() {
        let (lun, spans) = convert_lun(&this, index, next_number, l, base)?;
        next_number = i64::from(lun.number) + 1;
        luns.push(lun);
        lun_spans.push(spans);
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
