//! RESERVATION CONFLICT for every command this crate implements, under every reservation
//! type, from the holder, a registered and an unregistered I_T nexus, and under a RESERVE
//! reservation: table-driven from the rows of SPC-4's "SPC commands that are allowed in the
//! presence of various reservations" and SBC-3's "SBC commands that are allowed in the
//! presence of various reservations", written out here independently of the device server's
//! own table (`access.rs`).

use crate::opcodes::{Op, COMMANDS};
use crate::status::RESERVATION_CONFLICT;
use crate::testutil::*;

use super::tests::*;

/// One row of the standards' tables: allowed (true) or conflict (false) for a non-holder,
/// under a Write Exclusive / Exclusive Access reservation (from any I_T nexus), under a
/// registrants-only or all-registrants reservation from a registered I_T nexus, and from an
/// unregistered one under the Write Exclusive and Exclusive Access variants of those.
#[derive(Clone, Copy, Debug)]
struct Row {
    we: bool,
    ea: bool,
    registered: bool,
    unregistered_we: bool,
    unregistered_ea: bool,
    /// Allowed while another I_T nexus holds a RESERVE(6)/(10) reservation (SPC-2 5.5.1).
    spc2: bool,
}

const ALLOWED: Row = Row {
    we: true,
    ea: true,
    registered: true,
    unregistered_we: true,
    unregistered_ea: true,
    spc2: false,
};
const READ: Row = Row {
    we: true,
    ea: false,
    registered: true,
    unregistered_we: true,
    unregistered_ea: false,
    spc2: false,
};
const CONFLICT: Row = Row {
    we: false,
    ea: false,
    registered: true,
    unregistered_we: false,
    unregistered_ea: false,
    spc2: false,
};
const ALWAYS: Row = Row {
    spc2: true,
    ..ALLOWED
};

/// The expected row of a CDB (`None`: the test does not know the command, and fails).
fn expected(cdb: &[u8]) -> Option<Row> {
    let b4 = cdb[4];
    Some(match (cdb[0], cdb[1] & 0x1F) {
        // INQUIRY, REQUEST SENSE, REPORT LUNS, REPORT TARGET PORT GROUPS.
        (0x12 | 0x03 | 0xA0, _) | (0xA3, 0x0A) => ALWAYS,
        // TEST UNIT READY, READ CAPACITY(10)/(16), PERSISTENT RESERVE IN.
        (0x00 | 0x25 | 0x5E, _) | (0x9E, 0x10) => ALLOWED,
        // PREVENT ALLOW MEDIUM REMOVAL with PREVENT=0 (SBC-3), allowed under RESERVE too.
        (0x1E, _) if b4 & 0x03 == 0 => ALWAYS,
        (0x1E, _) => CONFLICT,
        // START STOP UNIT: START=1 with POWER CONDITION 0h allowed, otherwise conflict.
        (0x1B, _) if b4 & 0x01 != 0 && b4 >> 4 == 0 => ALLOWED,
        (0x1B, _) => CONFLICT,
        // READ(6/10/12/16), VERIFY(10/12/16), PRE-FETCH(10/16), READ DEFECT DATA(10/12), GET
        // LBA STATUS, MODE SENSE(6/10), REPORT SUPPORTED OPERATION CODES, RECEIVE COPY
        // RESULTS.
        (0x08 | 0x28 | 0xA8 | 0x88 | 0x2F | 0xAF | 0x8F | 0x34 | 0x90 | 0x37 | 0xB7, _)
        | (0x9E, 0x12)
        | (0x1A | 0x5A | 0x84, _)
        | (0xA3, 0x0C) => READ,
        // WRITE(6/10/12/16), WRITE AND VERIFY(10/12/16), ORWRITE, COMPARE AND WRITE, WRITE
        // SAME(10/16), UNMAP, WRITE ATOMIC(16), SANITIZE, SYNCHRONIZE CACHE(10/16), MODE
        // SELECT(6/10), EXTENDED COPY, SET TARGET PORT GROUPS.
        (
            0x0A | 0x2A | 0xAA | 0x8A | 0x2E | 0xAE | 0x8E | 0x8B | 0x89 | 0x41 | 0x93 | 0x42
            | 0x9C | 0x48 | 0x35 | 0x91 | 0x15 | 0x55 | 0x83,
            _,
        )
        | (0xA4, 0x0A) => CONFLICT,
        _ => return None,
    })
}

