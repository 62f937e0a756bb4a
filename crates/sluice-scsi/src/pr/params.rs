//! The PERSISTENT RESERVE OUT parameter lists (SPC-4 6.16.3 and 6.16.4), parsed once into
//! typed values. Every length and count read from the list is checked against the list before
//! it is used.

use crate::field::{be32, be64, u8_at};
use crate::pr::model::MAX_REGISTRATIONS;
use crate::sense::{invalid_field_in_param, param_list_length_error, SenseData, SenseKey};
use crate::transport_id::{TransportId, MAX_TRANSPORT_ID_BYTES};

/// PERSISTENT RESERVE OUT service actions (SPC-4 table 210).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ServiceAction {
    /// REGISTER (00h).
    Register,
    /// RESERVE (01h).
    Reserve,
    /// RELEASE (02h).
    Release,
    /// CLEAR (03h).
    Clear,
    /// PREEMPT (04h).
    Preempt,
    /// PREEMPT AND ABORT (05h).
    PreemptAndAbort,
    /// REGISTER AND IGNORE EXISTING KEY (06h).
    RegisterAndIgnoreExistingKey,
    /// REGISTER AND MOVE (07h).
    RegisterAndMove,
}

impl ServiceAction {
    /// The service action with this code.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0x00 => ServiceAction::Register,
            0x01 => ServiceAction::Reserve,
            0x02 => ServiceAction::Release,
            0x03 => ServiceAction::Clear,
            0x04 => ServiceAction::Preempt,
            0x05 => ServiceAction::PreemptAndAbort,
            0x06 => ServiceAction::RegisterAndIgnoreExistingKey,
            0x07 => ServiceAction::RegisterAndMove,
            _ => return None,
        })
    }
}

/// Length of the basic parameter list (SPC-4 6.16.3) and of REGISTER AND MOVE's header.
pub const BASIC_LIST_BYTES: usize = 24;

/// Largest parameter list accepted: the basic list, the TRANSPORTID PARAMETER DATA LENGTH
/// field and one largest TransportID per registration the logical unit can hold. No valid
/// list is longer, so a longer PARAMETER LIST LENGTH is refused before anything is read.
pub const MAX_PROUT_LIST_BYTES: usize =
    BASIC_LIST_BYTES + 4 + MAX_REGISTRATIONS * MAX_TRANSPORT_ID_BYTES;

/// A parsed parameter list.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum ProutParameters {
    /// The basic list of every service action but REGISTER AND MOVE.
    Basic {
        /// RESERVATION KEY.
        key: u64,
        /// SERVICE ACTION RESERVATION KEY.
        sa_key: u64,
        /// ALL_TG_PT.
        all_tg_pt: bool,
        /// APTPL.
        aptpl: bool,
        /// With SPEC_I_PT=1 (REGISTER only): the TransportIDs of the further initiator ports
        /// to register, each with its offset in the list.
        spec_i_pt: Option<Vec<(TransportId, usize)>>,
    },
    /// REGISTER AND MOVE's list.
    Move {
        /// RESERVATION KEY.
        key: u64,
        /// SERVICE ACTION RESERVATION KEY.
        sa_key: u64,
        /// UNREG.
        unreg: bool,
        /// APTPL.
        aptpl: bool,
        /// RELATIVE TARGET PORT IDENTIFIER of the destination.
        relative_port: u16,
        /// The destination initiator port.
        transport_id: TransportId,
    },
}

impl ProutParameters {
    /// RESERVATION KEY.
    pub fn key(&self) -> u64 {
        match self {
            ProutParameters::Basic { key, .. } | ProutParameters::Move { key, .. } => *key,
        }
    }

    /// SERVICE ACTION RESERVATION KEY.
    pub fn sa_key(&self) -> u64 {
        match self {
            ProutParameters::Basic { sa_key, .. } | ProutParameters::Move { sa_key, .. } => *sa_key,
        }
    }

    /// APTPL.
    pub fn aptpl(&self) -> bool {
        match self {
            ProutParameters::Basic { aptpl, .. } | ProutParameters::Move { aptpl, .. } => *aptpl,
        }
    }
}

