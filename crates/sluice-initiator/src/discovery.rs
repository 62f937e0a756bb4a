//! SendTargets discovery (RFC 7143 section 4.3 and appendix C) over a discovery session.
//!
//! The text exchange follows section 11.10/11.11: a response with F=0 carries a Target
//! Transfer Tag, and the initiator fetches the rest with an empty Text Request echoing it;
//! C=1 means a key=value pair continues in the next response (which the target sends after
//! our empty request, too). The answer ends with the first response that has F=1 and C=0.
//! See docs/initiator.md for how istgt's answer differs and what we do about it.

use bytes::Bytes;
use sluice_proto::pdu::codes::LogoutReason;
use sluice_proto::pdu::{LogoutRequest, Pdu, TextRequest};
use sluice_proto::seq::{Itt, Lun, SeqNum, Ttt};
use sluice_proto::text::{encode_pairs, lookup, parse_pairs, KeyId, TextAssembler, TextLimits};

use crate::counters::Counters;
use crate::error::Error;
use crate::login::{login, random_isid};
use crate::options::ConnectOptions;
use crate::transport::Transport;

/// Most Text Responses read for one SendTargets answer (bounds a target that never ends).
const MAX_TEXT_RESPONSES: u32 = 1024;
/// Most bytes of SendTargets text accepted.
const MAX_TEXT_BYTES: usize = TextLimits::DISCOVERY.max_total_len;

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
    let mut t = logged.transport;
    let mut cmd_sn = logged.cmd_sn;
    let mut exp_stat_sn = logged.outcome.exp_stat_sn;
    let text = send_targets(&mut t, &mut cmd_sn, &mut exp_stat_sn).await?;
    // Logout is a courtesy (section 11.14); a target that just closes is fine too.
    let logout = Pdu::LogoutRequest(LogoutRequest {
        immediate: true,
        reason: LogoutReason::CloseSession,
        itt: Itt(2),
        cid: 0,
        cmd_sn,
        exp_stat_sn,
    });
    if t.send(&logout).await.is_ok() {
        let _ = tokio::time::timeout(opts.keepalive_timeout, t.recv()).await;
    }
    Ok(parse_send_targets(&text))
}

async fn send_targets(
    t: &mut Transport,
    cmd_sn: &mut SeqNum,
    exp_stat_sn: &mut SeqNum,
) -> Result<Bytes, Error> {
    let itt = Itt(1);
    let mut assembler = TextAssembler::new(MAX_TEXT_BYTES);
    let mut ttt = Ttt::RESERVED;
    let mut data = encode_pairs(&[(KeyId::SendTargets.name(), "All")]);
    for _ in 0..MAX_TEXT_RESPONSES {
        let req = Pdu::TextRequest(TextRequest {
            immediate: true,
            final_bit: true,
            cont: false,
            lun: Lun::default(),
            itt,
            ttt,
            cmd_sn: *cmd_sn,
            exp_stat_sn: *exp_stat_sn,
            data: std::mem::take(&mut data),
        });
        t.send(&req).await?;
        let rsp = loop {
            match t.recv().await? {
                Pdu::TextResponse(r) if r.itt == itt => break r,
                Pdu::Reject(r) => return Err(Error::Rejected(r.reason)),
                Pdu::NopIn(_) | Pdu::AsyncMessage(_) => continue,
                other => {
                    return Err(Error::Protocol(format!(
                        "opcode {:#04x} instead of a Text Response",
                        other.opcode()
                    )))
                }
            }
        };
        *exp_stat_sn = rsp.stat_sn.next();
        // Section 11.11.2: C=1 requires F=0; the text is reassembled before parsing.
        let done = rsp.final_bit && !rsp.cont;
        match assembler.push(&rsp.data, !done) {
            Err(_) => return Err(Error::Protocol("SendTargets answer too long".into())),
            Ok(Some(text)) => return Ok(text),
            Ok(None) => {}
        }
        // Section 11.10.4: continue with the target's TTT. A target that sets F=0 with the
        // reserved TTT gets the reserved TTT back, which is all we can do.
        ttt = rsp.ttt;
    }
    Err(Error::Protocol(
        "SendTargets answer did not end (no Text Response with F=1)".into(),
    ))
}

/// Groups `TargetName` and the `TargetAddress` values that follow it (appendix C).
pub fn parse_send_targets(text: &[u8]) -> Vec<DiscoveredTarget> {
    let limits = TextLimits::DISCOVERY;
    let mut out: Vec<DiscoveredTarget> = Vec::new();
    for (k, v) in parse_pairs(text, &limits).unwrap_or_default() {
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
