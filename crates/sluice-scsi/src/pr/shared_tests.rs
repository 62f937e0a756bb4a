//! RESERVE(6)/RELEASE(6) on one logical unit exported by two gateways sharing their
//! reservation state (a versioned store in memory standing in for the RADOS object): the
//! reservation is held by an I_T nexus of one gateway and enforced by both.

use std::io;
use std::sync::{Arc, Mutex};

use sluice_storage::StateStore;

use super::tests::{initiator, nexus, nexus_as};
use crate::status::{GOOD, RESERVATION_CONFLICT};
use crate::testutil::*;
use crate::{LogicalUnit, ScsiTarget};

type Listener = Box<dyn Fn() + Send + Sync>;

/// A store every gateway shares: compare-and-write on a version, change callbacks.
#[derive(Default)]
struct SharedStore {
    state: Mutex<(Option<Vec<u8>>, u64)>,
    listeners: Mutex<Vec<Listener>>,
    /// The first gateway misses every change notification (cut off from them).
    first_deaf: std::sync::atomic::AtomicBool,
}

impl SharedStore {
    /// Tells every gateway the state changed (as a broken watch does when it is restored).
    fn notify_all(&self) {
        for l in self.listeners.lock().unwrap().iter() {
            l();
        }
    }
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedStore")
    }
}

impl StateStore for SharedStore {
    fn load(&self) -> io::Result<Option<Vec<u8>>> {
        Ok(self.state.lock().unwrap().0.clone())
    }
    fn save(&self, contents: &[u8]) -> io::Result<()> {
        let v = self.state.lock().unwrap().1;
        self.save_if(v, contents).map(|_| ())
    }
    fn shared(&self) -> bool {
        true
    }
    fn load_versioned(&self) -> io::Result<(Option<Vec<u8>>, u64)> {
        Ok(self.state.lock().unwrap().clone())
    }
    fn save_if(&self, version: u64, contents: &[u8]) -> io::Result<Option<u64>> {
        {
            let mut st = self.state.lock().unwrap();
            if st.1 != version {
                return Ok(None);
            }
            *st = (Some(contents.to_vec()), version + 1);
        }
        let deaf = self.first_deaf.load(std::sync::atomic::Ordering::Relaxed);
        for l in self
            .listeners
            .lock()
            .unwrap()
            .iter()
            .skip(usize::from(deaf))
        {
            l();
        }
        Ok(Some(version + 1))
    }
    fn on_change(&self, changed: Listener) {
        self.listeners.lock().unwrap().push(changed);
    }
}

