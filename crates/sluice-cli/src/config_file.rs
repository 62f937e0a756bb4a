//! The TOML configuration file: schema, conversion to [`TargetConfig`], and errors that name the
//! file, line and column of the offending key.
//!
//! Every table denies unknown keys, so a typo is an error rather than a silently ignored setting.
//! Values that can be wrong after parsing keep their position with [`toml::Spanned`], so that a
//! semantic error found by [`TargetConfig::validate`] still points at a line. The schema is
//! documented key by key in `docs/configuration.md`.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use sluice_target::config::{
    Acl, Backend, ChapCredentials, ConfigError, DigestPolicy, Keepalive, Limits, LunDef,
    OperationalOffer, TargetConfig, TargetDef,
};
use toml::Spanned;

use crate::cli::parse_listen;
use crate::size::{parse_duration, parse_size};

/// Default block size: 512 bytes, what ESXi requires for external LUNs and Windows prefers.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

// ---------------------------------------------------------------------------------------------
// Errors

/// A configuration file problem, located in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFileError {
    /// The file, as the user named it.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong, in one sentence.
    pub message: String,
    /// The text of the offending line.
    pub source_line: String,
    /// How many characters of that line to underline.
    pub width: usize,
}

impl ConfigFileError {
    /// Locates `span` of `src` (1-based line and column) and keeps the line for display.
    fn new(path: &Path, src: &str, span: Range<usize>, message: String) -> Self {
        let start = span.start.min(src.len());
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let column = src[line_start..start].chars().count() + 1;
        let source_line = src[line_start..line_end].trim_end_matches('\r').to_string();
        let end = span.end.clamp(start, line_end);
        let width = src[start..end].chars().count().max(1);
        Self {
            path: path.to_path_buf(),
            line,
            column,
            message,
            source_line,
            width,
        }
    }
}

