//! REQUEST SENSE, START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL, PRE-FETCH, SYNCHRONIZE
//! CACHE and READ DEFECT DATA.

use bytes::BytesMut;

use crate::field::{be16, be32, put_truncated, u8_at};
use crate::lu::{storage_sense, Cmd, CmdResult};
use crate::rw::{check_range, decode};
use crate::sense::{
    invalid_field_in_cdb, invalid_opcode, medium_not_present, medium_removal_prevented,
    unit_attention, SenseData, SenseFormat, SenseKey,
};
use crate::unit_attention::MEDIUM_MAY_HAVE_CHANGED;

/// REQUEST SENSE (SPC-4 6.39): reports (and clears) the next pending unit attention of the
/// nexus; else, while a sanitize runs, NOT READY / SANITIZE IN PROGRESS with its progress;
/// else, while a removable medium is ejected, NOT READY / MEDIUM NOT PRESENT (the
/// condition that would end a medium-access command); else NO SENSE. Sense is delivered
/// autosense-style by the transport, so there is no other saved sense to report. DESC
/// selects the format.
pub(crate) fn request_sense(cmd: &mut Cmd<'_>) -> CmdResult {
    let sense = {
        let mut st = cmd.lu.state();
        match st.ua.take(cmd.nexus) {
            Some((asc, ascq)) => Some(unit_attention(asc, ascq)),
            // SBC-4 4.11.2: the progress of a running sanitize.
            None => st
                .sanitize
                .sense()
                .or_else(|| (!st.medium_present).then(medium_not_present)),
        }
    };
    request_sense_data(cmd.cdb, cmd.data_in, sense)
}

/// Writes `sense` (or NO SENSE) as REQUEST SENSE parameter data.
pub(crate) fn request_sense_data(
    cdb: &[u8],
    out: &mut BytesMut,
    sense: Option<SenseData>,
) -> CmdResult {
    let format = if u8_at(cdb, 1) & 0x01 != 0 {
        SenseFormat::Descriptor
    } else {
        SenseFormat::Fixed
    };
    let sense = sense.unwrap_or_else(|| SenseData::new(SenseKey::NO_SENSE, 0, 0));
    put_truncated(
        out,
        &sense.with_format(format).to_bytes(),
        usize::from(u8_at(cdb, 4)),
    );
    Ok(())
}

/// START STOP UNIT (SBC-3 5.25).
///
/// Non-removable LU (always ready): a POWER CONDITION other than 0h is accepted when SBC-3
/// defines it (START and LOEJ are then ignored); START is accepted either way; LOEJ=1 asks to
/// load or eject a medium that cannot be removed, which is an INVALID FIELD IN CDB.
///
/// Removable LU: see [`start_stop_removable`].
pub(crate) fn start_stop_unit(cmd: &mut Cmd<'_>) -> CmdResult {
    if cmd.lu.removable() {
        return start_stop_removable(cmd);
    }
    let b4 = u8_at(cmd.cdb, 4);
    match b4 >> 4 {
        0x0 => {
            if b4 & 0x02 != 0 {
                return Err(invalid_field_in_cdb(4, Some(1)));
            }
            Ok(())
        }
        0x1 | 0x2 | 0x3 | 0x7 | 0xA | 0xB => Ok(()),
        _ => Err(invalid_field_in_cdb(4, Some(7))),
    }
}

