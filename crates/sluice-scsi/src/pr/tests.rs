//! Persistent reservations and RESERVE/RELEASE through `ScsiTarget::execute`, from several
//! described I_T nexuses on two target ports.

use std::io;
use std::sync::{Arc, Mutex};

use sluice_storage::StateStore;

use crate::field::{be32, be64};
use crate::ports::NexusIdentity;
use crate::status::{CHECK_CONDITION, GOOD, RESERVATION_CONFLICT};
use crate::testutil::*;
use crate::transport_id::TransportId;
use crate::{CommandResult, LogicalUnit, ScsiTarget};

pub(crate) const REGISTER: u8 = 0;
pub(crate) const RESERVE: u8 = 1;
pub(crate) const RELEASE: u8 = 2;
pub(crate) const CLEAR: u8 = 3;
pub(crate) const PREEMPT: u8 = 4;
pub(crate) const PREEMPT_AND_ABORT: u8 = 5;
pub(crate) const REGISTER_IGNORE: u8 = 6;
pub(crate) const REGISTER_AND_MOVE: u8 = 7;

pub(crate) const WE: u8 = 1;
pub(crate) const EA: u8 = 3;
pub(crate) const WE_RO: u8 = 5;
pub(crate) const EA_RO: u8 = 6;
pub(crate) const WE_AR: u8 = 7;
pub(crate) const EA_AR: u8 = 8;

/// The identity of test initiator `n` (its own name and ISID).
pub(crate) fn initiator(n: u64) -> TransportId {
    TransportId::iscsi_port(
        &format!("iqn.2026-11.test:host{n}"),
        [0x80, 0, 0, 0, 0, n as u8],
    )
}

/// Nexus `n` of `h`'s target through target port `port`, described and with its power-on
/// unit attention consumed.
pub(crate) fn nexus(h: &Harness, n: u64, port: u16) -> Harness {
    nexus_as(h, n, initiator(n), port)
}

/// Nexus `n` of the initiator port `who` through target port `port`.
pub(crate) fn nexus_as(h: &Harness, n: u64, who: TransportId, port: u16) -> Harness {
    h.target.nexus_established(
        n,
        NexusIdentity {
            initiator: who,
            target_port: port,
        },
    );
    let x = h.nexus(n);
    let _ = x.run(&[0; 6], &[]);
    x
}

/// A PERSISTENT RESERVE OUT CDB and its basic parameter list.
pub(crate) fn prout(sa: u8, kind: u8, key: u64, sa_key: u64, flags: u8) -> ([u8; 10], Vec<u8>) {
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    list[20] = flags;
    (prout_cdb(sa, kind, list.len()), list)
}

pub(crate) fn prout_cdb(sa: u8, kind: u8, len: usize) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = 0x5F;
    c[1] = sa;
    c[2] = kind;
    c[5..9].copy_from_slice(&(len as u32).to_be_bytes());
    c
}

fn prin(sa: u8, alloc: u16) -> [u8; 10] {
    let mut c = [0u8; 10];
    c[0] = 0x5E;
    c[1] = sa;
    c[7..9].copy_from_slice(&alloc.to_be_bytes());
    c
}

/// Runs a PERSISTENT RESERVE OUT; returns its result.
pub(crate) fn out(h: &Harness, sa: u8, kind: u8, key: u64, sa_key: u64) -> CommandResult {
    let (c, l) = prout(sa, kind, key, sa_key, 0);
    h.run(&c, &l).0
}

pub(crate) fn register(h: &Harness, key: u64) {
    assert_eq!(out(h, REGISTER_IGNORE, 0, 0, key).status, GOOD);
}

fn keys(h: &Harness) -> (u32, Vec<u64>) {
    let d = h.ok(&prin(0, 4096), &[]);
    let n = be32(&d, 4) as usize / 8;
    (be32(&d, 0), (0..n).map(|i| be64(&d, 8 + 8 * i)).collect())
}

