//! Persistent reservations through the `sluice target` binary: with APTPL and a state
//! directory they survive `kill -9` and a restart, and the initiator ports that come back find
//! them as they were; a registrant from another initiator meets RESERVATION CONFLICT.

mod support;

use std::path::Path;

use sluice_initiator::blocking::Session;
use sluice_initiator::{Command, CommandOutcome, ConnectOptions, IscsiUrl};
use support::TargetProcess;

const RESERVATION_CONFLICT: u8 = 0x18;
const REGISTER_IGNORE: u8 = 6;
const RESERVE: u8 = 1;
const EA: u8 = 3;
const APTPL: u8 = 0x01;

/// A session of initiator `name` with a fixed ISID (the same initiator port every time).
fn connect(url: &str, name: &str, isid: u8) -> Session {
    let url = IscsiUrl::parse(url).expect("url");
    let opts = ConnectOptions {
        initiator_name: name.into(),
        isid: Some([0x80, 0x12, 0x34, 0x56, 0x00, isid]),
        ..ConnectOptions::default()
    };
    Session::connect_url_with(&url, opts).expect("login")
}

/// Runs `cmd`, repeating it past unit attentions (a new I_T nexus reports POWER ON first).
fn run(s: &Session, cmd: Command) -> CommandOutcome {
    for _ in 0..5 {
        let out = s.execute(cmd.clone()).expect("command transported");
        let ua = out.sense.as_ref().is_some_and(|x| x.key.0 == 6);
        if !ua {
            return out;
        }
    }
    panic!("unit attentions never stopped")
}

fn prout(s: &Session, sa: u8, kind: u8, key: u64, sa_key: u64, flags: u8) -> CommandOutcome {
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    list[20] = flags;
    let cdb = [0x5F, sa, kind, 0, 0, 0, 0, 0, 24, 0];
    run(s, Command::write(0, &cdb, list))
}

/// READ KEYS and READ RESERVATION: the keys, and the reservation's (key, type).
fn pr_state(s: &Session) -> (Vec<u64>, Option<(u64, u8)>) {
    let keys = run(s, Command::read(0, &[0x5E, 0, 0, 0, 0, 0, 0, 1, 0, 0], 256)).data;
    let n = u32::from_be_bytes(keys[4..8].try_into().unwrap()) as usize / 8;
    let list = (0..n)
        .map(|i| u64::from_be_bytes(keys[8 + 8 * i..16 + 8 * i].try_into().unwrap()))
        .collect();
    let res = run(s, Command::read(0, &[0x5E, 1, 0, 0, 0, 0, 0, 1, 0, 0], 256)).data;
    let held = u32::from_be_bytes(res[4..8].try_into().unwrap()) == 16;
    let reservation = held.then(|| {
        (
            u64::from_be_bytes(res[8..16].try_into().unwrap()),
            res[21] & 0x0F,
        )
    });
    (list, reservation)
}

fn write_status(s: &Session) -> u8 {
    let cdb = sluice_scsi::cdb::write10(100, 1, false);
    run(s, Command::write(0, &cdb, vec![0x5A; 512]))
        .status
        .code()
}

fn read_status(s: &Session) -> u8 {
    let cdb = sluice_scsi::cdb::read10(100, 1, false);
    run(s, Command::read(0, &cdb, 512)).status.code()
}

fn start(state: &Path) -> TargetProcess {
    TargetProcess::start(&["--memory", "16M", "--state-dir", state.to_str().unwrap()])
}

const A: &str = "iqn.2026-11.test.cluster:node-a";
const B: &str = "iqn.2026-11.test.cluster:node-b";
const C: &str = "iqn.2026-11.test.cluster:node-c";

