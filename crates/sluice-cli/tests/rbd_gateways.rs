//! Two `sluice target` gateways exporting one RBD image (`--gateway-group`) against a real
//! single-node Ceph cluster (scripts/ceph-cluster):
//! - both report the same LU identity and the same ALUA picture (REPORT TARGET PORT GROUPS):
//!   one group per gateway, the owner recorded in RADOS active/optimized, the other
//!   active/non-optimized;
//! - persistent reservations live in the image's shared RADOS object: a registration and
//!   reservation made through one gateway is reported (READ KEYS, READ RESERVATION, the same
//!   PRGENERATION) and enforced (RESERVATION CONFLICT) through the other at once, and
//!   survives both gateways restarting;
//! - `kill -9` of the owner: the other blocklists the killed client and becomes
//!   active/optimized (the time is printed; goal under 10 s); the killed gateway
//!   restarted rejoins as a non-owner;
//! - a hung owner (SIGSTOP) is fenced the same way: continued, it acknowledges no write and
//!   reports its group unavailable;
//! - SET TARGET PORT GROUPS through the non-owner moves the ownership to it; a write through
//!   the non-owner succeeds and leaves the ownership where it is;
//!
//! Each test starts its own cluster (about 10 s to start, 5 s to stop).

mod support;

use std::process::Command as Process;
use std::time::{Duration, Instant};

use sluice_initiator::blocking::Session;
use sluice_initiator::{Command, ScsiStatus};
use sluice_test_support::CephCluster;
use support::gateways::{
    execute, report_target_port_groups, session, wait_for_owner, Gateways, ACTIVE_NON_OPTIMIZED,
    UNAVAILABLE,
};

/// How long the gateways may take to agree on a first owner.
const SETTLE: Duration = Duration::from_secs(20);
/// The failover goal with default settings.
const FAILOVER_GOAL: Duration = Duration::from_secs(10);

/// PERSISTENT RESERVE OUT `action` (SPC-4 6.16) with a 24-byte parameter list.
fn prout(s: &Session, action: u8, kind: u8, key: u64, sa_key: u64, aptpl: bool) -> ScsiStatus {
    let cdb = [0x5F, action, kind, 0, 0, 0, 0, 0, 24, 0];
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    list[20] = u8::from(aptpl);
    execute(s, || Command::write(0, &cdb, list.clone())).status
}

/// PERSISTENT RESERVE IN `action`: the data returned.
fn prin(s: &Session, action: u8) -> Vec<u8> {
    let cdb = [0x5E, action, 0, 0, 0, 0, 0, 0x10, 0, 0];
    let out = execute(s, || Command::read(0, &cdb, 4096));
    assert_eq!(out.status, ScsiStatus::Good, "{out:?}");
    out.data.to_vec()
}

fn write(s: &Session, fill: u8) -> sluice_initiator::CommandOutcome {
    let cdb = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    execute(s, || Command::write(0, &cdb, vec![fill; 512]))
}

/// The NAA designator of VPD page 83h and the relative target port designator.
fn identity(s: &Session) -> (Vec<u8>, u16) {
    // The page without its 4-byte header: designators from byte 0.
    let page = s.vpd(0, 0x83).unwrap();
    let mut at = 0;
    let (mut naa, mut rel) = (Vec::new(), 0);
    while at + 4 <= page.len() {
        let (kind, len) = (page[at + 1] & 0x0F, usize::from(page[at + 3]));
        let body = &page[at + 4..(at + 4 + len).min(page.len())];
        match kind {
            0x3 => naa = body.to_vec(),
            0x4 if body.len() >= 4 => rel = u16::from_be_bytes([body[2], body[3]]),
            _ => {}
        }
        at += 4 + len;
    }
    (naa, rel)
}

