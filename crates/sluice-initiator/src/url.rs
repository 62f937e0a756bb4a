//! `iscsi://` URLs in libiscsi's form.
//!
//! ```text
//! iscsi://[<user>[%<password>]@]<host>[:<port>][/<target-iqn>[/<lun>]][?<key>=<value>[&...]]
//! ```
//!
//! `iscsi+udp://` (same grammar) names a target served by `sluice target --udp`: iSCSI over
//! the experimental UDP transport (`sluice_udp`), which only sluice speaks.
//!
//! `iser://` (same grammar, port [`ISER_DEFAULT_PORT`] when absent) names a target served by
//! `sluice target --iser`: iSER (RFC 7145) over sluice's software RDMA provider.
//!
//! As in libiscsi (`iscsi_parse_full_url`), the first `%` in the part before `@` separates
//! the CHAP user from the secret; no percent-decoding is applied anywhere (an IQN never needs
//! it, and libiscsi does not decode either), so a secret may itself contain `%`, `:` or `/`
//! but not `@`. An IPv6 host is written in brackets: `iscsi://[::1]:3260/iqn.x/0`. The
//! target and LUN are optional so that the same parser serves `sluice ls iscsi://host`.
//!
//! Query arguments follow libiscsi's names: `header_digest` / `data_digest`
//! (`none`, `crc32c`, `crc32c-none`, `none-crc32c`), `target_user` and `target_password`
//! (mutual CHAP), `initiator_name`; any other `key=value` is kept in [`IscsiUrl::options`] for
//! [`ConnectOptions::apply`](crate::ConnectOptions::apply), which also accepts every RFC
//! 7143 operational key (e.g. `?MaxRecvDataSegmentLength=65536`).

use std::fmt;

/// The IANA iSCSI port.
pub const DEFAULT_PORT: u16 = 3260;

/// The port `sluice target --iser` listens on unless told otherwise: the software RDMA
/// provider runs over TCP, so it cannot share iSCSI's 3260 as iSER over an RNIC does (there
/// the RDMA-CM port space is separate), and takes the next port.
pub const ISER_DEFAULT_PORT: u16 = 3261;

/// A parsed `iscsi://` URL.
#[derive(Clone, Eq, PartialEq)]
pub struct IscsiUrl {
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// TCP port (3260 when absent).
    pub port: u16,
    /// CHAP user (`CHAP_N`), when given.
    pub user: Option<String>,
    /// CHAP secret, when given.
    pub password: Option<String>,
    /// Target IQN, when given.
    pub target: Option<String>,
    /// LUN number, when given.
    pub lun: Option<u16>,
    /// Query arguments, in order.
    pub options: Vec<(String, String)>,
    /// `iscsi+udp://`: the experimental UDP transport instead of TCP.
    pub udp: bool,
    /// `iser://`: iSER over the software RDMA provider instead of iSCSI over TCP.
    pub iser: bool,
}

/// The scheme of iSER (RFC 7145) over the software RDMA provider.
const ISER_SCHEME: &str = "iser://";

/// The scheme of iSCSI over TCP.
const TCP_SCHEME: &str = "iscsi://";
/// The scheme of iSCSI over sluice's experimental UDP transport.
const UDP_SCHEME: &str = "iscsi+udp://";

/// Whether `input` starts with one of the two schemes.
pub fn is_iscsi_url(input: &str) -> bool {
    input.starts_with(TCP_SCHEME) || input.starts_with(UDP_SCHEME) || input.starts_with(ISER_SCHEME)
}

