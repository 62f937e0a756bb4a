//! Conversion of the parsed file to a [`TargetConfig`]: listen addresses, discovery, keepalive
//! and limits; `[session]` is converted by [`super::session`], targets by [`super::target`].

use std::net::SocketAddr;
use std::path::Path;

use sluice_target::config::{Keepalive, Limits, OperationalOffer, TargetConfig};
use toml::Spanned;

use super::chap::convert_chap;
use super::error::{at, Located};
use super::locate::Spans;
use super::schema::FileToml;
use super::session::convert_session;
use super::target::convert_target;
use super::values::Size;

/// Converts an integer key, refusing values outside `min..=max` at the value's position.
pub(super) fn int_in<T: TryFrom<i64>>(
    v: &Spanned<i64>,
    key: &str,
    min: i64,
    max: i64,
) -> Result<T, Located> {
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
pub(super) fn size_in<T: TryFrom<u64>>(
    v: &Spanned<Size>,
    key: &str,
    max: u64,
) -> Result<T, Located> {
    let n = v.get_ref().0;
    if n <= max {
        if let Ok(t) = T::try_from(n) {
            return Ok(t);
        }
    }
    Err(at(v.span(), format!("{key} = {n} is above {max}")))
}

/// Turns the parsed file into a [`TargetConfig`], recording where each checked value is.
pub(super) fn convert(file: FileToml, base: &Path) -> Result<(TargetConfig, Spans), Located> {
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

    let offer = match &file.session {
        Some(session) => {
            spans.session = Some(session.span());
            convert_session(session.get_ref(), &mut spans.keys, &mut spans.queue_depth)?
        }
        None => OperationalOffer::default(),
    };

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