/// READ RESERVATION: (key, type) of the reservation, if any.
fn reservation(h: &Harness) -> Option<(u64, u8)> {
    let d = h.ok(&prin(1, 4096), &[]);
    (be32(&d, 4) == 16).then(|| (be64(&d, 8), d[21] & 0x0F))
}

pub(crate) fn read10(h: &Harness) -> u8 {
    h.run(&[0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0], &[]).0.status
}

pub(crate) fn write10(h: &Harness) -> u8 {
    h.run(&[0x2A, 0, 0, 0, 0, 1, 0, 0, 1, 0], &[0xAB; 512])
        .0
        .status
}

/// The unit attention a nexus has pending, if any (consumed by a TEST UNIT READY).
pub(crate) fn pending_ua(h: &Harness) -> Option<(u8, u8)> {
    let (r, _) = h.run(&[0; 6], &[]);
    r.sense.filter(|s| s.key.0 == 6).map(|s| (s.asc, s.ascq))
}

#[test]
fn register_read_keys_and_unregister() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let (g0, k) = keys(&a);
    assert!(k.is_empty());
    register(&a, 0xAAAA);
    let (g1, k) = keys(&a);
    assert_eq!(k, vec![0xAAAA]);
    assert_eq!(g1, g0 + 1);
    // REGISTER with the wrong key conflicts; with the right one it re-keys.
    assert_eq!(out(&a, REGISTER, 0, 0, 0xBBBB).status, RESERVATION_CONFLICT);
    assert_eq!(out(&a, REGISTER, 0, 0xAAAA, 0xBBBB).status, GOOD);
    assert_eq!(keys(&a).1, vec![0xBBBB]);
    // An unregistered nexus registering with a non-zero RESERVATION KEY conflicts.
    let b = nexus(&h, 11, 1);
    assert_eq!(out(&b, REGISTER, 0, 5, 6).status, RESERVATION_CONFLICT);
    // Unregister.
    assert_eq!(out(&a, REGISTER, 0, 0xBBBB, 0).status, GOOD);
    assert!(keys(&a).1.is_empty());
    // READ KEYS truncated to 8 bytes keeps the full ADDITIONAL LENGTH.
    register(&a, 1);
    register(&b, 2);
    let d = a.ok(&prin(0, 8), &[]);
    assert_eq!(d.len(), 8);
    assert_eq!(be32(&d, 4), 16);
}

#[test]
fn every_type_reserves_reads_back_and_releases() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    register(&a, 0x1234);
    let g = keys(&a).0;
    for kind in [WE, EA, WE_RO, EA_RO, WE_AR, EA_AR] {
        assert_eq!(out(&a, RESERVE, kind, 0x1234, 0).status, GOOD);
        let key = if kind >= WE_AR { 0 } else { 0x1234 };
        assert_eq!(reservation(&a), Some((key, kind)));
        // Reserving again with the same type is fine, with another it conflicts.
        assert_eq!(out(&a, RESERVE, kind, 0x1234, 0).status, GOOD);
        let other = if kind == WE { EA } else { WE };
        assert_eq!(
            out(&a, RESERVE, other, 0x1234, 0).status,
            RESERVATION_CONFLICT
        );
        // Releasing with the wrong type: INVALID RELEASE OF PERSISTENT RESERVATION.
        let (c, l) = prout(RELEASE, other, 0x1234, 0, 0);
        let s = a.check(&c, &l);
        assert_eq!((s.key.0, s.asc, s.ascq), (5, 0x26, 0x04));
        assert_eq!(out(&a, RELEASE, kind, 0x1234, 0).status, GOOD);
        assert_eq!(reservation(&a), None);
    }
    assert_eq!(
        keys(&a).0,
        g,
        "RESERVE and RELEASE leave PRGENERATION alone"
    );
    // Scope other than LU_SCOPE, or an unknown type.
    let (c, l) = prout(RESERVE, 0x10 | WE, 0x1234, 0, 0);
    assert_ifc(&a.check(&c, &l), true, 2, Some(7));
    let (c, l) = prout(RESERVE, 2, 0x1234, 0, 0);
    assert_ifc(&a.check(&c, &l), true, 2, Some(3));
    // Unregistered nexuses cannot reserve, release or clear.
    let b = nexus(&h, 11, 1);
    for sa in [RESERVE, RELEASE, CLEAR, PREEMPT] {
        assert_eq!(
            out(&b, sa, WE, 0, 0x1234).status,
            RESERVATION_CONFLICT,
            "{sa}"
        );
    }
}

