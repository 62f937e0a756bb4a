//! Bearer tokens of the HTTP endpoints: read from a file (never the command line, where `ps`
//! shows it), compared in constant time.

use std::path::Path;

use anyhow::{bail, Context as _};
use subtle::ConstantTimeEq;

/// A token an HTTP request must present as `Authorization: Bearer <token>`.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token in `path`: its first line, at least 16 characters.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < 16 {
            bail!(
                "{}: a token must be at least 16 characters (e.g. `openssl rand -hex 32`)",
                path.display()
            );
        }
        Ok(Self(token.as_bytes().to_vec()))
    }

    /// Whether an `Authorization` header value carries this token.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(given) = authorization.and_then(|h| h.strip_prefix(b"Bearer ")) else {
            return false;
        };
        given.len() == self.0.len() && bool::from(given.ct_eq(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        let t = Token::read(&path).unwrap();
        assert!(t.admits(Some(b"Bearer 0123456789abcdef0123")));
        assert!(!t.admits(Some(b"Bearer 0123456789abcdef012")));
        assert!(!t.admits(Some(b"0123456789abcdef0123")));
        assert!(!t.admits(None));
        std::fs::write(&path, "short").unwrap();
        assert!(Token::read(&path).is_err());
    }
}
