//! ALUA: INQUIRY and VPD 83h per target port, REPORT and SET TARGET PORT GROUPS, and the
//! per-command checks of standby and unavailable groups, over every implemented command.

use std::sync::Arc;

use crate::field::be32;
use crate::opcodes::COMMANDS;
use crate::ports::NexusIdentity;
use crate::pr::tests::{initiator, nexus};
use crate::testutil::*;
use crate::{AccessState, LogicalUnit, ScsiTarget};

/// A LU that offers every command of the table, reached through two target port groups in
/// `states`.
fn harness(states: [AccessState; 2]) -> Harness {
    let dev = Arc::new(every_command_device(512, 64));
    let mut cfg = config(dev.clone(), false);
    every_command_options(&mut cfg);
    let lu = Arc::new(LogicalUnit::new(cfg));
    let target = Arc::new(ScsiTarget::with_ports(vec![(0, lu)], two_ports(states)));
    let h = Harness {
        target,
        dev,
        nexus: 1,
        lun: 0,
    };
    let _ = h.run(&[0; 6], &[]);
    h
}

fn rtpg(h: &Harness, format: u8, alloc: u32) -> Vec<u8> {
    let mut c = [0u8; 12];
    c[0] = 0xA3;
    c[1] = (format << 5) | 0x0A;
    c[6..10].copy_from_slice(&alloc.to_be_bytes());
    h.ok(&c, &[])
}

/// (state, status code, group, relative ports) of every descriptor.
fn groups(d: &[u8], header: usize) -> Vec<(u8, u8, u16, Vec<u16>)> {
    let mut out = Vec::new();
    let mut at = header;
    while at + 8 <= d.len() {
        let n = usize::from(d[at + 7]);
        let ports = (0..n)
            .map(|i| u16::from_be_bytes([d[at + 8 + 4 * i + 2], d[at + 8 + 4 * i + 3]]))
            .collect();
        out.push((
            d[at] & 0x0F,
            d[at + 5],
            u16::from_be_bytes([d[at + 2], d[at + 3]]),
            ports,
        ));
        assert_eq!(d[at + 1], 0x0F, "AO, AN, S and U supported");
        at += 8 + 4 * n;
    }
    out
}

fn stpg(h: &Harness, descriptors: &[(u8, u16)]) -> crate::CommandResult {
    let mut list = vec![0u8; 4];
    for &(state, group) in descriptors {
        list.extend_from_slice(&[state, 0]);
        list.extend_from_slice(&group.to_be_bytes());
    }
    let mut c = [0u8; 12];
    c[0] = 0xA4;
    c[1] = 0x0A;
    c[6..10].copy_from_slice(&(list.len() as u32).to_be_bytes());
    h.run(&c, &list).0
}

#[test]
fn inquiry_reports_implicit_and_explicit_alua() {
    let h = Harness::new(512, 64);
    let d = h.ok(&[0x12, 0, 0, 0, 74, 0], &[]);
    assert_eq!(d[5] & 0x30, 0x30);
}