/// SPC-4 access rules seen from a registered and an unregistered non-holder (libiscsi's
/// ProutReserve.Access* matrix).
#[test]
fn access_of_other_nexuses_by_type() {
    // (type, registered read, registered write, unregistered read, unregistered write)
    let rows = [
        (EA, false, false, false, false),
        (WE, true, false, true, false),
        (EA_RO, true, true, false, false),
        (WE_RO, true, true, true, false),
        (EA_AR, true, true, false, false),
        (WE_AR, true, true, true, false),
    ];
    for (kind, rr, rw, ur, uw) in rows {
        let h = Harness::new(512, 64);
        let a = nexus(&h, 10, 1);
        let b = nexus(&h, 11, 2);
        register(&a, 1);
        register(&b, 2);
        assert_eq!(out(&a, RESERVE, kind, 1, 0).status, GOOD);
        assert_eq!((read10(&a), write10(&a)), (GOOD, GOOD));
        let st = |ok| if ok { GOOD } else { RESERVATION_CONFLICT };
        assert_eq!(
            (read10(&b), write10(&b)),
            (st(rr), st(rw)),
            "registered, type {kind}"
        );
        assert_eq!(out(&b, REGISTER, 0, 2, 0).status, GOOD);
        assert_eq!(
            (read10(&b), write10(&b)),
            (st(ur), st(uw)),
            "unregistered, type {kind}"
        );
    }
}

/// The holder unregistering: a non-all-registrants reservation goes; only registrants-only
/// types tell the others (RESERVATIONS RELEASED), and never the nexus that unregistered.
#[test]
fn holder_unregistering_releases_and_notifies_others() {
    for kind in [WE, EA, WE_RO, EA_RO, WE_AR, EA_AR] {
        let h = Harness::new(512, 64);
        let a = nexus(&h, 10, 1);
        let b = nexus(&h, 11, 1);
        register(&a, 1);
        register(&b, 2);
        assert_eq!(out(&a, RESERVE, kind, 1, 0).status, GOOD);
        let g = keys(&a).0;
        assert_eq!(out(&a, REGISTER, 0, 1, 0).status, GOOD);
        assert_eq!(pending_ua(&a), None, "type {kind}: no UA for the sender");
        if kind >= WE_AR {
            assert_eq!(reservation(&a), Some((0, kind)), "all-registrants stays");
            assert_eq!(pending_ua(&b), None);
            assert_eq!(out(&b, RELEASE, kind, 2, 0).status, GOOD);
        } else {
            assert_eq!(reservation(&a), None, "type {kind}");
            let ua = (kind == WE_RO || kind == EA_RO).then_some((0x2A, 0x04));
            assert_eq!(pending_ua(&b), ua, "type {kind}");
        }
        assert_eq!(keys(&a).0, g + 1);
    }
}