/// Why a URL was refused.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[error("invalid iSCSI URL {url:?}: {reason} (expected iscsi://[user[%password]@]host[:port]/target-iqn/lun)")]
pub struct UrlError {
    /// The URL as given (secrets masked).
    pub url: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl IscsiUrl {
    /// Parses a URL; see the module documentation for the grammar.
    pub fn parse(input: &str) -> Result<Self, UrlError> {
        let err = |reason| UrlError {
            url: mask(input),
            reason,
        };
        let iser_rest = input.strip_prefix(ISER_SCHEME);
        let iser = iser_rest.is_some();
        let (rest, udp) = match (iser_rest, input.strip_prefix(UDP_SCHEME)) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => (
                input
                    .strip_prefix(TCP_SCHEME)
                    .ok_or_else(|| err("must start with iscsi:// (or iscsi+udp://, iser://)"))?,
                false,
            ),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        // The secret may contain '/', so the userinfo ends at the last '@'.
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (host, mut port) = split_host_port(authority).ok_or_else(|| err("bad host or port"))?;
        let explicit_port = authority.contains("]:")
            || authority
                .rsplit_once(':')
                .is_some_and(|(h, _)| !h.contains(':') && !h.starts_with('['));
        if iser && !explicit_port {
            port = ISER_DEFAULT_PORT;
        }
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => match u.split_once('%') {
                Some((user, pass)) => (Some(user.to_owned()), Some(pass.to_owned())),
                None => (Some(u.to_owned()), None),
            },
        };
        if user.as_deref() == Some("") {
            return Err(err("empty user name"));
        }
        let path = path.trim_end_matches('/');
        let mut parts = path.splitn(2, '/');
        let target = parts.next().filter(|t| !t.is_empty()).map(str::to_owned);
        let lun = match parts.next() {
            None => None,
            Some(l) => Some(
                l.parse::<u16>()
                    .ok()
                    .filter(|&n| n < 16384)
                    .ok_or_else(|| err("LUN must be a number below 16384"))?,
            ),
        };
        let mut options = Vec::new();
        for arg in query.unwrap_or("").split('&').filter(|a| !a.is_empty()) {
            let (k, v) = arg
                .split_once('=')
                .ok_or_else(|| err("query arguments must be key=value"))?;
            options.push((k.to_owned(), v.to_owned()));
        }
        Ok(Self {
            host,
            port,
            user,
            password,
            target,
            lun,
            options,
            udp,
            iser,
        })
    }

    /// Parses either a URL or a bare `HOST[:PORT]` (for discovery and `ls`).
    pub fn parse_portal_or_url(input: &str) -> Result<Self, UrlError> {
        if is_iscsi_url(input) {
            return Self::parse(input);
        }
        let (host, port) = split_host_port(input).ok_or(UrlError {
            url: input.to_owned(),
            reason: "bad host or port",
        })?;
        Ok(Self {
            host,
            port,
            user: None,
            password: None,
            target: None,
            lun: None,
            options: Vec::new(),
            udp: false,
            iser: false,
        })
    }

    /// `host:port`, with brackets around an IPv6 address, for `TcpStream::connect`.
    pub fn portal(&self) -> String {
        portal(&self.host, self.port)
    }

    /// The value of a query argument.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }
}

/// `host:port` with brackets around an IPv6 address.
pub fn portal(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Splits `host[:port]`, `[v6][:port]`; `None` if malformed.
pub fn split_host_port(s: &str) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => DEFAULT_PORT,
            p => p.strip_prefix(':')?.parse().ok()?,
        };
        return (!host.is_empty()).then(|| (host.to_owned(), port));
    }
    let (host, port) = match s.rsplit_once(':') {
        // A bare IPv6 address without brackets: no port.
        Some((h, _)) if h.contains(':') => (s, DEFAULT_PORT),
        Some((h, p)) => (h, p.parse().ok()?),
        None => (s, DEFAULT_PORT),
    };
    (!host.is_empty() && !host.contains('/')).then(|| (host.to_owned(), port))
}

/// The URL with any secret replaced by `***`.
fn mask(url: &str) -> String {
    match (url.find('%'), url.rfind('@')) {
        (Some(p), Some(at)) if p < at => format!("{}%***{}", &url[..p], &url[at..]),
        _ => url.to_owned(),
    }
}

