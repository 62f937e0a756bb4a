//! One RBD-backed logical unit used through both of its gateways at once, as multipath
//! initiators (and libiscsi's multipath tests) do, against a real single-node Ceph cluster:
//! - writes alternating between the two gateways all succeed at the first attempt (no unit
//!   attention), read back correctly through either gateway, and leave the ownership (the
//!   active/optimized group) where it was: librbd moves the exclusive lock, not the LU;
//! - a RESERVE(6) through one gateway is enforced through the other (RESERVATION CONFLICT)
//!   until the holder releases it, or its session ends;
//! - PREEMPT, CLEAR and PREEMPT AND ABORT through one gateway give the I_T nexus preempted
//!   through the other its unit attention (REGISTRATIONS PREEMPTED, RESERVATIONS PREEMPTED)
//!   on its next command there, and then RESERVATION CONFLICT;
//! - libiscsi's whole conformance suite with one URL per gateway (so its multipath tests
//!   write, read and reset through both) ends as it does on a memory LU seen through two
//!   portal groups of one process, but for the capabilities an RBD LU lacks.
//!
//! Each test starts its own cluster (about 10 s to start, 5 s to stop).

mod support;

use std::time::{Duration, Instant};

use sluice_initiator::blocking::Session;
use sluice_initiator::{Command, CommandOutcome, ScsiStatus};
use sluice_test_support::CephCluster;
use support::cunit::{self, Outcome};
use support::gateways::{report_target_port_groups, session, wait_for_owner, Gateways};
use support::{require_tool, TargetProcess};

/// How long the gateways may take to agree on a first owner.
const SETTLE: Duration = Duration::from_secs(20);

/// One attempt, no retry on UNIT ATTENTION: a unit attention is a failure here.
fn once(s: &Session, cmd: Command) -> CommandOutcome {
    s.execute(cmd).unwrap()
}

/// TEST UNIT READY until GOOD: past the unit attentions of the session's start (power on,
/// the first ALUA states).
fn past_unit_attentions(s: &Session) {
    for _ in 0..5 {
        if once(s, Command::none(0, &[0; 6])).status == ScsiStatus::Good {
            return;
        }
    }
    panic!("TEST UNIT READY never GOOD");
}

fn write(s: &Session, lba: u32, data: &[u8]) -> CommandOutcome {
    let mut cdb = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    once(s, Command::write(0, &cdb, data.to_vec()))
}

fn read(s: &Session, lba: u32) -> CommandOutcome {
    let mut cdb = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    once(s, Command::read(0, &cdb, 512))
}

fn block(i: u32) -> Vec<u8> {
    (0..512u32)
        .map(|b| (b ^ i.wrapping_mul(31)) as u8)
        .collect()
}

#[test]
fn writes_alternating_between_gateways_keep_the_owner_and_the_data() {
    let c = CephCluster::start();
    c.create_image("paths", 16);
    let gw = Gateways::start(&c, "paths", 2, &[]);
    let s = [
        session(gw.url(0), "iqn.2026-11.test:paths"),
        session(gw.url(1), "iqn.2026-11.test:paths"),
    ];
    let (owner, _) = wait_for_owner(&[&s[0], &s[1]], SETTLE, |_| true);
    let states = report_target_port_groups(&s[0]);
    for x in &s {
        past_unit_attentions(x);
    }

    let mut latencies = [Vec::new(), Vec::new()];
    for i in 0..40u32 {
        let (via, other) = ((i % 2) as usize, 1 - (i % 2) as usize);
        let lba = i % 8;
        let started = Instant::now();
        let out = write(&s[via], lba, &block(i));
        latencies[via].push(started.elapsed());
        assert_eq!(
            out.status,
            ScsiStatus::Good,
            "write {i} through gateway {via}: {out:?}"
        );
        let back = read(&s[other], lba);
        assert_eq!(back.status, ScsiStatus::Good, "read {i}: {back:?}");
        assert!(
            back.data[..] == block(i)[..],
            "write {i} through gateway {via} read back wrong through gateway {other}"
        );
    }
    for x in &s {
        assert_eq!(
            once(x, Command::none(0, &[0; 6])).status,
            ScsiStatus::Good,
            "no unit attention pending"
        );
    }
    assert_eq!(
        report_target_port_groups(&s[0]),
        states,
        "ALUA states moved"
    );
    assert_eq!(
        report_target_port_groups(&s[1]),
        states,
        "ALUA states moved"
    );
    let (still, _) = wait_for_owner(&[&s[0], &s[1]], SETTLE, |_| true);
    assert_eq!(still, owner, "the writes moved the ownership");
    for (g, l) in latencies.iter_mut().enumerate() {
        l.sort();
        println!(
            "gateway {}{}: write latency median {:?}, max {:?} ({} writes, each after a \
             write through the other gateway)",
            g + 1,
            if g + 1 == usize::from(owner) {
                " (owner)"
            } else {
                ""
            },
            l[l.len() / 2],
            l[l.len() - 1],
            l.len()
        );
    }
}

