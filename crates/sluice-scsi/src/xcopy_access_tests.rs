//! EXTENDED COPY under reservations and target port group states. The copy manager reads the
//! source and writes the destination for the I_T nexus that sent the copy, through that
//! nexus's target port: each LU's reservation and ALUA state apply as they would to a READ of
//! the source and a WRITE of the destination from that nexus, and a refusal ends the copy with
//! COPY ABORTED. The LU the copy is sent to judges the EXTENDED COPY itself (a write, in
//! SPC-4's reservations table).

use std::sync::Arc;

use crate::cdb::{self, copy_list, BlockCopy};
use crate::pr::tests::{nexus, out, register, EA, EA_RO, RESERVE, WE, WE_RO};
use crate::sense::SenseKey;
use crate::status::{GOOD, RESERVATION_CONFLICT};
use crate::testutil::*;
use crate::{AccessState, CommandResult, LogicalUnit, ScsiTarget};

/// The copy source (LUN 0), the destination (LUN 1) and the LU the copies are sent to (LUN
/// 2), reached through two target ports in groups 1 and 2; the nexus harness is on LUN 2.
fn three_lus() -> (Harness, Arc<VecDevice>) {
    let devices: Vec<Arc<VecDevice>> = (0..3).map(|_| Arc::new(VecDevice::new(512, 64))).collect();
    let luns = devices
        .iter()
        .enumerate()
        .map(|(i, dev)| {
            let mut cfg = config(Arc::clone(dev), false);
            cfg.naa_id = 0x6001_4050_0000_0001 + i as u64;
            cfg.serial = format!("SN-{i}");
            (i as u16, Arc::new(LogicalUnit::new(cfg)))
        })
        .collect();
    let ports = two_ports([AccessState::ActiveOptimized; 2]);
    let h = Harness {
        target: Arc::new(ScsiTarget::with_ports(luns, ports)),
        dev: Arc::clone(&devices[2]),
        nexus: 1,
        lun: crate::encode_lun(2),
    };
    (h, Arc::clone(&devices[1]))
}

/// `x` on LUN `lun`, its power-on unit attention there consumed.
fn on(x: &Harness, lun: u16) -> Harness {
    let y = Harness {
        lun: crate::encode_lun(lun),
        ..x.clone()
    };
    let _ = y.run(&[0; 6], &[]);
    y
}

/// Sends an EXTENDED COPY of 8 blocks from LUN 0 to LUN 1 to `by`'s LUN.
fn copy(by: &Harness) -> CommandResult {
    let list = copy_list(
        1,
        false,
        &[(1, 3, &LU0, 512), (1, 3, &LU1, 512)],
        &[BlockCopy {
            source: 0,
            destination: 1,
            blocks: 8,
            source_lba: 0,
            destination_lba: 8,
        }],
    );
    by.run(&cdb::extended_copy(list.len() as u32), &list).0
}

/// What a copy ended with: GOOD, RESERVATION CONFLICT, or COPY ABORTED with its ASC/ASCQ.
#[derive(Debug, PartialEq)]
enum Outcome {
    Good,
    Conflict,
    Aborted(u8, u8),
}

fn outcome(r: &CommandResult) -> Outcome {
    match (r.status, &r.sense) {
        (GOOD, _) => Outcome::Good,
        (RESERVATION_CONFLICT, _) => Outcome::Conflict,
        (_, Some(s)) if s.key == SenseKey::COPY_ABORTED => Outcome::Aborted(s.asc, s.ascq),
        _ => panic!("unexpected {r:?}"),
    }
}

/// Not reachable for this I_T nexus: how a copy source or destination refuses the copy
/// manager under a reservation.
const REFUSED: Outcome = Outcome::Aborted(0x0D, 0x02);

/// A persistent reservation of `kind` on LUN `lun` held by another I_T nexus (11), the
/// sender (10) registered or not; then one copy.
fn copy_under(lun: u16, kind: u8, sender_registered: bool) -> (Outcome, Arc<VecDevice>) {
    let (h, destination) = three_lus();
    let sender = nexus(&h, 10, 1);
    let holder = on(&nexus(&h, 11, 1), lun);
    register(&holder, 1);
    if sender_registered {
        register(&on(&sender, lun), 2);
    }
    assert_eq!(out(&holder, RESERVE, kind, 1, 0).status, GOOD);
    (outcome(&copy(&sender)), destination)
}