impl fmt::Display for ConfigFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )?;
        if !self.source_line.trim().is_empty() {
            let gutter = self.line.to_string().len();
            write!(
                f,
                "\n {:gutter$} |\n {} | {}\n {:gutter$} | {}{}",
                "",
                self.line,
                self.source_line,
                "",
                " ".repeat(self.column - 1),
                "^".repeat(self.width),
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigFileError {}

/// An error found after parsing, with the byte range it concerns.
struct Located {
    /// Byte range in the source.
    span: Range<usize>,
    /// What is wrong.
    message: String,
}

/// Shorthand for a [`Located`] error.
fn at(span: Range<usize>, message: impl Into<String>) -> Located {
    Located {
        span,
        message: message.into(),
    }
}

/// Rewords serde's messages in TOML's vocabulary ("key" rather than "field").
fn toml_message(message: &str) -> String {
    message
        .trim_end()
        .replace('\n', ": ")
        .replace("unknown field", "unknown key")
        .replace("missing field", "missing key")
        .replace("unknown variant", "unknown value")
}

// ---------------------------------------------------------------------------------------------
// Value types with their own syntax

/// A byte count: an integer, or a string such as `"256K"` or `"1.5T"` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a size: an integer number of bytes or a string such as \"256K\" or \"1G\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration: an integer number of seconds, or a string such as `"30s"`, `"500ms"`, `"1m30s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration: seconds as an integer, or a string such as \"30s\" or \"500ms\"",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Dur, E> {
                u64::try_from(v)
                    .map(|s| Dur(Duration::from_secs(s)))
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Dur, E> {
                Ok(Dur(Duration::from_secs(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A listen address: `"ADDR:PORT"`, `"[V6]:PORT"` or a bare address (port 3260).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Listen(SocketAddr);

impl<'de> Deserialize<'de> for Listen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_listen(&s).map(Listen).map_err(de::Error::custom)
    }
}

/// `acl = "open"` or `acl = ["iqn...", ...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AclToml {
    /// `"open"`: any initiator.
    Open,
    /// Only these initiator names.
    Allow(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for AclToml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AclToml;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"open\" or a list of initiator names")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AclToml, E> {
                if v == "open" {
                    Ok(AclToml::Open)
                } else {
                    Err(E::custom(format!(
                        "acl = {v:?}: use acl = \"open\" or a list such as acl = [{v:?}]"
                    )))
                }
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AclToml, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<Spanned<String>>()? {
                    names.push(name);
                }
                Ok(AclToml::Allow(names))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
/// `header_digest` / `data_digest` values.
enum DigestToml {
    /// `"allow"`
    Allow,
    /// `"require"`
    Require,
    /// `"forbid"`
    Forbid,
}

impl From<DigestToml> for DigestPolicy {
    fn from(d: DigestToml) -> Self {
        match d {
            DigestToml::Allow => DigestPolicy::Allow,
            DigestToml::Require => DigestPolicy::Require,
            DigestToml::Forbid => DigestPolicy::Forbid,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
/// `backend` values.
enum BackendKind {
    /// `"memory"`
    Memory,
    /// `"file"`
    File,
    /// `"null"`
    Null,
}

// ---------------------------------------------------------------------------------------------
// The schema

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// The whole file (keys documented in docs/configuration.md).
struct FileToml {
    listen: Option<Spanned<Vec<Spanned<Listen>>>>,
    discovery: Option<DiscoveryToml>,
    session: Option<Spanned<SessionToml>>,
    keepalive: Option<KeepaliveToml>,
    limits: Option<LimitsToml>,
    #[serde(default, rename = "target")]
    targets: Vec<Spanned<TargetToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[discovery]`.
struct DiscoveryToml {
    chap: Option<Spanned<ChapToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// A CHAP table, inline or `[target.chap]`.
struct ChapToml {
    user: Spanned<String>,
    secret: Spanned<String>,
    mutual_user: Option<Spanned<String>>,
    mutual_secret: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[session]`: operational keys (keys documented in docs/configuration.md).
struct SessionToml {
    max_recv_data_segment_length: Option<Spanned<Size>>,
    max_burst_length: Option<Spanned<Size>>,
    first_burst_length: Option<Spanned<Size>>,
    immediate_data: Option<bool>,
    initial_r2t: Option<bool>,
    max_outstanding_r2t: Option<Spanned<i64>>,
    data_pdu_in_order: Option<bool>,
    data_sequence_in_order: Option<bool>,
    header_digest: Option<DigestToml>,
    data_digest: Option<DigestToml>,
    default_time2wait: Option<Spanned<Dur>>,
    default_time2retain: Option<Spanned<Dur>>,
    error_recovery_level: Option<Spanned<i64>>,
    queue_depth: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[keepalive]`.
struct KeepaliveToml {
    enabled: Option<bool>,
    interval: Option<Spanned<Dur>>,
    timeout: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// `[limits]`.
struct LimitsToml {
    max_sessions: Option<Spanned<i64>>,
    max_connections: Option<Spanned<i64>>,
    max_outstanding_bytes_per_connection: Option<Spanned<Size>>,
    login_timeout: Option<Spanned<Dur>>,
    shutdown_grace: Option<Spanned<Dur>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[target]]`.
struct TargetToml {
    iqn: Spanned<String>,
    alias: Option<Spanned<String>>,
    acl: Option<Spanned<AclToml>>,
    chap: Option<Spanned<ChapToml>>,
    #[serde(default, rename = "lun")]
    luns: Vec<Spanned<LunToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
/// One `[[target.lun]]`.
struct LunToml {
    number: Option<Spanned<i64>>,
    backend: Spanned<BackendKind>,
    size: Option<Spanned<Size>>,
    path: Option<Spanned<PathBuf>>,
    direct: Option<Spanned<bool>>,
    huge_pages: Option<Spanned<bool>>,
    block_size: Option<Spanned<i64>>,
    read_only: Option<bool>,
    removable: Option<bool>,
    serial: Option<Spanned<String>>,
}

// ---------------------------------------------------------------------------------------------
// Where things are, for errors found by TargetConfig::validate

#[derive(Debug, Default)]
/// Positions of the values that [`TargetConfig::validate`] may complain about.
struct Spans {
    listen: Option<Range<usize>>,
    session: Option<Range<usize>>,
    /// RFC key name (as ConfigError::KeyRange names it) to the span of its value.
    keys: Vec<(&'static str, Range<usize>)>,
    discovery_chap: Option<ChapSpans>,
    /// Parallel to `TargetConfig::targets`.
    targets: Vec<TargetSpans>,
}

#[derive(Debug, Clone)]
/// Positions in a CHAP table.
struct ChapSpans {
    secret: Range<usize>,
    mutual_secret: Option<Range<usize>>,
}

#[derive(Debug)]
struct TargetSpans {
    iqn: Range<usize>,
    chap: Option<ChapSpans>,
    /// Parallel to `TargetDef::luns`.
    luns: Vec<LunSpans>,
}

#[derive(Debug)]
struct LunSpans {
    table: Range<usize>,
    number: Option<Range<usize>>,
    size: Option<Range<usize>>,
    block_size: Option<Range<usize>>,
    path: Option<Range<usize>>,
}

impl LunSpans {
    fn number_or_table(&self) -> Range<usize> {
        self.number.clone().unwrap_or_else(|| self.table.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// Loading

/// Reads, parses and validates a configuration file.
///
/// Relative `path`s of file LUNs are taken relative to the directory of the configuration file.
/// Besides [`TargetConfig::validate`], this checks that the directory of every file LUN exists and
/// that a file LUN without `size` names an existing file.
pub fn load(path: &Path) -> anyhow::Result<TargetConfig> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    Ok(parse_str(&src, path)?)
}

/// Parses and validates configuration text; `path` names it in errors and anchors relative paths.
pub fn parse_str(src: &str, path: &Path) -> Result<TargetConfig, ConfigFileError> {
    let located =
        |span: Range<usize>, message: String| ConfigFileError::new(path, src, span, message);
    let file: FileToml = toml::from_str(src)
        .map_err(|e| located(e.span().unwrap_or(0..0), toml_message(e.message())))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (config, spans) = convert(file, base).map_err(|l| located(l.span, l.message))?;
    if let Err(e) = config.validate() {
        let l = locate_validation_error(&config, &spans, &e);
        return Err(located(l.span, l.message));
    }
    check_files(&config, &spans).map_err(|l| located(l.span, l.message))?;
    Ok(config)
}

/// Converts an integer key, refusing values outside `min..=max` at the value's position.
fn int_in<T: TryFrom<i64>>(v: &Spanned<i64>, key: &str, min: i64, max: i64) -> Result<T, Located> {
    let n = *v.get_ref();
    if (min..=max).contains(&n) {
        if let Ok(t) = T::try_from(n) {
            return Ok(t);
        }
    }
    Err(at(
        v.span(),
        format!("{key} = {n} is outside {min}..={max}"),
    ))
}

/// Converts a size key, refusing values above `max` at the value's position.
fn size_in<T: TryFrom<u64>>(v: &Spanned<Size>, key: &str, max: u64) -> Result<T, Located> {
    let n = v.get_ref().0;
    if n <= max {
        if let Ok(t) = T::try_from(n) {
            return Ok(t);
        }
    }
    Err(at(v.span(), format!("{key} = {n} is above {max}")))
}

/// Converts a duration key that the RFC counts in whole seconds.
fn whole_seconds(v: &Spanned<Dur>, key: &str) -> Result<u16, Located> {
    let d = v.get_ref().0;
    if d.subsec_nanos() != 0 {
        return Err(at(
            v.span(),
            format!("{key} is a whole number of seconds (RFC 7143 sections 13.15 and 13.16)"),
        ));
    }
    u16::try_from(d.as_secs()).map_err(|_| {
        at(
            v.span(),
            format!("{key} = {}s is outside 0..=3600", d.as_secs()),
        )
    })
}

/// Converts a CHAP table; `owner` names the target or "discovery" in messages.
fn convert_chap(
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

/// Turns the parsed file into a [`TargetConfig`], recording where each checked value is.
fn convert(file: FileToml, base: &Path) -> Result<(TargetConfig, Spans), Located> {
    let mut spans = Spans::default();

    let portals = match &file.listen {
        Some(list) => {
            spans.listen = Some(list.span());
            if list.get_ref().is_empty() {
                return Err(at(
                    list.span(),
                    "listen = [] leaves nothing to connect to: list at least one address, e.g. \"127.0.0.1:3260\"",
                ));
            }
            let mut seen = Vec::new();
            for a in list.get_ref() {
                let addr = a.get_ref().0;
                if seen.contains(&addr) {
                    return Err(at(a.span(), format!("{addr} is listed twice")));
                }
                seen.push(addr);
            }
            seen
        }
        None => vec![SocketAddr::from(([127, 0, 0, 1], crate::cli::DEFAULT_PORT))],
    };

    let discovery_auth = match file.discovery.as_ref().and_then(|d| d.chap.as_ref()) {
        Some(c) => {
            let (creds, s) = convert_chap("discovery", c)?;
            spans.discovery_chap = Some(s);
            Some(creds)
        }
        None => None,
    };

    let mut offer = OperationalOffer::default();
    if let Some(session) = &file.session {
        spans.session = Some(session.span());
        let s = session.get_ref();
        const MAX24: u64 = 16_777_215;
        let mut key = |name: &'static str, span: Range<usize>| spans.keys.push((name, span));
        if let Some(v) = &s.max_recv_data_segment_length {
            offer.max_recv_data_segment_length = size_in(v, "max_recv_data_segment_length", MAX24)?;
            key("MaxRecvDataSegmentLength", v.span());
        }
        if let Some(v) = &s.max_burst_length {
            offer.max_burst_length = size_in(v, "max_burst_length", MAX24)?;
            key("MaxBurstLength", v.span());
        }
        if let Some(v) = &s.first_burst_length {
            offer.first_burst_length = size_in(v, "first_burst_length", MAX24)?;
            key("FirstBurstLength", v.span());
        }
        if let Some(v) = &s.max_outstanding_r2t {
            offer.max_outstanding_r2t = int_in(v, "max_outstanding_r2t", 1, 65_535)?;
            key("MaxOutstandingR2T", v.span());
        }
        if let Some(v) = &s.default_time2wait {
            offer.default_time2wait = whole_seconds(v, "default_time2wait")?;
            key("DefaultTime2Wait", v.span());
        }
        if let Some(v) = &s.default_time2retain {
            offer.default_time2retain = whole_seconds(v, "default_time2retain")?;
            key("DefaultTime2Retain", v.span());
        }
        if let Some(v) = &s.error_recovery_level {
            offer.error_recovery_level = int_in(v, "error_recovery_level", 0, 2)?;
            key("ErrorRecoveryLevel", v.span());
        }
        if let Some(v) = &s.queue_depth {
            offer.queue_depth = int_in(v, "queue_depth", 1, 65_536)?;
            key("queue_depth", v.span());
        }
        offer.immediate_data = s.immediate_data.unwrap_or(offer.immediate_data);
        offer.initial_r2t = s.initial_r2t.unwrap_or(offer.initial_r2t);
        offer.data_pdu_in_order = s.data_pdu_in_order.unwrap_or(offer.data_pdu_in_order);
        offer.data_sequence_in_order = s
            .data_sequence_in_order
            .unwrap_or(offer.data_sequence_in_order);
        if let Some(d) = s.header_digest {
            offer.header_digest = d.into();
        }
        if let Some(d) = s.data_digest {
            offer.data_digest = d.into();
        }
    }

    let keepalive = match &file.keepalive {
        Some(k) if k.enabled != Some(false) => {
            let mut ka = Keepalive::default();
            if let Some(v) = &k.interval {
                if v.get_ref().0.is_zero() {
                    return Err(at(v.span(), "keepalive interval must be above zero (use enabled = false to turn pings off)"));
                }
                ka.interval = v.get_ref().0;
            }
            if let Some(v) = &k.timeout {
                if v.get_ref().0.is_zero() {
                    return Err(at(v.span(), "keepalive timeout must be above zero"));
                }
                ka.timeout = v.get_ref().0;
            }
            Some(ka)
        }
        Some(_) => None,
        // Pings are on unless switched off: a dead initiator must not hold a session forever.
        None => Some(Keepalive::default()),
    };

    let mut limits = Limits::default();
    if let Some(l) = &file.limits {
        if let Some(v) = &l.max_sessions {
            limits.max_sessions = int_in(v, "max_sessions", 1, i64::MAX)?;
        }
        if let Some(v) = &l.max_connections {
            limits.max_connections = int_in(v, "max_connections", 1, i64::MAX)?;
        }
        if let Some(v) = &l.max_outstanding_bytes_per_connection {
            limits.max_outstanding_bytes_per_connection =
                size_in(v, "max_outstanding_bytes_per_connection", u64::MAX)?;
            if limits.max_outstanding_bytes_per_connection == 0 {
                return Err(at(
                    v.span(),
                    "max_outstanding_bytes_per_connection must be above zero",
                ));
            }
        }
        for (v, slot, key) in [
            (&l.login_timeout, &mut limits.login_timeout, "login_timeout"),
            (
                &l.shutdown_grace,
                &mut limits.shutdown_grace,
                "shutdown_grace",
            ),
        ] {
            if let Some(v) = v {
                if key == "login_timeout" && v.get_ref().0.is_zero() {
                    return Err(at(v.span(), "login_timeout must be above zero"));
                }
                *slot = v.get_ref().0;
            }
        }
    }

    let mut targets = Vec::new();
    for t in &file.targets {
        let (def, ts) = convert_target(t, base)?;
        targets.push(def);
        spans.targets.push(ts);
    }

    let config = TargetConfig {
        portals,
        targets,
        discovery_auth,
        offer,
        limits,
        keepalive,
    };
    Ok((config, spans))
}

/// Converts one `[[target]]` and its LUNs.
fn convert_target(
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
            Some(n) => int_in(n, "number", 0, 16_383)?,
            None => int_in(
                &Spanned::new(l.span(), next_number),
                "number (counted from the previous LUN)",
                0,
                16_383,
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

/// Finds where in the file a [`ConfigError`] comes from, and phrases it for a file's reader.
fn locate_validation_error(config: &TargetConfig, spans: &Spans, e: &ConfigError) -> Located {
    let start = 0..0;
    let target_idx = |iqn: &str| config.targets.iter().position(|t| t.iqn == iqn);
    let target = |iqn: &str| target_idx(iqn).and_then(|i| spans.targets.get(i));
    let lun = |iqn: &str, n: u16, last: bool| {
        let i = target_idx(iqn)?;
        let mut matching = config.targets[i]
            .luns
            .iter()
            .zip(&spans.targets[i].luns)
            .filter(|(l, _)| l.number == n)
            .map(|(_, s)| s);
        if last {
            matching.next_back()
        } else {
            matching.next()
        }
    };
    let chap = |owner: &str| -> Option<ChapSpans> {
        if owner.starts_with("discovery") {
            spans.discovery_chap.clone()
        } else {
            let iqn = owner.strip_suffix(" (mutual)").unwrap_or(owner);
            target(iqn).and_then(|t| t.chap.clone())
        }
    };
    let message = e.to_string();
    let span = match e {
        ConfigError::NoTargets => {
            return at(start, "no targets configured: add a [[target]] table with an iqn, an acl and a [[target.lun]]");
        }
        ConfigError::NoPortals => spans.listen.clone().unwrap_or(start),
        ConfigError::NoLuns(iqn) => {
            return at(
                target(iqn).map_or(start, |t| t.iqn.clone()),
                format!("{message}: add a [[target.lun]] table after this target"),
            );
        }
        ConfigError::DuplicateTarget(iqn) => {
            let lower = iqn.to_ascii_lowercase();
            let second = config
                .targets
                .iter()
                .enumerate()
                .filter(|(_, t)| t.iqn.to_ascii_lowercase() == lower)
                .nth(1)
                .map(|(i, _)| i);
            second
                .and_then(|i| spans.targets.get(i))
                .map_or(start, |t| t.iqn.clone())
        }
        ConfigError::BadName(iqn) => {
            return at(
                target(iqn).map_or(start, |t| t.iqn.clone()),
                format!("{message}; for example iqn.2026-11.com.example:disk1"),
            );
        }
        ConfigError::DuplicateLun(iqn, n) => {
            lun(iqn, *n, true).map_or(start, LunSpans::number_or_table)
        }
        ConfigError::LunNumber(iqn, n) => {
            lun(iqn, *n, false).map_or(start, LunSpans::number_or_table)
        }
        ConfigError::BlockSize(iqn, n, _) => lun(iqn, *n, false)
            .and_then(|l| l.block_size.clone())
            .unwrap_or(start),
        ConfigError::Size(iqn, n, _, _) => lun(iqn, *n, false)
            .map(|l| {
                l.size
                    .clone()
                    .or(l.block_size.clone())
                    .unwrap_or(l.table.clone())
            })
            .unwrap_or(start),
        ConfigError::KeyRange { key, .. } => spans
            .keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, s)| s.clone())
            .or(spans.session.clone())
            .unwrap_or(start),
        ConfigError::FirstBurst(..) => spans
            .keys
            .iter()
            .find(|(k, _)| *k == "FirstBurstLength")
            .or(spans.keys.iter().find(|(k, _)| *k == "MaxBurstLength"))
            .map(|(_, s)| s.clone())
            .or(spans.session.clone())
            .unwrap_or(start),
        ConfigError::ChapSecret(owner) => {
            let c = chap(owner);
            if owner.ends_with(" (mutual)") {
                c.and_then(|c| c.mutual_secret).unwrap_or(start)
            } else {
                c.map_or(start, |c| c.secret)
            }
        }
        ConfigError::ChapSameSecret(owner) => {
            chap(owner).and_then(|c| c.mutual_secret).unwrap_or(start)
        }
        #[allow(unreachable_patterns)]
        _ => start,
    };
    at(span, message)
}

/// Checks that file LUNs can be opened or created: the directory exists, and a file given
/// without `size` already exists.
fn check_files(config: &TargetConfig, spans: &Spans) -> Result<(), Located> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<TargetConfig, ConfigFileError> {
        parse_str(src, Path::new("test.toml"))
    }

    /// Asserts that `src` fails at `line` with a message containing `needle`.
    #[track_caller]
    fn fails_at(src: &str, line: usize, needle: &str) -> ConfigFileError {
        let e = parse(src).expect_err("expected an error");
        assert_eq!(e.line, line, "wrong line for: {e}");
        assert!(e.message.contains(needle), "{needle:?} not in: {e}");
        assert!(
            e.to_string().starts_with(&format!("test.toml:{line}:")),
            "{e}"
        );
        e
    }

    const MINIMAL: &str = r#"
[[target]]
iqn = "iqn.2026-11.io.sluice:a"
acl = "open"

[[target.lun]]
backend = "memory"
size = "1G"
"#;

    #[test]
    fn example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples/target.toml");
        let config = load(&path).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(config.targets.len(), 2);
        assert!(config.discovery_auth.is_some());
        let kinds: Vec<_> = config
            .targets
            .iter()
            .flat_map(|t| &t.luns)
            .map(|l| match l.backend {
                Backend::Memory { .. } => "memory",
                Backend::File { .. } => "file",
                Backend::Null { .. } => "null",
            })
            .collect();
        for k in ["memory", "file", "null"] {
            assert!(kinds.contains(&k), "example lacks a {k} LUN");
        }
        assert!(config
            .targets
            .iter()
            .any(|t| t.chap.as_ref().is_some_and(|c| c.mutual.is_some())));
        assert!(config
            .targets
            .iter()
            .any(|t| t.chap.as_ref().is_some_and(|c| c.mutual.is_none())));
        assert!(config
            .targets
            .iter()
            .any(|t| matches!(t.acl, Acl::Allow(_))));
        assert!(config.keepalive.is_some());
    }

    #[test]
    fn minimal_file_and_defaults() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.portals, vec!["127.0.0.1:3260".parse().unwrap()]);
        assert_eq!(c.offer, OperationalOffer::default());
        assert_eq!(c.limits, Limits::default());
        assert_eq!(
            c.keepalive,
            Some(Keepalive::default()),
            "pings are on by default"
        );
        let lun = &c.targets[0].luns[0];
        assert_eq!((lun.number, lun.block_size, lun.read_only), (0, 512, false));
        assert!(!lun.removable);
        assert_eq!(lun.backend, Backend::Memory { size: 1 << 30 });
        assert_eq!(c.targets[0].acl, Acl::Open);
    }

    #[test]
    fn removable_key() {
        let c = parse(&format!("{MINIMAL}removable = true\n")).unwrap();
        assert!(c.targets[0].luns[0].removable);
    }

    #[test]
    fn lun_numbers_follow_the_previous_one() {
        let src = format!(
            "{MINIMAL}\n[[target.lun]]\nnumber = 5\nbackend = \"null\"\nsize = 4096\n\n[[target.lun]]\nbackend = \"null\"\nsize = \"1T\"\n"
        );
        let c = parse(&src).unwrap();
        let numbers: Vec<u16> = c.targets[0].luns.iter().map(|l| l.number).collect();
        assert_eq!(numbers, [0, 5, 6]);
    }

    #[test]
    fn sessions_keys_accept_sizes_and_durations() {
        let src = format!(
            "listen = [\"[::1]:3261\", \"0.0.0.0\"]\n[session]\nmax_recv_data_segment_length = \"64K\"\nmax_burst_length = 1048576\nfirst_burst_length = \"64KiB\"\ndefault_time2wait = \"3s\"\ndefault_time2retain = 0\nheader_digest = \"require\"\nqueue_depth = 32\n[keepalive]\ninterval = \"20s\"\ntimeout = \"1m\"\n[limits]\nlogin_timeout = \"5s\"\nmax_outstanding_bytes_per_connection = \"16M\"\n{MINIMAL}"
        );
        let c = parse(&src).unwrap();
        assert_eq!(c.portals[0].to_string(), "[::1]:3261");
        assert_eq!(c.portals[1].to_string(), "0.0.0.0:3260");
        assert_eq!(c.offer.max_recv_data_segment_length, 65_536);
        assert_eq!(c.offer.first_burst_length, 65_536);
        assert_eq!(c.offer.default_time2wait, 3);
        assert_eq!(c.offer.header_digest, DigestPolicy::Require);
        assert_eq!(c.offer.data_digest, DigestPolicy::Allow);
        assert_eq!(c.offer.queue_depth, 32);
        assert_eq!(
            c.keepalive,
            Some(Keepalive {
                interval: Duration::from_secs(20),
                timeout: Duration::from_secs(60)
            })
        );
        assert_eq!(c.limits.login_timeout, Duration::from_secs(5));
        assert_eq!(c.limits.max_outstanding_bytes_per_connection, 16 << 20);
    }

    #[test]
    fn syntax_error_names_the_line() {
        fails_at(
            "listen = [\"127.0.0.1:3260\"\n\n[[target]\n",
            3,
            "invalid array: expected `]`",
        );
        fails_at("\n\nlisten = [\"127.0.0.1:3260\",]\nfoo = = 1\n", 4, "");
    }

    #[test]
    fn unknown_keys_are_named_with_the_alternatives() {
        let e = fails_at(
            "\n[session]\nmax_burst_lenght = \"1M\"\n",
            3,
            "unknown key `max_burst_lenght`",
        );
        assert!(e.message.contains("expected one of"), "{e}");
        assert!(e.message.contains("`max_burst_length`"), "{e}");
        fails_at(
            &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nblocksize = 4096"),
            9,
            "unknown key `blocksize`",
        );
        fails_at(&format!("{MINIMAL}\n[oops]\n"), 10, "unknown key `oops`");
    }

    #[test]
    fn bad_values_name_their_line() {
        fails_at(
            &MINIMAL.replace("\"1G\"", "\"1 gigabyte\""),
            8,
            "invalid size",
        );
        fails_at(
            &MINIMAL.replace("\"memory\"", "\"ram\""),
            7,
            "unknown value `ram`",
        );
        fails_at(
            "listen = [\"localhost:3260\"]\n",
            1,
            "invalid listen address",
        );
        fails_at("[keepalive]\ninterval = \"soon\"\n", 2, "invalid duration");
        fails_at(
            "[session]\nheader_digest = \"crc32c\"\n",
            2,
            "unknown value `crc32c`",
        );
        fails_at(
            "[session]\nerror_recovery_level = 3\n",
            2,
            "error_recovery_level = 3 is outside 0..=2",
        );
        fails_at(
            "[session]\nmax_recv_data_segment_length = \"32M\"\n",
            2,
            "above 16777215",
        );
    }

    #[test]
    fn missing_acl_explains_the_choice() {
        let e = fails_at(&MINIMAL.replace("acl = \"open\"\n", ""), 3, "no `acl` key");
        assert!(e.message.contains("acl = \"open\""), "{e}");
        fails_at(
            &MINIMAL.replace("acl = \"open\"", "acl = \"all\""),
            4,
            "use acl = \"open\" or a list",
        );
        fails_at(
            &MINIMAL.replace("acl = \"open\"", "acl = []"),
            4,
            "admits nobody",
        );
        fails_at(
            &MINIMAL.replace(
                "acl = \"open\"",
                "acl = [\n  \"iqn.1994-05.com.redhat:ok\",\n  \"client2\",\n]",
            ),
            6,
            "\"client2\" is not a valid initiator name",
        );
    }

    #[test]
    fn validation_errors_name_their_line() {
        // Bad target name (TargetConfig::validate).
        fails_at(
            &MINIMAL.replace("iqn.2026-11.io.sluice:a", "disk0"),
            3,
            "not a valid iSCSI name",
        );
        // Size not a multiple of the block size.
        fails_at(
            &MINIMAL.replace("\"1G\"", "1000"),
            8,
            "not a positive multiple",
        );
        // Bad block size.
        fails_at(
            &format!("{MINIMAL}block_size = 1024\n"),
            9,
            "block size 1024",
        );
        // Duplicate LUN: the second one is named.
        fails_at(
            &format!("{MINIMAL}\n[[target.lun]]\nnumber = 0\nbackend = \"null\"\nsize = \"1G\"\n"),
            11,
            "LUN 0 is defined twice",
        );
        // LUN number out of range.
        fails_at(
            &format!(
                "{MINIMAL}\n[[target.lun]]\nnumber = 20000\nbackend = \"null\"\nsize = \"1G\"\n"
            ),
            11,
            "outside 0..=16383",
        );
        // Duplicate target: the second one is named.
        fails_at(&format!("{MINIMAL}{MINIMAL}"), 11, "defined twice");
        // Target without LUNs.
        fails_at(
            "[[target]]\niqn = \"iqn.2026-11.io.sluice:a\"\nacl = \"open\"\n",
            2,
            "no LUNs",
        );
        // No targets at all.
        fails_at(
            "listen = [\"127.0.0.1:3260\"]\n",
            1,
            "no targets configured",
        );
        // FirstBurstLength > MaxBurstLength.
        fails_at(
            &format!(
                "[session]\nmax_burst_length = \"64K\"\nfirst_burst_length = \"128K\"\n{MINIMAL}"
            ),
            3,
            "FirstBurstLength",
        );
        // A key out of the RFC range.
        fails_at(
            &format!("[session]\n\nmax_recv_data_segment_length = 100\n{MINIMAL}"),
            3,
            "MaxRecvDataSegmentLength = 100",
        );
    }

    #[test]
    fn chap_errors_name_their_line() {
        let chap = |extra: &str| {
            MINIMAL.replace(
                "acl = \"open\"",
                &format!("acl = \"open\"\nchap = {{ user = \"u\", secret = \"short\"{extra} }}"),
            )
        };
        fails_at(&chap(""), 5, "12 to 255 characters");
        let good = "\"0123456789abc\"";
        let src = chap("").replace("\"short\"", good);
        assert!(parse(&src).is_ok());
        fails_at(
            &chap(&format!(", mutual_user = \"t\", mutual_secret = {good}"))
                .replace("\"short\"", good),
            5,
            "must differ",
        );
        fails_at(
            &chap(", mutual_user = \"t\"").replace("\"short\"", good),
            5,
            "needs mutual_secret",
        );
        fails_at(
            &format!("[discovery]\nchap = {{ user = \"d\", secret = \"tiny\" }}\n{MINIMAL}"),
            2,
            "CHAP secret for discovery",
        );
        fails_at(
            "[discovery]\nchap = { user = \"d\", secret = \"0123456789abc\", pass = 1 }\n",
            2,
            "unknown key `pass`",
        );
    }

    #[test]
    fn backend_keys_are_checked() {
        fails_at(
            &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\npath = \"/tmp/x\""),
            9,
            "only applies to backend = \"file\"",
        );
        fails_at(
            &MINIMAL.replace("size = \"1G\"", "size = \"1G\"\nhuge_pages = false"),
            9,
            "`huge_pages` only applies to backend = \"file\"",
        );
        fails_at(&MINIMAL.replace("size = \"1G\"\n", ""), 7, "needs a `size`");
        fails_at(
            &MINIMAL.replace("\"memory\"", "\"file\""),
            7,
            "needs a `path`",
        );
        fails_at(
            &MINIMAL.replace(
                "backend = \"memory\"",
                "backend = \"file\"\npath = \"/nonexistent-sluice-dir/disk.img\"",
            ),
            8,
            "does not exist",
        );
        fails_at(
            &MINIMAL.replace(
                "backend = \"memory\"\nsize = \"1G\"",
                "backend = \"file\"\npath = \"no-such-file.img\"",
            ),
            8,
            "add `size` to create it",
        );
    }

    #[test]
    fn relative_paths_follow_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let src = MINIMAL.replace(
            "backend = \"memory\"",
            "backend = \"file\"\npath = \"disk.img\"\ndirect = true\nhuge_pages = false",
        );
        let c = parse_str(&src, &dir.path().join("t.toml")).unwrap();
        assert_eq!(
            c.targets[0].luns[0].backend,
            Backend::File {
                path: dir.path().join("disk.img"),
                size: Some(1 << 30),
                direct: true,
                huge_pages: false
            }
        );
    }

    #[test]
    fn error_display_underlines_the_value() {
        let e = fails_at(&MINIMAL.replace("\"1G\"", "\"1X\""), 8, "invalid size");
        let text = e.to_string();
        assert!(text.contains("8 | size = \"1X\""), "{text}");
        assert!(text.contains("|        ^^^^"), "{text}");
    }
}
