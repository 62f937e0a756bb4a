//! Conversion of the parsed file to a [`TargetConfig`]: listen addresses, discovery, keepalive
//! and limits; `[session]` is converted by [`super::session`], targets by [`super::target`].

use std::net::SocketAddr;
use std::path::Path;

use crate::portals::{portal_groups, AluaSetting, Portal};

use sluice_proto::target::RecoveryConfig;
use sluice_target::config::{ChapOwner, Keepalive, Limits, OperationalOffer, TargetConfig};
use toml::Spanned;

use super::chap::convert_chap;
use super::error::{at, Located};
use super::kind::{ErrorKind, FileKey};
use super::locate::Spans;
use super::schema::FileToml;
use super::session::convert_session;
use super::target::convert_target;

/// Converts an integer key, refusing values outside `min..=max` at the value's position.
pub(super) fn int_in<T: TryFrom<i64>>(
    v: &Spanned<i64>,
    key: FileKey,
    min: i64,
    max: i64,
) -> Result<T, Located> {
    let value = *v.get_ref();
    match T::try_from(value) {
        Ok(t) if (min..=max).contains(&value) => Ok(t),
        _ => Err(at(
            v.span(),
            ErrorKind::OutOfRange {
                key,
                value,
                min,
                max,
            },
        )),
    }
}

