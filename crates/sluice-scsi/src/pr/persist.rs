//! The persistent reservation state that survives a loss of power when APTPL is set (SPC-4
//! 5.12.5), as the text a [`StateStore`](sluice_storage::StateStore) keeps:
//!
//! ```text
//! sluice-reservations 1
//! aptpl 1
//! registration <key, 16 hex digits> <relative target port> <all_tg_pt 0|1> <TransportID hex>
//! reservation <type code> <relative target port of the holder> <holder's TransportID hex>
//! ```
//!
//! Gateways sharing a logical unit keep more (see [`encode_shared`]): the generation, the
//! RESERVE(6)/(10) holder and the log of what the last commands asked of other I_T nexuses
//! (`events.rs`), one line per event:
//!
//! ```text
//! pr-event <seq> <ASC ASCQ, 4 hex digits, or -> <abort 0|1> <target port> <TransportID hex>
//!     <sender's target port or -> <sender's TransportID hex or ->
//! ```
//!
//! TransportIDs are kept in their SPC-4 encoding (hex), so the file holds nothing this crate
//! could not parse from a parameter list. PRGENERATION is not kept: power on resets it to zero
//! whatever APTPL says (SPC-4 6.15.2). The decoder is total: a damaged file is an error, never
//! a panic, and it reads at most [`MAX_REGISTRATIONS`] registrations.

use std::fmt::Write as _;

use crate::pr::events::{EventLog, PrEvent};
use crate::pr::model::{Holder, PrState, PrType, Registration, Reservation, MAX_REGISTRATIONS};
use crate::transport_id::TransportId;

const MAGIC: &str = "sluice-reservations 1";

/// Why a saved state could not be read.
#[derive(Clone, Debug, Eq, PartialEq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct DecodeError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong there.
    pub what: &'static str,
}

/// The text of `state`.
pub fn encode(state: &PrState) -> String {
    encode_with(state, false)
}

/// The text of `state` as gateways sharing one logical unit keep it: with a `generation`
/// line, since every gateway must report the same PRGENERATION (the logical unit has not
/// lost power while any gateway serves it), and the I_T nexus holding a RESERVE(6)/(10)
/// reservation, if one does (`spc2-reservation <relative target port> <TransportID hex>`),
/// so that every gateway enforces it, and the `events` other gateways' I_T nexuses are to
/// learn of.
pub fn encode_shared(state: &PrState, spc2: Option<&Holder>, events: &EventLog) -> String {
    let mut out = encode_with(state, true);
    if let Some(h) = spc2 {
        let _ = writeln!(
            out,
            "spc2-reservation {} {}",
            h.port,
            hex(&h.initiator.to_bytes())
        );
    }
    for e in events.events() {
        let attention = e
            .attention
            .map_or("-".to_owned(), |(asc, ascq)| format!("{asc:02x}{ascq:02x}"));
        let (sender_port, sender_id) = e
            .sender
            .as_ref()
            .map_or(("-".to_owned(), "-".to_owned()), |s| {
                (s.port.to_string(), hex(&s.initiator.to_bytes()))
            });
        let _ = writeln!(
            out,
            "pr-event {} {attention} {} {} {} {sender_port} {sender_id}",
            e.seq,
            u8::from(e.abort),
            e.target.port,
            hex(&e.target.initiator.to_bytes()),
        );
    }
    out
}

/// What a shared store holds: the state, the RESERVE holder and the event log.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct SharedState {
    /// Registrations, reservation, generation.
    pub pr: PrState,
    /// The I_T nexus holding a RESERVE(6)/(10) reservation.
    pub spc2: Option<Holder>,
    /// What the last commands asked of other I_T nexuses.
    pub events: EventLog,
}

fn encode_with(state: &PrState, shared: bool) -> String {
    let mut out = format!("{MAGIC}\naptpl {}\n", u8::from(state.aptpl));
    if shared {
        let _ = writeln!(out, "generation {}", state.generation);
    }
    for r in &state.registrations {
        let _ = writeln!(
            out,
            "registration {:016x} {} {} {}",
            r.key,
            r.port,
            u8::from(r.all_tg_pt),
            hex(&r.initiator.to_bytes())
        );
    }
    if let Some(res) = &state.reservation {
        let _ = writeln!(
            out,
            "reservation {} {} {}",
            res.kind.code(),
            res.holder.port,
            hex(&res.holder.initiator.to_bytes())
        );
    }
    out
}

