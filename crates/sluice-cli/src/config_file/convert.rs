//! Conversion of the parsed file to a [`TargetConfig`]: listen addresses, discovery, the
//! `[session]` keys, keepalive and limits; targets are converted by [`super::target`].

use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;

use sluice_proto::text::KeyId;
use sluice_target::config::{Keepalive, Limits, OperationalOffer, TargetConfig};
use toml::Spanned;

use super::chap::convert_chap;
use super::error::{at, Located};
use super::locate::Spans;
use super::schema::FileToml;
use super::target::convert_target;
use super::values::{Dur, Size};

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

/// Converts a duration key that the RFC counts in whole seconds.
pub(super) fn whole_seconds(v: &Spanned<Dur>, key: &str) -> Result<u16, Located> {
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

    let mut offer = OperationalOffer::default();
    if let Some(session) = &file.session {
        spans.session = Some(session.span());
        let s = session.get_ref();
        const MAX24: u64 = 16_777_215;
        let mut key = |id: KeyId, span: Range<usize>| spans.keys.push((id, span));
        if let Some(v) = &s.max_recv_data_segment_length {
            offer.max_recv_data_segment_length = size_in(v, "max_recv_data_segment_length", MAX24)?;
            key(KeyId::MaxRecvDataSegmentLength, v.span());
        }
        if let Some(v) = &s.max_burst_length {
            offer.max_burst_length = size_in(v, "max_burst_length", MAX24)?;
            key(KeyId::MaxBurstLength, v.span());
        }
        if let Some(v) = &s.first_burst_length {
            offer.first_burst_length = size_in(v, "first_burst_length", MAX24)?;
            key(KeyId::FirstBurstLength, v.span());
        }
        if let Some(v) = &s.max_outstanding_r2t {
            offer.max_outstanding_r2t = int_in(v, "max_outstanding_r2t", 1, 65_535)?;
            key(KeyId::MaxOutstandingR2T, v.span());
        }
        if let Some(v) = &s.default_time2wait {
            offer.default_time2wait = whole_seconds(v, "default_time2wait")?;
            key(KeyId::DefaultTime2Wait, v.span());
        }
        if let Some(v) = &s.default_time2retain {
            offer.default_time2retain = whole_seconds(v, "default_time2retain")?;
            key(KeyId::DefaultTime2Retain, v.span());
        }
        if let Some(v) = &s.error_recovery_level {
            offer.error_recovery_level = int_in(v, "error_recovery_level", 0, 2)?;
            key(KeyId::ErrorRecoveryLevel, v.span());
        }
        if let Some(v) = &s.queue_depth {
            offer.queue_depth = int_in(v, "queue_depth", 1, 65_536)?;
            spans.queue_depth = Some(v.span());
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
