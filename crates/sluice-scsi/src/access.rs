//! Which commands may run while the logical unit is reserved or reached through a target
//! port group that is not active: one table, read by the reservation gate and by the ALUA
//! check before a command is dispatched.
//!
//! The table is keyed by operation code (and service action), not by what this crate
//! implements: it names the SPC-4 and SBC-3 commands whose treatment those standards define,
//! so a command added later is already classified. Sources: SPC-4 table "SPC commands that
//! are allowed in the presence of various reservations" and SBC-3 table "SBC commands that are
//! allowed in the presence of various reservations" (persistent reservations); SPC-2 5.5.1
//! (RESERVE/RELEASE reservations); SPC-4 5.15.2.4.4 and 5.15.2.4.5 (standby and unavailable
//! target port groups).

use crate::field::u8_at;

/// How a command fares under a persistent reservation that the I_T nexus sending it does not
/// hold. The columns of the SPC-4/SBC-3 tables reduce to three behaviours:
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum PrClass {
    /// Allowed whatever the reservation (INQUIRY, REPORT LUNS, TEST UNIT READY, ...).
    Allowed,
    /// Reads: allowed through Write Exclusive types, a conflict under Exclusive Access types
    /// unless the I_T nexus is registered and the type is registrants-only or all-registrants.
    ReadLike,
    /// Writes and state changes: allowed only to registered I_T nexuses under
    /// registrants-only and all-registrants types, a conflict otherwise.
    Restricted,
    /// PERSISTENT RESERVE OUT: each service action has its own rule (SPC-4 table
    /// "PERSISTENT RESERVE OUT service actions and valid parameters"), applied by the command.
    PersistentOut,
    /// RESERVE and RELEASE: the command itself applies SPC-4 5.12.3 (CRH=1).
    Legacy,
}

/// What a command may do under reservations and ALUA states.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) struct Access {
    /// Under a persistent reservation the sending I_T nexus does not hold.
    pub(crate) pr: PrClass,
    /// Allowed while another I_T nexus holds a RESERVE(6)/(10) reservation.
    pub(crate) spc2: bool,
    /// Allowed through a target port group in the standby state.
    pub(crate) standby: bool,
    /// Allowed through a target port group in the unavailable state.
    pub(crate) unavailable: bool,
}

const fn a(pr: PrClass, spc2: bool, standby: bool, unavailable: bool) -> Option<Access> {
    Some(Access {
        pr,
        spc2,
        standby,
        unavailable,
    })
}

