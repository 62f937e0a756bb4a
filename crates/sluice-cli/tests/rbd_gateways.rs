//! Two `sluice target` gateways exporting one RBD image against a real single-node Ceph
//! cluster (scripts/ceph-cluster): persistent reservations live in the image's shared RADOS
//! object, so a registration and reservation made through gateway A is reported by gateway B
//! (READ KEYS, READ RESERVATION, the same PRGENERATION), a conflicting WRITE through B meets
//! RESERVATION CONFLICT, and the state survives both gateways restarting.

mod support;

use sluice_initiator::blocking::Session;
use sluice_initiator::{Command, ConnectOptions, IscsiUrl, ScsiStatus};
use sluice_test_support::CephCluster;
use support::TargetProcess;

/// Starts one gateway exporting `rbd/IMAGE` as LUN 0 of the default target name.
fn gateway(c: &CephCluster, image: &str) -> TargetProcess {
    let conf = c.conf_file().display().to_string();
    let keyring = c.keyring("sluice").display().to_string();
    let spec = format!("rbd/{image}");
    TargetProcess::start(&[
        "--rbd",
        &spec,
        "--ceph-conf",
        &conf,
        "--ceph-id",
        "sluice",
        "--ceph-keyring",
        &keyring,
    ])
}

fn session(t: &TargetProcess, initiator: &str) -> Session {
    let opts = ConnectOptions {
        initiator_name: initiator.into(),
        ..ConnectOptions::default()
    };
    let s = Session::connect_url_with(&IscsiUrl::parse(&t.url).unwrap(), opts).unwrap();
    // Takes the new nexus's power-on unit attention.
    let _ = s.execute(Command::read(0, &[0; 6], 0));
    s
}

/// PERSISTENT RESERVE OUT `action` (SPC-4 6.16) with a 24-byte parameter list.
fn prout(s: &Session, action: u8, kind: u8, key: u64, sa_key: u64, aptpl: bool) -> ScsiStatus {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x5F;
    cdb[1] = action;
    cdb[2] = kind;
    cdb[8] = 24;
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    list[20] = u8::from(aptpl);
    s.execute(Command::write(0, &cdb, list)).unwrap().status
}

/// PERSISTENT RESERVE IN `action`: the data returned.
fn prin(s: &Session, action: u8) -> Vec<u8> {
    let cdb = [0x5E, action, 0, 0, 0, 0, 0, 0x10, 0, 0];
    let out = s.execute(Command::read(0, &cdb, 4096)).unwrap();
    assert_eq!(out.status, ScsiStatus::Good, "{out:?}");
    out.data.to_vec()
}

fn write_status(s: &Session) -> ScsiStatus {
    let cdb = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    s.execute(Command::write(0, &cdb, vec![0x5a; 512]))
        .unwrap()
        .status
}

#[test]
fn reservations_are_shared_between_gateways_and_survive_restarts() {
    let c = CephCluster::start();
    c.create_image("shared-pr", 16);
    let a = gateway(&c, "shared-pr");
    let b = gateway(&c, "shared-pr");
    let holder_a = session(&a, "iqn.2026-11.test:holder");
    let other_b = session(&b, "iqn.2026-11.test:other");
    let keys_before = prin(&other_b, 0);

    // REGISTER (key 0xAB, APTPL) and RESERVE Write Exclusive through A.
    assert_eq!(prout(&holder_a, 0x00, 0, 0, 0xAB, true), ScsiStatus::Good);
    assert_eq!(
        prout(&holder_a, 0x01, 0x01, 0xAB, 0, false),
        ScsiStatus::Good
    );

    // B enforces it before anything else asked it to read the state again (the notify did):
    // a write from an unregistered initiator conflicts.
    assert_eq!(write_status(&other_b), ScsiStatus::ReservationConflict);

    // B reports them at once: PRGENERATION, the key, the reservation and its type.
    let keys = prin(&other_b, 0);
    assert_eq!(&keys[4..8], &8u32.to_be_bytes(), "one key: {keys:?}");
    assert_eq!(&keys[8..16], &0xABu64.to_be_bytes());
    assert_ne!(keys[..4], keys_before[..4], "PRGENERATION moved");
    assert_eq!(prin(&holder_a, 0), keys, "A and B agree");
    let res = prin(&other_b, 1);
    assert_eq!(&res[4..8], &16u32.to_be_bytes(), "a reservation: {res:?}");
    assert_eq!(&res[8..16], &0xABu64.to_be_bytes());
    assert_eq!(res[21] & 0x0F, 0x01, "Write Exclusive");

    // The holder's own write succeeds.
    assert_eq!(write_status(&holder_a), ScsiStatus::Good);

    // Both gateways restart: the state is still there.
    drop((holder_a, other_b));
    drop((a, b));
    let a = gateway(&c, "shared-pr");
    let b = gateway(&c, "shared-pr");
    let other_b = session(&b, "iqn.2026-11.test:other");
    let other_a = session(&a, "iqn.2026-11.test:other");
    assert_eq!(prin(&other_b, 0), keys, "after restart through B");
    assert_eq!(prin(&other_a, 0), keys, "after restart through A");
    assert_eq!(write_status(&other_b), ScsiStatus::ReservationConflict);

    // A change through B reaches A: the holder, now through B, registers a new key
    // (REGISTER AND IGNORE EXISTING KEY) and CLEARs every registration and the reservation.
    let holder_b = session(&b, "iqn.2026-11.test:holder");
    assert_eq!(prout(&holder_b, 0x06, 0, 0, 0xCD, false), ScsiStatus::Good);
    assert_eq!(prout(&holder_b, 0x03, 0, 0xCD, 0, false), ScsiStatus::Good);
    let cleared = prin(&other_a, 0);
    assert_eq!(
        &cleared[4..8],
        &0u32.to_be_bytes(),
        "no keys through A: {cleared:?}"
    );
    assert_eq!(write_status(&other_a), ScsiStatus::Good);
}