/// Parses the parameter list of `action`. `list` is exactly PARAMETER LIST LENGTH bytes (the
/// caller refuses a shorter Data-Out with PARAMETER LIST LENGTH ERROR).
pub fn parse_prout_parameters(
    action: ServiceAction,
    list: &[u8],
) -> Result<ProutParameters, SenseData> {
    if list.len() < BASIC_LIST_BYTES || list.len() > MAX_PROUT_LIST_BYTES {
        return Err(param_list_length_error());
    }
    let key = be64(list, 0);
    let sa_key = be64(list, 8);
    if action == ServiceAction::RegisterAndMove {
        return parse_move(list, key, sa_key);
    }
    let flags = u8_at(list, 20);
    let spec_i_pt = flags & 0x08 != 0;
    let all_tg_pt = flags & 0x04 != 0;
    let aptpl = flags & 0x01 != 0;
    if flags & 0xF2 != 0 {
        return Err(invalid_field_in_param(
            20,
            crate::sense::top_bit(flags & 0xF2),
        ));
    }
    // SPC-4 6.16.3: SPEC_I_PT is valid only with REGISTER.
    if spec_i_pt && action != ServiceAction::Register {
        return Err(invalid_field_in_param(20, Some(3)));
    }
    if !spec_i_pt {
        // "If the SPEC_I_PT bit is set to zero, the service action is not REGISTER AND
        // MOVE, and the parameter list length is not 24, then ... PARAMETER LIST LENGTH
        // ERROR."
        if list.len() != BASIC_LIST_BYTES {
            return Err(param_list_length_error());
        }
        return Ok(ProutParameters::Basic {
            key,
            sa_key,
            all_tg_pt,
            aptpl,
            spec_i_pt: None,
        });
    }
    let Some(length_field) = list.get(BASIC_LIST_BYTES..BASIC_LIST_BYTES + 4) else {
        return Err(param_list_length_error());
    };
    let data_len = be32(length_field, 0) as usize;
    let start = BASIC_LIST_BYTES + 4;
    // The TransportIDs must fill the rest of the list exactly.
    if data_len != list.len() - start {
        return Err(param_list_length_error());
    }
    let mut ids = Vec::new();
    let mut at = start;
    while at < list.len() {
        if ids.len() >= MAX_REGISTRATIONS {
            return Err(insufficient_registration_resources());
        }
        let (id, used) = TransportId::parse(&list[at..])
            .map_err(|e| invalid_field_in_param(clamp16(at + usize::from(e.offset())), None))?;
        ids.push((id, at));
        at += used;
    }
    Ok(ProutParameters::Basic {
        key,
        sa_key,
        all_tg_pt,
        aptpl,
        spec_i_pt: Some(ids),
    })
}

fn parse_move(list: &[u8], key: u64, sa_key: u64) -> Result<ProutParameters, SenseData> {
    let flags = u8_at(list, 17);
    if flags & 0xFC != 0 {
        return Err(invalid_field_in_param(
            17,
            crate::sense::top_bit(flags & 0xFC),
        ));
    }
    let relative_port = u16::from_be_bytes([u8_at(list, 18), u8_at(list, 19)]);
    let data_len = be32(list, 20) as usize;
    // The TransportID must lie within the list.
    if data_len > list.len() - BASIC_LIST_BYTES {
        return Err(param_list_length_error());
    }
    let tid = &list[BASIC_LIST_BYTES..BASIC_LIST_BYTES + data_len];
    let (transport_id, _) = TransportId::parse(tid).map_err(|e| {
        invalid_field_in_param(clamp16(BASIC_LIST_BYTES + usize::from(e.offset())), None)
    })?;
    Ok(ProutParameters::Move {
        key,
        sa_key,
        unreg: flags & 0x02 != 0,
        aptpl: flags & 0x01 != 0,
        relative_port,
        transport_id,
    })
}

/// ILLEGAL REQUEST / 55h/04h INSUFFICIENT REGISTRATION RESOURCES.
pub(crate) fn insufficient_registration_resources() -> SenseData {
    SenseData::new(SenseKey::ILLEGAL_REQUEST, 0x55, 0x04)
}