/// The state `text` describes (generation zero). A state saved with APTPL off describes no
/// registrations: reservations without APTPL do not survive power loss.
pub fn decode(text: &str) -> Result<PrState, DecodeError> {
    decode_with(text, false, &mut SharedState::default())
}

/// The state a shared store's `text` describes: everything, APTPL or not, generation
/// included, and the RESERVE holder (see [`encode_shared`]).
pub fn decode_shared(text: &str) -> Result<SharedState, DecodeError> {
    let mut extra = SharedState::default();
    extra.pr = decode_with(text, true, &mut extra)?;
    Ok(extra)
}

fn decode_with(text: &str, shared: bool, extra: &mut SharedState) -> Result<PrState, DecodeError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let err = |line, what| DecodeError { line, what };
    match lines.next() {
        Some((_, MAGIC)) => {}
        _ => return Err(err(1, "not a sluice reservation state (version 1)")),
    }
    let mut state = PrState::default();
    for (n, line) in lines {
        let mut f = line.split(' ');
        match f.next() {
            Some("aptpl") => {
                state.aptpl = match f.next() {
                    Some("1") => true,
                    Some("0") => false,
                    _ => return Err(err(n, "aptpl is 0 or 1")),
                };
            }
            Some("generation") if shared => {
                state.generation = f
                    .next()
                    .and_then(|g| g.parse().ok())
                    .ok_or(err(n, "bad generation"))?;
            }
            Some("registration") => {
                if state.registrations.len() >= MAX_REGISTRATIONS {
                    return Err(err(n, "too many registrations"));
                }
                let key = f
                    .next()
                    .and_then(|k| u64::from_str_radix(k, 16).ok())
                    .filter(|k| *k != 0)
                    .ok_or(err(n, "bad reservation key"))?;
                let port = port(f.next()).ok_or(err(n, "bad target port"))?;
                let all_tg_pt = match f.next() {
                    Some("1") => true,
                    Some("0") => false,
                    _ => return Err(err(n, "all_tg_pt is 0 or 1")),
                };
                let initiator = transport_id(f.next()).ok_or(err(n, "bad TransportID"))?;
                state.registrations.push(Registration {
                    initiator,
                    port,
                    key,
                    all_tg_pt,
                });
            }
            Some("reservation") => {
                let kind = f
                    .next()
                    .and_then(|c| c.parse::<u8>().ok())
                    .and_then(PrType::from_code)
                    .ok_or(err(n, "bad reservation type"))?;
                let port = port(f.next()).ok_or(err(n, "bad target port"))?;
                let initiator = transport_id(f.next()).ok_or(err(n, "bad TransportID"))?;
                state.reservation = Some(Reservation {
                    kind,
                    holder: Holder { initiator, port },
                });
            }
            Some("spc2-reservation") if shared => {
                let port = port(f.next()).ok_or(err(n, "bad target port"))?;
                let initiator = transport_id(f.next()).ok_or(err(n, "bad TransportID"))?;
                extra.spc2 = Some(Holder { initiator, port });
            }
            Some("pr-event") if shared => {
                let event = pr_event(&mut f).ok_or(err(n, "bad reservation event"))?;
                extra
                    .events
                    .push_decoded(event)
                    .map_err(|what| err(n, what))?;
            }
            Some("") if line.is_empty() => continue,
            _ => return Err(err(n, "unknown line")),
        }
        if f.next().is_some() {
            return Err(err(n, "trailing fields"));
        }
    }
    if !state.aptpl && !shared {
        return Ok(PrState::default());
    }
    // A reservation whose holder is not registered cannot be: drop it rather than keep a
    // reservation nobody can release.
    let held = state.reservation.as_ref().is_some_and(|res| {
        res.kind.all_registrants() && !state.registrations.is_empty()
            || state.registrations.iter().any(|r| r.holder() == res.holder)
    });
    if !held {
        state.reservation = None;
    }
    Ok(state)
}