#[test]
fn the_source_is_read_as_the_sending_nexus_would_read_it() {
    // Write Exclusive lets everyone read; Exclusive Access lets no one else.
    assert_eq!(copy_under(0, WE, false).0, Outcome::Good);
    assert_eq!(copy_under(0, EA, false).0, REFUSED);
    assert_eq!(
        copy_under(0, EA, true).0,
        REFUSED,
        "registered, not the holder"
    );
    // Exclusive Access, registrants only: a registered sender reads.
    assert_eq!(copy_under(0, EA_RO, true).0, Outcome::Good);
    assert_eq!(copy_under(0, EA_RO, false).0, REFUSED);
}

#[test]
fn the_destination_is_written_as_the_sending_nexus_would_write_it() {
    let (refused, destination) = copy_under(1, WE, true);
    assert_eq!(refused, REFUSED);
    assert!(
        destination.data.lock().unwrap().iter().all(|&b| b == 0),
        "nothing written"
    );
    assert_eq!(copy_under(1, WE_RO, true).0, Outcome::Good);
    assert_eq!(copy_under(1, WE_RO, false).0, REFUSED);
    assert_eq!(copy_under(1, EA, false).0, REFUSED);
}

#[test]
fn the_holder_copies_and_the_copy_managers_lu_judges_the_command() {
    // The sender holds Exclusive Access on both ends.
    let (h, _) = three_lus();
    let sender = nexus(&h, 10, 1);
    for lun in [0, 1] {
        let x = on(&sender, lun);
        register(&x, 5);
        assert_eq!(out(&x, RESERVE, EA, 5, 0).status, GOOD);
    }
    assert_eq!(outcome(&copy(&sender)), Outcome::Good);
    // Another nexus holds Write Exclusive on the LU the copy is sent to: EXTENDED COPY is a
    // write there, whatever it copies.
    let (h, _) = three_lus();
    let sender = nexus(&h, 10, 1);
    let holder = nexus(&h, 11, 1);
    register(&holder, 1);
    assert_eq!(out(&holder, RESERVE, WE, 1, 0).status, GOOD);
    assert_eq!(outcome(&copy(&sender)), Outcome::Conflict);
}

#[test]
fn reserve6_on_either_end_refuses_the_copy() {
    for lun in [0, 1] {
        let (h, _) = three_lus();
        let sender = nexus(&h, 10, 1);
        on(&nexus(&h, 11, 1), lun).ok(&[0x16, 0, 0, 0, 0, 0], &[]);
        assert_eq!(outcome(&copy(&sender)), REFUSED, "RESERVE(6) on LUN {lun}");
    }
    // The sender's own RESERVE(6) on the destination does not stop it.
    let (h, _) = three_lus();
    let sender = nexus(&h, 10, 1);
    on(&sender, 1).ok(&[0x16, 0, 0, 0, 0, 0], &[]);
    assert_eq!(outcome(&copy(&sender)), Outcome::Good);
}

#[test]
fn the_destination_is_reached_through_the_senders_target_port() {
    let (h, _) = three_lus();
    // LUN 1 goes standby in target port group 2 (SET TARGET PORT GROUPS there).
    let mut stpg = [0u8; 12];
    stpg[0] = 0xA4;
    stpg[1] = 0x0A;
    stpg[6..10].copy_from_slice(&8u32.to_be_bytes());
    on(&nexus(&h, 12, 1), 1).ok(&stpg, &[0, 0, 0, 0, 0x02, 0, 0, 2]);
    // Through port 1 (group 1, active) the copy runs; through port 2 the destination answers
    // as a standby port would a WRITE.
    assert_eq!(outcome(&copy(&nexus(&h, 10, 1))), Outcome::Good);
    assert_eq!(
        outcome(&copy(&nexus(&h, 11, 2))),
        Outcome::Aborted(0x04, 0x0B)
    );
}