/// The CDBs to try for one table entry: all zero but the operation code and service action,
/// and for PREVENT ALLOW and START STOP UNIT each variant their rows tell apart.
fn cdbs(opcode: u8, sa: Option<u8>, len: usize) -> Vec<Vec<u8>> {
    let mut c = vec![0u8; len];
    c[0] = opcode;
    c[1] = sa.unwrap_or(0);
    let variants: &[u8] = match opcode {
        // PREVENT=1 (and the other non-zero values).
        0x1E => &[0x01, 0x02, 0x03],
        // START, LOEJ (eject and load), a POWER CONDITION.
        0x1B => &[0x01, 0x02, 0x03, 0x11],
        _ => &[],
    };
    let mut out = vec![c.clone()];
    for &b4 in variants {
        let mut v = c.clone();
        v[4] = b4;
        out.push(v);
    }
    out
}

/// Every implemented command that is not itself a reservation command.
fn commands() -> Vec<Vec<u8>> {
    COMMANDS
        .iter()
        .filter(|c| !matches!(c.op, Op::PersistentReserveOut | Op::Reserve | Op::Release))
        .flat_map(|c| cdbs(c.opcode, c.service_action, c.usage.len()))
        .collect()
}

fn conflicts(h: &Harness, cdb: &[u8]) -> bool {
    h.run(cdb, &[0u8; 4096]).0.status == RESERVATION_CONFLICT
}

#[test]
fn every_command_under_every_persistent_reservation_type() {
    assert!(
        commands().len() >= COMMANDS.len() - 12,
        "the table is walked"
    );
    for kind in [WE, EA, WE_RO, EA_RO, WE_AR, EA_AR] {
        for cdb in commands() {
            let row = expected(&cdb).unwrap_or_else(|| {
                panic!(
                    "no row for {:02x?}: add it from the SPC-4/SBC-3 tables",
                    &cdb[..2]
                )
            });
            let h = Harness::every_command(512, 64);
            let holder = nexus(&h, 10, 1);
            let registered = nexus(&h, 11, 2);
            let unregistered = nexus(&h, 12, 1);
            register(&holder, 1);
            register(&registered, 2);
            assert_eq!(out(&holder, RESERVE, kind, 1, 0).status, 0);
            let what = format!("{:02x?} under type {kind}", &cdb[..5]);
            assert!(!conflicts(&holder, &cdb), "holder: {what}");
            let (reg_ok, unreg_ok) = match kind {
                WE => (row.we, row.we),
                EA => (row.ea, row.ea),
                WE_RO | WE_AR => (row.registered, row.unregistered_we),
                _ => (row.registered, row.unregistered_ea),
            };
            assert_eq!(!conflicts(&registered, &cdb), reg_ok, "registered: {what}");
            assert_eq!(
                !conflicts(&unregistered, &cdb),
                unreg_ok,
                "unregistered: {what}"
            );
        }
    }
}

#[test]
fn every_command_under_a_reserve6_reservation() {
    for cdb in commands() {
        let row = expected(&cdb).expect("row");
        let h = Harness::every_command(512, 64);
        let holder = nexus(&h, 10, 1);
        let other = nexus(&h, 11, 2);
        holder.ok(&[0x16, 0, 0, 0, 0, 0], &[]);
        let what = format!("{:02x?}", &cdb[..5]);
        // The holder may do anything but the persistent reservation commands.
        let holder_ok = cdb[0] != 0x5E;
        assert_eq!(!conflicts(&holder, &cdb), holder_ok, "holder: {what}");
        assert_eq!(!conflicts(&other, &cdb), row.spc2, "other: {what}");
    }
}

/// SPC-4 table "PERSISTENT RESERVE OUT service actions that are allowed in the presence of
/// various reservations", from a non-holder.
#[test]
fn persistent_reserve_out_from_a_non_holder() {
    for kind in [WE, EA, WE_RO, EA_RO] {
        let setup = || {
            let h = Harness::new(512, 64);
            let holder = nexus(&h, 10, 1);
            let registered = nexus(&h, 11, 2);
            let unregistered = nexus(&h, 12, 1);
            register(&holder, 1);
            register(&registered, 2);
            assert_eq!(out(&holder, RESERVE, kind, 1, 0).status, 0);
            (h, registered, unregistered)
        };
        // (service action, registered allowed, unregistered allowed); a registered nexus's
        // RELEASE is allowed and does nothing.
        for (sa, reg_ok, unreg_ok) in [
            (REGISTER, true, true),
            (REGISTER_IGNORE, true, true),
            (RESERVE, false, false),
            (RELEASE, true, false),
            (CLEAR, true, false),
            (PREEMPT, true, false),
            (PREEMPT_AND_ABORT, true, false),
        ] {
            let (_h, registered, unregistered) = setup();
            let r = out(&registered, sa, kind, 2, if sa == REGISTER { 3 } else { 1 });
            assert_eq!(
                r.status != RESERVATION_CONFLICT,
                reg_ok,
                "registered sa {sa} type {kind}"
            );
            let r = out(&unregistered, sa, kind, 0, 4);
            assert_eq!(
                r.status != RESERVATION_CONFLICT,
                unreg_ok,
                "unregistered sa {sa} type {kind}"
            );
        }
    }
}