/// START STOP UNIT on a removable LU.
///
/// * POWER CONDITION ≠ 0h: GOOD, and START and LOEJ are ignored (SBC-3 5.25); the LU has no
///   power conditions to enter, so every value, the reserved ones included, is a no-op (as
///   tgt does; libiscsi's StartStopUnit.PwrCnd expects GOOD for 1h–Fh).
/// * LOEJ=0: GOOD, the medium stays as it is (the LU is always spun up).
/// * LOEJ=1: refused with ILLEGAL REQUEST / MEDIUM REMOVAL PREVENTED while any I_T nexus
///   holds a PREVENT (for a load as well as an eject); otherwise START=0 flushes the cache
///   (unless NO_FLUSH=1) and ejects, START=1 loads. Loading an absent medium establishes
///   NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED (28h/00h) for the other nexuses.
///   Ejecting an absent or loading a present medium is GOOD.
///
/// IMMED is accepted; the operation completes before the status either way.
fn start_stop_removable(cmd: &mut Cmd<'_>) -> CmdResult {
    let b4 = u8_at(cmd.cdb, 4);
    if b4 >> 4 != 0 || b4 & 0x02 == 0 {
        return Ok(());
    }
    let load = b4 & 0x01 != 0;
    let no_flush = b4 & 0x04 != 0;
    if cmd.lu.removal_prevented() {
        return Err(medium_removal_prevented());
    }
    if !load && !no_flush && cmd.lu.medium_present() {
        cmd.lu
            .device()
            .flush()
            .map_err(|e| storage_sense(&e, true))?;
    }
    let mut st = cmd.lu.state();
    if !st.prevent.is_empty() {
        return Err(medium_removal_prevented());
    }
    if load && !st.medium_present {
        st.ua
            .establish_others(Some(cmd.nexus), MEDIUM_MAY_HAVE_CHANGED);
    }
    st.medium_present = load;
    Ok(())
}

/// PREVENT ALLOW MEDIUM REMOVAL (SBC-3 5.12): PREVENT 00b allows, 01b prevents; the state
/// is kept per I_T nexus and dropped when the nexus goes or the LU is reset.
pub(crate) fn prevent_allow(cmd: &mut Cmd<'_>) -> CmdResult {
    let prevent = u8_at(cmd.cdb, 4) & 0x03;
    let mut st = cmd.lu.state();
    match prevent {
        0b00 => {
            st.prevent.remove(&cmd.nexus);
        }
        0b01 => {
            st.prevent.insert(cmd.nexus);
        }
        _ => return Err(invalid_field_in_cdb(4, Some(1))),
    }
    Ok(())
}

/// PRE-FETCH(10/16) (SBC-3 5.9, 5.10): range check, then GOOD. Nothing is cached, so
/// CONDITION MET (which initiators such as libiscsi count as a failure) is never returned.
pub(crate) fn pre_fetch(cmd: &mut Cmd<'_>) -> CmdResult {
    let b = decode(cmd.cdb).ok_or_else(invalid_opcode)?;
    check_range(cmd.lu, b.lba, b.blocks)
}

/// SYNCHRONIZE CACHE(10/16) (SBC-3 5.22, 5.23): range check (0 blocks means to the end of
/// the LU), then flush the device. IMMED is accepted; the flush completes before GOOD.
pub(crate) fn synchronize_cache(cmd: &mut Cmd<'_>) -> CmdResult {
    synchronize_cache_checks(cmd.lu, cmd.cdb)?;
    cmd.lu.device().flush().map_err(|e| storage_sense(&e, true))
}

/// The checks of SYNCHRONIZE CACHE(10/16) before its flush: the range it names.
pub(crate) fn synchronize_cache_checks(lu: &crate::lu::LogicalUnit, cdb: &[u8]) -> CmdResult {
    let b = decode(cdb).ok_or_else(invalid_opcode)?;
    check_range(lu, b.lba, b.blocks)
}

