//! Persistent reservations and target port groups across real sessions of scripted
//! initiators: RESERVATION CONFLICT for another initiator by command class, PREEMPT AND ABORT
//! ending the preempted session's tasks before its own status, and one target reached through
//! two portal groups as two target ports.

mod support;

use bytes::Bytes;
use sluice_proto::pdu::Pdu;
use sluice_target::config::{AccessState, PortalGroup};
use support::*;

const RESERVATION_CONFLICT: u8 = 0x18;

const REGISTER_IGNORE: u8 = 6;
const RESERVE: u8 = 1;
const RELEASE: u8 = 2;
const PREEMPT_AND_ABORT: u8 = 5;
const WE: u8 = 1;
const EA: u8 = 3;
const EA_RO: u8 = 6;

fn prout(sa: u8, kind: u8, key: u64, sa_key: u64) -> ([u8; 10], Vec<u8>) {
    let mut list = vec![0u8; 24];
    list[..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&sa_key.to_be_bytes());
    let mut c = [0u8; 10];
    c[0] = 0x5F;
    c[1] = sa;
    c[2] = kind;
    c[8] = 24;
    (c, list)
}

/// A command with Data-Out sent as immediate data.
async fn data_command(p: &mut Peer, cdb: &[u8], data: &[u8]) -> Completion {
    let mut cmd = p.scsi_command(cdb, false, true, data.len() as u32);
    cmd.data = Bytes::copy_from_slice(data);
    let itt = cmd.itt;
    p.send(&Pdu::ScsiCommand(cmd)).await;
    p.completion(itt).await
}

async fn pr_out(p: &mut Peer, sa: u8, kind: u8, key: u64, sa_key: u64) -> u8 {
    let (c, l) = prout(sa, kind, key, sa_key);
    data_command(p, &c, &l).await.status
}

async fn session(h: &Harness, isid: u8) -> Peer {
    h.logged_in_with(&LoginOpts::normal().with_isid(isid))
        .await
        .0
}

/// The status of one command of each class from `p`.
async fn statuses(p: &mut Peer) -> Vec<(&'static str, u8)> {
    let mut out = vec![
        ("READ(10)", p.command(&read10(8, 1), 512).await.status),
        ("WRITE(10)", p.write_immediate(8, &[0x11; 512]).await.status),
        (
            "MODE SENSE(6)",
            p.command(&[0x1A, 0, 0x3F, 0, 255, 0], 255).await.status,
        ),
        (
            "SYNCHRONIZE CACHE(10)",
            p.command(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0)
                .await
                .status,
        ),
        (
            "VERIFY(10)",
            p.command(&[0x2F, 0, 0, 0, 0, 8, 0, 0, 1, 0], 0)
                .await
                .status,
        ),
        ("TEST UNIT READY", p.command(&tur(), 0).await.status),
        (
            "INQUIRY",
            p.command(&[0x12, 0, 0, 0, 96, 0], 96).await.status,
        ),
        (
            "REPORT LUNS",
            p.command(&[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], 256)
                .await
                .status,
        ),
        (
            "READ CAPACITY(10)",
            p.command(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8)
                .await
                .status,
        ),
        (
            "PERSISTENT RESERVE IN",
            p.command(&[0x5E, 0, 0, 0, 0, 0, 0, 1, 0, 0], 256)
                .await
                .status,
        ),
    ];
    let rtpg = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
    out.push((
        "REPORT TARGET PORT GROUPS",
        p.command(&rtpg, 256).await.status,
    ));
    out
}

fn expect(got: &[(&str, u8)], conflicts: &[&str]) {
    for (name, status) in got {
        let want_conflict = conflicts.contains(name);
        assert_eq!(
            *status == RESERVATION_CONFLICT,
            want_conflict,
            "{name}: status {status:#04x}, conflict expected: {want_conflict}"
        );
        if !want_conflict {
            assert_eq!(*status, 0, "{name}");
        }
    }
}

