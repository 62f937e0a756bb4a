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
        for l in self.listeners.lock().unwrap().iter() {
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

/// Counts the resets it was told of.
#[derive(Debug, Default)]
struct Peers(Mutex<usize>);

impl crate::AluaController for Peers {
    fn request(&self, _: u16, _: crate::AccessState) -> Result<(), crate::SenseData> {
        Ok(())
    }
    fn logical_unit_reset(&self) {
        *self.0.lock().unwrap() += 1;
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