#[test]
fn release_of_a_shared_reservation_notifies_the_other_registrants() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 1);
    let c = nexus(&h, 12, 2);
    register(&a, 1);
    register(&b, 2);
    assert_eq!(out(&a, RESERVE, EA_AR, 1, 0).status, GOOD);
    // Any registrant may release an all-registrants reservation.
    assert_eq!(out(&b, RELEASE, EA_AR, 2, 0).status, GOOD);
    assert_eq!(pending_ua(&a), Some((0x2A, 0x04)));
    assert_eq!(pending_ua(&b), None);
    assert_eq!(pending_ua(&c), None, "not registered");
    // A non-holder's RELEASE is a successful no-op.
    assert_eq!(out(&a, RESERVE, WE, 1, 0).status, GOOD);
    assert_eq!(out(&b, RELEASE, WE, 2, 0).status, GOOD);
    assert_eq!(reservation(&a), Some((1, WE)));
    // Releasing a Write Exclusive reservation tells nobody.
    assert_eq!(out(&a, RELEASE, WE, 1, 0).status, GOOD);
    assert_eq!(pending_ua(&b), None);
}

#[test]
fn clear_removes_everything_and_notifies() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    register(&a, 1);
    register(&b, 2);
    assert_eq!(out(&a, RESERVE, EA, 1, 0).status, GOOD);
    let g = keys(&a).0;
    assert_eq!(out(&b, CLEAR, 0, 2, 0).status, GOOD);
    assert_eq!(keys(&b), (g + 1, vec![]));
    assert_eq!(reservation(&b), None);
    assert_eq!(pending_ua(&a), Some((0x2A, 0x03)));
    assert_eq!(pending_ua(&b), None);
    assert_eq!(write10(&a), GOOD);
}

#[test]
fn preempt_without_a_reservation_removes_registrations() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    register(&a, 1);
    register(&b, 2);
    let g = keys(&a).0;
    assert_eq!(out(&b, PREEMPT, EA, 2, 1).status, GOOD);
    assert_eq!(pending_ua(&a), Some((0x2A, 0x05)));
    assert_eq!(keys(&a), (g + 1, vec![2]));
    assert_eq!(reservation(&a), None);
    // A key nobody has: conflict. Key zero without a reservation: invalid field.
    assert_eq!(out(&b, PREEMPT, EA, 2, 9).status, RESERVATION_CONFLICT);
    let (c, l) = prout(PREEMPT, EA, 2, 0, 0);
    assert_ifc(&b.check(&c, &l), false, 8, None);
}

#[test]
fn preempting_the_holder_takes_the_reservation() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    let c = nexus(&h, 12, 1);
    register(&a, 1);
    register(&b, 2);
    register(&c, 3);
    assert_eq!(out(&a, RESERVE, WE, 1, 0).status, GOOD);
    assert_eq!(write10(&b), RESERVATION_CONFLICT);
    // B preempts A's reservation with another type.
    assert_eq!(out(&b, PREEMPT, EA, 2, 1).status, GOOD);
    assert_eq!(reservation(&b), Some((2, EA)));
    assert_eq!(keys(&b).1, vec![2, 3]);
    assert_eq!(pending_ua(&a), Some((0x2A, 0x05)), "registration preempted");
    assert_eq!(pending_ua(&c), Some((0x2A, 0x04)), "type changed");
    assert_eq!(write10(&b), GOOD);
    assert_eq!(write10(&a), RESERVATION_CONFLICT);
    // The holder preempting itself changes the type and keeps its registration.
    assert_eq!(out(&b, PREEMPT, WE_RO, 2, 2).status, GOOD);
    assert_eq!(reservation(&b), Some((2, WE_RO)));
    assert_eq!(keys(&b).1, vec![2, 3]);
}

#[test]
fn preempting_an_all_registrants_reservation_with_key_zero() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    register(&a, 1);
    register(&b, 2);
    assert_eq!(out(&a, RESERVE, WE_AR, 1, 0).status, GOOD);
    assert_eq!(out(&b, PREEMPT, EA, 2, 0).status, GOOD);
    assert_eq!(keys(&b).1, vec![2]);
    assert_eq!(reservation(&b), Some((2, EA)));
    assert_eq!(pending_ua(&a), Some((0x2A, 0x05)));
}