#[tokio::test]
async fn another_initiators_commands_conflict_by_class_and_type() {
    let h = Harness::new(config());
    let mut a = session(&h, 1).await;
    let mut b = session(&h, 2).await;
    let mut c = session(&h, 3).await;
    assert_eq!(pr_out(&mut a, REGISTER_IGNORE, 0, 0, 0xA).await, 0);
    assert_eq!(pr_out(&mut b, REGISTER_IGNORE, 0, 0, 0xB).await, 0);
    // Exclusive Access: the registered B may only ask about the LU.
    assert_eq!(pr_out(&mut a, RESERVE, EA, 0xA, 0).await, 0);
    let reads_and_writes = [
        "READ(10)",
        "WRITE(10)",
        "MODE SENSE(6)",
        "SYNCHRONIZE CACHE(10)",
        "VERIFY(10)",
    ];
    expect(&statuses(&mut b).await, &reads_and_writes);
    expect(&statuses(&mut a).await, &[]);
    // Write Exclusive: reads are allowed to everyone.
    assert_eq!(pr_out(&mut a, RELEASE, EA, 0xA, 0).await, 0);
    assert_eq!(pr_out(&mut a, RESERVE, WE, 0xA, 0).await, 0);
    let writes = ["WRITE(10)", "SYNCHRONIZE CACHE(10)"];
    expect(&statuses(&mut b).await, &writes);
    expect(&statuses(&mut c).await, &writes);
    // Exclusive Access - Registrants Only: B is in, the unregistered C is out.
    assert_eq!(pr_out(&mut a, RELEASE, WE, 0xA, 0).await, 0);
    assert_eq!(pr_out(&mut a, RESERVE, EA_RO, 0xA, 0).await, 0);
    expect(&statuses(&mut b).await, &[]);
    expect(&statuses(&mut c).await, &reads_and_writes);
    // RESERVE(6) from C conflicts while anyone is registered.
    assert_eq!(
        c.command(&[0x16, 0, 0, 0, 0, 0], 0).await.status,
        RESERVATION_CONFLICT
    );
}

#[tokio::test]
async fn preempt_and_abort_ends_the_preempted_sessions_tasks_first() {
    let h = Harness::new(config());
    let mut a = session(&h, 1).await;
    let mut b = session(&h, 2).await;
    assert_eq!(pr_out(&mut a, REGISTER_IGNORE, 0, 0, 0xA).await, 0);
    assert_eq!(pr_out(&mut b, REGISTER_IGNORE, 0, 0, 0xB).await, 0);
    assert_eq!(pr_out(&mut b, RESERVE, WE, 0xB, 0).await, 0);
    // B starts a 2-block write with one block of immediate data: it waits for the rest.
    let mut w = b.scsi_command(&write10(40, 2), false, true, 1024);
    w.data = Bytes::from(vec![0xBB; 512]);
    b.send(&Pdu::ScsiCommand(w)).await;
    let r2t = b.expect_r2t().await;
    // A preempts B and aborts its tasks.
    assert_eq!(pr_out(&mut a, PREEMPT_AND_ABORT, EA, 0xA, 0xB).await, 0);
    // The rest of B's write arrives too late: the task is gone, nothing answers it.
    let rest = b.data_out(&r2t, 0, 512, &[0xBB; 512], true);
    b.send(&rest).await;
    b.expect_silence().await;
    // B learns of it from REGISTRATIONS PREEMPTED, then is shut out.
    let t = b.command(&tur(), 0).await;
    assert_eq!(t.sense_code(), Some((6, 0x2A, 0x05)), "{t:?}");
    assert_eq!(
        b.write_immediate(40, &[0xBB; 512]).await.status,
        RESERVATION_CONFLICT
    );
    // Nothing of the aborted write reached the medium.
    assert_eq!(a.read(40, 2).await, vec![0; 1024]);
    b.assert_alive().await;
}

fn two_groups(second: AccessState) -> sluice_target::config::TargetConfig {
    let mut c = config();
    let (one, two) = (
        "127.0.0.1:3260".parse().unwrap(),
        "127.0.0.2:3260".parse().unwrap(),
    );
    c.portals = vec![one, two];
    c.portal_groups = vec![
        PortalGroup {
            tag: 1,
            portals: vec![one],
            alua_group: 1,
            alua_state: AccessState::ActiveOptimized,
        },
        PortalGroup {
            tag: 2,
            portals: vec![two],
            alua_group: 2,
            alua_state: second,
        },
    ];
    c
}