#[test]
fn identification_is_the_same_lu_through_both_ports() {
    let h = Harness::new(512, 64);
    let p1 = nexus(&h, 10, 1);
    let p2 = nexus(&h, 11, 2);
    let designators = |x: &Harness| {
        let d = x.ok(&[0x12, 1, 0x83, 4, 0, 0], &[]);
        let mut v = Vec::new();
        let mut at = 4;
        while at + 4 <= d.len() {
            let len = usize::from(d[at + 3]);
            v.push((d[at + 1] & 0x30, d[at..at + 4 + len].to_vec()));
            at += 4 + len;
        }
        v
    };
    let (a, b) = (designators(&p1), designators(&p2));
    let lu = |v: &[(u8, Vec<u8>)]| {
        v.iter()
            .filter(|(assoc, _)| *assoc == 0)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(lu(&a), lu(&b), "logical unit designators are identical");
    assert!(!lu(&a).is_empty());
    let port = |v: &[(u8, Vec<u8>)], ty: u8| {
        v.iter()
            .find(|(assoc, d)| *assoc == 0x10 && d[1] & 0x0F == ty)
            .map(|(_, d)| d[4..].to_vec())
            .unwrap()
    };
    assert_eq!(port(&a, 4), vec![0, 0, 0, 1], "relative target port 1");
    assert_eq!(port(&b, 4), vec![0, 0, 0, 2]);
    assert_eq!(port(&a, 5), vec![0, 0, 0, 1], "target port group 1");
    assert_eq!(port(&b, 5), vec![0, 0, 0, 2]);
    assert!(String::from_utf8_lossy(&port(&b, 8)).starts_with(&format!("{TARGET_NAME},t,0x0002")));
}

#[test]
fn report_target_port_groups_both_formats() {
    let h = harness([AccessState::ActiveOptimized, AccessState::Standby]);
    let d = rtpg(&h, 0, 1024);
    assert_eq!(be32(&d, 0) as usize, d.len() - 4);
    assert_eq!(groups(&d, 4), vec![(0, 0, 1, vec![1]), (2, 0, 2, vec![2])]);
    let d = rtpg(&h, 1, 1024);
    assert_eq!(d[4], 0x10, "extended header, FORMAT TYPE 001b");
    assert_eq!(be32(&d, 0) as usize, d.len() - 4);
    assert_eq!(groups(&d, 8).len(), 2);
    // Truncation keeps the full length.
    let short = rtpg(&h, 0, 6);
    assert_eq!(short.len(), 6);
    assert_eq!(be32(&short, 0) as usize, d.len() - 8);
    // Formats other than 000b and 001b.
    let mut c = [0u8; 12];
    c[0] = 0xA3;
    c[1] = 0x40 | 0x0A;
    c[9] = 255;
    assert_ifc(&h.check(&c, &[]), true, 1, Some(6));
}

#[test]
fn set_target_port_groups_changes_states_and_tells_the_others() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    let b = nexus(&h, 11, 2);
    assert_eq!(stpg(&a, &[(0x02, 2), (0x01, 1)]).status, 0);
    let d = rtpg(&a, 0, 1024);
    assert_eq!(
        groups(&d, 4),
        vec![(1, 1, 1, vec![1]), (2, 1, 2, vec![2])],
        "states and STATUS CODE 01h (altered by SET TARGET PORT GROUPS)"
    );
    // The sender gets no unit attention; the other nexus gets ASYMMETRIC ACCESS STATE
    // CHANGED, then NOT READY through its standby port.
    a.ok(&[0; 6], &[]);
    let s = b.check(&[0; 6], &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (6, 0x2A, 0x06));
    let s = b.check(&[0; 6], &[]);
    assert_eq!((s.key.0, s.asc, s.ascq), (2, 0x04, 0x0B));
    // The standby port may make itself active again.
    assert_eq!(stpg(&b, &[(0x00, 2)]).status, 0);
    b.ok(&[0; 6], &[]);
    assert!(!h.lu().alua().restricted());
    // Setting a state that is already in force changes nothing and tells nobody.
    let _ = a.run(&[0; 6], &[]);
    assert_eq!(stpg(&b, &[(0x00, 2)]).status, 0);
    a.ok(&[0; 6], &[]);
}

#[test]
fn set_target_port_groups_refuses_bad_lists_whole() {
    let h = Harness::new(512, 64);
    let a = nexus(&h, 10, 1);
    // Unknown group, a group twice, unsupported states (transitioning, offline, reserved).
    for list in [
        vec![(0x02u8, 9u16)],
        vec![(0x02, 2), (0x00, 2)],
        vec![(0x0F, 2)],
        vec![(0x0E, 2)],
        vec![(0x05, 2)],
        vec![(0x12, 2)],
    ] {
        let r = stpg(&a, &list);
        assert_eq!(r.status, 2, "{list:?}");
        assert_eq!(r.sense.unwrap().asc, 0x26, "{list:?}");
    }
    assert!(!h.lu().alua().restricted(), "nothing changed");
    // Lengths that are not the header plus whole descriptors.
    let mut c = [0u8; 12];
    c[0] = 0xA4;
    c[1] = 0x0A;
    c[9] = 6;
    assert_eq!(a.check(&c, &[0; 6]).asc, 0x1A);
    c[9] = 8;
    assert_eq!(a.check(&c, &[0; 4]).asc, 0x1A, "less data than announced");
    c[9] = 0;
    a.ok(&c, &[]);
}

