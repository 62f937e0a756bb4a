//! PERSISTENT RESERVE IN (SPC-4 6.15): the parameter data of its four service actions, built
//! in full and then cut to the allocation length (ADDITIONAL LENGTH always reports the whole).

use crate::pr::model::PrState;

/// READ KEYS (00h, SPC-4 6.15.2): PRGENERATION, then every registered key.
pub(crate) fn read_keys(s: &PrState) -> Vec<u8> {
    let mut d = header(s.generation, 8 * s.registrations.len());
    for r in &s.registrations {
        d.extend_from_slice(&r.key.to_be_bytes());
    }
    d
}

/// READ RESERVATION (01h, SPC-4 6.15.3): the reservation's key, scope and type, if any.
pub(crate) fn read_reservation(s: &PrState) -> Vec<u8> {
    let Some(res) = &s.reservation else {
        return header(s.generation, 0);
    };
    let mut d = header(s.generation, 16);
    d.extend_from_slice(&s.holder_key().unwrap_or(0).to_be_bytes());
    d.extend_from_slice(&[0; 4]); // obsolete
    d.push(0);
    d.push(res.kind.code()); // SCOPE 0h (LU_SCOPE) | TYPE
    d.extend_from_slice(&[0; 2]); // obsolete
    d
}

/// REPORT CAPABILITIES (02h, SPC-4 6.15.4).
pub(crate) fn report_capabilities(aptpl_active: bool, can_persist: bool) -> Vec<u8> {
    let mut d = vec![0u8; 8];
    d[1] = 8; // LENGTH
              // CRH (RESERVE/RELEASE follow SPC-4 5.12.3), SIP_C (SPEC_I_PT), ATP_C (ALL_TG_PT),
              // PTPL_C (APTPL) when a state store is configured.
    d[2] = 0x10 | 0x08 | 0x04 | u8::from(can_persist);
    // TMV: the type mask is valid. ALLOW COMMANDS 011b: TEST UNIT READY passes Write
    // Exclusive and Exclusive Access reservations, and the read-like commands (MODE SENSE,
    // READ BUFFER, RECEIVE DIAGNOSTIC RESULTS, REPORT SUPPORTED OPERATION CODES, READ
    // DEFECT DATA, ...) pass Write Exclusive ones. PTPL_A: APTPL is active.
    d[3] = 0x80 | (0b011 << 4) | u8::from(aptpl_active);
    // Every type: WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX; EX_AC_AR.
    d[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02;
    d[5] = 0x01;
    d
}

/// READ FULL STATUS (03h, SPC-4 6.15.5): one descriptor per registration, each with its
/// key, whether it holds the reservation, its target port and its TransportID.
pub(crate) fn read_full_status(s: &PrState) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, r) in s.registrations.iter().enumerate() {
        let holds = s.index_holds(i);
        body.extend_from_slice(&r.key.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
        body.push(u8::from(r.all_tg_pt) << 1 | u8::from(holds));
        body.push(match (&s.reservation, holds) {
            (Some(res), true) => res.kind.code(),
            _ => 0,
        });
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&r.port.to_be_bytes());
        let tid = r.initiator.to_bytes();
        // A TransportID is at most 248 bytes.
        body.extend_from_slice(&(tid.len() as u32).to_be_bytes());
        body.extend_from_slice(&tid);
    }
    let mut d = header(s.generation, body.len());
    d.extend_from_slice(&body);
    d
}

/// PRGENERATION and ADDITIONAL LENGTH.
fn header(generation: u32, additional: usize) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + additional);
    d.extend_from_slice(&generation.to_be_bytes());
    // At most MAX_REGISTRATIONS descriptors of at most 272 bytes: far below 2^32.
    d.extend_from_slice(&(additional as u32).to_be_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{be32, be64};
    use crate::pr::model::{PrType, Registration, Reservation};
    use crate::transport_id::TransportId;

    fn state() -> PrState {
        let a = Registration {
            initiator: TransportId::iscsi_port("iqn.a:x", [1; 6]),
            port: 1,
            key: 0x1111,
            all_tg_pt: false,
        };
        let b = Registration {
            initiator: TransportId::iscsi_port("iqn.b:y", [2; 6]),
            port: 2,
            key: 0x2222,
            all_tg_pt: true,
        };
        PrState {
            generation: 7,
            aptpl: false,
            reservation: Some(Reservation {
                kind: PrType::WriteExclusiveRegistrantsOnly,
                holder: b.holder(),
            }),
            registrations: vec![a, b],
        }
    }

    #[test]
    fn keys_and_reservation() {
        let d = read_keys(&state());
        assert_eq!(be32(&d, 0), 7);
        assert_eq!(be32(&d, 4), 16);
        assert_eq!((be64(&d, 8), be64(&d, 16)), (0x1111, 0x2222));
        let d = read_reservation(&state());
        assert_eq!(be32(&d, 4), 16);
        assert_eq!(be64(&d, 8), 0x2222);
        assert_eq!(d[21], 0x05);
        assert_eq!(d.len(), 24);
        let d = read_reservation(&PrState::default());
        assert_eq!(d, vec![0; 8]);
    }

    #[test]
    fn capabilities() {
        let d = report_capabilities(true, true);
        assert_eq!(d, vec![0, 8, 0x1D, 0xB1, 0xEA, 0x01, 0, 0]);
        assert_eq!(report_capabilities(false, false)[2] & 1, 0);
    }

    #[test]
    fn full_status_descriptors() {
        let d = read_full_status(&state());
        assert_eq!(be32(&d, 0), 7);
        assert_eq!(be32(&d, 4) as usize, d.len() - 8);
        // First descriptor: not the holder.
        let first = &d[8..];
        assert_eq!(be64(first, 0), 0x1111);
        assert_eq!(first[12], 0);
        assert_eq!(u16::from_be_bytes([first[18], first[19]]), 1);
        let tid_len = be32(first, 20) as usize;
        let (tid, _) = TransportId::parse(&first[24..24 + tid_len]).unwrap();
        assert_eq!(tid.to_string(), "iqn.a:x,i,0x010101010101");
        // Second: holder with ALL_TG_PT, type reported.
        let second = &first[24 + tid_len..];
        assert_eq!(second[12], 0x03);
        assert_eq!(second[13], 0x05);
        assert_eq!(u16::from_be_bytes([second[18], second[19]]), 2);
    }
}
