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
//! TransportIDs are kept in their SPC-4 encoding (hex), so the file holds nothing this crate
//! could not parse from a parameter list. PRGENERATION is not kept: power on resets it to zero
//! whatever APTPL says (SPC-4 6.15.2). The decoder is total: a damaged file is an error, never
//! a panic, and it reads at most [`MAX_REGISTRATIONS`] registrations.

use std::fmt::Write as _;

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
/// so that every gateway enforces it.
pub fn encode_shared(state: &PrState, spc2: Option<&Holder>) -> String {
    let mut out = encode_with(state, true);
    if let Some(h) = spc2 {
        let _ = writeln!(
            out,
            "spc2-reservation {} {}",
            h.port,
            hex(&h.initiator.to_bytes())
        );
    }
    out
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
    decode_with(text, false, &mut None)
}

/// The state a shared store's `text` describes: everything, APTPL or not, generation
/// included, and the RESERVE holder (see [`encode_shared`]).
pub fn decode_shared(text: &str) -> Result<(PrState, Option<Holder>), DecodeError> {
    let mut spc2 = None;
    let state = decode_with(text, true, &mut spc2)?;
    Ok((state, spc2))
}

fn decode_with(
    text: &str,
    shared: bool,
    spc2: &mut Option<Holder>,
) -> Result<PrState, DecodeError> {
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
                *spc2 = Some(Holder { initiator, port });
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
        let text = encode_shared(&s, None);
        assert!(text.contains("\ngeneration 42\n"), "{text}");
        assert_eq!(decode_shared(&text).unwrap(), (s, None));
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
        let text = encode_shared(&s, Some(&holder));
        assert!(text.contains("\nspc2-reservation 2 "), "{text}");
        assert_eq!(decode_shared(&text).unwrap(), (s, Some(holder)));
        assert!(
            decode(&text).is_err(),
            "a local file keeps no RESERVE holder"
        );
        let bad = text.replace("spc2-reservation 2 ", "spc2-reservation x ");
        assert!(decode_shared(&bad).is_err());
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