/// The commands SPC-4 lets through a standby target port (5.15.2.4.4) and an unavailable one
/// (5.15.2.4.5), among those this crate implements, written out from the standard.
fn allowed_in(state: AccessState, cdb: &[u8]) -> bool {
    let standby = matches!(
        (cdb[0], cdb[1] & 0x1F),
        (
            0x12 | 0x15 | 0x55 | 0x1A | 0x5A | 0xA0 | 0x03 | 0x5E | 0x5F,
            _
        ) | (0xA3, 0x0A)
            | (0xA4, 0x0A)
    );
    let unavailable = matches!(
        (cdb[0], cdb[1] & 0x1F),
        (0x12 | 0xA0 | 0x03, _) | (0xA3, 0x0A) | (0xA4, 0x0A)
    );
    match state {
        AccessState::Standby => standby,
        AccessState::Unavailable => unavailable,
        _ => true,
    }
}

#[test]
fn every_command_through_each_state() {
    for (state, ascq) in [
        (AccessState::ActiveOptimized, 0),
        (AccessState::ActiveNonOptimized, 0),
        (AccessState::Standby, 0x0B),
        (AccessState::Unavailable, 0x0C),
    ] {
        for c in COMMANDS {
            let mut cdb = vec![0u8; c.usage.len()];
            cdb[0] = c.opcode;
            cdb[1] = c.service_action.unwrap_or(0);
            let h = harness([AccessState::ActiveOptimized, state]);
            let through_1 = nexus(&h, 10, 1);
            let through_2 = nexus(&h, 11, 2);
            let refused = |x: &Harness| {
                x.run(&cdb, &[0u8; 64])
                    .0
                    .sense
                    .is_some_and(|s| (s.key.0, s.asc, s.ascq) == (2, 0x04, ascq))
            };
            let what = format!("{:02x?} through a {state:?} port", &cdb[..2]);
            assert!(!refused(&through_1), "active port: {what}");
            assert_eq!(refused(&through_2), !allowed_in(state, &cdb), "{what}");
        }
    }
}

#[test]
fn an_undescribed_nexus_uses_the_first_port() {
    let h = harness([AccessState::Standby, AccessState::ActiveOptimized]);
    let anonymous = h.nexus(99);
    let _ = anonymous.run(&[0; 6], &[]);
    let s = anonymous.check(&[0; 6], &[]);
    assert_eq!((s.asc, s.ascq), (0x04, 0x0B));
    h.target.nexus_established(
        99,
        NexusIdentity {
            initiator: initiator(99),
            target_port: 2,
        },
    );
    anonymous.ok(&[0; 6], &[]);
}

#[test]
fn parser_bounds() {
    use crate::alua::{parse_set_target_port_groups, MAX_STPG_LIST_BYTES};
    assert!(parse_set_target_port_groups(&[]).is_err());
    assert!(parse_set_target_port_groups(&[0; 4]).unwrap().is_empty());
    assert!(parse_set_target_port_groups(&[0; 7]).is_err());
    assert!(parse_set_target_port_groups(&vec![0; MAX_STPG_LIST_BYTES + 4]).is_err());
    let d = parse_set_target_port_groups(&[0, 0, 0, 0, 3, 0, 0x12, 0x34]).unwrap();
    assert_eq!(d[0].state, AccessState::Unavailable);
    assert_eq!(d[0].group, 0x1234);
}