/// The fields of a `pr-event` line after its keyword.
fn pr_event<'a>(f: &mut impl Iterator<Item = &'a str>) -> Option<PrEvent> {
    let seq = f.next()?.parse().ok()?;
    let attention = match f.next()? {
        "-" => None,
        code if code.len() == 4 => {
            let v = u16::from_str_radix(code, 16).ok()?;
            Some(((v >> 8) as u8, v as u8))
        }
        _ => return None,
    };
    let abort = match f.next()? {
        "1" => true,
        "0" => false,
        _ => return None,
    };
    let target = Holder {
        port: port(f.next())?,
        initiator: transport_id(f.next())?,
    };
    let sender = match (f.next()?, f.next()?) {
        ("-", "-") => None,
        (p, id) => Some(Holder {
            port: port(Some(p))?,
            initiator: transport_id(Some(id))?,
        }),
    };
    Some(PrEvent {
        seq,
        sender,
        target,
        attention,
        abort,
    })
}

fn port(field: Option<&str>) -> Option<u16> {
    field?.parse().ok()
}

fn transport_id(field: Option<&str>) -> Option<TransportId> {
    let bytes = unhex(field?)?;
    match TransportId::parse(&bytes) {
        Ok((id, used)) if used == bytes.len() => Some(id),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 2 * crate::transport_id::MAX_TRANSPORT_ID_BYTES {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PrState {
        let a = Registration {
            initiator: TransportId::iscsi_port("iqn.2026-11.a:x", [1, 2, 3, 4, 5, 6]),
            port: 1,
            key: 0xDEAD_BEEF,
            all_tg_pt: false,
        };
        let b = Registration {
            initiator: TransportId::iscsi_device("iqn.2026-11.b:y"),
            port: 2,
            key: 7,
            all_tg_pt: true,
        };
        PrState {
            generation: 0,
            aptpl: true,
            reservation: Some(Reservation {
                kind: PrType::ExclusiveAccessRegistrantsOnly,
                holder: a.holder(),
            }),
            registrations: vec![a, b],
        }
    }

    #[test]
    fn round_trip() {
        let s = sample();
        let text = encode(&s);
        assert!(
            text.starts_with("sluice-reservations 1\naptpl 1\n"),
            "{text}"
        );
        assert_eq!(decode(&text).unwrap(), s);
        let mut with_generation = s.clone();
        with_generation.generation = 9;
        assert_eq!(
            decode(&encode(&with_generation)).unwrap().generation,
            0,
            "power on resets PRGENERATION"
        );
    }

    #[test]
    fn shared_state_keeps_generation_and_registrations_without_aptpl() {
        let mut s = sample();
        s.aptpl = false;
        s.generation = 42;
        let text = encode_shared(&s, None, &EventLog::default());
        assert!(text.contains("\ngeneration 42\n"), "{text}");
        let back = decode_shared(&text).unwrap();
        assert_eq!((back.pr, back.spc2), (s, None));
        assert!(
            decode(&text).is_err(),
            "a local file has no generation line"
        );
        assert!(decode_shared(&text.replace("generation 42", "generation x")).is_err());
    }

    #[test]
    fn shared_state_keeps_the_reserve_holder() {
        let s = sample();
        let holder = Holder {
            initiator: TransportId::iscsi_port("iqn.2026-11.c:z", [9, 8, 7, 6, 5, 4]),
            port: 2,
        };
        let text = encode_shared(&s, Some(&holder), &EventLog::default());
        assert!(text.contains("\nspc2-reservation 2 "), "{text}");
        let back = decode_shared(&text).unwrap();
        assert_eq!((back.pr, back.spc2), (s, Some(holder)));
        assert!(
            decode(&text).is_err(),
            "a local file keeps no RESERVE holder"
        );
        let bad = text.replace("spc2-reservation 2 ", "spc2-reservation x ");
        assert!(decode_shared(&bad).is_err());
    }

    fn events() -> EventLog {
        let s = sample();
        let (a, b) = (&s.registrations[0], &s.registrations[1]);
        let mut log = EventLog::default();
        log.record(
            &a.holder(),
            &[(b.clone(), (0x2A, 0x05))],
            std::slice::from_ref(b),
        );
        log.record(&b.holder(), &[(a.clone(), (0x2A, 0x03))], &[]);
        log.record(&a.holder(), &[], std::slice::from_ref(b));
        log
    }

    #[test]
    fn shared_state_keeps_the_event_log() {
        let s = sample();
        let log = events();
        let text = encode_shared(&s, None, &log);
        assert!(text.contains("\npr-event 1 2a05 1 2 "), "{text}");
        assert!(text.contains("\npr-event 3 - 1 2 "), "{text}");
        let back = decode_shared(&text).unwrap();
        assert_eq!((back.pr, back.events), (s, log));
        assert!(decode(&text).is_err(), "a local file keeps no events");
        // A made-up event (a gateway's own, never written) has no sender.
        let mut own = EventLog::default();
        let mut e = events().events()[0].clone();
        e.sender = None;
        own.push_decoded(e).unwrap();
        let text = encode_shared(&sample(), None, &own);
        assert!(text.contains(" - -\n"), "{text}");
        assert_eq!(decode_shared(&text).unwrap().events, own);
    }

    #[test]
    fn damaged_events_are_errors() {
        let text = encode_shared(&sample(), None, &events());
        for (from, to) in [
            ("pr-event 1 2a05", "pr-event x 2a05"),
            ("pr-event 1 2a05", "pr-event 0 2a05"),
            ("pr-event 1 2a05", "pr-event 1 2a5"),
            ("pr-event 1 2a05", "pr-event 1 zz05"),
            ("pr-event 1 2a05 1", "pr-event 1 2a05 2"),
            ("pr-event 1 2a05 1 2", "pr-event 1 2a05 1 x"),
            ("pr-event 2", "pr-event 0"),
        ] {
            let bad = text.replacen(from, to, 1);
            assert_ne!(bad, text, "{from}");
            assert!(decode_shared(&bad).is_err(), "{to}: {bad}");
        }
        // Sequence numbers never go down.
        let swapped = text.replacen("pr-event 3 ", "pr-event 1 ", 1);
        assert!(decode_shared(&swapped).is_err());
        // Truncated lines and extra fields.
        let line = text.lines().find(|l| l.starts_with("pr-event 1 ")).unwrap();
        let cut = &line[..line.rfind(' ').unwrap()];
        assert!(decode_shared(&text.replacen(line, cut, 1)).is_err());
        assert!(decode_shared(&text.replacen(line, &format!("{line} 0"), 1)).is_err());
        // What comes from the cluster is untrusted: no more events than the bound.
        let full = format!(
            "{MAGIC}\naptpl 0\ngeneration 0\n{}",
            format!("{line}\n").repeat(crate::pr::events::MAX_EVENT_LINES)
        );
        let log = decode_shared(&full).unwrap().events;
        assert_eq!(log.events().len(), crate::pr::events::MAX_EVENT_LINES);
        assert!(decode_shared(&format!("{full}{line}\n")).is_err());
    }

    #[test]
    fn without_aptpl_nothing_survives() {
        let mut s = sample();
        s.aptpl = false;
        assert_eq!(decode(&encode(&s)).unwrap(), PrState::default());
    }

    #[test]
    fn an_unheld_reservation_is_dropped() {
        let mut s = sample();
        s.registrations.remove(0);
        assert_eq!(decode(&encode(&s)).unwrap().reservation, None);
    }

    #[test]
    fn damage_is_an_error() {
        let text = encode(&sample());
        assert!(decode("").is_err());
        assert!(decode("sluice-reservations 2\n").is_err());
        for (from, to) in [
            ("aptpl 1", "aptpl 2"),
            (
                "registration 00000000deadbeef",
                "registration 0000000000000000",
            ),
            (
                "registration 00000000deadbeef 1",
                "registration 00000000deadbeef x",
            ),
            (" 0 45", " 5 45"),
            ("reservation 6", "reservation 2"),
            ("reservation 6 1 45", "reservation 6 1 46"),
        ] {
            let bad = text.replacen(from, to, 1);
            assert_ne!(bad, text, "{from}");
            assert!(decode(&bad).is_err(), "{to}: {bad}");
        }
        assert!(decode(&format!("{text}extra line\n")).is_err());
        assert!(decode(&format!("{text}aptpl 1 1\n")).is_err());
        let line = format!(
            "registration 0000000000000001 1 0 {}\n",
            hex(&TransportId::iscsi_device("iqn.a:x").to_bytes())
        );
        let full = format!("{MAGIC}\naptpl 1\n{}", line.repeat(MAX_REGISTRATIONS));
        assert_eq!(
            decode(&full).unwrap().registrations.len(),
            MAX_REGISTRATIONS
        );
        let many = format!("{full}{line}");
        assert!(decode(&many).is_err());
    }
}