fn clamp16(v: usize) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(key: u64, sa_key: u64, flags: u8) -> Vec<u8> {
        let mut l = vec![0u8; 24];
        l[..8].copy_from_slice(&key.to_be_bytes());
        l[8..16].copy_from_slice(&sa_key.to_be_bytes());
        l[20] = flags;
        l
    }

    #[test]
    fn basic_list() {
        let p = parse_prout_parameters(ServiceAction::Register, &basic(1, 2, 0x05)).unwrap();
        assert_eq!(
            p,
            ProutParameters::Basic {
                key: 1,
                sa_key: 2,
                all_tg_pt: true,
                aptpl: true,
                spec_i_pt: None
            }
        );
        // Wrong lengths.
        for len in [0, 23, 25, 28] {
            let mut l = basic(1, 2, 0);
            l.resize(len, 0);
            let e = parse_prout_parameters(ServiceAction::Reserve, &l).unwrap_err();
            assert_eq!((e.asc, e.ascq), (0x1A, 0x00), "length {len}");
        }
        // Reserved bits, SPEC_I_PT outside REGISTER.
        let e = parse_prout_parameters(ServiceAction::Reserve, &basic(1, 2, 0x10)).unwrap_err();
        assert_eq!(e.field_pointer(), Some((false, 20, Some(4))));
        let e = parse_prout_parameters(ServiceAction::Clear, &basic(1, 2, 0x08)).unwrap_err();
        assert_eq!(e.field_pointer(), Some((false, 20, Some(3))));
        let e = parse_prout_parameters(
            ServiceAction::RegisterAndIgnoreExistingKey,
            &basic(1, 2, 0x08),
        )
        .unwrap_err();
        assert_eq!((e.asc, e.ascq), (0x26, 0x00));
    }

    #[test]
    fn spec_i_pt_list() {
        let a = TransportId::iscsi_port("iqn.a:x", [1; 6]);
        let b = TransportId::iscsi_device("iqn.b:y");
        let mut ids = a.to_bytes();
        ids.extend(b.to_bytes());
        let mut l = basic(0, 7, 0x08);
        l.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        l.extend_from_slice(&ids);
        let p = parse_prout_parameters(ServiceAction::Register, &l).unwrap();
        let ProutParameters::Basic {
            spec_i_pt: Some(got),
            ..
        } = p
        else {
            panic!("{p:?}");
        };
        assert_eq!(got, vec![(a.clone(), 28), (b, 28 + a.to_bytes().len())]);
        // The length field must match the rest of the list.
        let mut short = l.clone();
        short[24..28].copy_from_slice(&((ids.len() - 4) as u32).to_be_bytes());
        assert!(parse_prout_parameters(ServiceAction::Register, &short).is_err());
        let mut huge = l.clone();
        huge[24..28].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = parse_prout_parameters(ServiceAction::Register, &huge).unwrap_err();
        assert_eq!(e.asc, 0x1A);
        // A list without the length field.
        let e = parse_prout_parameters(ServiceAction::Register, &l[..26]).unwrap_err();
        assert_eq!(e.asc, 0x1A);
        // A malformed TransportID is an invalid field pointing into it.
        let mut bad = l.clone();
        bad[28] = 0x41;
        let e = parse_prout_parameters(ServiceAction::Register, &bad).unwrap_err();
        assert_eq!(e.field_pointer(), Some((false, 28, None)));
    }

    #[test]
    fn too_many_transport_ids() {
        let one = TransportId::iscsi_device("iqn.b:y").to_bytes();
        let ids = one.repeat(MAX_REGISTRATIONS + 1);
        let mut l = basic(0, 7, 0x08);
        l.extend_from_slice(&(ids.len() as u32).to_be_bytes());
        l.extend_from_slice(&ids);
        let e = parse_prout_parameters(ServiceAction::Register, &l).unwrap_err();
        assert_eq!((e.asc, e.ascq), (0x55, 0x04));
        let e = parse_prout_parameters(ServiceAction::Register, &vec![0; MAX_PROUT_LIST_BYTES + 1])
            .unwrap_err();
        assert_eq!(e.asc, 0x1A);
    }

    #[test]
    fn move_list() {
        let dest = TransportId::iscsi_port("iqn.a:x", [2; 6]);
        let t = dest.to_bytes();
        let mut l = vec![0u8; 24];
        l[..8].copy_from_slice(&5u64.to_be_bytes());
        l[8..16].copy_from_slice(&6u64.to_be_bytes());
        l[17] = 0x03;
        l[18..20].copy_from_slice(&2u16.to_be_bytes());
        l[20..24].copy_from_slice(&(t.len() as u32).to_be_bytes());
        l.extend_from_slice(&t);
        let p = parse_prout_parameters(ServiceAction::RegisterAndMove, &l).unwrap();
        assert_eq!(
            p,
            ProutParameters::Move {
                key: 5,
                sa_key: 6,
                unreg: true,
                aptpl: true,
                relative_port: 2,
                transport_id: dest
            }
        );
        let mut past = l.clone();
        past[20..24].copy_from_slice(&((t.len() + 4) as u32).to_be_bytes());
        assert_eq!(
            parse_prout_parameters(ServiceAction::RegisterAndMove, &past)
                .unwrap_err()
                .asc,
            0x1A
        );
        let mut reserved = l.clone();
        reserved[17] = 0x80;
        assert!(parse_prout_parameters(ServiceAction::RegisterAndMove, &reserved).is_err());
        assert!(parse_prout_parameters(ServiceAction::RegisterAndMove, &l[..24]).is_err());
    }
}