/// (association + type, designator) of every VPD 83h designator.
async fn designators(p: &mut Peer) -> Vec<(u8, Vec<u8>)> {
    let d = p.command(&[0x12, 1, 0x83, 1, 0, 0], 256).await;
    assert_eq!(d.status, 0);
    let mut out = Vec::new();
    let mut at = 4;
    while at + 4 <= d.data.len() {
        let len = usize::from(d.data[at + 3]);
        out.push((d.data[at + 1] & 0x3F, d.data[at + 4..at + 4 + len].to_vec()));
        at += 4 + len;
    }
    out
}

#[tokio::test]
async fn two_portal_groups_are_two_paths_to_one_lu() {
    let h = Harness::new(two_groups(AccessState::Standby));
    let opts = LoginOpts::normal().with_isid(1);
    let (mut p1, _t1) = h.connect_to("127.0.0.1:3260".parse().unwrap());
    let o1 = p1.login(&opts).await.expect("login through group 1");
    p1.clear_unit_attention().await;
    // The same initiator port through the other group: a second I_T nexus, not a
    // reinstatement of the first.
    let (mut p2, _t2) = h.connect_to("127.0.0.2:3260".parse().unwrap());
    let o2 = p2.login(&opts).await.expect("login through group 2");
    assert_eq!(o1.portal_group_tag, Some(1));
    assert_eq!(o2.portal_group_tag, Some(2));
    assert_eq!(h.target.session_count(), 2);
    p1.assert_alive().await;
    // Same LU designators, different target port designators.
    let _ = p2.command(&tur(), 0).await; // POWER ON
    let (d1, d2) = (designators(&mut p1).await, designators(&mut p2).await);
    let lu = |d: &[(u8, Vec<u8>)]| {
        d.iter()
            .filter(|(t, _)| t >> 4 == 0)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(lu(&d1), lu(&d2));
    let relative = |d: &[(u8, Vec<u8>)]| d.iter().find(|(t, _)| *t == 0x14).unwrap().1.clone();
    assert_eq!(
        (relative(&d1), relative(&d2)),
        (vec![0, 0, 0, 1], vec![0, 0, 0, 2])
    );
    // Group 2 is standby: TEST UNIT READY says so; group 1 serves.
    let t = p2.command(&tur(), 0).await;
    assert_eq!(t.sense_code(), Some((2, 0x04, 0x0B)), "{t:?}");
    assert_eq!(p1.command(&tur(), 0).await.status, 0);
    // SET TARGET PORT GROUPS through the standby path makes it active.
    let stpg = [0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0];
    let c = data_command(&mut p2, &stpg, &[0, 0, 0, 0, 0x00, 0, 0, 2]).await;
    assert_eq!(c.status, 0, "{c:?}");
    assert_eq!(p2.command(&tur(), 0).await.status, 0);
    // The other path learns of the change.
    let t = p1.command(&tur(), 0).await;
    assert_eq!(t.sense_code(), Some((6, 0x2A, 0x06)), "{t:?}");
    // Data written through one path reads back through the other.
    assert_eq!(p2.write_immediate(9, &pattern(512, 5)).await.status, 0);
    assert_eq!(p1.read(9, 1).await, pattern(512, 5));
}

#[tokio::test]
async fn a_connection_cannot_join_a_session_through_another_portal_group() {
    let h = Harness::new(two_groups(AccessState::ActiveOptimized));
    let opts = LoginOpts::normal().with_isid(1).with_max_connections(2);
    let (mut p1, _t1) = h.connect_to("127.0.0.1:3260".parse().unwrap());
    let o = p1.login(&opts).await.expect("login");
    let (mut p2, _t2) = h.connect_to("127.0.0.2:3260".parse().unwrap());
    let refused = p2
        .login(&opts.clone().joining(o.tsih, 1))
        .await
        .expect_err("joining through group 2");
    assert_eq!(
        (refused.status.class, refused.status.detail),
        (2, 0x0A),
        "session does not exist"
    );
}
