//! REQUEST SENSE, START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL, PRE-FETCH and SYNCHRONIZE
//! CACHE.

use bytes::BytesMut;

use crate::field::{put_truncated, u8_at};
use crate::lu::{storage_sense, Cmd, CmdResult};
use crate::rw::{check_range, decode};
use crate::sense::{
    invalid_field_in_cdb, invalid_opcode, unit_attention, SenseData, SenseFormat, SenseKey,
};

/// REQUEST SENSE (SPC-4 6.39): reports (and clears) the next pending unit attention of the
/// nexus, else NO SENSE. Sense is delivered autosense-style by the transport, so there is no
/// other saved sense to report. DESC selects the format.
pub(crate) fn request_sense(cmd: &mut Cmd<'_>) -> CmdResult {
    let pending = cmd.lu.state().ua.take(cmd.nexus);
    let sense = pending.map(|(asc, ascq)| unit_attention(asc, ascq));
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

/// START STOP UNIT (SBC-3 5.25) on a non-removable LU that is always ready.
///
/// A POWER CONDITION other than 0h is accepted when SBC-3 defines it (START and LOEJ are then
/// ignored); START is accepted either way; LOEJ=1 asks to load or eject a medium that cannot
/// be removed, which is an INVALID FIELD IN CDB.
pub(crate) fn start_stop_unit(cmd: &mut Cmd<'_>) -> CmdResult {
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
    let b = decode(cmd.cdb).ok_or_else(invalid_opcode)?;
    check_range(cmd.lu, b.lba, b.blocks)?;
    cmd.lu.device().flush().map_err(|e| storage_sense(&e, true))
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