/// The treatment of the command in `cdb`, or `None` for an operation code the standards'
/// tables do not name (such commands are refused as unsupported before this is asked).
pub(crate) fn classify(cdb: &[u8]) -> Option<Access> {
    use PrClass::*;
    let op = u8_at(cdb, 0);
    let sa = u8_at(cdb, 1) & 0x1F;
    match op {
        // TEST UNIT READY: allowed under persistent reservations (SPC-4), not under SPC-2 ones.
        0x00 => a(Allowed, false, false, false),
        // REQUEST SENSE, INQUIRY, REPORT LUNS: always.
        0x03 | 0x12 | 0xA0 => a(Allowed, true, true, true),
        // LOG SENSE.
        0x4D => a(Allowed, true, true, false),
        // LOG SELECT, MODE SELECT(6)/(10), SEND DIAGNOSTIC: state changes, allowed in standby.
        0x4C | 0x15 | 0x55 | 0x1D => a(Restricted, false, true, false),
        // MODE SENSE(6)/(10), RECEIVE DIAGNOSTIC RESULTS: reads, allowed in standby.
        0x1A | 0x5A | 0x1C => a(ReadLike, false, true, false),
        // READ BUFFER / WRITE BUFFER: only their echo buffer modes pass standby and unavailable.
        0x3C => {
            let echo = matches!(sa, 0x0A | 0x0B);
            a(ReadLike, false, echo, echo)
        }
        0x3B => {
            let echo = sa == 0x0A;
            a(Restricted, false, echo, echo)
        }
        // PERSISTENT RESERVE IN / OUT: allowed in standby; under an SPC-2 reservation they
        // conflict whoever sends them (SPC-2 5.5.1).
        0x5E => a(Allowed, false, true, false),
        0x5F => a(PersistentOut, false, true, false),
        // RESERVE(6)/(10), RELEASE(6)/(10).
        0x16 | 0x56 | 0x17 | 0x57 => a(Legacy, true, false, false),
        // PREVENT ALLOW MEDIUM REMOVAL: allowing is always allowed, preventing is a change.
        0x1E => {
            if u8_at(cdb, 4) & 0x03 == 0 {
                a(Allowed, true, false, false)
            } else {
                a(Restricted, false, false, false)
            }
        }
        // START STOP UNIT: starting (START=1, POWER CONDITION 0h) is allowed (SBC-3).
        0x1B => {
            let b4 = u8_at(cdb, 4);
            if b4 & 0x01 != 0 && b4 >> 4 == 0 {
                a(Allowed, false, false, false)
            } else {
                a(Restricted, false, false, false)
            }
        }
        // READ CAPACITY(10).
        0x25 => a(Allowed, false, false, false),
        // SERVICE ACTION IN(16).
        0x9E => match sa {
            // READ CAPACITY(16), REPORT REFERRALS.
            0x10 | 0x13 => a(Allowed, false, false, false),
            // GET LBA STATUS.
            0x12 => a(ReadLike, false, false, false),
            _ => None,
        },
        // SERVICE ACTION OUT(16): WRITE LONG(16).
        0x9F => a(Restricted, false, false, false),
        // MAINTENANCE IN.
        0xA3 => match sa {
            // REPORT TARGET PORT GROUPS.
            0x0A => a(Allowed, true, true, true),
            // REPORT IDENTIFYING INFORMATION, REPORT ALIASES, REPORT PRIORITY, REPORT TIMESTAMP.
            0x05 | 0x0B | 0x0E | 0x0F => a(Allowed, false, false, false),
            // REPORT SUPPORTED OPERATION CODES, ... TASK MANAGEMENT FUNCTIONS, MANAGEMENT
            // PROTOCOL IN.
            0x0C | 0x0D | 0x10 => a(ReadLike, false, false, false),
            _ => None,
        },
        // MAINTENANCE OUT: SET TARGET PORT GROUPS passes standby and unavailable (it is how
        // an initiator makes the port active); the others are changes.
        0xA4 => {
            let stpg = sa == 0x0A;
            a(Restricted, false, stpg, stpg)
        }
        // SERVICE ACTION IN(12): READ MEDIA SERIAL NUMBER.
        0xAB if sa == 0x01 => a(Allowed, true, false, false),
        // Reads of the medium or of device data: READ(6/10/12/16), READ DEFECT DATA(10/12),
        // VERIFY(10/12/16), PRE-FETCH(10/16), XDREAD(10), READ ATTRIBUTE, RECEIVE COPY
        // RESULTS, SECURITY PROTOCOL IN.
        0x08 | 0x28 | 0xA8 | 0x88 | 0x37 | 0xB7 | 0x2F | 0xAF | 0x8F | 0x34 | 0x90 | 0x52
        | 0x8C | 0x84 | 0xA2 => a(ReadLike, false, false, false),
        // Writes and other changes: WRITE(6/10/12/16), WRITE AND VERIFY(10/12/16), ORWRITE,
        // COMPARE AND WRITE, WRITE SAME(10/16), UNMAP, WRITE ATOMIC(16), SANITIZE, FORMAT
        // UNIT, REASSIGN BLOCKS, SYNCHRONIZE CACHE(10/16), READ LONG(10), WRITE LONG(10),
        // EXTENDED COPY, WRITE ATTRIBUTE, SECURITY PROTOCOL OUT, XDWRITEREAD(10).
        0x0A | 0x2A | 0xAA | 0x8A | 0x2E | 0xAE | 0x8E | 0x8B | 0x89 | 0x41 | 0x93 | 0x42
        | 0x9C | 0x48 | 0x04 | 0x07 | 0x35 | 0x91 | 0x3E | 0x3F | 0x83 | 0x8D | 0xB5 | 0x53 => {
            a(Restricted, false, false, false)
        }
        _ => None,
    }
}

/// What a read of the medium may do (READ(6/10/12/16)): how EXTENDED COPY's copy manager reads
/// a copy source for the I_T nexus that sent the copy.
pub(crate) const MEDIUM_READ: Access = Access {
    pr: PrClass::ReadLike,
    spc2: false,
    standby: false,
    unavailable: false,
};

/// What a write of the medium may do (WRITE(6/10/12/16)): how EXTENDED COPY's copy manager
/// writes a copy destination for the I_T nexus that sent the copy.
pub(crate) const MEDIUM_WRITE: Access = Access {
    pr: PrClass::Restricted,
    spc2: false,
    standby: false,
    unavailable: false,
};

