//! CHAP tables: `[discovery] chap` and `[[target]] chap`.

use sluice_target::config::{ChapCredentials, ChapOwner, SecretRole};
use toml::Spanned;

use super::error::{at, Located};
use super::kind::{ErrorKind, FileKey};
use super::locate::ChapSpans;
use super::schema::ChapToml;

/// Converts a CHAP table of `owner`.
pub(super) fn convert_chap(
    owner: ChapOwner,
    c: &Spanned<ChapToml>,
) -> Result<(ChapCredentials, ChapSpans), Located> {
    let chap = c.get_ref();
    for (role, value) in [
        (SecretRole::Initiator, Some(&chap.user)),
        (SecretRole::Mutual, chap.mutual_user.as_ref()),
    ] {
        if let Some(v) = value.filter(|v| v.get_ref().is_empty()) {
            let owner = owner.clone();
            return Err(at(v.span(), ErrorKind::EmptyChapUser { owner, role }));
        }
    }
    let half = |span, given| at(span, ErrorKind::HalfMutualChap { owner, given });
    let mutual = match (&chap.mutual_user, &chap.mutual_secret) {
        (Some(u), Some(s)) => Some((u.get_ref().clone(), s.get_ref().clone())),
        (None, None) => None,
        (Some(u), None) => return Err(half(u.span(), FileKey::MutualUser)),
        (None, Some(s)) => return Err(half(s.span(), FileKey::MutualSecret)),
    };
    Ok((
        ChapCredentials {
            user: chap.user.get_ref().clone(),
            secret: chap.secret.get_ref().clone(),
            mutual,
        },
        ChapSpans {
            secret: chap.secret.span(),
            mutual_secret: chap.mutual_secret.as_ref().map(Spanned::span),
        },
    ))
}