#[test]
fn aptpl_reservations_survive_kill_9_and_restart() {
    let state = tempfile::tempdir().expect("state directory");
    let target = start(state.path());
    let a = connect(&target.url, A, 1);
    let b = connect(&target.url, B, 2);
    assert_eq!(
        prout(&a, REGISTER_IGNORE, 0, 0, 0xAAAA, APTPL)
            .status
            .code(),
        0
    );
    assert_eq!(
        prout(&b, REGISTER_IGNORE, 0, 0, 0xBBBB, APTPL)
            .status
            .code(),
        0
    );
    assert_eq!(prout(&a, RESERVE, EA, 0xAAAA, 0, 0).status.code(), 0);
    assert_eq!(write_status(&a), 0);
    assert_eq!(write_status(&b), RESERVATION_CONFLICT);
    let file = state
        .path()
        .join("iqn.2026-11.io.sluice:default")
        .join("lun-0.pr");
    assert!(file.is_file(), "{} was not written", file.display());
    drop((a, b));
    // kill -9: no shutdown, no flush.
    drop(target);

    let target = start(state.path());
    let a = connect(&target.url, A, 1);
    let b = connect(&target.url, B, 2);
    let c = connect(&target.url, C, 3);
    assert_eq!(
        pr_state(&c),
        (vec![0xAAAA, 0xBBBB], Some((0xAAAA, EA))),
        "registrations and reservation restored"
    );
    // REPORT CAPABILITIES: PTPL_C and PTPL_A.
    let caps = run(&c, Command::read(0, &[0x5E, 2, 0, 0, 0, 0, 0, 0, 8, 0], 8)).data;
    assert_eq!((caps[2] & 0x01, caps[3] & 0x01), (1, 1));
    // The holder's initiator port is back in charge; the others are shut out as before.
    assert_eq!(write_status(&a), 0);
    assert_eq!(read_status(&a), 0);
    assert_eq!(write_status(&b), RESERVATION_CONFLICT);
    assert_eq!(read_status(&b), RESERVATION_CONFLICT);
    assert_eq!(read_status(&c), RESERVATION_CONFLICT);
    // The same initiator with another ISID is another initiator port: not registered.
    let a2 = connect(&target.url, A, 9);
    assert_eq!(read_status(&a2), RESERVATION_CONFLICT);
    // A registers again with APTPL=0: the next restart forgets everything.
    assert_eq!(prout(&a, 0, 0, 0xAAAA, 0xAAAB, 0).status.code(), 0);
    drop((a, a2, b, c));
    drop(target);
    let target = start(state.path());
    let c = connect(&target.url, C, 3);
    assert_eq!(pr_state(&c), (vec![], None));
    assert_eq!(write_status(&c), 0);
}

#[test]
fn without_a_state_directory_aptpl_is_refused() {
    let target = TargetProcess::start(&["--memory", "16M"]);
    let a = connect(&target.url, A, 1);
    let out = prout(&a, REGISTER_IGNORE, 0, 0, 0xAAAA, APTPL);
    let sense = out.sense.expect("CHECK CONDITION");
    assert_eq!(
        (sense.key.0, sense.asc),
        (5, 0x26),
        "INVALID FIELD IN PARAMETER LIST"
    );
    let caps = run(&a, Command::read(0, &[0x5E, 2, 0, 0, 0, 0, 0, 0, 8, 0], 8)).data;
    assert_eq!(caps[2] & 0x01, 0, "PTPL_C=0");
    // Without APTPL the registration works, for as long as the target runs.
    assert_eq!(prout(&a, REGISTER_IGNORE, 0, 0, 0xAAAA, 0).status.code(), 0);
}

#[test]
fn a_registrant_of_another_initiator_conflicts_through_another_path() {
    let target = TargetProcess::start_multipath(&["--memory", "16M"]);
    // A through portal group 1, B through portal group 2: the same LU.
    let a = connect(&target.urls[0], A, 1);
    let b = connect(&target.urls[1], B, 2);
    assert_eq!(prout(&a, REGISTER_IGNORE, 0, 0, 0xA, 0).status.code(), 0);
    assert_eq!(prout(&b, REGISTER_IGNORE, 0, 0, 0xB, 0).status.code(), 0);
    assert_eq!(prout(&a, RESERVE, EA, 0xA, 0, 0).status.code(), 0);
    assert_eq!(write_status(&b), RESERVATION_CONFLICT);
    assert_eq!(read_status(&b), RESERVATION_CONFLICT);
    assert_eq!(write_status(&a), 0);
    // READ FULL STATUS names each registration's target port.
    let full = run(
        &b,
        Command::read(0, &[0x5E, 3, 0, 0, 0, 0, 0, 1, 0, 0], 256),
    )
    .data;
    let mut ports = Vec::new();
    let mut at = 8;
    while at + 24 <= full.len() {
        ports.push(u16::from_be_bytes([full[at + 18], full[at + 19]]));
        let len = u32::from_be_bytes(full[at + 20..at + 24].try_into().unwrap()) as usize;
        at += 24 + len;
    }
    assert_eq!(ports, vec![1, 2]);
}