/// One gateway's logical unit on `store`.
fn gateway(store: &Arc<SharedStore>) -> Harness {
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

const RESERVE6: [u8; 6] = [0x16, 0, 0, 0, 0, 0];
const RELEASE6: [u8; 6] = [0x17, 0, 0, 0, 0, 0];
const WRITE10: [u8; 10] = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const INQUIRY: [u8; 6] = [0x12, 0, 0, 0, 36, 0];

#[test]
fn a_reserve_through_one_gateway_is_enforced_by_the_other() {
    let store = Arc::new(SharedStore::default());
    let (ga, gb) = (gateway(&store), gateway(&store));
    let a = nexus(&ga, 10, 1);
    // The same initiator port through the other gateway is another I_T nexus.
    let b = nexus_as(&gb, 20, initiator(10), 2);
    let c = nexus(&gb, 21, 2);
    let data = vec![7u8; 512];
    a.ok(&RESERVE6, &[]);
    assert_eq!(b.run(&WRITE10, &data).0.status, RESERVATION_CONFLICT);
    assert_eq!(c.run(&RESERVE6, &[]).0.status, RESERVATION_CONFLICT);
    c.ok(&INQUIRY, &[]);
    // RELEASE by a nexus that holds nothing is a no-op.
    c.ok(&RELEASE6, &[]);
    assert_eq!(c.run(&WRITE10, &data).0.status, RESERVATION_CONFLICT);
    assert_eq!(a.run(&WRITE10, &data).0.status, GOOD);
    a.ok(&RELEASE6, &[]);
    assert_eq!(b.run(&WRITE10, &data).0.status, GOOD);
    // Now through the second gateway, refused through the first.
    c.ok(&RESERVE6, &[]);
    assert_eq!(a.run(&WRITE10, &data).0.status, RESERVATION_CONFLICT);
    // The holder's nexus goes away: released for everyone.
    gb.target.nexus_gone(21);
    assert_eq!(a.run(&WRITE10, &data).0.status, GOOD);
    // A logical unit reset through one gateway releases a reservation held through the other.
    a.ok(&RESERVE6, &[]);
    assert_eq!(b.run(&WRITE10, &data).0.status, RESERVATION_CONFLICT);
    gb.target.lu(0).unwrap().reset((0x29, 0x03));
    let _ = b.run(&WRITE10, &data);
    assert_eq!(b.run(&WRITE10, &data).0.status, GOOD);
}

/// Counts the resets it was told of, and keeps the registrations PREEMPT AND ABORT preempted.
#[derive(Debug, Default)]
struct Peers(Mutex<usize>, Mutex<Vec<super::Holder>>);

impl crate::AluaController for Peers {
    fn request(&self, _: u16, _: crate::AccessState) -> Result<(), crate::SenseData> {
        Ok(())
    }
    fn logical_unit_reset(&self) {
        *self.0.lock().unwrap() += 1;
    }
    fn preempted_and_aborted(&self, preempted: &[super::Holder]) {
        self.1.lock().unwrap().extend_from_slice(preempted);
    }
}

#[test]
fn a_reset_through_one_gateway_reaches_the_other() {
    let store = Arc::new(SharedStore::default());
    let (ga, gb) = (gateway(&store), gateway(&store));
    let peers = Arc::new(Peers::default());
    ga.target.lu(0).unwrap().set_alua_controller(peers.clone());
    let a = nexus(&ga, 10, 1);
    let b = nexus(&gb, 20, 2);
    b.ok(&RESERVE6, &[]);
    // LOGICAL UNIT RESET through gateway A: its controller tells the others...
    assert!(ga.target.reset(crate::ResetKind::LogicalUnit(0), 10));
    assert_eq!(*peers.0.lock().unwrap(), 1);
    // ...and the RESERVE held through B is gone for everyone.
    let _ = a.run(&WRITE10, &[1; 512]);
    assert_eq!(a.run(&WRITE10, &[1; 512]).0.status, GOOD);
    // What B's gateway does when told: a unit attention for its nexuses.
    gb.target.lu(0).unwrap().reset_by_peer();
    let (r, _) = b.run(&[0; 6], &[]);
    assert_eq!(r.status, crate::status::CHECK_CONDITION);
    let sense = r.sense.expect("sense data");
    assert_eq!((sense.asc, sense.ascq), (0x29, 0x03), "{sense:?}");
    b.ok(&[0; 6], &[]);
}

/// The unit attentions a PERSISTENT RESERVE OUT raises for other I_T nexuses (SPC-4 5.12.11)
/// reach those of the other gateway, and only the ones named: an I_T nexus is an initiator
/// port (name and ISID) through one target port (one gateway).
#[test]
fn reservation_unit_attentions_reach_the_other_gateways_nexuses() {
    use super::tests::{
        out, pending_ua, register, write10, CLEAR, EA, PREEMPT, RELEASE, RESERVE, WE_RO,
    };
    let store = Arc::new(SharedStore::default());
    let (ga, gb) = (gateway(&store), gateway(&store));
    let a = nexus(&ga, 10, 1);
    let b = nexus(&gb, 20, 2);
    // The same initiator port through gateway B, and another ISID of A's initiator name
    // through gateway A: neither is A's I_T nexus.
    let a_via_b = nexus_as(&gb, 21, initiator(10), 2);
    let other_isid = nexus_as(
        &ga,
        11,
        crate::TransportId::iscsi_port("iqn.2026-11.test:host10", [0x80, 0, 0, 0, 0, 99]),
        1,
    );
    register(&a, 0xA);
    register(&b, 0xB);
    assert_eq!(out(&a, RESERVE, EA, 0xA, 0).status, GOOD);
    assert_eq!(write10(&b), RESERVATION_CONFLICT);

    // PREEMPT through B of A's reservation: A loses its registration (SPC-4 5.12.11.2.4.3).
    assert_eq!(out(&b, PREEMPT, EA, 0xB, 0xA).status, GOOD);
    assert_eq!(
        pending_ua(&a),
        Some((0x2A, 0x05)),
        "REGISTRATIONS PREEMPTED"
    );
    assert_eq!(pending_ua(&a), None, "once");
    assert_eq!(pending_ua(&a_via_b), None);
    assert_eq!(pending_ua(&other_isid), None);
    assert_eq!(pending_ua(&b), None, "the sender gets none");
    assert_eq!(write10(&a), RESERVATION_CONFLICT);

    // CLEAR through B: every other registrant learns RESERVATIONS PREEMPTED (5.12.11.2.6).
    register(&a, 0xA);
    assert_eq!(out(&b, CLEAR, 0, 0xB, 0).status, GOOD);
    assert_eq!(pending_ua(&a), Some((0x2A, 0x03)), "RESERVATIONS PREEMPTED");
    assert_eq!(pending_ua(&b), None);

    // RELEASE of a registrants-only reservation through A: B learns RESERVATIONS RELEASED
    // (5.12.11.2.2).
    register(&a, 0xA);
    register(&b, 0xB);
    assert_eq!(out(&a, RESERVE, WE_RO, 0xA, 0).status, GOOD);
    assert_eq!(out(&a, RELEASE, WE_RO, 0xA, 0).status, GOOD);
    assert_eq!(pending_ua(&b), Some((0x2A, 0x04)), "RESERVATIONS RELEASED");
    assert_eq!(pending_ua(&a), None);
    assert_eq!(pending_ua(&a_via_b), None);
}

/// PREEMPT AND ABORT through one gateway: the other gateways are told which registrations it
/// preempted (they abort those I_T nexuses' tasks); the preempted I_T nexus of the other
/// gateway gets REGISTRATIONS PREEMPTED, its PREVENT MEDIUM REMOVAL is lifted, and its next
/// commands are refused.
#[test]
fn preempt_and_abort_reaches_the_other_gateway() {
    use super::tests::{out, pending_ua, register, write10, EA, PREEMPT_AND_ABORT, RESERVE};
    let store = Arc::new(SharedStore::default());
    let (ga, gb) = (gateway(&store), gateway(&store));
    let a = nexus(&ga, 10, 1);
    let b = nexus(&gb, 20, 2);
    register(&a, 0xA);
    register(&b, 0xB);
    assert_eq!(out(&a, RESERVE, EA, 0xA, 0).status, GOOD);
    // PREVENT ALLOW MEDIUM REMOVAL, PREVENT=1, through A.
    a.ok(&[0x1E, 0, 0, 0, 1, 0], &[]);
    let lu_a = ga.target.lu(0).unwrap();
    assert!(lu_a.removal_prevented());
    let peers = Arc::new(Peers::default());
    gb.target.lu(0).unwrap().set_alua_controller(peers.clone());
    let _a_too = nexus_as(&ga, 12, initiator(10), 1);
    let _bystander = nexus(&ga, 13, 1);
    let r = out(&b, PREEMPT_AND_ABORT, EA, 0xB, 0xA);
    assert_eq!(r.status, GOOD);
    assert!(
        r.abort_nexuses.is_empty(),
        "no I_T nexus of B's gateway is preempted"
    );
    // B's gateway told the others which registrations went; A's gateway finds its I_T
    // nexuses of that initiator port through that target port, whose tasks it aborts.
    let told = peers.1.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!((told[0].port, &told[0].initiator), (1, &initiator(10)));
    assert_eq!(ga.target.nexuses_of(&told), vec![10, 12]);
    assert!(gb.target.nexuses_of(&told).is_empty());
    assert_eq!(pending_ua(&a), Some((0x2A, 0x05)));
    assert!(!lu_a.removal_prevented(), "SPC-4 5.12.11.2.5 c)");
    assert_eq!(write10(&a), RESERVATION_CONFLICT);
    assert_eq!(write10(&b), GOOD);
}

/// A gateway that missed more commands than the log keeps (cut off from the notifications)
/// still tells its I_T nexuses whose registrations went.
#[test]
fn a_gateway_that_missed_the_log_falls_back_on_the_registrations() {
    use super::tests::{out, pending_ua, register, EA, PREEMPT, RESERVE};
    let store = Arc::new(SharedStore::default());
    let (ga, gb) = (gateway(&store), gateway(&store));
    let a = nexus(&ga, 10, 1);
    let b = nexus(&gb, 20, 2);
    let c = nexus(&gb, 22, 2);
    register(&a, 0xA);
    register(&b, 0xB);
    assert_eq!(out(&a, RESERVE, EA, 0xA, 0).status, GOOD);
    // Gateway A reads the state (its copy now has A registered)...
    assert_eq!(pending_ua(&a), None);
    // ...then misses every notification while B preempts and more commands than the log
    // keeps run (each RELEASE of RESERVATIONS RELEASED by c's registration to a and b).
    store
        .first_deaf
        .store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(out(&b, PREEMPT, EA, 0xB, 0xA).status, GOOD);
    register(&c, 0xC);
    for _ in 0..super::events::MAX_LOGGED_COMMANDS {
        assert_eq!(out(&b, PREEMPT, EA, 0xB, 0xC).status, GOOD);
        assert_eq!(pending_ua(&c), Some((0x2A, 0x05)));
        register(&c, 0xC);
    }
    assert_eq!(pending_ua(&a), None, "gateway A was not told");
    store
        .first_deaf
        .store(false, std::sync::atomic::Ordering::Relaxed);
    store.notify_all();
    assert_eq!(
        pending_ua(&a),
        Some((0x2A, 0x05)),
        "REGISTRATIONS PREEMPTED"
    );
    assert_eq!(pending_ua(&a), None);
}
