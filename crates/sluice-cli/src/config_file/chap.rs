//! CHAP tables: `[discovery] chap` and `[[target]] chap`.

use toml::Spanned;

use sluice_target::config::ChapCredentials;

use super::error::{at, Located};
use super::locate::ChapSpans;
use super::schema::ChapToml;

/// Converts a CHAP table; `owner` names the target or "discovery" in messages.
pub(super) fn convert_chap(
    owner: &str,
    c: &Spanned<ChapToml>,
) -> Result<(ChapCredentials, ChapSpans), Located> {
    let chap = c.get_ref();
    for (key, value) in [
        ("user", Some(&chap.user)),
        ("mutual_user", chap.mutual_user.as_ref()),
    ] {
        if let Some(v) = value {
            if v.get_ref().is_empty() {
                return Err(at(
                    v.span(),
                    format!("{owner}: CHAP {key} must not be empty"),
                ));
            }
        }
    }
    let mutual = match (&chap.mutual_user, &chap.mutual_secret) {
        (Some(u), Some(s)) => Some((u.get_ref().clone(), s.get_ref().clone())),
        (None, None) => None,
        (Some(u), None) => {
            return Err(at(
                u.span(),
                format!("{owner}: mutual_user needs mutual_secret as well"),
            ));
        }
        (None, Some(s)) => {
            return Err(at(
                s.span(),
                format!("{owner}: mutual_secret needs mutual_user as well"),
            ));
        }
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