#[test]
fn preempt_and_abort_names_the_nexuses_to_abort_and_lifts_their_prevent() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    register(&a, 1);
    register(&b, 2);
    assert_eq!(out(&a, RESERVE, EA, 1, 0).status, GOOD);
    a.ok(&[0x1E, 0, 0, 0, 1, 0], &[]);
    assert!(h.lu().removal_prevented());
    let r = out(&b, PREEMPT_AND_ABORT, EA, 2, 1);
    assert_eq!(r.status, GOOD);
    assert_eq!(r.abort_nexuses, vec![10]);
    assert!(!h.lu().removal_prevented());
    // PREEMPT (without abort) names none.
    assert_eq!(pending_ua(&a), Some((0x2A, 0x05)));
    register(&a, 1);
    let r = out(&b, PREEMPT, EA, 2, 1);
    assert!(r.abort_nexuses.is_empty());
}

#[test]
fn register_and_move() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    register(&a, 1);
    assert_eq!(out(&a, RESERVE, EA, 1, 0).status, GOOD);
    let mv = |who: &Harness, dest: &TransportId, port: u16, sa_key: u64, unreg: bool| {
        let t = dest.to_bytes();
        let mut l = vec![0u8; 24];
        l[..8].copy_from_slice(&1u64.to_be_bytes());
        l[8..16].copy_from_slice(&sa_key.to_be_bytes());
        l[17] = u8::from(unreg) << 1;
        l[18..20].copy_from_slice(&port.to_be_bytes());
        l[20..24].copy_from_slice(&(t.len() as u32).to_be_bytes());
        l.extend_from_slice(&t);
        who.run(&prout_cdb(REGISTER_AND_MOVE, 0, l.len()), &l).0
    };
    // To itself, to a port that does not exist, with key 0: invalid fields.
    for (dest, port, key) in [
        (initiator(10), 1, 5),
        (initiator(11), 9, 5),
        (initiator(11), 2, 0),
    ] {
        let r = mv(&a, &dest, port, key, false);
        assert_eq!(r.status, CHECK_CONDITION);
        assert_eq!(r.sense.unwrap().asc, 0x26);
    }
    // A non-holder cannot move.
    register(&b, 7);
    let r = mv(&b, &initiator(12), 1, 5, false);
    assert_eq!(r.status, RESERVATION_CONFLICT);
    // Move to B (already registered: re-keyed) through port 2, and unregister A.
    let r = mv(&a, &initiator(11), 2, 0x55, true);
    assert_eq!(r.status, GOOD);
    assert_eq!(reservation(&b), Some((0x55, EA)));
    assert_eq!(keys(&b).1, vec![0x55]);
    assert_eq!(write10(&b), GOOD);
    assert_eq!(write10(&a), RESERVATION_CONFLICT);
}

