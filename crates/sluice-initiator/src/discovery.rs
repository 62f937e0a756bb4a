//! SendTargets discovery (RFC 7143 section 4.3 and appendix C) over a discovery session.
//!
//! The exchange is the session core's (`sluice_proto::initiator::InitiatorSession::text`):
//! a response with F=0 carries a Target Transfer Tag and the rest is fetched with an empty
//! Text Request echoing it; C=1 means a key=value pair continues in the next response; the
//! answer ends with the first response that has F=1 and C=0. This module only moves the PDUs
//! of the one connection. See docs/initiator.md for how istgt's answer differs.

use std::time::Instant;

use sluice_proto::initiator::{Completion, InitiatorSession, Policy, SessionConfig};
use sluice_proto::text::{lookup, parse_pairs, KeyId, TextLimits};

use crate::counters::Counters;
use crate::error::Error;
use crate::login::{login, random_isid};
use crate::options::ConnectOptions;
use crate::supervisor::setup_of;

/// One target in a SendTargets answer.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct DiscoveredTarget {
    /// TargetName.
    pub name: String,
    /// TargetAddress values: `host:port,portal-group-tag` (may be empty: then the target is
    /// reached at the portal that was asked).
    pub addresses: Vec<String>,
}

/// Opens a discovery session at `portal` (`host:port`), asks `SendTargets=All`, logs out.
///
/// ```no_run
/// # async fn f() -> Result<(), sluice_initiator::Error> {
/// let opts = sluice_initiator::ConnectOptions::default();
/// for t in sluice_initiator::discover("127.0.0.1:3260", &opts).await? {
///     println!("{} {:?}", t.name, t.addresses);
/// }
/// # Ok(()) }
/// ```
pub async fn discover(portal: &str, opts: &ConnectOptions) -> Result<Vec<DiscoveredTarget>, Error> {
    let counters = Counters::default();
    let logged = login(
        portal.to_owned(),
        None,
        random_isid(),
        None,
        opts,
        &counters,
    )
    .await?;
    let config = SessionConfig {
        policy: Policy::RoundRobin,
        max_retries: 0,
        keepalive: None,
        recovery: sluice_proto::initiator::RecoveryConfig::default(),
    };
    let (mut core, conn) = InitiatorSession::new(config, setup_of(&logged, 0), Instant::now());
    let mut t = logged.transport;
    let pairs = [(KeyId::SendTargets.name().to_owned(), "All".to_owned())];
    let asked = core.text(&pairs);
    let answer = loop {
        while let Some(pdu) = core.poll_transmit(conn) {
            t.queue(&pdu);
        }
        t.flush().await?;
        if let Some(result) = take_text(&mut core, asked) {
            break result;
        }
        let pdu = t.recv().await?;
        core.handle_pdu(conn, pdu, Instant::now());
    };
    let pairs = answer.map_err(|e| match e {
        sluice_proto::initiator::Failure::Rejected(r) => Error::Rejected(r),
        other => Error::Protocol(format!("SendTargets: {other}")),
    })?;
    // Logout is a courtesy (section 11.14); a target that just closes is fine too.
    let _ = core.logout();
    while let Some(pdu) = core.poll_transmit(conn) {
        t.queue(&pdu);
    }
    if t.flush().await.is_ok() {
        let _ = tokio::time::timeout(opts.keepalive_timeout, t.recv()).await;
    }
    Ok(group_send_targets(pairs))
}

/// The text exchange's result, once it completed.
fn take_text(
    core: &mut InitiatorSession,
    asked: sluice_proto::initiator::RequestId,
) -> Option<Result<Vec<(String, String)>, sluice_proto::initiator::Failure>> {
    let mut found = None;
    while let Some(c) = core.poll_completion() {
        if let Completion::Text(id, result) = c {
            if id == asked {
                found = Some(result);
            }
        }
    }
    found
}

/// Groups `TargetName` and the `TargetAddress` values that follow it (appendix C).
fn group_send_targets(pairs: Vec<(String, String)>) -> Vec<DiscoveredTarget> {
    let mut out: Vec<DiscoveredTarget> = Vec::new();
    for (k, v) in pairs {
        match lookup(&k).map(|d| d.id) {
            Some(KeyId::TargetName) => out.push(DiscoveredTarget {
                name: v,
                addresses: Vec::new(),
            }),
            Some(KeyId::TargetAddress) => {
                if let Some(last) = out.last_mut() {
                    last.addresses.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

/// The targets of a SendTargets answer's text: each `TargetName` with the `TargetAddress`
/// values that follow it (appendix C).
pub fn parse_send_targets(text: &[u8]) -> Vec<DiscoveredTarget> {
    group_send_targets(parse_pairs(text, &TextLimits::DISCOVERY).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_targets_text_groups_addresses() {
        let text = b"TargetName=iqn.a:1\0TargetAddress=10.0.0.1:3260,1\0\
TargetAddress=[fe80::1]:3260,1\0TargetName=iqn.a:2\0";
        let t = parse_send_targets(text);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].addresses.len(), 2);
        assert_eq!(t[1].name, "iqn.a:2");
        assert!(t[1].addresses.is_empty());
    }
}