impl fmt::Debug for IscsiUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for IscsiUrl {
    /// Prints the URL with the secret masked.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.iser {
            ISER_SCHEME
        } else if self.udp {
            UDP_SCHEME
        } else {
            TCP_SCHEME
        };
        write!(f, "{scheme}")?;
        if let Some(u) = &self.user {
            write!(f, "{u}")?;
            if self.password.is_some() {
                write!(f, "%***")?;
            }
            write!(f, "@")?;
        }
        write!(f, "{}", self.portal())?;
        if let Some(t) = &self.target {
            write!(f, "/{t}")?;
            if let Some(l) = self.lun {
                write!(f, "/{l}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libiscsi_examples_parse() {
        let u = IscsiUrl::parse("iscsi://127.0.0.1/iqn.2026-11.io.sluice:disk0/1").unwrap();
        assert_eq!(u.host, "127.0.0.1");
        assert_eq!(u.port, 3260);
        assert_eq!(u.target.as_deref(), Some("iqn.2026-11.io.sluice:disk0"));
        assert_eq!(u.lun, Some(1));
        let u = IscsiUrl::parse("iscsi://ronnie%pass%w@rd@host:3261/iqn.a:b/0").unwrap();
        assert_eq!(u.user.as_deref(), Some("ronnie"));
        assert_eq!(u.password.as_deref(), Some("pass%w@rd"));
        assert_eq!(u.portal(), "host:3261");
        assert_eq!(u.to_string(), "iscsi://ronnie%***@host:3261/iqn.a:b/0");
    }

    #[test]
    fn ipv6_query_and_partial_urls() {
        let u = IscsiUrl::parse("iscsi://[::1]:3262/iqn.a:b/3?header_digest=crc32c&target_user=t")
            .unwrap();
        assert_eq!(u.host, "::1");
        assert_eq!(u.portal(), "[::1]:3262");
        assert_eq!(u.option("HEADER_DIGEST"), Some("crc32c"));
        assert_eq!(u.option("target_user"), Some("t"));
        let u = IscsiUrl::parse("iscsi://host").unwrap();
        assert_eq!((u.target, u.lun), (None, None));
        let u = IscsiUrl::parse_portal_or_url("10.0.0.1:3300").unwrap();
        assert_eq!(u.portal(), "10.0.0.1:3300");
    }

    #[test]
    fn iser_urls_default_to_the_iser_port_and_print_their_scheme() {
        let u = IscsiUrl::parse("iser://h/iqn.a:b/2").unwrap();
        assert!(u.iser && !u.udp);
        assert_eq!(u.port, ISER_DEFAULT_PORT);
        assert_eq!(u.to_string(), "iser://h:3261/iqn.a:b/2");
        assert_eq!(
            IscsiUrl::parse("iser://h:4000/iqn.a:b/2").unwrap().port,
            4000
        );
        assert_eq!(
            IscsiUrl::parse("iser://[::1]:3260/iqn.a:b/2").unwrap().port,
            3260
        );
        assert_eq!(
            IscsiUrl::parse("iser://[::1]/iqn.a:b/2").unwrap().port,
            ISER_DEFAULT_PORT
        );
        assert!(!IscsiUrl::parse("iscsi://h/iqn.a:b/2").unwrap().iser);
    }

    #[test]
    fn udp_urls_parse_and_print_their_scheme() {
        let u = IscsiUrl::parse("iscsi+udp://h:3270/iqn.a:b/2").unwrap();
        assert!(u.udp);
        assert_eq!((u.portal().as_str(), u.lun), ("h:3270", Some(2)));
        assert_eq!(u.to_string(), "iscsi+udp://h:3270/iqn.a:b/2");
        assert!(!IscsiUrl::parse("iscsi://h/iqn.a:b/2").unwrap().udp);
        assert!(IscsiUrl::parse_portal_or_url("iscsi+udp://h").unwrap().udp);
        assert!(IscsiUrl::parse("iscsi+tcp://h/iqn/0").is_err());
    }

    #[test]
    fn bad_urls_say_why() {
        for bad in [
            "http://h/iqn/0",
            "iscsi://h:99999/iqn/0",
            "iscsi://h/iqn/x",
            "iscsi://h/iqn/20000",
            "iscsi://@h/iqn/0",
            "iscsi://h/iqn/0?novalue",
        ] {
            let e = IscsiUrl::parse(bad).unwrap_err();
            assert!(e.to_string().contains("invalid iSCSI URL"), "{bad}: {e}");
        }
        let e = IscsiUrl::parse("iscsi://u%secret@h:x/").unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