/// The treatment of a command the table does not name: the most restrictive.
pub(crate) const UNLISTED: Access = Access {
    pr: PrClass::Restricted,
    spc2: false,
    standby: false,
    unavailable: false,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcodes::COMMANDS;

    /// Every implemented command is named by the table (none falls to [`UNLISTED`]).
    #[test]
    fn every_implemented_command_is_classified() {
        for c in COMMANDS {
            let mut cdb = [0u8; 16];
            cdb[0] = c.opcode;
            cdb[1] = c.service_action.unwrap_or(0);
            assert!(
                classify(&cdb).is_some(),
                "{:02x}/{:?} is not classified",
                c.opcode,
                c.service_action
            );
        }
    }

    /// The copy manager's reads and writes are treated as READ and WRITE are.
    #[test]
    fn copy_reads_and_writes_are_reads_and_writes() {
        for read in [0x08u8, 0x28, 0xA8, 0x88] {
            assert_eq!(classify(&[read, 0]), Some(MEDIUM_READ));
        }
        for write in [0x0Au8, 0x2A, 0xAA, 0x8A] {
            assert_eq!(classify(&[write, 0]), Some(MEDIUM_WRITE));
        }
    }

    /// Thin provisioning, COMPARE AND WRITE, WRITE ATOMIC, SANITIZE and third-party copy: the
    /// rows SPC-4 5.13.1 and SBC-3 give them (writes conflict, reads pass Write Exclusive
    /// types), never RESERVE/RELEASE-tolerant, and none passes a standby or unavailable
    /// target port group (SPC-4 5.16's lists name none of them).
    #[test]
    fn block_provisioning_copy_and_sanitize_rows() {
        let writes: [(&str, &[u8]); 8] = [
            ("UNMAP", &[0x42, 0]),
            ("WRITE SAME(10)", &[0x41, 0]),
            ("WRITE SAME(16)", &[0x93, 0]),
            ("COMPARE AND WRITE", &[0x89, 0]),
            ("WRITE ATOMIC(16)", &[0x9C, 0]),
            ("SANITIZE overwrite", &[0x48, 0x01]),
            ("SANITIZE block erase", &[0x48, 0x02]),
            ("EXTENDED COPY (LID1)", &[0x83, 0x00]),
        ];
        let reads: [(&str, &[u8]); 2] = [
            ("GET LBA STATUS", &[0x9E, 0x12]),
            ("RECEIVE COPY RESULTS", &[0x84, 0x03]),
        ];
        for (rows, pr) in [
            (&writes[..], PrClass::Restricted),
            (&reads[..], PrClass::ReadLike),
        ] {
            for &(name, cdb) in rows {
                let mut full = [0u8; 16];
                full[..cdb.len()].copy_from_slice(cdb);
                let got = classify(&full).unwrap_or_else(|| panic!("{name} is not classified"));
                assert_eq!(
                    got,
                    Access {
                        pr,
                        spc2: false,
                        standby: false,
                        unavailable: false,
                    },
                    "{name}"
                );
            }
        }
        // Every service action of RECEIVE COPY RESULTS reads.
        for sa in [0x00u8, 0x01, 0x03, 0x04] {
            assert_eq!(classify(&[0x84, sa]).unwrap().pr, PrClass::ReadLike);
        }
    }

    #[test]
    fn field_dependent_rows() {
        // PREVENT=1 is a change, PREVENT=0 is not.
        assert_eq!(
            classify(&[0x1E, 0, 0, 0, 1, 0]).unwrap().pr,
            PrClass::Restricted
        );
        assert_eq!(
            classify(&[0x1E, 0, 0, 0, 0, 0]).unwrap().pr,
            PrClass::Allowed
        );
        // START STOP UNIT: start allowed; stop, eject or a power condition restricted.
        assert_eq!(
            classify(&[0x1B, 0, 0, 0, 0x01, 0]).unwrap().pr,
            PrClass::Allowed
        );
        assert_eq!(
            classify(&[0x1B, 0, 0, 0, 0x03, 0]).unwrap().pr,
            PrClass::Allowed
        );
        assert_eq!(
            classify(&[0x1B, 0, 0, 0, 0x02, 0]).unwrap().pr,
            PrClass::Restricted
        );
        assert_eq!(
            classify(&[0x1B, 0, 0, 0, 0x11, 0]).unwrap().pr,
            PrClass::Restricted
        );
        // Echo buffer modes only.
        assert!(classify(&[0x3C, 0x0A]).unwrap().unavailable);
        assert!(!classify(&[0x3C, 0x02]).unwrap().standby);
        // Unknown service actions are not in the table.
        assert_eq!(classify(&[0x9E, 0x1F]), None);
        assert_eq!(classify(&[0xFF]), None);
    }

    #[test]
    fn standby_and_unavailable_lists() {
        let standby: Vec<u8> = (0..=255u8)
            .filter(|&op| classify(&[op, 0x0A]).is_some_and(|x| x.standby))
            .collect();
        // With service action / mode 0Ah: READ BUFFER, WRITE BUFFER echo; MAINTENANCE IN
        // REPORT TARGET PORT GROUPS; MAINTENANCE OUT SET TARGET PORT GROUPS.
        assert_eq!(
            standby,
            vec![
                0x03, 0x12, 0x15, 0x1A, 0x1C, 0x1D, 0x3B, 0x3C, 0x4C, 0x4D, 0x55, 0x5A, 0x5E, 0x5F,
                0xA0, 0xA3, 0xA4
            ]
        );
        let unavailable: Vec<u8> = (0..=255u8)
            .filter(|&op| classify(&[op, 0x0A]).is_some_and(|x| x.unavailable))
            .collect();
        assert_eq!(unavailable, vec![0x03, 0x12, 0x3B, 0x3C, 0xA0, 0xA3, 0xA4]);
        // TEST UNIT READY reports the state instead (how initiators probe a standby path).
        assert!(!classify(&[0x00]).unwrap().standby);
    }
}