/// Turns the parsed file into a [`TargetConfig`], recording where each checked value is.
pub(super) fn convert(file: FileToml, base: &Path) -> Result<(TargetConfig, Spans), Located> {
    let mut spans = Spans::default();

    let listen: Vec<Portal> = match &file.listen {
        Some(list) => {
            spans.listen = Some(list.span());
            if list.get_ref().is_empty() {
                return Err(at(list.span(), ErrorKind::NoListen));
            }
            let mut seen: Vec<Portal> = Vec::new();
            for a in list.get_ref() {
                let portal = a.get_ref().0;
                if seen.iter().any(|p| p.addr == portal.addr) {
                    return Err(at(a.span(), ErrorKind::ListenTwice(portal.addr)));
                }
                seen.push(portal);
            }
            seen
        }
        None => vec![Portal {
            addr: SocketAddr::from(([127, 0, 0, 1], crate::cli::DEFAULT_PORT)),
            tag: None,
        }],
    };
    let mut settings: Vec<AluaSetting> = Vec::new();
    for g in &file.portal_groups {
        let g = g.get_ref();
        let tag: u16 = int_in(&g.tag, FileKey::PortalGroupTag, 1, 65_535)?;
        if settings.iter().any(|s| s.tag == tag) {
            return Err(at(g.tag.span(), ErrorKind::PortalGroupTwice(tag)));
        }
        let in_group = |p: &Portal| p.tag.unwrap_or(sluice_target::DEFAULT_PORTAL_GROUP_TAG) == tag;
        if !listen.iter().any(in_group) {
            return Err(at(g.tag.span(), ErrorKind::PortalGroupWithoutPortal(tag)));
        }
        let alua_group = match &g.alua_group {
            Some(v) => Some(int_in(v, FileKey::AluaGroup, 0, 65_535)?),
            None => None,
        };
        settings.push(AluaSetting {
            tag,
            alua_group,
            state: g
                .alua_state
                .map_or(sluice_target::config::AccessState::ActiveOptimized, |s| s.0),
        });
    }
    let (portals, portal_groups) = portal_groups(&listen, &settings);
    let state_dir = file.state_dir.as_ref().map(|d| base.join(d.get_ref()));
    let gateway = match &file.gateway {
        Some(g) => {
            spans.gateway = Some(g.span());
            let g = g.get_ref();
            Some(sluice_target::config::GatewayConfig {
                group: int_in(&g.group, FileKey::GatewayGroup, 1, 65_535)?,
                groups: g
                    .groups
                    .iter()
                    .map(|v| int_in(v, FileKey::GatewayGroup, 1, 65_535))
                    .collect::<Result<_, _>>()?,
                non_owner: g.non_owner.map_or(
                    sluice_target::config::AccessState::ActiveNonOptimized,
                    |s| s.0,
                ),
            })
        }
        None => None,
    };

    let discovery_auth = match file.discovery.as_ref().and_then(|d| d.chap.as_ref()) {
        Some(c) => {
            let (creds, s) = convert_chap(ChapOwner::Discovery, c)?;
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
                    return Err(at(v.span(), ErrorKind::Zero(FileKey::KeepaliveInterval)));
                }
                ka.interval = v.get_ref().0;
            }
            if let Some(v) = &k.timeout {
                if v.get_ref().0.is_zero() {
                    return Err(at(v.span(), ErrorKind::Zero(FileKey::KeepaliveTimeout)));
                }
                ka.timeout = v.get_ref().0;
            }
            Some(ka)
        }
        Some(_) => None,
        // Pings are on unless switched off: a dead initiator must not hold a session forever.
        None => Some(Keepalive::default()),
    };

    let mut recovery = RecoveryConfig::default();
    if let Some(r) = &file.recovery {
        if let Some(v) = &r.data_ack_every {
            // 0 turns DataACK requests off.
            let n: u32 = int_in(v, FileKey::DataAckEvery, 0, i64::from(u32::MAX))?;
            recovery.data_ack_every = (n > 0).then_some(n);
        }
        if let Some(v) = &r.sequence_timeout {
            if v.get_ref().0.is_zero() {
                return Err(at(v.span(), ErrorKind::Zero(FileKey::SequenceTimeout)));
            }
            recovery.sequence_timeout = v.get_ref().0;
        }
        if let Some(v) = &r.max_retained_statuses {
            recovery.max_retained_statuses = int_in(v, FileKey::MaxRetainedStatuses, 1, 1 << 20)?;
        }
        if let Some(v) = &r.max_retained_bytes {
            let bytes = v.get_ref().0;
            if bytes == 0 {
                return Err(at(v.span(), ErrorKind::Zero(FileKey::MaxRetainedBytes)));
            }
            // More than the address space holds is no limit at all.
            recovery.max_retained_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
    }

    let mut limits = Limits::default();
    if let Some(l) = &file.limits {
        if let Some(v) = &l.max_sessions {
            limits.max_sessions = int_in(v, FileKey::MaxSessions, 1, i64::MAX)?;
        }
        if let Some(v) = &l.max_connections {
            limits.max_connections = int_in(v, FileKey::MaxTcpConnections, 1, i64::MAX)?;
        }
        if let Some(v) = &l.max_outstanding_bytes_per_connection {
            let bytes = v.get_ref().0;
            if bytes == 0 {
                return Err(at(v.span(), ErrorKind::Zero(FileKey::MaxOutstandingBytes)));
            }
            // More than the address space holds is no limit at all.
            limits.max_outstanding_bytes_per_connection =
                usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        if let Some(v) = &l.login_timeout {
            if v.get_ref().0.is_zero() {
                return Err(at(v.span(), ErrorKind::Zero(FileKey::LoginTimeout)));
            }
            limits.login_timeout = v.get_ref().0;
        }
        if let Some(v) = &l.shutdown_grace {
            limits.shutdown_grace = v.get_ref().0;
        }
    }

    let mut targets = Vec::new();
    for (index, t) in file.targets.iter().enumerate() {
        let (def, ts) = convert_target(index, t, base)?;
        targets.push(def);
        spans.targets.push(ts);
    }

    let tcp_congestion = file.tcp_congestion.as_ref().map(|c| {
        spans.tcp_congestion = Some(c.span());
        c.get_ref().clone()
    });
    let config = TargetConfig {
        portals,
        portal_groups,
        state_dir,
        targets,
        discovery_auth,
        offer,
        limits,
        keepalive,
        recovery,
        fault_hook: None,
        gateway,
        tcp_congestion,
    };
    Ok((config, spans))
}