#[test]
fn spec_i_pt_and_all_tg_pt() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    // ALL_TG_PT: A registers through both target ports.
    let (c, l) = prout(REGISTER, 0, 0, 0x10, 0x04);
    assert_eq!(a.run(&c, &l).0.status, GOOD);
    assert_eq!(keys(&a).1, vec![0x10, 0x10]);
    let a2 = nexus_as(&h, 13, initiator(10), 2);
    assert_eq!(
        out(&a2, RESERVE, WE, 0x10, 0).status,
        GOOD,
        "registered via port 2"
    );
    assert_eq!(out(&a2, RELEASE, WE, 0x10, 0).status, GOOD);
    // SPEC_I_PT: B registers itself, C's port and D's whole device.
    let b = nexus(&h, 11, 1);
    let mut ids = initiator(12).to_bytes();
    ids.extend(TransportId::iscsi_device("iqn.2026-11.test:host14").to_bytes());
    let mut l = prout(REGISTER, 0, 0, 0x20, 0x08).1;
    l.extend_from_slice(&(ids.len() as u32).to_be_bytes());
    l.extend_from_slice(&ids);
    assert_eq!(b.run(&prout_cdb(REGISTER, 0, l.len()), &l).0.status, GOOD);
    assert_eq!(keys(&b).1, vec![0x10, 0x10, 0x20, 0x20, 0x20]);
    let c = nexus(&h, 12, 1);
    assert_eq!(
        out(&c, RESERVE, EA_RO, 0x20, 0).status,
        GOOD,
        "C was registered by B"
    );
    // D connects with any ISID: registered through port 1 by its device name.
    let d_port = TransportId::iscsi_port("iqn.2026-11.test:host14", [9; 6]);
    let d = nexus_as(&h, 14, d_port.clone(), 1);
    assert_eq!(write10(&d), GOOD, "a registrant");
    let d2 = nexus_as(&h, 16, d_port, 2);
    assert_eq!(
        write10(&d2),
        RESERVATION_CONFLICT,
        "not registered through port 2"
    );
    // SPEC_I_PT naming an initiator port that is already registered fails as a whole.
    let e = nexus(&h, 15, 1);
    let ids = initiator(12).to_bytes();
    let mut l = prout(REGISTER, 0, 0, 0x30, 0x08).1;
    l.extend_from_slice(&(ids.len() as u32).to_be_bytes());
    l.extend_from_slice(&ids);
    let s = e.check(&prout_cdb(REGISTER, 0, l.len()), &l);
    assert_eq!(s.asc, 0x26);
    assert_eq!(keys(&e).1.len(), 5);
    // SPEC_I_PT from a registered nexus is an invalid field.
    let mut l = prout(REGISTER, 0, 0x20, 0x21, 0x08).1;
    l.extend_from_slice(&0u32.to_be_bytes());
    let s = b.check(&prout_cdb(REGISTER, 0, l.len()), &l);
    assert_ifc(&s, false, 20, Some(3));
}

#[test]
fn report_capabilities_and_read_full_status() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 2);
    register(&a, 0x77);
    assert_eq!(out(&a, RESERVE, WE_RO, 0x77, 0).status, GOOD);
    let d = a.ok(&prin(2, 100), &[]);
    assert_eq!(
        d,
        vec![0, 8, 0x1C, 0xB0, 0xEA, 0x01, 0, 0],
        "no store: PTPL_C=0"
    );
    let d = a.ok(&prin(3, 1000), &[]);
    assert_eq!(be32(&d, 4) as usize, d.len() - 8);
    assert_eq!(be64(&d, 8), 0x77);
    assert_eq!(d[8 + 12], 0x01, "R_HOLDER");
    assert_eq!(d[8 + 13], WE_RO);
    assert_eq!(u16::from_be_bytes([d[8 + 18], d[8 + 19]]), 2);
    let (tid, _) = TransportId::parse(&d[8 + 24..]).unwrap();
    assert_eq!(tid, initiator(10));
    // Service actions 04h-1Fh are invalid.
    for sa in 4..0x20 {
        assert_eq!(a.check(&prin(sa, 100), &[]).asc, 0x24);
    }
}

#[test]
fn aptpl_needs_a_store() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let (c, l) = prout(REGISTER_IGNORE, 0, 0, 5, 0x01);
    assert_ifc(&a.check(&c, &l), false, 20, Some(0));
    assert!(keys(&a).1.is_empty());
}

/// A store in memory that can be told to fail.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    pub(crate) contents: Mutex<Option<Vec<u8>>>,
    pub(crate) fail: Mutex<bool>,
}

impl StateStore for MemoryStore {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.contents.lock().unwrap().clone())
    }
    fn save(&self, contents: &[u8]) -> io::Result<()> {
        if *self.fail.lock().unwrap() {
            return Err(io::Error::other("disk full"));
        }
        *self.contents.lock().unwrap() = Some(contents.to_vec());
        Ok(())
    }
}