/// READ DEFECT DATA(10) and (12) (SBC-3 5.17, 5.18): the LU has no defects, so the answer
/// is a defect list header with an empty list. PLISTV and GLISTV echo REQ_PLIST and
/// REQ_GLIST (the complete, empty list of each kind requested is returned) and the DEFECT LIST
/// FORMAT echoes the requested format, which any empty list satisfies; the reserved format
/// 111b is an INVALID FIELD IN CDB. The (12) header carries GENERATION CODE 0 (not
/// supported); its ADDRESS DESCRIPTOR INDEX is accepted and, the list being empty, changes
/// nothing.
pub(crate) fn read_defect_data(cmd: &mut Cmd<'_>) -> CmdResult {
    let twelve = u8_at(cmd.cdb, 0) == crate::cdb::opcode::READ_DEFECT_DATA_12;
    let flags_byte = if twelve { 1 } else { 2 };
    let flags = u8_at(cmd.cdb, flags_byte) & 0x1F;
    if flags & 0x07 == 0x07 {
        return Err(invalid_field_in_cdb(flags_byte as u16, Some(2)));
    }
    let (header, alloc): (&[u8], usize) = if twelve {
        (&[0, flags, 0, 0, 0, 0, 0, 0], be32(cmd.cdb, 6) as usize)
    } else {
        (&[0, flags, 0, 0], usize::from(be16(cmd.cdb, 7)))
    };
    put_truncated(cmd.data_in, header, alloc);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::cdb;
    use crate::testutil::*;

    #[test]
    fn request_sense_reports_and_clears_unit_attention() {
        let t = Harness::new(512, 10);
        let n = t.nexus(9);
        let d = n.ok(&[0x03, 0, 0, 0, 252, 0], &[]);
        assert_eq!(d.len(), 18);
        assert_eq!((d[0], d[2], d[12], d[13]), (0x70, 6, 0x29, 0));
        n.ok(&[0; 6], &[]);
        let d = n.ok(&[0x03, 1, 0, 0, 252, 0], &[]);
        assert_eq!(d, vec![0x72, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(n.ok(&[0x03, 0, 0, 0, 4, 0], &[]).len(), 4);
        assert_ifc(&n.check(&[0x03, 2, 0, 0, 4, 0], &[]), true, 1, Some(1));
    }

    #[test]
    fn start_stop_unit_power_conditions() {
        let t = Harness::new(512, 10);
        for b4 in [
            0x00u8, 0x01, 0x04, 0x05, 0x10, 0x13, 0x23, 0x33, 0x73, 0xA0, 0xB3,
        ] {
            t.ok(&[0x1B, 1, 0, 0, b4, 0], &[]);
            t.ok(&[0; 6], &[]);
        }
        assert_ifc(&t.check(&[0x1B, 0, 0, 0, 0x02, 0], &[]), true, 4, Some(1));
        assert_ifc(&t.check(&[0x1B, 0, 0, 0, 0x50, 0], &[]), true, 4, Some(7));
        assert_ifc(&t.check(&[0x1B, 0, 0, 0x10, 0, 0], &[]), true, 3, Some(4));
    }

    #[test]
    fn prevent_is_per_nexus_and_dropped() {
        let t = Harness::new(512, 10);
        let lu = t.lu();
        t.ok(&[0x1E, 0, 0, 0, 1, 0], &[]);
        assert!(lu.removal_prevented());
        t.ok(&[0x1E, 0, 0, 0, 0, 0], &[]);
        assert!(!lu.removal_prevented());
        t.ok(&[0x1E, 0, 0, 0, 1, 0], &[]);
        t.target.nexus_gone(1);
        assert!(!lu.removal_prevented());
        let _ = t.run(&[0; 6], &[]);
        t.ok(&[0x1E, 0, 0, 0, 1, 0], &[]);
        t.target.reset(crate::ResetKind::TargetWarm, 1);
        assert!(!lu.removal_prevented());
        let _ = t.run(&[0; 6], &[]);
        assert_ifc(&t.check(&[0x1E, 0, 0, 0, 2, 0], &[]), true, 4, Some(1));
    }

    const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];
    const LOAD: [u8; 6] = [0x1B, 0, 0, 0, 0x03, 0];
    const PREVENT: [u8; 6] = [0x1E, 0, 0, 0, 1, 0];
    const ALLOW: [u8; 6] = [0x1E, 0, 0, 0, 0, 0];

    fn assert_no_medium(s: &crate::SenseData) {
        assert_eq!((s.key.0, s.asc, s.ascq), (2, 0x3A, 0), "{s}");
    }

    fn assert_prevented(s: &crate::SenseData) {
        assert_illegal(s, 0x53, 0x02);
    }

    #[test]
    fn removable_lu_reports_rmb_and_non_removable_does_not() {
        let t = Harness::removable(512, 10);
        assert_eq!(t.ok(&cdb::inquiry(None, 36), &[])[1], 0x80);
        assert!(t.lu().removable() && t.lu().medium_present());
        let t = Harness::new(512, 10);
        assert_eq!(t.ok(&cdb::inquiry(None, 36), &[])[1], 0x00);
        // Non-removable: LOEJ stays an invalid field and nothing is ever ejected.
        assert_ifc(&t.check(&EJECT, &[]), true, 4, Some(1));
        t.ok(&PREVENT, &[]);
        assert_ifc(&t.check(&LOAD, &[]), true, 4, Some(1));
        t.ok(&[0; 6], &[]);
    }

    #[test]
    fn eject_fails_medium_commands_and_load_restores_them() {
        let t = Harness::removable(512, 100);
        t.ok(&cdb::write10(0, 1, false), &[7; 512]);
        t.ok(&[0x1B, 1, 0, 0, 0x02, 0], &[]); // IMMED=1
        assert!(!t.lu().medium_present());
        let mut orw = cdb::orwrite16(0, 1, false).to_vec();
        let mut verify = cdb::read10(0, 1, false).to_vec();
        verify[0] = 0x2F;
        let mut wv = cdb::read10(0, 1, false).to_vec();
        wv[0] = 0x2E;
        let mut pf16 = cdb::read16(0, 1, false).to_vec();
        pf16[0] = 0x90;
        let mut sc16 = cdb::read16(0, 1, false).to_vec();
        sc16[0] = 0x91;
        for (c, out) in [
            (cdb::test_unit_ready().to_vec(), 0usize),
            (cdb::read10(0, 1, false).to_vec(), 0),
            (cdb::read16(0, 1, false).to_vec(), 0),
            (vec![0xA8, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0], 0),
            (vec![0x08, 0, 0, 0, 1, 0], 0),
            (cdb::write10(0, 1, false).to_vec(), 512),
            (cdb::write16(0, 1, false).to_vec(), 512),
            (std::mem::take(&mut orw), 512),
            (std::mem::take(&mut verify), 0),
            (std::mem::take(&mut wv), 512),
            (cdb::read_capacity10().to_vec(), 0),
            (cdb::read_capacity16(32).to_vec(), 0),
            (cdb::sync_cache10(0, 1, true).to_vec(), 0),
            (std::mem::take(&mut sc16), 0),
            (vec![0x34, 0, 0, 0, 0, 0, 0, 0, 1, 0], 0),
            (std::mem::take(&mut pf16), 0),
            (vec![0x37, 0, 0, 0, 0, 0, 0, 0, 32, 0], 0),
        ] {
            assert_no_medium(&t.check(&c, &vec![0xEE; out]));
        }
        // Invalid CDBs are still judged first; unimplemented opcodes stay unimplemented.
        assert_ifc(&t.check(&[0, 0, 0, 0, 0, 4], &[]), true, 5, Some(2));
        assert_illegal(&t.check(&[0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]), 0x20, 0);
        // What works without a medium.
        t.ok(&cdb::inquiry(None, 36), &[]);
        t.ok(&cdb::inquiry(Some(0x80), 255), &[]);
        t.ok(&cdb::report_luns(0, 64), &[]);
        t.ok(&cdb::mode_sense6(false, 0, 0x3F, 0, 255), &[]);
        t.ok(&[0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[]);
        t.ok(&PREVENT, &[]);
        t.ok(&ALLOW, &[]);
        let d = t.ok(&[0x03, 0, 0, 0, 252, 0], &[]);
        assert_eq!((d[2], d[12], d[13]), (2, 0x3A, 0));
        // Ejecting again is harmless; LOEJ=0 and power conditions do not load.
        t.ok(&EJECT, &[]);
        t.ok(&[0x1B, 0, 0, 0, 0x01, 0], &[]);
        t.ok(&[0x1B, 0, 0, 0, 0x11, 0], &[]);
        assert_no_medium(&t.check(&[0; 6], &[]));
        // Another nexus: its power-on unit attention comes first, then NOT READY.
        let other = t.nexus(2);
        assert_eq!(other.check(&[0; 6], &[]).asc, 0x29);
        assert_no_medium(&other.check(&[0; 6], &[]));
        t.ok(&LOAD, &[]);
        assert!(t.lu().medium_present());
        t.ok(&[0; 6], &[]);
        assert_eq!(t.ok(&cdb::read10(0, 1, false), &[]), vec![7; 512]);
        assert_eq!(t.ok(&[0x03, 0, 0, 0, 252, 0], &[])[2], 0);
        // The other nexus learns that the medium may have changed.
        let s = other.check(&[0; 6], &[]);
        assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x28, 0));
        other.ok(&[0; 6], &[]);
        // Loading a loaded medium raises nothing.
        t.ok(&[0x1B, 1, 0, 0, 0x03, 0], &[]);
        other.ok(&[0; 6], &[]);
    }

    #[test]
    fn eject_flushes_unless_no_flush() {
        let t = Harness::removable(512, 10);
        t.ok(&EJECT, &[]);
        assert_eq!(t.dev.flushes.load(Ordering::Relaxed), 1);
        t.ok(&EJECT, &[]); // nothing loaded, nothing to flush
        t.ok(&LOAD, &[]);
        t.ok(&[0x1B, 0, 0, 0, 0x06, 0], &[]); // NO_FLUSH=1
        assert_eq!(t.dev.flushes.load(Ordering::Relaxed), 1);
        t.ok(&LOAD, &[]);
        t.dev.fail.store(true, Ordering::Relaxed);
        assert_eq!(t.check(&EJECT, &[]).key.0, 3);
        assert!(t.lu().medium_present());
    }

    #[test]
    fn removable_power_conditions_and_loej_zero_never_eject() {
        let t = Harness::removable(512, 10);
        for pc in 1..16u8 {
            t.ok(&[0x1B, 1, 0, 0, (pc << 4) | 0x02, 0], &[]);
            t.ok(&[0; 6], &[]);
        }
        for b1 in [0u8, 1] {
            for b4 in [0x00u8, 0x01, 0x04, 0x05] {
                t.ok(&[0x1B, b1, 0, 0, b4, 0], &[]);
                t.ok(&[0; 6], &[]);
            }
        }
        assert!(t.lu().medium_present());
        assert_ifc(&t.check(&[0x1B, 0, 0, 0x10, 0, 0], &[]), true, 3, Some(4));
    }

    #[test]
    fn prevent_blocks_eject_and_load_from_every_nexus() {
        let t = Harness::removable(512, 10);
        let other = t.nexus(2);
        let _ = other.run(&[0; 6], &[]);
        t.ok(&PREVENT, &[]);
        assert_prevented(&t.check(&EJECT, &[]));
        assert_prevented(&other.check(&EJECT, &[]));
        t.ok(&[0; 6], &[]);
        // The other nexus cannot lift this nexus's prevent.
        other.ok(&ALLOW, &[]);
        assert_prevented(&other.check(&EJECT, &[]));
        t.ok(&ALLOW, &[]);
        t.ok(&EJECT, &[]);
        assert_no_medium(&t.check(&[0; 6], &[]));
        // Prevent while ejected blocks the load too.
        t.ok(&PREVENT, &[]);
        assert_prevented(&t.check(&LOAD, &[]));
        assert_no_medium(&t.check(&[0; 6], &[]));
        // Both nexuses prevent: both must allow.
        other.ok(&PREVENT, &[]);
        t.ok(&ALLOW, &[]);
        assert_prevented(&t.check(&LOAD, &[]));
        other.ok(&ALLOW, &[]);
        t.ok(&LOAD, &[]);
        t.ok(&[0; 6], &[]);
    }

    #[test]
    fn prevent_released_by_nexus_loss_and_resets() {
        let t = Harness::removable(512, 10);
        let eject_after = |release: &dyn Fn(&Harness)| {
            t.ok(&PREVENT, &[]);
            assert_prevented(&t.check(&EJECT, &[]));
            release(&t);
            // Drain whatever unit attention the release left for this nexus.
            while !t.run(&[0; 6], &[]).0.is_good() {}
            t.ok(&EJECT, &[]);
            assert_no_medium(&t.check(&[0; 6], &[]));
            t.ok(&LOAD, &[]);
            t.ok(&[0; 6], &[]);
        };
        eject_after(&|h| h.target.nexus_gone(h.nexus));
        eject_after(&|h| assert!(h.target.reset(crate::ResetKind::LogicalUnit(0), 1)));
        eject_after(&|h| assert!(h.target.reset(crate::ResetKind::TargetWarm, 1)));
        eject_after(&|h| assert!(h.target.reset(crate::ResetKind::TargetCold, 1)));
        // A reset keeps the medium where it is.
        t.ok(&EJECT, &[]);
        t.target.reset(crate::ResetKind::TargetCold, 1);
        assert_eq!(t.check(&[0; 6], &[]).asc, 0x29);
        assert_no_medium(&t.check(&[0; 6], &[]));
        t.ok(&LOAD, &[]);
    }

    #[test]
    fn read_defect_data_returns_an_empty_list() {
        let t = Harness::new(512, 10);
        let rdd10 = |b2: u8, alloc: u16| {
            let mut c = [0x37u8, 0, b2, 0, 0, 0, 0, 0, 0, 0];
            c[7..9].copy_from_slice(&alloc.to_be_bytes());
            c
        };
        let rdd12 = |b1: u8, index: u32, alloc: u32| {
            let mut c = [0xB7u8, b1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            c[2..6].copy_from_slice(&index.to_be_bytes());
            c[6..10].copy_from_slice(&alloc.to_be_bytes());
            c
        };
        assert_eq!(t.ok(&rdd10(0, 32), &[]), vec![0, 0, 0, 0]);
        for flags in [0x00u8, 0x08, 0x10, 0x18] {
            for format in [0u8, 3, 4, 5, 6] {
                let b = flags | format;
                assert_eq!(t.ok(&rdd10(b, 512), &[]), vec![0, b, 0, 0]);
                assert_eq!(t.ok(&rdd12(b, 0, 512), &[]), vec![0, b, 0, 0, 0, 0, 0, 0]);
            }
        }
        assert_eq!(t.ok(&rdd10(0x18, 2), &[]), vec![0, 0x18]);
        assert!(t.ok(&rdd10(0x18, 0), &[]).is_empty());
        assert_eq!(t.ok(&rdd12(0x1D, 7, 5), &[]), vec![0, 0x1D, 0, 0, 0]);
        assert!(t.ok(&rdd12(0, 0, 0), &[]).is_empty());
        assert_ifc(&t.check(&rdd10(0x07, 32), &[]), true, 2, Some(2));
        assert_ifc(&t.check(&rdd12(0x1F, 0, 32), &[]), true, 1, Some(2));
        assert_ifc(&t.check(&rdd10(0x20, 32), &[]), true, 2, Some(5));
        let mut c = rdd10(0, 32);
        c[1] = 0x01;
        assert_ifc(&t.check(&c, &[]), true, 1, Some(0));
        assert_ifc(&t.check(&rdd12(0x80, 0, 32), &[]), true, 1, Some(7));
    }

    #[test]
    fn pre_fetch_is_good_in_range() {
        let t = Harness::new(512, 100);
        for op in [0x34u8, 0x90] {
            let c = |lba: u64, n: u32, b1: u8, group: u8| {
                let mut c = if op == 0x34 {
                    cdb::read10(lba as u32, n as u16, false).to_vec()
                } else {
                    cdb::read16(lba, n, false).to_vec()
                };
                c[0] = op;
                c[1] = b1;
                let g = if op == 0x34 { 6 } else { 14 };
                c[g] = group;
                c
            };
            let (r, _) = t.run(&c(0, 100, 0, 0), &[]);
            assert_eq!(r.status, 0);
            t.ok(&c(99, 1, 0x02, 3), &[]);
            t.ok(&c(100, 0, 0, 0), &[]);
            assert_illegal(&t.check(&c(101, 0, 0, 0), &[]), 0x21, 0);
            assert_illegal(&t.check(&c(99, 2, 0, 0), &[]), 0x21, 0);
            assert_illegal(&t.check(&c(u64::from(u32::MAX), 1, 0, 0), &[]), 0x21, 0);
        }
    }

    #[test]
    fn synchronize_cache_flushes() {
        let t = Harness::new(512, 100);
        t.ok(&cdb::sync_cache10(0, 0, false), &[]);
        t.ok(&cdb::sync_cache10(50, 50, true), &[]);
        let mut c16 = cdb::read16(0, 0, false);
        c16[0] = 0x91;
        t.ok(&c16, &[]);
        assert_eq!(t.dev.flushes.load(Ordering::Relaxed), 3);
        assert_illegal(&t.check(&cdb::sync_cache10(101, 0, false), &[]), 0x21, 0);
        assert_illegal(&t.check(&cdb::sync_cache10(50, 51, false), &[]), 0x21, 0);
        t.dev.fail.store(true, Ordering::Relaxed);
        assert_eq!(t.check(&cdb::sync_cache10(0, 0, false), &[]).key.0, 3);
    }
}