fn blocklist_len(c: &CephCluster) -> usize {
    let out = Process::new("ceph")
        .arg("--conf")
        .arg(c.conf_file())
        .args(["osd", "blocklist", "ls"])
        .output()
        .expect("run ceph");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn gateways_share_reservations_and_fail_over() {
    let c = CephCluster::start();
    c.create_image("gw", 16);
    let mut gw = Gateways::start(&c, "gw", 2, &[]);
    let observer = |gw: &Gateways, i: usize| session(gw.url(i), "iqn.2026-11.test:observer");
    let (s0, s1) = (observer(&gw, 0), observer(&gw, 1));

    // One LU identity, one port per gateway, one owner both agree on.
    let (id0, id1) = (identity(&s0), identity(&s1));
    assert_eq!(id0.0, id1.0, "the same NAA identifier");
    assert_eq!((id0.1, id1.1), (1, 2), "relative target ports");
    let (owner, took) = wait_for_owner(&[&s0, &s1], SETTLE, |_| true);
    println!("first owner: group {owner} after {took:?}");
    let groups = report_target_port_groups(&s0);
    assert_eq!(groups, report_target_port_groups(&s1));
    assert_eq!(groups.len(), 2, "{groups:?}");
    for (g, state, ports) in &groups {
        assert_eq!(ports, &vec![*g], "one port per group: {groups:?}");
        if *g != owner {
            assert_eq!(*state, ACTIVE_NON_OPTIMIZED, "{groups:?}");
        }
    }
    let o = usize::from(owner - 1);
    let n = 1 - o;
    let sessions = [&s0, &s1];

    // Reservations: REGISTER (APTPL) and RESERVE Write Exclusive through the non-owner; a
    // write through the owner from an
    // unregistered initiator conflicts at once (the notify made the owner read the state
    // again before anything else asked it to).
    let holder_at = n;
    let holder = session(gw.url(holder_at), "iqn.2026-11.test:holder");
    let keys_before = prin(&holder, 0);
    assert_eq!(prout(&holder, 0x00, 0, 0, 0xAB, true), ScsiStatus::Good);
    assert_eq!(prout(&holder, 0x01, 0x01, 0xAB, 0, false), ScsiStatus::Good);
    assert_eq!(
        write(sessions[o], 1).status,
        ScsiStatus::ReservationConflict
    );
    let keys = prin(sessions[o], 0);
    assert_eq!(&keys[4..8], &8u32.to_be_bytes(), "one key: {keys:?}");
    assert_eq!(&keys[8..16], &0xABu64.to_be_bytes());
    assert_ne!(keys[..4], keys_before[..4], "PRGENERATION moved");
    assert_eq!(prin(&holder, 0), keys, "both gateways agree");
    let res = prin(sessions[o], 1);
    assert_eq!(&res[8..16], &0xABu64.to_be_bytes(), "{res:?}");
    assert_eq!(res[21] & 0x0F, 0x01, "Write Exclusive");
    drop((holder, s0, s1));

    // Both gateways restart: the reservation is still there and still enforced.
    gw.kill(0);
    gw.kill(1);
    gw.restart(0);
    gw.restart(1);
    let (s0, s1) = (observer(&gw, 0), observer(&gw, 1));
    let (owner, _) = wait_for_owner(&[&s0, &s1], SETTLE, |_| true);
    assert_eq!(prin(&s0, 0), keys, "after restart through gateway 1");
    assert_eq!(prin(&s1, 0), keys, "after restart through gateway 2");
    let o = usize::from(owner - 1);
    let n = 1 - o;
    let sessions = [&s0, &s1];
    assert_eq!(
        write(sessions[o], 2).status,
        ScsiStatus::ReservationConflict
    );
    // CLEAR by the holder (through the gateway it registered through) frees it everywhere.
    let holder = session(gw.url(holder_at), "iqn.2026-11.test:holder");
    assert_eq!(prout(&holder, 0x03, 0, 0xAB, 0, false), ScsiStatus::Good);
    assert_eq!(&prin(sessions[o], 0)[4..8], &0u32.to_be_bytes());
    assert_eq!(write(sessions[o], 3).status, ScsiStatus::Good);
    drop(holder);

    // SET TARGET PORT GROUPS through the non-owner: its group becomes active/optimized.
    let stpg_list = {
        let mut l = vec![0u8; 8];
        l[4] = 0x0; // active/optimized
        l[6..8].copy_from_slice(&((n + 1) as u16).to_be_bytes());
        l
    };
    let cdb = [0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0];
    let out = execute(sessions[n], || Command::write(0, &cdb, stpg_list.clone()));
    assert_eq!(out.status, ScsiStatus::Good, "{out:?}");
    let (owner, took) = wait_for_owner(&sessions, SETTLE, |g| usize::from(g - 1) == n);
    println!("SET TARGET PORT GROUPS moved the LU to group {owner} in {took:?}");
    assert_eq!(write(sessions[n], 4).status, ScsiStatus::Good);

    // A write through the non-owner runs there; the ownership stays where it is.
    let started = Instant::now();
    assert_eq!(write(sessions[o], 8).status, ScsiStatus::Good);
    println!("a write through the non-owner took {:?}", started.elapsed());
    let (owner, _) = wait_for_owner(&sessions, SETTLE, |_| true);
    assert_eq!(usize::from(owner - 1), n, "a write moved the ownership");
    let current = n;
    drop((s0, s1));

    // kill -9 of the owner: the other takes over, the killed client is blocklisted.
    let o = current;
    let n = 1 - o;
    let survivor = observer(&gw, n);
    let fenced_before = blocklist_len(&c);
    let killed = Instant::now();
    gw.kill(o);
    let (owner, _) = wait_for_owner(&[&survivor], Duration::from_secs(30), |g| {
        usize::from(g - 1) == n
    });
    let failover = killed.elapsed();
    println!(
        "kill -9 of group {}: group {owner} active/optimized after {failover:?}",
        o + 1
    );
    assert!(
        failover < FAILOVER_GOAL + Duration::from_secs(5),
        "failover took {failover:?}"
    );
    assert!(
        blocklist_len(&c) > fenced_before,
        "the dead owner is blocklisted"
    );
    assert_eq!(write(&survivor, 5).status, ScsiStatus::Good);

    // The killed gateway, restarted, rejoins as a non-owner.
    gw.restart(o);
    let back = observer(&gw, o);
    let (owner, _) = wait_for_owner(&[&back, &survivor], SETTLE, |g| usize::from(g - 1) == n);
    let states = report_target_port_groups(&back);
    let rejoined = states
        .iter()
        .find(|(g, _, _)| usize::from(*g - 1) == o)
        .unwrap();
    assert_eq!(rejoined.1, ACTIVE_NON_OPTIMIZED, "{states:?}");
    println!(
        "restarted group {} rejoined active/non-optimized; owner {owner}",
        o + 1
    );

    // A hung owner is fenced: stopped, the other takes over; continued, it refuses writes.
    gw.signal(n, "STOP");
    let (owner, hung) = wait_for_owner(&[&back], Duration::from_secs(30), |g| {
        usize::from(g - 1) == o
    });
    gw.signal(n, "CONT");
    println!("hung owner replaced by group {owner} after {hung:?}");
    let out = write(&survivor, 6);
    assert_ne!(
        out.status,
        ScsiStatus::Good,
        "a fenced gateway acknowledged a write"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let own = report_target_port_groups(&survivor)
            .into_iter()
            .find(|(g, _, _)| usize::from(*g - 1) == n)
            .unwrap();
        if own.1 == UNAVAILABLE {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the fenced gateway reports {own:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(write(&back, 7).status, ScsiStatus::Good);
}