fn target_with_store(store: &Arc<MemoryStore>) -> Harness {
    let dev = Arc::new(VecDevice::new(512, 64));
    let lu = LogicalUnit::new(config(dev.clone(), false));
    lu.attach_reservation_store(store.clone()).unwrap();
    let target = Arc::new(ScsiTarget::with_ports(
        vec![(0, Arc::new(lu))],
        two_ports([crate::AccessState::ActiveOptimized; 2]),
    ));
    Harness {
        target,
        dev,
        nexus: 1,
        lun: 0,
    }
}

#[test]
fn aptpl_state_survives_a_new_logical_unit() {
    let store = Arc::new(MemoryStore::default());
    let h = target_with_store(&store);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    let (c, l) = prout(REGISTER_IGNORE, 0, 0, 0xA1, 0x01);
    assert_eq!(a.run(&c, &l).0.status, GOOD);
    let (c, l) = prout(REGISTER_IGNORE, 0, 0, 0xB2, 0x01);
    assert_eq!(b.run(&c, &l).0.status, GOOD);
    assert_eq!(out(&a, RESERVE, EA_RO, 0xA1, 0).status, GOOD);
    assert_eq!(a.ok(&prin(2, 8), &[])[3] & 0x01, 1, "PTPL_A");
    // "Power loss": a new logical unit on the same store, new sessions of the same ports.
    let h2 = target_with_store(&store);
    let a2 = nexus_as(&h2, 20, initiator(10), 1);
    let other = nexus(&h2, 21, 1);
    assert_eq!(reservation(&a2), Some((0xA1, EA_RO)));
    let (g, k) = keys(&a2);
    assert_eq!(
        (g, k),
        (0, vec![0xA1, 0xB2]),
        "PRGENERATION restarts at zero"
    );
    assert_eq!(write10(&a2), GOOD);
    assert_eq!(read10(&other), RESERVATION_CONFLICT);
    // APTPL=0 from then on: the next restart starts empty.
    assert_eq!(out(&a2, REGISTER, 0, 0xA1, 0xA2).status, GOOD);
    let h3 = target_with_store(&store);
    let x = nexus(&h3, 30, 1);
    assert_eq!(keys(&x), (0, vec![]));
    assert_eq!(reservation(&x), None);
}

#[test]
fn a_failed_save_changes_nothing() {
    let store = Arc::new(MemoryStore::default());
    let h = target_with_store(&store);
    let a = nexus(&h, 10, 1);
    let (c, l) = prout(REGISTER_IGNORE, 0, 0, 0xA1, 0x01);
    assert_eq!(a.run(&c, &l).0.status, GOOD);
    *store.fail.lock().unwrap() = true;
    let (c, l) = prout(RESERVE, EA, 0xA1, 0, 0);
    let s = a.check(&c, &l);
    assert_eq!((s.key.0, s.asc), (4, 0x44));
    assert_eq!(reservation(&a), None);
    *store.fail.lock().unwrap() = false;
    assert_eq!(out(&a, RESERVE, EA, 0xA1, 0).status, GOOD);
}

#[test]
fn a_damaged_store_is_refused() {
    let store = Arc::new(MemoryStore::default());
    *store.contents.lock().unwrap() = Some(b"sluice-reservations 1\naptpl x\n".to_vec());
    let lu = LogicalUnit::new(config(Arc::new(VecDevice::new(512, 8)), false));
    assert!(matches!(
        lu.attach_reservation_store(store),
        Err(crate::RestoreError::Damaged(_))
    ));
}