#[test]
fn reserve6_through_one_gateway_conflicts_through_the_other() {
    let c = CephCluster::start();
    c.create_image("res6", 16);
    let gw = Gateways::start(&c, "res6", 2, &[]);
    let a = session(gw.url(0), "iqn.2026-11.test:res-a");
    let b = session(gw.url(1), "iqn.2026-11.test:res-b");
    wait_for_owner(&[&a, &b], SETTLE, |_| true);
    for x in [&a, &b] {
        past_unit_attentions(x);
    }
    let reserve6 = [0x16, 0, 0, 0, 0, 0];
    let release6 = [0x17, 0, 0, 0, 0, 0];
    let inquiry = [0x12, 0, 0, 0, 36, 0];
    let data = block(1);

    assert_eq!(
        once(&a, Command::none(0, &reserve6)).status,
        ScsiStatus::Good
    );
    assert_eq!(write(&b, 0, &data).status, ScsiStatus::ReservationConflict);
    assert_eq!(read(&b, 0).status, ScsiStatus::ReservationConflict);
    assert_eq!(
        once(&b, Command::none(0, &reserve6)).status,
        ScsiStatus::ReservationConflict
    );
    assert_eq!(
        once(&b, Command::read(0, &inquiry, 36)).status,
        ScsiStatus::Good,
        "INQUIRY is allowed"
    );
    // RELEASE from a nexus that holds nothing is GOOD and changes nothing.
    assert_eq!(
        once(&b, Command::none(0, &release6)).status,
        ScsiStatus::Good
    );
    assert_eq!(write(&b, 0, &data).status, ScsiStatus::ReservationConflict);
    assert_eq!(write(&a, 0, &data).status, ScsiStatus::Good);
    assert_eq!(
        once(&a, Command::none(0, &release6)).status,
        ScsiStatus::Good
    );
    assert_eq!(write(&b, 0, &data).status, ScsiStatus::Good);

    // Reserved through B; A's session through gateway 1 is refused; B logs out: released.
    assert_eq!(
        once(&b, Command::none(0, &reserve6)).status,
        ScsiStatus::Good
    );
    assert_eq!(write(&a, 0, &data).status, ScsiStatus::ReservationConflict);
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = write(&a, 0, &data);
        if out.status == ScsiStatus::Good {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reservation outlived its session: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// PERSISTENT RESERVE OUT `action` (SPC-4 6.16) with a 24-byte parameter list, once.
fn prout(s: &Session, action: u8, kind: u8, key: u64, sa_key: u64) -> CommandOutcome {
    let cdb = [0x5F, action, kind, 0, 0, 0, 0, 0, 24, 0];
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    once(s, Command::write(0, &cdb, list))
}

/// The unit attention TEST UNIT READY reports, if any (one attempt).
fn unit_attention(s: &Session) -> Option<(u8, u8)> {
    let out = once(s, Command::none(0, &[0; 6]));
    let sense = out.sense.filter(|x| x.key.0 == 0x06)?;
    Some((sense.asc, sense.ascq))
}

const REGISTER: u8 = 0;
const RESERVE: u8 = 1;
const CLEAR: u8 = 3;
const PREEMPT: u8 = 4;
const PREEMPT_AND_ABORT: u8 = 5;
const EXCLUSIVE_ACCESS: u8 = 3;
const REGISTRATIONS_PREEMPTED: (u8, u8) = (0x2A, 0x05);
const RESERVATIONS_PREEMPTED: (u8, u8) = (0x2A, 0x03);

#[test]
fn preempting_through_one_gateway_tells_the_nexus_of_the_other() {
    let c = CephCluster::start();
    c.create_image("preempt", 16);
    let gw = Gateways::start(&c, "preempt", 2, &[]);
    let a = session(gw.url(0), "iqn.2026-11.test:pr-a");
    let b = session(gw.url(1), "iqn.2026-11.test:pr-b");
    // The same initiator name and ISID through gateway B: another I_T nexus, never preempted.
    let a_via_b = session(gw.url(1), "iqn.2026-11.test:pr-a");
    wait_for_owner(&[&a, &b], SETTLE, |_| true);
    for x in [&a, &b, &a_via_b] {
        past_unit_attentions(x);
    }
    let good = |out: CommandOutcome, what: &str| {
        assert_eq!(out.status, ScsiStatus::Good, "{what}: {out:?}");
    };
    let data = block(3);

    // Registered through both, reserved through A, preempted through B.
    good(prout(&a, REGISTER, 0, 0, 0xA), "register A");
    good(prout(&b, REGISTER, 0, 0, 0xB), "register B");
    good(
        prout(&a, RESERVE, EXCLUSIVE_ACCESS, 0xA, 0),
        "reserve through A",
    );
    assert_eq!(write(&b, 0, &data).status, ScsiStatus::ReservationConflict);
    good(
        prout(&b, PREEMPT, EXCLUSIVE_ACCESS, 0xB, 0xA),
        "preempt through B",
    );
    assert_eq!(
        unit_attention(&a),
        Some(REGISTRATIONS_PREEMPTED),
        "A's next command through gateway A"
    );
    assert_eq!(unit_attention(&a), None, "reported once");
    assert_eq!(write(&a, 0, &data).status, ScsiStatus::ReservationConflict);
    assert_eq!(unit_attention(&b), None, "the sender gets none");
    assert_eq!(
        unit_attention(&a_via_b),
        None,
        "A's initiator port through B was not preempted"
    );
    good(write(&b, 0, &data), "the new holder writes");

    // CLEAR through B: A, registered again, learns RESERVATIONS PREEMPTED.
    good(prout(&a, REGISTER, 0, 0, 0xA), "register A again");
    good(prout(&b, CLEAR, 0, 0xB, 0), "clear through B");
    assert_eq!(unit_attention(&a), Some(RESERVATIONS_PREEMPTED));
    assert_eq!(unit_attention(&b), None);

    // PREEMPT AND ABORT through B of A's reservation: A's nexus on gateway A gets
    // REGISTRATIONS PREEMPTED on its next command, and nothing more it sends runs.
    good(prout(&a, REGISTER, 0, 0, 0xA), "register A");
    good(prout(&b, REGISTER, 0, 0, 0xB), "register B");
    good(
        prout(&a, RESERVE, EXCLUSIVE_ACCESS, 0xA, 0),
        "reserve through A",
    );
    good(write(&a, 1, &data), "the holder writes");
    good(
        prout(&b, PREEMPT_AND_ABORT, EXCLUSIVE_ACCESS, 0xB, 0xA),
        "preempt and abort through B",
    );
    let out = write(&a, 1, &block(4));
    assert_eq!(out.status, ScsiStatus::CheckCondition, "{out:?}");
    let sense = out.sense.expect("sense data");
    assert_eq!(
        (sense.key.0, sense.asc, sense.ascq),
        (0x06, 0x2A, 0x05),
        "the preempted nexus's write ends with REGISTRATIONS PREEMPTED: {sense:?}"
    );
    assert_eq!(
        write(&a, 1, &block(4)).status,
        ScsiStatus::ReservationConflict
    );
    let back = read(&b, 1);
    assert_eq!(back.status, ScsiStatus::Good, "{back:?}");
    assert!(
        back.data[..] == data[..],
        "a write of the preempted nexus ran"
    );
}

#[test]
fn conformance_through_two_gateways_matches_a_memory_lu() {
    require_tool("iscsi-test-cu", "libiscsi-bin");
    let c = CephCluster::start();
    c.create_image("suite", 1024);
    let gw = Gateways::start(&c, "suite", 2, &[]);
    {
        let s = session(gw.url(0), "iqn.2026-11.test:settle");
        wait_for_owner(&[&s], SETTLE, |_| true);
    }
    let results = cunit::run_suite(&[gw.url(0), gw.url(1)], "ALL", &[]);
    assert!(results.len() >= 230, "{} tests ran", results.len());
    let memory = TargetProcess::start_multipath(&["--memory", "1G"]);
    let on_memory = cunit::run_suite(&[&memory.urls[0], &memory.urls[1]], "ALL", &[]);
    let problems = cunit::differences(&results, &on_memory, cunit::RBD_LACKS);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for (suite, count) in [
        ("PrinReadKeys", 2),
        ("ProutReserve", 13),
        ("MultipathIO", 4),
    ] {
        let passed = results
            .iter()
            .filter(|r| r.name.split('.').next() == Some(suite) && r.outcome == Outcome::Pass)
            .count();
        assert!(
            passed >= count,
            "{suite}: {passed} passed through two gateways, expected {count}"
        );
    }
}