#[test]
fn reserve6_between_two_nexuses() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    let release6 = [0x17, 0, 0, 0, 0, 0];
    a.ok(&reserve6, &[]);
    a.ok(&reserve6, &[]);
    assert_eq!(b.run(&reserve6, &[]).0.status, RESERVATION_CONFLICT);
    b.ok(&release6, &[]);
    a.ok(&[0x1A, 0, 0x3F, 0, 255, 0], &[]);
    assert_eq!(
        b.run(&[0x1A, 0, 0x3F, 0, 255, 0], &[]).0.status,
        RESERVATION_CONFLICT
    );
    assert_eq!(
        b.run(&[0; 6], &[]).0.status,
        RESERVATION_CONFLICT,
        "TEST UNIT READY"
    );
    b.ok(&[0x12, 0, 0, 0, 36, 0], &[]);
    // PERSISTENT RESERVE IN and OUT conflict whoever sends them.
    assert_eq!(a.run(&prin(0, 100), &[]).0.status, RESERVATION_CONFLICT);
    assert_eq!(
        out(&a, REGISTER_IGNORE, 0, 0, 1).status,
        RESERVATION_CONFLICT
    );
    a.ok(&release6, &[]);
    b.ok(&reserve6, &[]);
    // RESERVE(10) and RELEASE(10) are the same reservation.
    assert_eq!(
        a.run(&[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]).0.status,
        RESERVATION_CONFLICT
    );
    b.ok(&[0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    a.ok(&[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    // Third-party reservations are not supported.
    assert_ifc(
        &a.check(&[0x56, 0x10, 0, 0, 0, 0, 0, 0, 0, 0], &[]),
        true,
        1,
        Some(4),
    );
}

#[test]
fn reserve6_goes_with_the_nexus_and_with_resets() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    a.ok(&reserve6, &[]);
    h.target.nexus_gone(10);
    b.ok(&reserve6, &[]);
    assert!(h.target.reset(crate::ResetKind::LogicalUnit(0), 11));
    let _ = pending_ua(&b);
    let c = nexus(&h, 12, 1);
    c.ok(&reserve6, &[]);
    h.target.reset(crate::ResetKind::TargetWarm, 12);
    let _ = pending_ua(&b);
    b.ok(&reserve6, &[]);
}

/// SPC-4 5.12.3 (CRH=1): with registrations, RESERVE/RELEASE from the holder are no-ops,
/// from others conflicts.
#[test]
fn reserve6_under_persistent_reservations() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    let c = nexus(&h, 12, 1);
    register(&a, 1);
    register(&b, 2);
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    let release6 = [0x17, 0, 0, 0, 0, 0];
    assert_eq!(c.run(&reserve6, &[]).0.status, RESERVATION_CONFLICT);
    assert_eq!(
        a.run(&reserve6, &[]).0.status,
        RESERVATION_CONFLICT,
        "registered, no holder"
    );
    assert_eq!(out(&a, RESERVE, WE, 1, 0).status, GOOD);
    a.ok(&reserve6, &[]);
    a.ok(&release6, &[]);
    assert_eq!(reservation(&a), Some((1, WE)), "no effect");
    assert_eq!(b.run(&reserve6, &[]).0.status, RESERVATION_CONFLICT);
    assert_eq!(out(&a, RELEASE, WE, 1, 0).status, GOOD);
    assert_eq!(out(&a, RESERVE, WE_RO, 1, 0).status, GOOD);
    b.ok(&release6, &[]);
    assert_eq!(c.run(&release6, &[]).0.status, RESERVATION_CONFLICT);
}

#[test]
fn parameter_list_length_errors() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let (mut c, l) = prout(REGISTER, 0, 0, 1, 0);
    c[8] = 20;
    let s = a.check(&c, &l[..20]);
    assert_eq!(s.asc, 0x1A);
    // Less Data-Out than the parameter list length says.
    let (c, l) = prout(REGISTER, 0, 0, 1, 0);
    assert_eq!(a.check(&c, &l[..10]).asc, 0x1A);
    // Invalid service action.
    let (mut c, l) = prout(REGISTER, 0, 0, 1, 0);
    c[1] = 0x08;
    assert_eq!(a.check(&c, &l).asc, 0x24);
}
